//! Verification, last: the boot CPU's ranges checked for overlap, then
//! `deferred_init::verify::check_all`: every initialised PFN's struct page
//! on all CPUs, the buddy lists against the pages and the per-zone counts —
//! with the untouched pool (`ondemand`) accounted from its claim counters,
//! never read — and an alloc/free self-test per node.

use alloc::format;
use alloc::vec::Vec;
use core::fmt;

use deferred_init::hugetlb_pool::HugeCheck;
use deferred_init::{check_all, Verified};
use deferred_init::{DeferredInit, PageAllocator};
use memmap::init::InitOutcome;
use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{NodeId, PfnRange, ZoneType};

use memboot_contract::options::Verify;

use super::context::Ctx;
use super::error::{PipelineError, VerifyError};
use super::facts::{Phase, VerifyOutcome};
use super::fault_hooks::VerifyState;
use super::mode::Deferral;
use super::seams::{log_lines, Log};

/// Give a `test_fault=` its chance to damage the state, then verify, if the
/// mode has Linux state to check and `verify=off` was not given. `huge`:
/// the 2 MiB pages taken from the allocator.
#[allow(clippy::too_many_arguments)]
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    pages: PageAllocator<'_, '_, B>,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    di: &DeferredInit<'_, B>,
    outcome: &InitOutcome,
    huge: HugeCheck<'_>,
) -> Result<(), PipelineError> {
    if !cx.mode.has_allocator() || cx.opts.verify == Verify::Off {
        let why = if cx.mode.has_allocator() {
            "verify=off"
        } else {
            "memmap=touch writes no Linux state"
        };
        cx.log.line(format_args!("verify: off ({why})"));
        cx.facts
            .record(|f| f.verify = VerifyOutcome::Off.name().into());
        return Ok(());
    }
    cx.faults
        .before_verify(&VerifyState {
            pool_mode: cx.mode.deferral == Deferral::Pool,
            memmap,
            mb,
            eager: &outcome.eager,
            di,
            log: cx.log,
        })
        .map_err(PipelineError::TestFault)?;
    let (verdict, verify_ns) = cx.timed(Phase::Verify, || {
        check_eager(outcome)?;
        let verified =
            check_all(cx.executor, memmap, mb, layout, pages.buddy(), di, huge).map_err(failed)?;
        log_verified(cx.log, &verified);
        Ok(verified)
    });
    cx.facts.record(|f| {
        let outcome = if verdict.is_ok() {
            VerifyOutcome::Ok
        } else {
            VerifyOutcome::Failed
        };
        f.verify = outcome.name().into();
        f.verify_ns = verify_ns;
    });
    let verified = verdict.map_err(PipelineError::Verify)?;
    log_ok(cx.log, &verified, verify_ns);
    Ok(())
}

fn failed(e: impl fmt::Display) -> VerifyError {
    VerifyError {
        message: format!("{e}"),
    }
}

/// The per-zone lines and the self-test reports of a verification that
/// passed.
fn log_verified(log: &dyn Log, verified: &Verified) {
    log_lines(log, &verified.buddy);
    for selftest in &verified.selftests {
        log.line(format_args!("{selftest}"));
    }
}

/// The closing line of a verification that passed.
fn log_ok(log: &dyn Log, verified: &Verified, verify_ns: u64) {
    if verified.untouched_pages == 0 {
        log.line(format_args!(
            "verify: ok: every present page, the counts and the buddy lists checked in {} ms",
            verify_ns / 1_000_000
        ));
    } else {
        log.line(format_args!(
            "verify: ok: {} initialised pages, the counts and the buddy lists checked, {} untouched pages accounted in the pool, in {} ms",
            verified.pages_checked, verified.untouched_pages, verify_ns / 1_000_000
        ));
    }
}

