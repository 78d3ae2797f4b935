//! run-qemu.sh end to end, without booting: its flags reach memboot-run
//! (host/, whose tests check every decision: the machine, the node split,
//! the refusal), and what `--dry-run` prints, the documented interface
//! tests/bench.sh reads, comes out of the script as it always has. The
//! refusal is also checked against this host's real MemAvailable.
use std::process::Command;

use memboot_tests::{exit_code, repo_root};

struct Out {
    code: i32,
    stderr: String,
}

/// `run-qemu.sh ARGS` with the host's available memory pinned to
/// `available_mib`, so refusals do not depend on the machine running the test.
fn script(args: &[&str], available_mib: u64) -> Out {
    let out = Command::new(repo_root().join("run-qemu.sh"))
        .args(args)
        .env("MEMBOOT_HOST_AVAILABLE_MIB", available_mib.to_string())
        .output()
        .expect("run run-qemu.sh");
    Out {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A faithful boot's need, in MiB, by the README's rule ("Large guests"):
/// every struct page (RAM/64) and QEMU's own, 192 MiB + 112 MiB per TiB.
fn faithful_need_mib(mem_mib: u64) -> u64 {
    mem_mib.div_ceil(64) + 192 + (112 * mem_mib).div_ceil(1 << 20)
}

/// `--dry-run` prints QEMU's command line shell-quoted (bash's `printf
/// %q`, so a shell reads it back word for word), then the struct-page and
/// host-memory lines, and boots nothing.
#[test]
fn dry_run_prints_the_command_and_the_host_memory_lines() {
    let out = script(
        &[
            "--dry-run",
            "-m",
            "2G",
            "--nodes",
            "2",
            "--",
            "memmap=ondemand",
            "verify=off,x",
        ],
        1 << 20,
    );
    assert_eq!(out.code, exit_code::OK, "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stderr);
    assert!(
        lines[0].starts_with("qemu-system-x86_64 -nodefaults "),
        "{}",
        lines[0]
    );
    // The shell's reading of the quoted line: the words QEMU gets.
    let words = Command::new("bash")
        .arg("-c")
        .arg(format!("printf '%s\\n' {}", lines[0]))
        .output()
        .expect("bash");
    let words = String::from_utf8(words.stdout).unwrap();
    let words: Vec<&str> = words.lines().collect();
    let after = |flag: &str| {
        words
            .windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1])
            .collect::<Vec<_>>()
    };
    assert_eq!(after("-m"), ["2048M"], "{words:?}");
    assert_eq!(after("-numa").len(), 2, "{words:?}");
    let fw_cfg = after("-fw_cfg");
    assert_eq!(fw_cfg.len(), 1, "{words:?}");
    // A comma in an option is doubled for QEMU; the line is the kernel's,
    // which refuses `verify=off,x` (so no tsc_khz= is added to it).
    assert_eq!(
        fw_cfg[0],
        "name=opt/memboot/cmdline,string=memmap=ondemand verify=off,,x"
    );
    assert_eq!(
        lines[1],
        "run-qemu.sh: struct pages: none written (the kernel refuses its options first)"
    );
    let need = 192 + (112u64 * 2048).div_ceil(1 << 20);
    assert_eq!(
        lines[2],
        format!(
            "run-qemu.sh: host memory: the boot needs {need} MiB (0 MiB of struct pages + {need} MiB for QEMU itself), {} MiB available",
            1 << 20
        )
    );
}

#[test]
fn help_prints_the_flags_and_exits_64() {
    let out = script(&["--help"], 1 << 30);
    assert_eq!(out.code, exit_code::USAGE, "{}", out.stderr);
    for want in [
        "./run-qemu.sh -m SIZE",
        "--host-memory prefault|cold",
        "Exit codes: 0",
    ] {
        assert!(out.stderr.contains(want), "no {want:?} in {}", out.stderr);
    }
}

/// A usage error and a guest this host cannot hold: exit 64 with a
/// message, before QEMU's command line is built.
#[test]
fn usage_errors_and_refusals_exit_64_before_qemu() {
    for (args, why) in [
        (
            &["--dry-run", "--frobnicate"][..],
            "unknown argument '--frobnicate'",
        ),
        (
            &["--dry-run", "--smp", "2", "--smp", "4"],
            "--smp given twice",
        ),
        (&["--dry-run", "-m", "2T"], "writes every struct page"),
        (&["-m", "2T"], "writes every struct page"),
    ] {
        let out = script(args, faithful_need_mib(2 << 20) - 1);
        assert_eq!(out.code, exit_code::USAGE, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("run-qemu.sh: ") && out.stderr.contains(why),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("qemu-system-x86_64 "),
            "{}",
            out.stderr
        );
    }
}

/// MemAvailable from the real /proc/meminfo, in MiB (as run-qemu.sh reads it).
fn mem_available_mib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix(" kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("MemAvailable in /proc/meminfo");
    kib / 1024
}

/// `run-qemu.sh ARGS` against the host's real MemAvailable (no override).
fn script_real_host(args: &[&str]) -> Out {
    let out = Command::new(repo_root().join("run-qemu.sh"))
        .args(args)
        .env_remove("MEMBOOT_HOST_AVAILABLE_MIB")
        .output()
        .expect("run run-qemu.sh");
    Out {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// How far MemAvailable may be from the figure a test computed with: other
/// boots on this host move it.
const DRIFT_MARGIN_MIB: u64 = 512;

/// Run `check(available)` with MemAvailable read just before; again (up to
/// five times) if MemAvailable moved by more than the margin meanwhile, so
/// the expectation was computed for the host the script saw.
fn with_steady_mem_available(check: impl Fn(u64) -> Result<(), String>) {
    let mut last = String::new();
    for _ in 0..5 {
        let before = mem_available_mib();
        let result = check(before);
        let after = mem_available_mib();
        if before.abs_diff(after) <= DRIFT_MARGIN_MIB / 2 {
            return result.unwrap();
        }
        last = format!("MemAvailable moved from {before} to {after} MiB");
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    panic!("MemAvailable never held still: {last}");
}

/// 2T faithful needs 32 GiB of struct pages alone: refused on this host,
/// through the real /proc/meminfo; so is the one-word bypass.
#[test]
fn real_host_refuses_2t_faithful_and_the_one_word_bypass() {
    let need = faithful_need_mib(2 << 20);
    with_steady_mem_available(|available| {
        assert!(
            need >= available + DRIFT_MARGIN_MIB,
            "this test assumes a host with less than {} MiB available, not {available}",
            need - DRIFT_MARGIN_MIB
        );
        for tail in [
            &["--"][..],
            &["--", "memmap=touch"],
            &["--", "memmap=ondemand", "verify=off ondemand_drain=on"],
        ] {
            let out = script_real_host(&[&["--dry-run", "-m", "2T"], tail].concat());
            if out.code != 64 || !out.stderr.contains(&format!("needs {need} MiB")) {
                return Err(format!("{tail:?}: exit {}: {}", out.code, out.stderr));
            }
            if !out.stderr.contains("(MemAvailable)") {
                return Err(format!(
                    "{tail:?}: not the real MemAvailable: {}",
                    out.stderr
                ));
            }
        }
        Ok(())
    });
}

/// Around what this host has available: the largest faithful size whose
/// need is at most MemAvailable - margin boots, the smallest whose need is
/// at least MemAvailable + margin is refused.
#[test]
fn real_host_accepts_the_largest_faithful_size_that_fits() {
    // The largest (or smallest) -m in MiB on the right side of `bound`.
    let largest_within = |bound: u64| {
        let (mut lo, mut hi) = (128u64, 59 << 20);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if faithful_need_mib(mid) <= bound {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    with_steady_mem_available(|available| {
        assert!(available > faithful_need_mib(128) + DRIFT_MARGIN_MIB);
        let fits = largest_within(available - DRIFT_MARGIN_MIB);
        let too_big = largest_within(available + DRIFT_MARGIN_MIB - 1) + 1;
        assert!(faithful_need_mib(fits) <= available - DRIFT_MARGIN_MIB);
        assert!(faithful_need_mib(too_big) >= available + DRIFT_MARGIN_MIB);
        let (fits, too_big) = (format!("{fits}M"), format!("{too_big}M"));
        let out = script_real_host(&["--dry-run", "-m", &fits]);
        if out.code != 0 {
            return Err(format!("-m {fits} (available {available}): {}", out.stderr));
        }
        let out = script_real_host(&["--dry-run", "-m", &too_big]);
        if out.code != 64 || !out.stderr.contains("writes every struct page") {
            return Err(format!(
                "-m {too_big} (available {available}): {}",
                out.stderr
            ));
        }
        Ok(())
    });
}
