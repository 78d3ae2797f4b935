//! What the boot needs from whichever entry path started the kernel
//! ([`Handoff`]), kept for the rest of the boot, and the boot's first line.

use bootloader_api::info::MemoryRegion;
use memboot_kernel::report::Timestamp;

use crate::hw::serial;

/// Which way the kernel was entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// QEMU's `-kernel` through the PVH note (`hw::pvh`).
    Pvh,
    /// rust-osdev/bootloader from the BIOS disk image.
    Bios,
    /// rust-osdev/bootloader from the UEFI disk image.
    Uefi,
}

impl Entry {
    /// The summary's `entry` value.
    pub const fn key(self) -> &'static str {
        match self {
            Entry::Pvh => "pvh",
            Entry::Bios => "bios",
            Entry::Uefi => "uefi",
        }
    }

    pub(super) const fn describe(self) -> &'static str {
        match self {
            Entry::Pvh => "PVH",
            Entry::Bios => "BIOS bootloader",
            Entry::Uefi => "UEFI bootloader",
        }
    }
}

/// What the boot needs from whatever started the kernel, the same for
/// every entry.
#[derive(Clone, Copy)]
pub struct Handoff {
    pub entry: Entry,
    /// All physical memory is mapped at this offset.
    pub phys_offset: u64,
    /// The firmware's map, sorted by start, with what the entry path
    /// occupies (image, page tables, stack, boot info) as `Bootloader`
    /// regions.
    pub regions: &'static [MemoryRegion],
    pub rsdp: Option<u64>,
}

static HANDOFF: spin::Once<Handoff> = spin::Once::new();

/// Keep the handoff for the rest of the boot (the PVH entry keeps it
/// across its switch to the final stack).
pub fn keep_handoff(handoff: Handoff) -> &'static Handoff {
    HANDOFF.call_once(|| handoff)
}

/// The handoff kept by [`keep_handoff`], if the entry path got that far.
pub(super) fn kept() -> Option<&'static Handoff> {
    HANDOFF.get()
}

/// The handoff kept by [`keep_handoff`].
pub fn handoff() -> &'static Handoff {
    HANDOFF
        .get()
        .expect("the entry path keeps its handoff before the boot starts")
}

/// The first line of the boot, written to the serial port at once (every
/// later line waits in the log ring until another CPU writes it out): its
/// first byte is when the kernel started, for the host (run-qemu.sh's
/// entry latency). Stamped 0: it is logged at entry.
pub fn entry_line(entry: Entry) {
    serial::write_now(format_args!(
        "{} memboot {} booting (entry: {})",
        Timestamp(0),
        env!("CARGO_PKG_VERSION"),
        entry.describe()
    ));
}
