//! A bench run's directory read back: a row per timed boot, the entries
//! skipped per size with why, the warm-up boots, and the counted boots'
//! profiles beside their logs.

use std::path::Path;

use serde_json::Value;

use super::boot_row::{row_from_log, Row};
use super::entries::Plan;

/// The log of counted boot `k` (from 1) of `entry` at `size`: one of the
/// boots tests/bench.sh runs under the instruction profile after the
/// timed rounds (`crate::counted`), its profile beside it.
pub fn counted_log_name(size: &str, entry: &str, k: u32) -> String {
    format!("{size}-{entry}-counted-{k}.log")
}

/// The struct pages the boot CPU initialised in `entry`'s first counted
/// boot at `size`, as its own profile counted them (Linux's are its calls
/// of `__init_single_page`), or `None` without one.
pub fn counted_boot_cpu_pages(dir: &Path, size: &str, entry: &str) -> Option<u64> {
    let name = counted_log_name(size, entry, 1).replace(".log", ".profile.json");
    let profile: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).ok()?).ok()?;
    profile["phases"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "boot_cpu_memmap")?["pages"]
        .as_u64()
}

/// Every boot of a bench run, and the entries skipped per size with why.
pub struct Results {
    pub rows: Vec<Row>,
    pub skipped: Vec<(String, String, String)>,
    /// The warm-up boots, in the order they ran: shown, not counted.
    pub warmups: Vec<Warmup>,
}

/// A boot run only so that the next counted boot finds the host's memory
/// backed: what the order effect costs a large guest that follows idle time
/// or a small guest.
pub struct Warmup {
    pub row: Row,
    /// The counted boot it ran before, as `SIZE/ENTRY/ROUND`.
    pub before: String,
}

/// `warmup-N.log` with `warmup-N.entry` (`SIZE ENTRY BEFORE`), N = 1, 2, …
fn read_warmups(dir: &Path) -> Result<Vec<Warmup>, String> {
    let mut warmups = Vec::new();
    for n in 1.. {
        let entry_path = dir.join(format!("warmup-{n}.entry"));
        let Ok(what) = std::fs::read_to_string(&entry_path) else {
            break;
        };
        let fields: Vec<&str> = what.split_whitespace().collect();
        let [size, entry, before] = fields[..] else {
            return Err(format!(
                "{}: expected 'SIZE ENTRY BEFORE'",
                entry_path.display()
            ));
        };
        let path = dir.join(format!("warmup-{n}.log"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let row =
            row_from_log(&text, size, entry, 0).map_err(|e| format!("{}: {e}", path.display()))?;
        warmups.push(Warmup {
            row,
            before: before.to_string(),
        });
    }
    Ok(warmups)
}

/// Read a bench run's directory.
pub fn read_dir(dir: &Path, plan: &Plan) -> Result<Results, String> {
    let mut results = Results {
        rows: Vec::new(),
        skipped: Vec::new(),
        warmups: read_warmups(dir)?,
    };
    for size in plan.sizes {
        for entry in plan.entries {
            let skip = dir.join(format!("{size}-{entry}.skip"));
            if let Ok(why) = std::fs::read_to_string(&skip) {
                results
                    .skipped
                    .push((size.clone(), entry.clone(), why.trim().to_string()));
                continue;
            }
            for round in 1..=plan.rounds {
                let path = dir.join(format!("{size}-{entry}-{round}.log"));
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let mut row = row_from_log(&text, size, entry, round)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                if row.kernel == "linux" {
                    // Linux's log does not say which pages its boot CPU
                    // initialised; its counted boot's profile does.
                    row.boot_cpu_pages = counted_boot_cpu_pages(dir, size, entry);
                }
                results.rows.push(row);
            }
        }
    }
    Ok(results)
}
