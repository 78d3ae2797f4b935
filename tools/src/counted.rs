//! The bench's counted verdict: after its timed rounds, `tests/bench.sh`
//! boots every entry `--counted N` more times (default 2) under the
//! instruction profile (`SIZE-ENTRY-counted-K.log` and its
//! `.profile.json`), and these tables give what those boots counted:
//! guest instructions, stores and bytes per struct page for each memmap
//! phase and for the whole memmap, with their ratios to each Linux peer,
//! and deferred init by NUMA node with its critical path. Counts do not
//! depend on the host; the boots are shown side by side so that their
//! agreement can be read (spin-waits are left out of a phase: the host's
//! scheduling decides how long they run). Only the per-vCPU split's
//! parallel efficiency depends on the host.
//!
//! Each kernel's own pages divide its counts: a phase's, memboot's from its
//! summary and Linux's its calls of `__init_single_page` in the phase
//! (`memboot_profile::linux_pages`; unknown, "–", where the build inlines
//! that function everywhere, as Debian's 6.12 does); the whole memmap's,
//! the struct pages the boot's own log says it initialised (memboot's
//! summary, Linux's `Memory:` and unavailable-range lines), which for
//! Linux include the reserved pages its hand-off initialises.
//!
//! An entry with huge pages (`+hugepagesz=…` words) also counts their
//! preparation (phase `hugetlb`: memboot's, and Linux's `hugetlb_init` and
//! `gather_bootmem_prealloc_parallel` wherever it runs) in
//! its whole memmap, whose pages then add the struct pages memboot's phase
//! wrote; a table of totals puts that work beside each Linux peer with the
//! same huge pages. Without huge pages the phase is left out: Linux's
//! `hugetlb_init` then only sets up its (empty) pools.
//!
//! memboot's `vmemmap` phase (the struct pages' storage reserved and
//! mapped, the 1 GiB pages and their HVO frames reserved) is part of its
//! whole memmap: Linux 7.3's boot-CPU phase (`mm_core_init_early`) holds
//! its reservation of the huge pages and their HVO vmemmap; 6.1's and
//! 6.12's vmemmap is built in `sparse_init()`, before their boot-CPU
//! phase, and counted in none (their whole memmap leaves it out).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bench::{
    counted_log_name, huge_words, is_linux, is_peer, linux_series, peer_label, touch_entry, Plan,
};

/// The memmap phases, in the order the boot runs them, with their titles.
const PHASES: [(&str, &str); 6] = [
    ("vmemmap", "vmemmap"),
    ("boot_cpu_memmap", "boot-CPU memmap"),
    ("free_bitmaps", "free bitmaps"),
    ("buddy_handoff", "hand-off"),
    ("deferred", "deferred init"),
    (HUGETLB, "huge pages"),
];
/// The huge pages' preparation, counted for entries with huge pages only.
const HUGETLB: &str = "hugetlb";
/// The whole memmap's row: every phase above, per struct page the boot
/// initialised (its log's count).
const MEMMAP: &str = "whole memmap";
/// The phases counted per call, with their titles: the page allocator's
/// entries (Linux's too), memboot's order-0 path through the per-CPU caches,
/// its buddy store behind them, memboot's boot CPU from `boot::start`
/// to memory ready and its memory-block creation (one call a boot each).
const CALL_PHASES: [(&str, &str); 8] = [
    ("page_alloc", "page allocation, any order"),
    ("page_free", "page free, any order"),
    ("pcp_alloc", "order 0: per-CPU cache pop"),
    ("pcp_free", "order 0: per-CPU cache push"),
    ("buddy_alloc", "buddy store allocation"),
    ("buddy_free", "buddy store free"),
    ("to_ready", "boot CPU, start to memory ready"),
    ("memory_blocks", "memory-block creation"),
];

fn profile_path(dir: &Path, size: &str, entry: &str, k: u32) -> PathBuf {
    dir.join(counted_log_name(size, entry, k).replace(".log", ".profile.json"))
}

/// One phase of one counted boot.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Counts {
    insns: u64,
    stores: u64,
    bytes: u64,
    pages: Option<u64>,
}

impl Counts {
    fn per_page(&self) -> Option<[f64; 3]> {
        let p = self.pages.filter(|&p| p > 0)? as f64;
        Some([self.insns, self.stores, self.bytes].map(|x| x as f64 / p))
    }
}

