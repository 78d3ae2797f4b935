//! The serial tap run-qemu.sh boots every guest through (`memboot-tap`):
//! it starts QEMU, passes its serial output on to the terminal and the
//! log as it arrives, and times it on the host from QEMU's start, the two
//! figures a user compares kernels by before any of the kernel's own:
//!
//! - **entry latency**: QEMU's start to the kernel's first serial byte. memboot
//!   writes its first line at kernel entry, past the log ring
//!   (`hw::boot::handoff::entry_line`); Linux's first byte is its console coming up.
//! - **QEMU start to memory ready**: memboot holds its lines back, so the
//!   host cannot see its ready line arrive; it is the entry line's arrival
//!   plus the kernel's own `allocatable_ns` (both count from entry). Linux
//!   prints synchronously by then: the arrival of its last `node N deferred
//!   pages initialised` line ([`LINUX_READY`]; [`linux_log::READY_LINE`]
//!   in a boot that deferred nothing; with huge pages the bench adds the
//!   printk time 6.12 and 7.3 then spend writing their struct pages,
//!   `LinuxBoot::init_late_huge_ns`). Both are timed from QEMU's start on
//!   the host's clock, so the bench can set one over the other: Linux's own
//!   clock starts at its entry, memboot's too, and neither sees firmware.
//!
//! The timing is done in [`Tap`], host-tested; the binary only moves bytes.

use crate::linux_log;
use crate::serial_log;

/// Lines the tap adds to the log, after the boot's own.
pub const HOST_TIMING: &str = "run-qemu.sh: host timing: ";
/// The environment variable run-qemu.sh gives the tap its CPU-time
/// sampler's clock origin in (ns since the UNIX epoch): the tap's clock
/// starts later, when it starts QEMU, and says how much later
/// ([`Tap::clock_offset_us`]), so that the sampler can place the tap's
/// instants on its own clock.
pub const CLOCK_ORIGIN_ENV: &str = "MEMBOOT_CLOCK_ORIGIN_NS";
/// The tap's line saying how far its clock runs behind the sampler's.
pub const CLOCK_OFFSET: &str = "clock starts ";
/// What memboot's entry line (`hw::boot::handoff::entry_line`) holds, after its
/// version: firmware and bootloader may print before it (OVMF does).
pub const MEMBOOT_ENTRY: &str = " booting (entry: ";
/// How [`Tap::ready_us`] says it timed Linux: the arrival of its last
/// deferred-init line. Logs written before it name [`LINUX_READY_LINE`].
pub const LINUX_READY: &str = "Linux's last deferred-init line arrived";
/// How logs made before [`LINUX_READY`] timed Linux, and how a boot that
/// deferred nothing is timed: the arrival of [`linux_log::READY_LINE`].
pub const LINUX_READY_LINE: &str = "Linux's ready line arrived";

/// The output seen so far and when it arrived.
#[derive(Default)]
pub struct Tap {
    text: Vec<u8>,
    /// (end offset in `text`, µs after QEMU started) of each read.
    arrivals: Vec<(usize, u64)>,
    /// How long after the CPU-time sampler's clock origin this tap's
    /// clock started, µs, when run-qemu.sh gave it ([`CLOCK_ORIGIN_ENV`]).
    pub clock_offset_us: Option<u64>,
}

impl Tap {
    pub fn new() -> Self {
        Tap::default()
    }

    /// `bytes` arrived `at_us` after QEMU started.
    pub fn feed(&mut self, bytes: &[u8], at_us: u64) {
        if bytes.is_empty() {
            return;
        }
        self.text.extend_from_slice(bytes);
        self.arrivals.push((self.text.len(), at_us));
    }

    /// When the byte at `offset` arrived.
    fn arrival_us(&self, offset: usize) -> Option<u64> {
        let i = self.arrivals.partition_point(|&(end, _)| end <= offset);
        self.arrivals.get(i).map(|&(_, us)| us)
    }

    /// Where the first line holding `needle` starts, before the text
    /// `stop` (a line of its own) if there is one.
    fn line_offset(&self, needle: &str, stop: Option<&str>) -> Option<usize> {
        self.line_offsets(needle, stop).first().copied()
    }

    /// Where each line holding `needle` starts, up to the text `stop` (a
    /// line of its own) if there is one.
    fn line_offsets(&self, needle: &str, stop: Option<&str>) -> Vec<usize> {
        let text = String::from_utf8_lossy(&self.text);
        let mut offsets = Vec::new();
        let mut offset = 0;
        for line in text.split_inclusive('\n') {
            if stop.is_some_and(|s| line.starts_with(s)) {
                break;
            }
            if let Some(at) = line.find(needle) {
                // The line's own start: after anything the firmware left
                // on the same line (a stamped line begins with '[').
                offsets.push(offset + line[..at].rfind('[').unwrap_or(0));
            }
            offset += line.len();
        }
        offsets
    }

