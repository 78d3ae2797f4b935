//! The rows as JSON, for the scaling chart (`memboot-plot scaling`) and
//! for CI history.

use serde_json::{json, Value};

use super::boot_row::Row;
use super::run_dir::Results;

/// A row as JSON; `huge_pages` (`[{"size": "1.00 GiB", "pages": 13,
/// "hvo": true}]`) only where the boot reserved huge pages, so that the
/// rows of runs without them stay as they were.
fn row_json(r: &Row) -> Value {
    let mut row = json!({
        "size": r.size, "mem_mib": r.mem_mib, "kernel": r.kernel, "mode": r.mode,
        "round": r.round, "boot_cpu_memmap_ns": r.boot_cpu_memmap_ns,
        "memmap_ns": r.memmap_ns, "allocatable_ns": r.allocatable_ns,
        "host_rss_mib": r.host_rss_mib, "boot_ns": r.boot_ns,
        "order0_p50_ns": r.order0_p50_ns, "order0_p99_ns": r.order0_p99_ns,
        "present_pages": r.present_pages,
        "pages_initialised_at_allocatable": r.pages_initialised_at_allocatable,
        "pages_initialised": r.pages_initialised, "drain_ns": r.drain_ns,
        "grow_step_p50_ns": r.grow_step_p50_ns, "grow_step_p99_ns": r.grow_step_p99_ns,
        "host_memory": r.host_memory, "entry_latency_us": r.entry_latency_us,
        "qemu_start_to_ready_us": r.qemu_start_to_ready_us, "minor_faults": r.minor_faults,
        "most_vcpu_wait_ns": r.most_vcpu_wait_ns,
        "slowest_probe_ns": r.slowest_probe_ns,
        "boot_cpu_pages": r.boot_cpu_pages,
        "deferred_jiffies_ms": r.deferred_jiffies_ms, "deferred_printk_ns": r.deferred_printk_ns,
    });
    if !r.huge_pages.is_empty() {
        let sizes: Vec<Value> = r
            .huge_pages
            .iter()
            .map(|h| json!({"size": h.size.label(), "pages": h.pages, "hvo": h.hvo}))
            .collect();
        row["huge_pages"] = json!(sizes);
    }
    row
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
