//! A boot's phases as a Chrome trace-event file (the JSON `chrome://tracing`
//! and Perfetto UI open): `run-qemu.sh --trace FILE`, written by
//! `memboot-plot trace` / `memboot-plot linux-trace`.
//!
//! The format: `{"traceEvents": [...], "displayTimeUnit": "ms"}` where every
//! span is a complete event (`"ph": "X"`) with its start `ts` and duration
//! `dur` in microseconds (fractional: nanoseconds survive), and metadata
//! events (`"ph": "M"`) name the process and each thread track.
//!
//! - **memboot** (from the `memboot-summary:` line's `phases`, read by
//!   [`plot::parse_log`] as the SVG timeline reads them): one event per
//!   phase, named as in the summary, on the track of its CPU (`tid` = the
//!   CPU, named `CPU n`; `args` carry `cpu` and `node`/`nodes`); `ts` is
//!   time since kernel entry.
//! - **Linux** (`run-qemu.sh --linux`, whose command line has
//!   `initcall_debug`): every initcall, from its `calling  F+0x0/0x.. @ PID`
//!   line to its `initcall F+0x0/0x.. returned R after N usecs` line, on the
//!   track of the PID that ran it (`tid` = PID; pid 0 is the boot CPU's idle
//!   task, which runs the console initcalls), and the memmap phases the bench
//!   reads ([`linux_log`]): `early_memmap` (free_area_init()'s block) on pid
//!   0, and each node's `deferred_init` on a track of its own `pgdatinit<N>`
//!   (their PIDs and CPUs are not logged), ending at its line's stamp and
//!   starting its logged milliseconds earlier. `ts` is the printk stamp.
//!
//! A trace viewer stacks complete events on one track only when they nest:
//! one that overlaps another partly (memboot's `drain` beside the
//! allocation test on one CPU) goes on an extra track of the same CPU or
//! PID, named `CPU n (overlapping)`, tid [`LANE_TID_STRIDE`] × lane + n.

use std::fmt;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::linux_log::{self, LinuxLogError};
use crate::plot::{self, PlotError};

/// Extra tracks (lanes) of a CPU or PID get tid `lane × LANE_TID_STRIDE + tid`:
/// above every Linux PID (PID_MAX_LIMIT is 4M = 2^22) and every track below.
pub const LANE_TID_STRIDE: u64 = 1 << 23;
/// `pgdatinit<N>`'s track: tid `PGDATINIT_TID_BASE + N`, above every Linux
/// PID, since the thread's real PID is not logged.
pub const PGDATINIT_TID_BASE: u64 = 1 << 22;
/// The one process of every trace.
pub const TRACE_PID: u64 = 1;

/// A trace-event file.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<Event>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
}

/// One trace event: a complete span (`ph` `X`) or a metadata record (`M`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    pub ph: &'static str,
    /// Microseconds.
    pub ts: f64,
    /// Microseconds; complete events only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u64,
    pub tid: u64,
    pub args: Map<String, Value>,
}

/// A span before it is given its track's lane.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    cat: &'static str,
    /// The CPU (memboot) or PID (Linux) whose track it belongs on.
    track: u64,
    start_ns: u64,
    end_ns: u64,
    args: Map<String, Value>,
}

/// Why a log gave no trace; each says what to do.
#[derive(Debug)]
pub enum TraceError {
    Read {
        path: String,
        source: std::io::Error,
    },
    /// memboot's log: what the timeline reader said (no summary, no phases, …).
    Memboot(PlotError),
    /// Linux's log: what the bench's reader said.
    Linux { log: String, source: LinuxLogError },
    /// A Linux log without one completed initcall.
    NoInitcalls { log: String },
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "cannot read {path}: {source}"),
            Self::Memboot(e) => write!(f, "{e}"),
            Self::Linux { log, source } => write!(f, "{log}: {source}"),
            Self::NoInitcalls { log } => write!(
                f,
                "{log} has no 'calling  F+0x0/0x.. @ PID' / 'initcall F+0x0/0x.. returned' \
                 pair: boot Linux with run-qemu.sh --linux (its command line has \
                 initcall_debug) and pass its whole serial log"
            ),
            Self::Write { path, source } => write!(f, "cannot write {path}: {source}"),
        }
    }
}

impl std::error::Error for TraceError {}

impl TraceError {
    /// `memboot-plot`'s exit code: 2 unusable input, 1 cannot write.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Write { .. } => 1,
            _ => 2,
        }
    }
}

/// Which kernel's log a trace is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Memboot,
    Linux,
}

