//! How fast each host CPU runs a fixed loop, just before QEMU starts and
//! just after it exits. The hosts this runs on are VMs whose CPUs share
//! physical cores with work this tool cannot see: the same loop on the same
//! CPU takes about twice as long for stretches of milliseconds to tens of
//! milliseconds (`tests/bench-results/host-cpu-speed`), with no steal and no
//! wait for a CPU to show it, and a boot's timings follow the state its
//! vCPUs' host CPUs were in. The two probes bracket the boot: a slow boot
//! between probes that found its CPUs slow was most likely slowed by the
//! host.

use std::time::Instant;

/// Multiply-adds per run of the loop (about half a millisecond here).
pub const LOOP_ITERATIONS: u64 = 1_000_000;

/// Runs of the loop per CPU; the probe reports their mean.
pub const RUNS: u32 = 10;

/// One run of the loop on whichever CPU this thread is on, in ns. Each
/// iteration's operand goes through `black_box`, so the compiler can
/// neither vectorise the loop nor sum it in closed form.
fn one_run_ns() -> u64 {
    let began = Instant::now();
    let mut x: u64 = 0;
    for i in 0..LOOP_ITERATIONS {
        let i = std::hint::black_box(i);
        x = x.wrapping_add(i.wrapping_mul(i));
    }
    std::hint::black_box(x);
    began.elapsed().as_nanos() as u64
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Option<(libc::cpu_set_t, Vec<usize>)> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes
    // at most size_of::<cpu_set_t>() bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    let cpus = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, inside the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    Some((set, cpus))
}

/// Pin this thread to `set`; true if the kernel took it.
fn pin(set: &libc::cpu_set_t) -> bool {
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
}

/// Each CPU this thread may run on, with the mean ns of [`RUNS`] runs of
/// the loop pinned to it; the thread's affinity is put back after. Empty
/// when the affinity cannot be read or set.
pub fn probe() -> Vec<(usize, u64)> {
    let Some((allowed, cpus)) = allowed_cpus() else {
        return Vec::new();
    };
    let mut speeds = Vec::with_capacity(cpus.len());
    for &cpu in &cpus {
        // SAFETY: a zeroed cpu_set_t is empty; `cpu` < CPU_SETSIZE.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::CPU_SET(cpu, &mut one) };
        if !pin(&one) {
            break;
        }
        let total: u64 = (0..RUNS).map(|_| one_run_ns()).sum();
        speeds.push((cpu, total / u64::from(RUNS)));
    }
    pin(&allowed);
    speeds
}

/// How the line for the probes starts (after `run-qemu.sh: `).
const LINE_HEAD: &str = "host CPU speed: a loop of ";

/// The log line for the probes before and after a boot: per CPU, the
/// loop's mean time before / after, ms.
pub fn line(before: &[(usize, u64)], after: &[(usize, u64)]) -> Option<String> {
    if before.is_empty() || after.is_empty() {
        return None;
    }
    let ms = |speeds: &[(usize, u64)], cpu: usize| {
        speeds
            .iter()
            .find(|s| s.0 == cpu)
            .map_or("–".to_string(), |s| format!("{:.2}", s.1 as f64 / 1e6))
    };
    let each: Vec<String> = before
        .iter()
        .map(|&(cpu, _)| format!("CPU {cpu} {} / {}", ms(before, cpu), ms(after, cpu)))
        .collect();
    Some(format!(
        "{LINE_HEAD}{LOOP_ITERATIONS} multiply-adds took {} ms just before QEMU started / after it exited (lower is faster; on a shared host a CPU's speed can halve for stretches of milliseconds to tens of milliseconds)",
        each.join(", ")
    ))
}

/// The slowest probe of a boot's log (its `host CPU speed` line), ns:
/// how slow the host's CPUs were found around the boot. `None` without
/// the line (logs from before it, or a host whose affinity could not be
/// set).
pub fn slowest_probe_ns(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("run-qemu.sh: ")?.strip_prefix(LINE_HEAD))?;
    let list = line.split(" took ").nth(1)?.split(" ms ").next()?;
    list.split(", ")
        .flat_map(|cpu| cpu.split_whitespace().skip(2).filter(|w| *w != "/"))
        .filter_map(|ms| ms.parse::<f64>().ok())
        .map(|ms| (ms * 1e6).round() as u64)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_times_every_allowed_cpu_and_puts_the_affinity_back() {
        let (_, cpus) = allowed_cpus().expect("this thread's affinity");
        let speeds = probe();
        assert_eq!(speeds.iter().map(|s| s.0).collect::<Vec<_>>(), cpus);
        assert!(speeds.iter().all(|s| s.1 > 0), "{speeds:?}");
        assert_eq!(allowed_cpus().expect("still readable").1, cpus);
    }

    #[test]
    fn the_line_sets_each_cpus_probes_side_by_side() {
        let line = line(&[(0, 550_000), (1, 1_040_000)], &[(0, 1_100_000)]).unwrap();
        assert!(
            line.contains("took CPU 0 0.55 / 1.10, CPU 1 1.04 / – ms just before QEMU started"),
            "{line}"
        );
        assert_eq!(super::line(&[], &[(0, 1)]), None);
    }

    #[test]
    fn the_slowest_probe_is_read_back_from_the_line() {
        let line = line(
            &[(0, 550_000), (1, 1_040_000)],
            &[(0, 1_100_000), (1, 400_000)],
        )
        .unwrap();
        let log = format!(
            "[    0.001000] boot\nrun-qemu.sh: {line}\nrun-qemu.sh: kernel reported success\n"
        );
        assert_eq!(slowest_probe_ns(&log), Some(1_100_000));
        let one_missing = super::line(&[(0, 550_000)], &[]).map_or(String::new(), |l| l);
        assert_eq!(slowest_probe_ns(&one_missing), None);
        let after_missing = line.replace("1.10", "–");
        let log = format!("run-qemu.sh: {after_missing}\n");
        assert_eq!(slowest_probe_ns(&log), Some(1_040_000));
        assert_eq!(
            slowest_probe_ns("run-qemu.sh: kernel reported success\n"),
            None
        );
    }
}
