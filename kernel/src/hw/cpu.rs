//! What the kernel reads from CPUID, in one place, through `raw-cpuid`.
//!
//! CPUID exists on every x86_64 CPU, is unprivileged and has no side
//! effects, so every function here is safe and may run anywhere, including
//! the exception path (no locks, no allocation, no APIC access). Each call
//! builds a fresh `CpuId` (two CPUID instructions for the leaf ranges); none
//! of them is on a hot path.

use raw_cpuid::{CpuId, CpuIdReaderNative};

fn cpuid() -> CpuId<CpuIdReaderNative> {
    CpuId::new()
}

/// Does this CPU support x2APIC mode (CPUID.1:ECX bit 21)?
pub fn has_x2apic() -> bool {
    cpuid().get_feature_info().is_some_and(|f| f.has_x2apic())
}

/// This CPU's initial APIC id: the 32-bit x2APIC id of leaf 0xB when the
/// leaf is implemented (its subleaf 0 has a valid level type), else the
/// 8-bit id in CPUID.1:EBX[31:24]. Needs no APIC setup, for the exception
/// path.
pub fn initial_apic_id() -> u32 {
    let cpuid = cpuid();
    // Subleaf 0 of leaf 0xB is always the SMT level (type 1) when the leaf
    // exists, so raw-cpuid's level-type decoding cannot meet an unknown type.
    if let Some(level0) = cpuid
        .get_extended_topology_info()
        .and_then(|mut t| t.next())
    {
        return level0.x2apic_id();
    }
    cpuid
        .get_feature_info()
        .map_or(0, |f| f.initial_local_apic_id() as u32)
}

/// How long to wait after INIT before the first STARTUP IPI, in µs: Linux's
/// `smp_quirk_init_udelay()` (arch/x86/kernel/smpboot.c): none on modern
/// CPUs (Intel family 6, AMD from family 0xF, Hygon from 0x18), the MP
/// spec's 10 ms on older ones. Under a hypervisor the INIT is virtual and
/// completes at once, so memboot waits nothing there either.
pub fn init_udelay_us() -> u64 {
    let id = cpuid();
    let vendor = id.get_vendor_info();
    let family = id.get_feature_info().map_or(0, |f| f.family_id());
    let modern = match vendor.as_ref().map(|v| v.as_str()) {
        Some("GenuineIntel") => family == 6,
        Some("AuthenticAMD") => family >= 0xf,
        Some("HygonGenuine") => family >= 0x18,
        _ => false,
    };
    if modern || under_hypervisor() {
        0
    } else {
        10_000
    }
}

/// Does the CPU have 1 GiB pages (CPUID 0x80000001 EDX bit 26, `pdpe1gb`)?
/// The PVH entry maps memory with them, and `hugepagesz=1G` needs them.
pub fn has_1gib_pages() -> bool {
    cpuid()
        .get_extended_processor_and_feature_identifiers()
        .is_some_and(|f| f.has_1gib_pages())
}

/// Is the kernel running under a hypervisor (CPUID.1:ECX bit 31)? Linux
/// sizes memory blocks by it.
pub fn under_hypervisor() -> bool {
    cpuid()
        .get_feature_info()
        .is_some_and(|f| f.has_hypervisor())
}

/// CPU physical address width, CPUID 0x80000008 EAX[7:0] (36 if absent, the
/// width Linux assumes without the leaf).
pub fn phys_addr_bits() -> u32 {
    cpuid()
        .get_processor_capacity_feature_info()
        .map_or(36, |c| c.physical_address_bits() as u32)
}

/// The TSC frequency CPUID announces (leaves 0x15, 0x16, 0x40000010), see
/// `memboot_kernel::tsc_cpuid`.
pub fn tsc_khz_from_cpuid() -> Option<(u64, memboot_kernel::tsc_cpuid::TscSource)> {
    memboot_kernel::tsc_cpuid::khz_from_cpuid(CpuIdReaderNative)
}
