//! The boot's one error model: everything that can end a boot early, with a
//! message that says what to do and the summary `status` it maps to. The
//! binary turns a [`BootError`] into the summary in exactly one place
//! (`hw::boot`); panics and CPU exceptions are the only other ways out.

use alloc::string::String;
use core::fmt;

use crate::acpi::AcpiError;
use crate::pipeline::error::PipelineError;
use crate::pvh::PvhError;

/// Why AP bring-up failed as a whole. An AP that never answers is not an
/// error: it is reported and left out, and the boot goes on with fewer CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// The boot CPU's local APIC could not be set up.
    Apic(&'static str),
    /// No two free pages below 1 MiB for the real-mode trampoline.
    NoTrampolinePages,
    /// The trampoline could not be installed.
    Trampoline(&'static str),
    /// An AP took its stack from the trampoline but never reached Rust: it
    /// may still be running on that stack, so the boot cannot go on safely.
    StackTakenNeverArrived { cpu: usize, apic_id: u32 },
    /// An AP arrived but did not finish its GDT/TSS/IDT setup.
    SetupHung { cpu: usize, apic_id: u32 },
    /// The AP that came up reads a different APIC id from its own APIC.
    WrongApicId {
        cpu: usize,
        started: u32,
        reads: u32,
    },
    /// The trampoline's identity mapping could not be removed.
    TrampolineUnmap,
    /// A CPU did not run its self-test job exactly once on its own APIC.
    SelfTest { cpu: usize, runs: u32, apic_id: u32 },
    /// The boot CPU's APIC reads a different id from CPUID's initial APIC
    /// id, with which the CPUs were planned.
    BspApicId { cpuid: u32, reads: u32 },
    /// Bring-up was asked to start the APs before they were planned.
    NotPrepared,
    /// Jobs were to run on the APs before anything started them.
    NotLaunched,
}

impl fmt::Display for SmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SmpError::Apic(why) => write!(f, "APIC: {why}; boot with --smp 1 to run without APs"),
            SmpError::NoTrampolinePages => write!(
                f,
                "smpboot: no two free pages below 1 MiB for the AP trampoline; the firmware map leaves no low memory, boot with --smp 1"
            ),
            SmpError::Trampoline(why) => write!(f, "smpboot: {why}"),
            SmpError::StackTakenNeverArrived { cpu, apic_id } => write!(
                f,
                "smpboot: CPU {cpu} (APIC {apic_id:#x}) took its stack but never arrived; the host is too loaded or the vCPU is broken, retry or boot with fewer CPUs"
            ),
            SmpError::SetupHung { cpu, apic_id } => write!(
                f,
                "smpboot: CPU {cpu} (APIC {apic_id:#x}) hung in its setup; retry or boot with fewer CPUs"
            ),
            SmpError::WrongApicId { cpu, started, reads } => write!(
                f,
                "smpboot: CPU {cpu}: started APIC {started:#x} but it reads APIC id {reads:#x}; the MADT does not match the CPUs"
            ),
            SmpError::TrampolineUnmap => write!(f, "smpboot: cannot unmap the trampoline page"),
            SmpError::SelfTest { cpu, runs, apic_id } => write!(
                f,
                "smp: self-test: CPU {cpu} ran its job {runs} times, reading APIC id {apic_id:#x}; job dispatch is broken"
            ),
            SmpError::BspApicId { cpuid, reads } => write!(
                f,
                "APIC: the boot CPU's APIC reads id {reads:#x}, CPUID says {cpuid:#x}, and the CPUs were planned with CPUID's; boot with --smp 1"
            ),
            SmpError::NotPrepared => write!(
                f,
                "smpboot: asked to start the APs before they were planned (prepare_aps); a boot-order bug"
            ),
            SmpError::NotLaunched => write!(
                f,
                "smp: jobs were to run on the APs before memory init started them (CpuBringup::start); a boot-order bug in the pipeline's mode plan"
            ),
        }
    }
}

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
