//! `memboot-plot` on committed fixtures: the SVGs parse, and what they show
//! is checked against the inputs, parsed here independently of the plot
//! module (serde_json straight off the log's summary line / the bench JSON).
//! Host-only and fast: no QEMU.

use std::path::PathBuf;
use std::process::{Command, Output};

use memboot_tools::plot::{self, PlotError, TimelineLayout, BAR_PAD_PX, ROW_HEIGHT_PX};
use memboot_tools::trace;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn read_fixture(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).expect("fixture is committed")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn memboot_plot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memboot-plot"))
        .args(args)
        .output()
        .expect("memboot-plot runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---------------------------------------------------------------- SVG reading

#[derive(Debug, Clone, Copy)]
struct Rect {
    x_px: f64,
    y_px: f64,
    width_px: f64,
    height_px: f64,
}

#[derive(Debug, Clone)]
struct Text {
    x_px: f64,
    y_px: f64,
    text: String,
}

#[derive(Debug, Clone)]
struct Polyline {
    stroke: String,
    stroke_width: String,
    points_px: Vec<(f64, f64)>,
}

fn num(node: roxmltree::Node, attr: &str) -> f64 {
    let value = node
        .attribute(attr)
        .unwrap_or_else(|| panic!("<{}> without {attr}", node.tag_name().name()));
    value
        .parse()
        .unwrap_or_else(|_| panic!("{attr}={value:?} is not a number"))
}

fn elements<'a>(
    doc: &'a roxmltree::Document,
    tag: &'a str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'a>> {
    doc.descendants().filter(move |n| n.has_tag_name(tag))
}

fn rects(doc: &roxmltree::Document) -> Vec<Rect> {
    let rect = |n| Rect {
        x_px: num(n, "x"),
        y_px: num(n, "y"),
        width_px: num(n, "width"),
        height_px: num(n, "height"),
    };
    elements(doc, "rect").map(rect).collect()
}

fn texts(doc: &roxmltree::Document) -> Vec<Text> {
    let text = |n: roxmltree::Node| Text {
        x_px: num(n, "x"),
        y_px: num(n, "y"),
        text: n.text().unwrap_or("").trim().to_string(),
    };
    elements(doc, "text").map(text).collect()
}

fn polylines(doc: &roxmltree::Document) -> Vec<Polyline> {
    let point = |xy: &str| {
        let (x, y) = xy.split_once(',').expect("x,y");
        (x.parse().unwrap(), y.parse().unwrap())
    };
    let polyline = |n: roxmltree::Node| Polyline {
        stroke: n.attribute("stroke").unwrap_or("").to_string(),
        stroke_width: n.attribute("stroke-width").unwrap_or("").to_string(),
        points_px: n
            .attribute("points")
            .unwrap_or("")
            .split_whitespace()
            .map(point)
            .collect(),
    };
    elements(doc, "polyline").map(polyline).collect()
}

// ---------------------------------------------------------------- timeline

/// A phase as the test reads it from the summary JSON.
#[derive(Debug)]
struct ExpectedPhase {
    name: String,
    cpu: u64,
    node: Option<u64>,
    start_ns: u64,
    end_ns: u64,
}

fn summary_json(log: &str) -> Value {
    memboot_tools::serial_log::summary(log).unwrap_or_else(|e| panic!("fixture: {e}"))
}

fn expected_phases(summary: &Value) -> Vec<ExpectedPhase> {
    let phase = |p: &Value| ExpectedPhase {
        name: p["phase"].as_str().unwrap().to_string(),
        cpu: p["cpu"].as_u64().unwrap(),
        node: p.get("node").and_then(Value::as_u64),
        start_ns: p["start_ns"].as_u64().unwrap(),
        end_ns: p["end_ns"].as_u64().unwrap(),
    };
    summary["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(phase)
        .collect()
}

struct Timeline {
    summary: Value,
    phases: Vec<ExpectedPhase>,
    layout: TimelineLayout,
    svg: String,
}

fn timeline(name: &str, text: &str) -> Timeline {
    let log = plot::parse_log(text, name).expect("log parses");
    let layout = TimelineLayout::new(&log);
    let svg = plot::render_timeline(&log, &layout).expect("renders");
    let summary = summary_json(text);
    Timeline {
        phases: expected_phases(&summary),
        summary,
        layout,
        svg,
    }
}

/// The lane of `cpu` as drawn: its `CPU n` label must be unique and sit in
/// the lane's band; returns the band.
fn lane_band_px(t: &Timeline, texts: &[Text], cpu: u64) -> (f64, f64) {
    let label = format!("CPU {cpu}");
    let found: Vec<&Text> = texts.iter().filter(|t| t.text == label).collect();
    assert_eq!(found.len(), 1, "exactly one {label:?} lane label");
    let lane = &t.layout.lanes[cpu as usize];
    let band = (lane.top_px as f64, (lane.top_px + lane.height_px) as f64);
    assert!(
        band.0 < found[0].y_px && found[0].y_px < band.1,
        "{label} label inside its lane"
    );
    band
}

fn check_lanes(t: &Timeline, texts: &[Text]) -> Vec<(f64, f64)> {
    let cpus = t.summary["cpus"].as_u64().unwrap();
    let lane_labels = texts.iter().filter(|t| t.text.starts_with("CPU ")).count();
    assert_eq!(lane_labels as u64, cpus, "one lane per CPU");
    assert_eq!(t.layout.lanes.len() as u64, cpus);
    let bands: Vec<_> = (0..cpus).map(|cpu| lane_band_px(t, texts, cpu)).collect();
    for pair in bands.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "lanes do not overlap, CPU order top-down"
        );
    }
    bands
}