    /// The kernel's first serial byte: memboot's entry line, or the first
    /// byte of a kernel that has none (Linux prints nothing before its
    /// console, and SeaBIOS nothing on the PVH path).
    pub fn entry_us(&self) -> Option<u64> {
        let offset = self.line_offset(MEMBOOT_ENTRY, None).unwrap_or(0);
        self.arrival_us(offset)
    }

    /// When memory was ready, µs after QEMU started, and how it was read.
    pub fn ready_us(&self) -> Option<(u64, &'static str)> {
        let text = String::from_utf8_lossy(&self.text);
        if let Ok(summary) = serial_log::read_summary(&text) {
            let ns = Some(summary.allocatable_ns).filter(|&ns| ns > 0)?;
            return Some((
                self.entry_us()? + ns / 1000,
                "entry + the kernel's allocatable_ns",
            ));
        }
        let stop = Some(linux_log::DMESG_BEGIN);
        if let Some(last) = self
            .line_offsets(linux_log::DEFERRED_LINE, stop)
            .last()
            .copied()
        {
            return Some((self.arrival_us(last)?, LINUX_READY));
        }
        let ready_line = format!("] {}", linux_log::READY_LINE);
        let offset = self.line_offset(&ready_line, stop)?;
        Some((self.arrival_us(offset)?, LINUX_READY_LINE))
    }

    /// The tap's lines for the log (without their newlines).
    pub fn report(&self) -> Vec<String> {
        let ms = |us: u64| format!("{}.{:03} ms", us / 1000, us % 1000);
        let mut lines = Vec::new();
        match self.entry_us() {
            Some(us) => lines.push(format!(
                "{HOST_TIMING}entry latency {} (QEMU's start to the kernel's first serial byte)",
                ms(us)
            )),
            None => lines.push(format!("{HOST_TIMING}no serial output")),
        }
        if let Some((us, how)) = self.ready_us() {
            lines.push(format!(
                "{HOST_TIMING}memory ready {} after QEMU started ({how})",
                ms(us)
            ));
        }
        if let Some(us) = self.clock_offset_us {
            lines.push(format!(
                "{HOST_TIMING}{CLOCK_OFFSET}{} after the CPU-time sampler's (the tap's clock starts with QEMU)",
                ms(us)
            ));
        }
        lines
    }
}

/// The tap's clock offset from the CPU-time sampler's, µs, from its line.
pub fn clock_offset_us(log: &str) -> Option<u64> {
    log.lines()
        .filter_map(|l| l.strip_prefix(HOST_TIMING)?.strip_prefix(CLOCK_OFFSET))
        .find_map(|rest| {
            let (ms, frac) = rest.split_once(" ms")?.0.split_once('.')?;
            Some(ms.parse::<u64>().ok()? * 1000 + frac.parse::<u64>().ok()?)
        })
}

/// Was the log's Linux boot timed at the arrival of its ready line
/// ([`LINUX_READY_LINE`]) rather than of its last deferred-init line?
pub fn timed_at_linux_ready_line(log: &str) -> bool {
    log.lines().any(|l| {
        l.strip_prefix(HOST_TIMING).is_some_and(|rest| {
            rest.starts_with("memory ready ") && rest.contains(LINUX_READY_LINE)
        })
    })
}

