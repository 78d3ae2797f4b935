//! The kernel heap is sized from the memory map (`bootmap::heap_bytes`).
//! Here the pipeline runs on the host under a counting allocator, on real
//! boots from 4 GiB to 32 TiB, and its peak heap use must fit the size the
//! kernel would give itself for that map. (One test per binary: the
//! counter is process-wide.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use memboot_kernel::bootmap::heap_bytes;

struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn the_pipeline_fits_the_heap_sized_from_the_map() {
    for name in ["4g-deferred", "16g-4nodes", "1t", "32t-16nodes-ondemand"] {
        let mut fx = common::load(name);
        if name == "1t" {
            // Deferred init at 1 TiB writes 16 GiB of struct pages on the
            // host: replay its map on demand instead (heap use is per
            // section either way).
            fx.opts.memmap = memboot_contract::options::MemmapMode::OnDemand;
        }
        let max_end = fx
            .input
            .map
            .iter()
            .map(|e| e.start + e.len_bytes)
            .max()
            .unwrap();
        let budget = heap_bytes(max_end, fx.input.cpu_nodes.len());
        let base = IN_USE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let (_mm, lines, mapper) = common::run_on_host(&fx);
        // What the host-side seams allocate (log lines) is not kernel heap.
        let log_bytes: usize = lines.iter().map(|l| l.capacity() + 24).sum();
        drop((lines, mapper));
        let peak = PEAK.load(Ordering::Relaxed)
            - base
            - log_bytes.min(PEAK.load(Ordering::Relaxed) - base);
        std::println!(
            "{name}: peak {} KiB of a {} KiB heap",
            peak >> 10,
            budget >> 10
        );
        assert!(
            (peak as u64) < budget / 2,
            "{name}: the pipeline used {peak} B, the heap for this map is {budget} B: keep 2x headroom"
        );
    }
}
