//! Booting memboot under QEMU from tests, through the user-facing
//! `run-qemu.sh`, with a wall-clock bound and kill-on-drop, and parsing what
//! the kernel printed on serial.
//!
//! The image is built once per test binary (`run-qemu.sh --build-only`, with
//! its own generous bound, since a fresh clone compiles the bootloader's
//! stages first); each boot then only boots.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use memboot_contract::summary::Summary;
use memboot_kernel::boot_input::BootInput;
use serde::Deserialize;

use memboot_tools::serial_log as log;

// The page-by-page model of memory init from a logged firmware map, shared
// with the kernel's host pipeline tests, whose file it is: one model, two
// test suites. A plain comment: outer docs here would make rustdoc resolve
// the module's own intra-doc links (`Map`, `Facts`) from this crate's root.
#[path = "../../kernel/tests/common/model.rs"]
pub mod model;
/// The model's input from a boot's `memboot-input:` line, shared the same
/// way.
#[path = "../../kernel/tests/common/model_input.rs"]
pub mod model_input;
pub mod readme_figures;

/// run-qemu.sh's documented exit codes (README "Exit codes").
pub mod exit_code {
    pub const OK: i32 = 0;
    pub const KERNEL_FAILURE: i32 = 1;
    pub const QEMU_FAILURE: i32 = 2;
    pub const TIMEOUT: i32 = 3;
    pub const SETUP_FAILURE: i32 = 4;
    pub const USAGE: i32 = 64;
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A child process in its own process group, killed (whole group) on drop.
struct GroupChild(Child);

impl Drop for GroupChild {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: kill(2) on our own child's process group; no memory is involved.
            unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
            let _ = self.0.wait();
        }
    }
}

/// What a finished run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Run `run-qemu.sh ARGS`, killing it (and QEMU) after `wall`.
pub fn run_script(args: &[&str], wall: Duration) -> Run {
    let mut cmd = Command::new(repo_root().join("run-qemu.sh"));
    cmd.args(args);
    run_bounded(cmd, wall)
}

