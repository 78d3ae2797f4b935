//! A profile against a baseline profile of the same boot: the regression
//! check a kernel change gets in CI without the noise of timings. Each
//! phase the baseline counts per struct page (the memmap phases) must not
//! count more instructions, stores or bytes per page than the baseline by
//! more than a margin; the per-call phases (the buddy allocator's, whose
//! counts follow lock contention between CPUs) are shown, not gated.
//!
//! A small phase is also gated in absolute terms: its heap calls walk a
//! hole list whose length any earlier allocation changes, so a change that
//! allocates elsewhere moves it by a few hundred instructions (the 1G
//! free-bitmaps phase: ~3,500 instructions, 1 % of which is one such walk).
//! A figure exceeds the baseline only when the whole phase's excess is also
//! above [`NOISE_FLOOR`].

use crate::report::{PhaseProfile, Profile};

/// One gated phase, compared.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseCheck {
    pub phase: String,
    /// (what, now per page, baseline per page), for instructions, stores
    /// and bytes.
    pub figures: [(&'static str, f64, f64); 3],
    /// A figure above the baseline by more than the margin.
    pub exceeded: bool,
}

/// Instructions (or stores, or bytes) a whole phase may count above its
/// baseline before the margin applies: several heap calls' hole-list walks
/// (one `allocate_first_fit` counts ~500 instructions).
pub const NOISE_FLOOR: f64 = 4096.0;

/// A phase's instructions, stores and bytes per page, if it counts pages.
fn per_page(p: &PhaseProfile) -> Option<[f64; 3]> {
    let pages = p.pages.filter(|&n| n > 0)? as f64;
    Some([p.insns, p.stores, p.bytes].map(|n| n as f64 / pages))
}

/// Every per-page phase of `baseline` checked in `now`, `margin` a share
/// (0.01 = 1 %). A phase the baseline counted per page that `now` lacks,
/// or counts without pages, is an error.
pub fn compare(now: &Profile, baseline: &Profile, margin: f64) -> Result<Vec<PhaseCheck>, String> {
    if now.kernel != baseline.kernel {
        return Err(format!(
            "the baseline profiles {}, this boot {}",
            baseline.kernel, now.kernel
        ));
    }
    let mut checks = Vec::new();
    for b in &baseline.phases {
        let Some(base) = per_page(b) else { continue };
        let p = now.phase(&b.name).ok_or(format!(
            "phase {}: in the baseline, not in this profile",
            b.name
        ))?;
        let cur = per_page(p).ok_or(format!(
            "phase {}: counted per page in the baseline, not in this profile (it never ran?)",
            b.name
        ))?;
        let names = ["instructions", "stores", "bytes"];
        let figures = [0, 1, 2].map(|i| (names[i], cur[i], base[i]));
        let pages = p.pages.unwrap_or(0) as f64;
        let exceeded = figures
            .iter()
            .any(|&(_, c, b)| c > b * (1.0 + margin) && (c - b) * pages > NOISE_FLOOR);
        checks.push(PhaseCheck {
            phase: b.name.clone(),
            figures,
            exceeded,
        });
    }
    Ok(checks)
}

/// The check's line for the log: each figure now, the baseline's, and the
/// change.
pub fn check_line(c: &PhaseCheck, margin: f64) -> String {
    let figures: Vec<String> = c
        .figures
        .iter()
        .map(|&(what, now, base)| {
            let change = if base > 0.0 {
                format!("{:+.3} %", 100.0 * (now - base) / base)
            } else {
                "new".into()
            };
            format!("{what} {now:.3} (baseline {base:.3}, {change})")
        })
        .collect();
    format!(
        "memboot-profile: baseline: phase {}, per struct page: {}: {}",
        c.phase,
        figures.join(", "),
        if c.exceeded {
            format!("EXCEEDS the baseline by more than {:.2} %", 100.0 * margin)
        } else {
            format!("within {:.2} %", 100.0 * margin)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, insns: u64, stores: u64, bytes: u64, pages: Option<u64>) -> PhaseProfile {
        PhaseProfile {
            name: name.into(),
            entries: vec![],
            insns,
            stores,
            bytes,
            per_vcpu: vec![],
            opens: 1,
            closes: 1,
            unanchored: 0,
            left_open: 0,
            spin_insns: 0,
            pages,
            insns_per_page: None,
            stores_per_page: None,
            bytes_per_page: None,
            functions: vec![],
        }
    }

    fn profile(phases: Vec<PhaseProfile>) -> Profile {
        Profile {
            kernel: "memboot".into(),
            vcpus: 2,
            threads: "cpu".into(),
            plugin: String::new(),
            total_insns: 0,
            per_vcpu_insns: vec![],
            kernel_insns: 0,
            attributed_insns: 0,
            attributed_share: 1.0,
            unattributed: vec![],
            phases,
            deferred_nodes: None,
            functions: vec![],
        }
    }

    #[test]
    fn a_phase_above_the_margin_is_flagged_per_call_phases_are_not_gated() {
        let base = profile(vec![
            phase("deferred", 1_260_000, 808_000, 6_460_000, Some(100_000)),
            phase("buddy_alloc", 500, 60, 400, None),
        ]);
        // 0.5 % more instructions: within 1 %.
        let ok = profile(vec![
            phase("deferred", 1_266_000, 808_000, 6_460_000, Some(100_000)),
            phase("buddy_alloc", 900, 60, 400, None),
        ]);
        let checks = compare(&ok, &base, 0.01).unwrap();
        assert_eq!(checks.len(), 1, "only the per-page phase is gated");
        assert!(!checks[0].exceeded);
        assert!(check_line(&checks[0], 0.01)
            .contains("instructions 12.660 (baseline 12.600, +0.476 %)"));
        // 2 % more bytes: over.
        let over = profile(vec![phase(
            "deferred",
            1_260_000,
            808_000,
            6_590_000,
            Some(100_000),
        )]);
        let checks = compare(&over, &base, 0.01).unwrap();
        assert!(checks[0].exceeded);
        assert!(check_line(&checks[0], 0.01).contains("EXCEEDS the baseline by more than 1.00 %"));
        // 3 % more in a phase so small that the excess is one heap walk:
        // under the noise floor, not a regression.
        let small = profile(vec![phase("free_bitmaps", 3489, 733, 5800, Some(262047))]);
        let noisy = profile(vec![phase("free_bitmaps", 3590, 735, 5820, Some(262047))]);
        assert!(!compare(&noisy, &small, 0.01).unwrap()[0].exceeded);
        // The same phase doubled is over both.
        let doubled = profile(vec![phase(
            "free_bitmaps",
            2 * 3489 + NOISE_FLOOR as u64,
            733,
            5800,
            Some(262047),
        )]);
        assert!(compare(&doubled, &small, 0.01).unwrap()[0].exceeded);
        // Fewer is never a regression.
        let better = profile(vec![phase("deferred", 600, 100, 800, Some(100))]);
        assert!(!compare(&better, &base, 0.0).unwrap()[0].exceeded);
    }

    #[test]
    fn a_missing_phase_or_another_kernel_is_an_error() {
        let base = profile(vec![phase("deferred", 1260, 808, 6460, Some(100))]);
        let e = compare(&profile(vec![]), &base, 0.01).unwrap_err();
        assert!(e.contains("not in this profile"), "{e}");
        let never = profile(vec![phase("deferred", 0, 0, 0, None)]);
        assert!(compare(&never, &base, 0.01)
            .unwrap_err()
            .contains("never ran"));
        let mut linux = profile(vec![]);
        linux.kernel = "linux".into();
        assert!(compare(&linux, &base, 0.01)
            .unwrap_err()
            .contains("baseline profiles memboot"));
    }
}
