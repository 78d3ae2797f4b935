//! The memory-init pipeline's input as the boot found it, and the
//! `memboot-input:` line that prints it.
//!
//! [`BootInput`] is what `pipeline::run` starts from that the machine
//! decided: the firmware map (the bootloader's regions among it), SRAT
//! memory affinity, the node of every CPU, the kernel heap, the physical
//! address width, CPUID's hypervisor bit, the command line and the kernel
//! image's sizes. The kernel builds it once, runs the pipeline on that
//! value ([`BootInput::pipeline_input`]) and prints it as one unstamped
//! JSON line ([`write_input_line`]) with the report the boot CPU holds
//! back while it works alone (`hw::held_report`), before the APs start or
//! when the boot fails before that; the
//! host tests read the line back ([`parse`], feature `host`) and replay the
//! boot from it. The line's keys are a contract like the summary's (README
//! "Output"): added, never renamed or dropped.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind};
use memmap::user_map::{UserMap, UserMapError};
use memmap::NodeId;

use crate::image_sizes::ImageSizes;
use crate::pipeline::input::EarlyReservation;
use crate::pipeline::input::Input;
use memboot_contract::json::JsonObject;
use memboot_contract::options::Options;

#[cfg(feature = "host")]
pub mod parse;

/// What the input line starts with; tools find the line by it.
pub const INPUT_PREFIX: &str = "memboot-input: ";

/// Linux x86 always reserves the first 1 MiB (BIOS data, the AP trampoline).
const LOW_RESERVED_BYTES: u64 = 1 << 20;

/// The pipeline's input, as the boot found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootInput {
    /// The bootloader's memory map, in its order: the firmware's regions,
    /// with the RAM the bootloader occupies as kind `Bootloader`.
    pub map: Vec<FirmwareEntry>,
    /// SRAT memory affinity, in table order; `None` without SRAT (all
    /// memory is node 0).
    pub srat: Option<Vec<NodeAffinity>>,
    /// The node of each online CPU, in the kernel's CPU order (boot CPU
    /// first): the pipeline's CPU `i` is `cpu_nodes[i]`'s.
    pub cpu_nodes: Vec<NodeId>,
    /// The kernel heap: carved out of usable RAM before memblock existed,
    /// so memblock must reserve it.
    pub heap_base: u64,
    pub heap_bytes: u64,
    pub phys_addr_bits: u32,
    /// CPUID's hypervisor bit (Linux sizes memory blocks by it).
    pub under_hypervisor: bool,
    /// The kernel command line, as read from fw_cfg.
    pub cmdline: String,
    /// The loaded kernel image's parts, for Linux's `Memory:` line.
    pub image: ImageSizes,
    /// `map` with the command line's Linux `memmap=` forms applied
    /// ([`user_map`]), when it has any: what memblock gets instead. Not a
    /// key of the line: the command line carries the forms.
    pub user_map: Option<Vec<FirmwareEntry>>,
    /// CPUID's 1 GiB pages (`pdpe1gb`), for `hugepagesz=1G`. Not a key of
    /// the line: a replay takes them as present (the log's `HugeTLB:
    /// unsupported hugepagesz=1G` line says when they were not).
    pub has_1g_pages: bool,
}

impl BootInput {
    /// The ranges memblock must reserve that the firmware map does not
    /// show: the first 1 MiB (Linux x86 reserves it always) and the heap.
    pub fn early_reservations(&self) -> [EarlyReservation; 2] {
        [
            EarlyReservation {
                base: 0,
                size: LOW_RESERVED_BYTES,
                what: "low 1 MiB",
            },
            EarlyReservation {
                base: self.heap_base,
                size: self.heap_bytes,
                what: "kernel heap",
            },
        ]
    }

    /// The pipeline's [`Input`]: this boot's machine with `opts` (the
    /// command line parsed, or changed by a test) and `reserve` (from
    /// [`Self::early_reservations`]).
    pub fn pipeline_input<'a>(
        &'a self,
        opts: &'a Options,
        reserve: &'a [EarlyReservation],
    ) -> Input<'a> {
        Input {
            opts,
            map: self.user_map.as_deref().unwrap_or(&self.map),
            affinity: self.srat.as_deref(),
            phys_addr_bits: self.phys_addr_bits,
            under_hypervisor: self.under_hypervisor,
            has_1g_pages: self.has_1g_pages,
            reserve,
            image: self.image,
        }
    }
}

