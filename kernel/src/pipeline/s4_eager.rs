//! Stage 4, eager memmap init on the boot CPU, as the `memmap=` mode says.
//!
//! [`ModePlan::of`] is the one mapping from the option to what each stage
//! does: a new mode is a compile error here until every stage knows it.

use deferred_init::InitMode;
use memmap::init::{
    init_memmap, split_deferred, touch_ranges, InitOutcome, InitStats, MemmapInitError, Strategy,
};
use memmap::memblock::Memblock;
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;

use crate::options::MemmapMode;

use super::seams::Log;

/// What the boot CPU does with struct pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EagerWork {
    /// A Linux memmap-init strategy.
    Strategy(Strategy),
    /// The store floor over the pages `Deferred` would initialise eagerly.
    Touch,
}

/// What becomes of the memory the boot CPU leaves uninitialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Per-node workers initialise it during boot (`deferred`, `touch`; the
    /// strategies that initialise everything leave nothing).
    Workers,
    /// It goes to the allocator untouched; allocations initialise what they
    /// take (`ondemand`).
    Pool,
}

/// What a `memmap=` mode does in every stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModePlan {
    pub eager: EagerWork,
    /// What deferred init does with each page, whoever runs it.
    pub workers: InitMode,
    pub deferral: Deferral,
    /// The mode writes Linux state that verification can check.
    pub verifiable: bool,
}

impl ModePlan {
    pub const fn of(mode: MemmapMode) -> ModePlan {
        match mode {
            MemmapMode::Deferred => ModePlan {
                eager: EagerWork::Strategy(Strategy::Deferred),
                workers: InitMode::InitAndFree,
                deferral: Deferral::Workers,
                verifiable: true,
            },
            MemmapMode::Regions => ModePlan {
                eager: EagerWork::Strategy(Strategy::Regions),
                workers: InitMode::InitAndFree,
                deferral: Deferral::Workers,
                verifiable: true,
            },
            MemmapMode::PerPfn => ModePlan {
                eager: EagerWork::Strategy(Strategy::PerPfn),
                workers: InitMode::InitAndFree,
                deferral: Deferral::Workers,
                verifiable: true,
            },
            MemmapMode::Touch => ModePlan {
                eager: EagerWork::Touch,
                workers: InitMode::Touch,
                deferral: Deferral::Workers,
                verifiable: false,
            },
            MemmapMode::OnDemand => ModePlan {
                eager: EagerWork::Strategy(Strategy::Deferred),
                workers: InitMode::InitAndFree,
                deferral: Deferral::Pool,
                verifiable: true,
            },
        }
    }
}

/// Initialise the boot CPU's share of struct pages.
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
