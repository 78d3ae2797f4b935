//! Eager memmap init on the boot CPU, as the `memmap=` mode says
//! ([`super::mode::ModePlan::eager`]).

use alloc::vec::Vec;

use memmap::init::{
    init_memmap, split_deferred, touch_ranges, InitOutcome, InitStats, MemmapInitError,
};
use memmap::memblock::Memblock;
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;

use memboot_contract::options::MemmapMode;

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;
use super::mode::EagerWork;
use super::seams::Log;

/// The boot CPU's share of struct pages, logged and recorded.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    memmap: &mut Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
) -> Result<InitOutcome, PipelineError> {
    let pageblocks = match cx.mode.eager {
        EagerWork::Strategy(s) if !s.initialises_memory_at_boot() => PageblockMaps::none(),
        _ => PageblockMaps::new(layout),
    };
    let (outcome, memmap_boot_ns) = cx.timed(Phase::EagerMemmap, || {
        init(cx.mode.eager, memmap, mb, layout, &pageblocks)
    });
    let outcome = outcome.map_err(PipelineError::Memmap)?;
    let s = outcome.stats;
    log(cx.log, cx.opts.memmap, &s, memmap_boot_ns);
    cx.facts.record(|f| {
        f.eager_pages = s.eager_pages;
        f.deferred_pages = s.deferred_pages;
        f.reserved_pages = s.reserved_pages;
        f.hole_pages = s.hole_pages;
        f.memmap_boot_ns = memmap_boot_ns;
    });
    Ok(outcome)
}

/// Initialise the boot CPU's share of struct pages. Out of line: the
/// instruction profile's boot-CPU memmap phase starts at this function's
/// entry (`memboot-profile`'s phase table).
#[inline(never)]
pub fn init<B: MemmapBacking>(
    work: EagerWork,
    memmap: &mut Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    pageblocks: &PageblockMaps,
) -> Result<InitOutcome, MemmapInitError> {
    match work {
        EagerWork::Strategy(strategy) => init_memmap(strategy, memmap, mb, layout, pageblocks),
        EagerWork::Touch => {
            let split = split_deferred(mb, layout);
            let eager_pages = touch_ranges(memmap, split.eager.iter().map(|e| e.pfns))?;
            Ok(InitOutcome {
                stats: InitStats {
                    eager_pages,
                    deferred_pages: split.deferred.iter().map(|d| d.pfns.nr_pages()).sum(),
                    reserved_pages: 0,
                    hole_pages: 0,
                },
                eager: split.eager,
                // Touch writes no Linux state and is never verified.
                eager_inits: Vec::new(),
                deferred: split.deferred,
            })
        }
    }
}

/// The stage's log line.
pub fn log(log: &dyn Log, mode: MemmapMode, stats: &InitStats, memmap_boot_ns: u64) {
    log.line(format_args!(
        "memmap: strategy {}: {} pages initialised on the boot CPU in {} us ({} reserved, {} hole pages), {} pages deferred",
        mode.name(),
        stats.eager_pages,
        memmap_boot_ns / 1000,
        stats.reserved_pages,
        stats.hole_pages,
        stats.deferred_pages
    ));
}
