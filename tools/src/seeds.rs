//! Issue 21's seeds, reproduced and fixed, in one table
//! (`tests/bench.sh --seeds`, i.e. `tests/seeds.sh`): one row per problem
//! this project exists for, each with memboot's pathology and memboot's fix
//! measured in the same run, next to the figures the original report gave.
//!
//! The reports' figures are constants ([`SEEDS`]). memboot's come from the
//! run's directory, one sub-directory per seed ([`Seed::dir`]):
//! - boots: a `tests/bench.sh --svg` run (`DIR/SEED/logs/`, with its
//!   `logs/report`), read with the bench's reader (`bench::read_dir`) and
//!   the log parser for what the bench's rows do not carry: summary keys
//!   (`node_deferred_ns`, `phases`, `memory_block_ns`), the CPUs' nodes
//!   (`log::boot_input`) and the host's CPUs (`log::host_cpus`);
//! - the sparse map is boots too (`DIR/arm64-sparse/logs/`, written by
//!   `tests/seeds.sh` itself with a `logs/report` of the bench's form):
//!   QEMU's pc machine gives a guest two holes, so the map's 8192 regions
//!   are made with Linux `memmap=` forms ([`sparse_boot`]). The host bench
//!   of the same code on a synthetic map stays as `memboot-seeds sparse`
//!   ([`sparse_bench`]).

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind};
use memmap::init::{init_memmap, sections_to_back, Strategy};
use memmap::memblock::{Memblock, MemblockConfig};
use memmap::page::StructPage;
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, VecBacking};
use memmap::zones::ZoneLayout;
use serde_json::{json, Value};

use crate::bench::{self, Plan, Results, Row};

mod counted_cells;

/// One seed: what the report said, and where memboot's run of it lives.
pub struct Seed {
    /// The run's sub-directory.
    pub dir: &'static str,
    pub problem: &'static str,
    /// The report's figures, as it gave them, and the report.
    pub reported: &'static str,
}

/// The four seeds of issue 21, in the table's order.
pub const SEEDS: [Seed; 4] = [
    Seed {
        dir: "vmware-5.8",
        problem: "Linux 5.8 stopped deferring struct-page init (73a6e474cb37)",
        reported: "1 TB VM: memmap on the boot CPU 0.03 s → 2.0 s, boot 18.17 s → 21.6 s (the VMware / Linux 5.8 report)",
    },
    Seed {
        dir: "power-16-nodes",
        problem: "per-node parallel deferred init on a 16-node machine",
        reported: "32 TB, 16 nodes: each node's deferred init 280–580 ms, in parallel (the Power 32 TB report)",
    },
    Seed {
        dir: "arm64-sparse",
        problem: "a validity check per PFN on a sparse map",
        reported: "96 GB: memmap_init 27,956 µs with a binary search per PFN → 13,537 µs skipping holes by region (the arm64 96 GB report)",
    },
    Seed {
        dir: "x86-2t-blocks",
        problem: "memory-block devices of 128 MiB found by linear search",
        reported: "2 TB, 16,288 blocks of 128 MiB: 14 of 21 s of boot creating them; fix: 2 GiB blocks (the x86 2 TB memory-block report)",
    },
];

/// The table's columns.
pub const COLUMNS: [&str; 7] = [
    "seed",
    "the report",
    "memboot: the pathology",
    "memboot: the fix",
    "pathology ÷ fix",
    "counted (guest instructions, the same on any host)",
    "how memboot measured it",
];

/// A bench run's sub-directory read back: what `memboot-bench report` was
/// given (`logs/report`) and every boot's row.
pub struct Run {
    pub sizes: Vec<String>,
    pub entries: Vec<String>,
    pub rounds: u32,
    pub heading: String,
    pub results: Results,
    logs: std::path::PathBuf,
}

