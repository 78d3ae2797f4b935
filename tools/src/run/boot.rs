//! One boot: the large-guest lock, the host-memory state, the provenance
//! lines, QEMU under GNU time and the serial tap (memboot-tap), and the
//! exit code its status maps to; then --profile's report and --svg's
//! timeline.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use memboot_contract::host_memory::LARGE_GUEST_MIB;

use super::args::BootPath;
use super::check::Checked;
use super::markers::MarkerSocket;
use super::paths::Paths;
use super::qemu::marker_socket;
use super::qemu_binary::{self, Version};
use super::quote::{quote, quote_words};
use super::stop::{exit, note, Stop};
use super::{cpu_time, host_kernel, host_speed, host_state};

/// QEMU's isa-debug-exit status is (value << 1) | 1; kernel/src/hw/exit.rs
/// writes 0x10 for success and 0x11 for failure.
const QEMU_KERNEL_OK: i32 = 33;
const QEMU_KERNEL_FAIL: i32 = 35;
/// `timeout`'s status when it stopped QEMU (124), or had to kill it (137).
const TIMED_OUT: [i32; 2] = [124, 137];

/// Where QEMU writes its pid (`-pidfile`), in a boot's scratch directory.
pub fn pidfile(tmpdir: &Path) -> PathBuf {
    tmpdir.join("qemu.pid")
}

/// A boot's scratch directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Result<TempDir, Stop> {
        let base = std::env::var("TMPDIR")
            .ok()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "/tmp".into());
        let mut template = format!("{base}/memboot-run.XXXXXX\0").into_bytes();
        // SAFETY: `template` is a writable NUL-terminated buffer that
        // mkdtemp(3) fills in place and does not keep.
        let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(Stop::Setup(format!(
                "cannot create a scratch directory in {base}"
            )));
        }
        template.pop();
        Ok(TempDir(PathBuf::from(
            String::from_utf8_lossy(&template).into_owned(),
        )))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// --profile's kernel kind and symbol map: memboot's unstripped ELF (it
/// runs where it is linked on every entry path; the boot logs its text
/// address, checked after the boot), or the System.map beside the Linux
/// image (tests/linux-peer.sh --symbols puts each peer's real one there).
pub struct Profile {
    pub kind: &'static str,
    pub map: PathBuf,
    /// The plugin's arguments on QEMU's command line.
    pub plugin_args: String,
}

impl Profile {
    /// Where the plugin writes its raw counts.
    fn raw(tmpdir: &Path) -> PathBuf {
        tmpdir.join("profile.raw")
    }

    pub fn new(c: &Checked, paths: &Paths, tmpdir: &Path) -> Result<Profile, Stop> {
        let raw = Self::raw(tmpdir);
        let (kind, map) = match &c.args.linux {
            Some(linux) => {
                let dir = linux.kernel.parent().filter(|d| !d.as_os_str().is_empty());
                let map = dir.unwrap_or(Path::new(".")).join("System.map");
                if !map.is_file() {
                    return Err(Stop::Setup(format!("--profile: no {} beside the Linux image (tests/linux-peer.sh --symbols fetches it)", map.display())));
                }
                ("linux", map)
            }
            // --dry-run reads nothing.
            None if c.args.dry_run => ("memboot", paths.kernel_elf().with_extension("map")),
            None => {
                let map = tmpdir.join("memboot.map");
                let elf = paths.kernel_elf();
                let nm =
                    Command::new("nm")
                        .args(["-n", "-C"])
                        .arg(&elf)
                        .stdout(File::create(&map).map_err(|e| {
                            Stop::Setup(format!("--profile: {}: {e}", map.display()))
                        })?)
                        .status();
                if !nm.is_ok_and(|s| s.success()) {
                    return Err(Stop::Setup(format!(
                        "--profile: nm could not read {}",
                        elf.display()
                    )));
                }
                ("memboot", map)
            }
        };
        let plugin_args = if c.args.dry_run {
            format!("out={},...", raw.display())
        } else {
            let out = Command::new(paths.tool("memboot-profile"))
                .args(["plugin-args", "--kernel", kind, "--map"])
                .arg(&map)
                .arg("--out")
                .arg(&raw)
                .stderr(Stdio::inherit())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .ok_or_else(|| {
                    Stop::Setup("--profile: no plugin arguments for this kernel (see above)".into())
                })?;
            String::from_utf8_lossy(&out.stdout)
                .trim_end_matches('\n')
                .to_string()
        };
        Ok(Profile {
            kind,
            map,
            plugin_args,
        })
    }

