//! Stage 8, verification: every initialised PFN's struct page checked on all
//! CPUs (each claims batches of sections), then the buddy lists against the
//! pages and the per-zone counts — with the untouched pool (`ondemand`)
//! accounted from its claim counters, never read — then an alloc/free
//! self-test per node.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use deferred_init::{
    alloc_free_selftest, verify_buddy_with_pool, verify_scan_range, DeferredInit, Executor,
    PageCheck, PoolCheck, ScanRange,
};
use memmap::init::EagerRange;
use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::PfnRange;

use super::seams::{log_lines, Log};

/// Sections per claim in the parallel page scan: large enough that claims
/// cost nothing, small enough that CPUs finish together.
const SECTIONS_PER_CLAIM: usize = 8;

/// What differs, as the first lines of the checker's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn failed(e: impl fmt::Display) -> VerifyError {
    VerifyError {
        message: format!("{e}"),
    }
}

/// Scan every initialised page's struct page on all CPUs: the present
/// sections minus the untouched pool, claimed in batches of sections.
fn scan_pages<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    pool: &PoolCheck,
) -> PageCheck {
    let ranges: Vec<ScanRange> = pool.scan_ranges(layout);
    let cursor = AtomicUsize::new(0);
    let results: spin::Mutex<Vec<PageCheck>> = spin::Mutex::new(Vec::new());
    executor.on_each_cpu(&|_| {
        let mut check = PageCheck::new(layout);
        loop {
            let first = cursor.fetch_add(SECTIONS_PER_CLAIM, Ordering::Relaxed);
            if first >= ranges.len() {
                break;
            }
            let last = (first + SECTIONS_PER_CLAIM).min(ranges.len());
            for range in &ranges[first..last] {
                check.merge(verify_scan_range(memmap, mb, layout, *range));
            }
        }
        results.lock().push(check);
    });
    let mut pages = PageCheck::new(layout);
    for c in results.into_inner() {
        pages.merge(c);
    }
    pages
}

/// What verification covered, for its closing line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub pages: u64,
    pub untouched: u64,
}

/// Check everything; print the per-zone lines and the self-test reports.
/// Costs O(initialised pages + sections): untouched struct pages are never
/// read.
pub fn verify<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    di: &DeferredInit<'_, B>,
    log: &dyn Log,
) -> Result<Checked, VerifyError> {
    let pool = PoolCheck::new(di);
    let pages = scan_pages(executor, memmap, mb, layout, &pool);
    if !pages.is_ok() {
        return Err(failed(&pages));
    }
    let summary =
        verify_buddy_with_pool(di.buddy(), memmap, layout, mb, &pages, &pool).map_err(failed)?;
    log_lines(log, &summary);
    for node in layout.nodes() {
        let report = alloc_free_selftest(di, memmap, node.nid)
            .map_err(|e| failed(format_args!("node {}: {e}", node.nid)))?;
        log.line(format_args!("{report}"));
    }
    Ok(Checked {
        pages: pages.pages_checked,
        untouched: pool.pages(),
    })
}

/// The closing line of a verification that passed.
pub fn log_ok(log: &dyn Log, checked: &Checked, verify_ns: u64) {
    if checked.untouched == 0 {
        log.line(format_args!(
            "verify: ok: every present page, the counts and the buddy lists checked in {} ms",
            verify_ns / 1_000_000
        ));
    } else {
        log.line(format_args!(
            "verify: ok: {} initialised pages, the counts and the buddy lists checked, {} untouched pages accounted in the pool, in {} ms",
            checked.pages, checked.untouched, verify_ns / 1_000_000
        ));
    }
}

/// `test_fault=corrupt_page`: give the last free page the boot CPU
/// initialised the wrong node bits, as a stray write would, so that
/// verification must fail. (An eager page: every mode initialises those,
/// while deferred memory may still be untouched.)
pub fn corrupt_one_free_page<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    eager: &[EagerRange],
    log: &dyn Log,
) {
    let last_free = mb
        .free_ranges(None)
        .flat_map(|(free, _)| eager.iter().filter_map(move |e| free.intersect(&e.pfns)))
        .last();
    let Some(free) = last_free else {
        return;
    };
    let pfn = free.end - 1;
    // SAFETY: every worker has finished and nothing else holds a reference
    // to this struct page; the write is the deliberate corruption.
    if let Some(pages) = unsafe { memmap.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) } {
        pages[0].flags ^= 1 << memmap::page::NODES_PGSHIFT;
        log.line(format_args!(
            "test_fault: flipped a node bit in the struct page of pfn {pfn:#x}"
        ));
    }
}
