//! A minimal test-and-test-and-set spin lock, enough for the buddy
//! allocator's per-(node, zone) free lists.
//!
//! It is taken once per freed or allocated block, never per page, and is held
//! for a handful of list operations, so spinning is cheaper than anything
//! smarter. No fairness, no poisoning, no interrupt masking: the kernel must
//! not take it from an interrupt handler that can preempt a holder.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};

/// A spin lock protecting a `T`.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out at most one guard at a time (acquire/release on
// `locked`), so sharing the lock across threads only ever moves exclusive
// access to `T` between them; `T: Send` is what that requires.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: owning the lock is owning the `T`.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Spin until the lock is free, then take it.
    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        loop {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinLockGuard { lock: self };
            }
            // Test before retrying the RMW so waiters share the cache line.
            while self.locked.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
    }

    /// Exclusive access without locking, through `&mut self`.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// Holds the lock; releases it on drop.
pub struct SpinLockGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by us.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and `&mut self` makes this the only access.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinLockGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_under_contention() {
        let lock = SpinLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        // Non-atomic read-modify-write: loses updates without mutual exclusion.
                        let mut g = lock.lock();
                        let v = *g;
                        core::hint::black_box(&v);
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 80_000);
    }
}
