//! The markdown table: per size and entry every round and the mean, and
//! the means' ratios to each Linux peer and to `touch` with the entry's
//! options; then the warm-ups and the skipped entries.

use std::fmt::Write as _;

use super::boot_row::Row;
use super::entries::{is_peer, peer_label, touch_entry, Plan};
use super::run_dir::{Results, Warmup};

/// The peers the ratio columns divide by, in entry order; `None` stands
/// for none in the run (one pair of empty columns, as every run had).
fn ratio_peers(entries: &[String]) -> Vec<Option<&str>> {
    let peers: Vec<Option<&str>> = entries
        .iter()
        .filter(|e| is_peer(e))
        .map(|e| Some(e.as_str()))
        .collect();
    if peers.is_empty() {
        vec![None]
    } else {
        peers
    }
}

fn mean(values: impl Iterator<Item = u64>) -> Option<f64> {
    let (sum, n) = values.fold((0u128, 0u64), |(s, n), v| (s + v as u128, n + 1));
    (n > 0).then(|| sum as f64 / n as f64)
}

fn ms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

/// The rows of one (size, entry), in round order.
pub(super) fn series<'a>(rows: &'a [Row], size: &str, entry: &str) -> Vec<&'a Row> {
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

/// Pages as a compact count with their share of the present pages:
/// `0.82 M (0.3 %)`.
pub(super) fn pages_cell(pages: Option<f64>, present: Option<f64>) -> String {
    let Some(p) = pages else {
        return "–".to_string();
    };
    let count = if p >= 1e6 {
        format!("{:.2} M", p / 1e6)
    } else {
        format!("{p:.0}")
    };
    match present {
        Some(total) if total > 0.0 => format!("{count} ({:.1} %)", 100.0 * p / total),
        _ => count,
    }
}

/// The table's columns after `size | kernel | mode`, in order: these,
/// then the ratios to each peer ([`columns`]).
pub const FIGURE_COLUMNS: [&str; 9] = [
    "memmap ms: each round → mean",
    "memory ready (allocatable) ms: each round → mean",
    "struct pages written by ready",
    "struct pages written by the end",
    "drain ms",
    "boot-CPU memmap ms",
    "growth step p50 / p99 ns",
    "host RSS MiB",
    "order-0 p50 / p99 ns",
];

/// Every column after `size | kernel | mode` for a run of `entries`: the
/// figures, memmap and ready × each peer, memmap × touch (the same
/// options' [`touch_entry`]).
pub fn columns(entries: &[String]) -> Vec<String> {
    let mut out: Vec<String> = FIGURE_COLUMNS.iter().map(|c| c.to_string()).collect();
    for peer in ratio_peers(entries) {
        let label = peer.map_or("Linux".to_string(), peer_label);
        out.push(format!("memmap × {label} memmap"));
        out.push(format!("QEMU start → ready × {label}"));
    }
    out.push("memmap × touch memmap".to_string());
    out
}

/// The huge pages column's cell: each size the entry's first boot
/// reserved pages of, `13 × 1.00 GiB`, with `HVO` where the kernel freed
/// their tail struct pages' vmemmap; `–` for none.
fn huge_cell(row: Option<&&Row>) -> String {
    let sizes: Vec<String> = row
        .map(|r| r.huge_pages.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|h| {
            let hvo = if h.hvo { ", HVO" } else { "" };
            format!("{} × {}{hvo}", h.pages, h.size.label())
        })
        .collect();
    if sizes.is_empty() {
        "–".to_string()
    } else {
        sizes.join(" + ")
    }
}

