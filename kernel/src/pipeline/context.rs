//! What every stage is given: the options, the mode's plan, the seams, the
//! fault hooks and the facts, with the one helper that times a boot-CPU phase and records
//! it in the summary's `phases`.

use crate::image_sizes::ImageSizes;
use memboot_contract::options::{Drain, Options};
use memmap::NodeId;

use super::facts::{Facts, Phase};
use super::fault_hooks::FaultHooks;
use super::mode::{Deferral, ModePlan};
use super::seams::{Clock, Executor, Log, BOOT_CPU};

/// The pipeline's context, shared by every stage.
pub struct Ctx<'a> {
    pub opts: &'a Options,
    pub mode: ModePlan,
    pub executor: &'a dyn Executor,
    pub clock: &'a dyn Clock,
    pub log: &'a dyn Log,
    pub facts: &'a Facts,
    /// What a `test_fault=` does where it acts; nothing on a normal boot.
    pub faults: &'a FaultHooks,
    /// `cpu_nodes[cpu]`: the node of each CPU of `executor`.
    pub cpu_nodes: &'a [NodeId],
    /// CPUID's hypervisor bit (memory-block sizing).
    pub under_hypervisor: bool,
    /// The kernel image's parts, for Linux's `Memory:` line.
    pub image: ImageSizes,
}

impl Ctx<'_> {
    /// Does this boot drain the pool after memory is ready
    /// (`memmap=ondemand ondemand_drain=on`)?
    pub fn drains(&self) -> bool {
        self.mode.deferral == Deferral::Pool && self.opts.ondemand_drain == Drain::On
    }

    /// Run `f` as `phase` on the boot CPU, recording its span; returns its
    /// result and how long it took.
    pub fn timed<R>(&self, phase: Phase, f: impl FnOnce() -> R) -> (R, u64) {
        let start = self.clock.now_ns();
        let r = f();
        let end = self.clock.now_ns();
        self.facts.phase(phase, BOOT_CPU, None, start, end);
        (r, end - start)
    }
}