    /// The profile, written when QEMU exits (the plugin's at-exit
    /// callback), named by function; its figures go to the log's tail.
    fn report(&self, paths: &Paths, tmpdir: &Path, log: &Path, out: &Path) -> bool {
        let raw = Self::raw(tmpdir);
        if !raw.is_file() {
            return false;
        }
        let report = Command::new(paths.tool("memboot-profile"))
            .args(["report", "--kernel", self.kind, "--map"])
            .arg(&self.map)
            .arg("--raw")
            .arg(&raw)
            .arg("--log")
            .arg(log)
            .arg("--out")
            .arg(out)
            .stderr(Stdio::inherit())
            .output();
        let Ok(report) = report.map_err(|_| ()).and_then(|o| {
            if o.status.success() {
                Ok(o.stdout)
            } else {
                Err(())
            }
        }) else {
            return false;
        };
        let _ = std::io::stderr().write_all(&report);
        append(log, &String::from_utf8_lossy(&report));
        note(&format!("profile written to {}", out.display()));
        true
    }
}

/// The profile written to `out` and, with `--baseline`, compared: the exit
/// code a boot that otherwise succeeded gets if either failed.
fn profile_outcome(
    c: &Checked,
    paths: &Paths,
    tmpdir: &Path,
    log: &Path,
    profile: &Profile,
    out: &Path,
) -> Option<u8> {
    if !profile.report(paths, tmpdir, log, out) {
        note("--profile: no profile from this boot (QEMU did not run the plugin's exit, or the report failed)");
        return Some(exit::SETUP);
    }
    let (baseline, margin_ppm) = c.args.baseline.as_ref()?;
    match compare_with_baseline(paths, log, out, baseline, *margin_ppm as f64 / 1e6) {
        Ok(true) => None,
        Ok(false) => Some(exit::ABOVE_BASELINE),
        Err(e) => {
            note(&e);
            Some(exit::SETUP)
        }
    }
}

/// `memboot-profile compare` of the boot's profile `out` with `baseline`
/// (its lines on stderr and in the log): whether every gated phase is
/// within the margin.
fn compare_with_baseline(
    paths: &Paths,
    log: &Path,
    out: &Path,
    baseline: &Path,
    margin: f64,
) -> Result<bool, String> {
    let compared = Command::new(paths.tool("memboot-profile"))
        .arg("compare")
        .arg("--profile")
        .arg(out)
        .arg("--baseline")
        .arg(baseline)
        .args(["--margin", &format!("{}", margin * 100.0)])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("--baseline: cannot run memboot-profile compare: {e}"))?;
    let text = String::from_utf8_lossy(&compared.stdout);
    let _ = std::io::stderr().write_all(text.as_bytes());
    append(log, &text);
    match compared.status.code() {
        Some(0) => Ok(true),
        Some(3) => {
            note_and_log(
                log,
                &format!(
                    "--baseline: a phase exceeds {} (see above)",
                    baseline.display()
                ),
            );
            Ok(false)
        }
        _ => Err(format!(
            "--baseline: memboot-profile compare failed against {} (see above)",
            baseline.display()
        )),
    }
}

/// --no-build boots what an earlier --build-only built: say what is
/// missing.
pub fn check_prebuilt(c: &Checked, paths: &Paths) -> Result<(), Stop> {
    let missing = |path: PathBuf| {
        Stop::Setup(format!(
            "--no-build: no {} (run with --build-only first)",
            path.display()
        ))
    };
    let tap = paths.tool("memboot-tap");
    if !tap.is_file() {
        return Err(missing(tap));
    }
    let profiler = paths.tool("memboot-profile");
    if c.args.profile.is_some() && !profiler.is_file() {
        return Err(missing(profiler));
    }
    if c.args.linux.is_none() {
        let booted = match c.args.boot_path {
            BootPath::Pvh => paths.boot_elf(),
            path => paths
                .image_dir()
                .join(format!("memboot-{}.img", path.name())),
        };
        if !booted.is_file() {
            return Err(missing(booted));
        }
    }
    Ok(())
}

/// Guests above [`LARGE_GUEST_MIB`] boot one at a time on this host:
/// hold the lock (MEMBOOT_LOCK_FILE) until the process exits.
fn large_guest_lock() -> Result<File, Stop> {
    let path = std::env::var("MEMBOOT_LOCK_FILE")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/tmp/memboot-large-guest.lock".into());
    let file = File::create(&path).map_err(|e| Stop::Setup(format!("{path}: {e}")))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        note(&format!(
            "another guest above 64G is running; waiting for {path}"
        ));
        // SAFETY: as above; this call blocks until the lock is free.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Stop::Setup(format!("cannot lock {path}")));
        }
    }
    Ok(file)
}

