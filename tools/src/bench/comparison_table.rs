//! The comparison of a run made in a named host-memory state: median
//! (min–max) over the rounds, and ratios taken round by round.

use std::fmt::Write as _;

use super::boot_row::Row;
use super::entries::{is_peer, peer_label, touch_entry, Plan};
use super::means_table::{pages_cell, series};
use super::run_dir::Results;

/// The middle of `values` and their range: `median (min–max)`, each by
/// `show`; `–` for none.
fn median_range(mut values: Vec<f64>, show: impl Fn(f64) -> String) -> String {
    if values.is_empty() {
        return "–".to_string();
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    format!(
        "{} ({}–{})",
        show(median),
        show(values[0]),
        show(values[n - 1])
    )
}

/// The columns of [`comparison`] after `size | kernel | mode`; `touch`:
/// the run boots the store floor, and a column divides by it; `waits`:
/// its logs say how long the vCPUs waited for a host CPU; `probes`: how
/// fast the host CPUs ran a fixed loop around each boot.
/// The column of [`Row::most_vcpu_wait_ns`], in runs whose logs list the
/// vCPUs' waits (run-qemu.sh since d4a2464).
const MOST_WAITED: &str =
    "most a vCPU waited for a host CPU ms (memboot: entry → ready; Linux: last CPU up → ready)";

/// The column of [`Row::slowest_probe_ns`], in runs whose logs have
/// run-qemu.sh's host CPU speed line (since 49ce30e).
const SLOWEST_PROBE: &str =
    "slowest host CPU probe ms (a fixed loop before and after QEMU; lower is faster)";

/// The cells of the host's columns an entry's rows `rs` have: the most a
/// vCPU waited (`waits`), the slowest host CPU probe (`probes`).
fn host_cells(rs: &[&Row], waits: bool, probes: bool) -> String {
    let of =
        |f: fn(&Row) -> Option<u64>| rs.iter().filter_map(|r| f(r)).map(|v| v as f64).collect();
    let mut cells = String::new();
    if waits {
        let ms = |v: f64| format!("{:.1}", v / 1e6);
        cells += &format!(" {} |", median_range(of(|r| r.most_vcpu_wait_ns), ms));
    }
    if probes {
        let ms = |v: f64| format!("{:.2}", v / 1e6);
        cells += &format!(" {} |", median_range(of(|r| r.slowest_probe_ns), ms));
    }
    cells
}

fn comparison_columns(peers: &[&str], touch: bool, waits: bool, probes: bool) -> Vec<String> {
    let mut out: Vec<String> = [
        "memmap ms",
        "memory ready ms",
        "QEMU start → ready ms",
        "entry latency ms",
        "boot-CPU memmap ms",
        "boot-CPU pages",
        "pages by ready",
    ]
    .map(String::from)
    .to_vec();
    if waits {
        out.push(MOST_WAITED.to_string());
    }
    if probes {
        out.push(SLOWEST_PROBE.to_string());
    }
    for p in peers {
        let label = peer_label(p);
        out.push(format!("memmap × {label}"));
        out.push(format!("QEMU start → ready × {label}"));
    }
    if touch {
        out.push("memmap × touch".to_string());
    }
    out
}

/// The comparison of a run made in a named host-memory state: per entry,
/// every figure as median (min–max) over the rounds, and its ratios to
/// each Linux peer, and to `touch` with the entry's options
/// ([`touch_entry`]) when the run boots it, taken round by round (round i
/// of the entry over round i of the other: ABBA puts them side by side),
/// median (min–max). memmap is
/// the whole struct-page work before memory is ready (boot CPU + hand-off +
/// deferred init), so which phase a page falls in cannot change a verdict;
/// the pages columns say how each kernel split it. `None` for runs from
/// before the states (their logs name none).
pub fn comparison(results: &Results, plan: &Plan) -> Option<String> {
    let state = results.rows.iter().find_map(|r| r.host_memory.clone())?;
    let peers: Vec<&str> = plan
        .entries
        .iter()
        .filter(|e| is_peer(e))
        .map(String::as_str)
        .collect();
    let touch = plan
        .entries
        .iter()
        .any(|e| e.split('+').next() == Some("touch"));
    let waits = results.rows.iter().any(|r| r.most_vcpu_wait_ns.is_some());
    let probes = results.rows.iter().any(|r| r.slowest_probe_ns.is_some());
    let columns = comparison_columns(&peers, touch, waits, probes);
    let mut out = format!(
        "\ncomparison, host memory {state}: median (min–max) over the rounds; ratios round by round\n\n| size | kernel | mode |"
    );
    for c in &columns {
        out += &format!(" {c} |");
    }
    out += "\n|---|---|---|";
    out += &"---|".repeat(columns.len());
    out.push('\n');
    let ms = |v: f64| format!("{:.1}", v / 1e6);
    let pages = |v: f64| pages_cell(Some(v), None);
    for size in plan.sizes {
        for entry in plan.entries {
            let rs = series(&results.rows, size, entry);
            if rs.is_empty() {
                continue;
            }
            let of = |f: &dyn Fn(&Row) -> Option<u64>| -> Vec<f64> {
                rs.iter().filter_map(|r| f(r)).map(|v| v as f64).collect()
            };
            let mut line = format!(
                "| {size} | {} | {entry} | {} | {} | {} | {} | {} | {} | {} |",
                rs[0].kernel,
                median_range(of(&|r| Some(r.memmap_ns)), ms),
                median_range(of(&|r| r.allocatable_ns), ms),
                median_range(of(&|r| r.qemu_start_to_ready_us.map(|us| us * 1000)), ms),
                median_range(of(&|r| r.entry_latency_us.map(|us| us * 1000)), ms),
                median_range(of(&|r| Some(r.boot_cpu_memmap_ns)), ms),
                // Each kernel's own: Linux's from its counted boot, else "–".
                median_range(of(&|r| r.boot_cpu_pages), pages),
                median_range(of(&|r| r.pages_initialised_at_allocatable), pages),
            );
            line += &host_cells(&rs, waits, probes);
            // Round i of the entry over round i of `other`, median (min–max).
            let over = |other: &str, f: fn(&Row) -> Option<u64>| -> String {
                let base = series(&results.rows, size, other);
                let ratios: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| {
                        let b = base.iter().find(|b| b.round == r.round)?;
                        let (v, b) = (f(r)? as f64, f(b)? as f64);
                        (b > 0.0).then(|| v / b)
                    })
                    .collect();
                median_range(ratios, |v| format!("{v:.2}"))
            };
            for peer in &peers {
                let _ = write!(
                    line,
                    " {} | {} |",
                    over(peer, |r| Some(r.memmap_ns)),
                    over(peer, |r| r.qemu_start_to_ready_us),
                );
            }
            if touch {
                let _ = write!(
                    line,
                    " {} |",
                    over(&touch_entry(entry), |r| Some(r.memmap_ns))
                );
            }
            out += &line;
            out.push('\n');
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::is_linux;

    fn row(mode: &str, round: u32, memmap_ms: u64, ready_ms: u64) -> Row {
        Row {
            size: "16G".into(),
            mem_mib: 16 << 10,
            kernel: if is_linux(mode) { "linux" } else { "memboot" },
            mode: mode.into(),
            round,
            boot_cpu_memmap_ns: 1_000_000,
            memmap_ns: memmap_ms * 1_000_000,
            allocatable_ns: Some(ready_ms * 1_000_000),
            host_rss_mib: None,
            boot_ns: 0,
            order0_p50_ns: None,
            order0_p99_ns: None,
            present_pages: None,
            pages_initialised_at_allocatable: Some(4 << 20),
            pages_initialised: Some(4 << 20),
            drain_ns: None,
            grow_step_p50_ns: None,
            grow_step_p99_ns: None,
            host_memory: Some("cold".into()),
            entry_latency_us: Some(90_000 + u64::from(round)),
            // Host-timed from QEMU's start: firmware and entry before it.
            qemu_start_to_ready_us: Some((ready_ms + 100) * 1000),
            minor_faults: None,
            most_vcpu_wait_ns: None,
            slowest_probe_ns: None,
            boot_cpu_pages: (!is_linux(mode)).then_some(851_839),
            deferred_jiffies_ms: None,
            deferred_printk_ns: None,
            huge_pages: Vec::new(),
        }
    }
    #[test]
    fn median_and_range() {
        let show = |v: f64| format!("{v}");
        assert_eq!(median_range(vec![3.0, 1.0, 2.0], show), "2 (1–3)");
        assert_eq!(median_range(vec![4.0, 1.0, 2.0, 3.0], show), "2.5 (1–4)");
        assert_eq!(median_range(vec![], show), "–");
    }

    /// With the store floor in the run, each entry over the `touch` of its
    /// own options, round by round.
    #[test]
    fn comparison_over_touch_of_the_same_options() {
        let rows = vec![
            row("deferred+struct_page=8", 1, 11, 30),
            row("deferred+struct_page=8", 2, 12, 30),
            row("touch+struct_page=8", 1, 10, 0),
            row("touch+struct_page=8", 2, 8, 0),
            row("touch", 1, 100, 0),
            row("touch", 2, 100, 0),
        ];
        let results = Results {
            rows,
            skipped: vec![],
            warmups: vec![],
        };
        let sizes = vec!["16G".to_string()];
        let entries: Vec<String> = ["deferred+struct_page=8", "touch+struct_page=8", "touch"]
            .map(String::from)
            .to_vec();
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 2,
        };
        let text = comparison(&results, &plan).unwrap();
        assert!(text.contains("| memmap × touch |"), "{text}");
        let line = text
            .lines()
            .find(|l| l.contains("| deferred+struct_page=8 |"))
            .unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // 11/10 and 12/8, never over 64-byte touch's 100.
        assert_eq!(cells[cells.len() - 2], "1.30 (1.10–1.50)", "{line}");
    }

    /// Ratios pair the rounds (round i over round i), not the medians.
    #[test]
    fn comparison_ratios_round_by_round() {
        let rows = vec![
            row("deferred", 1, 100, 200),
            row("deferred", 2, 300, 200),
            row("deferred", 3, 50, 200),
            row("linux-6.1", 1, 400, 800),
            row("linux-6.1", 2, 300, 400),
            row("linux-6.1", 3, 100, 400),
        ];
        let results = Results {
            rows,
            skipped: vec![],
            warmups: vec![],
        };
        let (sizes, entries) = (
            vec!["16G".to_string()],
            vec!["deferred".to_string(), "linux-6.1".to_string()],
        );
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 3,
        };
        let text = comparison(&results, &plan).unwrap();
        assert!(text.contains("host memory cold"), "{text}");
        let line = text.lines().find(|l| l.contains("| deferred |")).unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // memmap 100/400, 300/300, 50/100: median 0.50, range 0.25–1.00
        // (the ratio of the medians would be 100/300).
        assert_eq!(cells[cells.len() - 3], "0.50 (0.25–1.00)", "{line}");
        // Ready host-timed from QEMU's start, not the kernels' own clocks
        // (which would give 200/800, 200/400, 200/400): 300/900, 300/500,
        // 300/500.
        assert_eq!(cells[cells.len() - 2], "0.60 (0.33–0.60)", "{line}");
        assert_eq!(cells[4], "100.0 (50.0–300.0)", "{line}");
        // Linux's boot-CPU pages are its own (none here: no counted boot),
        // never memboot's.
        let linux = text.lines().find(|l| l.contains("| linux-6.1 |")).unwrap();
        let linux_cells: Vec<&str> = linux.split('|').map(str::trim).collect();
        assert_eq!(linux_cells[9], "–", "{linux}");
        assert!(!linux.contains("851839"), "{linux}");
        // Runs from before the states have no comparison.
        let mut old = results;
        old.rows.iter_mut().for_each(|r| r.host_memory = None);
        assert_eq!(comparison(&old, &plan), None);
    }

    /// Logs that list the vCPUs' waits add a column of the most any waited;
    /// a run whose logs do not has no such column.
    #[test]
    fn the_most_a_vcpu_waited_is_a_column_only_where_the_logs_say() {
        let waited = |mode, round, ms: u64| Row {
            most_vcpu_wait_ns: Some(ms * 1_000_000),
            ..row(mode, round, 10, 20)
        };
        let rows = vec![
            waited("deferred", 1, 4),
            waited("deferred", 2, 1),
            waited("deferred", 3, 2),
        ];
        let text = deferred_16g(rows.clone());
        assert!(
            text.contains(&format!("| pages by ready | {MOST_WAITED} |")),
            "{text}"
        );
        let line = text.lines().find(|l| l.contains("| deferred |")).unwrap();
        assert!(line.ends_with("| 2.0 (1.0–4.0) |"), "{line}");
        let unlisted = rows.into_iter().map(|r| Row {
            most_vcpu_wait_ns: None,
            ..r
        });
        let text = deferred_16g(unlisted.collect());
        assert!(!text.contains(MOST_WAITED), "{text}");
    }

    /// Logs with run-qemu.sh's host CPU probes add a column of the slowest
    /// probe, after the waits'; a run whose logs have none has no such
    /// column.
    #[test]
    fn the_slowest_host_cpu_probe_is_a_column_only_where_the_logs_say() {
        let probed = |round, us: u64| Row {
            most_vcpu_wait_ns: Some(1_000_000),
            slowest_probe_ns: Some(us * 1000),
            ..row("deferred", round, 10, 20)
        };
        let rows = vec![probed(1, 400), probed(2, 750), probed(3, 410)];
        let text = deferred_16g(rows.clone());
        assert!(
            text.contains(&format!("| {MOST_WAITED} | {SLOWEST_PROBE} |")),
            "{text}"
        );
        let line = text.lines().find(|l| l.contains("| deferred |")).unwrap();
        assert!(
            line.ends_with("| 1.0 (1.0–1.0) | 0.41 (0.40–0.75) |"),
            "{line}"
        );
        let unprobed = rows.into_iter().map(|r| Row {
            slowest_probe_ns: None,
            ..r
        });
        let text = deferred_16g(unprobed.collect());
        assert!(!text.contains(SLOWEST_PROBE), "{text}");
    }

    /// The comparison of a run of one entry, `deferred` at 16G, in three
    /// rounds.
    fn deferred_16g(rows: Vec<Row>) -> String {
        let (sizes, entries) = (vec!["16G".to_string()], vec!["deferred".to_string()]);
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 3,
        };
        let results = Results {
            rows,
            skipped: vec![],
            warmups: vec![],
        };
        comparison(&results, &plan).unwrap()
    }
}
