//! Where QEMU's host CPU time goes during a boot, thread by thread. Under
//! TCG every vCPU is a host thread, so a vCPU that spins takes host time
//! from the ones working; these lines show each vCPU's share.
//!
//! QEMU names its vCPU threads (`CPU 0/TCG`, `CPU 1/KVM`, …) when started
//! with `-name …,debug-threads=on` ([`QEMU_ARGS`]), and
//! `/proc/PID/task/TID/schedstat` gives each thread's time on a CPU in ns.
//! A thread of this tool samples them every [`SAMPLE_MS`] while QEMU runs
//! (its threads are gone once it exits), each sample stamped with the time
//! since QEMU started. memboot also tells the host three instants on a debug
//! port ([`super::markers`]): its entry, when bring-up ended (the last
//! planned AP ran its first job or halted) and when memory is ready. The
//! sampler takes a sample the moment each arrives, tagged with it
//! ([`Sample::marker`]), and between the last two every [`FAST_SAMPLE_MS`] ([`Pace`]),
//! so a window only a few sample intervals long holds a sample about
//! every [`FAST_SAMPLE_MS`] of it (the reads and the wake-up stretch it a
//! little) instead of fewer than two. With deferred init the APs work in
//! that stretch too, every vCPU on a host CPU of its own on a host with
//! as many: a sample is a read of each thread's open `schedstat` and
//! `stat` ([`ThreadReader`]), a few microseconds, so that the host CPU it
//! takes from a working vCPU stays small.
//!
//! After the boot, four windows ([`report_text`]). The whole boot. From
//! entry to memory ready, between the two markers' samples, with what the
//! boot vCPU did in it: ran, or waited runnable for a host CPU
//! (`schedstat`'s second field). From
//! the last CPU up to memory ready: the guest's log says when its last CPU
//! came up (memboot's last `smpboot: CPU n … up` line, Linux's `smp:
//! Brought up`), which with the entry latency the serial tap measured is a
//! host instant. And after bring-up, the window in which idle CPUs should
//! cost nothing (memboot's boot CPU works alone there until memory is
//! ready): it starts at the sample taken at the bring-up marker; a boot
//! without one (an AP did not come up, or the socket's path would not fit
//! a socket address) starts it at the instant of memboot's `smp: bring-up
//! ended N us after entry` line. Both windows to memory ready end at the
//! tap's memory-ready instant.
//!
//! Each window holds only the samples taken wholly inside it
//! ([`usage_between`]), so neither the vCPUs' start-up before it nor what
//! follows memory ready (the printer AP writing the log out, the first jobs
//! posted to every AP) is counted in it. The tap's instants are moved onto
//! the sampler's clock (the tap's starts when it starts QEMU and says how
//! much later, `tap::clock_offset_us`). What it cannot resolve: the tap's
//! instants derive from its arrival of the kernel's first byte, later than
//! the kernel's entry by the tap's own wake-up latency (so those edges may
//! be that much late); a marker's sample is later than its instant by this
//! tool's wake-up and its reads (two `/proc` files a thread), so work
//! right after the bring-up marker may fall before the window; a bring-up
//! that ends within one sample of memory ready leaves no sample wholly
//! between them, and the window then ends at the ready marker's sample,
//! whose reads run a little past ready; the samples outside the fast
//! stretch are [`SAMPLE_MS`] apart, so a window without a marker may hold
//! fewer than two and then runs past its end (its line says how far, to
//! the end of its last sample's reads); and Linux brings a running thread's `schedstat` up to
//! date only at a scheduler tick or a switch (4 ms apart at `HZ=250`), so
//! a thread that runs across an edge may have up to a tick counted on the
//! wrong side of it, which 1 ms samples do not change. A halted vCPU's
//! thread sleeps, and its figure is exact.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memboot_contract::host_marker::HostMarker;

use super::markers::MarkerSocket;

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
    /// Its time runnable but waiting for a host CPU (`schedstat`'s second
    /// field): what the host's other work took from it.
    pub wait_ns: u64,
    /// Its minor page faults (`stat`'s tenth field): host pages it touched
    /// first, of guest RAM or, for a vCPU translating code run for the
    /// first time, of TCG's translation buffer. Read in the samples taken
    /// at the guest's markers and at the slow pace only ([`ThreadReader::read`]).
    pub minflt: Option<u64>,
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
    /// The guest's marker this sample was taken at, if any.
    pub marker: Option<HostMarker>,
}

/// Reads a process's threads' times, cheaply enough to run every
/// [`FAST_SAMPLE_MS`] beside busy vCPUs: each thread's `schedstat` and
/// `stat` stay open and are read again from their start (`/proc`'s files
/// are regenerated then); the task directory is listed, and new threads opened, only every
/// [`SAMPLE_MS`]. Listing it and opening two files a thread every sample
/// took ~70 µs a sample against ~5 µs so, and at one sample a millisecond
/// during deferred init the workers lost that much of their host CPUs
/// (`tests/bench-results/sampler-cost/notes.md`).
pub struct ThreadReader {
    pid: u32,
    threads: BTreeMap<u32, OpenThread>,
    listed_at: Option<Instant>,
}

struct OpenThread {
    name: String,
    schedstat: std::fs::File,
    stat: std::fs::File,
}

impl ThreadReader {
    pub fn new(pid: u32) -> Self {
        ThreadReader {
            pid,
            threads: BTreeMap::new(),
            listed_at: None,
        }
    }

