//! Workers' bodies: claim [`WORKER_CLAIM_WINDOWS`] windows at a time and
//! process them until the node has nothing left, keeping each worker's
//! statistics.

use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;

use super::{DeferredInit, DeferredInitError, WorkerRuntime, WORKER_CLAIM_WINDOWS};
use crate::clock::Clock;

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Body of worker `worker` (index into
    /// [`DeferredPlan::workers`](crate::DeferredPlan::workers)): claim and
    /// process windows of its node until none is left. Callable from any
    /// CPU; running a worker twice is harmless (it finds nothing to claim).
    pub fn run_worker(&self, worker: usize, clock: &dyn Clock) -> Result<(), DeferredInitError> {
        let rt = self.worker_start(worker, clock)?;
        while self.claim_for(worker)? {}
        rt.end_ns.fetch_max(clock.now_ns(), Ordering::Relaxed);
        Ok(())
    }

    /// One claim of worker `worker` ([`WORKER_CLAIM_WINDOWS`] windows),
    /// processed; false once nothing is left to claim. Interleaving steps
    /// with other work is how a CPU drains the pool in the background.
    pub fn worker_step(&self, worker: usize, clock: &dyn Clock) -> Result<bool, DeferredInitError> {
        let rt = self.worker_start(worker, clock)?;
        let more = self.claim_for(worker)?;
        rt.end_ns.fetch_max(clock.now_ns(), Ordering::Relaxed);
        Ok(more)
    }

    /// The worker's runtime, its start time stamped on first use.
    fn worker_start(
        &self,
        worker: usize,
        clock: &dyn Clock,
    ) -> Result<&WorkerRuntime, DeferredInitError> {
        let rt = self
            .workers
            .get(worker)
            .ok_or(DeferredInitError::NoSuchWorker {
                worker,
                nr_workers: self.workers.len(),
            })?;
        if !rt.started.swap(true, Ordering::Relaxed) {
            rt.start_ns.store(clock.now_ns(), Ordering::Relaxed);
        }
        Ok(rt)
    }

    /// Claim and process one batch for `worker`; false when nothing is left.
    fn claim_for(&self, worker: usize) -> Result<bool, DeferredInitError> {
        let a = self.plan.workers()[worker];
        let pos = self
            .plan
            .node_pos(a.nid)
            .expect("plan assigns workers only to planned nodes");
        let rt = &self.workers[worker];
        let Some(claim) = self.claim(pos, WORKER_CLAIM_WINDOWS) else {
            rt.finished.store(true, Ordering::Release);
            return Ok(false);
        };
        let (nr_pages, _) = self.process_claim(pos, &claim);
        rt.nr_pages.fetch_add(nr_pages, Ordering::Relaxed);
        rt.nr_claims.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}
