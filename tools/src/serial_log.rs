//! Reading serial logs: the one place that knows how a line of memboot's
//! (or Linux's, or run-qemu.sh's) log is laid out. The tap, the bench, the
//! plots and the boot tests use it as `memboot_tools::serial_log`; the
//! kernel's host pipeline tests include this file by path
//! (kernel/tests/common/mod.rs): one parser for both.
//!
//! - stamped lines, `[    5.123456] message` ([`parse_stamped`]);
//! - byte ranges, `… [mem 0xSTART-0xEND] rest` ([`mem_range`]);
//! - the unstamped `memboot-summary:` line ([`summary_json`], [`summary`])
//!   and `memboot-input:` line ([`boot_input`]);
//! - run-qemu.sh's `run-qemu.sh: host peak RSS N MiB` ([`host_peak_rss_mib`])
//!   and its `run-qemu.sh: host: …` provenance line ([`host_cpus`]);
//! - Linux's `On node N, zone Z: K pages in unavailable ranges`
//!   ([`unavailable_ranges`]).

use std::fmt;

use memboot_contract::summary::Summary;
pub use memboot_contract::summary::SUMMARY_PREFIX;
use memboot_kernel::boot_input::parse::{self as input_line, InputLineError};
use memboot_kernel::boot_input::{BootInput, INPUT_PREFIX};

/// `[    5.123456] message` → (ns since kernel entry, message). Exactly six
/// digits after the point (dmesg's and memboot's stamp); anything else is
/// not a stamped line.
pub fn parse_stamped(line: &str) -> Option<(u64, String)> {
    let rest = line.strip_prefix('[')?;
    let (stamp, msg) = rest.split_once("] ")?;
    let (secs, micros) = stamp.trim_start().split_once('.')?;
    if micros.len() != 6 {
        return None;
    }
    let ns = secs.parse::<u64>().ok()? * 1_000_000_000 + micros.parse::<u64>().ok()? * 1_000;
    Some((ns, msg.to_string()))
}

/// `… [mem 0xSTART-0xEND] rest` → (START, END + 1, rest trimmed): the
/// inclusive end Linux and memboot print, as a half-open range.
///
/// This replaced two copies that disagreed on `rest`: the boot tests' cut
/// a ` (e820 type N)` / ` (EFI type N)` note off it, the host tests' kept
/// it whole. Whole is right: no kernel line has such a note any more
/// (memboot prints Linux's e820 names, `type N` and `persistent (type N)`
/// included, which `bootmap::kind_of_e820_name` reads), so cutting it could
/// only pass a line of an older format off as a current one. An END of
/// 0xffff_ffff_ffff_ffff (no half-open end) is not a range.
pub fn mem_range(msg: &str) -> Option<(u64, u64, &str)> {
    let rest = &msg[msg.find("[mem ")? + "[mem ".len()..];
    let (start, rest) = rest.split_once('-')?;
    let (end, rest) = rest.split_once(']')?;
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    Some((hex(start)?, hex(end)?.checked_add(1)?, rest.trim()))
}

/// The text after `prefix` if `line` (a serial line: `\r` at the end
/// allowed) starts with it.
fn unstamped<'l>(line: &'l str, prefix: &str) -> Option<&'l str> {
    line.trim_end_matches('\r').strip_prefix(prefix)
}

/// The JSON of `line` if it is a summary line.
pub fn summary_json_of(line: &str) -> Option<&str> {
    unstamped(line, SUMMARY_PREFIX)
}

/// The JSON of the log's summary: its **last** `memboot-summary:` line.
///
/// This replaced copies that took the first. The last is right: a boot
/// whose summary line was cut writes a second, whole one after it (README
/// "Output": "tools that read the last `memboot-summary:` line get a valid
/// one"), so the first can be the cut one. A log with one summary line,
/// every finished boot's, reads the same either way.
pub fn summary_json(text: &str) -> Option<&str> {
    text.lines().rev().find_map(summary_json_of)
}

/// The log's summary ([`summary_json`]) parsed.
pub fn summary(text: &str) -> Result<serde_json::Value, LogError> {
    let json = summary_json(text).ok_or(LogError::NoSummary)?;
    serde_json::from_str(json).map_err(LogError::BadSummary)
}

/// The log's summary ([`summary_json`]) read with the kernel's schema
/// ([`Summary`]): keys a version-0 line lacks read as 0.
pub fn read_summary(text: &str) -> Result<Summary<'static>, LogError> {
    let json = summary_json(text).ok_or(LogError::NoSummary)?;
    serde_json::from_str(json).map_err(LogError::BadSummary)
}

