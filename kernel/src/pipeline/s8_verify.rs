//! Stage 8, verification: every present PFN's struct page checked on all
//! CPUs (each claims batches of sections), then the buddy lists against the
//! pages and the per-zone counts, then an alloc/free self-test per node.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use deferred_init::{
    alloc_free_selftest, verify_buddy, verify_pages, DeferredInit, Executor, PageCheck,
};
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

/// Scan every present section's struct pages on all CPUs.
fn scan_pages<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
) -> PageCheck {
    let sections: Vec<PfnRange> = layout
        .present_section_ranges()
        .iter()
        .flat_map(|r| r.section_pieces())
        .collect();
    let cursor = AtomicUsize::new(0);
    let results: spin::Mutex<Vec<PageCheck>> = spin::Mutex::new(Vec::new());
    executor.on_each_cpu(&|_| {
        let mut check = PageCheck::new(layout);
        loop {
            let first = cursor.fetch_add(SECTIONS_PER_CLAIM, Ordering::Relaxed);
            if first >= sections.len() {
                break;
            }
            let last = (first + SECTIONS_PER_CLAIM).min(sections.len());
            for range in &sections[first..last] {
                check.merge(verify_pages(memmap, mb, layout, *range));
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

/// Check everything; print the per-zone lines and the self-test reports.
pub fn verify<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    di: &DeferredInit<'_, B>,
    log: &dyn Log,
) -> Result<(), VerifyError> {
    let pages = scan_pages(executor, memmap, mb, layout);
    if !pages.is_ok() {
        return Err(failed(&pages));
    }
    let summary = verify_buddy(di.buddy(), memmap, layout, mb, &pages).map_err(failed)?;
    log_lines(log, &summary);
    for node in layout.nodes() {
        let report = alloc_free_selftest(di, memmap, node.nid)
            .map_err(|e| failed(format_args!("node {}: {e}", node.nid)))?;
        log.line(format_args!("{report}"));
    }
    Ok(())
}

/// `test_fault=corrupt_page`: give the last free page of memory the wrong
/// node bits, as a stray write would, so that verification must fail.
pub fn corrupt_one_free_page<B: MemmapBacking>(memmap: &Memmap<B>, mb: &Memblock, log: &dyn Log) {
    let Some((free, _)) = mb.free_ranges(None).last() else {
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
