//! Statistics of a run, per node and per worker.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;

use super::DeferredInit;
use crate::stats::{DeferredReport, NodeStats, WorkerStats};

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Statistics so far (complete once every worker has returned).
    pub fn report(&self) -> DeferredReport {
        let workers: Vec<WorkerStats> = self
            .plan
            .workers()
            .iter()
            .zip(&self.workers)
            .enumerate()
            .map(|(i, (a, rt))| {
                let finished = rt.finished.load(Ordering::Acquire);
                let (s, e) = (
                    rt.start_ns.load(Ordering::Relaxed),
                    rt.end_ns.load(Ordering::Relaxed),
                );
                WorkerStats {
                    worker: i,
                    nid: a.nid,
                    cpu: a.cpu,
                    cpu_nid: a.cpu_nid,
                    nr_pages: rt.nr_pages.load(Ordering::Relaxed),
                    nr_claims: rt.nr_claims.load(Ordering::Relaxed),
                    start_ns: s,
                    end_ns: e,
                    wall_ns: if finished { e.saturating_sub(s) } else { 0 },
                    finished,
                }
            })
            .collect();
        let nodes = self
            .plan
            .nodes()
            .iter()
            .zip(&self.nodes)
            .enumerate()
            .map(|(pos, (n, rt))| {
                let mine = || workers.iter().filter(|w| w.nid == n.nid());
                let ran = || mine().filter(|w| w.nr_claims > 0);
                let start = ran().map(|w| w.start_ns).min();
                let end = ran().map(|w| w.end_ns).max();
                NodeStats {
                    nid: n.nid(),
                    nr_pages: n.nr_pages(),
                    nr_reserved_pages: n.nr_reserved_pages(),
                    nr_chunks: n.nr_chunks() as u64,
                    nr_windows: rt.nr_windows_total(),
                    nr_claimed_windows: self.claimed_windows(pos),
                    nr_workers: n.nr_workers(),
                    has_local_cpus: n.has_local_cpus(),
                    nr_worker_pages: mine().map(|w| w.nr_pages).sum(),
                    nr_grown_windows: rt.nr_grown_windows.load(Ordering::Relaxed),
                    nr_grown_pages: rt.nr_grown_pages.load(Ordering::Relaxed),
                    nr_contended_growth_steps: rt.nr_contended_growth_steps.load(Ordering::Relaxed),
                    nr_taken_pages: rt.nr_taken_pages.load(Ordering::Relaxed),
                    wall_ns: match (start, end) {
                        (Some(s), Some(e)) => e.saturating_sub(s),
                        _ => 0,
                    },
                    done: rt.windows_done_total() == rt.nr_windows_total(),
                }
            })
            .collect();
        DeferredReport::new(nodes, workers)
    }
}