/// `memboot-plot trace|linux-trace LOG OUT`: reads the log, writes the trace
/// (OUT `-`: stdout); returns it.
pub fn trace_file(kernel: Kernel, log_path: &str, out_path: &str) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(log_path).map_err(|source| TraceError::Read {
        path: log_path.into(),
        source,
    })?;
    let trace = match kernel {
        Kernel::Memboot => memboot_trace(&text, log_path)?,
        Kernel::Linux => linux_trace(&text, log_path)?,
    };
    let json = serde_json::to_string(&trace).expect("a trace serialises");
    plot::write_file_or_stdout(out_path, &json).map_err(|source| TraceError::Write {
        path: out_path.into(),
        source,
    })?;
    Ok(trace)
}

/// memboot's phases, one track per CPU.
pub fn memboot_trace(text: &str, name: &str) -> Result<Trace, TraceError> {
    let log = plot::parse_log(text, name).map_err(TraceError::Memboot)?;
    let spans: Vec<Span> = log
        .phases
        .iter()
        .map(|p| {
            let mut args = Map::new();
            args.insert("cpu".into(), json!(p.cpu));
            if let Some(node) = p.node {
                args.insert("node".into(), json!(node));
            }
            if let Some(nodes) = p.nodes {
                args.insert("nodes".into(), json!(nodes));
            }
            Span {
                name: p.phase.name().to_string(),
                cat: "memboot",
                track: u64::from(p.cpu),
                start_ns: p.start_ns,
                end_ns: p.end_ns,
                args,
            }
        })
        .collect();
    // Every CPU of the machine gets its track, busy or not.
    let busiest = spans.iter().map(|s| s.track + 1).max().unwrap_or(0);
    let cpus = log.summary.cpus.max(busiest);
    let process = match &*log.summary.strategy {
        "" => "memboot".to_string(),
        s => format!("memboot (memmap={s})"),
    };
    Ok(assemble(&process, spans, 0..cpus, |cpu| {
        format!("CPU {cpu}")
    }))
}

/// Linux's initcalls (per PID) and memmap phases.
pub fn linux_trace(text: &str, name: &str) -> Result<Trace, TraceError> {
    let boot = linux_log::parse(text).map_err(|source| TraceError::Linux {
        log: name.into(),
        source,
    })?;
    let lines = linux_log::console_lines(text);
    let mut spans = initcall_spans(&lines);
    if spans.is_empty() {
        return Err(TraceError::NoInitcalls { log: name.into() });
    }
    spans.push(Span {
        name: "early_memmap".into(),
        cat: "memmap",
        track: 0,
        start_ns: boot.zone_ranges_ns,
        end_ns: boot.zone_ranges_ns + boot.early_memmap_ns,
        args: Map::new(),
    });
    for (&(node, ms), &end_ns) in boot
        .node_deferred_ms
        .iter()
        .zip(&boot.node_deferred_line_ns)
    {
        let mut args = Map::new();
        args.insert("node".into(), json!(node));
        args.insert("logged_ms".into(), json!(ms));
        spans.push(Span {
            name: "deferred_init".into(),
            cat: "memmap",
            track: PGDATINIT_TID_BASE + u64::from(node),
            start_ns: end_ns.saturating_sub(ms * 1_000_000),
            end_ns,
            args,
        });
    }
    let mut pids: Vec<u64> = spans.iter().map(|s| s.track).collect();
    pids.sort_unstable();
    pids.dedup();
    let process = match &boot.release {
        Some(r) => format!("Linux {r}"),
        None => "Linux".into(),
    };
    Ok(assemble(&process, spans, pids, |tid| match tid {
        0 => "pid 0 (boot CPU)".into(),
        t if t >= PGDATINIT_TID_BASE => format!("pgdatinit{}", t - PGDATINIT_TID_BASE),
        t => format!("pid {t}"),
    }))
}

/// `calling  F+0x0/0x.. @ PID` → (F, PID).
fn calling_line(msg: &str) -> Option<(&str, u64)> {
    let (func, pid) = msg.strip_prefix("calling  ")?.split_once(" @ ")?;
    Some((function_name(func)?, pid.parse().ok()?))
}

/// `initcall F+0x0/0x.. returned R after N usecs` → (F, R, N).
fn returned_line(msg: &str) -> Option<(&str, i64, u64)> {
    let (func, rest) = msg.strip_prefix("initcall ")?.split_once(" returned ")?;
    let (ret, usecs) = rest.split_once(" after ")?;
    let usecs = usecs.strip_suffix(" usecs")?.parse().ok()?;
    Some((function_name(func)?, ret.parse().ok()?, usecs))
}

