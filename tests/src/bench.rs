//! The bench's report: the serial logs of one `tests/bench.sh` run read
//! back into rows (one per boot), a markdown table with every round, the
//! means and the ratios to Linux and to `memmap=touch`, and the rows as
//! JSON for the scaling chart (`memboot-plot scaling`) and for CI history.
//!
//! The figures, per boot:
//! - `boot_cpu_memmap_ns`: struct-page work on the boot CPU before SMP work
//!   starts (memboot's eager memmap phase; Linux's `free_area_init()` block).
//! - `memmap_ns`: all struct-page work of the boot: memboot's boot-CPU phase,
//!   its hand-off to the buddy and deferred init; Linux's early block and its
//!   slowest node's deferred init.
//! - `allocatable_ns`: from kernel entry until every present page can be
//!   allocated (memboot's summary key; Linux's last deferred-init line).
//! - `host_rss_mib`: QEMU's peak resident memory (run-qemu.sh's line).
//!
//! Logs are named `SIZE-ENTRY-ROUND.log` (ENTRY: a memmap mode, or `linux`);
//! an entry that was not booted at a size (its struct pages do not fit the
//! host) has `SIZE-ENTRY.skip` holding the reason instead.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::linux_log;

/// One boot's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: String,
    pub mem_mib: u64,
    /// "memboot" or "linux".
    pub kernel: &'static str,
    /// The memmap mode, or "linux".
    pub mode: String,
    pub round: u32,
    pub boot_cpu_memmap_ns: u64,
    pub memmap_ns: u64,
    /// `None` for a mode that hands no page to the allocator (`touch`).
    pub allocatable_ns: Option<u64>,
    pub host_rss_mib: Option<u64>,
    /// memboot: the summary's `total_ns`; Linux: when /init started.
    pub boot_ns: u64,
    /// memboot's allocation test: order-0 p99 latency (none for Linux, or
    /// with `alloc_test=0`).
    pub order0_p99_ns: Option<u64>,
}

/// What a bench run compared.
pub struct Plan<'a> {
    pub sizes: &'a [String],
    pub entries: &'a [String],
    pub rounds: u32,
}

/// `64G` → MiB (the sizes run-qemu.sh accepts; no suffix = MiB).
pub fn size_mib(size: &str) -> Result<u64, String> {
    let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size '{size}': expected e.g. 64G or 1T"))?;
    match &size[digits.len()..] {
        "" | "M" => Ok(n),
        "G" => Ok(n << 10),
        "T" => Ok(n << 20),
        other => Err(format!("size '{size}': unknown suffix '{other}'")),
    }
}

fn summary_of(text: &str) -> Result<Value, String> {
    let json = text
        .lines()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix("memboot-summary: "))
        .ok_or("no memboot-summary line: the boot did not finish")?;
    serde_json::from_str(json).map_err(|e| format!("bad summary JSON: {e}"))
}

fn key(summary: &Value, name: &str) -> Result<u64, String> {
    summary[name]
        .as_u64()
        .ok_or(format!("summary has no number '{name}'"))
}

/// A memboot boot's row from its log.
fn memboot_row(text: &str, size: &str, mode: &str, round: u32) -> Result<Row, String> {
    let s = summary_of(text)?;
    if s["status"] != "ok" {
        return Err(format!("the boot failed: status {}", s["status"]));
    }
    let boot_cpu = key(&s, "memmap_boot_ns")?;
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "memboot",
        mode: mode.to_string(),
        round,
        boot_cpu_memmap_ns: boot_cpu,
        memmap_ns: boot_cpu + key(&s, "buddy_eager_ns")? + key(&s, "deferred_ns")?,
        allocatable_ns: Some(key(&s, "allocatable_ns")?).filter(|&ns| ns > 0),
        host_rss_mib: crate::host_peak_rss_mib(text),
        boot_ns: key(&s, "total_ns")?,
        order0_p99_ns: order0_p99_ns(&s),
    })
}

/// The order-0 entry of the summary's `alloc_p99_ns`, found by `alloc_orders`.
fn order0_p99_ns(summary: &Value) -> Option<u64> {
    let orders = summary["alloc_orders"].as_array()?;
    let i = orders.iter().position(|o| o.as_u64() == Some(0))?;
    if key(summary, "alloc_test_pages").ok()? == 0 {
        return None; // alloc_test=0: the arrays hold no measurement
    }
    summary["alloc_p99_ns"][i].as_u64()
}

/// A Linux boot's row from its log.
fn linux_row(text: &str, size: &str, round: u32) -> Result<Row, String> {
    let boot = linux_log::parse(text).map_err(|e| e.to_string())?;
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "linux",
        mode: "linux".to_string(),
        round,
        boot_cpu_memmap_ns: boot.early_memmap_ns,
        memmap_ns: boot.early_memmap_ns + boot.deferred_ms() * 1_000_000,
        allocatable_ns: Some(boot.allocatable_ns),
        host_rss_mib: boot.host_peak_rss_mib,
        boot_ns: boot.init_started_ns,
        order0_p99_ns: None,
    })
}