    /// Every thread's times now, and with `faults` their page faults;
    /// `None` once the process is gone. `stat`, which holds the faults,
    /// costs the kernel more to write than `schedstat` (~23 µs a sample of
    /// six threads against ~5 µs without it), too much for every sample
    /// beside working vCPUs.
    pub fn read(&mut self, faults: bool) -> Option<Vec<ThreadTime>> {
        let due = self
            .listed_at
            .is_none_or(|at| at.elapsed() >= Duration::from_millis(SAMPLE_MS));
        if due {
            self.list()?;
        }
        let mut threads = Vec::with_capacity(self.threads.len());
        let mut ended = Vec::new();
        let mut buf = [0u8; 1024];
        for (&tid, t) in &self.threads {
            let times =
                (t.schedstat.read_at(&mut buf, 0).ok()).and_then(|n| parse_schedstat(&buf[..n]));
            let minflt = faults
                .then(|| t.stat.read_at(&mut buf, 0).ok())
                .map(|n| n.and_then(|n| parse_minflt(&buf[..n])));
            let (Some((cpu_ns, wait_ns)), None | Some(Some(_))) = (times, minflt) else {
                ended.push(tid);
                continue;
            };
            threads.push(ThreadTime {
                tid,
                name: t.name.clone(),
                cpu_ns,
                wait_ns,
                minflt: minflt.flatten(),
            });
        }
        for tid in ended {
            self.threads.remove(&tid);
        }
        if threads.is_empty() && !due {
            // Every thread ended: the process may be gone.
            self.list()?;
        }
        Some(threads)
    }

    /// List the task directory: open threads not seen before, and read the
    /// name again of those still named as the process (QEMU names a thread
    /// just after starting it).
    fn list(&mut self) -> Option<()> {
        let dir = std::fs::read_dir(format!("/proc/{}/task", self.pid)).ok()?;
        self.listed_at = Some(Instant::now());
        let process_name = std::fs::read_to_string(format!("/proc/{}/comm", self.pid)).ok()?;
        let process_name = process_name.trim_end();
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let path = entry.path();
            let unnamed = |t: &OpenThread| t.name == process_name && tid != self.pid;
            if self.threads.get(&tid).is_some_and(|t| !unnamed(t)) {
                continue;
            }
            let (Ok(name), Ok(schedstat), Ok(stat)) = (
                std::fs::read_to_string(path.join("comm")),
                std::fs::File::open(path.join("schedstat")),
                std::fs::File::open(path.join("stat")),
            ) else {
                continue; // the thread ended meanwhile
            };
            self.threads.insert(
                tid,
                OpenThread {
                    name: name.trim_end().to_string(),
                    schedstat,
                    stat,
                },
            );
        }
        Some(())
    }
}

/// A `schedstat` file's first two fields: time on a CPU and time runnable
/// waiting for one, ns.
fn parse_schedstat(text: &[u8]) -> Option<(u64, u64)> {
    let mut fields = std::str::from_utf8(text).ok()?.split_whitespace();
    let cpu_ns = fields.next()?.parse().ok()?;
    let wait_ns = fields.next()?.parse().ok()?;
    Some((cpu_ns, wait_ns))
}

/// A `stat` file's minor page faults (its tenth field; the second, the
/// name, is in parentheses and may hold spaces and parentheses itself).
fn parse_minflt(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    // Fields 3 (state) to 9 come before it.
    after_name.split_whitespace().nth(7)?.parse().ok()
}

/// How often the threads are sampled between the bring-up marker and the
/// memory-ready marker (the deferred workers may run then: see
/// [`ThreadReader`] for what a sample costs them).
pub const FAST_SAMPLE_MS: u64 = 1;

/// The longest the fast sampling lasts when the memory-ready marker never
/// comes (a boot that failed before it).
pub const FAST_BOUND_MS: u64 = 5_000;

/// How far apart the samples are: [`SAMPLE_MS`], but [`FAST_SAMPLE_MS`]
/// from the bring-up marker to the memory-ready marker (or for
/// [`FAST_BOUND_MS`]). A bring-up marker after memory ready (`ondemand`
/// starts the APs then) changes nothing: no window lies between them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pace {
    fast_until: Option<Instant>,
    ready: bool,
}

impl Pace {
    /// `marker` arrived at `now`.
    pub fn marked(&mut self, marker: HostMarker, now: Instant) {
        match marker {
            HostMarker::BringupEnded if !self.ready => {
                self.fast_until = Some(now + Duration::from_millis(FAST_BOUND_MS));
            }
            HostMarker::BringupEnded | HostMarker::Entered => {}
            HostMarker::MemoryReady => {
                self.ready = true;
                self.fast_until = None;
            }
        }
    }

    /// The time from the start of a sample taken at `now` to the next.
    pub fn interval(&self, now: Instant) -> Duration {
        Duration::from_millis(if self.fast(now) {
            FAST_SAMPLE_MS
        } else {
            SAMPLE_MS
        })
    }

    /// Is `now` in the fast stretch?
    pub fn fast(&self, now: Instant) -> bool {
        self.fast_until.is_some_and(|until| now < until)
    }
}

