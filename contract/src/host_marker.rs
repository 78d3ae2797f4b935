//! The instants the kernel tells the host, one byte each on an I/O port:
//! QEMU's `isa-debugcon` device at [`PORT`] passes every byte written there
//! to a character device, where run-qemu.sh reads it the moment it is
//! written (without the device QEMU ignores the write). The host samples
//! QEMU's threads at each marker, so a window of the boot starts or ends
//! on the guest's own instant rather than on the nearest periodic sample.
//!
//! The byte values are outside printable ASCII and its control characters,
//! so a firmware that printed to the same port could not be mistaken for
//! a marker; the host ignores every other byte.

/// The `isa-debugcon` port the markers are written to (Bochs' and QEMU's
/// usual debug console port; SeaBIOS and OVMF print to 0x402 instead).
pub const PORT: u16 = 0xe9;

/// An instant of the boot the host is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum HostMarker {
    /// The kernel was entered (its first instruction after the TSC stamp
    /// every timestamp counts from), on either entry path.
    Entered = 0xb0,
    /// Every AP that was planned came up and settled (ran its first job or
    /// halted): the `smp: bring-up ended` instant. Not written when an AP
    /// failed to come up.
    BringupEnded = 0xb1,
    /// Memory is ready (`allocatable_ns`), before anything is woken.
    MemoryReady = 0xb2,
}

impl HostMarker {
    /// The byte written for it.
    pub const fn byte(self) -> u8 {
        self as u8
    }

    /// The marker a byte read from the port names, if any.
    pub const fn from_byte(byte: u8) -> Option<HostMarker> {
        match byte {
            0xb0 => Some(HostMarker::Entered),
            0xb1 => Some(HostMarker::BringupEnded),
            0xb2 => Some(HostMarker::MemoryReady),
            _ => None,
        }
    }

    /// Its name in the host's lines.
    pub const fn name(self) -> &'static str {
        match self {
            HostMarker::Entered => "entry",
            HostMarker::BringupEnded => "bring-up ended",
            HostMarker::MemoryReady => "memory ready",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_marker_reads_back_from_its_byte_and_nothing_else_does() {
        let all = [
            HostMarker::Entered,
            HostMarker::BringupEnded,
            HostMarker::MemoryReady,
        ];
        for m in all {
            assert_eq!(HostMarker::from_byte(m.byte()), Some(m));
        }
        let named = (0..=255u8)
            .filter(|&b| HostMarker::from_byte(b).is_some())
            .count();
        assert_eq!(named, all.len());
        assert!((0..0x80u8).all(|b| HostMarker::from_byte(b).is_none()));
    }
}