/// Append `text` to the log (whose loss must not stop the boot's report).
fn append(log: &Path, text: &str) {
    if let Ok(mut f) = OpenOptions::new().append(true).open(log) {
        let _ = f.write_all(text.as_bytes());
    }
}

/// A line on standard error and in the log.
fn note_and_log(log: &Path, message: &str) {
    note(message);
    append(log, &format!("run-qemu.sh: {message}\n"));
}

/// How the boot is booted, for its note.
fn booted_as(c: &Checked) -> String {
    match (c.args.boot_path, &c.args.linux) {
        (BootPath::Pvh, Some(_)) => "Linux (-kernel)".into(),
        (BootPath::Pvh, None) => "PVH entry (-kernel)".into(),
        (path, _) => format!("{} disk image", path.name().to_ascii_uppercase()),
    }
}

/// Run `qemu` under the serial tap, GNU time and `timeout`, sampling its
/// threads' CPU time, and end the log with what they measured; QEMU's
/// exit status as the tap saw it.
///
/// GNU time outside timeout: wait4() reports the largest RSS among
/// timeout and its waited-for child, i.e. QEMU's own peak resident
/// memory, and QEMU's minor page faults (its first touches of guest RAM
/// among them). The tap around it passes the serial output on and times
/// it from QEMU's start (entry latency, QEMU start to memory ready: the
/// log's last lines).
///
/// `markers`: the socket memboot's markers arrive on, listened on before
/// QEMU starts (QEMU connects to it as it starts).
fn run_tapped(
    paths: &Paths,
    tmpdir: &Path,
    log: &Path,
    qemu: &[String],
    timeout_s: u64,
    markers: MarkerSocket,
) -> i32 {
    let time_file = tmpdir.join("time");
    // One clock origin for the sampler and the tap's instants: the tap
    // says how much later its own clock started (`tap::CLOCK_ORIGIN_ENV`).
    let origin = std::time::Instant::now();
    let origin_epoch_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let speed_before = host_speed::probe();
    let sampler = cpu_time::Sampler::start(pidfile(tmpdir), origin, markers);
    let counters_before = host_kernel::Counters::read();
    let tap = Command::new(paths.tool("memboot-tap"))
        .env(crate::tap::CLOCK_ORIGIN_ENV, origin_epoch_ns.to_string())
        .arg("--log")
        .arg(log)
        .arg("--")
        .args(["/usr/bin/time", "-f", "%M %R %U %S", "-o"])
        .arg(&time_file)
        .args(["timeout", "--kill-after=10", &timeout_s.to_string()])
        .args(qemu)
        .stdin(Stdio::null())
        .spawn();
    let status = match tap {
        Ok(mut tap) => wait_as_a_shell(&mut tap, tmpdir),
        Err(e) => {
            note(&format!(
                "cannot run {}: {e}",
                paths.tool("memboot-tap").display()
            ));
            127
        }
    };
    let samples = sampler.finish();
    let speed_after = host_speed::probe();
    host_state::record_exit();
    report_time(&time_file, log);
    if let (Some(before), Some(after)) = (counters_before, host_kernel::Counters::read()) {
        note_and_log(log, &after.line_since(&before));
    }
    for line in cpu_time::report(&samples, log) {
        note_and_log(log, &line);
    }
    if let Some(line) = host_speed::line(&speed_before, &speed_after) {
        note_and_log(log, &line);
    }
    status
}

