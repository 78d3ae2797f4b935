//! What the host is and the state its memory is in: read from /proc and
//! /sys for the refusal and for every boot's provenance lines, and the
//! wait for `--host-memory cold` (README "Host memory").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::stop::note;

/// Overrides MemAvailable, in MiB (for tests of the refusal).
pub const AVAILABLE_ENV: &str = "MEMBOOT_HOST_AVAILABLE_MIB";

/// The host memory available to a boot, in MiB, and where it was read.
pub struct Available {
    pub mib: u64,
    pub source: &'static str,
}

/// MemAvailable from /proc/meminfo, or [`AVAILABLE_ENV`]; `None` when
/// neither reads as a number of MiB.
pub fn available() -> Option<Available> {
    if let Some(value) = std::env::var(AVAILABLE_ENV).ok().filter(|v| !v.is_empty()) {
        return decimal(&value).map(|mib| Available {
            mib,
            source: AVAILABLE_ENV,
        });
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()
        .and_then(decimal)?;
    Some(Available {
        mib: kib / 1024,
        source: "MemAvailable",
    })
}

/// A decimal number of at most 18 digits (leading zeros aside).
fn decimal(value: &str) -> Option<u64> {
    let digits = value.trim_start_matches('0');
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 18 {
        return None;
    }
    Some(digits.parse().unwrap_or(0))
}

/// The first `key: value` of /proc/cpuinfo.
fn cpuinfo(key: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim_end() == key).then(|| v.trim().to_string())
    })
}

/// The guest's TSC rate in kHz for Linux's tsc_early_khz= (and memboot's
/// tsc_khz=): under TCG the guest reads the host's TSC, whose rate the host
/// kernel knows ("cpu MHz" of a constant-TSC CPU); without it Linux's early
/// timestamps are zero until its own calibration.
pub fn tsc_khz() -> Option<u64> {
    let mhz: f64 = cpuinfo("cpu MHz")?.parse().ok()?;
    Some((mhz * 1000.0) as u64)
}

/// The host line of every boot's provenance: CPU model, TSC rate, CPUs,
/// free memory at the start.
pub fn description(available_mib: u64) -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "{}, TSC {} kHz, {cpus} CPUs, MemAvailable {available_mib} MiB at start",
        cpuinfo("model name").unwrap_or_default(),
        tsc_khz().map_or(String::new(), |k| k.to_string())
    )
}