/// Deferred init by node, as memboot-profile split it.
#[derive(Clone, Debug, PartialEq)]
struct Nodes {
    nodes: usize,
    workers: u64,
    node_insns: (u64, u64),
    critical_path: f64,
    critical_path_per_page: Option<f64>,
    parallel_efficiency: f64,
}

/// One phase of calls in one counted boot: the calls that returned and
/// what they counted (spin-waits left out, as everywhere).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Calls {
    calls: u64,
    insns: u64,
    stores: u64,
    /// Instructions in functions named `clear_page*` or `*clear_pages*`
    /// (7.3's `__clear_pages_unrolled`): Linux zeroes `__GFP_ZERO` pages
    /// inside its allocator, memboot's callers zero what they need.
    zeroing_insns: u64,
}

impl Calls {
    /// Per call: instructions, stores, instructions zeroing pages.
    fn per_call(&self) -> Option<[f64; 3]> {
        let n = (self.calls > 0).then_some(self.calls as f64)?;
        Some([self.insns, self.stores, self.zeroing_insns].map(|x| x as f64 / n))
    }
}

/// One counted boot: each phase of [`PHASES`] that ran, the whole memmap,
/// deferred init by node, and each phase of [`CALL_PHASES`] that ran.
#[derive(Clone, Debug, PartialEq)]
struct Boot {
    phases: Vec<Option<Counts>>,
    memmap: Option<Counts>,
    nodes: Option<Nodes>,
    calls: Vec<Option<Calls>>,
}

/// The profile's phase `name`, as written.
fn phase_json<'a>(profile: &'a Value, name: &str) -> Option<&'a Value> {
    profile["phases"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

fn phase(profile: &Value, name: &str) -> Option<Counts> {
    let p = phase_json(profile, name)?;
    if p["opens"].as_u64() == Some(0) {
        return None; // the phase never ran in this boot
    }
    Some(Counts {
        insns: p["insns"].as_u64()?,
        stores: p["stores"].as_u64()?,
        bytes: p["bytes"].as_u64()?,
        pages: p["pages"].as_u64(),
    })
}

fn calls(profile: &Value, name: &str) -> Option<Calls> {
    let p = phase_json(profile, name)?;
    let zeroing_insns = p["functions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| {
            f["function"]
                .as_str()
                .is_some_and(|n| n.contains("clear_page"))
        })
        .filter_map(|f| f["insns"].as_u64())
        .sum();
    Some(Calls {
        calls: p["closes"].as_u64().filter(|&n| n > 0)?,
        insns: p["insns"].as_u64()?,
        stores: p["stores"].as_u64()?,
        zeroing_insns,
    })
}

fn nodes(profile: &Value) -> Option<Nodes> {
    let split = &profile["deferred_nodes"];
    let each = split["nodes"].as_array()?;
    let insns: Vec<u64> = each.iter().filter_map(|n| n["insns"].as_u64()).collect();
    Some(Nodes {
        nodes: each.len(),
        workers: each.iter().filter_map(|n| n["workers"].as_u64()).sum(),
        node_insns: (*insns.iter().min()?, *insns.iter().max()?),
        critical_path: split["critical_path_insns"].as_f64()?,
        critical_path_per_page: split["critical_path_per_page"].as_f64(),
        parallel_efficiency: split["parallel_efficiency"].as_f64()?,
    })
}

/// A counted boot from its profile, and the struct pages its log says it
/// initialised (`pages_initialised`); with `huge_pages` (the entry asks
/// for some) their preparation too, whose struct pages memboot's profile
/// counts (a Linux log already has them).
fn boot(profile: &Value, pages_initialised: Option<u64>, huge_pages: bool, linux: bool) -> Boot {
    let phases: Vec<Option<Counts>> = PHASES
        .iter()
        .map(|(n, _)| phase(profile, n).filter(|_| huge_pages || *n != HUGETLB))
        .collect();
    let ran: Vec<&Counts> = phases.iter().flatten().collect();
    let huge_struct_pages = match phases.last() {
        Some(Some(c)) if !linux => c.pages.unwrap_or(0),
        _ => 0,
    };
    let memmap = (!ran.is_empty()).then(|| Counts {
        insns: ran.iter().map(|c| c.insns).sum(),
        stores: ran.iter().map(|c| c.stores).sum(),
        bytes: ran.iter().map(|c| c.bytes).sum(),
        pages: pages_initialised.map(|p| p + huge_struct_pages),
    });
    Boot {
        phases,
        memmap,
        nodes: nodes(profile),
        calls: CALL_PHASES.iter().map(|(n, _)| calls(profile, n)).collect(),
    }
}

