//! Where a polled level's rising edge lies, in TSC cycles: the PIT
//! calibration polls OUT2 (port 0x61 bit 5) and reads the TSC between
//! polls. A poll samples the level at some moment between the TSC reads
//! around it, and under TCG the vCPU can be held for microseconds anywhere
//! in that span (the port read is an exit to QEMU; the host may preempt
//! the thread). So the edge follows the TSC read *before* the last poll
//! that saw the level low (not the one after it: the edge may have come
//! while the vCPU was held after sampling) and precedes the TSC read
//! *after* the first poll that saw it high.

/// Bounds on the edge, fed one poll at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeBounds {
    /// A TSC value the edge is known to follow.
    after: u64,
}

impl EdgeBounds {
    /// Polling starts; the edge follows `earliest` (a TSC read after the
    /// count was armed).
    pub fn new(earliest: u64) -> Self {
        Self { after: earliest }
    }

    /// One poll, between TSC reads `tsc_before` and `tsc_after`, that saw
    /// the level `high`. Once a poll sees it high: `Some((lo, hi))`, the
    /// edge in `(lo, hi]`.
    pub fn poll(&mut self, tsc_before: u64, high: bool, tsc_after: u64) -> Option<(u64, u64)> {
        if high {
            return Some((self.after, tsc_after));
        }
        self.after = self.after.max(tsc_before);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeline with the edge at `edge`: polls every few cycles, each
    /// sampling somewhere between its TSC reads, with the vCPU now and then
    /// held for a long stretch before or after sampling (a random
    /// generator, seeded). The bounds must hold the edge, every time.
    #[test]
    fn the_bounds_hold_the_edge_however_the_vcpu_is_held() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut held_after_a_low_sample = 0;
        for _ in 0..20_000 {
            let edge = 1_000 + next(5_000);
            let mut bounds = EdgeBounds::new(0);
            let mut t = next(50);
            let (lo, hi) = loop {
                let stall = |r: u64| if r == 0 { 3_000 } else { r % 20 };
                let before = t;
                let sample = before + stall(next(8)) + next(20);
                let after = sample + stall(next(8)) + next(20);
                let high = sample >= edge;
                if !high && after >= edge {
                    held_after_a_low_sample += 1;
                }
                if let Some(b) = bounds.poll(before, high, after) {
                    break b;
                }
                t = after;
            };
            assert!(lo < edge && edge <= hi, "edge {edge} outside ({lo}, {hi}]");
        }
        // The case the bounds exist for: the edge came while the vCPU was
        // held between a low sample and the TSC read after it.
        assert!(held_after_a_low_sample > 100, "{held_after_a_low_sample}");
    }

    #[test]
    fn a_quiet_poll_loop_gives_bounds_one_poll_wide_on_each_side() {
        let mut b = EdgeBounds::new(10);
        assert_eq!(b.poll(10, false, 12), None);
        assert_eq!(b.poll(12, false, 14), None);
        assert_eq!(b.poll(14, true, 16), Some((12, 16)));
    }
}
