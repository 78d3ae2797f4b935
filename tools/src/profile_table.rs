//! The bench's instruction-profile tables (`tests/bench.sh --profile`):
//! each boot's `SIZE-ENTRY-ROUND.profile.json` (run-qemu.sh --profile,
//! written by memboot-profile, read here as plain JSON) as guest
//! instructions, stores and bytes stored per struct page, for deferred init
//! and for the boot CPU's memmap, with the five functions that carry each.
//!
//! Divisors: each kernel's own pages where its profile has them:
//! memboot's from its own summary (`deferred_pages`, `eager_pages`),
//! Linux's its calls of `__init_single_page` in the phase
//! (`memboot_profile::linux_pages`). A Linux profile without them (made
//! before they were counted, or of a build that inlines that function) is
//! divided by the same size's memboot `deferred` boot's pages: the same
//! defer rule (a node's last zone after its first section) on the same
//! firmware map. Linux initialises the struct pages of its own
//! reservations in that range (its memmap, RAM/64) outside both phases, so
//! that divisor counts about 1.6 % more pages than Linux's deferred phase
//! wrote: its per-page figures read that much low, and the ratios to Linux
//! are that much in Linux's favour.

use std::path::Path;

use serde_json::Value;

use crate::bench::{is_peer, Plan};

/// The phases, as memboot-profile names them, and their column titles.
const PHASES: [(&str, &str); 2] = [
    ("deferred", "deferred init"),
    ("boot_cpu_memmap", "boot-CPU memmap"),
];
/// The memboot entry whose pages divide Linux's counts.
const DIVISOR_ENTRY: &str = "deferred";

/// One phase of one boot.
#[derive(Clone, Debug, PartialEq)]
struct Phase {
    insns: u64,
    stores: u64,
    bytes: u64,
    pages: Option<u64>,
    /// (function, share of the phase's instructions), most first.
    top: Vec<(String, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
struct Boot {
    total_insns: u64,
    phases: Vec<Option<Phase>>,
}

fn phase_of(profile: &Value, name: &str) -> Option<Phase> {
    let p = profile["phases"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)?;
    let insns = p["insns"].as_u64()?;
    if p["opens"].as_u64() == Some(0) {
        return None; // the phase never ran (ondemand has no deferred init)
    }
    let top = p["functions"]
        .as_array()?
        .iter()
        .take(5)
        .filter_map(|f| {
            Some((
                f["function"].as_str()?.to_string(),
                f["insns"].as_u64()? as f64 / insns.max(1) as f64,
            ))
        })
        .collect();
    Some(Phase {
        insns,
        stores: p["stores"].as_u64()?,
        bytes: p["bytes"].as_u64()?,
        pages: p["pages"].as_u64(),
        top,
    })
}

fn read(path: &Path) -> Result<Option<Boot>, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(Boot {
        total_insns: v["total_insns"]
            .as_u64()
            .ok_or(format!("{}: no total_insns", path.display()))?,
        phases: PHASES.iter().map(|(name, _)| phase_of(&v, name)).collect(),
    }))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    })
}

/// (max − min) / median of the rounds' counts, in percent.
fn spread(v: &[u64]) -> String {
    let med = median(v.iter().map(|&x| x as f64).collect());
    match (v.iter().max(), v.iter().min(), med) {
        (Some(&max), Some(&min), Some(m)) if m > 0.0 && v.len() > 1 => {
            format!("{:.3} %", 100.0 * (max - min) as f64 / m)
        }
        _ => "–".into(),
    }
}

/// The profiled boots of one (size, entry), in round order.
struct Run {
    size: String,
    entry: String,
    boots: Vec<Boot>,
}

/// The tables, or `None` when the run has no profiles.
pub fn tables(dir: &Path, plan: &Plan) -> Result<Option<String>, String> {
    let runs = read_runs(dir, plan)?;
    if runs.is_empty() {
        return Ok(None);
    }
    let peers: Vec<&String> = plan.entries.iter().filter(|e| is_peer(e)).collect();
    let mut out = per_page_header(plan.rounds, &peers);
    for run in &runs {
        out += &per_page_row(&runs, run, &peers);
    }
    out += &top_functions_table(&runs);
    Ok(Some(out))
}

/// Every (size, entry) of `plan` with at least one profile in `dir`.
fn read_runs(dir: &Path, plan: &Plan) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for size in plan.sizes {
        for entry in plan.entries {
            let mut boots = Vec::new();
            for round in 1..=plan.rounds {
                if let Some(b) = read(&dir.join(format!("{size}-{entry}-{round}.profile.json")))? {
                    boots.push(b);
                }
            }
            if !boots.is_empty() {
                runs.push(Run {
                    size: size.clone(),
                    entry: entry.clone(),
                    boots,
                });
            }
        }
    }
    Ok(runs)
}

/// `entry`'s `@` words (`@qemu-10.0@profile`; empty without).
fn how_run(entry: &str) -> &str {
    &entry[crate::bench::kernel_of(entry).len()..]
}

