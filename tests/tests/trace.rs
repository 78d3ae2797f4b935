//! `run-qemu.sh --trace` / `memboot-plot trace|linux-trace`: the trace-event
//! files checked against what the logs say, read here independently of the
//! trace module (serde_json straight off the summary line; Linux's stamped
//! lines split by hand).
//!
//! On committed logs (every memboot log under tests/, a Linux 6.1 and a
//! 6.12 boot), host-only; and on one small boot through run-qemu.sh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memboot_tests::{boot, exit_code};
use memboot_tools::trace;
use serde_json::Value;

const SUMMARY_PREFIX: &str = "memboot-summary: ";

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A span as the test compares it: name, CPU or PID, start and end in ns.
type Span = (String, u64, u64, u64);

/// Microseconds in the file → ns (the trace writes ns / 1000 as a float).
fn ns(us: &Value) -> u64 {
    (us.as_f64().expect("a number of µs") * 1000.0).round() as u64
}

/// The file's complete events as spans keyed by `args[key]` (the CPU or
/// PID), after checking the format: every event has what the viewers need,
/// every track a name (given by `name_of`) and the spans of one track nest.
fn trace_spans(trace: &Value, key: &str, name_of: impl Fn(&Value) -> Option<String>) -> Vec<Span> {
    assert_eq!(trace["displayTimeUnit"], "ms");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut names = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "M") {
        if e["name"] == "thread_name" {
            let name = e["args"]["name"].as_str().expect("a thread name");
            names.insert(e["tid"].as_u64().unwrap(), name.to_string());
        }
    }
    let mut by_tid: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let mut spans = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (tid, pid) = (e["tid"].as_u64().unwrap(), e["pid"].as_u64().unwrap());
        assert_eq!(pid, trace::TRACE_PID, "{e}");
        let start = ns(&e["ts"]);
        let end = start + ns(&e["dur"]);
        let track = names
            .get(&tid)
            .unwrap_or_else(|| panic!("tid {tid} has no name"));
        if let Some(want) = name_of(e) {
            assert!(
                track.starts_with(&want),
                "{e} on track '{track}', not '{want}'"
            );
        }
        by_tid.entry(tid).or_default().push((start, end));
        let owner = e["args"][key].as_u64().unwrap_or(tid);
        spans.push((e["name"].as_str().unwrap().to_string(), owner, start, end));
    }
    for (tid, mut track) in by_tid {
        track.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
        let mut open: Vec<u64> = Vec::new();
        for (start, end) in track {
            open.retain(|&e| e > start);
            if let Some(&outer) = open.last() {
                assert!(
                    end <= outer,
                    "tid {tid}: [{start}, {end}) overlaps a span ending {outer}"
                );
            }
            open.push(end);
        }
    }
    spans.sort();
    spans
}

/// memboot's trace: spans by CPU, each on a track named after it.
fn memboot_spans(trace: &Value) -> Vec<Span> {
    trace_spans(trace, "cpu", |e| Some(format!("CPU {}", e["args"]["cpu"])))
}

/// The summary's phases, straight off its last line, as spans.
fn summary_phases(log: &str) -> Option<Vec<Span>> {
    let json = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(SUMMARY_PREFIX))?;
    let summary: Value = serde_json::from_str(json.trim_end()).ok()?;
    let mut phases: Vec<Span> = summary["phases"]
        .as_array()?
        .iter()
        .map(|p| {
            let field = |k: &str| p[k].as_u64().unwrap();
            let name = p["phase"].as_str().unwrap().to_string();
            (name, field("cpu"), field("start_ns"), field("end_ns"))
        })
        .collect();
    phases.sort();
    Some(phases)
}

fn memboot_logs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            memboot_logs(&path, out);
        } else if path.extension().is_some_and(|e| e == "log") {
            out.push(path);
        }
    }
}