/// One table line for (size, entry), with ratios to `peers`, and the
/// huge pages column when `huge`.
fn table_line(rows: &[Row], size: &str, entry: &str, peers: &[Option<&str>], huge: bool) -> String {
    let rs = series(rows, size, entry);
    let huge_pages = if huge {
        format!(" {} |", huge_cell(rs.first()))
    } else {
        String::new()
    };
    let mean_of = |e: &str, f: fn(&Row) -> Option<u64>| {
        mean(series(rows, size, e).iter().filter_map(|r| f(r)))
    };
    // Every round, then the mean: "r1 / r2 → mean".
    let rounds_and_mean = |f: fn(&Row) -> Option<u64>| {
        let each: Vec<String> = rs
            .iter()
            .map(|r| f(r).map_or("–".into(), |ns| ms(ns as f64)))
            .collect();
        let m = mean(rs.iter().filter_map(|r| f(r))).map_or("–".into(), ms);
        format!("{} → {m}", each.join(" / "))
    };
    let whole =
        |f: fn(&Row) -> Option<u64>| mean_of(entry, f).map_or("–".into(), |m| format!("{m:.0}"));
    let pair = |a: fn(&Row) -> Option<u64>, b: fn(&Row) -> Option<u64>| match (
        mean_of(entry, a),
        mean_of(entry, b),
    ) {
        (None, None) => "–".to_string(),
        _ => format!("{} / {}", whole(a), whole(b)),
    };
    let present = mean_of(entry, |r| r.present_pages);
    let memmap = |r: &Row| Some(r.memmap_ns);
    let mut peer_ratios = String::new();
    for peer in peers {
        let of_peer = |f: fn(&Row) -> Option<u64>| peer.and_then(|p| mean_of(p, f));
        let _ = write!(
            peer_ratios,
            " {} | {} |",
            ratio(mean_of(entry, memmap), of_peer(memmap)),
            ratio(
                mean_of(entry, |r| r.qemu_start_to_ready_us),
                of_peer(|r| r.qemu_start_to_ready_us)
            ),
        );
    }
    format!(
        "| {size} | {} | {entry} |{huge_pages} {} | {} | {} | {} | {} | {} | {} | {} | {} |{peer_ratios} {} |",
        rs.first().map_or("", |r| r.kernel),
        rounds_and_mean(memmap),
        rounds_and_mean(|r| r.allocatable_ns),
        pages_cell(
            mean_of(entry, |r| r.pages_initialised_at_allocatable),
            present
        ),
        pages_cell(mean_of(entry, |r| r.pages_initialised), present),
        mean_of(entry, |r| r.drain_ns).map_or("–".into(), ms),
        mean_of(entry, |r| Some(r.boot_cpu_memmap_ns)).map_or("–".into(), ms),
        pair(|r| r.grow_step_p50_ns, |r| r.grow_step_p99_ns),
        whole(|r| r.host_rss_mib),
        pair(|r| r.order0_p50_ns, |r| r.order0_p99_ns),
        ratio(mean_of(entry, memmap), mean_of(&touch_entry(entry), memmap)),
    )
}

/// The huge pages column's heading: the memmap figures of its entries
/// take in their huge pages' preparation (`memmap_ns`, module doc of
/// `bench`), Linux's after memory is ready too.
pub const HUGE_COLUMN: &str = "huge pages (memmap includes their preparation: memboot's \
     hugetlb phase, Linux's mem_init, page_alloc_init_late and hugetlb_init)";

/// The markdown table (with a heading line saying how it was run): a
/// huge pages column after the mode when some boot reserved huge pages.
pub fn table(results: &Results, plan: &Plan, heading: &str) -> String {
    let huge = results.rows.iter().any(|r| !r.huge_pages.is_empty());
    let mut out = format!("{heading}\n\n");
    out += "| size | kernel | mode |";
    if huge {
        out += &format!(" {HUGE_COLUMN} |");
    }
    let columns = columns(plan.entries);
    for c in &columns {
        out += &format!(" {c} |");
    }
    out += "\n|---|---|---|";
    if huge {
        out += "---|";
    }
    out += &"---|".repeat(columns.len());
    out.push('\n');
    let peers = ratio_peers(plan.entries);
    for size in plan.sizes {
        for entry in plan.entries {
            if !series(&results.rows, size, entry).is_empty() {
                out += &table_line(&results.rows, size, entry, &peers, huge);
                out.push('\n');
            }
        }
    }
    for Warmup { row: w, before } in &results.warmups {
        let _ = writeln!(
            out,
            "\nwarm-up boot (not counted) before {before}: {} {}: memmap {} ms, memory ready {} ms, host RSS {} MiB",
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