/// `F+0x0/0x2b` → `F`.
fn function_name(symbol: &str) -> Option<&str> {
    let (name, offset) = symbol.split_once('+')?;
    offset.starts_with("0x").then_some(name)
}

/// Every initcall that returned, from its calling line's stamp to its
/// returned line's; one still running at the log's end is left out.
fn initcall_spans(lines: &[(u64, String)]) -> Vec<Span> {
    // (function, pid, start): calls not yet returned; an initcall runs once,
    // but matching the latest call of a name keeps a repeated one right.
    let mut running: Vec<(&str, u64, u64)> = Vec::new();
    let mut spans = Vec::new();
    for (ns, msg) in lines {
        if let Some((func, pid)) = calling_line(msg) {
            running.push((func, pid, *ns));
        } else if let Some((func, ret, usecs)) = returned_line(msg) {
            let Some(i) = running.iter().rposition(|&(f, _, _)| f == func) else {
                continue;
            };
            let (_, pid, start_ns) = running.remove(i);
            let mut args = Map::new();
            args.insert("pid".into(), json!(pid));
            args.insert("returned".into(), json!(ret));
            args.insert("logged_usecs".into(), json!(usecs));
            spans.push(Span {
                name: func.to_string(),
                cat: "initcall",
                track: pid,
                start_ns,
                end_ns: (*ns).max(start_ns),
                args,
            });
        }
    }
    spans
}

/// The trace: the process's name, each track's name and order, and the
/// spans, each on the first lane of its track where it nests.
fn assemble(
    process: &str,
    mut spans: Vec<Span>,
    tracks: impl IntoIterator<Item = u64>,
    track_name: impl Fn(u64) -> String,
) -> Trace {
    let meta = |name: &str, tid: u64, args: Map<String, Value>| Event {
        name: name.into(),
        cat: None,
        ph: "M",
        ts: 0.0,
        dur: None,
        pid: TRACE_PID,
        tid,
        args,
    };
    let one = |key: &str, value: Value| Map::from_iter([(key.to_string(), value)]);
    let mut events = vec![meta("process_name", 0, one("name", json!(process)))];
    let mut named: Vec<u64> = Vec::new();
    let mut name_track = |events: &mut Vec<Event>, tid: u64| {
        if named.contains(&tid) {
            return;
        }
        named.push(tid);
        let (lane, track) = (tid / LANE_TID_STRIDE, tid % LANE_TID_STRIDE);
        let name = match lane {
            0 => track_name(track),
            _ => format!("{} (overlapping)", track_name(track)),
        };
        events.push(meta("thread_name", tid, one("name", json!(name))));
        // Lanes of a track beside it, in track order.
        let sort_index = track * 64 + lane.min(63);
        events.push(meta(
            "thread_sort_index",
            tid,
            one("sort_index", json!(sort_index)),
        ));
    };
    for track in tracks {
        name_track(&mut events, track);
    }
    spans.sort_by_key(|s| (s.track, s.start_ns, std::cmp::Reverse(s.end_ns)));
    // Per lane of the current track: the ends of the spans still open there.
    let mut lanes: Vec<Vec<u64>> = Vec::new();
    let mut current = None;
    for span in spans {
        if current != Some(span.track) {
            current = Some(span.track);
            lanes.clear();
        }
        let lane = lanes
            .iter_mut()
            .position(|open| {
                open.retain(|&end| end > span.start_ns);
                open.last().is_none_or(|&end| span.end_ns <= end)
            })
            .unwrap_or_else(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
        lanes[lane].push(span.end_ns);
        let tid = lane as u64 * LANE_TID_STRIDE + span.track;
        name_track(&mut events, tid);
        events.push(Event {
            name: span.name,
            cat: Some(span.cat),
            ph: "X",
            ts: micros(span.start_ns),
            dur: Some(micros(span.end_ns - span.start_ns)),
            pid: TRACE_PID,
            tid,
            args: span.args,
        });
    }
    Trace {
        trace_events: events,
        display_time_unit: "ms",
    }
}

/// Nanoseconds as the format's microseconds.
fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initcall_lines_are_read_and_pci_quirks_are_not() {
        assert_eq!(
            calling_line("calling  con_init+0x0/0x22c @ 0"),
            Some(("con_init", 0))
        );
        assert_eq!(
            returned_line("initcall pcc_init+0x0/0xa0 returned -19 after 7 usecs"),
            Some(("pcc_init", -19, 7))
        );
        assert_eq!(
            calling_line("pci 0000:00:00.0: calling  quirk_natoma+0x0/0x20 @ 1"),
            None
        );
    }
}
