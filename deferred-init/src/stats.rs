//! Statistics and the dmesg-equivalent report lines.
//!
//! Per node Linux prints `node N deferred pages initialised in Xms` from
//! `deferred_init_memmap` (mm/page_alloc.c in 6.1: `pr_info("node %d deferred
//! pages initialised in %ums\n", ...)`); memboot prints the same line, byte
//! for byte (integer milliseconds, node wall time = first worker start to
//! last worker end), so dmesg parsers read both, and one total line of its own.

use alloc::vec::Vec;
use core::fmt;

use memmap::NodeId;

use crate::plan::CpuId;

/// One worker's work and wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerStats {
    /// Index into [`crate::DeferredPlan::workers`].
    pub worker: usize,
    pub nid: NodeId,
    pub cpu: CpuId,
    pub cpu_nid: NodeId,
    /// Pages this worker initialised.
    pub nr_pages: u64,
    /// Claims it made (each up to a section of windows).
    pub nr_claims: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// `end_ns - start_ns`, 0 if not finished.
    pub wall_ns: u64,
    pub finished: bool,
}

/// One node's totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeStats {
    pub nid: NodeId,
    /// Deferred pages of the node (reserved ones included).
    pub nr_pages: u64,
    pub nr_reserved_pages: u64,
    pub nr_chunks: u64,
    /// Block windows of the node, and those claimed so far (by workers or
    /// allocations); the rest is the untouched pool.
    pub nr_windows: u64,
    pub nr_claimed_windows: u64,
    pub nr_workers: usize,
    /// False: a memory-only node served by other nodes' CPUs.
    pub has_local_cpus: bool,
    /// Pages initialised by the node's (finished) workers.
    pub nr_worker_pages: u64,
    /// Windows / pages initialised by allocating callers (grow on demand).
    pub nr_grown_windows: u64,
    pub nr_grown_pages: u64,
    /// Growth steps that began while another claim of the node (a worker's
    /// or another grower's) was being processed: the races that happened.
    pub nr_contended_growth_steps: u64,
    /// Reserved pages taken out of the pool before any claim reached them,
    /// their struct pages written then (HVO's freed vmemmap under
    /// `ondemand`).
    pub nr_taken_pages: u64,
    /// First worker start to last worker end (workers that claimed work).
    pub wall_ns: u64,
    /// Every chunk processed.
    pub done: bool,
}

/// All statistics of a deferred-init run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredReport {
    pub nodes: Vec<NodeStats>,
    pub workers: Vec<WorkerStats>,
    /// First worker start to last worker end over all nodes.
    pub total_wall_ns: u64,
    pub nr_pages: u64,
}

impl DeferredReport {
    pub fn new(nodes: Vec<NodeStats>, workers: Vec<WorkerStats>) -> Self {
        let fin = || workers.iter().filter(|w| w.finished);
        let total_wall_ns = match (
            fin().map(|w| w.start_ns).min(),
            fin().map(|w| w.end_ns).max(),
        ) {
            (Some(s), Some(e)) => e.saturating_sub(s),
            _ => 0,
        };
        let nr_pages = nodes.iter().map(|n| n.nr_pages).sum();
        Self {
            nodes,
            workers,
            total_wall_ns,
            nr_pages,
        }
    }

    /// `node N deferred pages initialised in Xms` for `self.nodes[i]`.
    pub fn node_line(&self, i: usize) -> NodeLine<'_> {
        NodeLine(&self.nodes[i])
    }

    /// The total line.
    pub fn total_line(&self) -> TotalLine<'_> {
        TotalLine(self)
    }
}

/// Display adapter for one node's report line.
pub struct NodeLine<'a>(&'a NodeStats);

impl fmt::Display for NodeLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} deferred pages initialised in {}ms",
            self.0.nid,
            self.0.wall_ns / 1_000_000
        )
    }
}

/// Display adapter for the total line.
pub struct TotalLine<'a>(&'a DeferredReport);

impl fmt::Display for TotalLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        let grown: u64 = r.nodes.iter().map(|n| n.nr_grown_pages).sum();
        write!(
            f,
            "deferred pages initialised: {} pages on {} nodes by {} workers ({} pages grown on demand) in {} ms",
            r.nr_pages,
            r.nodes.len(),
            r.workers.len(),
            grown,
            r.total_wall_ns / 1_000_000
        )
    }
}

/// All node lines, then the total line, one per line.
impl fmt::Display for DeferredReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..self.nodes.len() {
            writeln!(f, "{}", self.node_line(i))?;
        }
        write!(f, "{}", self.total_line())
    }
}