/// Samples QEMU's threads until stopped, from when `pidfile` (QEMU's
/// `-pidfile`) names its process: every [`Pace::interval`], and at once
/// when a marker arrives. One thread owns the samples and the marker
/// socket, and waits on the socket between samples.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Start sampling; `started` is when QEMU was started, `markers` where
    /// its marker bytes arrive.
    pub fn start(pidfile: PathBuf, started: Instant, mut markers: MarkerSocket) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut reader: Option<ThreadReader> = None;
            let mut pace = Pace::default();
            let mut marker = None;
            while !stopped.load(Ordering::Relaxed) {
                reader = reader.or_else(|| {
                    std::fs::read_to_string(&pidfile)
                        .ok()
                        .and_then(|p| p.trim().parse::<u32>().ok())
                        .map(ThreadReader::new)
                });
                let began = Instant::now();
                let at_ns = began.duration_since(started).as_nanos() as u64;
                let faults = marker.is_some() || !pace.fast(began);
                if let Some(threads) = reader.as_mut().and_then(|r| r.read(faults)) {
                    samples.push(Sample {
                        at_ns,
                        done_ns: started.elapsed().as_nanos() as u64,
                        threads,
                        marker,
                    });
                }
                // The interval counts from this sample's start: its reads
                // take part of it.
                marker = markers.next(pace.interval(began).saturating_sub(began.elapsed()));
                if let Some(m) = marker {
                    pace.marked(m, Instant::now());
                }
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

/// What [`usage_between`] found in a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Each thread's CPU time in it, by thread name (threads of one name
    /// summed), ns.
    pub usage: BTreeMap<String, u64>,
    /// Each thread's time runnable but waiting for a host CPU in it, the
    /// same way.
    pub waits: BTreeMap<String, u64>,
    /// Each thread's minor page faults in it, the same way; empty unless
    /// its first and last samples both read them.
    pub faults: BTreeMap<String, u64>,
    /// Its first and last sample's start, ns since QEMU started.
    pub from_ns: u64,
    pub to_ns: u64,
    /// The samples from its first to its last, both counted.
    pub samples: usize,
    /// How far its last sample's reads reach past the end asked for (0
    /// but for a window too short to hold two samples).
    pub past_ns: u64,
    /// The guest's markers its first and last samples were taken at, if
    /// any.
    pub first_marker: Option<HostMarker>,
    pub last_marker: Option<HostMarker>,
}

/// Each thread's CPU time from the first sample taken wholly at or after
/// `from_ns` to the last taken wholly at or before `to_ns` (with the last
/// sample a thread is in: QEMU's threads end one by one as it exits), and
/// the window covered (ns since QEMU started): inside `from_ns`, so that
/// what ran before it (the vCPUs' own start-up, which TCG translates for)
/// stays out, and inside `to_ns`, so that what runs after it stays out too
/// (at memory ready the printer AP starts writing the log out and the boot
/// CPU posts the APs their first jobs). A window too short to hold two
/// samples ends instead at the first later sample taken at or after
/// `to_ns`, or at the guest's memory-ready marker if that comes first (it
/// was taken the moment memory was ready, before the APs had work; a
/// bring-up that ended within a sample's reads of memory ready leaves
/// nothing between the two markers' samples), and says how far past
/// `to_ns` its reads reach ([`Window::past_ns`]). `None` without two
/// samples from `from_ns` on.
pub fn usage_between(samples: &[Sample], from_ns: u64, to_ns: u64) -> Option<Window> {
    let start = samples.iter().position(|s| s.at_ns >= from_ns)?;
    let first = &samples[start];
    let inside = samples[start..]
        .iter()
        .rposition(|s| s.done_ns <= to_ns)
        .map(|i| start + i)
        .filter(|&i| i > start);
    let end = inside.unwrap_or_else(|| {
        samples[start + 1..]
            .iter()
            .position(|s| s.at_ns >= to_ns || s.marker == Some(HostMarker::MemoryReady))
            .map_or(samples.len() - 1, |i| start + 1 + i)
    });
    let last = &samples[end];
    if last.at_ns <= first.at_ns {
        return None;
    }
    let before: BTreeMap<u32, &ThreadTime> = first.threads.iter().map(|t| (t.tid, t)).collect();
    let mut latest: BTreeMap<u32, &ThreadTime> = BTreeMap::new();
    for t in samples[start..=end].iter().flat_map(|s| &s.threads) {
        latest.insert(t.tid, t);
    }
    let (mut usage, mut waits, mut faults) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for t in latest.values() {
        let earlier = before.get(&t.tid);
        let since = |now: u64, then: Option<u64>| now - then.unwrap_or(0).min(now);
        *usage.entry(t.name.clone()).or_insert(0) += since(t.cpu_ns, earlier.map(|e| e.cpu_ns));
        *waits.entry(t.name.clone()).or_insert(0) += since(t.wait_ns, earlier.map(|e| e.wait_ns));
        if let (Some(now), Some(then)) = (t.minflt, earlier.map_or(Some(0), |e| e.minflt)) {
            *faults.entry(t.name.clone()).or_insert(0) += now - then.min(now);
        }
    }
    let faults_read = |s: &Sample| s.threads.iter().all(|t| t.minflt.is_some());
    if !(faults_read(first) && faults_read(last)) {
        faults.clear();
    }
    Some(Window {
        usage,
        waits,
        faults,
        from_ns: first.at_ns,
        to_ns: last.at_ns,
        samples: end - start + 1,
        past_ns: last.done_ns.saturating_sub(to_ns),
        first_marker: first.marker,
        last_marker: last.marker,
    })
}

/// The window from the guest's last CPU up to memory ready: both kernels'
/// boots have it (memboot's last `smpboot: CPU n … up`, Linux's `smp:
/// Brought up`), so the bench sets their waits side by side.
pub const LAST_CPU_UP_TO_READY: &str = "from the last CPU up to memory ready";

/// The window from memboot's entry marker to its memory-ready marker
/// (every memboot mode writes both; Linux neither): all of memboot's timed
/// memmap phases lie in it.
pub const ENTRY_TO_READY: &str = "from entry to memory ready";

/// Where a window's line lists each vCPU's wait for a host CPU.
const EACH_WAITED: &str = "each vCPU's ms waiting runnable for a host CPU [";

