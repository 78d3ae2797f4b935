//! Host (`std`) implementations of the seams: one OS thread per worker, and
//! a clock on `std::time::Instant`. Available in tests and with the `std`
//! feature.

use std::time::Instant;

use crate::clock::Clock;
use crate::plan::CpuId;
use crate::run::Executor;

/// `nr_cpus` CPUs as scoped `std::thread`s, one per CPU per
/// [`Executor::on_each_cpu`] call (no pinning: the OS places the threads).
#[derive(Clone, Copy, Debug)]
pub struct ThreadExecutor {
    nr_cpus: usize,
}

impl ThreadExecutor {
    pub fn new(nr_cpus: usize) -> Self {
        Self { nr_cpus }
    }
}

impl Executor for ThreadExecutor {
    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        std::thread::scope(|s| {
            for cpu in 0..self.nr_cpus {
                s.spawn(move || job(cpu as CpuId));
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
