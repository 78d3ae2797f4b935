//! The TSC frequency as CPUID announces it, before any measurement.
//!
//! Linux (arch/x86/kernel/tsc.c) asks the CPU first and measures only when
//! the CPU does not say: `native_calibrate_tsc` reads leaf 0x15 (the TSC /
//! core-crystal ratio and the crystal frequency), `cpu_khz_from_cpuid` leaf
//! 0x16 (the processor base frequency), and under VMware-style hypervisors
//! the timing leaf 0x40000010 gives the (virtual) TSC rate in kHz. Only when
//! all of them are silent does the PIT calibration run. memboot tries them
//! in that order: [`khz_from_cpuid`] → 0x15, 0x16, 0x40000010, else `None`
//! and the caller measures against PIT channel 2.
//!
//! Generic over raw-cpuid's [`CpuIdReader`], so the host tests feed crafted
//! leaves; the kernel passes `CpuIdReaderNative`.

use core::fmt;

use raw_cpuid::{CpuId, CpuIdReader};

/// Where the TSC frequency of this boot came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TscSource {
    /// Leaf 0x15: crystal × EBX / EAX (the crystal from ECX, or, when ECX
    /// is 0, derived from leaf 0x16's base frequency as Linux does).
    Cpuid15,
    /// Leaf 0x16 EAX: processor base frequency in MHz.
    Cpuid16,
    /// Hypervisor timing leaf 0x40000010 EAX: TSC frequency in kHz.
    Hypervisor,
    /// Measured against PIT channel 2 (no CPUID leaf said it).
    Pit,
    /// Given on the command line (`tsc_khz=`): run-qemu.sh passes the
    /// host's rate under TCG, the value Linux gets as `tsc_early_khz=`.
    Option,
}

impl fmt::Display for TscSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TscSource::Cpuid15 => "CPUID 0x15",
            TscSource::Cpuid16 => "CPUID 0x16",
            TscSource::Hypervisor => "hypervisor CPUID 0x40000010",
            TscSource::Pit => "PIT channel 2 calibration",
            TscSource::Option => "tsc_khz option",
        })
    }
}

/// A frequency in kHz printed as MHz with three decimals, the way Linux's
/// `pr_info("Detected %lu.%03lu MHz processor\n", khz / KHZ, khz % KHZ)`
/// does: 2595962 → `2595.962`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KhzAsMhz(pub u64);

impl fmt::Display for KhzAsMhz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Leaves 0x15 and 0x16 are Intel's; Linux reads them on Intel CPUs only
/// (`boot_cpu_data.x86_vendor != X86_VENDOR_INTEL` → 0).
fn is_intel<R: CpuIdReader>(cpuid: &CpuId<R>) -> bool {
    cpuid
        .get_vendor_info()
        .is_some_and(|v| v.as_str() == "GenuineIntel")
}

/// Leaf 0x16 EAX[15:0], the processor base frequency in MHz (0 when the
/// leaf is absent or not enumerated).
fn base_mhz<R: CpuIdReader>(cpuid: &CpuId<R>) -> u64 {
    cpuid
        .get_processor_frequency_info()
        .map_or(0, |f| f.processor_base_frequency() as u64)
}

/// Linux's `native_calibrate_tsc`, in its integer arithmetic: the crystal
/// is ECX / 1000 kHz; when ECX is 0 (Skylake, Kaby Lake) it is derived as
/// base MHz × 1000 × EAX / EBX from leaf 0x16; the TSC is crystal × EBX /
/// EAX. Zero numerator or denominator: the ratio is not enumerated.
/// (Linux also hard-codes Denverton's 25 MHz crystal by model; memboot
/// does not, so such a CPU falls through to the next source.)
fn khz_from_leaf_15<R: CpuIdReader>(cpuid: &CpuId<R>) -> Option<u64> {
    let leaf = cpuid.get_tsc_info()?;
    let denominator = leaf.denominator() as u64;
    let numerator = leaf.numerator() as u64;
    if numerator == 0 || denominator == 0 {
        return None;
    }
    let mut crystal_khz = leaf.nominal_frequency() as u64 / 1000;
    if crystal_khz == 0 {
        crystal_khz = base_mhz(cpuid) * 1000 * denominator / numerator;
    }
    match crystal_khz * numerator / denominator {
        0 => None,
        khz => Some(khz),
    }
}