/// The firmware map `map` with the Linux `memmap=` forms of `opts`
/// applied (`None` when there are none), keeping the kernel heap
/// (`heap_base`, `heap_bytes`) usable RAM.
pub fn user_map(
    map: &[FirmwareEntry],
    opts: &Options,
    heap_base: u64,
    heap_bytes: u64,
) -> Result<Option<UserMap>, UserMapError> {
    if opts.user_map.is_empty() {
        return Ok(None);
    }
    let heap = [(heap_base, heap_bytes, "kernel heap")];
    memmap::user_map::apply(map, &opts.user_map, &heap).map(Some)
}

/// A region kind's name in the input line.
pub const fn kind_name(kind: RegionKind) -> &'static str {
    match kind {
        RegionKind::Usable => "usable",
        RegionKind::Bootloader => "bootloader",
        RegionKind::AcpiReclaimable => "acpi_reclaimable",
        RegionKind::AcpiNvs => "acpi_nvs",
        RegionKind::Reserved => "reserved",
        RegionKind::Unusable => "unusable",
    }
}

/// The kind a name of [`kind_name`] stands for.
pub fn kind_of_name(name: &str) -> Option<RegionKind> {
    RegionKind::ALL.into_iter().find(|&k| kind_name(k) == name)
}

/// The input line's JSON object (README "Output" lists its keys).
pub fn write_input<W: Write>(out: &mut W, input: &BootInput) -> fmt::Result {
    let mut o = JsonObject::begin(out)?;
    o.objects("firmware_map", &input.map, |e, region| {
        e.u64("start", region.start)?;
        e.u64("length", region.len_bytes)?;
        e.str("kind", kind_name(region.kind))
    })?;
    match &input.srat {
        Some(srat) => o.objects("srat", srat, |e, a| {
            e.u64("start", a.start)?;
            e.u64("length", a.len_bytes)?;
            e.u64("node", a.nid.into())
        })?,
        None => o.null("srat")?,
    }
    o.u64_array("cpu_nodes", input.cpu_nodes.iter().map(|&n| n.into()))?;
    o.object("heap", |h| {
        h.u64("base", input.heap_base)?;
        h.u64("size", input.heap_bytes)
    })?;
    o.u64("phys_addr_bits", input.phys_addr_bits.into())?;
    o.bool("under_hypervisor", input.under_hypervisor)?;
    o.str("cmdline", &input.cmdline)?;
    o.object("image", |i| {
        i.u64("code_bytes", input.image.code_bytes)?;
        i.u64("rwdata_bytes", input.image.rwdata_bytes)?;
        i.u64("rodata_bytes", input.image.rodata_bytes)?;
        i.u64("bss_bytes", input.image.bss_bytes)
    })?;
    o.end()
}

