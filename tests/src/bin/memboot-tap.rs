//! `memboot-tap --log FILE [--warm-mib N] -- COMMAND...`: run COMMAND
//! (run-qemu.sh's QEMU line), pass its standard output on to ours and
//! append it to FILE as it arrives, time it on the host from COMMAND's
//! start (`memboot_tests::tap`) and end with the timing lines, on standard
//! error and in FILE. Exits with COMMAND's status (128 + N if signal N
//! ended it).
//!
//! `--warm-mib N` (run-qemu.sh `--host-memory warm`): first touch N MiB of
//! fresh anonymous memory and free it, so that the host memory COMMAND
//! gets next is backed (not yet reported to the hypervisor, if this host
//! reports free pages).

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use memboot_tests::tap::Tap;

const EXIT_USAGE: i32 = 64;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (log, warm_mib, command) = match args.as_slice() {
        [flag, log, dashes, command @ ..]
            if flag == "--log" && dashes == "--" && !command.is_empty() =>
        {
            (log, Some(0), command)
        }
        [flag, log, warm, mib, dashes, command @ ..]
            if flag == "--log" && warm == "--warm-mib" && dashes == "--" && !command.is_empty() =>
        {
            (log, mib.parse::<usize>().ok(), command)
        }
        _ => (&String::new(), None, &[][..]),
    };
    let Some(warm_mib) = warm_mib.filter(|_| !command.is_empty()) else {
        eprintln!("usage: memboot-tap --log FILE [--warm-mib N] -- COMMAND [ARGS...]");
        std::process::exit(EXIT_USAGE);
    };
    if warm_mib > 0 {
        if let Err(e) = touch_and_free(warm_mib) {
            eprintln!("memboot-tap: --warm-mib {warm_mib}: {e}");
            std::process::exit(2);
        }
    }
    std::process::exit(match run(log, command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memboot-tap: {e}");
            2
        }
    });
}

/// Touch `mib` MiB of fresh anonymous memory, a byte per page, and give
/// it back.
fn touch_and_free(mib: usize) -> std::io::Result<()> {
    let bytes = mib << 20;
    // SAFETY: a private anonymous mapping of our own, written only within
    // its length and unmapped before anything else can see it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        for offset in (0..bytes).step_by(4096) {
            std::ptr::write_volatile(p.cast::<u8>().add(offset), 1);
        }
        if libc::munmap(p, bytes) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn run(log_path: &str, command: &[String]) -> std::io::Result<i32> {
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(log_path)?;
    let started = Instant::now();
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut stdout = std::io::stdout().lock();
    let mut tap = Tap::new();
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