/// Finds each phase's bar; returns them in the summary's phase order.
fn check_bars(t: &Timeline, rects: &[Rect], bands: &[(f64, f64)]) -> Vec<Rect> {
    let bar_height_px = (ROW_HEIGHT_PX - 2 * BAR_PAD_PX) as f64;
    let bars: Vec<&Rect> = rects
        .iter()
        .filter(|r| r.height_px == bar_height_px)
        .collect();
    assert_eq!(bars.len(), t.phases.len(), "one bar per phase");
    let total_ns = t.summary["total_ns"].as_u64().unwrap();
    let t_max_ns = t
        .phases
        .iter()
        .map(|p| p.end_ns)
        .max()
        .unwrap()
        .max(total_ns);
    assert_eq!(
        t.layout.t_max_ns, t_max_ns,
        "x axis is 0 ..= max(total_ns, last end_ns)"
    );
    let px_per_ns = t.layout.plot_width_px as f64 / t_max_ns as f64;
    let mut used = vec![false; bars.len()];
    let mut found = Vec::new();
    for phase in &t.phases {
        let left_px = t.layout.plot_left_px as f64 + phase.start_ns as f64 * px_per_ns;
        let width_px = (phase.end_ns - phase.start_ns) as f64 * px_per_ns;
        let band = bands[phase.cpu as usize];
        let matches = |r: &Rect| {
            let mid_y = r.y_px + r.height_px / 2.0;
            (r.x_px - left_px).abs() <= 1.0
                && (r.width_px - width_px).abs() <= 1.0
                && band.0 < mid_y
                && mid_y < band.1
        };
        let index = (0..bars.len()).find(|&i| !used[i] && matches(bars[i]));
        let index = index.unwrap_or_else(|| {
            panic!(
                "no bar {width_px:.2} px wide at x {left_px:.2} in CPU {}'s lane for {phase:?}",
                phase.cpu
            )
        });
        used[index] = true;
        found.push(*bars[index]);
    }
    found
}

/// Each phase has a label `name[ n<node>] <ms> ms` in its CPU's lane.
fn check_labels(t: &Timeline, texts: &[Text], bands: &[(f64, f64)]) {
    for phase in &t.phases {
        let node = phase.node.map(|n| format!(" n{n}")).unwrap_or_default();
        let prefix = format!("{}{node} ", phase.name);
        let expected_ms = (phase.end_ns - phase.start_ns) as f64 / 1e6;
        let band = bands[phase.cpu as usize];
        let found = texts.iter().any(|text| {
            let Some(ms) = text
                .text
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(" ms"))
            else {
                return false;
            };
            let ms: f64 = ms.parse().unwrap_or(f64::NAN);
            (ms - expected_ms).abs() <= 0.051 && band.0 < text.y_px && text.y_px < band.1
        });
        assert!(
            found,
            "label {prefix}{expected_ms:.1} ms in CPU {}'s lane",
            phase.cpu
        );
    }
}