/// When the last guest run-qemu.sh started exited (ns since the epoch):
/// the next boot's idle time.
pub fn last_exit_file() -> PathBuf {
    std::env::var_os("MEMBOOT_LAST_EXIT_FILE")
        .filter(|v| !v.is_empty())
        .map_or_else(|| "/tmp/memboot-last-guest-exit".into(), PathBuf::from)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Record that a guest exited now.
pub fn record_exit() {
    let file = last_exit_file();
    if std::fs::write(&file, format!("{}\n", now_ns())).is_err() {
        note(&format!(
            "cannot write {} (the next boot's idle time)",
            file.display()
        ));
    }
}

/// Seconds since the last guest exited, to a tenth ("12.3"), if known.
fn idle() -> Option<(u64, String)> {
    let text = std::fs::read_to_string(last_exit_file()).ok()?;
    let last: u128 = text.trim_end_matches('\n').parse().ok()?;
    let ns = now_ns().saturating_sub(last);
    let s = (ns / 1_000_000_000) as u64;
    Some((s, format!("{s}.{}", ns / 100_000_000 % 10)))
}

/// Whether this host reports free pages to its hypervisor, and how that
/// was found.
fn free_page_reporting() -> String {
    let drivers = Path::new("/sys/bus/virtio/drivers/virtio_balloon");
    let mut devices: Vec<PathBuf> = std::fs::read_dir(drivers)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
        .map(|e| e.path())
        .collect();
    devices.sort();
    for device in devices {
        // VIRTIO_BALLOON_F_REPORTING is feature bit 5 (virtio spec 5.5.3).
        if let Ok(bits) = std::fs::read_to_string(device.join("features")) {
            if bits.as_bytes().get(5) == Some(&b'1') {
                return format!(
                    "on (virtio-balloon free page reporting: feature bit 5 of {})",
                    device.display()
                );
            }
        }
    }
    "off (no virtio-balloon device with free page reporting, feature bit 5)".into()
}

/// cold: the boot waits until the last guest exited at least `idle_s` ago
/// (MEMBOOT_COLD_IDLE_S, else [`COLD_IDLE_S`]) and, where the host's kernel
/// counts what it reported ([`REPORTED_KIB`]), until its reporting is quiet:
/// less than [`COLD_QUIET_MIB`] in [`COLD_QUIET`]. Measured here
/// (tests/bench-results/host-memory/): at 16G, 10 s of idle is the shortest
/// whose deferred init is within 5 % of a 60 s idle's; after a 1T guest
/// (16.5 GiB freed) reporting takes about 33 s, in passes of up to ~1.5 GiB
/// every ~2.6 s, then a few tens of MiB per 5 s.
pub const COLD_IDLE_S: u64 = 10;
pub const COLD_QUIET_MIB: u64 = 512;
pub const COLD_QUIET: Duration = Duration::from_secs(5);
const COLD_MAX_WAIT: Duration = Duration::from_secs(300);
pub const REPORTED_KIB: &str = "/sys/module/page_reporting/parameters/reported_kib";

/// The idle a cold boot waits for, in seconds.
pub fn cold_idle_s() -> Result<u64, String> {
    match std::env::var("MEMBOOT_COLD_IDLE_S") {
        Ok(v) if !v.is_empty() => decimal(&v)
            .ok_or_else(|| format!("MEMBOOT_COLD_IDLE_S '{v}' is not a number of seconds")),
        _ => Ok(COLD_IDLE_S),
    }
}

fn reported_kib() -> Option<u64> {
    std::fs::read_to_string(REPORTED_KIB)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Wait for the cold state; the line that says how long and why.
fn wait_cold(idle_s: u64) -> String {
    let waited_from = Instant::now();
    if let Some((s, text)) = idle() {
        if s < idle_s {
            note(&format!(
                "host memory cold: waiting {}s (the last guest exited {text}s ago)",
                idle_s - s
            ));
            std::thread::sleep(Duration::from_secs(idle_s - s));
        }
    }
    let mut quiet = format!("its reporting progress is not exposed ({REPORTED_KIB})");
    if let Some(mut before) = reported_kib() {
        loop {
            std::thread::sleep(COLD_QUIET);
            let after = reported_kib().unwrap_or(before);
            let mib = after.saturating_sub(before) >> 10;
            let s = COLD_QUIET.as_secs();
            quiet = format!("free page reporting quiet: {mib} MiB reported in the last {s} s");
            if mib < COLD_QUIET_MIB {
                break;
            }
            if waited_from.elapsed() > COLD_MAX_WAIT {
                quiet = format!(
                    "free page reporting still busy after {} s: {mib} MiB in the last {s} s",
                    COLD_MAX_WAIT.as_secs()
                );
                note(&format!("host memory cold: {quiet}; booting anyway"));
                break;
            }
            before = after;
        }
    }
    format!(
        "cold: waited {} s: {idle_s} s since the last guest exited, then {quiet}",
        waited_from.elapsed().as_secs()
    )
}

/// Bring the host's memory to the chosen state (waiting for cold); the
/// lines every log records after `run-qemu.sh: host memory: `.
pub fn memory_state(state: Option<super::args::HostMemory>, cold_idle_s: u64) -> Vec<String> {
    use super::args::HostMemory;
    let mut lines = vec![match state {
        Some(HostMemory::Prefault) => "prefault: all guest RAM backed before the guest starts (memory-backend-ram prealloc=on)".to_string(),
        Some(HostMemory::Cold) => wait_cold(cold_idle_s),
        None => "as the host left it (no --host-memory)".to_string(),
    }];
    lines.push(format!(
        "idle {} s since the last guest exited ({})",
        idle().map_or("unknown".into(), |(_, text)| text),
        last_exit_file().display()
    ));
    lines.push(format!("free page reporting {}", free_page_reporting()));
    lines
}