/// The pages of phase `ph` at `size` for `entry`: its own, or (a Linux
/// profile without them) the divisor entry's, run the same way (`@` words)
/// if there is one, else any way: the pages are the firmware map's, not
/// the run's.
fn pages(runs: &[Run], size: &str, entry: &str, ph: usize) -> Option<u64> {
    let own = |r: &Run| r.boots[0].phases[ph].as_ref()?.pages;
    let own_pages = runs
        .iter()
        .find(|r| r.size == size && r.entry == entry)
        .and_then(own);
    if !crate::bench::is_linux(entry) || own_pages.is_some_and(|p| p > 0) {
        return own_pages;
    }
    let same_way = format!("{DIVISOR_ENTRY}{}", how_run(entry));
    let divisor = |r: &&Run| r.size == size && crate::bench::kernel_of(&r.entry) == DIVISOR_ENTRY;
    runs.iter()
        .filter(divisor)
        .find(|r| r.entry == same_way)
        .or_else(|| runs.iter().find(divisor))
        .and_then(own)
}

/// Median instructions per page of phase `ph`, for the ratio columns.
fn per_page(runs: &[Run], size: &str, entry: &str, ph: usize) -> Option<f64> {
    let run = runs.iter().find(|r| r.size == size && r.entry == entry)?;
    let p = pages(runs, size, entry, ph).filter(|&p| p > 0)? as f64;
    median(
        run.boots
            .iter()
            .filter_map(|b| Some(b.phases[ph].as_ref()?.insns as f64 / p))
            .collect(),
    )
}

/// The per-page table's title and header rows.
fn per_page_header(rounds: u32, peers: &[&String]) -> String {
    let mut out = format!(
        "\ninstruction profile (memboot-profile, README \"Instruction profile\"): guest instructions, stores and \
         bytes stored per struct page, median of {} rounds; spread = (max − min) / median of the phase's instructions \
         over the rounds\n\n| size | entry |",
        rounds
    );
    for (_, title) in PHASES {
        out += &format!(" {title}: pages | instr/page | stores/page | bytes/page | spread |");
    }
    for p in peers {
        out += &format!(" deferred instr × {} |", crate::bench::peer_label(p));
    }
    out += " whole boot, instructions |\n|---|---|";
    out += &"---|".repeat(PHASES.len() * 5 + peers.len() + 1);
    out.push('\n');
    out
}

/// One (size, entry)'s row of the per-page table.
fn per_page_row(runs: &[Run], run: &Run, peers: &[&String]) -> String {
    let (size, entry) = (run.size.as_str(), run.entry.as_str());
    let mut out = format!("| {size} | {entry} |");
    for ph in 0..PHASES.len() {
        let counts: Vec<&Phase> = run
            .boots
            .iter()
            .filter_map(|b| b.phases[ph].as_ref())
            .collect();
        out += &phase_cells(&counts, pages(runs, size, entry, ph));
    }
    for p in peers {
        // The peer run the same way as this entry (`linux-6.1@profile` for
        // `deferred@profile`).
        let peer = format!("{p}{}", how_run(entry));
        let cell = match (
            per_page(runs, size, entry, 0),
            per_page(runs, size, &peer, 0),
        ) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "–".into(),
        };
        out += &format!(" {cell} |");
    }
    let totals: Vec<f64> = run.boots.iter().map(|b| b.total_insns as f64).collect();
    out += &format!(" {:.0} |\n", median(totals).unwrap_or(0.0));
    out
}

/// One phase's five cells: pages, medians per page of its rounds' `counts`
/// (none without pages) and the spread of their instructions.
fn phase_cells(counts: &[&Phase], pages: Option<u64>) -> String {
    match (counts.is_empty(), pages) {
        (false, Some(p)) if p > 0 => {
            let each = |f: fn(&Phase) -> u64| {
                median(counts.iter().map(|c| f(c) as f64 / p as f64).collect()).unwrap_or(0.0)
            };
            format!(
                " {p} | {:.1} | {:.2} | {:.1} | {} |",
                each(|c| c.insns),
                each(|c| c.stores),
                each(|c| c.bytes),
                spread(&counts.iter().map(|c| c.insns).collect::<Vec<_>>())
            )
        }
        (false, _) => format!(
            " – | – | – | – | {} |",
            spread(&counts.iter().map(|c| c.insns).collect::<Vec<_>>())
        ),
        (true, _) => " – | – | – | – | – |".into(),
    }
}