/// All timeline checks on one log; returns each phase's bar too.
fn check_timeline_text(name: &str, text: &str) -> (Timeline, Vec<Rect>) {
    let t = timeline(name, text);
    let doc = roxmltree::Document::parse(&t.svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = texts(&doc);
    let bands = check_lanes(&t, &texts);
    let bars = check_bars(&t, &rects(&doc), &bands);
    check_labels(&t, &texts, &bands);
    (t, bars)
}

/// What a boot log's own stamped lines say, read here without its summary
/// JSON (which the plot draws from): the machine and the durations the
/// kernel printed as it went.
struct Logged {
    /// `ACPI: SRAT: N NUMA nodes`, or 1 after `ACPI: no SRAT`.
    nodes: u32,
    /// Enabled CPUs in the MADT: `ACPI: LAPIC (… enabled)` lines.
    cpus: u32,
    /// `memmap=` on the logged command line (`deferred` by default).
    strategy: String,
    /// `(phase, node, ns, resolution ns)` from the `… in X us` / `ms`
    /// lines: memblock, vmemmap, the boot CPU's memmap, the memory blocks,
    /// each node's deferred init (its workers' first start to last end),
    /// verification.
    durations: Vec<(&'static str, Option<u64>, u64, u64)>,
}

fn logged(text: &str) -> Logged {
    let lines: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| memboot_tools::serial_log::parse_stamped(l.trim_end_matches('\r')))
        .collect();
    let msgs: Vec<&str> = lines.iter().map(|(_, m)| m.as_str()).collect();
    let nodes = msgs
        .iter()
        .find_map(|m| {
            m.strip_prefix("ACPI: SRAT: ")?
                .strip_suffix(" NUMA nodes")?
                .parse()
                .ok()
        })
        .or_else(|| {
            msgs.iter()
                .any(|m| m.starts_with("ACPI: no SRAT"))
                .then_some(1)
        })
        .expect("an SRAT node count or `no SRAT`");
    let cpus = msgs
        .iter()
        .filter(|m| m.starts_with("ACPI: LAPIC (") || m.starts_with("ACPI: X2APIC ("))
        .filter(|m| m.ends_with(" enabled)"))
        .count() as u32;
    let strategy = msgs
        .iter()
        .find_map(|m| m.strip_prefix("Kernel command line:"))
        .expect("a command line")
        .split_ascii_whitespace()
        .find_map(|w| w.strip_prefix("memmap="))
        .unwrap_or("deferred")
        .to_string();
    // The number after `marker` on the line starting with `prefix`, in
    // `unit` (ns per unit).
    let value = |prefix: &str, marker: &str, unit: u64| -> Option<u64> {
        msgs.iter().find_map(|m| {
            let rest = m.strip_prefix(prefix)?;
            let rest = &rest[rest.find(marker)? + marker.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            Some(digits.parse::<u64>().ok()? * unit)
        })
    };
    let (us, ms) = (1_000, 1_000_000);
    let mut durations = Vec::new();
    for (phase, prefix, marker, unit) in [
        ("memblock", "memblock: ", " built in ", us),
        ("vmemmap", "vmemmap: ", " mapped in ", us),
        (
            "eager_memmap",
            "memmap: strategy ",
            " on the boot CPU in ",
            us,
        ),
        ("memory_blocks", "memory: ", " created in ", us),
        ("verify", "verify: ok: ", " checked in ", ms),
    ] {
        if let Some(ns) = value(prefix, marker, unit) {
            durations.push((phase, None, ns, unit));
        }
    }
    for node in 0..nodes as u64 {
        let prefix = format!("node {node} ");
        if let Some(ns) = value(&prefix, "deferred pages initialised in ", ms) {
            durations.push(("deferred_init", Some(node), ns, ms));
        }
    }
    Logged {
        nodes,
        cpus,
        strategy,
        durations,
    }
}

/// The timeline of a committed log against what its stamped lines say:
/// the title's strategy, node and CPU counts, a lane per MADT CPU, and
/// each phase the log timed drawn that wide (the extent of its bars: a
/// node's deferred init spans its workers' bars), within a pixel plus the
/// logged value's rounding.
fn check_against_log(fixture_name: &str, phases_timed: usize) {
    let text = read_fixture(fixture_name);
    let (t, bars) = check_timeline_text(fixture_name, &text);
    let l = logged(&text);
    let doc = roxmltree::Document::parse(&t.svg).unwrap();
    let texts = texts(&doc);
    let title = texts
        .iter()
        .find(|t| t.text.starts_with("memboot boot timeline: "))
        .expect("a title");
    let parts: Vec<&str> = title.text.split(", ").collect();
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    assert!(
        parts[0].ends_with(&format!("memmap={}", l.strategy)),
        "{:?}",
        title.text
    );
    assert!(
        parts.contains(&plural(l.nodes, "node").as_str()),
        "{:?}",
        title.text
    );
    assert!(
        parts.contains(&plural(l.cpus, "CPU").as_str()),
        "{:?}",
        title.text
    );
    let lanes = texts.iter().filter(|t| t.text.starts_with("CPU ")).count();
    assert_eq!(lanes as u32, l.cpus, "a lane per CPU of the MADT");
    assert_eq!(l.durations.len(), phases_timed, "phases the log times");
    let px_per_ns = t.layout.plot_width_px as f64 / t.layout.t_max_ns as f64;
    for &(phase, node, ns, resolution) in &l.durations {
        let drawn: Vec<&Rect> = t
            .phases
            .iter()
            .zip(&bars)
            .filter(|(p, _)| p.name == phase && (node.is_none() || p.node == node))
            .map(|(_, bar)| bar)
            .collect();
        assert!(!drawn.is_empty(), "{phase} {node:?} has a bar");
        let left = drawn.iter().map(|b| b.x_px).fold(f64::INFINITY, f64::min);
        let right = drawn
            .iter()
            .map(|b| b.x_px + b.width_px)
            .fold(0.0, f64::max);
        let want = ns as f64 * px_per_ns;
        let slack = 1.0 + resolution as f64 * px_per_ns;
        assert!(
            (right - left - want).abs() <= slack,
            "{phase} {node:?}: drawn {:.2} px wide, the log's {ns} ns is {want:.2} px",
            right - left
        );
    }
}

#[test]
fn timeline_one_node() {
    // memblock, vmemmap, eager memmap, memory blocks, node 0's deferred
    // init; verify=off.
    check_against_log("1t.log", 5);
}

#[test]
fn timeline_four_nodes() {
    // The same with verification, and deferred init on each of 4 nodes.
    check_against_log("16g-4nodes.log", 9);
}

#[test]
fn timeline_lanes_for_idle_cpus_and_overlaps() {
    // A summary claiming 4 CPUs whose phases all ran on CPU 0: 4 lanes, and
    // CPU 0's deferred_init workers now overlap in time there.
    let text = read_fixture("16g-4nodes.log")
        .replace("\"cpus\":2,", "\"cpus\":4,")
        .replace("\"cpu\":1,", "\"cpu\":0,");
    let (t, bars) = check_timeline_text("edited 16g-4nodes.log", &text);
    assert_eq!(t.layout.lanes.len(), 4);
    let mut overlapping_pairs = 0;
    for (i, a) in t.phases.iter().enumerate() {
        for (j, b) in t.phases.iter().enumerate().skip(i + 1) {
            if a.start_ns < b.end_ns && b.start_ns < a.end_ns {
                overlapping_pairs += 1;
                assert_ne!(
                    bars[i].y_px, bars[j].y_px,
                    "{a:?} and {b:?} overlap: one sub-row each"
                );
            }
        }
    }
    assert!(overlapping_pairs >= 3, "the edit makes phases overlap");
}

#[test]
fn timeline_cli_writes_svg() {
    let out_path = tmp("timeline-4nodes.svg");
    let log = fixture("16g-4nodes.log");
    let out = memboot_plot(&[
        "timeline",
        log.to_str().unwrap(),
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&out_path).unwrap();
    roxmltree::Document::parse(&svg).expect("XML");
}

/// `memboot-plot trace` and `linux-trace` write what the trace module
/// makes of the log (checked against the logs in trace.rs), or fail with
/// exit 2 naming the log, writing nothing.
#[test]
fn trace_cli_writes_the_trace_or_refuses_the_log() {
    let out_path = tmp("trace.json");
    let memboot = fixture("16g-4nodes.log");
    let linux = fixture("linux-6.1-64g-2nodes.log");
    for (subcommand, log, kernel) in [
        ("trace", &memboot, trace::Kernel::Memboot),
        ("linux-trace", &linux, trace::Kernel::Linux),
    ] {
        let log = log.to_str().unwrap();
        let out = memboot_plot(&[subcommand, log, out_path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = std::fs::read_to_string(log).unwrap();
        let made = match kernel {
            trace::Kernel::Memboot => trace::memboot_trace(&text, log),
            trace::Kernel::Linux => trace::linux_trace(&text, log),
        };
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).expect("JSON");
        assert_eq!(written, serde_json::to_value(made.unwrap()).unwrap());
    }
    for (subcommand, log) in [("trace", &linux), ("linux-trace", &memboot)] {
        let _ = std::fs::remove_file(&out_path);
        let args = [
            subcommand,
            log.to_str().unwrap(),
            out_path.to_str().unwrap(),
        ];
        let out = memboot_plot(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{subcommand}: {err}");
        let name = log.file_name().unwrap().to_str().unwrap();
        assert!(
            err.contains(name),
            "{subcommand}: the error names no log: {err}"
        );
        assert!(!out_path.exists(), "{subcommand} wrote a file");
    }
}

// ---------------------------------------------------------------- errors

/// Runs `memboot-plot SUBCOMMAND` on `input` written to a temp file; the
/// run must fail with exit code 2 and `needle` on stderr, writing nothing.
fn assert_input_error(subcommand: &str, file_name: &str, input: &str, needle: &str) {
    let in_path = tmp(file_name);
    let out_path = tmp(&format!("{file_name}.svg"));
    std::fs::write(&in_path, input).unwrap();
    let _ = std::fs::remove_file(&out_path);
    let out = memboot_plot(&[
        subcommand,
        in_path.to_str().unwrap(),
        out_path.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit code for {file_name}; stderr: {err}"
    );
    assert!(err.contains(needle), "stderr {err:?} lacks {needle:?}");
    assert!(!out_path.exists(), "no SVG on error");
}

#[test]
fn truncated_log_without_summary() {
    let log = read_fixture("1t.log");
    let head: String = log.lines().take(40).map(|l| format!("{l}\n")).collect();
    assert!(matches!(
        plot::parse_log(&head, "head"),
        Err(PlotError::NoSummary { .. })
    ));
    assert_input_error(
        "timeline",
        "no-summary.log",
        &head,
        "has no memboot-summary line",
    );
    assert_input_error(
        "timeline",
        "no-summary2.log",
        &head,
        "run-qemu.sh --log FILE",
    );
}

#[test]
fn truncated_summary_json() {
    let log = read_fixture("1t.log");
    let cut = &log[..log.find("\"phases\"").unwrap() + 20];
    assert!(matches!(
        plot::parse_log(cut, "cut"),
        Err(PlotError::BadSummary { .. })
    ));
    assert_input_error("timeline", "cut-summary.log", cut, "not valid summary JSON");
}

#[test]
fn summary_without_phases() {
    let log = "[    0.1] memboot 0.1.0 booting\nmemboot-summary: {\"cpus\":2,\"total_ns\":5}\n";
    assert!(matches!(
        plot::parse_log(log, "old"),
        Err(PlotError::NoPhases { .. })
    ));
    assert_input_error("timeline", "no-phases.log", log, "has no phases");
    let empty = log.replace("\"total_ns\":5", "\"total_ns\":5,\"phases\":[]");
    assert_input_error("timeline", "empty-phases.log", &empty, "has no phases");
}

#[test]
fn usage_errors_exit_64() {
    for args in [
        &[][..],
        &["timeline"][..],
        &["draw", "a", "b"][..],
        &["timeline", "a", "b", "c"][..],
    ] {
        let out = memboot_plot(args);
        assert_eq!(out.status.code(), Some(64), "args {args:?}");
        assert!(
            stderr(&out).contains("usage: memboot-plot"),
            "args {args:?}"
        );
    }
    assert_eq!(memboot_plot(&["--help"]).status.code(), Some(0));
}

#[test]
fn missing_input_file_exits_2() {
    let out = memboot_plot(&[
        "timeline",
        "/nonexistent/boot.log",
        tmp("x.svg").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot read /nonexistent/boot.log"));
}

// ---------------------------------------------------------------- scaling

/// One line the scaling plot must have: its legend label and point count.
#[derive(Debug)]
struct ExpectedLine {
    label: String,
    points: usize,
}

fn series_name(row: &Value) -> String {
    let (kernel, mode) = (
        row["kernel"].as_str().unwrap(),
        row["mode"].as_str().unwrap(),
    );
    // A Linux entry names the kernel itself (`linux-6.12`, the old `linux`).
    if memboot_tools::bench::is_linux(mode) {
        mode.to_string()
    } else {
        format!("{kernel} {mode}")
    }
}

/// Per series and metric: how many sizes have a non-null value.
fn expected_lines(bench: &Value) -> Vec<ExpectedLine> {
    let rows = bench["rows"].as_array().unwrap();
    let mut names: Vec<String> = rows.iter().map(series_name).collect();
    names.dedup();
    names.sort();
    names.dedup();
    let metrics = [
        ("boot_cpu_memmap_ns", ": boot-CPU memmap"),
        ("allocatable_ns", ": until allocatable"),
        ("host_rss_mib", ""),
        ("pages_initialised", ": struct pages by the end"),
        (
            "pages_initialised_at_allocatable",
            ": struct pages by ready",
        ),
    ];
    let mut lines = Vec::new();
    for name in &names {
        for (key, suffix) in metrics {
            let mut sizes: Vec<u64> = rows
                .iter()
                // A log axis has no place for zero (ondemand's struct pages
                // by ready): such a value draws no point.
                .filter(|r| {
                    &series_name(r) == name
                        && r.get(key).and_then(Value::as_f64).is_some_and(|v| v > 0.0)
                })
                .map(|r| r["mem_mib"].as_u64().unwrap())
                .collect();
            sizes.sort();
            sizes.dedup();
            if !sizes.is_empty() {
                lines.push(ExpectedLine {
                    label: format!("{name}{suffix}"),
                    points: sizes.len(),
                });
            }
        }
    }
    lines
}

fn is_horizontal(line: &Polyline) -> bool {
    line.points_px.windows(2).all(|w| w[0].1 == w[1].1)
}

/// The legend sample left of `label`'s legend text: its stroke and width.
fn legend_style(texts: &[Text], samples: &[&Polyline], label: &str) -> (String, String) {
    let text = texts
        .iter()
        .find(|t| t.text == label)
        .unwrap_or_else(|| panic!("legend text {label:?}"));
    let sample = samples
        .iter()
        .filter(|s| s.points_px.last().unwrap().0 <= text.x_px)
        .min_by_key(|s| {
            ((s.points_px[0].1 - text.y_px).abs() + (text.x_px - s.points_px[1].0).abs()) as i64
        })
        .expect("a legend sample");
    (sample.stroke.clone(), sample.stroke_width.clone())
}

#[test]
fn scaling_plot() {
    let text = read_fixture("bench-small.json");
    let bench_json: Value = serde_json::from_str(&text).unwrap();
    let bench = plot::parse_bench(&text, "bench-small.json").unwrap();
    let svg = plot::render_scaling(&bench).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    let texts = texts(&doc);
    check_scaling_layout(&doc, &texts);
    let all = polylines(&doc);
    let coloured: Vec<&Polyline> = all.iter().filter(|l| l.stroke != "#000000").collect();
    let (samples, data): (Vec<&Polyline>, Vec<&Polyline>) =
        coloured.into_iter().partition(|l| is_horizontal(l));
    check_scaling_lines(&bench_json, &texts, &samples, &data);
}

/// The scaling plot's drawing: three panels stacked in equal rows, every
/// text inside it, the captions one row apart.
fn check_scaling_layout(doc: &roxmltree::Document, texts: &[Text]) {
    // Three panels stacked in equal rows (time, struct pages, RSS), every
    // text inside the drawing: the captions one row apart.
    let root = doc.root_element();
    let size = |attr: &str| -> f64 {
        let v = root.attribute(attr).unwrap_or_else(|| panic!("svg {attr}"));
        v.trim_end_matches("px").parse().unwrap()
    };
    let (width, height) = (size("width"), size("height"));
    assert_eq!(
        height,
        3.0 * f64::from(plot::SC_PANEL_H_PX),
        "three panel rows"
    );
    let plot_w = f64::from(plot::SC_PLOT_W_PX);
    assert!(
        width > plot_w && width < 2.0 * plot_w,
        "{width} px: the plot column and a legend column narrower than it"
    );
    assert!(
        texts.iter().all(|t| t.x_px < width && t.y_px < height),
        "a text outside the {width}x{height} drawing"
    );
    let caption_y = |prefix: &str| {
        texts
            .iter()
            .find(|t| t.text.starts_with(prefix))
            .unwrap_or_else(|| panic!("no caption {prefix:?}"))
            .y_px
    };
    let ys = [
        caption_y("memmap init time"),
        caption_y("struct pages written"),
        caption_y("host peak RSS"),
    ];
    for pair in ys.windows(2) {
        assert!(
            (pair[1] - pair[0] - height / 3.0).abs() < 1.0,
            "captions at {ys:?} are not one third of the {height} px drawing apart"
        );
    }
}

/// One data line per series line of `bench_json` (`expected_lines`), each
/// styled like its legend sample and rising.
fn check_scaling_lines(
    bench_json: &Value,
    texts: &[Text],
    samples: &[&Polyline],
    data: &[&Polyline],
) {
    let expected = expected_lines(bench_json);
    assert_eq!(
        expected.len(),
        13,
        "fixture: 3 series x 5 metrics, minus one all-null line and ondemand's zero struct pages by ready"
    );
    assert_eq!(data.len(), expected.len(), "one polyline per series line");
    assert_eq!(
        samples.len(),
        expected.len(),
        "one legend entry per series line"
    );
    for line in &expected {
        let style = legend_style(texts, samples, &line.label);
        let drawn: Vec<&&Polyline> = data
            .iter()
            .filter(|d| (d.stroke.clone(), d.stroke_width.clone()) == style)
            .collect();
        assert!(
            !drawn.is_empty(),
            "a line styled like {:?}'s legend",
            line.label
        );
        let found = drawn.iter().any(|d| {
            let p = &d.points_px;
            // Bigger guests take longer / use more: x and the value grow together.
            p.len() == line.points && p.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 > w[1].1)
        });
        assert!(
            found,
            "{:?}: a rising line of {} points",
            line.label, line.points
        );
    }
}

#[test]
fn scaling_cli_and_errors() {
    let out_path = tmp("scaling.svg");
    let bench = fixture("bench-small.json");
    let out = memboot_plot(&[
        "scaling",
        bench.to_str().unwrap(),
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    roxmltree::Document::parse(&std::fs::read_to_string(&out_path).unwrap()).expect("XML");

    assert_input_error(
        "scaling",
        "empty-rows.json",
        r#"{"host": {}, "rows": []}"#,
        "has no rows",
    );
    assert_input_error("scaling", "no-rows.json", r#"{"host": {}}"#, "has no rows");
    assert_input_error(
        "scaling",
        "bad.json",
        r#"{"rows": [{"size": "1T""#,
        "is not a bench JSON file",
    );
    let zero =
        r#"{"rows": [{"size": "0G", "mem_mib": 0, "kernel": "memboot", "mode": "deferred"}]}"#;
    assert_input_error("scaling", "zero.json", zero, "not a positive size");
    let nulls = r#"{"rows": [{"mem_mib": 1024, "kernel": "linux", "mode": "linux", "allocatable_ns": null}]}"#;
    assert_input_error("scaling", "nulls.json", nulls, "nothing to plot");
}