/// Where a window's line lists each vCPU's host page faults.
const EACH_FAULTED: &str = "each vCPU's host page faults [";

/// The most any vCPU waited runnable for a host CPU in window `what` of a
/// boot's log (its `run-qemu.sh: host CPU time {what} (…` line), ns:
/// how much host time a phase timed in it may have counted while its
/// vCPU had no CPU. `None` without the line (a log from before the waits
/// were listed, or a boot without the window).
pub fn most_waited_ns(log: &str, what: &str) -> Option<u64> {
    let head = format!("run-qemu.sh: host CPU time {what} (");
    let line = log.lines().find(|l| l.starts_with(&head))?;
    let list = line.split(EACH_WAITED).nth(1)?.split(']').next()?;
    list.split(", ")
        .map(|v| {
            let ms: f64 = v.split(": ").nth(1)?.parse().ok()?;
            Some((ms * 1e6).round() as u64)
        })
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()
}

/// A vCPU thread's index (`CPU 3/TCG` → 3).
pub fn vcpu_index(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("CPU ")?;
    rest.split('/').next()?.parse().ok()
}

/// The line for a window: where it lies (its samples, or how far past
/// its end a window too short for two samples reaches, and the guest's
/// markers its first and last samples were taken at), total, each vCPU's share (CPU
/// 0, the boot CPU, apart from the others together), QEMU's other
/// threads, how long each vCPU waited runnable for a host CPU (the
/// host's other work, or another vCPU, held its CPU: time a timed phase
/// running on it then counts though the guest did nothing), and each
/// vCPU's host page faults (a host page first touched: guest RAM, or the
/// translation buffer as code runs for the first time).
pub fn usage_line(what: &str, w: &Window) -> String {
    let total: u64 = w.usage.values().sum();
    let share = |ns: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * ns as f64 / total as f64
        }
    };
    let vcpus = by_vcpu(&w.usage);
    let boot_cpu: u64 = vcpus.iter().filter(|v| v.0 == 0).map(|v| v.1).sum();
    let aps: u64 = vcpus.iter().filter(|v| v.0 != 0).map(|v| v.1).sum();
    let other = total - boot_cpu - aps;
    let each: Vec<String> = vcpus
        .iter()
        .map(|&(i, ns)| format!("{i}: {:.1}", share(ns)))
        .collect();
    let waited: Vec<String> = by_vcpu(&w.waits)
        .iter()
        .map(|&(i, ns)| format!("{i}: {:.1}", ns as f64 / 1e6))
        .collect();
    let faulted: Vec<String> = by_vcpu(&w.faults)
        .iter()
        .map(|&(i, n)| format!("{i}: {n}"))
        .collect();
    let faulted = if faulted.is_empty() {
        String::new()
    } else {
        format!("; {EACH_FAULTED}{}]", faulted.join(", "))
    };
    let mut detail = if w.past_ns == 0 {
        format!("; {} samples", w.samples)
    } else {
        format!(
            "; shorter than two samples, so {:.1} ms past its end",
            w.past_ns as f64 / 1e6
        )
    };
    let at = |m: Option<HostMarker>| m.map(|m| format!("at the guest's {} marker", m.name()));
    match (at(w.first_marker), at(w.last_marker)) {
        (Some(first), Some(last)) => detail += &format!("; the first {first}, the last {last}"),
        (Some(first), None) => detail += &format!("; the first {first}"),
        (None, Some(last)) => detail += &format!("; the last {last}"),
        (None, None) => {}
    }
    format!(
        "host CPU time {what} ({:.3}–{:.3} s after QEMU started{detail}): {:.1} ms; vCPU 0 {:.1} %, the other {} vCPUs {:.1} %, QEMU's other threads {:.1} %; each vCPU's % [{}]; {EACH_WAITED}{}]{faulted}",
        w.from_ns as f64 / 1e9,
        w.to_ns as f64 / 1e9,
        total as f64 / 1e6,
        share(boot_cpu),
        vcpus.iter().filter(|v| v.0 != 0).count(),
        share(aps),
        share(other),
        each.join(", "),
        waited.join(", ")
    )
}

/// The vCPU threads' figures of a window's map, by vCPU index.
fn by_vcpu(by_name: &BTreeMap<String, u64>) -> Vec<(u32, u64)> {
    let mut vcpus: Vec<(u32, u64)> = by_name
        .iter()
        .filter_map(|(name, &v)| Some((vcpu_index(name)?, v)))
        .collect();
    vcpus.sort();
    vcpus
}

