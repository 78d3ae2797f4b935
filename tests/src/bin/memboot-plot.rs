//! `memboot-plot`: SVG plots of memboot boots (see `memboot_tests::plot`).
//!
//! ```text
//! memboot-plot timeline LOG OUT.svg      boot timeline from a serial log
//! memboot-plot scaling BENCH.json OUT.svg memmap time and host RSS vs RAM
//! ```
//!
//! OUT `-` writes the SVG to stdout. Exit codes: 0 written, 1 drawing or
//! writing failed, 2 unusable input (message on stderr), 64 usage error.

use memboot_tests::plot;

const USAGE: &str = "\
usage: memboot-plot timeline LOG OUT.svg
       memboot-plot scaling BENCH.json OUT.svg

  timeline  one lane per CPU, one bar per phase of LOG's memboot-summary line
            (LOG: a serial log, e.g. from run-qemu.sh --log FILE)
  scaling   memmap time and host peak RSS against guest RAM, log axes
            (BENCH.json: the JSON written by tests/bench.sh)

OUT.svg may be - for stdout. Exit codes: 0 ok, 1 cannot draw or write,
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
