//! `memboot-plot`: SVG plots of memboot boots (see `memboot_tools::plot`)
//! and their trace-event files (`memboot_tools::trace`).
//!
//! ```text
//! memboot-plot timeline LOG OUT.svg      boot timeline from a serial log
//! memboot-plot scaling BENCH.json OUT.svg memmap time and host RSS vs RAM
//! memboot-plot trace LOG OUT.json        memboot's phases, a track per CPU
//! memboot-plot linux-trace LOG OUT.json  Linux's initcalls and memmap phases
//! ```
//!
//! OUT `-` writes to stdout. Exit codes: 0 written, 1 drawing or
//! writing failed, 2 unusable input (message on stderr), 64 usage error.

use memboot_tools::plot;
use memboot_tools::trace::{self, Kernel, Trace};

const USAGE: &str = "\
usage: memboot-plot timeline LOG OUT.svg
       memboot-plot scaling BENCH.json OUT.svg
       memboot-plot trace LOG OUT.json
       memboot-plot linux-trace LOG OUT.json

  timeline  one lane per CPU, one bar per phase of LOG's memboot-summary line
            (LOG: a serial log, e.g. from run-qemu.sh --log FILE)
  scaling   memmap time and host peak RSS against guest RAM, log axes
            (BENCH.json: the JSON written by tests/bench.sh)
  trace     LOG's phases as a Chrome trace-event file (Perfetto UI,
            chrome://tracing): a track per CPU
  linux-trace  the same for a Linux log (run-qemu.sh --linux): its
            initcalls per PID, early memmap and each node's deferred init

OUT may be - for stdout. Exit codes: 0 ok, 1 cannot draw or write,
2 unusable input, 64 usage error.
";

const EXIT_USAGE: i32 = 64;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&args));
}

fn run(args: &[String]) -> i32 {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["-h" | "--help"] => {
            print!("{USAGE}");
            return 0;
        }
        ["timeline", log, out] => plot::timeline_file(log, out).map(|layout| {
            format!(
                "{} phases on {} CPU lanes",
                layout.bars.len(),
                layout.lanes.len()
            )
        }),
        ["scaling", bench, out] => {
            plot::scaling_file(bench, out).map(|bench| format!("{} series", bench.series.len()))
        }
        ["trace", log, out] => return write_trace(Kernel::Memboot, log, out),
        ["linux-trace", log, out] => return write_trace(Kernel::Linux, log, out),
        _ => {
            eprint!("memboot-plot: expected a subcommand and two paths\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    match result {
        Ok(what) => {
            if args[2] != "-" {
                eprintln!("memboot-plot: wrote {} ({what})", args[2]);
            }
            0
        }
        Err(e) => {
            eprintln!("memboot-plot: {e}");
            e.exit_code()
        }
    }
}

fn write_trace(kernel: Kernel, log: &str, out: &str) -> i32 {
    match trace::trace_file(kernel, log, out) {
        Ok(written) => {
            if out != "-" {
                eprintln!("memboot-plot: wrote {out} ({})", spans(&written));
            }
            0
        }
        Err(e) => {
            eprintln!("memboot-plot: {e}");
            e.exit_code()
        }
    }
}

fn spans(trace: &Trace) -> String {
    let events = trace.trace_events.iter().filter(|e| e.ph == "X").count();
    let tracks = trace
        .trace_events
        .iter()
        .filter(|e| e.name == "thread_name")
        .count();
    format!("{events} spans on {tracks} tracks")
}
