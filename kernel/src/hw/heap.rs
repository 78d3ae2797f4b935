//! The kernel heap: `linked_list_allocator` over one region of RAM, sized
//! from the memory map (`bootmap::heap_bytes`) and grown once the CPU count
//! is known. It counts its peak use (printed at the end of the boot and in
//! the summary) and remembers a failed allocation, so that running out of
//! heap ends the boot as `no_memory` with the figures, not as a bare panic.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use linked_list_allocator::Heap;

/// The kernel's heap: placed and grown by the boot flow (`hw::boot`).
#[global_allocator]
pub static HEAP: KernelHeap = KernelHeap::empty();

pub struct KernelHeap {
    heap: spin::Mutex<Heap>,
    /// Kept beside the heap so the panic path reads it without the lock.
    size_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    /// Size of the first allocation that failed (0: none).
    failed_bytes: AtomicU64,
}

impl KernelHeap {
    pub const fn empty() -> Self {
        Self {
            heap: spin::Mutex::new(Heap::empty()),
            size_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            failed_bytes: AtomicU64::new(0),
        }
    }

    /// # Safety
    /// `[start, start + bytes)` must be valid, unused memory for the rest of
    /// the kernel's life; called once, before any allocation.
    pub unsafe fn init(&self, start: *mut u8, bytes: usize) {
        // SAFETY: passed on from the caller.
        unsafe { self.heap.lock().init(start, bytes) };
        self.size_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    /// Grow the heap by `bytes` at its top.
    ///
    /// # Safety
    /// The `bytes` after the heap's current top must be valid, unused memory
    /// for the rest of the kernel's life.
    pub unsafe fn extend(&self, bytes: usize) {
        // SAFETY: passed on from the caller.
        unsafe { self.heap.lock().extend(bytes) };
        self.size_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Relaxed)
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    /// The size of the allocation that failed, if one did. Without taking
    /// the lock: the panic path may have interrupted its holder.
    pub fn failed_bytes(&self) -> Option<u64> {
        Some(self.failed_bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }
}

// SAFETY: allocation and deallocation are `linked_list_allocator`'s under
// one lock; the wrapper only records figures.
//
// `alloc` and `dealloc` are not inlined: the default `realloc` and
// `alloc_zeroed` and the `__rust_*` shims would each get their own copy of
// the free-list walk (about 1,100 more distinct instructions before memory
// is ready, each translated once under TCG at about a microsecond).
unsafe impl GlobalAlloc for KernelHeap {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut heap = self.heap.lock();
        match heap.allocate_first_fit(layout) {
            Ok(p) => {
                self.peak_bytes
                    .fetch_max(heap.used() as u64, Ordering::Relaxed);
                p.as_ptr()
            }
            Err(()) => {
                let _ = self.failed_bytes.compare_exchange(
                    0,
                    layout.size().max(1) as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                core::ptr::null_mut()
            }
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `ptr` came from `alloc` with this layout (GlobalAlloc
            // contract).
            unsafe { self.heap.lock().deallocate(p, layout) }
        }
    }
}
