//! What a `memmap=` mode does in every stage. [`ModePlan::of`] is the one
//! mapping from the option to the stages: a new mode is a compile error
//! here until every stage knows it.

use deferred_init::InitMode;
use memmap::init::Strategy;

use memboot_contract::options::MemmapMode;

/// What the boot CPU does with struct pages ([`super::eager_memmap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EagerWork {
    /// A Linux memmap-init strategy.
    Strategy(Strategy),
    /// The store floor over the pages `Deferred` would initialise eagerly.
    Touch,
}

/// When the vmemmap's sections are mapped ([`super::vmemmap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmemmapMapping {
    /// Every present section at boot, as Linux's `sparse_init()`.
    AtBoot,
    /// Each section the first time one of its struct pages is asked for
    /// (`ondemand`: boot reserves, maps nothing).
    OnFirstUse,
}

/// What becomes of the memory the boot CPU leaves uninitialised ([`super::deferred_workers`] or
/// [`super::ondemand_pool`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Per-node workers initialise it during boot (`deferred`, `touch`; the
    /// strategies that initialise everything leave nothing).
    Workers,
    /// It goes to the allocator untouched; allocations initialise what they
    /// take (`ondemand`).
    Pool,
}

/// When the pipeline starts the other CPUs ([`super::seams::CpuBringup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartCpus {
    /// Before the boot CPU's eager phase, which hides their bring-up: the
    /// deferred-init workers need them right after it.
    BeforeEager,
    /// Once memory is ready: nothing before it needs another CPU.
    WhenMemoryReady,
}

/// What a `memmap=` mode does in every stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModePlan {
    pub eager: EagerWork,
    /// What deferred init does with each page, whoever runs it.
    pub workers: InitMode,
    pub deferral: Deferral,
    pub vmemmap: VmemmapMapping,
    pub cpus: StartCpus,
}

impl ModePlan {
    pub const fn of(mode: MemmapMode) -> ModePlan {
        let (eager, workers, deferral) = match mode {
            MemmapMode::Deferred => (
                EagerWork::Strategy(Strategy::Deferred),
                InitMode::InitAndFree,
                Deferral::Workers,
            ),
            MemmapMode::Regions => (
                EagerWork::Strategy(Strategy::Regions),
                InitMode::InitAndFree,
                Deferral::Workers,
            ),
            MemmapMode::PerPfn => (
                EagerWork::Strategy(Strategy::PerPfn),
                InitMode::InitAndFree,
                Deferral::Workers,
            ),
            MemmapMode::Touch => (EagerWork::Touch, InitMode::Touch, Deferral::Workers),
            MemmapMode::OnDemand => (
                EagerWork::Strategy(Strategy::OnDemand),
                InitMode::InitAndFree,
                Deferral::Pool,
            ),
        };
        // A pool's sections are mapped as they are first initialised; the
        // faithful modes map them all at boot, as Linux.
        let vmemmap = match deferral {
            Deferral::Workers => VmemmapMapping::AtBoot,
            Deferral::Pool => VmemmapMapping::OnFirstUse,
        };
        // Workers need the other CPUs; a pool is ready on the boot CPU.
        let cpus = match deferral {
            Deferral::Workers => StartCpus::BeforeEager,
            Deferral::Pool => StartCpus::WhenMemoryReady,
        };
        ModePlan {
            eager,
            workers,
            deferral,
            vmemmap,
            cpus,
        }
    }

    /// Does the mode build the page allocator (Linux state: struct pages,
    /// buddy lists) that allocations, verification and the allocation test
    /// use? Every mode but `touch`, the bare store floor.
    pub const fn has_allocator(&self) -> bool {
        matches!(self.workers, InitMode::InitAndFree)
    }

    /// Does HVO (`hugetlb_free_vmemmap=on`) map the 1 GiB pages' vmemmap?
    /// In every mode with Linux state; `touch`, the store floor, writes
    /// every struct page.
    pub const fn has_hvo(&self) -> bool {
        self.has_allocator()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_touch_has_no_allocator_and_only_ondemand_a_pool() {
        for mode in [
            MemmapMode::Deferred,
            MemmapMode::Regions,
            MemmapMode::PerPfn,
            MemmapMode::Touch,
            MemmapMode::OnDemand,
        ] {
            let plan = ModePlan::of(mode);
            assert_eq!(plan.has_allocator(), mode != MemmapMode::Touch, "{mode:?}");
            assert_eq!(
                plan.deferral == Deferral::Pool,
                mode == MemmapMode::OnDemand,
                "{mode:?}"
            );
        }
    }
}