/// Run `cmd` in a process group of its own, killing the group (QEMU
/// included) after `wall`.
pub fn run_bounded(mut cmd: Command, wall: Duration) -> Run {
    let what = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = GroupChild(cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}")));
    let mut out = child.0.stdout.take().unwrap();
    let mut err = child.0.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let deadline = Instant::now() + wall;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let timed_out = status.is_none();
    drop(child); // kills the group if still running, which closes the pipes
    let stdout = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    if timed_out {
        panic!(
            "{what} exceeded the test's wall-clock bound of {wall:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        );
    }
    let exit_code = status.and_then(|s| s.code()).unwrap_or(-1);
    Run {
        exit_code,
        stdout,
        stderr,
    }
}

/// Build the kernel and images once per test process.
pub fn ensure_built() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let result = BUILT.get_or_init(|| {
        let run = run_script(&["--build-only"], Duration::from_secs(30 * 60));
        if run.exit_code == 0 {
            Ok(())
        } else {
            Err(format!(
                "run-qemu.sh --build-only exited {}:\n{}\n{}",
                run.exit_code, run.stdout, run.stderr
            ))
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Serialise boots within a test binary: these machines have 2 cores and a
/// TCG guest with N vCPUs wants N of them; parallel boots only make every
/// wall-clock bound less meaningful.
fn boot_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// One boot's serial log, parsed.
#[derive(Debug)]
pub struct Boot {
    pub run: Run,
    /// `(timestamp_ns, message)` for each `[    s.micros] message` line.
    pub lines: Vec<(u64, String)>,
    /// The `memboot-summary:` line, if the kernel printed one, typed and
    /// as JSON.
    pub summary: Option<Summary<'static>>,
    pub summary_json: Option<serde_json::Value>,
}

impl Boot {
    /// A boot of `run` whose log has `lines` and the summary line
    /// `summary_json`, read with the schema (a line the schema cannot
    /// read is a failure).
    pub fn new(
        run: Run,
        lines: Vec<(u64, String)>,
        summary_json: Option<serde_json::Value>,
    ) -> Self {
        let summary = summary_json.as_ref().map(|v| {
            Summary::deserialize(v)
                .unwrap_or_else(|e| panic!("the summary line does not fit the schema ({e}): {v}"))
        });
        Boot {
            run,
            lines,
            summary,
            summary_json,
        }
    }

    /// QEMU's peak resident memory as run-qemu.sh reported it
    /// (`run-qemu.sh: host peak RSS N MiB`).
    pub fn host_peak_rss_mib(&self) -> Option<u64> {
        log::host_peak_rss_mib(&self.run.stderr)
    }

    /// What the kernel ran its pipeline on: the log's `memboot-input:` line.
    pub fn boot_input(&self) -> BootInput {
        log::boot_input(&self.run.stdout).unwrap_or_else(|e| panic!("{e}\n{}", self.describe()))
    }

    /// The summary line, read with the schema the kernel writes it by.
    pub fn summary(&self) -> &Summary<'static> {
        self.summary
            .as_ref()
            .unwrap_or_else(|| panic!("no memboot-summary line in:\n{}", self.describe()))
    }
    /// The summary line as JSON, for what the schema does not type: key
    /// order, optional fields, the raw numbers.
    pub fn summary_json(&self) -> &serde_json::Value {
        self.summary_json
            .as_ref()
            .unwrap_or_else(|| panic!("no memboot-summary line in:\n{}", self.describe()))
    }
    /// The timestamp (ns since kernel entry) of the first message that
    /// starts with `prefix`.
    pub fn first_stamp_ns(&self, prefix: &str) -> u64 {
        self.lines
            .iter()
            .find(|(_, m)| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line\n{}", self.describe()))
            .0
    }
    /// Messages (without timestamps) containing `needle`.
    pub fn messages_with<'a>(&'a self, needle: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.lines
            .iter()
            .map(|(_, m)| m.as_str())
            .filter(move |m| m.contains(needle))
    }
    pub fn has_message(&self, needle: &str) -> bool {
        self.messages_with(needle).next().is_some()
    }
    /// RAM pages of the bootloader's memory map as the kernel printed it
    /// (its `memboot-input:` line's usable and bootloader entries),
    /// computed here as memblock defines present memory:
    /// overlapping or adjacent RAM ranges merge, then round inward to whole
    /// 4 KiB pages. Independent of the kernel's own page counts.
    pub fn firmware_ram_pages(&self) -> u64 {
        self.firmware_ram_ranges()
            .iter()
            .map(|&(start, end)| (end / 4096).saturating_sub(start.div_ceil(4096)))
            .sum()
    }

    /// Pages of the 128 MiB sections that hold RAM in the logged map: the
    /// struct pages a kernel that initialises every present section whole
    /// writes (Linux does: present pages plus `init_unavailable_range()`'s
    /// holes, `tests/fixtures/linux-6.1-64g-2nodes.log`).
    pub fn firmware_section_pages(&self) -> u64 {
        const SECTION_SHIFT: u32 = 27;
        let mut sections: Vec<u64> = self
            .firmware_ram_ranges()
            .iter()
            .filter(|(start, end)| end / 4096 > start.div_ceil(4096))
            .flat_map(|&(start, end)| (start >> SECTION_SHIFT)..=((end - 1) >> SECTION_SHIFT))
            .collect();
        sections.sort_unstable();
        sections.dedup();
        sections.len() as u64 * (1 << (SECTION_SHIFT - 12))
    }

    /// The RAM ranges `[start, end)` of the logged map (usable and the
    /// bootloader's), overlapping or adjacent ones merged.
    pub fn firmware_ram_ranges(&self) -> Vec<(u64, u64)> {
        let mut ram: Vec<(u64, u64)> = self
            .boot_input()
            .map
            .iter()
            .filter(|e| e.kind.is_ram())
            .map(|e| (e.start, e.start + e.len_bytes))
            .collect();
        assert!(!ram.is_empty(), "no RAM lines in:\n{}", self.describe());
        ram.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (start, end) in ram {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    /// The whole run for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "exit code {}\n--- serial ---\n{}\n--- stderr ---\n{}",
            self.run.exit_code, self.run.stdout, self.run.stderr
        )
    }
}

/// The boot as [`model`] sees it: its firmware map, SRAT, heap and options
/// read from its own log, nothing the kernel computed from them.
impl Boot {
    /// The value of kernel option `key` on the logged command line, if
    /// given.
    pub fn kernel_option(&self, key: &str) -> Option<String> {
        self.boot_input()
            .cmdline
            .split_ascii_whitespace()
            .find_map(|w| Some(w.strip_prefix(key)?.strip_prefix('=')?.to_string()))
    }

    /// The model's input, from the log's `memboot-input:` line: the
    /// firmware map, SRAT, heap, physical address width and the options
    /// the kernel ran with (`model_input`).
    pub fn model_map(&self) -> model::Map {
        let input = self.boot_input();
        model_input::model_map(&input, &model_input::logged_options(&input))
    }

    /// [`model::Model`] of this boot's log.
    pub fn model(&self) -> model::Model {
        model::Model::compute(&self.model_map(), model::Walk::Runs)
    }

    /// The summary's map-derived figures (`model::Facts::by_key`) must be
    /// the model's, every one exactly.
    pub fn assert_summary_matches(&self, model: &model::Model) {
        for (key, want) in model.facts().by_key() {
            assert_eq!(
                self.summary_json()[key].as_u64(),
                Some(want),
                "{key}: summary vs the model of the logged map\n{}",
                self.describe()
            );
        }
    }

    /// The per-zone `verify: node N zone Z: …` count lines, in log order.
    pub fn verify_zone_lines(&self) -> Vec<model::VerifyZoneLine> {
        self.lines
            .iter()
            .filter_map(|(_, m)| model::VerifyZoneLine::parse(m))
            .collect()
    }

    /// [`model::Model::assert_zone_lines`] on this boot's verify lines,
    /// with the whole run in the message when it fails.
    pub fn assert_zone_lines_match(&self, model: &model::Model) {
        let lines = self.verify_zone_lines();
        let check = || model.assert_zone_lines("verify lines vs the model", &lines);
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("{why}\n{}", self.describe());
        }
    }
}

/// A serial log as the boot tests read it: its stamped lines and its one
/// summary (two summary lines are a failure here; [`boot_raw`] is for
/// logs with a cut one).
pub fn parse_log(stdout: &str) -> (Vec<(u64, String)>, Option<serde_json::Value>) {
    let mut lines = Vec::new();
    let mut summary = None;
    for raw in stdout.lines() {
        let line = raw.trim_end_matches('\r');
        if let Some(json) = log::summary_json_of(line) {
            let value: serde_json::Value = serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("summary line is not valid JSON ({e}): {json}"));
            assert!(
                summary.replace(value).is_none(),
                "two memboot-summary lines"
            );
        } else if let Some(stamped) = log::parse_stamped(line) {
            lines.push(stamped);
        }
    }
    (lines, summary)
}

/// Boot with run-qemu.sh `args` (plus `-- kernel_opts` when given), bounded by `wall`.
pub fn boot(args: &[&str], kernel_opts: &[&str], wall: Duration) -> Boot {
    let run = boot_raw(args, kernel_opts, wall);
    let (lines, summary) = parse_log(&run.stdout);
    Boot::new(run, lines, summary)
}

/// The host memory run-qemu.sh's model says the boot `args` (plus `--
/// kernel_opts`) needs, in MiB: QEMU's own plus the struct pages the boot
/// writes (README "Large guests"), each constant an upper bound of what
/// this host measured. Read from the `run-qemu.sh: host memory: the boot
/// needs N MiB (…)` line of a `--dry-run` with the same arguments (no
/// build, no QEMU), with the host's available memory pinned far above any
/// need so that the line is printed whatever this host has free.
pub fn host_memory_need_mib(args: &[&str], kernel_opts: &[&str]) -> u64 {
    const NEED: &str = "run-qemu.sh: host memory: the boot needs ";
    let mut all: Vec<&str> = vec!["--dry-run"];
    all.extend_from_slice(args);
    if !kernel_opts.is_empty() {
        all.push("--");
        all.extend_from_slice(kernel_opts);
    }
    let out = Command::new(repo_root().join("run-qemu.sh"))
        .args(&all)
        .env("MEMBOOT_HOST_AVAILABLE_MIB", u32::MAX.to_string())
        .output()
        .expect("run run-qemu.sh --dry-run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(NEED)?.split_once(" MiB")?.0.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "run-qemu.sh {} printed no `{NEED}N MiB` line (exit {:?}); its --dry-run output changed:\n{stderr}",
                all.join(" "),
                out.status.code()
            )
        })
}

