//! Where QEMU's host CPU time goes during a boot, thread by thread. Under
//! TCG every vCPU is a host thread, so a vCPU that spins takes host time
//! from the ones working; these lines show each vCPU's share.
//!
//! QEMU names its vCPU threads (`CPU 0/TCG`, `CPU 1/KVM`, …) when started
//! with `-name …,debug-threads=on` ([`QEMU_ARGS`]), and
//! `/proc/PID/task/TID/schedstat` gives each thread's time on a CPU in ns.
//! A thread of this tool samples them every [`SAMPLE_MS`] while QEMU runs
//! (its threads are gone once it exits), each sample stamped with the time
//! since QEMU started. After the boot, the guest's own log says when its
//! last CPU came up (memboot's last `smpboot: CPU n … up` line, Linux's
//! `smp: Brought up`): with the entry latency the serial tap measured, that
//! is a host instant; the tap's memory-ready instant ends the window in
//! which idle CPUs should cost nothing (memboot's boot CPU works alone
//! there until memory is ready; in `deferred` the workers start in it).
//! memboot also says when its bring-up ended (`smp: bring-up ended N us
//! after entry`: the last AP's first job or halt, the AP that started the
//! others included), which starts a second window: after bring-up.
//!
//! Each window holds only the samples taken wholly inside it
//! ([`usage_between`]), so neither the vCPUs' start-up before it nor what
//! follows memory ready (the printer AP writing the log out, the first jobs
//! posted to every AP) is counted in it. The edges are the tap's instants
//! moved onto the sampler's clock (the tap's starts when it starts QEMU and
//! says how much later, `tap::clock_offset_us`). What it cannot resolve:
//! the edges derive from the tap's arrival of the kernel's first byte,
//! later than the kernel's entry by the tap's own wake-up latency (so both
//! edges may be that much late), the samples are [`SAMPLE_MS`] apart,
//! and Linux brings a running thread's `schedstat` up to date only at a
//! scheduler tick or a switch (4 ms apart at `HZ=250`), so a thread that
//! runs across an edge may have up to a tick counted on the wrong side of
//! it. A halted vCPU's thread sleeps, and its figure is exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the threads are sampled.
pub const SAMPLE_MS: u64 = 10;

/// Name the vCPU threads (both kernels get it).
pub const QEMU_ARGS: [&str; 2] = ["-name", "guest,debug-threads=on"];

/// One thread's time on a CPU so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadTime {
    pub tid: u32,
    /// Its name (`comm`): `CPU 3/TCG` for a vCPU.
    pub name: String,
    pub cpu_ns: u64,
}

/// QEMU's threads at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When reading the threads began, since QEMU started, ns.
    pub at_ns: u64,
    /// When it ended (the reads take a while, longer when the sampler is
    /// preempted): a sample is inside a window only if both are.
    pub done_ns: u64,
    pub threads: Vec<ThreadTime>,
}

/// Every thread of process `pid`, if it still runs.
pub fn read_threads(pid: u32) -> Option<Vec<ThreadTime>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut threads = Vec::new();
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = entry.path();
        let read = |f: &str| std::fs::read_to_string(path.join(f)).ok();
        let (Some(name), Some(stat)) = (read("comm"), read("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        let Some(cpu_ns) = stat.split_whitespace().next().and_then(|n| n.parse().ok()) else {
            continue;
        };
        threads.push(ThreadTime {
            tid,
            name: name.trim_end().to_string(),
            cpu_ns,
        });
    }
    Some(threads)
}

/// Samples QEMU's threads until stopped, from when `pidfile` (QEMU's
/// `-pidfile`) names its process.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Start sampling; `started` is when QEMU was started.
    pub fn start(pidfile: PathBuf, started: Instant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut pid = None;
            while !stopped.load(Ordering::Relaxed) {
                pid = pid.or_else(|| {
                    std::fs::read_to_string(&pidfile)
                        .ok()
                        .and_then(|p| p.trim().parse::<u32>().ok())
                });
                let at_ns = started.elapsed().as_nanos() as u64;
                if let Some(threads) = pid.and_then(read_threads) {
                    samples.push(Sample {
                        at_ns,
                        done_ns: started.elapsed().as_nanos() as u64,
                        threads,
                    });
                }
                std::thread::sleep(Duration::from_millis(SAMPLE_MS));
            }
            samples
        });
        Sampler { stop, handle }
    }

    /// Stop (once QEMU exited) and hand over the samples.
    pub fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Each thread's CPU time from the first sample taken wholly at or after
