//! Host (`std`) implementations of the seams: one OS thread per worker, and
//! a clock on `std::time::Instant`. Available in tests and with the `std`
//! feature.

use std::time::Instant;

use crate::plan::WorkerAssignment;
use crate::run::{Clock, Executor};

/// Runs every worker on its own scoped `std::thread`. CPU numbers are not
/// used (no pinning): the OS scheduler places the threads.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadExecutor;

impl Executor for ThreadExecutor {
    fn run(&self, workers: &[WorkerAssignment], work: &(dyn Fn(usize) + Sync)) {
        std::thread::scope(|s| {
            for i in 0..workers.len() {
                s.spawn(move || work(i));
            }
        });
    }
}

/// Nanoseconds since the clock was created.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}