/// [`boot`] without parsing the log: for tests of a log [`parse_log`]
/// refuses (a cut summary line).
pub fn boot_raw(args: &[&str], kernel_opts: &[&str], wall: Duration) -> Run {
    ensure_built();
    let _guard = boot_lock();
    // Built once above: boots must all run the same image, even if the
    // sources change while the tests run.
    let mut all: Vec<&str> = vec!["--no-build"];
    all.extend_from_slice(args);
    if !kernel_opts.is_empty() {
        all.push("--");
        all.extend_from_slice(kernel_opts);
    }
    run_script(&all, wall)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_pages_merge_adjacent_ranges_then_round_inward() {
        use memboot_kernel::boot_input::write_input_line;
        use memmap::firmware::{FirmwareEntry, RegionKind};
        let input = BootInput {
            map: vec![
                FirmwareEntry::new(0, 0x9fc00, RegionKind::Usable),
                FirmwareEntry::new(0x100000, 0x1000, RegionKind::Bootloader),
                FirmwareEntry::new(0x101000, 0x1800, RegionKind::Usable),
                FirmwareEntry::new(0xf0000, 0x10000, RegionKind::Reserved),
            ],
            srat: None,
            cpu_nodes: vec![0],
            heap_base: 0x100000,
            heap_bytes: 0x1000,
            phys_addr_bits: 44,
            under_hypervisor: true,
            cmdline: String::new(),
            image: Default::default(),
            user_map: None,
            has_1g_pages: true,
        };
        let mut line = String::new();
        write_input_line(&mut line, &input).unwrap();
        let stdout = format!("[    0.100000] booting\r\n{line}\r\n[    0.200000] Memory: ...\r\n");
        let (lines, summary) = parse_log(&stdout);
        let boot = Boot::new(
            Run {
                exit_code: 0,
                stdout,
                stderr: String::new(),
            },
            lines,
            summary,
        );
        // 0x9f whole pages below 0x9fc00; 0x100000..0x102800 merged: 2 pages.
        assert_eq!(boot.firmware_ram_pages(), 0x9f + 2);
    }

    #[test]
    fn parses_summary() {
        let (lines, summary) =
            parse_log("[    0.000001] a\r\nmemboot-summary: {\"status\":\"ok\"}\n");
        assert_eq!(lines.len(), 1);
        assert_eq!(summary.unwrap()["status"], "ok");
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;

    fn logged(path: &std::path::Path) -> Boot {
        let text = std::fs::read_to_string(path).unwrap();
        let (lines, summary) = parse_log(&text);
        let run = Run {
            exit_code: 0,
            stdout: text,
            stderr: String::new(),
        };
        Boot::new(run, lines, summary)
    }

    /// The model read from a committed boot log has that boot's figures
    /// and per-zone lines (host-only: the boot tests do the same live).
    #[test]
    fn the_model_of_committed_logs_matches_their_summaries() {
        let root = repo_root();
        let logs = [
            root.join("kernel/tests/fixtures/16g-4nodes.log"),
            root.join("kernel/tests/fixtures/1t.log"),
            root.join("kernel/tests/fixtures/4g-perpfn.log"),
            root.join("kernel/tests/fixtures/4g-touch.log"),
            root.join("kernel/tests/fixtures/32t-16nodes-ondemand.log"),
        ];
        for path in logs {
            let b = logged(&path);
            let model = b.model();
            b.assert_summary_matches(&model);
            if b.kernel_option("verify").as_deref() != Some("off") {
                b.assert_zone_lines_match(&model);
            }
        }
    }
}
