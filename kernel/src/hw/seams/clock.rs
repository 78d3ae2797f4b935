//! The pipeline's `Clock` on real hardware: the TSC.

use deferred_init::Clock;

use crate::hw::tsc;

/// Nanoseconds since kernel entry, from the TSC.
pub struct TscClock;

impl Clock for TscClock {
    fn now_ns(&self) -> u64 {
        tsc::ns_since_entry()
    }
}