/// `memboot-input: {json}`, streamed into `line` without allocation; no
/// newline (the line's end is the writer's business, and JSON escapes
/// every newline of the command line).
pub fn write_input_line<W: Write>(line: &mut W, input: &BootInput) -> fmt::Result {
    line.write_str(INPUT_PREFIX)?;
    write_input(line, input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// A small machine with every kind of region and a memory-only node.
    pub(crate) fn two_node_input() -> BootInput {
        BootInput {
            map: alloc::vec![
                FirmwareEntry::new(0, 0x9fc00, RegionKind::Usable),
                FirmwareEntry::new(0x9fc00, 0x400, RegionKind::Reserved),
                FirmwareEntry::new(0x100000, 0xf00000, RegionKind::Usable),
                FirmwareEntry::new(0x1000000, 0x2b6000, RegionKind::Bootloader),
                FirmwareEntry::new(0x12b6000, 0x3ed4a000, RegionKind::Usable),
                FirmwareEntry::new(0x40000000, 0x1000, RegionKind::AcpiReclaimable),
                FirmwareEntry::new(0x40001000, 0x1000, RegionKind::AcpiNvs),
                FirmwareEntry::new(0x40002000, 0x1000, RegionKind::Unusable),
                FirmwareEntry::new(0x1_0000_0000, 0x4000_0000, RegionKind::Usable),
            ],
            srat: Some(alloc::vec![
                NodeAffinity::new(0, 0xa0000, 0),
                NodeAffinity::new(0x100000, 0x3ff00000, 0),
                NodeAffinity::new(0x1_0000_0000, 0x4000_0000, 1),
            ]),
            cpu_nodes: alloc::vec![0, 0, 1],
            heap_base: 0x1_0000_0000,
            heap_bytes: 18 << 20,
            phys_addr_bits: 44,
            under_hypervisor: true,
            cmdline: "memmap=ondemand alloc_test=0 \"quoted\"\ttab".to_string(),
            image: ImageSizes {
                code_bytes: 274_432,
                rwdata_bytes: 7_168,
                rodata_bytes: 36_864,
                bss_bytes: 102_400,
            },
            user_map: None,
            has_1g_pages: true,
        }
    }

    /// Every key of the line, in order: the contract. Written out here,
    /// independently of `write_input`, so that dropping or renaming a key
    /// fails this test.
    const CONTRACT_KEYS: [&str; 8] = [
        "firmware_map",
        "srat",
        "cpu_nodes",
        "heap",
        "phys_addr_bits",
        "under_hypervisor",
        "cmdline",
        "image",
    ];

    #[test]
    fn the_line_is_one_json_object_with_every_contract_key_in_order() {
        let input = two_node_input();
        let mut line = String::new();
        write_input_line(&mut line, &input).unwrap();
        let json = line.strip_prefix(INPUT_PREFIX).unwrap();
        assert!(!json.contains('\n'), "one line");
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        let mut want = CONTRACT_KEYS.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want);
        let positions: Vec<usize> = CONTRACT_KEYS
            .iter()
            .map(|k| json.find(&alloc::format!("\"{k}\":")).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{json}");
        // Values as written by hand from `two_node_input`.
        assert_eq!(
            v["firmware_map"][3],
            serde_json::json!({"start": 0x1000000, "length": 0x2b6000, "kind": "bootloader"})
        );
        assert_eq!(v["firmware_map"][6]["kind"], "acpi_nvs");
        assert_eq!(
            v["srat"][2],
            serde_json::json!({"start": 0x1_0000_0000u64, "length": 0x4000_0000, "node": 1})
        );
        assert_eq!(v["cpu_nodes"], serde_json::json!([0, 0, 1]));
        assert_eq!(
            v["heap"],
            serde_json::json!({"base": 0x1_0000_0000u64, "size": 18 << 20})
        );
        assert_eq!(v["phys_addr_bits"], 44);
        assert_eq!(v["under_hypervisor"], true);
        assert_eq!(v["cmdline"], "memmap=ondemand alloc_test=0 \"quoted\"\ttab");
        assert_eq!(v["image"]["bss_bytes"], 102_400);
    }

    #[test]
    fn without_srat_the_line_says_null_not_empty() {
        let mut input = two_node_input();
        input.srat = None;
        let mut line = String::new();
        write_input_line(&mut line, &input).unwrap();
        assert!(line.contains("\"srat\":null,"), "{line}");
        input.srat = Some(Vec::new());
        line.clear();
        write_input_line(&mut line, &input).unwrap();
        assert!(line.contains("\"srat\":[],"), "{line}");
    }

    #[test]
    fn kind_names_are_distinct_and_read_back() {
        for kind in RegionKind::ALL {
            assert_eq!(kind_of_name(kind_name(kind)), Some(kind));
        }
        assert_eq!(kind_of_name("ACPI data"), None, "e820 names are not kinds");
    }

    #[test]
    fn the_pipeline_runs_on_the_printed_input() {
        let input = two_node_input();
        let reserve = input.early_reservations();
        assert_eq!(
            (reserve[0].base, reserve[0].size),
            (0, 1 << 20),
            "the first MiB"
        );
        assert_eq!(
            (reserve[1].base, reserve[1].size),
            (0x1_0000_0000, 18 << 20)
        );
        let opts = memboot_contract::options::parse(&input.cmdline[..28]).unwrap();
        let p = input.pipeline_input(&opts, &reserve);
        assert_eq!(p.map, &input.map[..]);
        assert_eq!(p.affinity, input.srat.as_deref());
        assert_eq!(
            (p.phys_addr_bits, p.under_hypervisor, p.image),
            (44, true, input.image)
        );
        assert_eq!(p.reserve.len(), 2);
    }
}
