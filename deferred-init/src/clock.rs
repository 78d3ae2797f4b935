//! The time the workers and the allocator stamp their statistics with:
//! a seam of its own, read by `run` and `page_alloc` alike.

/// A monotonic nanosecond clock (the kernel: TSC; tests: `Instant`).
pub trait Clock: Sync {
    fn now_ns(&self) -> u64;
}

impl<F: Fn() -> u64 + Sync> Clock for F {
    fn now_ns(&self) -> u64 {
        self()
    }
}