/// One log → one row; `entry` "linux" reads a Linux log.
pub fn row_from_log(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    match entry {
        "linux" => linux_row(text, size, round),
        mode => memboot_row(text, size, mode, round),
    }
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
                let row = row_from_log(&text, size, entry, round)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                results.rows.push(row);
            }
        }
    }
    Ok(results)
}

fn mean(values: impl Iterator<Item = u64>) -> Option<f64> {
    let (sum, n) = values.fold((0u128, 0u64), |(s, n), v| (s + v as u128, n + 1));
    (n > 0).then(|| sum as f64 / n as f64)
}

fn ms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

/// The rows of one (size, entry), in round order.
fn series<'a>(rows: &'a [Row], size: &str, entry: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.size == size && r.mode == entry)
        .collect()
}

fn ratio(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}", v / b),
        _ => "–".to_string(),
    }
}

/// One table line for (size, entry).
fn table_line(rows: &[Row], size: &str, entry: &str) -> String {
    let rs = series(rows, size, entry);
    let memmap_mean = |e: &str| mean(series(rows, size, e).iter().map(|r| r.memmap_ns));
    // Every round, then the mean: "r1 / r2 → mean".
    let rounds_and_mean = |f: fn(&Row) -> Option<u64>| {
        let each: Vec<String> = rs
            .iter()
            .map(|r| f(r).map_or("–".into(), |ns| ms(ns as f64)))
            .collect();
        let m = mean(rs.iter().filter_map(|r| f(r))).map_or("–".into(), ms);
        format!("{} → {m}", each.join(" / "))
    };
    let optional_mean = |f: fn(&Row) -> Option<u64>| {
        mean(rs.iter().filter_map(|r| f(r))).map_or("–".into(), |m| format!("{m:.0}"))
    };
    format!(
        "| {size} | {} | {entry} | {} | {} | {} | {} | {} | {} | {} |",
        rs.first().map_or("", |r| r.kernel),
        rounds_and_mean(|r| Some(r.memmap_ns)),
        rounds_and_mean(|r| r.allocatable_ns),
        mean(rs.iter().map(|r| r.boot_cpu_memmap_ns)).map_or("–".into(), ms),
        optional_mean(|r| r.host_rss_mib),
        optional_mean(|r| r.order0_p99_ns),
        ratio(memmap_mean(entry), memmap_mean("linux")),
        ratio(memmap_mean(entry), memmap_mean("touch")),
    )
}

/// The markdown table (with a heading line saying how it was run).
pub fn table(results: &Results, plan: &Plan, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    out += "| size | kernel | mode | memmap ms: each round → mean | until allocatable ms: each \
            round → mean | boot-CPU memmap ms | host RSS MiB | order-0 p99 ns | × Linux | × touch |\n";
    out += "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for size in plan.sizes {
        for entry in plan.entries {
            if !series(&results.rows, size, entry).is_empty() {
                out += &table_line(&results.rows, size, entry);
                out.push('\n');
            }
        }
    }
    for Warmup { row: w, before } in &results.warmups {
        let _ = writeln!(
            out,
            "\nwarm-up boot (not counted) before {before}: {} {}: memmap {} ms, until allocatable {} ms, host RSS {} MiB",
            w.size,
            w.mode,
            ms(w.memmap_ns as f64),
            w.allocatable_ns.map_or("–".into(), |ns| ms(ns as f64)),
            w.host_rss_mib.map_or("–".into(), |m| m.to_string())
        );
    }
    for (size, entry, why) in &results.skipped {
        let _ = writeln!(out, "\n{size} {entry}: not booted: {why}");
    }
    out
}

fn row_json(r: &Row) -> Value {
    json!({
        "size": r.size, "mem_mib": r.mem_mib, "kernel": r.kernel, "mode": r.mode,
        "round": r.round, "boot_cpu_memmap_ns": r.boot_cpu_memmap_ns,
        "memmap_ns": r.memmap_ns, "allocatable_ns": r.allocatable_ns,
        "host_rss_mib": r.host_rss_mib, "boot_ns": r.boot_ns,
        "order0_p99_ns": r.order0_p99_ns,
    })
}

/// The rows as JSON: `{"meta": {...}, "rows": [...], "skipped": [...],
/// "warmup": the first warm-up's row or null, "warmups": every warm-up's row
/// with "before"}`.
pub fn to_json(results: &Results, meta: Value) -> Value {
    let rows: Vec<Value> = results.rows.iter().map(row_json).collect();
    let skipped: Vec<Value> = results
        .skipped
        .iter()
        .map(|(size, entry, why)| json!({"size": size, "mode": entry, "why": why}))
        .collect();
    let warmup = results.warmups.first().map(|w| row_json(&w.row));
    let warmups: Vec<Value> = results
        .warmups
        .iter()
        .map(|w| {
            let mut row = row_json(&w.row);
            row["before"] = json!(w.before);
            row
        })
        .collect();
    json!({"meta": meta, "rows": rows, "skipped": skipped, "warmup": warmup, "warmups": warmups})
}