/// `from_ns` to the last taken wholly at or before `to_ns` (with the last
/// sample a thread is in: QEMU's threads end one by one as it exits), by
/// thread name (threads of one name summed), and the window covered (ns
/// since QEMU started): inside `from_ns`, so that what ran before it (the
/// vCPUs' own start-up, which TCG translates for) stays out, and inside
/// `to_ns`, so that what runs after it stays out too (at memory ready the
/// printer AP starts writing the log out and the boot CPU posts the APs
/// their first jobs: up to a sample interval of that used to be counted).
/// A window too short to hold two samples ends at the first sample at or
/// after `to_ns` instead, and its end says how far past `to_ns` it reaches
/// ([`report`] says so). `None` without two samples from `from_ns` on.
pub fn usage_between(
    samples: &[Sample],
    from_ns: u64,
    to_ns: u64,
) -> Option<(BTreeMap<String, u64>, u64, u64)> {
    let start = samples.iter().position(|s| s.at_ns >= from_ns)?;
    let first = &samples[start];
    let inside = samples[start..]
        .iter()
        .rposition(|s| s.done_ns <= to_ns)
        .map(|i| start + i)
        .filter(|&i| i > start);
    let end = inside.unwrap_or_else(|| {
        samples
            .iter()
            .position(|s| s.at_ns >= to_ns)
            .unwrap_or(samples.len() - 1)
    });
    let last = &samples[end];
    if last.at_ns <= first.at_ns {
        return None;
    }
    let before: BTreeMap<u32, u64> = first.threads.iter().map(|t| (t.tid, t.cpu_ns)).collect();
    let mut latest: BTreeMap<u32, &ThreadTime> = BTreeMap::new();
    for t in samples[..=end]
        .iter()
        .filter(|s| s.at_ns >= first.at_ns)
        .flat_map(|s| &s.threads)
    {
        latest.insert(t.tid, t);
    }
    let mut by_name = BTreeMap::new();
    for t in latest.values() {
        let used = t.cpu_ns - before.get(&t.tid).copied().unwrap_or(0).min(t.cpu_ns);
        *by_name.entry(t.name.clone()).or_insert(0) += used;
    }
    Some((by_name, first.at_ns, last.at_ns))
}

/// A vCPU thread's index (`CPU 3/TCG` → 3).
pub fn vcpu_index(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("CPU ")?;
    rest.split('/').next()?.parse().ok()
}

/// The line for a window: total, each vCPU's share (CPU 0, the boot CPU,
/// apart from the others together), and QEMU's other threads. `past_ns`:
/// how far the samples reach past the window's end (0 but for a window
/// too short to hold two samples; see [`usage_between`]).
pub fn usage_line(
    what: &str,
    usage: &BTreeMap<String, u64>,
    (from_ns, to_ns): (u64, u64),
    past_ns: u64,
) -> String {
    let total: u64 = usage.values().sum();
    let share = |ns: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * ns as f64 / total as f64
        }
    };
    let mut vcpus: Vec<(u32, u64)> = usage
        .iter()
        .filter_map(|(name, &ns)| Some((vcpu_index(name)?, ns)))
        .collect();
    vcpus.sort();
    let boot_cpu: u64 = vcpus.iter().filter(|v| v.0 == 0).map(|v| v.1).sum();
    let aps: u64 = vcpus.iter().filter(|v| v.0 != 0).map(|v| v.1).sum();
    let other = total - boot_cpu - aps;
    let each: Vec<String> = vcpus
        .iter()
        .map(|&(i, ns)| format!("{i}: {:.1}", share(ns)))
        .collect();
    let past = if past_ns == 0 {
        String::new()
    } else {
        format!(
            "; shorter than two samples, so {:.1} ms past its end",
            past_ns as f64 / 1e6
        )
    };
    format!(
        "host CPU time {what} ({:.3}–{:.3} s after QEMU started{past}): {:.1} ms; vCPU 0 {:.1} %, the other {} vCPUs {:.1} %, QEMU's other threads {:.1} %; each vCPU's % [{}]",
        from_ns as f64 / 1e9,
        to_ns as f64 / 1e9,
        total as f64 / 1e6,
        share(boot_cpu),
        vcpus.iter().filter(|v| v.0 != 0).count(),
        share(aps),
        share(other),
        each.join(", ")
    )
}

