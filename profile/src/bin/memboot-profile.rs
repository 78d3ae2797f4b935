//! memboot-profile: the plugin's arguments for a kernel, and its raw
//! output named by function.
//!
//!   memboot-profile plugin-args --kernel memboot|linux --map MAP --out RAW
//!       prints the `-plugin` arguments (after the .so and a comma)
//!   memboot-profile report --kernel memboot|linux --map MAP --raw RAW --out JSON
//!                          [--log SERIAL_LOG] [--pages PHASE=N]...
//!       writes the profile as JSON and prints its `memboot-profile:` lines;
//!       a memboot log gives each phase's struct pages (boot_log), Linux's
//!       are its calls of __init_single_page in each phase (linux_pages);
//!       --pages overrides either
//!
//!   memboot-profile compare --profile JSON --baseline JSON [--margin PERCENT]
//!       prints a line per phase the baseline counts per struct page, and
//!       exits 3 when one counts more instructions, stores or bytes per
//!       page than the baseline by more than PERCENT (default 1)
//!
//! MAP: a System.map (Linux's real one, tests/linux-peer.sh --symbols) or
//! `nm -n -C` of memboot's unstripped ELF.

use std::collections::HashMap;
use std::process::ExitCode;

use memboot_profile::compare::{check_line, compare};
use memboot_profile::phases::Kernel;
use memboot_profile::raw::Raw;
use memboot_profile::report::Profile;
use memboot_profile::symbols::Symbols;
use memboot_profile::{boot_log, linux_pages};

/// `compare`'s exit code when a phase exceeds the baseline.
const EXCEEDED: u8 = 3;

fn run(args: &[String]) -> Result<ExitCode, String> {
    let (cmd, rest) = args
        .split_first()
        .ok_or("no command: plugin-args or report (see the source's header)")?;
    let mut opts: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        opts.entry(flag.as_str()).or_default().push(value);
    }
    let one = |flag: &str| -> Result<&str, String> {
        match opts.get(flag).map(Vec::as_slice) {
            Some([v]) => Ok(v),
            _ => Err(format!("{cmd}: give {flag} once")),
        }
    };
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    if cmd == "compare" {
        let profile = |flag: &str| -> Result<Profile, String> {
            serde_json::from_str(&read(one(flag)?)?)
                .map_err(|e| format!("{}: {e}", one(flag).unwrap()))
        };
        let margin = opts
            .contains_key("--margin")
            .then(|| one("--margin"))
            .transpose()?;
        return compare_command(&profile("--profile")?, &profile("--baseline")?, margin);
    }
    let map = Symbols::parse_system_map(&read(one("--map")?)?)
        .map_err(|e| format!("{}: {e}", one("--map").unwrap()))?;
    match cmd.as_str() {
        "plugin-args" => {
            println!(
                "{}",
                Kernel::parse(one("--kernel")?)?.plugin_args(&map, one("--out")?)?
            );
        }
        "report" => {
            let raw = Raw::parse(&read(one("--raw")?)?)?;
            let kernel = Kernel::parse(one("--kernel")?)?;
            let mut pages = HashMap::new();
            match (kernel, one("--log")) {
                (Kernel::Memboot, Ok(log)) => {
                    pages = boot_log::memboot_pages(&read(log)?, &map)
                        .map_err(|e| format!("{log}: {e}"))?;
                }
                (Kernel::Memboot, Err(_)) => {}
                (Kernel::Linux, _) => pages = linux_pages::pages(&raw, &map)?,
            }
            pages.extend(given_pages(opts.get("--pages").into_iter().flatten())?);
            let mut profile = Profile::new(one("--kernel")?, &raw, &map, &pages);
            if let Ok(log) = one("--log") {
                profile.split_by_node(&read(log)?);
            }
            if profile
                .phases
                .iter()
                .any(|p| p.opens == 0 && p.unanchored == 0)
            {
                eprintln!(
                    "memboot-profile: note: a phase never started in this boot (its figures are 0)"
                );
            }
            let out = one("--out")?;
            std::fs::write(
                out,
                serde_json::to_string_pretty(&profile).expect("a profile serialises") + "\n",
            )
            .map_err(|e| format!("{out}: {e}"))?;
            for line in profile.log_lines() {
                println!("{line}");
            }
        }
        _ => {
            return Err(format!(
                "unknown command {cmd}: plugin-args, report or compare"
            ))
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--pages PHASE=N`, each given.
fn given_pages<'a>(given: impl Iterator<Item = &'a &'a str>) -> Result<Vec<(String, u64)>, String> {
    given
        .map(|p| {
            let (name, n) = p
                .split_once('=')
                .ok_or(format!("--pages {p}: expected PHASE=N"))?;
            let n = n
                .parse()
                .map_err(|_| format!("--pages {p}: N is not a number"))?;
            Ok((name.to_string(), n))
        })
        .collect()
}

/// `compare`: a line per gated phase, and exit 3 when one exceeds the
/// baseline by more than `margin` percent (default 1).
fn compare_command(
    now: &Profile,
    baseline: &Profile,
    margin: Option<&str>,
) -> Result<ExitCode, String> {
    let margin = match margin {
        None => 1.0,
        Some(m) => m
            .parse::<f64>()
            .map_err(|_| "--margin: a percentage, e.g. 1 or 0.5".to_string())?,
    } / 100.0;
    let checks = compare(now, baseline, margin)?;
    for c in &checks {
        println!("{}", check_line(c, margin));
    }
    Ok(if checks.iter().any(|c| c.exceeded) {
        ExitCode::from(EXCEEDED)
    } else {
        ExitCode::SUCCESS
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("memboot-profile: {e}");
            ExitCode::FAILURE
        }
    }
}