/// Where each phase's instructions go in round 1: its five top functions.
fn top_functions_table(runs: &[Run]) -> String {
    let mut out = String::from("\nwhere each phase's instructions go (round 1): the five functions with the most, share of the phase\n\n| size | entry | phase | top five functions |\n|---|---|---|---|\n");
    for run in runs {
        for (ph, (_, title)) in PHASES.iter().enumerate() {
            if let Some(p) = &run.boots[0].phases[ph] {
                let top: Vec<String> = p
                    .top
                    .iter()
                    .map(|(f, s)| format!("`{f}` {:.1} %", 100.0 * s))
                    .collect();
                out += &format!(
                    "| {} | {} | {title} | {} |\n",
                    run.size,
                    run.entry,
                    top.join(", ")
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(deferred: (u64, u64, u64, Option<u64>), boot_opens: u64) -> String {
        let (insns, stores, bytes, pages) = deferred;
        serde_json::json!({
            "total_insns": 1000,
            "phases": [
                {"name": "deferred", "insns": insns, "stores": stores, "bytes": bytes, "pages": pages, "opens": 2,
                 "functions": [{"function": "init_window", "insns": insns * 3 / 4}, {"function": "push", "insns": insns / 4}]},
                {"name": "boot_cpu_memmap", "insns": 50, "stores": 5, "bytes": 40, "pages": 10, "opens": boot_opens,
                 "functions": []}
            ]
        })
        .to_string()
    }

    /// A fresh directory for one test's profiles.
    fn profile_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("profile-table-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Two rounds of 16G `deferred` and of `linux-6.1`; Linux's second
    /// round never opens the boot-CPU phase.
    fn write_deferred_and_linux(dir: &Path) {
        let w = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        // memboot: 1000 pages, 13 000 and 13 100 instructions over two rounds.
        w(
            "16G-deferred-1.profile.json",
            profile((13_000, 9_000, 64_000, Some(1000)), 1),
        );
        w(
            "16G-deferred-2.profile.json",
            profile((13_100, 9_000, 64_000, Some(1000)), 1),
        );
        // Linux: no pages of its own; 65 000 instructions.
        w(
            "16G-linux-6.1-1.profile.json",
            profile((65_000, 12_000, 90_000, None), 1),
        );
        w(
            "16G-linux-6.1-2.profile.json",
            profile((65_000, 12_000, 90_000, None), 0),
        );
    }

    /// The tables of `dir` for 16G and `entries`, two rounds.
    fn tables_16g(dir: &Path, entries: &[&str]) -> String {
        let sizes = vec!["16G".to_string()];
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 2,
        };
        tables(dir, &plan).unwrap().unwrap()
    }

    /// The trimmed cells of `entry`'s 16G row of the per-page table.
    fn cells(text: &str, entry: &str) -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("| 16G | {entry} |")))
            .unwrap()
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    }

    #[test]
    fn per_page_figures_with_linux_divided_by_memboots_pages() {
        let dir = profile_dir("linux");
        write_deferred_and_linux(&dir);
        let text = tables_16g(&dir, &["deferred", "linux-6.1"]);
        let m = cells(&text, "deferred");
        // median of 13.0 and 13.1; spread 100 / 13 050.
        assert_eq!(
            &m[3..8],
            ["1000", "13.1", "9.00", "64.0", "0.766 %"],
            "{text}"
        );
        assert_eq!(m[13], "0.20", "13.05 / 65.0: {text}");
        let l = cells(&text, "linux-6.1");
        assert_eq!(
            &l[3..8],
            ["1000", "65.0", "12.00", "90.0", "0.000 %"],
            "{text}"
        );
        // A round whose boot-CPU phase never opened is left out of it.
        assert_eq!(l[12], "–", "one round only: no spread: {text}");
        assert!(
            text.contains(
                "| 16G | deferred | deferred init | `init_window` 75.0 %, `push` 25.0 % |"
            ),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A Linux profile with its own pages (its calls of
    /// `__init_single_page`) is divided by them, not by memboot's.
    #[test]
    fn linux_with_its_own_pages_is_divided_by_them() {
        let dir = profile_dir("linux-own");
        write_deferred_and_linux(&dir);
        for round in 1..=2 {
            std::fs::write(
                dir.join(format!("16G-linux-6.1-{round}.profile.json")),
                profile((65_000, 12_000, 90_000, Some(500)), 1),
            )
            .unwrap();
        }
        let text = tables_16g(&dir, &["deferred", "linux-6.1"]);
        let l = cells(&text, "linux-6.1");
        assert_eq!(&l[3..5], ["500", "130.0"], "{text}");
        let m = cells(&text, "deferred");
        assert_eq!(m[13], "0.10", "13.05 / 130.0: {text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An eager mode defers no page: no per-page figure, no ratio.
    #[test]
    fn an_eager_mode_has_no_deferred_figure_per_page() {
        let dir = profile_dir("eager");
        write_deferred_and_linux(&dir);
        std::fs::write(
            dir.join("16G-regions-1.profile.json"),
            profile((16, 16, 128, Some(0)), 1),
        )
        .unwrap();
        let text = tables_16g(&dir, &["regions", "deferred", "linux-6.1"]);
        let r = cells(&text, "regions");
        assert_eq!(
            (r[3].as_str(), r[4].as_str(), r[13].as_str()),
            ("–", "–", "–"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_without_profiles_has_no_table() {
        let (sizes, entries) = (vec!["1G".to_string()], vec!["deferred".to_string()]);
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        };
        assert_eq!(tables(Path::new("/nonexistent"), &plan).unwrap(), None);
    }
}