/// The boot CPU's share is initialised exactly once: its ranges are
/// disjoint, and in every node and zone the struct pages its strategy
/// wrote, counted where each was written (`InitOutcome::eager_inits`),
/// equal the pages of its ranges there. A page written twice writes the
/// same bytes and passes the page scan; only this count sees it, as the
/// per-chunk init counters see it for deferred memory.
fn check_eager(outcome: &InitOutcome) -> Result<u64, VerifyError> {
    let mut sorted: Vec<PfnRange> = outcome.eager.iter().map(|e| e.pfns).collect();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[1].start < w[0].end) {
        return Err(failed(format_args!(
            "verify: eager ranges [{:#x}, {:#x}) and [{:#x}, {:#x}) overlap: those pages were initialised twice",
            w[0].start, w[0].end, w[1].start, w[1].end
        )));
    }
    let ranged_in = |nid: NodeId, zone: ZoneType| -> u64 {
        outcome
            .eager
            .iter()
            .filter(|e| e.nid == nid && e.zone == zone)
            .map(|e| e.pfns.nr_pages())
            .sum()
    };
    let written_in = |nid: NodeId, zone: ZoneType| -> u64 {
        outcome
            .eager_inits
            .iter()
            .filter(|c| c.nid == nid && c.zone == zone)
            .map(|c| c.nr_pages)
            .sum()
    };
    let zones = outcome
        .eager
        .iter()
        .map(|e| (e.nid, e.zone))
        .chain(outcome.eager_inits.iter().map(|c| (c.nid, c.zone)));
    for (nid, zone) in zones {
        let (written, ranged) = (written_in(nid, zone), ranged_in(nid, zone));
        if written != ranged {
            return Err(failed(format_args!(
                "verify: node {nid} zone {}: the boot CPU wrote {written} struct pages of memory, its ranges hold {ranged}: a page was initialised twice or skipped",
                zone.name()
            )));
        }
    }
    Ok(sorted.iter().map(|r| r.nr_pages()).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap::firmware::{FirmwareEntry, RegionKind};
    use memmap::init::{init_memmap, init_pfn_range, sections_to_back, Strategy};
    use memmap::memblock::MemblockConfig;
    use memmap::page::StructPage;
    use memmap::pageblock::PageblockMaps;
    use memmap::store::VecBacking;

    const MIB: u64 = 1 << 20;

    type Booted = (
        Memmap<VecBacking<StructPage>>,
        InitOutcome,
        PageblockMaps,
        Memblock,
    );

    /// `strategy`'s eager init over a map with two zones (DMA, DMA32) and a
    /// hole, as the eager memmap init runs it.
    fn booted(strategy: Strategy) -> Booted {
        let (mb, _) = Memblock::from_firmware(
            [
                FirmwareEntry::new(0x1000, 0x9e000, RegionKind::Usable),
                FirmwareEntry::new(MIB, 255 * MIB, RegionKind::Usable),
                FirmwareEntry::new(260 * MIB, 100 * MIB, RegionKind::Usable),
            ],
            MemblockConfig::default(),
        )
        .unwrap();
        let layout = ZoneLayout::new(&mb);
        let mut memmap = Memmap::new(VecBacking::new(sections_to_back(&layout)));
        let pageblocks = PageblockMaps::new(&layout);
        let outcome = init_memmap(strategy, &mut memmap, &mb, &layout, &pageblocks).unwrap();
        (memmap, outcome, pageblocks, mb)
    }

    #[test]
    fn every_strategy_writes_each_eager_page_once() {
        for strategy in [Strategy::PerPfn, Strategy::Regions, Strategy::Deferred] {
            let (_, outcome, ..) = booted(strategy);
            let ranged: u64 = outcome.eager.iter().map(|e| e.pfns.nr_pages()).sum();
            assert!(ranged > 0, "{strategy}");
            assert_eq!(check_eager(&outcome), Ok(ranged), "{strategy}");
        }
        let (_, ondemand, ..) = booted(Strategy::OnDemand);
        assert_eq!(
            check_eager(&ondemand),
            Ok(0),
            "nothing eager, nothing counted"
        );
    }

    /// A range initialised a second time through the init path (as a bug
    /// would), its writes counted as the eager memmap init counts them: same bytes, so
    /// only the count can tell, and it names the node and zone.
    #[test]
    fn a_range_written_twice_fails_naming_its_zone() {
        for strategy in [Strategy::PerPfn, Strategy::Regions, Strategy::Deferred] {
            let (mut memmap, mut outcome, pageblocks, mb) = booted(strategy);
            let e = *outcome.eager.last().unwrap();
            let again = init_pfn_range(&mut memmap, &pageblocks, &mb, e.pfns, e.zone, e.nid)
                .unwrap()
                .written;
            let zone = outcome
                .eager_inits
                .iter_mut()
                .find(|c| c.nid == e.nid && c.zone == e.zone)
                .unwrap();
            zone.nr_pages += again;
            let err = check_eager(&outcome).unwrap_err().message;
            assert!(
                err.contains(&format!("node {} zone {}:", e.nid, e.zone.name()))
                    && err.contains("initialised twice or skipped"),
                "{strategy}: {err}"
            );
        }
    }

    #[test]
    fn a_skipped_page_fails() {
        let (_, mut outcome, ..) = booted(Strategy::Regions);
        let first = &mut outcome.eager_inits[0];
        first.nr_pages -= 1;
        let (nid, zone) = (first.nid, first.zone);
        let err = check_eager(&outcome).unwrap_err().message;
        assert!(
            err.contains(&format!("node {nid} zone {}:", zone.name())),
            "{err}"
        );
    }

    #[test]
    fn overlapping_ranges_fail_whatever_the_counts() {
        let (_, mut outcome, ..) = booted(Strategy::Regions);
        let e = outcome.eager[0];
        outcome.eager.push(e);
        outcome.eager_inits[0].nr_pages += e.pfns.nr_pages();
        let err = check_eager(&outcome).unwrap_err().message;
        assert!(err.contains("overlap"), "{err}");
    }
}