/// The window from the guest's entry marker to its memory-ready marker
/// (samples taken at each): the usage line, and what the boot vCPU did in
/// it: ran, or waited runnable for a host CPU. Before memory is ready the
/// boot CPU works alone (`ondemand`) or first (the worker modes), so a
/// slow round whose vCPU 0 ran the whole window was slow in QEMU's work for
/// it (translating code run for the first time, faulting memory in), and
/// one whose vCPU 0 waited lost that time to the host's other work. `None`
/// without both markers (Linux writes none).
fn entry_to_ready_line(samples: &[Sample]) -> Option<String> {
    let at = |m| samples.iter().find(|s| s.marker == Some(m));
    let (entered, ready) = (at(HostMarker::Entered)?, at(HostMarker::MemoryReady)?);
    let w = usage_between(samples, entered.at_ns, ready.done_ns)?;
    let boot_cpu = |m: &BTreeMap<String, u64>| -> u64 {
        m.iter()
            .filter(|(name, _)| vcpu_index(name) == Some(0))
            .map(|(_, &ns)| ns)
            .sum()
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    Some(format!(
        "{}; vCPU 0 ran {:.1} ms and waited {:.1} ms for a host CPU, of the window's {:.1} ms",
        usage_line(ENTRY_TO_READY, &w),
        ms(boot_cpu(&w.usage)),
        ms(boot_cpu(&w.waits)),
        ms(w.to_ns - w.from_ns)
    ))
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

/// The lines for the log's tail (see [`report_text`]).
pub fn report(samples: &[Sample], log: &Path) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
    report_text(samples, &text)
}

/// The lines for a boot whose log is `text`: the whole boot; from the last
/// CPU up to memory ready; and from the end of bring-up to memory ready,
/// which starts at the sample taken at the guest's bring-up marker when
/// there is one, else at the log's `smp: bring-up ended` instant.
pub fn report_text(samples: &[Sample], text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(w) = usage_between(samples, 0, u64::MAX) {
        lines.push(usage_line("whole boot", &w));
    }
    if let Some(line) = entry_to_ready_line(samples) {
        lines.push(line);
    }
    // The tap's instants count from when it started QEMU, a little after
    // the sampler's origin: moved onto the sampler's clock.
    let offset_us = crate::tap::clock_offset_us(text).unwrap_or(0);
    let entry = host_timing_us(text, "entry latency ").map(|us| us + offset_us);
    let on_host_ns = |us: Option<u64>| us.zip(entry).map(|(us, entry)| (us + entry) * 1000);
    let ready_ns = host_timing_us(text, "memory ready ").map(|us| (us + offset_us) * 1000);
    let bringup_marker_ns = samples
        .iter()
        .find(|s| s.marker == Some(HostMarker::BringupEnded))
        .map(|s| s.at_ns);
    for (start_ns, what) in [
        (on_host_ns(cpus_up_us(text)), LAST_CPU_UP_TO_READY),
        (
            bringup_marker_ns.or_else(|| on_host_ns(bringup_ended_us(text))),
            "from the end of bring-up to memory ready",
        ),
    ] {
        if let (Some(start), Some(ready)) = (start_ns, ready_ns.filter(|&r| Some(r) > start_ns)) {
            if let Some(w) = usage_between(samples, start, ready) {
                lines.push(usage_line(what, &w));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_sees_a_thread_started_later_by_its_name_and_its_time_grow() {
        let mut reader = ThreadReader::new(std::process::id());
        let before = reader.read(false).expect("this process runs");
        let (named, stop) = std::sync::mpsc::channel::<()>();
        let spinner = std::thread::Builder::new()
            .name("reader-spin".into())
            .spawn(move || {
                let start = Instant::now();
                while stop.try_recv().is_err() && start.elapsed() < Duration::from_secs(5) {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        // The directory is listed again only SAMPLE_MS after the last time.
        std::thread::sleep(Duration::from_millis(SAMPLE_MS + 5));
        let first = reader.read(true).expect("this process runs");
        let spin_ns =
            |s: &[ThreadTime]| s.iter().find(|t| t.name == "reader-spin").map(|t| t.cpu_ns);
        assert_eq!(spin_ns(&before), None);
        let at_first = spin_ns(&first).expect("the new thread is listed by its name");
        std::thread::sleep(Duration::from_millis(20));
        let later = reader.read(false).expect("this process runs");
        let at_later = spin_ns(&later).expect("still listed");
        assert!(at_later > at_first, "{at_later} ns after {at_first} ns");
        // Page faults only when asked for, and they count first touches.
        assert!(first.iter().all(|t| t.minflt.is_some()), "{first:?}");
        assert!(later.iter().all(|t| t.minflt.is_none()), "{later:?}");
        let faults = |s: &[ThreadTime]| s.iter().filter_map(|t| t.minflt).sum::<u64>();
        let touched = std::hint::black_box(vec![1u8; 8 << 20]);
        let after_touch = reader.read(true).expect("this process runs");
        assert!(faults(&after_touch) > faults(&first), "{after_touch:?}");
        drop(touched);
        named.send(()).unwrap();
        spinner.join().unwrap();
        std::thread::sleep(Duration::from_millis(SAMPLE_MS + 5));
        let after = reader.read(true).expect("this process runs");
        assert_eq!(spin_ns(&after), None, "an ended thread is dropped");
    }

    #[test]
    fn a_window_line_says_how_long_each_vcpu_waited_for_a_host_cpu() {
        let thread = |tid, name: &str, ms: u64, waited_ms: u64| ThreadTime {
            tid,
            name: name.into(),
            cpu_ns: ms * 1_000_000,
            wait_ns: waited_ms * 1_000_000,
            minflt: Some(waited_ms * 10),
        };
        let sample = |at_ms: u64, waits: [u64; 3]| Sample {
            at_ns: at_ms * 1_000_000,
            done_ns: at_ms * 1_000_000,
            marker: None,
            threads: vec![
                thread(1, "qemu-system-x86", at_ms, waits[0]),
                thread(3, "CPU 1/TCG", at_ms, waits[2]),
                thread(2, "CPU 0/TCG", at_ms, waits[1]),
            ],
        };
        let samples = [sample(10, [1, 1, 2]), sample(20, [9, 3, 7])];
        let w = usage_between(&samples, 0, u64::MAX).unwrap();
        let line = usage_line("whole boot", &w);
        assert!(
            line.ends_with(
                "; each vCPU's ms waiting runnable for a host CPU [0: 2.0, 1: 5.0]; \
                 each vCPU's host page faults [0: 20, 1: 50]"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_window_lists_page_faults_only_when_both_its_ends_read_them() {
        let sample = |at_ms: u64, minflt: Option<u64>| Sample {
            at_ns: at_ms * 1_000_000,
            done_ns: at_ms * 1_000_000,
            marker: None,
            threads: vec![ThreadTime {
                tid: 2,
                name: "CPU 0/TCG".into(),
                cpu_ns: at_ms * 1_000_000,
                wait_ns: 0,
                minflt,
            }],
        };
        let line =
            |samples: &[Sample]| usage_line("w", &usage_between(samples, 0, u64::MAX).unwrap());
        let both = line(&[sample(10, Some(5)), sample(15, None), sample(20, Some(12))]);
        assert!(
            both.ends_with("; each vCPU's host page faults [0: 7]"),
            "{both}"
        );
        for ends in [[None, Some(12)], [Some(5), None]] {
            let one = line(&[sample(10, ends[0]), sample(20, ends[1])]);
            assert!(!one.contains("page faults"), "{one}");
        }
    }

    #[test]
    fn the_most_a_vcpu_waited_is_read_back_from_its_windows_line() {
        let thread = |tid, name: &str, waited_ms: u64| ThreadTime {
            tid,
            name: name.into(),
            cpu_ns: 0,
            wait_ns: waited_ms * 1_000_000,
            minflt: Some(0),
        };
        let sample = |at_ms: u64, waits: [u64; 2]| Sample {
            at_ns: at_ms * 1_000_000,
            done_ns: at_ms * 1_000_000,
            marker: None,
            threads: vec![
                thread(2, "CPU 0/TCG", waits[0]),
                thread(3, "CPU 1/TCG", waits[1]),
            ],
        };
        let w = usage_between(&[sample(10, [1, 2]), sample(20, [4, 9])], 0, u64::MAX).unwrap();
        let log = format!(
            "[    0.001000] boot\nrun-qemu.sh: {}\n",
            usage_line(LAST_CPU_UP_TO_READY, &w)
        );
        assert_eq!(most_waited_ns(&log, LAST_CPU_UP_TO_READY), Some(7_000_000));
        assert_eq!(most_waited_ns(&log, "whole boot"), None);
        let before_waits = log.split("; each vCPU's ms").next().unwrap();
        assert_eq!(most_waited_ns(before_waits, LAST_CPU_UP_TO_READY), None);
    }

    #[test]
    fn stat_gives_the_minor_faults_whatever_the_thread_is_called() {
        let line = |name: &str| {
            format!("4242 ({name}) S 1 4242 4242 0 -1 4194560 123456 0 7 0 10 20 0 0 20 0 9 0\n")
        };
        assert_eq!(parse_minflt(line("CPU 0/TCG").as_bytes()), Some(123456));
        assert_eq!(parse_minflt(line("a) b (c").as_bytes()), Some(123456));
        assert_eq!(parse_minflt(b"4242 (x) S 1 2 3"), None);
        assert_eq!(parse_minflt(b""), None);
    }

    #[test]
    fn schedstat_gives_its_first_two_fields() {
        assert_eq!(parse_schedstat(b"123 45 6\n"), Some((123, 45)));
        assert_eq!(parse_schedstat(b"123\n"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    fn t(tid: u32, name: &str, ms: u64) -> ThreadTime {
        ThreadTime {
            tid,
            name: name.into(),
            cpu_ns: ms * 1_000_000,
            wait_ns: 0,
            minflt: Some(0),
        }
    }

    #[test]
    fn a_window_subtracts_the_sample_before_it() {
        let samples = vec![
            Sample {
                at_ns: 10_000_000,
                done_ns: 10_000_000,
                marker: None,
                threads: vec![t(1, "qemu-system-x86", 5), t(2, "CPU 0/TCG", 1)],
            },
            Sample {
                at_ns: 20_000_000,
                done_ns: 20_000_000,
                marker: None,
                threads: vec![
                    t(1, "qemu-system-x86", 6),
                    t(2, "CPU 0/TCG", 8),
                    t(3, "CPU 1/TCG", 2),
                ],
            },
            Sample {
                at_ns: 30_000_000,
                done_ns: 30_000_000,
                marker: None,
                threads: vec![
                    t(1, "qemu-system-x86", 7),
                    t(2, "CPU 0/TCG", 18),
                    t(3, "CPU 1/TCG", 3),
                ],
            },
        ];
        let w = usage_between(&samples, 15_000_000, u64::MAX).unwrap();
        let (u, from, to) = (&w.usage, w.from_ns, w.to_ns);
        assert_eq!((from, to), (20_000_000, 30_000_000));
        assert_eq!(u["CPU 0/TCG"], 10_000_000);
        assert_eq!(u["CPU 1/TCG"], 1_000_000);
        assert_eq!(u["qemu-system-x86"], 1_000_000);
        let line = usage_line("after", &w);
        assert!(line.contains(": 12.0 ms; vCPU 0 83.3 %"), "{line}");
        assert!(
            line.contains("the other 1 vCPUs 8.3 %, QEMU's other threads 8.3 %"),
            "{line}"
        );
        // From the start: a thread born later counts from zero.
        let u = usage_between(&samples, 0, u64::MAX).unwrap().usage;
        assert_eq!(u["CPU 1/TCG"], 3_000_000);
        // A thread gone from the last sample (QEMU exiting) keeps its time.
        let mut exiting = samples.clone();
        exiting.push(Sample {
            at_ns: 40_000_000,
            done_ns: 40_000_000,
            marker: None,
            threads: vec![t(1, "qemu-system-x86", 8)],
        });
        let w = usage_between(&exiting, 15_000_000, u64::MAX).unwrap();
        assert_eq!(
            (w.usage["CPU 0/TCG"], w.usage["qemu-system-x86"], w.to_ns),
            (10_000_000, 2_000_000, 40_000_000)
        );
        assert!(usage_between(&samples[..1], 0, u64::MAX).is_none());
        // A window ends at the last sample wholly inside it: what ran
        // after its end (the printer, the first jobs) stays out.
        let w = usage_between(&samples, 10_000_000, 25_000_000).unwrap();
        assert_eq!(
            (w.usage["CPU 0/TCG"], w.from_ns, w.to_ns),
            (7_000_000, 10_000_000, 20_000_000)
        );
        // A sample whose reading ran past the end is not inside it.
        let mut slow = samples.clone();
        slow[1].done_ns = 26_000_000;
        let to = usage_between(&slow, 0, 25_000_000).unwrap().to_ns;
        assert_eq!(to, 30_000_000, "falls back to the enclosing samples");
        // One too short for two samples inside ends at the first sample at
        // or after its end, and its line says how far past its end.
        let w = usage_between(&samples, 10_000_000, 15_000_000).unwrap();
        assert_eq!((w.usage["CPU 0/TCG"], w.to_ns), (7_000_000, 20_000_000));
        assert_eq!(w.past_ns, w.to_ns - 15_000_000);
        let line = usage_line("short", &w);
        assert!(
            line.contains(
                "after QEMU started; shorter than two samples, so 5.0 ms past its end): "
            ),
            "{line}"
        );
        // A window that starts between samples starts at the next one.
        let from = usage_between(&samples, 11_000_000, u64::MAX)
            .unwrap()
            .from_ns;
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

    /// A sample at `at_us` (µs since QEMU started) of a 2-vCPU QEMU whose
    /// boot vCPU has run all along, whose AP ran until 100 ms and again
    /// from 116 ms (memory ready), and whose main thread is idle.
    fn at(at_us: u64, marker: Option<HostMarker>) -> Sample {
        let ap_us = at_us.min(100_000) / 10 + at_us.saturating_sub(116_000);
        Sample {
            at_ns: at_us * 1000,
            done_ns: at_us * 1000,
            marker,
            threads: vec![
                ThreadTime {
                    tid: 1,
                    name: "qemu-system-x86".into(),
                    cpu_ns: 3_000_000,
                    wait_ns: 0,
                    minflt: Some(0),
                },
                ThreadTime {
                    tid: 2,
                    name: "CPU 0/TCG".into(),
                    cpu_ns: at_us * 1000,
                    wait_ns: 0,
                    minflt: Some(0),
                },
                ThreadTime {
                    tid: 3,
                    name: "CPU 1/TCG".into(),
                    cpu_ns: ap_us * 1000,
                    wait_ns: 0,
                    minflt: Some(0),
                },
            ],
        }
    }

    /// The log of that boot: its last AP up at 91 ms and bring-up ended
    /// at 101 ms on the sampler's clock (entry 51 ms: the tap's 50 ms plus
    /// its clock's 1 ms offset), memory ready at 115.5 ms.
    const LOG: &str = "[    0.000000] memboot 0.1.0 booting (entry: PVH)\n\
        [    0.040000] smpboot: CPU 1 (APIC 0x1) up 1000 us after INIT; it starts the other APs\n\
        [    0.200000] smp: bring-up ended 50000 us after entry (the last AP's first job or halt)\n\
        run-qemu.sh: host timing: entry latency 50.000 ms (QEMU's start to the kernel's first serial byte)\n\
        run-qemu.sh: host timing: memory ready 114.500 ms after QEMU started (entry + the kernel's allocatable_ns)\n\
        run-qemu.sh: host timing: clock starts 1.000 ms after the CPU-time sampler's (the tap's clock starts with QEMU)\n";

    /// Every 10 ms up to `until_us`.
    fn every_10_ms(from_us: u64, until_us: u64) -> Vec<Sample> {
        (from_us..=until_us)
            .step_by(10_000)
            .map(|us| at(us, None))
            .collect()
    }

    fn line<'a>(lines: &'a [String], what: &str) -> Option<&'a String> {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("host CPU time {what} (")))
    }

    #[test]
    fn the_bringup_window_starts_at_its_marker_and_holds_the_fast_samples() {
        // Sampled every 10 ms, then at the bring-up marker (103 ms), every
        // 1 ms, at the ready marker (116 ms), and every 10 ms again.
        let mut samples = every_10_ms(0, 100_000);
        samples.push(at(103_000, Some(HostMarker::BringupEnded)));
        samples.extend((104_000..=115_000).step_by(1000).map(|us| at(us, None)));
        samples.push(at(116_000, Some(HostMarker::MemoryReady)));
        samples.extend(every_10_ms(126_000, 136_000));
        let lines = report_text(&samples, LOG);
        let after = line(&lines, "from the end of bring-up to memory ready").unwrap();
        // From the marker's sample to the last one before ready (115.5
        // ms): 103..=115 ms, the AP's work after ready left out.
        assert!(
            after.starts_with("host CPU time from the end of bring-up to memory ready (0.103–0.115 s after QEMU started; 13 samples; the first at the guest's bring-up ended marker): 12.0 ms; vCPU 0 100.0 %, the other 1 vCPUs 0.0 %"),
            "{after}"
        );
        // The last CPU up (91 ms) starts at the next sample, at 100 ms.
        let up = line(&lines, "from the last CPU up to memory ready").unwrap();
        assert!(
            up.contains("(0.100–0.115 s after QEMU started; 14 samples): 15.0 ms; vCPU 0 100.0 %"),
            "{up}"
        );
        let whole = line(&lines, "whole boot").unwrap();
        assert!(
            whole.contains("(0.000–0.136 s after QEMU started; 27 samples): "),
            "{whole}"
        );
    }

    #[test]
    fn without_a_marker_the_bringup_window_starts_at_the_log_instant() {
        // No marker (an AP did not come up, or a peer without the
        // device), 10 ms samples only: from the first sample after 101 ms,
        // and too short for two samples before ready, so past it, into the
        // AP's work after ready.
        let samples = every_10_ms(0, 140_000);
        let lines = report_text(&samples, LOG);
        let after = line(&lines, "from the end of bring-up to memory ready").unwrap();
        assert!(
            after.contains("(0.110–0.120 s after QEMU started; shorter than two samples, so 4.5 ms past its end): 14.0 ms; vCPU 0 71.4 %, the other 1 vCPUs 28.6 %"),
            "{after}"
        );
        // A bring-up marker after memory ready (`ondemand` starts the APs
        // then) leaves no window between them.
        let mut late = every_10_ms(0, 110_000);
        late.push(at(116_000, Some(HostMarker::MemoryReady)));
        late.push(at(118_000, Some(HostMarker::BringupEnded)));
        late.extend(every_10_ms(128_000, 148_000));
        let lines = report_text(&late, LOG);
        assert!(line(&lines, "from the end of bring-up to memory ready").is_none());
        assert!(line(&lines, "from the last CPU up to memory ready").is_some());
    }

    #[test]
    fn a_bringup_ending_just_before_ready_ends_at_the_ready_marker() {
        // Bring-up ended 1.6 ms before memory ready: the ready marker's
        // sample (114.8 ms) was still reading at ready (115.5 ms), so no
        // sample lies wholly inside. The window ends at that sample, not
        // at the next one 10 ms later, after the APs got work.
        let mut samples = every_10_ms(0, 110_000);
        samples.push(at(113_900, Some(HostMarker::BringupEnded)));
        let mut ready = at(114_800, Some(HostMarker::MemoryReady));
        ready.done_ns = 115_900_000;
        samples.push(ready);
        samples.extend(every_10_ms(125_900, 135_900));
        let lines = report_text(&samples, LOG);
        let after = line(&lines, "from the end of bring-up to memory ready").unwrap();
        assert!(
            after.contains("(0.114–0.115 s after QEMU started; shorter than two samples, so 0.4 ms past its end; the first at the guest's bring-up ended marker, the last at the guest's memory ready marker): 0.9 ms; vCPU 0 100.0 %, the other 1 vCPUs 0.0 %"),
            "{after}"
        );
    }

    #[test]
    fn entry_to_ready_says_what_the_boot_vcpu_ran_and_waited() {
        // Entry marker at 51 ms, ready marker at 116 ms; between them the
        // boot vCPU ran 40 ms and waited 25 ms runnable.
        let boot_cpu = |at_us: u64, ran_ms: u64, waited_ms: u64, marker| Sample {
            at_ns: at_us * 1000,
            done_ns: at_us * 1000,
            marker,
            threads: vec![ThreadTime {
                wait_ns: waited_ms * 1_000_000,
                minflt: Some(0),
                ..t(2, "CPU 0/TCG", ran_ms)
            }],
        };
        let samples = vec![
            boot_cpu(40_000, 1, 0, None),
            boot_cpu(51_000, 2, 1, Some(HostMarker::Entered)),
            boot_cpu(90_000, 20, 10, None),
            boot_cpu(116_000, 42, 26, Some(HostMarker::MemoryReady)),
            boot_cpu(126_000, 50, 26, None),
        ];
        let lines = report_text(&samples, LOG);
        let entry = line(&lines, "from entry to memory ready").unwrap();
        assert!(
            entry.starts_with("host CPU time from entry to memory ready (0.051–0.116 s after QEMU started; 3 samples; the first at the guest's entry marker, the last at the guest's memory ready marker): 40.0 ms; vCPU 0 100.0 %"),
            "{entry}"
        );
        assert!(
            entry.ends_with(
                "; vCPU 0 ran 40.0 ms and waited 25.0 ms for a host CPU, of the window's 65.0 ms"
            ),
            "{entry}"
        );
        // Without the entry marker (Linux, or a kernel before it), no line.
        let unmarked: Vec<Sample> = samples
            .into_iter()
            .filter(|s| s.marker != Some(HostMarker::Entered))
            .collect();
        assert!(line(&report_text(&unmarked, LOG), "from entry to memory ready").is_none());
    }

    #[test]
    fn the_pace_is_fast_from_bringup_to_ready_or_for_its_bound() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (slow, fast) = (ms(SAMPLE_MS), ms(FAST_SAMPLE_MS));
        let mut pace = Pace::default();
        assert_eq!(pace.interval(t0), slow);
        pace.marked(HostMarker::BringupEnded, t0);
        assert_eq!(pace.interval(t0 + ms(1)), fast);
        pace.marked(HostMarker::MemoryReady, t0 + ms(12));
        assert_eq!(pace.interval(t0 + ms(12)), slow);
        // Without the ready marker, fast only up to the bound.
        let mut unready = Pace::default();
        unready.marked(HostMarker::BringupEnded, t0);
        assert_eq!(unready.interval(t0 + ms(FAST_BOUND_MS - 1)), fast);
        assert_eq!(unready.interval(t0 + ms(FAST_BOUND_MS)), slow);
        // Bring-up ending after memory ready changes nothing.
        let mut ondemand = Pace::default();
        ondemand.marked(HostMarker::MemoryReady, t0);
        ondemand.marked(HostMarker::BringupEnded, t0 + ms(5));
        assert_eq!(ondemand.interval(t0 + ms(6)), slow);
    }
}