/// Boot `qemu` for `c`; the exit code. `invocation`: the command the user
/// typed, for the provenance lines.
pub fn run(
    c: &Checked,
    paths: &Paths,
    tmpdir: &Path,
    qemu: &[String],
    qemu_version: &Version,
    profile: Option<&Profile>,
    invocation: &str,
) -> Result<u8, Stop> {
    let args = &c.args;
    let _lock = if args.mem_mib > LARGE_GUEST_MIB {
        Some(large_guest_lock()?)
    } else {
        None
    };
    // The serial output is always logged: the tap writes it there, and
    // --svg reads it back.
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| tmpdir.join("serial.log"));
    File::create(&log).map_err(|e| Stop::Setup(format!("{}: {e}", log.display())))?;

    // The host-memory state the boot starts in: this host may itself be a
    // VM whose free page reporting hands memory a process freed back to
    // its hypervisor, after which touching it again costs a fault in the
    // hypervisor; how much of what a boot writes is still backed decides
    // memmap times more than the code does. So the state is chosen and
    // every log records it, with what the host did before.
    let cold_idle_s = host_state::cold_idle_s().map_err(Stop::Setup)?;
    let memory_lines = host_state::memory_state(args.host_memory, cold_idle_s);
    let provenance = provenance(c, qemu, qemu_version, invocation, &memory_lines);
    eprint!("{provenance}");
    append(&log, &provenance);
    note(&booting(c));

    // memboot's command line names the marker socket; the Linux peers
    // write no markers.
    let markers = match marker_socket(tmpdir).filter(|_| args.linux.is_none()) {
        Some(path) => MarkerSocket::listen(&path)
            .map_err(|e| Stop::Setup(format!("cannot listen on {}: {e}", path.display())))?,
        None => MarkerSocket::none(),
    };
    let status = run_tapped(paths, tmpdir, &log, qemu, args.timeout_s, markers);
    // A boot that failed says so by its own code; one that did not, by a
    // missing profile or one above its baseline.
    let booted = status == QEMU_KERNEL_OK || (args.linux.is_some() && status == 0);
    if let (Some(profile), Some(out)) = (profile, &args.profile) {
        if let Some(code) = profile_outcome(c, paths, tmpdir, &log, profile, out) {
            if booted {
                return Ok(code);
            }
        }
    }
    if args.linux.is_some() {
        let traced = args
            .trace
            .as_ref()
            .is_none_or(|out| plot(paths, &log, Plot::LinuxTrace, out));
        return Ok(match linux_exit(status, &log, args.timeout_s) {
            exit::OK if !traced => exit::SETUP,
            code => code,
        });
    }
    let drawn = args
        .svg
        .as_ref()
        .is_none_or(|svg| plot(paths, &log, Plot::Timeline, svg));
    let traced = args
        .trace
        .as_ref()
        .is_none_or(|out| plot(paths, &log, Plot::Trace, out));
    Ok(memboot_exit(status, drawn && traced, args.timeout_s))
}

/// Provenance, so that a committed log says what produced it: the
/// command, the host, the state of its memory and QEMU's command line; on
/// stderr and at the head of the log.
fn provenance(
    c: &Checked,
    qemu: &[String],
    version: &Version,
    invocation: &str,
    memory_lines: &[String],
) -> String {
    let mut text = format!("run-qemu.sh: command: {invocation}\n");
    text += &format!(
        "run-qemu.sh: host: {}\n",
        host_state::description(c.available_mib)
    );
    for line in memory_lines {
        text += &format!("run-qemu.sh: host memory: {line}\n");
    }
    let binary = qemu_binary::binary(&c.args);
    text += &format!(
        "run-qemu.sh: qemu version: {}, {}\n",
        version.line,
        qemu_binary::resolve(&binary).display()
    );
    text += &format!("run-qemu.sh: qemu: {}\n", quote_words(qemu));
    text
}

/// What is booted, in a line.
fn booting(c: &Checked) -> String {
    let args = &c.args;
    let shape = if args.nodes > 1 {
        let sizes: Vec<String> = c.node_mib.iter().map(|m| format!("{m}M")).collect();
        format!(" of {}", sizes.join(" "))
    } else {
        String::new()
    };
    format!(
        "booting: -m {}M, {} vCPUs, {} node(s){shape}, {}, {}, timeout {}s",
        args.mem_mib,
        args.smp,
        args.nodes,
        args.accel.name(),
        booted_as(c),
        args.timeout_s
    )
}

/// memboot's exit code from QEMU's status (and whether --svg and --trace
/// wrote their files).
fn memboot_exit(status: i32, files_ok: bool, timeout_s: u64) -> u8 {
    match status {
        QEMU_KERNEL_OK => {
            note("kernel reported success");
            if files_ok {
                exit::OK
            } else {
                exit::SETUP
            }
        }
        QEMU_KERNEL_FAIL => {
            note("kernel reported failure (see its log above)");
            exit::KERNEL
        }
        s if TIMED_OUT.contains(&s) => timed_out(timeout_s),
        s => {
            note(&format!("QEMU exited with status {s} without the kernel's exit code (QEMU error or triple fault)"));
            exit::QEMU
        }
    }
}

