//! rust-osdev/bootloader's entry: its configuration and the function it
//! calls, which turns its `BootInfo` into a [`Handoff`] and starts the
//! boot (the PVH entry, `hw::pvh`, does the same for QEMU's `-kernel`).

use bootloader_api::config::{BootloaderConfig, Mapping};
use bootloader_api::info::MemoryRegionKind;
use bootloader_api::BootInfo;
use memboot_contract::host_marker::HostMarker;
use memboot_kernel::boot_error::BootError;

use super::finish::{fail, fail_early};
use super::flow::start;
use super::handoff::{entry_line, keep_handoff, Entry, Handoff};
use crate::hw::{host_marker, interrupts, serial, tsc};

/// Physical memory mapped at a bootloader-chosen offset (needed to read ACPI
/// tables and, later, to build the vmemmap); the PVH entry's boot stack size.
pub static BOOTLOADER_CONFIG: BootloaderConfig = {
    let mut config = BootloaderConfig::new_default();
    config.mappings.physical_memory = Some(Mapping::Dynamic);
    config.kernel_stack_size = memboot_kernel::pvh_start_info::STACK_BYTES;
    config
};

bootloader_api::entry_point!(bootloader_main, config = &BOOTLOADER_CONFIG);

/// From rust-osdev/bootloader, in long mode on its page tables and stack.
fn bootloader_main(boot_info: &'static mut BootInfo) -> ! {
    tsc::mark_entry();
    host_marker::tell(HostMarker::Entered);
    serial::init();
    let uefi = boot_info
        .memory_regions
        .iter()
        .any(|r| matches!(r.kind, MemoryRegionKind::UnknownUefi(_)));
    let entry = if uefi { Entry::Uefi } else { Entry::Bios };
    entry_line(entry);
    interrupts::init(fail);
    let Some(phys_offset) = boot_info.physical_memory_offset.into_option() else {
        fail_early(&BootError::NoPhysMap, BootError::NoPhysMap.status())
    };
    boot_info.memory_regions.sort_unstable_by_key(|r| r.start);
    // Read-only from here on, for the rest of the boot (the held-back
    // report prints the map late).
    let boot_info: &'static BootInfo = boot_info;
    start(keep_handoff(Handoff {
        entry,
        phys_offset,
        regions: &boot_info.memory_regions,
        rsdp: boot_info.rsdp_addr.into_option(),
    }))
}