/// Every committed memboot log: one span per phase, same name, CPU, start
/// and end, each CPU's on its own tracks, nested (the drain that overlaps
/// the allocation test partly goes on an extra track of that CPU).
#[test]
fn memboot_traces_are_the_summary_phases() {
    let mut logs = Vec::new();
    memboot_logs(&tests_dir(), &mut logs);
    let (mut checked, mut overlapping) = (0, 0);
    for path in logs {
        let text = read(&path);
        let Some(phases) = summary_phases(&text).filter(|p| !p.is_empty()) else {
            continue;
        };
        let name = path.display().to_string();
        let written = trace::memboot_trace(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        let trace = serde_json::to_value(&written).unwrap();
        assert_eq!(memboot_spans(&trace), phases, "{name}");
        checked += 1;
        let tids = trace["traceEvents"].as_array().unwrap().iter();
        overlapping += tids
            .filter(|e| e["tid"].as_u64().unwrap() >= trace::LANE_TID_STRIDE)
            .count();
    }
    assert!(checked >= 100, "only {checked} committed memboot logs");
    assert!(overlapping > 0, "no committed log has overlapping phases");
}

/// Stamped console lines before the peer's dmesg dump, split by hand.
fn linux_lines(log: &str) -> Vec<(u64, &str)> {
    log.lines()
        .take_while(|l| !l.starts_with("linux-peer: dmesg begin"))
        .filter_map(|l| {
            let (stamp, msg) = l.strip_prefix('[')?.split_once("] ")?;
            let (s, us) = stamp.trim().split_once('.')?;
            Some((
                s.parse::<u64>().ok()? * 1_000_000_000 + us.parse::<u64>().ok()? * 1000,
                msg,
            ))
        })
        .collect()
}

/// A Linux boot's initcalls, by calling / returned line pairs, and its
/// memmap phases where the bench reads them.
fn linux_expected(log: &str) -> Vec<Span> {
    let lines = linux_lines(log);
    let mut calls: Vec<(String, u64, u64)> = Vec::new();
    let mut spans = Vec::new();
    for &(at, msg) in &lines {
        let symbol = |s: &str| s.split('+').next().unwrap().to_string();
        if let Some(rest) = msg.strip_prefix("calling  ") {
            let (sym, pid) = rest.split_once(" @ ").unwrap();
            calls.push((symbol(sym), pid.parse().unwrap(), at));
        } else if let Some(rest) = msg.strip_prefix("initcall ") {
            let name = symbol(rest);
            let i = calls.iter().rposition(|c| c.0 == name).unwrap();
            let (_, pid, start) = calls.remove(i);
            spans.push((name, pid, start, at));
        }
    }
    let zone = lines.iter().position(|l| l.1 == "Zone ranges:").unwrap();
    let last = lines
        .iter()
        .rposition(|l| l.1.ends_with("pages in unavailable ranges"))
        .unwrap();
    spans.push(("early_memmap".into(), 0, lines[zone].0, lines[last + 1].0));
    for &(at, msg) in &lines {
        let Some((node, ms)) = msg
            .strip_prefix("node ")
            .and_then(|r| r.split_once(" deferred pages initialised in "))
        else {
            continue;
        };
        let ms: u64 = ms.strip_suffix("ms").unwrap().parse().unwrap();
        let pgdatinit = trace::PGDATINIT_TID_BASE + node.parse::<u64>().unwrap();
        spans.push(("deferred_init".into(), pgdatinit, at - ms * 1_000_000, at));
    }
    spans.sort();
    spans
}

/// Linux 6.1 and 6.12: every initcall on its PID's track, early memmap on
/// pid 0's, each node's deferred init on its pgdatinit track.
#[test]
fn linux_traces_are_the_initcalls_and_memmap_phases() {
    for fixture in ["linux-6.1-64g-2nodes.log", "linux-6.12-16g-2nodes.log"] {
        let text = read(&tests_dir().join("fixtures").join(fixture));
        let expected = linux_expected(&text);
        let initcalls = expected
            .iter()
            .filter(|s| s.1 < trace::PGDATINIT_TID_BASE)
            .count();
        assert!(initcalls > 100, "{fixture}: {initcalls} initcalls");
        let written = trace::linux_trace(&text, fixture).unwrap_or_else(|e| panic!("{e}"));
        let trace = serde_json::to_value(&written).unwrap();
        let spans = trace_spans(&trace, "pid", |e| match e["cat"].as_str() {
            Some("initcall") => Some(match e["args"]["pid"].as_u64().unwrap() {
                0 => "pid 0 (boot CPU)".into(),
                pid => format!("pid {pid}"),
            }),
            _ if e["name"] == "deferred_init" => Some(format!("pgdatinit{}", e["args"]["node"])),
            _ => Some("pid 0".into()),
        });
        assert_eq!(spans, expected, "{fixture}");
    }
}

/// `run-qemu.sh --trace FILE` on a small boot: the file has the summary's
/// phases, CPU by CPU.
#[test]
fn trace_of_a_boot_is_its_summary_phases() {
    let path = std::env::temp_dir().join(format!("memboot-trace-{}.json", std::process::id()));
    let file = path.to_str().unwrap();
    let b = boot(
        &["-m", "1G", "--smp", "2", "--trace", file],
        &["verify=off"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert!(
        b.run.stderr.contains(&format!("trace written to {file}")),
        "{}",
        b.describe()
    );
    let trace: Value = serde_json::from_str(&read(&path)).expect("JSON");
    std::fs::remove_file(&path).unwrap();
    let phases = summary_phases(&b.run.stdout).expect("a summary with phases");
    let cpus: Vec<u64> = phases.iter().map(|p| p.1).collect();
    assert!(cpus.contains(&0) && cpus.contains(&1), "{phases:?}");
    assert_eq!(memboot_spans(&trace), phases);
}