/// The profiles of `entry`'s counted boots at `size` in `dir`
/// (`SIZE-ENTRY-counted-K.profile.json`, K from 1 until one is missing),
/// each with its K.
fn counted_profiles(dir: &Path, size: &str, entry: &str) -> Result<Vec<(u32, Value)>, String> {
    let mut out = Vec::new();
    for k in 1.. {
        let path = profile_path(dir, size, entry, k);
        let Ok(text) = std::fs::read_to_string(&path) else {
            break;
        };
        let v = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push((k, v));
    }
    Ok(out)
}

/// What the seeds table reads of one counted boot: a phase's
/// instructions (spin-waits left out), and deferred init by node.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedCounts {
    /// Instructions of each phase that ran, by the profile's name.
    pub phase_insns: Vec<(String, u64)>,
    /// Each node's deferred-init instructions.
    pub node_insns: Vec<u64>,
    /// The largest node's instructions per worker (`critical_path_insns`).
    pub critical_path_insns: Option<f64>,
}

impl SeedCounts {
    pub fn phase(&self, name: &str) -> Option<u64> {
        self.phase_insns
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, i)| i)
    }
}

/// The counted boots of `entry` at `size` in the run directory `dir`
/// (`SIZE-ENTRY-counted-K.profile.json`, K from 1), in order; none when
/// the run counted none.
pub fn seed_counts(dir: &Path, size: &str, entry: &str) -> Result<Vec<SeedCounts>, String> {
    let mut out = Vec::new();
    for (_, v) in counted_profiles(dir, size, entry)? {
        let phase_insns = v["phases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["opens"].as_u64() != Some(0))
            .filter_map(|p| Some((p["name"].as_str()?.to_string(), p["insns"].as_u64()?)))
            .collect();
        let split = &v["deferred_nodes"];
        out.push(SeedCounts {
            phase_insns,
            node_insns: split["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n["insns"].as_u64())
                .collect(),
            critical_path_insns: split["critical_path_insns"].as_f64(),
        });
    }
    Ok(out)
}

/// The counted boots of one (size, entry), in order.
struct Run {
    size: String,
    entry: String,
    boots: Vec<Boot>,
}

fn read_runs(dir: &Path, plan: &Plan) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for size in plan.sizes {
        for entry in plan.entries {
            let mut boots = Vec::new();
            for (k, v) in counted_profiles(dir, size, entry)? {
                let log = dir.join(counted_log_name(size, entry, k));
                let log =
                    std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
                let row = crate::bench::row_from_log(&log, size, entry, k)?;
                let huge = !huge_words(entry).is_empty();
                boots.push(boot(&v, row.pages_initialised, huge, is_linux(entry)));
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

/// Row `i` of a boot: phase `i` of [`PHASES`], or the whole memmap.
fn row(b: &Boot, i: usize) -> Option<Counts> {
    if i < PHASES.len() {
        b.phases[i]
    } else {
        b.memmap
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The mean over `run`'s boots of row `i`'s figure `f` per page.
fn mean_per_page(run: &Run, i: usize, f: usize) -> Option<f64> {
    let v: Vec<f64> = run
        .boots
        .iter()
        .filter_map(|b| Some(row(b, i)?.per_page()?[f]))
        .collect();
    mean(&v)
}

/// (max − min) / max of the boots' instructions, in percent: how far two
/// counts of the same code apart are.
fn disagreement(counts: &[Counts]) -> String {
    let insns: Vec<u64> = counts.iter().map(|c| c.insns).collect();
    match (insns.iter().max(), insns.iter().min()) {
        (Some(&max), Some(&min)) if max > 0 && insns.len() > 1 => {
            format!("{:.3} %", 100.0 * (max - min) as f64 / max as f64)
        }
        _ => "–".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "–".into(),
    }
}

/// The per-page table: a row per (size, entry, phase) that ran.
fn per_page_table(runs: &[Run], peers: &[&String]) -> String {
    let mut out = String::from(
        "\ncounted (memboot-profile; README \"The counted verdict\"): guest instructions, stores and bytes \
         stored per struct page, each counted boot (/); disagreement = (max − min) / max of the boots' \
         instructions; × Linux = the entry's mean per page over the peer's, the same phase; × touch = \
         over the store floor's with the same options (`memmap=touch`, the same struct-page size)\n\n\
         | size | entry | phase | pages | instructions / page | stores / page | bytes / page | disagreement |",
    );
    for p in peers {
        let l = peer_label(p);
        out += &format!(" instructions × {l} | stores × {l} | bytes × {l} |");
    }
    out += " instructions × touch | stores × touch | bytes × touch |";
    out += "\n|---|---|---|---|---|---|---|---|";
    out += &"---|---|---|".repeat(peers.len() + 1);
    out.push('\n');
    for run in runs {
        for i in 0..=PHASES.len() {
            let counts: Vec<Counts> = run.boots.iter().filter_map(|b| row(b, i)).collect();
            let Some(first) = counts.first() else {
                continue;
            };
            let title = PHASES.get(i).map_or(MEMMAP, |p| p.1);
            let each = |f: usize, digits: usize| -> String {
                let v: Vec<String> = counts
                    .iter()
                    .map(|c| {
                        c.per_page()
                            .map_or("–".into(), |x| format!("{:.*}", digits, x[f]))
                    })
                    .collect();
                v.join(" / ")
            };
            out += &format!(
                "| {} | {} | {title} | {} | {} | {} | {} | {} |",
                run.size,
                run.entry,
                first.pages.map_or("–".into(), |p| p.to_string()),
                each(0, 2),
                each(1, 2),
                each(2, 1),
                disagreement(&counts)
            );
            let touch = touch_entry(&run.entry);
            for p in peers.iter().map(|p| p.as_str()).chain([touch.as_str()]) {
                let peer = runs.iter().find(|r| r.size == run.size && r.entry == p);
                for f in 0..3 {
                    let b = peer.and_then(|peer| mean_per_page(peer, i, f));
                    out += &format!(" {} |", ratio(mean_per_page(run, i, f), b));
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The whole memmap with the huge pages' preparation, in totals (means of
/// the counted boots), beside each Linux peer with the same huge-page
/// words: a row per entry with huge pages, `None` when none has any.
fn totals_table(runs: &[Run], peers: &[&String]) -> Option<String> {
    let huge: Vec<&Run> = runs
        .iter()
        .filter(|r| !huge_words(&r.entry).is_empty())
        .collect();
    if huge.is_empty() {
        return None;
    }
    let mut series: Vec<&str> = peers.iter().filter_map(|p| linux_series(p)).collect();
    series.sort_unstable();
    series.dedup();
    let mut out = String::from(
        "\ncounted, the whole memmap with the huge pages' preparation (memboot's `hugetlb` phase, Linux's \
         `hugetlb_init` and `gather_bootmem_prealloc_parallel` wherever it runs and, in 6.1, \
         `memblock_free_all` writing the 1 GiB pages' tails), in totals: \
         millions of guest instructions, stores and bytes stored, means of the counted boots; × Linux N = \
         over that kernel's with the same huge-page options\n\n\
         | size | entry | instructions M | stores M | bytes M |",
    );
    for s in &series {
        out += &format!(" total instructions × Linux {s} | total bytes × Linux {s} |");
    }
    out += "\n|---|---|---|---|---|";
    out += &"---|---|".repeat(series.len());
    out.push('\n');
    let million = |x: Option<f64>| x.map_or("–".into(), |x| format!("{:.2}", x / 1e6));
    for run in huge {
        let field = |f: usize| total(run, f);
        out += &format!(
            "| {} | {} | {} | {} | {} |",
            run.size,
            run.entry,
            million(field(0)),
            million(field(1)),
            million(field(2)),
        );
        for s in &series {
            let name = format!("linux-{s}{}", huge_words(&run.entry));
            let peer = runs.iter().find(|r| r.size == run.size && r.entry == name);
            for f in [0, 2] {
                out += &format!(" {} |", ratio(field(f), peer.and_then(|p| total(p, f))));
            }
        }
        out.push('\n');
    }
    Some(out)
}

/// The mean over `run`'s boots of the whole memmap's instructions (`f` 0),
/// stores (1) or bytes (2).
fn total(run: &Run, f: usize) -> Option<f64> {
    let v: Vec<f64> = run
        .boots
        .iter()
        .filter_map(|b| {
            let c = b.memmap.as_ref()?;
            Some([c.insns, c.stores, c.bytes][f] as f64)
        })
        .collect();
    mean(&v)
}

/// Deferred init by node: a row per counted boot.
fn nodes_table(runs: &[Run], peers: &[&String]) -> String {
    let mut out = String::from(
        "\ncounted deferred init by NUMA node: the critical path is the largest node's instructions per \
         worker (what a machine with a core per worker waits for; the same on any host); parallel \
         efficiency = the vCPUs' instructions over (vCPUs × the largest), the split the host's \
         scheduling gave\n\n\
         | size | entry | boot | nodes | workers | per node, instructions (min–max) | critical path, instructions | per struct page |",
    );
    for p in peers {
        out += &format!(" critical path × {} |", peer_label(p));
    }
    out += " parallel efficiency |\n|---|---|---|---|---|---|---|---|";
    out += &"---|".repeat(peers.len() + 1);
    out.push('\n');
    for run in runs {
        for (k, b) in run.boots.iter().enumerate() {
            let Some(n) = &b.nodes else {
                continue;
            };
            out += &format!(
                "| {} | {} | {} | {} | {} | {}–{} | {:.0} | {} |",
                run.size,
                run.entry,
                k + 1,
                n.nodes,
                n.workers,
                n.node_insns.0,
                n.node_insns.1,
                n.critical_path,
                n.critical_path_per_page
                    .map_or("–".into(), |x| format!("{x:.3}")),
            );
            for p in peers {
                // The same machine and RAM: the paths' instructions compare
                // as they are (a peer's page count may be unknown).
                let peer = runs.iter().find(|r| r.size == run.size && &r.entry == *p);
                let paths: Vec<f64> = peer
                    .map(|r| {
                        r.boots
                            .iter()
                            .filter_map(|b| Some(b.nodes.as_ref()?.critical_path))
                            .collect()
                    })
                    .unwrap_or_default();
                out += &format!(" {} |", ratio(Some(n.critical_path), mean(&paths)));
            }
            out += &format!(" {:.3} |\n", n.parallel_efficiency);
        }
    }
    out
}

/// The phases of calls: a row per (size, entry, phase) that ran, each
/// boot's mean per call, and × each Linux peer for the phases Linux has.
fn per_call_table(runs: &[Run], peers: &[&String]) -> Option<String> {
    let ran = |run: &Run, i: usize| -> Vec<Calls> {
        run.boots.iter().filter_map(|b| b.calls[i]).collect()
    };
    // Instructions per call but those zeroing pages.
    let mean_insns = |run: &Run, i: usize| {
        let v: Vec<f64> = ran(run, i)
            .iter()
            .filter_map(|c| c.per_call().map(|x| x[0] - x[2]))
            .collect();
        mean(&v)
    };
    let mut rows = String::new();
    for run in runs {
        for (i, (_, title)) in CALL_PHASES.iter().enumerate() {
            let counts = ran(run, i);
            if counts.is_empty() {
                continue;
            }
            let each = |f: usize, digits: usize| -> String {
                let v: Vec<String> = counts
                    .iter()
                    .map(|c| {
                        c.per_call()
                            .map_or("–".into(), |x| format!("{:.*}", digits, x[f]))
                    })
                    .collect();
                v.join(" / ")
            };
            let n: Vec<String> = counts.iter().map(|c| c.calls.to_string()).collect();
            rows += &format!(
                "| {} | {} | {title} | {} | {} | {} | {} |",
                run.size,
                run.entry,
                n.join(" / "),
                each(0, 0),
                each(2, 0),
                each(1, 1)
            );
            for p in peers {
                let peer = runs.iter().find(|r| r.size == run.size && &r.entry == *p);
                let b = peer.and_then(|peer| mean_insns(peer, i));
                rows += &format!(" {} |", ratio(mean_insns(run, i), b));
            }
            rows.push('\n');
        }
    }
    if rows.is_empty() {
        return None;
    }
    let mut out = String::from(
        "\ncounted per call (memboot-profile): guest instructions and stores per call of the page \
         allocator's entries, each counted boot (/); a call is one entry from outside (Linux: \
         __alloc_pages or its 6.12/7.3 name, every order; free_unref_page or 7.3's \
         __free_frozen_pages, the orders its per-CPU lists take); zeroing = instructions in \
         clear_page* and __clear_pages*, Linux's zeroing of __GFP_ZERO pages; memboot's boot CPU from \
         boot::start to memory ready counts as one call a boot; × Linux = the entry's mean instructions \
         per call over the peer's, zeroing left out of both\n\n\
         | size | entry | phase | calls | instructions / call | of which zeroing | stores / call |",
    );
    for p in peers {
        out += &format!(" instructions × {} |", peer_label(p));
    }
    out += "\n|---|---|---|---|---|---|---|";
    out += &"---|".repeat(peers.len());
    out.push('\n');
    Some(out + &rows)
}

/// The counted tables, or `None` when the run has no counted boot.
pub fn tables(dir: &Path, plan: &Plan) -> Result<Option<String>, String> {
    let runs = read_runs(dir, plan)?;
    if runs.is_empty() {
        return Ok(None);
    }
    let peers: Vec<&String> = plan.entries.iter().filter(|e| is_peer(e)).collect();
    Ok(Some(
        per_page_table(&runs, &peers)
            + &totals_table(&runs, &peers).unwrap_or_default()
            + &nodes_table(&runs, &peers)
            + &per_call_table(&runs, &peers).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile whose phases count `insns` instructions per page each
    /// (stores a half, bytes four times), on `pages` (boot CPU, deferred).
    fn profile(insns_per_page: [u64; 4], pages: (u64, u64), free_bitmaps: bool) -> String {
        let phase = |name: &str, per: u64, pages: u64, opens: u64| {
            serde_json::json!({"name": name, "insns": per * pages, "stores": per * pages / 2,
                               "bytes": per * pages * 4, "pages": pages, "opens": opens})
        };
        serde_json::json!({
            "phases": [
                phase("deferred", insns_per_page[3], pages.1, 2),
                phase("boot_cpu_memmap", insns_per_page[0], pages.0, 1),
                phase("free_bitmaps", insns_per_page[1], pages.0 + pages.1, u64::from(free_bitmaps)),
                phase("buddy_handoff", insns_per_page[2], pages.0, 1),
                {"name": "buddy_alloc", "insns": 999, "stores": 9, "bytes": 9, "pages": null, "opens": 10},
                {"name": "page_alloc", "insns": insns_per_page[0] * 300, "stores": 30, "bytes": 240,
                 "pages": null, "opens": 10, "closes": 10,
                 "functions": [{"function": "clear_page_orig", "insns": u64::from(!free_bitmaps) * 1500},
                               {"function": "__clear_pages_unrolled", "insns": u64::from(!free_bitmaps) * 500}]},
                {"name": "pcp_alloc", "insns": 500, "stores": 50, "bytes": 400, "pages": null,
                 "opens": 5, "closes": u64::from(free_bitmaps) * 5},
            ],
            "deferred_nodes": {
                "nodes": [
                    {"node": 0, "workers": 1, "insns": insns_per_page[3] * pages.1 / 4},
                    {"node": 1, "workers": 1, "insns": insns_per_page[3] * pages.1 * 3 / 4}
                ],
                "critical_path_insns": (insns_per_page[3] * pages.1 * 3 / 4) as f64,
                "critical_path_per_page": (insns_per_page[3] * 3) as f64 / 4.0,
                "parallel_efficiency": 0.5
            }
        })
        .to_string()
    }

    fn dir(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("counted-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn cells<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix}: {text}"))
            .split('|')
            .map(str::trim)
            .collect()
    }

    /// Two counted boots each of 16G `deferred` and `linux-6.12` in a
    /// fresh directory `test`; their tables.
    fn deferred_and_linux(test: &str) -> (PathBuf, String) {
        let d = dir(test);
        let w = |name: String, text: String| std::fs::write(d.join(name), text).unwrap();
        // Their logs: memboot's summary says 1000 struct pages; Linux's is a
        // real 16G boot of 6.12 (4194304 struct pages: present and
        // unavailable, its Memory: and zone lines).
        let linux_log = include_str!("../../tests/fixtures/linux-6.12-16g-2nodes.log");
        for k in 1..=2 {
            w(
                format!("16G-deferred-counted-{k}.log"),
                "memboot-summary: {\"status\":\"ok\",\"pages_initialised\":1000}\n".into(),
            );
            w(format!("16G-linux-6.12-counted-{k}.log"), linux_log.into());
        }
        w(
            "16G-deferred-counted-1.profile.json".into(),
            profile([10, 1, 5, 12], (100, 900), true),
        );
        w(
            "16G-deferred-counted-2.profile.json".into(),
            profile([10, 1, 5, 14], (100, 900), true),
        );
        // Linux: its own pages, no free bitmaps.
        w(
            "16G-linux-6.12-counted-1.profile.json".into(),
            profile([40, 0, 20, 52], (99, 900), false),
        );
        w(
            "16G-linux-6.12-counted-2.profile.json".into(),
            profile([40, 0, 20, 52], (99, 900), false),
        );
        let (sizes, entries) = (
            vec!["16G".to_string()],
            vec!["deferred".to_string(), "linux-6.12".to_string()],
        );
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 3,
        };
        let text = tables(&d, &plan).unwrap().unwrap();
        (d, text)
    }

    /// `profile` with a `hugetlb` phase of `insns` instructions on `pages`.
    fn with_hugetlb(profile: String, insns: u64, pages: u64) -> String {
        let mut v: Value = serde_json::from_str(&profile).unwrap();
        v["phases"].as_array_mut().unwrap().push(serde_json::json!({
            "name": "hugetlb", "insns": insns, "stores": insns / 2, "bytes": insns * 4,
            "pages": pages, "opens": 1
        }));
        v.to_string()
    }

    /// The huge pages' preparation counts in the whole memmap of an entry
    /// that asks for huge pages (memboot's struct pages added to its log's),
    /// not in one that does not; the totals table puts each beside the
    /// Linux peer with the same huge-page words.
    #[test]
    fn huge_pages_count_in_the_memmap_of_entries_that_ask_for_them() {
        let d = dir("huge");
        let w = |name: String, text: String| std::fs::write(d.join(name), text).unwrap();
        let linux_log = include_str!("../../tests/fixtures/linux-6.12-16g-2nodes.log");
        let huge = "+hugepagesz=1G+hugepages=2";
        let memboot_log = "memboot-summary: {\"status\":\"ok\",\"pages_initialised\":1000}\n";
        for entry in ["deferred".to_string(), format!("deferred{huge}")] {
            w(format!("16G-{entry}-counted-1.log"), memboot_log.into());
            let p = with_hugetlb(profile([10, 1, 5, 12], (100, 900), true), 7000, 128);
            w(format!("16G-{entry}-counted-1.profile.json"), p);
        }
        let linux = format!("linux-6.12{huge}");
        w(format!("16G-{linux}-counted-1.log"), linux_log.into());
        let p = with_hugetlb(profile([40, 0, 20, 52], (99, 900), false), 70000, 0);
        w(format!("16G-{linux}-counted-1.profile.json"), p);
        let (sizes, entries) = (
            vec!["16G".to_string()],
            vec![
                "deferred".to_string(),
                format!("deferred{huge}"),
                linux.clone(),
            ],
        );
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        };
        let text = tables(&d, &plan).unwrap().unwrap();
        // Without huge pages: 13300 instructions over 1000 pages, as before.
        let plain = cells(&text, "| 16G | deferred | whole memmap |");
        assert_eq!((plain[4], plain[5]), ("1000", "13.30"), "{text}");
        assert!(!text.contains("| 16G | deferred | huge pages |"), "{text}");
        // With: + 7000 instructions and its 128 struct pages.
        let m = cells(&text, &format!("| 16G | deferred{huge} | whole memmap |"));
        assert_eq!(m[4], "1128", "{text}");
        assert_eq!(m[5], format!("{:.2}", 20300.0 / 1128.0), "{text}");
        // Totals: 20300 vs Linux's 40·99 + 20·99 + 52·900 + 70000 = 122740.
        let t = cells(&text, &format!("| 16G | deferred{huge} | 0.02 |"));
        assert_eq!(t[6], format!("{:.2}", 20300.0 / 122740.0), "{text}");
        assert!(!text.contains("| 16G | deferred | 0.01 |"), "{text}");
    }

    #[test]
    fn each_boot_side_by_side_and_ratios_to_linux() {
        let (d, text) = deferred_and_linux("ratios");
        let c = cells(&text, "| 16G | deferred | deferred init |");
        assert_eq!(
            &c[4..9],
            [
                "900",
                "12.00 / 14.00",
                "6.00 / 7.00",
                "48.0 / 56.0",
                "14.286 %"
            ]
        );
        // 13 / 52 per page; stores and bytes the same ratio.
        assert_eq!(&c[9..12], ["0.25", "0.25", "0.25"], "{text}");
        let free = cells(&text, "| 16G | deferred | free bitmaps |");
        assert_eq!(free[9], "–", "Linux has no free bitmaps: {text}");
        assert!(
            !text.contains("| 16G | linux-6.12 | free bitmaps |"),
            "{text}"
        );
        // Whole memmap: (10·100 + 1·1000 + 5·100 + 12·900) / the log's 1000.
        let m = cells(&text, "| 16G | deferred | whole memmap |");
        assert_eq!((m[4], m[5]), ("1000", "13.30 / 15.10"), "{text}");
        // Linux: (40·99 + 20·99 + 52·900) = 52740 over its log's 4194304.
        let l = cells(&text, "| 16G | linux-6.12 | whole memmap |");
        assert_eq!(l[4], "4194304", "{text}");
        assert_eq!(
            l[7],
            format!("{0:.1} / {0:.1}", 4.0 * 52740.0 / 4194304.0),
            "{text}"
        );
        assert_eq!(l[8], "0.000 %");
        assert_eq!(
            m[9],
            format!("{:.2}", 14.2 / (52740.0 / 4194304.0)),
            "{text}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Each layout over the store floor of its own struct-page size: an
    /// 8-byte `deferred` over `touch+struct_page=8`, never 64-byte `touch`.
    #[test]
    fn whole_memmap_over_touch_of_the_same_layout() {
        let d = dir("touch");
        let w = |name: &str, text: String| std::fs::write(d.join(name), text).unwrap();
        let summary = "memboot-summary: {\"status\":\"ok\",\"pages_initialised\":1000}\n";
        let entries = ["deferred+struct_page=8", "touch+struct_page=8", "touch"];
        // Per page: boot CPU, bitmaps, hand-off, deferred; touch has only
        // the first and the last.
        let per_page = [[2, 1, 1, 2], [2, 0, 0, 2], [16, 0, 0, 16]];
        for (entry, per) in entries.iter().zip(per_page) {
            w(&format!("16G-{entry}-counted-1.log"), summary.into());
            w(
                &format!("16G-{entry}-counted-1.profile.json"),
                profile(per, (100, 900), per[1] > 0),
            );
        }
        let (sizes, entries) = (vec!["16G".to_string()], entries.map(String::from).to_vec());
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        };
        let text = tables(&d, &plan).unwrap().unwrap();
        // deferred: (2·100 + 1·1000 + 1·100 + 2·900) / 1000 = 3.1 per page;
        // touch+struct_page=8: (2·100 + 2·900) / 1000 = 2.0.
        let m = cells(&text, "| 16G | deferred+struct_page=8 | whole memmap |");
        assert_eq!(&m[9..12], ["1.55", "1.55", "1.55"], "{text}");
        let b = cells(&text, "| 16G | deferred+struct_page=8 | boot-CPU memmap |");
        assert_eq!(b[9], "1.00", "{text}");
        let h = cells(&text, "| 16G | deferred+struct_page=8 | hand-off |");
        assert_eq!(h[9], "–", "touch hands nothing off: {text}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn deferred_init_by_node_for_each_boot() {
        let (d, text) = deferred_and_linux("nodes");
        // By node: each boot; the critical path 3/4 of the pages' work.
        let n = cells(&text, "| 16G | deferred | 2 |");
        assert_eq!(
            &n[4..11],
            ["2", "2", "3150–9450", "9450", "10.500", "0.27", "0.500"],
            "{text}"
        );
        assert_eq!(
            crate::bench::counted_boot_cpu_pages(&d, "16G", "linux-6.12"),
            Some(99)
        );
        assert_eq!(
            crate::bench::counted_boot_cpu_pages(&d, "16G", "regions"),
            None
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn per_call_phases_beside_linux() {
        let (d, text) = deferred_and_linux("calls");
        // memboot 10 · 300 / 10 calls; Linux 40 · 300 / 10, 200 of them
        // zeroing pages, left out of the ratio: 300 / 1000.
        let a = cells(&text, "| 16G | deferred | page allocation, any order |");
        assert_eq!(
            &a[4..9],
            ["10 / 10", "300 / 300", "0 / 0", "3.0 / 3.0", "0.30"],
            "{text}"
        );
        let l = cells(&text, "| 16G | linux-6.12 | page allocation, any order |");
        assert_eq!(
            &l[4..9],
            ["10 / 10", "1200 / 1200", "200 / 200", "3.0 / 3.0", "1.00"],
            "{text}"
        );
        // memboot's order-0 path: Linux has no such phase.
        let p = cells(&text, "| 16G | deferred | order 0: per-CPU cache pop |");
        assert_eq!(
            &p[4..9],
            ["5 / 5", "100 / 100", "0 / 0", "10.0 / 10.0", "–"],
            "{text}"
        );
        assert!(!text.contains("| 16G | linux-6.12 | order 0"), "{text}");
        assert!(!text.contains("buddy store"), "no call returned: {text}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_run_without_counted_boots_has_no_table() {
        let (sizes, entries) = (vec!["1G".to_string()], vec!["deferred".to_string()]);
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        };
        assert_eq!(tables(Path::new("/nonexistent"), &plan).unwrap(), None);
    }
}
