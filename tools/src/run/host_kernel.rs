//! What the host's own kernel did for a boot: how much of QEMU's CPU time
//! it spent (GNU time's user and system seconds), and, machine-wide over
//! the boot, the page faults, the transparent huge pages it faulted in,
//! and the time the hypervisor under this host took from its CPUs
//! (`/proc/vmstat`, `/proc/stat`'s `steal`). Cold, a guest's first touch of
//! its RAM is a host page fault, and on these hosts (VMs with free page
//! reporting) each page the fault zeroes faults again in the hypervisor
//! below: these lines say how much of a boot's time that was, the same
//! way for memboot and Linux. Machine-wide counters count whatever else
//! the host ran meanwhile: bench runs take the whole machine.

/// Linux's `/proc/stat` counts in USER_HZ, 100 per second on x86.
const USER_HZ: u64 = 100;

/// The machine-wide counters, at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub pgfault: u64,
    pub thp_fault_alloc: u64,
    pub thp_fault_fallback: u64,
    /// `/proc/stat`'s `steal` over all CPUs, in USER_HZ ticks.
    pub steal_ticks: u64,
}

impl Counters {
    /// Read now; `None` where /proc does not have them.
    pub fn read() -> Option<Counters> {
        let vmstat = std::fs::read_to_string("/proc/vmstat").ok()?;
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        Counters::parse(&vmstat, &stat)
    }

    /// From the text of `/proc/vmstat` and `/proc/stat`.
    pub fn parse(vmstat: &str, stat: &str) -> Option<Counters> {
        let field = |name: &str| {
            vmstat.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        // cpu user nice system idle iowait irq softirq steal …
        let steal_ticks = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some("cpu"))?
            .split_whitespace()
            .nth(8)?
            .parse()
            .ok()?;
        Some(Counters {
            pgfault: field("pgfault")?,
            thp_fault_alloc: field("thp_fault_alloc").unwrap_or(0),
            thp_fault_fallback: field("thp_fault_fallback").unwrap_or(0),
            steal_ticks,
        })
    }

    /// The line for what happened from `before` to `self`.
    pub fn line_since(&self, before: &Counters) -> String {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        format!(
            "host kernel during the boot (machine-wide): {} page faults, {} transparent huge pages faulted in ({} fell back to small pages), {} ms of CPU time taken by the hypervisor below (steal)",
            d(self.pgfault, before.pgfault),
            d(self.thp_fault_alloc, before.thp_fault_alloc),
            d(self.thp_fault_fallback, before.thp_fault_fallback),
            d(self.steal_ticks, before.steal_ticks) * 1000 / USER_HZ
        )
    }
}

/// The line for QEMU's CPU time, `user_s` and `system_s` seconds (GNU
/// time's `%U %S`, as it prints them): how much of it the host kernel
/// spent. `None` unless both read as seconds.
pub fn cpu_line(user_s: &str, system_s: &str) -> Option<String> {
    let (user, system) = (user_s.parse::<f64>().ok()?, system_s.parse::<f64>().ok()?);
    let total = user + system;
    let share = if total > 0.0 {
        100.0 * system / total
    } else {
        0.0
    };
    Some(format!(
        "host CPU time of QEMU: {user:.2} s in QEMU, {system:.2} s in the host kernel ({share:.1} % of {total:.2} s)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VMSTAT: &str =
        "nr_free_pages 12\npgfault 1000\nthp_fault_alloc 7\nthp_fault_fallback 2\npgmajfault 3\n";
    const STAT: &str =
        "cpu  2624293 0 776804 2473930 14952 0 1533 13158 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";

    #[test]
    fn parses_the_counters_and_the_steal_column() {
        let c = Counters::parse(VMSTAT, STAT).unwrap();
        assert_eq!(
            c,
            Counters {
                pgfault: 1000,
                thp_fault_alloc: 7,
                thp_fault_fallback: 2,
                steal_ticks: 13158,
            }
        );
        assert_eq!(Counters::parse("nr_free_pages 12\n", STAT), None);
        assert_eq!(Counters::parse(VMSTAT, "cpu0 1 2 3\n"), None);
    }

    #[test]
    fn line_says_the_differences() {
        let before = Counters::parse(VMSTAT, STAT).unwrap();
        let after = Counters {
            pgfault: 1500,
            thp_fault_alloc: 8199,
            thp_fault_fallback: 2,
            steal_ticks: 13158 + 250,
        };
        assert_eq!(
            after.line_since(&before),
            "host kernel during the boot (machine-wide): 500 page faults, 8192 transparent huge pages faulted in (0 fell back to small pages), 2500 ms of CPU time taken by the hypervisor below (steal)"
        );
    }

    #[test]
    fn cpu_line_splits_user_and_system() {
        assert_eq!(
            cpu_line("3.00", "27.00").unwrap(),
            "host CPU time of QEMU: 3.00 s in QEMU, 27.00 s in the host kernel (90.0 % of 30.00 s)"
        );
        assert_eq!(cpu_line("x", "1.0"), None);
    }
}
