//! `memboot-bench report DIR --sizes "64G 1T" --entries "deferred ondemand linux-6.1 linux-6.12"
//!  --rounds N [--heading TEXT] [--json FILE]`: the table of a tests/bench.sh
//! run (see `memboot_tools::bench`; the committed runs' `linux` entry is
//! Linux 6.1), and its instruction-profile tables when the run has
//! profiles (`memboot_tools::profile_table`). Exit 2 when a log cannot be read, 64 on
//! bad arguments. `memboot-bench mib SIZE` prints SIZE in MiB.

use std::path::PathBuf;
use std::process::ExitCode;

use memboot_tools::bench::{self, Plan};

struct Args {
    dir: PathBuf,
    sizes: Vec<String>,
    entries: Vec<String>,
    rounds: u32,
    heading: String,
    json: Option<PathBuf>,
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    if it.next().as_deref() != Some("report") {
        return Err("usage: memboot-bench report DIR --sizes S --entries E --rounds N [--heading T] [--json FILE]".into());
    }
    let dir = PathBuf::from(it.next().ok_or("report needs the bench's log directory")?);
    let mut args = Args {
        dir,
        sizes: vec![],
        entries: vec![],
        rounds: 1,
        heading: String::new(),
        json: None,
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--sizes" => args.sizes = words(&value),
            "--entries" => args.entries = words(&value),
            "--rounds" => args.rounds = value.parse().map_err(|_| format!("--rounds '{value}'"))?,
            "--heading" => args.heading = value,
            "--json" => args.json = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if args.sizes.is_empty() || args.entries.is_empty() || args.rounds == 0 {
        return Err("--sizes, --entries and --rounds (≥ 1) are required".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("mib") {
        // `memboot-bench mib SIZE`: the size in MiB, for the bench script.
        return match argv.nth(1).as_deref().map(bench::size_mib) {
            Some(Ok(mib)) => {
                println!("{mib}");
                ExitCode::SUCCESS
            }
            Some(Err(e)) => {
                eprintln!("memboot-bench: {e}");
                ExitCode::from(64)
            }
            None => {
                eprintln!("memboot-bench: mib needs a size");
                ExitCode::from(64)
            }
        };
    }
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memboot-bench: {e}");
            return ExitCode::from(64);
        }
    };
    let plan = Plan {
        sizes: &args.sizes,
        entries: &args.entries,
        rounds: args.rounds,
    };
    let results = match bench::read_dir(&args.dir, &plan) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("memboot-bench: {e}");
            return ExitCode::from(2);
        }
    };
    match memboot_tools::bench_md::render(&args.dir, &results, &plan, &args.heading) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("memboot-bench: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &args.json {
        let meta = serde_json::json!({
            "heading": args.heading, "sizes": args.sizes, "entries": args.entries, "rounds": args.rounds,
        });
        let text = serde_json::to_string_pretty(&bench::to_json(&results, meta)).expect("JSON");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("memboot-bench: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
