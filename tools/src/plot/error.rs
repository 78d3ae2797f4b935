//! What can go wrong between an input file and an SVG, and how
//! `memboot-plot` says it.

use std::fmt;

use plotters::drawing::DrawingAreaErrorKind;

/// Everything that can go wrong between an input file and an SVG.
#[derive(Debug)]
pub enum PlotError {
    /// An input file could not be read.
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The log has no `memboot-summary:` line.
    NoSummary { log: String },
    /// The `memboot-summary:` line is not the JSON the timeline needs.
    BadSummary {
        log: String,
        source: serde_json::Error,
    },
    /// The summary has no (or an empty) `phases` array.
    NoPhases { log: String },
    /// A phase ends before it starts.
    BadPhase {
        log: String,
        index: usize,
        reason: String,
    },
    /// The bench file is not the JSON `memboot-plot scaling` accepts.
    BadBench {
        bench: String,
        source: serde_json::Error,
    },
    /// The bench file has no rows.
    EmptyRows { bench: String },
    /// A bench row cannot be plotted.
    BadRow {
        bench: String,
        index: usize,
        reason: String,
    },
    /// No row has any value to plot.
    NoValues { bench: String },
    /// plotters failed to draw (a bug rather than bad input).
    Draw(String),
    /// The SVG could not be written.
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl PlotError {
    /// `memboot-plot`'s exit code for this error: 2 for unusable input, 1 for
    /// a failure to draw or write the output.
    pub fn exit_code(&self) -> i32 {
        match self {
            PlotError::Draw(_) | PlotError::Write { .. } => 1,
            _ => 2,
        }
    }
}

const HOW_TO_LOG: &str = "boot with `run-qemu.sh --log FILE` and pass that file";

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PlotError::*;
        match self {
            Read { path, source } => write!(f, "cannot read {path}: {source}"),
            NoSummary { log } => write!(
                f,
                "{log} has no memboot-summary line: the boot did not finish (or this is not a \
                 memboot serial log); {HOW_TO_LOG}"
            ),
            BadSummary { log, source } => write!(
                f,
                "{log}: the memboot-summary line is not valid summary JSON ({source}); the log \
                 may be truncated or from an incompatible memboot; {HOW_TO_LOG}"
            ),
            NoPhases { log } => write!(
                f,
                "{log}: the memboot-summary has no phases (the kernel that wrote it predates \
                 phase timing, or the boot failed early); boot a current image and {HOW_TO_LOG}"
            ),
            BadPhase { log, index, reason } => {
                write!(f, "{log}: phase {index} of the memboot-summary {reason}")
            }
            BadBench { bench, source } => write!(
                f,
                "{bench} is not a bench JSON file ({source}); expected \
                 {{\"rows\": [{{\"mem_mib\":…,\"kernel\":…,\"mode\":…,…}}]}} as written by \
                 tests/bench.sh"
            ),
            EmptyRows { bench } => write!(
                f,
                "{bench} has no rows: nothing was benchmarked; rerun tests/bench.sh and pass \
                 its JSON output"
            ),
            BadRow {
                bench,
                index,
                reason,
            } => write!(f, "{bench}: row {index} {reason}"),
            NoValues { bench } => write!(
                f,
                "{bench}: no row has boot_cpu_memmap_ns, allocatable_ns or host_rss_mib; \
                 nothing to plot"
            ),
            Draw(msg) => write!(f, "drawing the SVG failed: {msg}"),
            Write { path, source } => write!(f, "cannot write {path}: {source}"),
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlotError::Read { source, .. } | PlotError::Write { source, .. } => Some(source),
            PlotError::BadSummary { source, .. } | PlotError::BadBench { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

pub(super) fn draw_err<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw(e.to_string())
}