/// `[    s.micros] message` → (µs, message).
fn stamped(line: &str) -> Option<(u64, &str)> {
    let rest = line.strip_prefix('[')?;
    let (stamp, message) = rest.split_once(']')?;
    let (s, us) = stamp.trim().split_once('.')?;
    let us: u64 = format!("{us:0<6}").get(..6)?.parse().ok()?;
    Some((
        s.parse::<u64>().ok()? * 1_000_000 + us,
        message.trim_start(),
    ))
}

/// When the guest's last CPU came up, µs on its own clock: memboot's last
/// `smpboot: CPU n (APIC …) up` line, else (Linux) its `smp: Brought up`.
pub fn cpus_up_us(log: &str) -> Option<u64> {
    let lines: Vec<(u64, &str)> = log.lines().filter_map(stamped).collect();
    let memboot = lines
        .iter()
        .filter(|(_, m)| m.starts_with("smpboot: CPU ") && m.contains(") up "))
        .map(|&(us, _)| us)
        .max();
    memboot.or_else(|| {
        lines
            .iter()
            .find(|(_, m)| m.starts_with("smp: Brought up"))
            .map(|&(us, _)| us)
    })
}

/// When memboot's bring-up ended, µs after entry on its own clock (its
/// `smp: bring-up ended N us after entry` line).
pub fn bringup_ended_us(log: &str) -> Option<u64> {
    log.lines().filter_map(stamped).find_map(|(_, m)| {
        m.strip_prefix("smp: bring-up ended ")?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// A figure in ms of one of the serial tap's `run-qemu.sh: host timing:`
/// lines (tools/src/tap.rs), as µs: `entry latency` or `memory ready`.
fn host_timing_us(log: &str, what: &str) -> Option<u64> {
    let line = log
        .lines()
        .filter_map(|l| l.strip_prefix("run-qemu.sh: host timing: "))
        .find_map(|l| l.strip_prefix(what))?;
    let ms: f64 = line.split_whitespace().next()?.parse().ok()?;
    Some((ms * 1000.0) as u64)
}

/// The lines for the log's tail: the whole boot, and from the last CPU up
/// to memory ready.
pub fn report(samples: &[Sample], log: &Path) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
    let mut lines = Vec::new();
    if let Some((usage, from, to)) = usage_between(samples, 0, u64::MAX) {
        lines.push(usage_line("whole boot", &usage, (from, to), 0));
    }
    // The tap's instants count from when it started QEMU, a little after
    // the sampler's origin: moved onto the sampler's clock.
    let offset_us = crate::tap::clock_offset_us(&text).unwrap_or(0);
    let entry = host_timing_us(&text, "entry latency ").map(|us| us + offset_us);
    let ready_ns = host_timing_us(&text, "memory ready ").map(|us| (us + offset_us) * 1000);
    for (start, what) in [
        (cpus_up_us(&text), "from the last CPU up to memory ready"),
        (
            bringup_ended_us(&text),
            "from the end of bring-up to memory ready",
        ),
    ] {
        let start_ns = start.zip(entry).map(|(us, entry)| (us + entry) * 1000);
        if let (Some(start), Some(ready)) = (start_ns, ready_ns.filter(|&r| Some(r) > start_ns)) {
            if let Some((usage, from, to)) = usage_between(samples, start, ready) {
                lines.push(usage_line(
                    what,
                    &usage,
                    (from, to),
                    to.saturating_sub(ready),
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tid: u32, name: &str, ms: u64) -> ThreadTime {
        ThreadTime {
            tid,
            name: name.into(),
            cpu_ns: ms * 1_000_000,
        }
    }

    #[test]
    fn a_window_subtracts_the_sample_before_it() {
        let samples = vec![
            Sample {
                at_ns: 10_000_000,
                done_ns: 10_000_000,
                threads: vec![t(1, "qemu-system-x86", 5), t(2, "CPU 0/TCG", 1)],
            },
            Sample {
                at_ns: 20_000_000,
                done_ns: 20_000_000,
                threads: vec![
                    t(1, "qemu-system-x86", 6),
                    t(2, "CPU 0/TCG", 8),
                    t(3, "CPU 1/TCG", 2),
                ],
            },
            Sample {
                at_ns: 30_000_000,
                done_ns: 30_000_000,
                threads: vec![
                    t(1, "qemu-system-x86", 7),
                    t(2, "CPU 0/TCG", 18),
                    t(3, "CPU 1/TCG", 3),
                ],
            },
        ];
        let (u, from, to) = usage_between(&samples, 15_000_000, u64::MAX).unwrap();
        assert_eq!((from, to), (20_000_000, 30_000_000));
        assert_eq!(u["CPU 0/TCG"], 10_000_000);
        assert_eq!(u["CPU 1/TCG"], 1_000_000);
        assert_eq!(u["qemu-system-x86"], 1_000_000);
        let line = usage_line("after", &u, (from, to), 0);
        assert!(line.contains(": 12.0 ms; vCPU 0 83.3 %"), "{line}");
        assert!(
            line.contains("the other 1 vCPUs 8.3 %, QEMU's other threads 8.3 %"),
            "{line}"
        );
        // From the start: a thread born later counts from zero.
        let (u, _, _) = usage_between(&samples, 0, u64::MAX).unwrap();
        assert_eq!(u["CPU 1/TCG"], 3_000_000);
        // A thread gone from the last sample (QEMU exiting) keeps its time.
        let mut exiting = samples.clone();
        exiting.push(Sample {
            at_ns: 40_000_000,
            done_ns: 40_000_000,
            threads: vec![t(1, "qemu-system-x86", 8)],
        });
        let (u, _, to) = usage_between(&exiting, 15_000_000, u64::MAX).unwrap();
        assert_eq!(
            (u["CPU 0/TCG"], u["qemu-system-x86"], to),
            (10_000_000, 2_000_000, 40_000_000)
        );
        assert!(usage_between(&samples[..1], 0, u64::MAX).is_none());
        // A window ends at the last sample wholly inside it: what ran
        // after its end (the printer, the first jobs) stays out.
        let (u, from, to) = usage_between(&samples, 10_000_000, 25_000_000).unwrap();
        assert_eq!(
            (u["CPU 0/TCG"], from, to),
            (7_000_000, 10_000_000, 20_000_000)
        );
        // A sample whose reading ran past the end is not inside it.
        let mut slow = samples.clone();
        slow[1].done_ns = 26_000_000;
        let (_, _, to) = usage_between(&slow, 0, 25_000_000).unwrap();
        assert_eq!(to, 30_000_000, "falls back to the enclosing samples");
        // One too short for two samples inside ends at the first sample at
        // or after its end, and its line says how far past its end.
        let (u, _, to) = usage_between(&samples, 10_000_000, 15_000_000).unwrap();
        assert_eq!((u["CPU 0/TCG"], to), (7_000_000, 20_000_000));
        let line = usage_line("short", &u, (10_000_000, to), to - 15_000_000);
        assert!(
            line.contains(
                "after QEMU started; shorter than two samples, so 5.0 ms past its end): "
            ),
            "{line}"
        );
        // A window that starts between samples starts at the next one.
        let (_, from, _) = usage_between(&samples, 11_000_000, u64::MAX).unwrap();
        assert_eq!(from, 20_000_000);
    }

    #[test]
    fn the_guest_log_says_when_its_cpus_were_up() {
        let linux =
            "[    0.000000] Linux version 6.1\n[    0.049322] smp: Brought up 1 node, 2 CPUs\n";
        assert_eq!(cpus_up_us(linux), Some(49_322));
        let memboot = "run-qemu.sh: command: x\n[    0.000000] memboot 0.1.0 booting\n[    0.074152] smpboot: CPU 1 (APIC 0x1) up 1861 us after INIT; it starts the other APs\n[    0.114619] smpboot: CPU 2 (APIC 0x2) up 24657 us after INIT\n[    0.118000] smp: Brought up 1 node, 3 CPUs\nrun-qemu.sh: host timing: entry latency 58.672 ms (QEMU's start to the kernel's first serial byte)\nrun-qemu.sh: host timing: memory ready 175.324 ms after QEMU started (entry + the kernel's allocatable_ns)\n";
        assert_eq!(cpus_up_us(memboot), Some(114_619));
        assert_eq!(bringup_ended_us(memboot), None);
        let ended = format!(
            "{memboot}[    1.200000] smp: bring-up ended 121344 us after entry (the last AP's first job or halt)\n"
        );
        assert_eq!(bringup_ended_us(&ended), Some(121_344));
        assert_eq!(host_timing_us(memboot, "entry latency "), Some(58_672));
        assert_eq!(host_timing_us(memboot, "memory ready "), Some(175_324));
        assert_eq!(vcpu_index("CPU 15/TCG"), Some(15));
        assert_eq!(vcpu_index("qemu-system-x86"), None);
    }
}