impl Run {
    /// The bench run whose `--svg` directory is `dir`.
    pub fn read(dir: &Path) -> Result<Run, String> {
        let logs = dir.join("logs");
        let path = logs.join("report");
        let report =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let field = |key: &str| -> Result<String, String> {
            report
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .map(str::to_string)
                .ok_or(format!("{}: no '{key}'", path.display()))
        };
        let words = |s: String| -> Vec<String> { s.split_whitespace().map(String::from).collect() };
        let (sizes, entries) = (words(field("sizes")?), words(field("entries")?));
        let rounds: u32 = field("rounds")?
            .parse()
            .map_err(|_| format!("{}: bad rounds", path.display()))?;
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds,
        };
        let results = bench::read_dir(&logs, &plan)?;
        Ok(Run {
            heading: field("heading")?,
            sizes,
            entries,
            rounds,
            results,
            logs,
        })
    }

    /// The whole `bench.md` its logs make ([`crate::bench_md::render`]).
    pub fn bench_md(&self) -> Result<String, String> {
        let plan = Plan {
            sizes: &self.sizes,
            entries: &self.entries,
            rounds: self.rounds,
        };
        crate::bench_md::render(&self.logs, &self.results, &plan, &self.heading)
    }

    /// The rows of `entry` (any size), in round order; an error if it was
    /// not booted.
    fn rows(&self, entry: &str) -> Result<Vec<&Row>, String> {
        let rows: Vec<&Row> = self
            .results
            .rows
            .iter()
            .filter(|r| r.mode == entry)
            .collect();
        if rows.is_empty() {
            return Err(format!("{}: no boot of {entry}", self.logs.display()));
        }
        Ok(rows)
    }

    /// Each round's log of `entry`, with its path.
    fn logs(&self, entry: &str) -> Result<Vec<(std::path::PathBuf, String)>, String> {
        self.rows(entry)?
            .iter()
            .map(|r| {
                let path = self
                    .logs
                    .join(format!("{}-{entry}-{}.log", r.size, r.round));
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok((path, text))
            })
            .collect()
    }

    /// Each round's summary of `entry` (the log parser's `summary`).
    fn summaries(&self, entry: &str) -> Result<Vec<Value>, String> {
        self.logs(entry)?
            .iter()
            .map(|(path, text)| {
                crate::serial_log::summary(text).map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect()
    }

    /// `f` of every round of `entry`: "r1 / r2 → mean ms", and the mean.
    fn rounds_ms(&self, entry: &str, f: impl Fn(&Row) -> Option<u64>) -> Result<Cell, String> {
        let values: Vec<u64> = self
            .rows(entry)?
            .iter()
            .map(|r| f(r).ok_or(format!("{entry}: a round has no figure")))
            .collect::<Result<_, _>>()?;
        Ok(Cell::of(&values))
    }

    /// A summary key of every round of `entry`, as [`rounds_ms`](Self::rounds_ms).
    fn key_ms(&self, entry: &str, key: &str) -> Result<Cell, String> {
        let values: Vec<u64> = self
            .summaries(entry)?
            .iter()
            .map(|s| {
                s[key]
                    .as_u64()
                    .ok_or(format!("{entry}: no summary key {key}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Cell::of(&values))
    }
}

/// Figures of every round (ns) with their mean.
struct Cell {
    text: String,
    mean_ns: f64,
}

impl Cell {
    fn of(values_ns: &[u64]) -> Cell {
        let mean_ns = values_ns.iter().map(|&v| v as f64).sum::<f64>() / values_ns.len() as f64;
        let each: Vec<String> = values_ns.iter().map(|&v| ms(v as f64)).collect();
        let text = if each.len() == 1 {
            format!("{} ms", each[0])
        } else {
            format!("{} → {} ms", each.join(" / "), ms(mean_ns))
        };
        Cell { text, mean_ns }
    }
}

fn ms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

fn times(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else {
        "–".into()
    }
}

/// Seed 1: `memmap=regions` (everything on the boot CPU, as 5.8 did)
/// against `memmap=deferred`, boot-CPU memmap and memory ready.
fn vmware_row(run: &Run) -> Result<[String; 4], String> {
    let boot_cpu = |e| run.rounds_ms(e, |r| Some(r.boot_cpu_memmap_ns));
    let ready = |e| run.rounds_ms(e, |r| r.allocatable_ns);
    let (bad, good) = (boot_cpu("regions")?, boot_cpu("deferred")?);
    let (bad_ready, good_ready) = (ready("regions")?, ready("deferred")?);
    Ok([
        format!(
            "`memmap=regions`: boot-CPU memmap {}; memory ready {}",
            bad.text, bad_ready.text
        ),
        format!(
            "`memmap=deferred`: boot-CPU memmap {}; memory ready {}",
            good.text, good_ready.text
        ),
        format!(
            "{} boot-CPU memmap, {} ready",
            times(bad.mean_ns, good.mean_ns),
            times(bad_ready.mean_ns, good_ready.mean_ns)
        ),
        format!("boots: {} one node ({})", run.sizes.join(" "), rounds(run)),
    ])
}

/// What a boot had to run its nodes' deferred init side by side: vCPUs,
/// the nodes that hold them, all nodes, and the host CPUs that ran the
/// vCPUs (run-qemu.sh's `host:` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parallelism {
    pub vcpus: u64,
    pub nodes_with_cpus: usize,
    pub nodes: u64,
    pub host_cpus: u64,
}

impl Parallelism {
    /// From a boot's log and its summary.
    pub fn of(text: &str, summary: &Value) -> Result<Parallelism, String> {
        let count = |key: &str| summary[key].as_u64().ok_or(format!("no summary key {key}"));
        let mut cpu_nodes = crate::serial_log::boot_input(text)
            .map_err(|e| e.to_string())?
            .cpu_nodes;
        cpu_nodes.sort_unstable();
        cpu_nodes.dedup();
        Ok(Parallelism {
            vcpus: count("cpus")?,
            nodes_with_cpus: cpu_nodes.len(),
            nodes: count("nodes")?,
            host_cpus: crate::serial_log::host_cpus(text)
                .ok_or("no `run-qemu.sh: host: … N CPUs` line: boot through run-qemu.sh --log")?,
        })
    }

    /// `16 vCPUs, one on each of the 16 nodes, run by 2 host CPUs`.
    pub fn describe(&self) -> String {
        let Parallelism {
            vcpus,
            nodes_with_cpus,
            nodes,
            host_cpus,
        } = self;
        let placed = if *nodes_with_cpus as u64 == *nodes && vcpus == nodes {
            format!("{vcpus} vCPUs, one on each of the {nodes} nodes")
        } else {
            format!(
                "{vcpus} vCPUs on {nodes_with_cpus} of the {nodes} nodes (the others memory-only)"
            )
        };
        format!("{placed}, run by {host_cpus} host CPUs")
    }
}

/// A boot's deferred phase from its summary's `phases`: the
/// `deferred_init` entries' first start to last end (ns), and how many
/// workers ran at once on average over it (their summed time ÷ that).
pub fn deferred_phase(summary: &Value) -> Result<(u64, f64), String> {
    let phases = summary["phases"].as_array().ok_or("no phases")?;
    let (mut first, mut last, mut busy) = (u64::MAX, 0u64, 0u64);
    for p in phases.iter().filter(|p| p["phase"] == "deferred_init") {
        let at = |k: &str| {
            p[k].as_u64()
                .ok_or(format!("a deferred_init phase has no {k}"))
        };
        let (start, end) = (at("start_ns")?, at("end_ns")?);
        first = first.min(start);
        last = last.max(end);
        busy += end.saturating_sub(start);
    }
    if last <= first {
        return Err("no deferred_init phase: the boot deferred nothing".into());
    }
    let span = last - first;
    Ok((span, busy as f64 / span as f64))
}

/// Seed 2: `memmap=deferred` over 16 nodes against `memmap=regions`
/// (every node on the boot CPU). Deferred init's worth is its phase end
/// to end, first worker start to last worker end, over the parallelism
/// the run had (vCPUs, the nodes holding them, host CPUs: the row says
/// which), not its slowest node: with fewer vCPUs than nodes the nodes
/// run one after another.
fn power_row(run: &Run) -> Result<[String; 4], String> {
    let logs = run.logs("deferred")?;
    let summaries = run.summaries("deferred")?;
    let (mut per_round, mut spans, mut by_node) = (Vec::new(), Vec::new(), String::new());
    let (mut busy, mut parallelism) = (Vec::new(), None::<Parallelism>);
    for ((path, text), s) in logs.iter().zip(&summaries) {
        let nodes: Vec<u64> = s["node_deferred_ns"]
            .as_array()
            .ok_or("deferred: no node_deferred_ns")?
            .iter()
            .map(|v| v.as_u64().ok_or("deferred: node_deferred_ns not numbers"))
            .collect::<Result<_, _>>()?;
        let (min, max) = (nodes.iter().min(), nodes.iter().max());
        let (Some(&min), Some(&max)) = (min, max) else {
            return Err("deferred: node_deferred_ns is empty".into());
        };
        if by_node.is_empty() {
            let each: Vec<String> = nodes.iter().map(|&n| ms(n as f64)).collect();
            by_node = format!("round 1 by node: {} ms", each.join(", "));
        }
        per_round.push(format!("{}–{}", ms(min as f64), ms(max as f64)));
        let (span, at_once) = deferred_phase(s).map_err(|e| format!("{}: {e}", path.display()))?;
        spans.push(span);
        busy.push(format!("{at_once:.1}"));
        let this = Parallelism::of(text, s).map_err(|e| format!("{}: {e}", path.display()))?;
        match &parallelism {
            Some(p) if *p != this => {
                return Err(format!(
                    "{}: ran with {}, an earlier round with {}: one table cannot compare them",
                    path.display(),
                    this.describe(),
                    p.describe()
                ))
            }
            _ => parallelism = Some(this),
        }
    }
    let parallelism = parallelism.ok_or("deferred: no round")?;
    let phase = Cell::of(&spans);
    let ready = |e| run.rounds_ms(e, |r| r.allocatable_ns);
    let (bad_ready, good_ready) = (ready("regions")?, ready("deferred")?);
    let bad = run.rounds_ms("regions", |r| Some(r.boot_cpu_memmap_ns))?;
    Ok([
        format!(
            "`memmap=regions`, every node on the boot CPU: memmap {}; memory ready {}",
            bad.text, bad_ready.text
        ),
        format!(
            "`memmap=deferred`: deferred phase end to end (first worker start → last worker end) {}, {} workers running at once on average; each node's deferred init {} ms (each round's fastest–slowest; {by_node}); memory ready {}",
            phase.text,
            busy.join(" / "),
            per_round.join(" / "),
            good_ready.text
        ),
        format!(
            "{} ready; boot-CPU memmap ÷ deferred phase end to end {}",
            times(bad_ready.mean_ns, good_ready.mean_ns),
            times(bad.mean_ns, phase.mean_ns)
        ),
        format!(
            "boots: {} over {} nodes, {} ({}); deferred phase = the summary's `phases` (its deferred_init entries), per node = `node_deferred_ns`",
            run.sizes.join(" "),
            parallelism.nodes,
            parallelism.describe(),
            rounds(run)
        ),
    ])
}

/// Seed 4: memory-block creation (`memory_block_ns`) at 128 MiB with the
/// linear search, against the index and against 2 GiB blocks.
fn blocks_row(run: &Run) -> Result<[String; 4], String> {
    let find = |size: &str, lookup: &str| -> Result<(&str, Cell, u64), String> {
        let entry = run
            .entries
            .iter()
            .find(|e| {
                e.contains(&format!("memory_block_size={size}"))
                    && e.contains(&format!("memory_block_lookup={lookup}"))
            })
            .ok_or(format!("no entry with {size} blocks and {lookup} lookup"))?;
        let blocks = run.summaries(entry)?[0]["nr_memory_blocks"]
            .as_u64()
            .ok_or("no nr_memory_blocks")?;
        Ok((entry, run.key_ms(entry, "memory_block_ns")?, blocks))
    };
    let (_, bad, n_bad) = find("128M", "linear")?;
    let (_, indexed, n_indexed) = find("128M", "indexed")?;
    let (_, big, n_big) = find("2G", "linear")?;
    let (_, big_indexed, _) = find("2G", "indexed")?;
    Ok([
        format!("128 MiB blocks, `memory_block_lookup=linear`: {n_bad} blocks created in {}", bad.text),
        format!(
            "128 MiB, `indexed`: {n_indexed} blocks in {}; 2 GiB blocks (the report's fix), `linear`: {n_big} blocks in {}; 2 GiB, `indexed`: {}",
            indexed.text, big.text, big_indexed.text
        ),
        format!(
            "{} (index), {} (2 GiB blocks)",
            times(bad.mean_ns, indexed.mean_ns),
            times(bad.mean_ns, big.mean_ns)
        ),
        format!(
            "boots: {} one node, `memmap=ondemand` ({}); the summary's `memory_block_ns`. memboot has no sysfs: the report's cost was directories and node links per block; memboot's is Linux's search before 4fb6eabf1037",
            run.sizes.join(" "),
            rounds(run)
        ),
    ])
}

fn rounds(run: &Run) -> String {
    match run.rounds {
        1 => "1 round".into(),
        n => format!("{n} rounds, ABBA"),
    }
}

/// Seed 3 as boots: `memmap=perpfn` against `memmap=regions` on the
/// sparse map the command line's `memmap=` forms made, every boot
/// verified.
fn sparse_boot_row(run: &Run) -> Result<[String; 4], String> {
    let boot_cpu = |e| run.rounds_ms(e, |r| Some(r.boot_cpu_memmap_ns));
    let (bad, good) = (boot_cpu("perpfn")?, boot_cpu("regions")?);
    let mut shape = None;
    for entry in ["perpfn", "regions"] {
        for (path, text) in run.logs(entry)? {
            let s = crate::serial_log::summary(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if s["verify"] != "ok" {
                return Err(format!(
                    "{}: verify is {}, not ok",
                    path.display(),
                    s["verify"]
                ));
            }
            shape = shape.or_else(|| memblock_shape(&text));
        }
    }
    let (regions, mib) = shape.ok_or("no `memblock: N memory regions (M MiB)` line")?;
    Ok([
        format!("`memmap=perpfn` (a binary search per PFN of the span): boot-CPU memmap {}", bad.text),
        format!("`memmap=regions` (the memblock region walk): boot-CPU memmap {}", good.text),
        times(bad.mean_ns, good.mean_ns),
        format!(
            "boots: {} with Linux `memmap=` forms for {regions} memblock regions, {:.1} GiB of RAM (`memboot-seeds sparse-boot`), `verify: ok` ({})",
            run.sizes.join(" "),
            mib as f64 / 1024.0,
            rounds(run)
        ),
    ])
}

/// A seed's cells after its report (pathology, fix, their ratio, the
/// counted figure, how it was measured) and its run's bench heading.
fn seed_cells(seed: &Seed, sub: &Path) -> Result<([String; 5], String), String> {
    let run = Run::read(sub)?;
    let [bad, good, ratio, how] = match seed.dir {
        "vmware-5.8" => vmware_row(&run),
        "power-16-nodes" => power_row(&run),
        "arm64-sparse" => sparse_boot_row(&run),
        _ => blocks_row(&run),
    }?;
    let counted = counted_cell(seed, &run)?;
    Ok(([bad, good, ratio, counted, how], run.heading))
}

/// The seed's counted figure ([`counted_cells`]), from the run's counted
/// boots at its one size.
fn counted_cell(seed: &Seed, run: &Run) -> Result<String, String> {
    let size = run.sizes.first().ok_or("no size")?;
    let logs = &run.logs;
    match seed.dir {
        "vmware-5.8" => counted_cells::vmware(logs, size),
        "power-16-nodes" => counted_cells::power(logs, size),
        "arm64-sparse" => counted_cells::sparse(logs, size),
        _ => counted_cells::blocks(logs, size, |bytes, lookup| {
            run.entries
                .iter()
                .find(|e| {
                    e.contains(&format!("memory_block_size={bytes}"))
                        && e.contains(&format!("memory_block_lookup={lookup}"))
                })
                .cloned()
        }),
    }
}

/// memblock's memory regions and MiB from a boot's `memblock:` line.
fn memblock_shape(text: &str) -> Option<(u64, u64)> {
    let rest = text
        .lines()
        .find_map(|l| Some(l.split_once("] memblock: ")?.1))?;
    let (regions, rest) = rest.split_once(" memory regions (")?;
    let (mib, _) = rest.split_once(" MiB)")?;
    Some((regions.parse().ok()?, mib.parse().ok()?))
}

/// The prefix of the sparse bench's result line.
pub const SPARSE_PREFIX: &str = "memboot-seeds-sparse: ";

/// The seeds table of the run in `dir`, with a line per sub-run saying how
/// it was run (its bench heading).
pub fn table(dir: &Path) -> Result<String, String> {
    let mut out = String::from("| # |");
    for c in COLUMNS {
        let _ = write!(out, " {c} |");
    }
    out += "\n|---|";
    out += &"---|".repeat(COLUMNS.len());
    out.push('\n');
    let mut headings = Vec::new();
    for (i, seed) in SEEDS.iter().enumerate() {
        let sub = dir.join(seed.dir);
        let (cells, heading) =
            seed_cells(seed, &sub).map_err(|e| format!("{}: {e}", sub.display()))?;
        headings.push(format!("{}: {heading}", seed.dir));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            i + 1,
            seed.problem,
            seed.reported,
            cells.join(" | ")
        );
    }
    for h in headings {
        let _ = write!(out, "\n{h}\n");
    }
    Ok(out)
}

/// The arm64 seed as a boot: its 96 GB split evenly into the host
/// bench's 8192 regions (12 MiB each), holes of 1 MiB and a page between
/// them as in [`sparse_map`] (so no hole is pageblock aligned and
/// `perpfn` checks every hole PFN), given to a pc guest as Linux
/// `memmap=` forms: the firmware's RAM below [`SPARSE_LOW_BYTES`] kept
/// (the kernel, its page tables and heap live there), then the regions
/// from 4 GiB, where the pc machine's RAM above its PCI hole starts.
pub const SPARSE_REGION_BYTES: u64 = 12 << 20;
pub const SPARSE_HOLE_BYTES: u64 = (1 << 20) + 4096;
pub const SPARSE_LOW_BYTES: u64 = 64 << 20;
/// The pc machine's RAM below 4 GiB for guests of 3.5 GiB and more
/// (QEMU 7.2's i440fx with gigabyte alignment), and where the rest starts.
const PC_LOW_RAM_BYTES: u64 = 3 << 30;
const PC_HIGH_RAM_START: u64 = 4 << 30;

/// RAM regions the pc firmware map has below [`SPARSE_LOW_BYTES`]: below
/// 640 KiB and from 1 MiB.
const PC_LOW_REGIONS: u64 = 2;

/// The guest size (whole GiB, QEMU syntax) whose RAM holds the sparse map
/// of `regions` memblock regions in all (memblock's table holds 8192), and
/// the map's `memmap=` forms.
pub fn sparse_boot(regions: u64) -> (String, Vec<String>) {
    const GIB: u64 = 1 << 30;
    let regions = regions.saturating_sub(PC_LOW_REGIONS);
    let stride = SPARSE_REGION_BYTES + SPARSE_HOLE_BYTES;
    let end = PC_HIGH_RAM_START + regions * stride;
    let guest_gib = (PC_LOW_RAM_BYTES + end - PC_HIGH_RAM_START).div_ceil(GIB);
    let mut forms = vec![format!("memmap={}M", SPARSE_LOW_BYTES >> 20)];
    forms.extend((0..regions).map(|i| {
        let start = PC_HIGH_RAM_START + i * stride;
        format!("memmap={}M@{start:#x}", SPARSE_REGION_BYTES >> 20)
    }));
    (format!("{guest_gib}G"), forms)
}

/// `memmap=` forms (each `memmap=VALUE`) as one `memmap=` word, their
/// values comma-joined: Linux (and memboot) read each comma-separated form
/// in order, and the word is far shorter than the forms one a word.
pub fn join_forms(forms: &[String]) -> String {
    let values: Vec<&str> = forms
        .iter()
        .map(|f| f.strip_prefix("memmap=").unwrap_or(f))
        .collect();
    format!("memmap={}", values.join(","))
}

/// The sparse map: `regions` regions of 2 MiB, 1 MiB and a page apart
/// (so no gap is pageblock aligned), from 1 GiB, over two nodes.
pub fn sparse_map(regions: u64) -> (Vec<FirmwareEntry>, Vec<NodeAffinity>) {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let stride = 3 * MIB + 4096;
    let map = (0..regions)
        .map(|i| FirmwareEntry::new(GIB + i * stride, 2 * MIB, RegionKind::Usable))
        .collect();
    let half = GIB + regions / 2 * stride;
    let end = GIB + regions * stride;
    let affinity = vec![
        NodeAffinity::new(0, half, 0),
        NodeAffinity::new(half, end - half, 1),
    ];
    (map, affinity)
}

/// The host bench of seed 3: `init_memmap` with `PerPfn` and with
/// `Regions` on [`sparse_map`], alternating, `reps` times each after one
/// warm-up of each; the result as a JSON value (times in ns).
pub fn sparse_bench(regions: u64, reps: u32) -> Result<Value, String> {
    let (map, affinity) = sparse_map(regions);
    let (mut mb, mut report) =
        Memblock::from_firmware(&map, MemblockConfig::default()).map_err(|e| format!("{e:?}"))?;
    mb.apply_affinity(affinity.iter().copied(), &mut report)
        .map_err(|e| format!("{e:?}"))?;
    let layout = ZoneLayout::new(&mb);
    let pageblocks = PageblockMaps::new(&layout);
    let mut memmap = Memmap::new(VecBacking::<StructPage>::new(sections_to_back(&layout)));
    let mut run = |s: Strategy| -> Result<u64, String> {
        let start = Instant::now();
        let out =
            init_memmap(s, &mut memmap, &mb, &layout, &pageblocks).map_err(|e| format!("{e:?}"))?;
        black_box(out.stats.eager_pages);
        Ok(start.elapsed().as_nanos() as u64)
    };
    run(Strategy::PerPfn)?;
    run(Strategy::Regions)?;
    let (mut perpfn, mut by_region) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        perpfn.push(run(Strategy::PerPfn)?);
        by_region.push(run(Strategy::Regions)?);
    }
    let (min, max) = (mb.min_pfn().unwrap_or(0), mb.max_pfn().unwrap_or(0));
    Ok(json!({
        "regions": mb.memory().regions().len(),
        "memory_bytes": mb.memory().total_pages() << 12,
        "span_bytes": (max - min) << 12,
        "reps": reps,
        "perpfn_ns": perpfn,
        "regions_ns": by_region,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_forms_keep_every_form_in_order() {
        let (_, forms) = sparse_boot(100);
        let word = join_forms(&forms);
        assert!(word.starts_with("memmap=") && !word.contains(' '));
        let values: Vec<String> = word["memmap=".len()..]
            .split(',')
            .map(|v| format!("memmap={v}"))
            .collect();
        assert_eq!(values, forms);
        // Linux's x86 COMMAND_LINE_SIZE is 2048 bytes, its own words included.
        assert!(word.len() < 2048 - 256, "{} bytes", word.len());
    }

    #[test]
    fn the_sparse_map_has_its_holes() {
        // Counted from the map's definition, not from memblock.
        let (map, affinity) = sparse_map(8);
        assert_eq!(map.len(), 8);
        let (mb, _) = Memblock::from_firmware(&map, MemblockConfig::default()).unwrap();
        assert_eq!(mb.memory().regions().len(), 8, "no two regions merge");
        assert_eq!(mb.memory().total_pages(), 8 * 512);
        assert_eq!(
            affinity[0].len_bytes + affinity[1].len_bytes,
            (1 << 30) + 8 * (3 * (1 << 20) + 4096)
        );
    }

    #[test]
    fn a_cell_shows_every_round_and_the_mean() {
        let c = Cell::of(&[1_000_000, 3_000_000]);
        assert_eq!(c.text, "1.0 / 3.0 → 2.0 ms");
        assert_eq!(Cell::of(&[2_500_000]).text, "2.5 ms");
        assert_eq!(times(6.0, 2.0), "3.0×");
        assert_eq!(times(6.0, 0.0), "–");
    }

    #[test]
    fn the_deferred_phase_runs_from_the_first_worker_start_to_the_last_end() {
        // Two workers side by side on node 0, then one on node 1 alone.
        let (a, b, c, d) = (100u64, 1_100, 1_300, 2_100);
        let phases = json!({"phases": [
            {"phase": "eager_memmap", "cpu": 0, "start_ns": 0, "end_ns": a},
            {"phase": "deferred_init", "cpu": 0, "node": 0, "start_ns": a, "end_ns": b},
            {"phase": "deferred_init", "cpu": 1, "node": 0, "start_ns": a, "end_ns": c},
            {"phase": "deferred_init", "cpu": 1, "node": 1, "start_ns": c, "end_ns": d},
            {"phase": "verify", "cpu": 0, "start_ns": d, "end_ns": d + 5_000},
        ]});
        let (span, at_once) = deferred_phase(&phases).unwrap();
        assert_eq!(span, d - a);
        let busy = (b - a) + (c - a) + (d - c);
        assert_eq!(at_once, busy as f64 / (d - a) as f64);
        assert!(deferred_phase(&json!({"phases": []})).is_err());
    }

    #[test]
    fn parallelism_says_where_the_vcpus_were() {
        let p = |vcpus, nodes_with_cpus, nodes| Parallelism {
            vcpus,
            nodes_with_cpus,
            nodes,
            host_cpus: 2,
        };
        assert_eq!(
            p(16, 16, 16).describe(),
            "16 vCPUs, one on each of the 16 nodes, run by 2 host CPUs"
        );
        assert_eq!(
            p(2, 2, 16).describe(),
            "2 vCPUs on 2 of the 16 nodes (the others memory-only), run by 2 host CPUs"
        );
    }

    #[test]
    fn the_memblock_line_gives_the_regions_and_mib() {
        let log = "[    0.0] x\n[    0.056667] memblock: 8192 memory regions (98343 MiB), 2 reserved regions (22 MiB), phys bits 44\n";
        assert_eq!(memblock_shape(log), Some((8192, 98343)));
        assert_eq!(memblock_shape("no line"), None);
    }
}