/// The pipeline's input from the log's `memboot-input:` line (the kernel
/// prints one, right before the pipeline runs).
pub fn boot_input(text: &str) -> Result<BootInput, LogError> {
    let line = text
        .lines()
        .rfind(|l| unstamped(l, INPUT_PREFIX).is_some())
        .ok_or(LogError::NoInput)?;
    input_line::parse_line(line).map_err(LogError::BadInput)
}

/// What a log lacks for [`summary`] or [`boot_input`].
#[derive(Debug)]
pub enum LogError {
    NoSummary,
    BadSummary(serde_json::Error),
    NoInput,
    BadInput(InputLineError),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSummary => write!(
                f,
                "the log has no `{}` line: the boot did not finish; boot again (run-qemu.sh --log FILE keeps the whole log)",
                SUMMARY_PREFIX.trim_end()
            ),
            Self::BadSummary(e) => write!(
                f,
                "the log's last summary line is not JSON ({e}): the log is cut or edited; boot again"
            ),
            Self::NoInput => write!(
                f,
                "the log has no `{}` line: the boot failed before its memory-init pipeline, or the kernel predates the line; boot the current kernel again (kernel/tests/fixtures/capture.sh for the fixtures)",
                INPUT_PREFIX.trim_end()
            ),
            Self::BadInput(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LogError {}

/// QEMU's peak resident memory from run-qemu.sh's `run-qemu.sh: host peak
/// RSS N MiB` line in `text` (on its stderr and at the end of `--log`).
///
/// This replaced two copies that disagreed on where the line starts: the
/// boot tests' wanted it at the start of a line, the plot tool's anywhere
/// in one. Anywhere is right: run-qemu.sh appends the line to `--log` after
/// QEMU's output, which ends mid-line when the guest was killed mid-line
/// (a timeout), so the figure then follows the last serial bytes on the
/// same line. The number must be followed by ` MiB` and nothing else.
pub fn host_peak_rss_mib(text: &str) -> Option<u64> {
    const RSS_PREFIX: &str = "run-qemu.sh: host peak RSS ";
    text.lines().find_map(|line| {
        let at = line.find(RSS_PREFIX)? + RSS_PREFIX.len();
        line[at..].strip_suffix(" MiB")?.parse().ok()
    })
}

/// QEMU's minor page faults (`run-qemu.sh: host minor page faults N …`).
pub fn host_minor_faults(text: &str) -> Option<u64> {
    const PREFIX: &str = "run-qemu.sh: host minor page faults ";
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(PREFIX)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The host-memory state a boot started in: the first word after
/// `run-qemu.sh: host memory: ` (`prefault`, `cold`, or `as` for a boot
/// without `--host-memory`); `None` in logs from before the states.
pub fn host_memory_state(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("run-qemu.sh: host memory: ")?;
        let state = rest.split([':', ' ']).next()?;
        ["prefault", "cold", "as"]
            .contains(&state)
            .then(|| state.to_string())
    })
}

/// The host's CPU count from run-qemu.sh's provenance line at the head of
/// a `--log`, `run-qemu.sh: host: MODEL, TSC N kHz, C CPUs, MemAvailable
/// …`: the cores the guest's vCPUs ran on.
pub fn host_cpus(text: &str) -> Option<u64> {
    const HOST_PREFIX: &str = "run-qemu.sh: host: ";
    let line = text.lines().find_map(|l| l.strip_prefix(HOST_PREFIX))?;
    line.split(", ")
        .find_map(|field| field.strip_suffix(" CPUs")?.parse().ok())
}

/// Linux's `On node N, zone Z: K pages in unavailable ranges` (mm/mm_init.c,
/// also printed by memboot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnavailableRanges<'m> {
    pub nid: u32,
    pub zone: &'m str,
    pub pages: u64,
}