/// The figures of a log's host-timing lines: (entry latency, QEMU start to
/// memory ready), in µs.
pub fn host_timing_us(log: &str) -> (Option<u64>, Option<u64>) {
    let figure = |what: &str| {
        log.lines()
            .filter_map(|l| l.strip_prefix(HOST_TIMING)?.strip_prefix(what))
            .find_map(|rest| {
                let (ms, frac) = rest.split_once(" ms")?.0.split_once('.')?;
                Some(ms.parse::<u64>().ok()? * 1000 + frac.parse::<u64>().ok()?)
            })
    };
    (figure("entry latency "), figure("memory ready "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(chunks: &[(&str, u64)]) -> Tap {
        let mut t = Tap::new();
        for &(bytes, at) in chunks {
            t.feed(bytes.as_bytes(), at);
        }
        t
    }

    #[test]
    fn bytes_are_timed_by_the_read_that_brought_them() {
        let t = tap(&[("[ 0.0] a\n[ 0", 100), (".1] b\n", 250), ("c", 300)]);
        let at: Vec<_> = [0, 11, 12, 17, 18, 19]
            .iter()
            .map(|&o| t.arrival_us(o))
            .collect();
        assert_eq!(
            at,
            [Some(100), Some(100), Some(250), Some(250), Some(300), None]
        );
        // No memboot entry line: the kernel's first byte is the first byte.
        assert_eq!(t.entry_us(), Some(100));
    }

    const ENTRY: &str = "[    0.000000] memboot 0.1.0 booting (entry: PVH)\r\n";

    #[test]
    fn memboot_ready_is_entry_plus_its_own_clock() {
        let summary = r#"memboot-summary: {"status":"ok","allocatable_ns":80972919}"#;
        let t = tap(&[
            (ENTRY, 381_970),
            (
                &format!("[    0.07] boot complete\r\n{summary}\r\n"),
                600_000,
            ),
        ]);
        assert_eq!(t.ready_us().unwrap().0, 381_970 + 80_972);
        let report = t.report();
        assert_eq!(
            report,
            [
                "run-qemu.sh: host timing: entry latency 381.970 ms (QEMU's start to the kernel's first serial byte)",
                "run-qemu.sh: host timing: memory ready 462.942 ms after QEMU started (entry + the kernel's allocatable_ns)",
            ]
        );
        let log = report.join("\n");
        assert_eq!(host_timing_us(&log), (Some(381_970), Some(462_942)));
    }

    #[test]
    fn firmware_output_before_the_entry_line_is_not_the_entry() {
        // OVMF clears the screen and names the boot option, without a
        // newline before the kernel's line in the worst case.
        let t = tap(&[
            ("\u{1b}[2J\u{1b}[01;01HBdsDxe: loading Boot0001\r\n", 1_000),
            ("BdsDxe: starting Boot0001 ", 2_000),
            (ENTRY, 17_000_000),
        ]);
        assert_eq!(t.entry_us(), Some(17_000_000));
    }

    #[test]
    fn memboot_without_ready_reports_entry_only() {
        let t = tap(&[
            (ENTRY, 5),
            (
                "memboot-summary: {\"status\":\"bad_option\",\"allocatable_ns\":0}\r\n",
                9,
            ),
        ]);
        assert_eq!(t.ready_us(), None);
        assert_eq!(t.report().len(), 1);
    }

    #[test]
    fn linux_ready_is_its_last_deferred_line_on_the_console_not_in_the_dmesg_dump() {
        let console = format!(
            "[    0.000000] Linux version 6.1\n[   14.400000] node 1 deferred pages initialised in 800ms\n[   14.500000] node 0 deferred pages initialised in 900ms\n[   14.600000] {}\n",
            linux_log::READY_LINE
        );
        let dump = format!(
            "{}\n[   14.700000] node 2 deferred pages initialised in 900ms\n[   14.800000] {}\n",
            linux_log::DMESG_BEGIN,
            linux_log::READY_LINE
        );
        let node0 = console.find("[   14.5").unwrap();
        let t = tap(&[
            (&console[..20], 330_000),
            (&console[20..node0], 14_900_000),
            (&console[node0..], 15_000_000),
            (&dump, 16_000_000),
        ]);
        assert_eq!(t.entry_us(), Some(330_000));
        assert_eq!(t.ready_us(), Some((15_000_000, LINUX_READY)));
        let report = t.report().join("\n");
        assert!(report.contains(LINUX_READY), "{report}");
        assert!(!timed_at_linux_ready_line(&report));
        let only_dump = tap(&[(&dump, 16_000_000)]);
        assert_eq!(only_dump.ready_us(), None);
    }

    #[test]
    fn linux_that_deferred_nothing_is_ready_at_its_ready_line() {
        let console = format!(
            "[    0.000000] Linux version 6.1\n[   14.600000] {}\n",
            linux_log::READY_LINE
        );
        let t = tap(&[(&console[..20], 330_000), (&console[20..], 15_000_000)]);
        assert_eq!(t.ready_us(), Some((15_000_000, LINUX_READY_LINE)));
        assert!(timed_at_linux_ready_line(&t.report().join("\n")));
    }

    #[test]
    fn the_clock_offset_is_reported_and_read_back() {
        let mut t = tap(&[(ENTRY, 5)]);
        assert_eq!(clock_offset_us(&t.report().join("\n")), None);
        t.clock_offset_us = Some(3_250);
        let report = t.report().join("\n");
        assert_eq!(clock_offset_us(&report), Some(3_250), "{report}");
    }

    #[test]
    fn nothing_printed() {
        let t = Tap::new();
        assert_eq!(t.report(), ["run-qemu.sh: host timing: no serial output"]);
        assert_eq!(host_timing_us(""), (None, None));
    }
}