/// The TSC frequency in kHz from CPUID, and which leaf said it; `None`
/// when no leaf does (then the caller calibrates against the PIT).
pub fn khz_from_cpuid<R: CpuIdReader>(reader: R) -> Option<(u64, TscSource)> {
    let cpuid = CpuId::with_cpuid_reader(reader);
    if is_intel(&cpuid) {
        if let Some(khz) = khz_from_leaf_15(&cpuid) {
            return Some((khz, TscSource::Cpuid15));
        }
        // Linux's cpu_khz_from_cpuid: base MHz × 1000.
        match base_mhz(&cpuid) * 1000 {
            0 => {}
            khz => return Some((khz, TscSource::Cpuid16)),
        }
    }
    // raw-cpuid reads 0x40000010 only when CPUID.1:ECX[31] says there is a
    // hypervisor and leaf 0x40000000 EAX (its highest leaf) reaches 0x40000010.
    match cpuid.get_hypervisor_info()?.tsc_frequency()? {
        0 => None,
        khz => Some((khz as u64, TscSource::Hypervisor)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec::Vec;
    use raw_cpuid::CpuIdResult;

    /// "GenuineIntel" as leaf 0's EBX, EDX, ECX.
    const INTEL: (u32, u32, u32) = (0x756e_6547, 0x4965_6e69, 0x6c65_746e);
    /// "AuthenticAMD".
    const AMD: (u32, u32, u32) = (0x6874_7541, 0x6974_6e65, 0x444d_4163);
    /// CPUID.1:ECX bit 31, "running under a hypervisor".
    const HYPERVISOR_BIT: u32 = 1 << 31;

    /// A CPU made of listed leaves; every other leaf reads as zeros, as an
    /// unimplemented leaf does on real CPUs below the maximum.
    #[derive(Clone, Default)]
    struct FakeCpu {
        leaves: Vec<(u32, CpuIdResult)>,
    }

    impl FakeCpu {
        /// Leaf 0 with `max_leaf` and the vendor string.
        fn new(max_leaf: u32, vendor: (u32, u32, u32)) -> Self {
            Self::default().leaf(0, max_leaf, vendor.0, vendor.2, vendor.1)
        }
        fn leaf(mut self, eax_in: u32, eax: u32, ebx: u32, ecx: u32, edx: u32) -> Self {
            self.leaves.retain(|(l, _)| *l != eax_in);
            self.leaves
                .push((eax_in, CpuIdResult { eax, ebx, ecx, edx }));
            self
        }
        /// The hypervisor bit in leaf 1 and leaf 0x40000000 with `max`.
        fn hypervisor(self, max: u32) -> Self {
            self.leaf(1, 0, 0, HYPERVISOR_BIT, 0)
                // "KVMKVMKVM\0\0\0"
                .leaf(0x4000_0000, max, 0x4b4d_564b, 0x564b_4d56, 0x4d)
        }
    }

    impl CpuIdReader for FakeCpu {
        fn cpuid2(&self, eax: u32, _ecx: u32) -> CpuIdResult {
            self.leaves
                .iter()
                .find(|(l, _)| *l == eax)
                .map(|(_, r)| *r)
                .unwrap_or(CpuIdResult {
                    eax: 0,
                    ebx: 0,
                    ecx: 0,
                    edx: 0,
                })
        }
    }

    #[test]
    fn fake_vendors_read_back() {
        let vendor = |v| {
            let cpuid = CpuId::with_cpuid_reader(FakeCpu::new(0x16, v));
            cpuid.get_vendor_info().unwrap().as_str().to_string()
        };
        assert_eq!(vendor(INTEL), "GenuineIntel");
        assert_eq!(vendor(AMD), "AuthenticAMD");
    }

    #[test]
    fn leaf_15_with_crystal() {
        // 24 MHz crystal, ratio 216/2: 24000 kHz × 216 / 2 = 2_592_000 kHz.
        let cpu = FakeCpu::new(0x16, INTEL).leaf(0x15, 2, 216, 24_000_000, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((2_592_000, TscSource::Cpuid15)));
        // 38.4 MHz crystal (Ice Lake), ratio 130/2: 38400 × 130 / 2 = 2_496_000.
        let cpu = FakeCpu::new(0x15, INTEL).leaf(0x15, 2, 130, 38_400_000, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((2_496_000, TscSource::Cpuid15)));
        // The crystal is truncated to whole kHz first, as in Linux:
        // 19_200_999 Hz → 19200 kHz; × 3 / 1 = 57_600 kHz.
        let cpu = FakeCpu::new(0x15, INTEL).leaf(0x15, 1, 3, 19_200_999, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((57_600, TscSource::Cpuid15)));
    }

    #[test]
    fn leaf_15_crystal_derived_from_leaf_16() {
        // Skylake: ECX 0, ratio 334/2, base 4000 MHz. Linux: crystal =
        // 4000 × 1000 × 2 / 334 = 8_000_000 / 334 = 23952 kHz (truncated),
        // TSC = 23952 × 334 / 2 = 4_000_000 − 16 = 3_999_984 kHz.
        let cpu = FakeCpu::new(0x16, INTEL)
            .leaf(0x15, 2, 334, 0, 0)
            .leaf(0x16, 4000, 4200, 100, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((3_999_984, TscSource::Cpuid15)));
    }

    #[test]
    fn leaf_15_without_crystal_and_without_leaf_16_falls_through() {
        // Max leaf 0x15: leaf 0x16 is not read even though the fake has it.
        let cpu = FakeCpu::new(0x15, INTEL)
            .leaf(0x15, 2, 334, 0, 0)
            .leaf(0x16, 4000, 4200, 100, 0);
        assert_eq!(khz_from_cpuid(cpu.clone()), None);
        // ...and on to the hypervisor leaf when there is one.
        let cpu = cpu
            .hypervisor(0x4000_0010)
            .leaf(0x4000_0010, 1_800_123, 0, 0, 0);
        assert_eq!(
            khz_from_cpuid(cpu),
            Some((1_800_123, TscSource::Hypervisor))
        );
    }

    #[test]
    fn leaf_16_base_frequency() {
        // Leaf 0x15 present but its ratio not enumerated (EBX 0): 0x16 says
        // 2600 MHz → 2_600_000 kHz.
        let cpu = FakeCpu::new(0x16, INTEL)
            .leaf(0x15, 2, 0, 24_000_000, 0)
            .leaf(0x16, 2600, 3900, 100, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((2_600_000, TscSource::Cpuid16)));
        // Denominator 0 likewise; EAX's reserved high half is ignored:
        // 0xabcd_0a28 → 0x0a28 = 2600 MHz.
        let cpu = FakeCpu::new(0x16, INTEL)
            .leaf(0x15, 0, 216, 24_000_000, 0)
            .leaf(0x16, 0xabcd_0a28, 0, 0, 0);
        assert_eq!(khz_from_cpuid(cpu), Some((2_600_000, TscSource::Cpuid16)));
    }

    #[test]
    fn hypervisor_timing_leaf() {
        // Leaves 0x15/0x16 empty (QEMU with KVM and vmware-cpuid-freq):
        // 0x40000010 EAX = 2_595_962 kHz.
        let cpu = FakeCpu::new(0x16, INTEL).hypervisor(0x4000_0010).leaf(
            0x4000_0010,
            2_595_962,
            1_000_000,
            0,
            0,
        );
        assert_eq!(
            khz_from_cpuid(cpu),
            Some((2_595_962, TscSource::Hypervisor))
        );
    }

    #[test]
    fn hypervisor_leaf_needs_range_and_bit() {
        // Range ends at 0x40000001: the timing leaf is not read.
        let cpu =
            FakeCpu::new(0xd, INTEL)
                .hypervisor(0x4000_0001)
                .leaf(0x4000_0010, 2_595_962, 0, 0, 0);
        assert_eq!(khz_from_cpuid(cpu), None);
        // Hypervisor leaves present, but CPUID.1:ECX[31] clear (bare metal).
        let cpu = FakeCpu::new(0xd, INTEL)
            .hypervisor(0x4000_0010)
            .leaf(1, 0, 0, 0, 0)
            .leaf(0x4000_0010, 2_595_962, 0, 0, 0);
        assert_eq!(khz_from_cpuid(cpu), None);
        // Leaf in range but EAX 0.
        let cpu =
            FakeCpu::new(0xd, INTEL)
                .hypervisor(0x4000_0010)
                .leaf(0x4000_0010, 0, 1_000_000, 0, 0);
        assert_eq!(khz_from_cpuid(cpu), None);
    }

    #[test]
    fn zero_and_absent_leaves_fall_through_to_pit() {
        // What QEMU TCG gives: leaves 0x15 and 0x16 within range, all zero.
        let tcg = FakeCpu::new(0x16, INTEL).leaf(1, 0, 0, HYPERVISOR_BIT, 0);
        assert_eq!(khz_from_cpuid(tcg), None);
        // Maximum leaf below 0x15: listed leaves beyond it are not read.
        let old = FakeCpu::new(0xd, INTEL)
            .leaf(0x15, 2, 216, 24_000_000, 0)
            .leaf(0x16, 2600, 0, 0, 0);
        assert_eq!(khz_from_cpuid(old), None);
        // Nothing at all.
        assert_eq!(khz_from_cpuid(FakeCpu::default()), None);
    }

    #[test]
    fn intel_leaves_only_on_intel() {
        // An AMD CPU whose leaves 0x15/0x16 hold values: Linux ignores them.
        let amd = FakeCpu::new(0x16, AMD)
            .leaf(0x15, 2, 216, 24_000_000, 0)
            .leaf(0x16, 2600, 0, 0, 0);
        assert_eq!(khz_from_cpuid(amd.clone()), None);
        // The hypervisor leaf is vendor-neutral.
        let amd = amd
            .hypervisor(0x4000_0010)
            .leaf(0x4000_0010, 3_000_000, 0, 0, 0);
        assert_eq!(
            khz_from_cpuid(amd),
            Some((3_000_000, TscSource::Hypervisor))
        );
    }

    #[test]
    fn priority_order() {
        let all = FakeCpu::new(0x16, INTEL)
            .hypervisor(0x4000_0010)
            .leaf(0x15, 2, 216, 24_000_000, 0)
            .leaf(0x16, 2600, 0, 0, 0)
            .leaf(0x4000_0010, 2_700_000, 0, 0, 0);
        // All three: 0x15 wins (24000 × 216 / 2).
        assert_eq!(
            khz_from_cpuid(all.clone()),
            Some((2_592_000, TscSource::Cpuid15))
        );
        // Without 0x15's ratio: 0x16 beats the hypervisor.
        let no15 = all.leaf(0x15, 0, 0, 0, 0);
        assert_eq!(
            khz_from_cpuid(no15.clone()),
            Some((2_600_000, TscSource::Cpuid16))
        );
        // Without 0x16 either: the hypervisor leaf.
        let no16 = no15.leaf(0x16, 0, 0, 0, 0);
        assert_eq!(
            khz_from_cpuid(no16),
            Some((2_700_000, TscSource::Hypervisor))
        );
    }

    #[test]
    fn source_names() {
        let names: Vec<_> = [
            TscSource::Cpuid15,
            TscSource::Cpuid16,
            TscSource::Hypervisor,
            TscSource::Pit,
            TscSource::Option,
        ]
        .iter()
        .map(|s| format!("{s}"))
        .collect();
        assert_eq!(
            names,
            [
                "CPUID 0x15",
                "CPUID 0x16",
                "hypervisor CPUID 0x40000010",
                "PIT channel 2 calibration",
                "tsc_khz option"
            ]
        );
    }

    #[test]
    fn mhz_like_linux() {
        assert_eq!(format!("{}", KhzAsMhz(2_595_962)), "2595.962");
        assert_eq!(format!("{}", KhzAsMhz(2_000_001)), "2000.001");
        assert_eq!(format!("{}", KhzAsMhz(999)), "0.999");
        assert_eq!(
            format!("tsc: Detected {} MHz processor", KhzAsMhz(2_595_962)),
            "tsc: Detected 2595.962 MHz processor"
        );
    }
}