/// The message's [`UnavailableRanges`], if it is that line.
pub fn unavailable_ranges(msg: &str) -> Option<UnavailableRanges<'_>> {
    let (nid, rest) = msg.strip_prefix("On node ")?.split_once(", zone ")?;
    let (zone, count) = rest.split_once(": ")?;
    Some(UnavailableRanges {
        nid: nid.parse().ok()?,
        zone,
        pages: count
            .strip_suffix(" pages in unavailable ranges")?
            .parse()
            .ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_lines() {
        assert_eq!(
            parse_stamped("[    0.033176] hello"),
            Some((33_176_000, "hello".into()))
        );
        assert_eq!(
            parse_stamped("[  123.000001] x y"),
            Some((123_000_001_000, "x y".into()))
        );
        assert_eq!(parse_stamped("no stamp"), None);
        assert_eq!(parse_stamped("[ 1.5] short"), None);
        assert_eq!(parse_stamped("memboot-summary: {}"), None);
    }

    #[test]
    fn mem_ranges() {
        assert_eq!(
            mem_range("BIOS-e820: [mem 0x0000000000000000-0x000000000009fbff] usable"),
            Some((0, 0x9fc00, "usable"))
        );
        assert_eq!(
            mem_range("ACPI: SRAT: Node 1 PXM 2 [mem 0x240000000-0x33fffffff]"),
            Some((0x2_4000_0000, 0x3_4000_0000, ""))
        );
        assert_eq!(
            mem_range(
                "BIOS-e820: [mem 0x0000000000000000-0x0000000000000fff] persistent (type 12)"
            ),
            Some((0, 0x1000, "persistent (type 12)"))
        );
        assert_eq!(mem_range("memblock: 3 memory regions"), None);
        assert_eq!(mem_range("[mem 0x0-0xffffffffffffffff] all"), None);
        assert_eq!(mem_range("[mem 10-0x20] no 0x"), None);
    }

    #[test]
    fn the_last_summary_line_is_the_summary() {
        let cut = "[    0.100000] a\r\nmemboot-summary: {\"status\":\"o\r\n[    0.200000] memboot: the summary line was cut\r\nmemboot-summary: {\"status\":\"summary\"}\r\n";
        assert_eq!(summary_json(cut), Some("{\"status\":\"summary\"}"));
        assert_eq!(summary(cut).unwrap()["status"], "summary");
        assert!(matches!(
            summary("x memboot-summary: {}\n"),
            Err(LogError::NoSummary)
        ));
        let e = summary("memboot-summary: {\"a\":\n").unwrap_err();
        assert!(matches!(e, LogError::BadSummary(_)), "{e}");
        assert!(e.to_string().contains("boot again"));
    }

    #[test]
    fn the_input_line_reads_back_or_says_why_not() {
        let e = boot_input("[    0.1] booting\n").unwrap_err();
        assert!(
            e.to_string().contains("has no `memboot-input:` line"),
            "{e}"
        );
        let e = boot_input("memboot-input: {\"srat\":null}\r\n").unwrap_err();
        assert!(e.to_string().contains("`firmware_map` is missing"), "{e}");
    }

    #[test]
    fn host_rss_anywhere_in_a_line() {
        assert_eq!(
            host_peak_rss_mib("a\nrun-qemu.sh: host peak RSS 1234 MiB\n"),
            Some(1234)
        );
        // After a guest killed mid-line (no newline before run-qemu.sh's line).
        assert_eq!(
            host_peak_rss_mib("[    1.000000] deferredrun-qemu.sh: host peak RSS 77 MiB\n"),
            Some(77)
        );
        assert_eq!(host_peak_rss_mib("run-qemu.sh: host peak RSS 12 KiB"), None);
        assert_eq!(host_peak_rss_mib("run-qemu.sh: host peak RSS  MiB"), None);
        assert_eq!(host_peak_rss_mib("no figure"), None);
    }

    #[test]
    fn host_cpus_from_the_provenance_line() {
        let log = "run-qemu.sh: command: ./run-qemu.sh -m 1G\n\
                   run-qemu.sh: host: AMD EPYC, TSC 2596128 kHz, 2 CPUs, MemAvailable 23553 MiB at start\n\
                   [    0.002144] memboot 0.1.0 booting\n";
        assert_eq!(host_cpus(log), Some(2));
        assert_eq!(
            host_cpus("run-qemu.sh: host: Xeon, 2 CPUs, TSC 1 kHz, 64 CPUs, x\n"),
            Some(2),
            "the first field that is a count of CPUs"
        );
        assert_eq!(host_cpus("[    0.1] 16 CPUs, online\n"), None);
        assert_eq!(host_cpus("run-qemu.sh: host: Xeon, many CPUs\n"), None);
    }

    #[test]
    fn unavailable_range_lines() {
        assert_eq!(
            unavailable_ranges("On node 1, zone Normal: 32 pages in unavailable ranges"),
            Some(UnavailableRanges {
                nid: 1,
                zone: "Normal",
                pages: 32
            })
        );
        assert_eq!(unavailable_ranges("On node 0 totalpages: 1048446"), None);
        assert_eq!(
            unavailable_ranges("On node 0, zone DMA: 97 pages in use"),
            None
        );
    }
}
