//! The boot's one error model: everything that can end a boot early, with a
//! message that says what to do and the summary `status` it maps to. The
//! binary turns a [`BootError`] into the summary in exactly one place
//! (`hw::boot`); panics and CPU exceptions are the only other ways out.

use alloc::string::String;
use core::fmt;

use crate::acpi::AcpiError;
use crate::pipeline::error::PipelineError;
use crate::pvh_start_info::PvhError;
use crate::smp_error::SmpError;

/// Why the boot ended early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootError {
    /// The bootloader did not map physical memory.
    NoPhysMap,
    /// No usable region of at least the minimum heap size.
    NoMemory {
        largest_bytes: u64,
        needed_bytes: u64,
    },
    /// The fw_cfg command line could not be read.
    CmdlineUnreadable(String),
    /// The kernel command line was refused (the message names the option).
    BadOption(String),
    /// The bootloader found no RSDP.
    NoAcpi,
    /// The PVH entry could not set the machine up.
    Pvh(PvhError),
    BadAcpi(AcpiError),
    Smp(SmpError),
    Pipeline(PipelineError),
}

impl BootError {
    /// The summary's `status` for this failure.
    pub const fn status(&self) -> &'static str {
        match self {
            BootError::NoPhysMap => "no_phys_map",
            BootError::NoMemory { .. } => "no_memory",
            BootError::CmdlineUnreadable(_) | BootError::BadOption(_) => "bad_option",
            BootError::NoAcpi => "no_acpi",
            BootError::Pvh(_) => "pvh",
            BootError::BadAcpi(_) => "bad_acpi",
            BootError::Smp(_) => "smp",
            BootError::Pipeline(e) => e.status(),
        }
    }
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootError::Pvh(e) => write!(f, "{e}"),
            BootError::NoPhysMap => write!(
                f,
                "bootloader did not map physical memory (BOOTLOADER_CONFIG asks for it); rebuild the image with run-qemu.sh"
            ),
            BootError::NoMemory {
                largest_bytes,
                needed_bytes,
            } => write!(
                f,
                "heap: the largest usable region has {} KiB, the heap needs {} KiB; give the guest more memory",
                largest_bytes >> 10,
                needed_bytes >> 10
            ),
            BootError::CmdlineUnreadable(why) => {
                write!(f, "Kernel command line unreadable: {why}")
            }
            BootError::BadOption(why) => write!(f, "Kernel command line rejected: {why}"),
            BootError::NoAcpi => write!(
                f,
                "ACPI: the bootloader found no RSDP; memboot needs ACPI (QEMU's default machine has it)"
            ),
            BootError::BadAcpi(e) => write!(f, "ACPI: {e}"),
            BootError::Smp(e) => write!(f, "{e}"),
            BootError::Pipeline(e) => write!(f, "memory init failed ({}):\n{e}", e.status()),
        }
    }
}

impl From<SmpError> for BootError {
    fn from(e: SmpError) -> Self {
        BootError::Smp(e)
    }
}

impl From<PipelineError> for BootError {
    fn from(e: PipelineError) -> Self {
        BootError::Pipeline(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::error::VerifyError;

    #[test]
    fn statuses_are_the_documented_names() {
        let verify = BootError::Pipeline(PipelineError::Verify(VerifyError {
            message: "verify: pfn 0x1: …".into(),
        }));
        for (e, status) in [
            (BootError::NoPhysMap, "no_phys_map"),
            (BootError::BadOption("x".into()), "bad_option"),
            (BootError::NoAcpi, "no_acpi"),
            (
                BootError::Pvh(PvhError::MapTooLarge { entries: 200 }),
                "pvh",
            ),
            (BootError::Smp(SmpError::NoTrampolinePages), "smp"),
            (
                BootError::Pipeline(PipelineError::Smp(SmpError::NotLaunched)),
                "smp",
            ),
            (verify, "verify"),
        ] {
            assert_eq!(e.status(), status);
        }
    }

    #[test]
    fn pipeline_failures_print_status_then_the_stage_message() {
        let e = BootError::Pipeline(PipelineError::Verify(VerifyError {
            message: "verify: pfn 0x1: expected free".into(),
        }));
        let text = alloc::format!("{e}");
        let lines: alloc::vec::Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "memory init failed (verify):",
                "verify: pfn 0x1: expected free"
            ]
        );
        let rejected = alloc::format!("{}", BootError::BadOption("unknown option 'x'".into()));
        assert!(
            rejected.starts_with("Kernel command line rejected: "),
            "{rejected}"
        );
    }
}