/// `timeout` stopped the guest.
fn timed_out(timeout_s: u64) -> u8 {
    note(&format!("timeout after {timeout_s}s: guest killed"));
    exit::TIMEOUT
}

/// Wait for the tap as a shell waits for its foreground job: a Ctrl-C is
/// the tap's to act on, and when it ended the tap, it ends this tool too
/// (after removing the scratch directory `tmpdir`), with the status a shell
/// reports. The tap's status otherwise, 128 + N if signal N ended it.
fn wait_as_a_shell(tap: &mut std::process::Child, tmpdir: &Path) -> i32 {
    // SAFETY: signal(2) with SIG_IGN installs no handler code; the previous
    // disposition is put back below.
    let previous = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let status = tap.wait();
    // SAFETY: as above, restoring what was there.
    unsafe { libc::signal(libc::SIGINT, previous) };
    let Ok(status) = status else { return 127 };
    if status.signal() == Some(libc::SIGINT) {
        let _ = std::fs::remove_dir_all(tmpdir);
        // SAFETY: raise(3) of a signal whose default action ends this
        // process, as the user asked.
        unsafe { libc::raise(libc::SIGINT) };
    }
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// GNU time's figures (its last line: "MAXRSS_KIB MINOR_FAULTS"; before
/// it, "Command exited with non-zero status N") on stderr and in the log.
fn report_time(time_file: &Path, log: &Path) {
    let text = std::fs::read_to_string(time_file).unwrap_or_default();
    let mut figures = text.lines().last().unwrap_or("").split_whitespace();
    let number = |f: Option<&str>| f.and_then(|v| v.parse::<u64>().ok());
    if let Some(kib) = number(figures.next()) {
        note_and_log(log, &format!("host peak RSS {} MiB", kib / 1024));
    }
    if let Some(faults) = number(figures.next()) {
        note_and_log(log, &format!("host minor page faults {faults} (QEMU's)"));
    }
    if let (Some(user), Some(system)) = (figures.next(), figures.next()) {
        if let Some(line) = host_kernel::cpu_line(user, system) {
            note_and_log(log, &line);
        }
    }
}

/// --linux: 0 when Linux powered the machine off, 1 when it panicked.
fn linux_exit(status: i32, log: &Path, timeout_s: u64) -> u8 {
    match status {
        0 => {
            let text = std::fs::read(log).unwrap_or_default();
            if String::from_utf8_lossy(&text).contains("Kernel panic - not syncing") {
                note("Linux panicked (see its 'Kernel panic' line above)");
                exit::KERNEL
            } else {
                note("Linux powered the machine off");
                exit::OK
            }
        }
        s if TIMED_OUT.contains(&s) => timed_out(timeout_s),
        s => {
            note(&format!(
                "QEMU exited with status {s}: Linux did not power off"
            ));
            exit::QEMU
        }
    }
}

/// What memboot-plot makes of a boot's serial log.
#[derive(Clone, Copy)]
enum Plot {
    /// `--svg`: the boot timeline.
    Timeline,
    /// `--trace` of a memboot boot: its phases as trace events.
    Trace,
    /// `--trace` of a Linux boot: its initcalls and memmap phases.
    LinuxTrace,
}

impl Plot {
    /// memboot-plot's subcommand, the flag, and what the file is.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Plot::Timeline => ("timeline", "--svg", "boot timeline"),
            Plot::Trace => ("trace", "--trace", "trace"),
            Plot::LinuxTrace => ("linux-trace", "--trace", "trace"),
        }
    }
}

/// `what` of this boot's serial log into `out`, by memboot-plot; whether
/// it was written.
fn plot(paths: &Paths, log: &Path, what: Plot, out: &Path) -> bool {
    let (subcommand, flag, file) = what.parts();
    let tool = paths.tool("memboot-plot");
    if !tool.is_file() {
        note(&format!(
            "{flag}: {} is missing (it is built unless --no-build)",
            tool.display()
        ));
        return false;
    }
    let written = Command::new(&tool)
        .arg(subcommand)
        .arg(log)
        .arg(out)
        .status()
        .is_ok_and(|s| s.success());
    if written {
        note(&format!("{file} written to {}", out.display()));
    } else {
        note(&format!(
            "{flag}: could not write the {file} from this boot's log"
        ));
    }
    written
}

/// The command as the user typed it, shell-quoted.
pub fn invocation(argv0: &str, args: &[String]) -> String {
    let mut words = vec![quote(argv0)];
    words.extend(args.iter().map(|a| quote(a)));
    words.join(" ")
}
