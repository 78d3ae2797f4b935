//! Keeping the other CPUs' TLBs in step when the boot CPU changes a kernel
//! mapping that was in use (HVO remapping the vmemmap of the 2 MiB pages
//! after the deferred workers wrote through it on every CPU).
//!
//! Why no shootdown IPI: an AP reaches the vmemmap (or any mapping the
//! pipeline changes) only inside a job (`smp::scope`'s `serve`), and the
//! pipeline changes mappings on the boot CPU between jobs, never while one
//! runs; an idle AP halts or writes the log out of the kernel heap. So it
//! is enough that an AP flushes its whole TLB before the first job posted
//! after a change: [`changed`] counts changes, and each AP catches up
//! ([`catch_up`]) before it runs a job.

use core::sync::atomic::{AtomicU64, Ordering};

use x86_64::registers::control::{Cr4, Cr4Flags};

/// Changes to mappings other CPUs may hold, so far.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The boot CPU changed a mapping other CPUs may have cached (it flushed
/// its own entry). Release: an AP that sees a job posted after this (the
/// mailbox's release/acquire) sees the new count.
pub fn changed() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// On an AP about to run a job: if mappings changed since it last caught
/// up (`seen`, its own), flush its whole TLB, global entries included.
pub fn catch_up(seen: &AtomicU64) {
    let now = GENERATION.load(Ordering::Acquire);
    if seen.load(Ordering::Relaxed) != now {
        flush_everything();
        seen.store(now, Ordering::Relaxed);
    }
}

/// Flush this CPU's TLB and paging-structure caches, global entries too
/// (Intel SDM vol. 3A §4.10.4.1: toggling CR4.PGE does that; without PGE,
/// reloading CR3 does).
fn flush_everything() {
    let cr4 = Cr4::read();
    if cr4.contains(Cr4Flags::PAGE_GLOBAL) {
        // SAFETY: clearing and restoring PGE changes no translation, it
        // only invalidates cached ones; nothing else runs on this CPU.
        unsafe {
            Cr4::write(cr4 - Cr4Flags::PAGE_GLOBAL);
            Cr4::write(cr4);
        }
    } else {
        x86_64::instructions::tlb::flush_all();
    }
}
