//! `memboot-tap --log FILE -- COMMAND...`: run COMMAND
//! (run-qemu.sh's QEMU line), pass its standard output on to ours and
//! append it to FILE as it arrives, time it on the host from COMMAND's
//! start (`memboot_tools::tap`) and end with the timing lines, on standard
//! error and in FILE. Exits with COMMAND's status (128 + N if signal N
//! ended it).

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use memboot_tools::tap::{Tap, CLOCK_ORIGIN_ENV};

const EXIT_USAGE: i32 = 64;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [flag, log, dashes, command @ ..] = args.as_slice() else {
        usage()
    };
    if flag != "--log" || dashes != "--" || command.is_empty() {
        usage()
    }
    std::process::exit(match run(log, command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memboot-tap: {e}");
            2
        }
    });
}

/// How long after run-qemu.sh's clock origin ([`CLOCK_ORIGIN_ENV`]) this
/// tap's clock starts, µs; `None` when not given one.
fn clock_offset_us() -> Option<u64> {
    let origin_ns: u128 = std::env::var(CLOCK_ORIGIN_ENV).ok()?.parse().ok()?;
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some((now_ns.saturating_sub(origin_ns) / 1000) as u64)
}

fn usage() -> ! {
    eprintln!("usage: memboot-tap --log FILE -- COMMAND [ARGS...]");
    std::process::exit(EXIT_USAGE);
}

fn run(log_path: &str, command: &[String]) -> std::io::Result<i32> {
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(log_path)?;
    let started = Instant::now();
    let clock_offset_us = clock_offset_us();
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut stdout = std::io::stdout().lock();
    let mut tap = Tap::new();
    tap.clock_offset_us = clock_offset_us;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        tap.feed(&buf[..n], started.elapsed().as_micros() as u64);
        // A closed terminal must not stop the log or the boot.
        let _ = stdout.write_all(&buf[..n]).and_then(|()| stdout.flush());
        log.write_all(&buf[..n])?;
    }
    let status = child.wait()?;
    for line in tap.report() {
        eprintln!("{line}");
        writeln!(log, "{line}")?;
    }
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
