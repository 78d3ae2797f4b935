//! Why AP bring-up failed: the error the hardware's `CpuBringup` returns
//! to the pipeline and the SMP code returns to the boot.

use core::fmt;

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
