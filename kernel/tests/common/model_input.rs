//! The model's input ([`model::Map`]) from a boot's typed input (its
//! `memboot-input:` line): plain byte ranges of the firmware map, SRAT and
//! heap, and the `memmap=` mode and memory-block size of its command line.
//! Nothing the pipeline computed. Shared like `model.rs`: the host
//! pipeline tests (a fixture) and the boot tests (`tests/`, a live boot)
//! include this file.

use memboot_contract::options::{self, BlockSizeOption, Options};
use memboot_kernel::boot_input::BootInput;
use memmap::firmware::{FirmwareEntry, RegionKind};

use super::model;

/// The options the kernel ran with: `input`'s command line, parsed as the
/// kernel parsed it.
pub fn logged_options(input: &BootInput) -> Options {
    options::parse(&input.cmdline).unwrap_or_else(|e| {
        panic!(
            "the logged command line `{}` does not parse ({e}), yet the kernel ran its pipeline with it",
            input.cmdline
        )
    })
}

/// [`model::Map`] of `input` run with `opts` (its [`logged_options`], or
/// as a test changed them): RAM is the map's usable and bootloader entries
/// (the bootloader's are also in use), everything else is not.
pub fn model_map(input: &BootInput, opts: &Options) -> model::Map {
    let ranges = |keep: &dyn Fn(RegionKind) -> bool| -> Vec<(u64, u64)> {
        input
            .map
            .iter()
            .filter(|e| keep(e.kind))
            .map(|e: &FirmwareEntry| (e.start, e.start + e.len_bytes))
            .collect()
    };
    model::Map {
        usable: ranges(&|k| k.is_ram()),
        other: ranges(&|k| !k.is_ram()),
        in_use: ranges(&|k| k == RegionKind::Bootloader),
        srat: input.srat.as_ref().map(|srat| {
            srat.iter()
                .map(|a| (a.start, a.start + a.len_bytes, a.nid))
                .collect()
        }),
        heap: (input.heap_base, input.heap_base + input.heap_bytes),
        phys_addr_bits: input.phys_addr_bits,
        mode: model::Mode::from_name(opts.memmap.name()).expect("every memmap= mode is modelled"),
        memory_block_size: match opts.memory_block_size {
            BlockSizeOption::Auto => None,
            BlockSizeOption::Bytes(b) => Some(b),
        },
        struct_page_bytes: opts.struct_page.bytes(),
    }
}
