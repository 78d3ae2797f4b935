//! SVG plots of memboot boots, drawn with `plotters`' SVG backend (no font
//! files: text is emitted as SVG `<text>` elements and laid out by the viewer).
//! The `memboot-plot` binary is the command-line front end.
//!
//! # Boot timeline (`memboot-plot timeline LOG OUT.svg`)
//!
//! Drawn from the `memboot-summary:` line of a serial log, in the manner of
//! Linux's `scripts/bootgraph.pl`:
//!
//! * one horizontal lane per CPU, labelled `CPU n` on the left, CPU 0 at the
//!   top; every CPU of the summary's `cpus` gets a lane, busy or not;
//! * the x axis is time since kernel entry in ms, from 0 to the later of the
//!   summary's `total_ns` and the last phase's `end_ns`, so a bar's width is
//!   exactly proportional to its phase's duration (see [`TimelineLayout::x_px`]);
//! * each phase is one filled rectangle from its `start_ns` to its `end_ns`,
//!   coloured by phase name and labelled `name[ n<node>] <duration> ms`,
//!   inside the bar when it fits, else beside it;
//! * a lane has as many sub-rows as it needs so that neither bars nor labels
//!   overlap: phases that overlap in time on one CPU (or are too short for
//!   their labels to sit side by side) are stacked in the lane, earliest-start
//!   first, each in the first sub-row where it fits. So a lane that looks like
//!   a staircase is a CPU doing short phases back to back; two bars above each
//!   other at the same x are concurrent work on that CPU.
//!
//! # Scaling (`memboot-plot scaling BENCH.json OUT.svg`)
//!
//! Drawn from `tests/bench.sh`'s JSON (schema in [`BenchRow`]); one series per
//! `(kernel, mode)` (a Linux entry is named by itself: `linux-6.12`), values
//! averaged over rounds per RAM size, with a point per size:
//!
//! * top panel, log–log: memmap time (ms) against guest RAM (GiB); per series
//!   a thick line with round markers for the boot CPU's memmap work
//!   (`boot_cpu_memmap_ns`) and a thin line with triangles for the time until
//!   all memory is allocatable (`allocatable_ns`; for Linux, early memmap plus
//!   deferred init). A slope of 1 is linear scaling; the gap between a
//!   series' two lines is the work done after the boot CPU's part;
//! * middle panel, log–log: struct pages written against RAM; per series a
//!   thick line for the whole boot (`pages_initialised`) and a thin one for
//!   those written by the time memory was ready
//!   (`pages_initialised_at_allocatable`; `ondemand` writes none, and a
//!   zero has no point on a log axis);
//! * bottom panel: host peak RSS of the QEMU process (MiB, log) against RAM.
//!
//! Missing or `null` values are skipped (a series without any value for a
//! line has no line); non-positive values cannot sit on a log axis and are
//! skipped too.

use std::fmt;
use std::ops::Range;

use memboot_contract::summary::{PhaseSpan, Summary};
use plotters::chart::MeshStyle;
use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::full_palette as pal;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;

// ---------------------------------------------------------------- errors

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

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> PlotError {
    PlotError::Draw(e.to_string())
}

// ---------------------------------------------------------------- files

fn read_input(path: &str) -> Result<String, PlotError> {
    std::fs::read_to_string(path).map_err(|source| PlotError::Read {
        path: path.to_string(),
        source,
    })
}

/// Writes `text` to `path`, or to stdout when `path` is `-` (the plots'
/// and the traces' output).
pub(crate) fn write_file_or_stdout(path: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if path == "-" {
        std::io::stdout().write_all(text.as_bytes())
    } else {
        std::fs::write(path, text)
    }
}

fn write_output(path: &str, svg: &str) -> Result<(), PlotError> {
    write_file_or_stdout(path, svg).map_err(|source| PlotError::Write {
        path: path.to_string(),
        source,
    })
}

/// `memboot-plot timeline LOG OUT`: reads a serial log, writes its timeline.
pub fn timeline_file(log_path: &str, out_path: &str) -> Result<TimelineLayout, PlotError> {
    let log = parse_log(&read_input(log_path)?, log_path)?;
    let layout = TimelineLayout::new(&log);
    write_output(out_path, &render_timeline(&log, &layout)?)?;
    Ok(layout)
}

/// `memboot-plot scaling BENCH OUT`: reads bench JSON, writes the scaling plot.
pub fn scaling_file(bench_path: &str, out_path: &str) -> Result<Bench, PlotError> {
    let bench = parse_bench(&read_input(bench_path)?, bench_path)?;
    write_output(out_path, &render_scaling(&bench)?)?;
    Ok(bench)
}

// ---------------------------------------------------------------- the log

/// A bar's label: the phase's name, ` n<node>` if it has a node (` <N>
/// nodes` if it folds N nodes' spans), its duration in ms.
pub fn label(span: &PhaseSpan) -> String {
    let node = match (span.node, span.nodes) {
        (Some(n), _) => format!(" n{n}"),
        (None, Some(n)) => format!(" {n} nodes"),
        (None, None) => String::new(),
    };
    format!(
        "{}{node} {} ms",
        span.phase.name(),
        fmt_ms(span.duration_ns())
    )
}

/// What the timeline needs from a serial log.
#[derive(Debug, Clone)]
pub struct BootLog {
    pub summary: Summary<'static>,
    /// The summary's phases, in its order (never empty).
    pub phases: Vec<PhaseSpan>,
    /// From run-qemu.sh's `host peak RSS N MiB` line, if present.
    pub host_peak_rss_mib: Option<u64>,
}

/// Parses a serial log; `name` (usually its path) is used in errors.
pub fn parse_log(text: &str, name: &str) -> Result<BootLog, PlotError> {
    let json = crate::serial_log::summary_json(text)
        .ok_or_else(|| PlotError::NoSummary { log: name.into() })?;
    let summary: Summary<'static> =
        serde_json::from_str(json).map_err(|source| PlotError::BadSummary {
            log: name.into(),
            source,
        })?;
    let phases = summary.phases.to_vec();
    if phases.is_empty() {
        return Err(PlotError::NoPhases { log: name.into() });
    }
    if let Some(index) = phases.iter().position(|p| p.end_ns < p.start_ns) {
        return Err(PlotError::BadPhase {
            log: name.into(),
            index,
            reason: "ends before it starts (end_ns < start_ns)".into(),
        });
    }
    let host_peak_rss_mib = crate::serial_log::host_peak_rss_mib(text);
    Ok(BootLog {
        summary,
        phases,
        host_peak_rss_mib,
    })
}

/// A duration in ms with 0.1 ms resolution, or 0.01 ms below 1 ms.
pub fn fmt_ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 1.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

fn fmt_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    let gib = bytes as f64 / GIB;
    if gib >= 1023.5 {
        format!("{:.1} TiB", gib / 1024.0)
    } else if gib >= 0.999 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", gib * 1024.0)
    }
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

// ---------------------------------------------------------------- timeline layout

const TL_WIDTH_PX: u32 = 1400;
const TL_TITLE_H_PX: u32 = 36;
const TL_MARGIN_PX: u32 = 16;
const TL_LANE_LABEL_W_PX: u32 = 64;
const TL_AXIS_H_PX: u32 = 44;
/// Height of one sub-row of a lane.
pub const ROW_HEIGHT_PX: i32 = 22;
/// Gap between a bar and the top and bottom of its sub-row.
pub const BAR_PAD_PX: i32 = 3;
/// Font size handed to plotters (the SVG says `font-size` = this / 1.24).
const LABEL_FONT_SIZE: f64 = 15.0;
/// A generous monospace advance at that size (0.6 em of 12.1 px, rounded up).
const LABEL_CHAR_W_PX: f64 = 7.6;
const LABEL_GAP_PX: i32 = 4;

/// Where a bar's label sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelSide {
    /// Inside the bar, left-aligned.
    Inside,
    /// Right of the bar's end.
    Right,
    /// Left of the bar's start (when it would run off the right edge).
    Left,
}

/// One phase's rectangle and label, in pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Index into [`BootLog::phases`].
    pub phase_index: usize,
    pub cpu: u32,
    /// Sub-row from the top of the whole plot (lanes' rows are consecutive).
    pub row: usize,
    pub left_px: i32,
    pub right_px: i32,
    pub label: String,
    pub label_side: LabelSide,
}

/// One CPU's lane: `rows` sub-rows starting at `first_row`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    pub cpu: u32,
    pub first_row: usize,
    pub rows: usize,
    pub top_px: i32,
    pub height_px: i32,
}

/// The timeline's pixel geometry, computed before drawing so that tests (and
/// the renderer) agree on where everything is.
///
/// Time `t` ns maps to `x_px(t) = plot_left_px + floor(plot_width_px * t /
/// t_max_ns)` (plotters' own mapping), so a phase's bar is
/// `duration * plot_width_px / t_max_ns` pixels wide, ±1 px of rounding.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineLayout {
    pub image_width_px: u32,
    pub image_height_px: u32,
    /// x pixel of t = 0.
    pub plot_left_px: i32,
    /// Pixels from t = 0 to t = `t_max_ns`.
    pub plot_width_px: i32,
    /// y pixel of the top of the first sub-row.
    pub plot_top_px: i32,
    pub row_height_px: i32,
    /// The right end of the x axis: max(`total_ns`, last `end_ns`).
    pub t_max_ns: u64,
    /// One per CPU, index = CPU number.
    pub lanes: Vec<Lane>,
    /// One per phase, in the summary's order.
    pub bars: Vec<Bar>,
}

impl TimelineLayout {
    pub fn new(log: &BootLog) -> TimelineLayout {
        let last_end_ns = log.phases.iter().map(|p| p.end_ns).max().unwrap_or(0);
        let t_max_ns = log.summary.total_ns.max(last_end_ns).max(1);
        let plot_left_px = (TL_MARGIN_PX + TL_LANE_LABEL_W_PX) as i32;
        let mut layout = TimelineLayout {
            image_width_px: TL_WIDTH_PX,
            image_height_px: 0,
            plot_left_px,
            // plotters maps onto [left, right - 1] of the plotting area.
            plot_width_px: (TL_WIDTH_PX - TL_MARGIN_PX) as i32 - 1 - plot_left_px,
            plot_top_px: (TL_TITLE_H_PX + TL_MARGIN_PX) as i32,
            row_height_px: ROW_HEIGHT_PX,
            t_max_ns,
            lanes: Vec::new(),
            bars: Vec::new(),
        };
        layout.place_lanes(log);
        layout.image_height_px =
            TL_TITLE_H_PX + 2 * TL_MARGIN_PX + layout.plot_height_px() as u32 + TL_AXIS_H_PX;
        layout
    }

    /// x pixel of `t_ns` after kernel entry; computed exactly as plotters
    /// maps the chart's f64 ms axis.
    pub fn x_px(&self, t_ns: u64) -> i32 {
        let fraction = (t_ns as f64 / 1e6) / (self.t_max_ns as f64 / 1e6);
        self.plot_left_px + (self.plot_width_px as f64 * fraction + 1e-3).floor() as i32
    }

    pub fn total_rows(&self) -> usize {
        self.lanes.iter().map(|l| l.rows).sum()
    }

    /// Height of the plotting area: one pixel more than the rows, since
    /// plotters maps onto [top, bottom - 1].
    pub fn plot_height_px(&self) -> i32 {
        self.total_rows() as i32 * self.row_height_px + 1
    }

    /// y pixel of the top of sub-row `row`.
    pub fn row_top_px(&self, row: usize) -> i32 {
        self.plot_top_px + row as i32 * self.row_height_px
    }

    fn place_lanes(&mut self, log: &BootLog) {
        let max_cpu = log.phases.iter().map(|p| p.cpu + 1).max().unwrap_or(0);
        let n_lanes = u32::try_from(log.summary.cpus)
            .unwrap_or(u32::MAX)
            .max(max_cpu)
            .max(1);
        let mut first_row = 0;
        for cpu in 0..n_lanes {
            let (bars, rows) = self.place_lane_bars(log, cpu);
            let lane = Lane {
                cpu,
                first_row,
                rows,
                top_px: self.row_top_px(first_row),
                height_px: rows as i32 * self.row_height_px,
            };
            self.bars.extend(bars.into_iter().map(|b| Bar {
                row: b.row + first_row,
                ..b
            }));
            self.lanes.push(lane);
            first_row += rows;
        }
        self.bars.sort_by_key(|b| b.phase_index);
    }

    /// The bars of one CPU with lane-local rows, and the lane's row count.
    fn place_lane_bars(&self, log: &BootLog, cpu: u32) -> (Vec<Bar>, usize) {
        let mut indices: Vec<usize> = (0..log.phases.len())
            .filter(|&i| log.phases[i].cpu == cpu)
            .collect();
        indices.sort_by_key(|&i| (log.phases[i].start_ns, i));
        let mut rows: Vec<Vec<Range<i32>>> = Vec::new();
        let mut bars = Vec::new();
        for i in indices {
            let bar = self.bar_for(i, &log.phases[i]);
            let span = occupied_px(&bar);
            let row = match rows
                .iter()
                .position(|r| r.iter().all(|s| !overlaps(s, &span)))
            {
                Some(row) => row,
                None => {
                    rows.push(Vec::new());
                    rows.len() - 1
                }
            };
            rows[row].push(span);
            bars.push(Bar { row, ..bar });
        }
        (bars, rows.len().max(1))
    }

    fn bar_for(&self, phase_index: usize, phase: &PhaseSpan) -> Bar {
        let (left_px, right_px) = (self.x_px(phase.start_ns), self.x_px(phase.end_ns));
        let label = label(phase);
        let label_w = label_width_px(&label);
        let plot_right_px = self.plot_left_px + self.plot_width_px;
        let label_side = if right_px - left_px >= label_w + 2 * LABEL_GAP_PX {
            LabelSide::Inside
        } else if right_px + LABEL_GAP_PX + label_w <= plot_right_px {
            LabelSide::Right
        } else {
            LabelSide::Left
        };
        Bar {
            phase_index,
            cpu: phase.cpu,
            row: 0,
            left_px,
            right_px,
            label,
            label_side,
        }
    }
}

/// Estimated width of a label in the monospace label font.
pub fn label_width_px(label: &str) -> i32 {
    (label.chars().count() as f64 * LABEL_CHAR_W_PX).ceil() as i32
}

/// The x pixels a bar and its label take up, plus a gap.
fn occupied_px(bar: &Bar) -> Range<i32> {
    let label_w = label_width_px(&bar.label) + LABEL_GAP_PX;
    let (start, end) = match bar.label_side {
        LabelSide::Inside => (bar.left_px, bar.right_px),
        LabelSide::Right => (bar.left_px, bar.right_px + label_w),
        LabelSide::Left => (bar.left_px - label_w, bar.right_px),
    };
    start..end + LABEL_GAP_PX
}

fn overlaps(a: &Range<i32>, b: &Range<i32>) -> bool {
    a.start < b.end && b.start < a.end
}

// ---------------------------------------------------------------- timeline drawing

/// The fill colour of a phase's bar.
pub fn phase_colour(name: &str) -> RGBColor {
    match name {
        "memblock" => pal::BROWN_200,
        "zones" => pal::AMBER_300,
        "vmemmap" => pal::PURPLE_200,
        "eager_memmap" => pal::BLUE_300,
        "free_bitmaps" => pal::TEAL_200,
        "buddy_handoff" => pal::CYAN_300,
        "deferred_init" => pal::GREEN_300,
        "memory_blocks" => pal::ORANGE_300,
        "alloc_test" => pal::PINK_200,
        "verify" => pal::GREY_400,
        n if n.starts_with("drain") => pal::LIME_400,
        other => {
            const SPARE: [RGBColor; 4] = [
                pal::TEAL_200,
                pal::INDIGO_200,
                pal::YELLOW_600,
                pal::RED_200,
            ];
            let hash = other
                .bytes()
                .fold(0usize, |h, b| h.wrapping_mul(31) + b as usize);
            SPARE[hash % SPARE.len()]
        }
    }
}

fn timeline_title(log: &BootLog, layout: &TimelineLayout) -> String {
    let s = &log.summary;
    let mut parts = vec![format!(
        "memboot boot timeline: memmap={}",
        if s.strategy.is_empty() {
            "?"
        } else {
            &s.strategy
        }
    )];
    parts.push(fmt_bytes(s.mem_bytes));
    parts.push(plural(s.nodes, "node"));
    parts.push(plural(layout.lanes.len() as u64, "CPU"));
    parts.push(format!("total {} ms", fmt_ms(s.total_ns)));
    parts.extend(
        log.host_peak_rss_mib
            .map(|m| format!("host peak RSS {m} MiB")),
    );
    if let Some(status) = Some(&s.status).filter(|st| *st != "ok") {
        parts.push(format!("status {status}"));
    }
    parts.join(", ")
}

/// Draws the timeline laid out by `layout` (from [`TimelineLayout::new`] on
/// the same log) and returns the SVG document.
pub fn render_timeline(log: &BootLog, layout: &TimelineLayout) -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let size = (layout.image_width_px, layout.image_height_px);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title_style = TextStyle::from(("sans-serif", 20).into_font())
            .pos(Pos::new(HPos::Center, VPos::Center));
        let title_at = (size.0 as i32 / 2, TL_TITLE_H_PX as i32 / 2);
        root.draw(&Text::new(
            timeline_title(log, layout),
            title_at,
            title_style,
        ))
        .map_err(draw_err)?;
        let body = root.clone().split_vertically(TL_TITLE_H_PX).1;
        draw_timeline_chart(&body, log, layout)?;
        draw_lane_labels(&root, layout)?;
        draw_bar_labels(&root, layout)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

type TimeChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The chart's x axis is ms (f64), its y axis whole pixels up from the
/// bottom of the plotting area (f64, mapped exactly).
fn draw_timeline_chart(
    body: &Area<'_>,
    log: &BootLog,
    layout: &TimelineLayout,
) -> Result<(), PlotError> {
    let t_max_ms = layout.t_max_ns as f64 / 1e6;
    let y_max = (layout.total_rows() as i32 * layout.row_height_px) as f64;
    let mut chart = ChartBuilder::on(body)
        .margin(TL_MARGIN_PX)
        .x_label_area_size(TL_AXIS_H_PX)
        .y_label_area_size(TL_LANE_LABEL_W_PX)
        .build_cartesian_2d(0f64..t_max_ms, 0f64..y_max)
        .map_err(draw_err)?;
    // The layout promised these pixels; plotters must agree.
    debug_assert_eq!(
        chart.backend_coord(&(0.0, y_max)),
        (layout.plot_left_px, layout.plot_top_px)
    );
    debug_assert_eq!(
        chart.backend_coord(&(t_max_ms, 0.0)).0,
        layout.x_px(layout.t_max_ns)
    );
    let decimals = if t_max_ms < 10.0 {
        2
    } else {
        usize::from(t_max_ms < 100.0)
    };
    house_style(&mut chart.configure_mesh())
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(16)
        .x_desc("time since kernel entry (ms)")
        .x_label_formatter(&|ms| format!("{ms:.decimals$}"))
        .draw()
        .map_err(draw_err)?;
    let separators = layout.lanes.iter().skip(1).map(|lane| {
        let y = y_max - (lane.first_row as i32 * layout.row_height_px) as f64;
        PathElement::new(vec![(0.0, y), (t_max_ms, y)], BLACK.mix(0.35))
    });
    chart.draw_series(separators).map_err(draw_err)?;
    draw_bars(&mut chart, log, layout, y_max)
}

/// One filled `<rect>` per phase; bars under 2 px also get a dark tick at
/// their start (a `<polyline>`, so the rects stay one per phase).
fn draw_bars(
    chart: &mut TimeChart<'_, '_>,
    log: &BootLog,
    layout: &TimelineLayout,
    y_max: f64,
) -> Result<(), PlotError> {
    let rows_px = |bar: &Bar| {
        // Whole pixels in f64: the y axis maps them exactly.
        let top = y_max - (bar.row as i32 * layout.row_height_px + BAR_PAD_PX) as f64;
        (top, top - (layout.row_height_px - 2 * BAR_PAD_PX) as f64)
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let rects = layout.bars.iter().map(|bar| {
        let phase = &log.phases[bar.phase_index];
        let (top, bottom) = rows_px(bar);
        let corners = [(ms(phase.start_ns), top), (ms(phase.end_ns), bottom)];
        Rectangle::new(corners, phase_colour(phase.phase.name()).filled())
    });
    chart.draw_series(rects).map_err(draw_err)?;
    let ticks = layout
        .bars
        .iter()
        .filter(|b| b.right_px - b.left_px < 2)
        .map(|bar| {
            let (top, bottom) = rows_px(bar);
            let x = ms(log.phases[bar.phase_index].start_ns);
            PathElement::new(vec![(x, top), (x, bottom)], BLACK.mix(0.6).stroke_width(2))
        });
    chart.draw_series(ticks).map_err(draw_err)?;
    Ok(())
}

fn draw_lane_labels(root: &Area<'_>, layout: &TimelineLayout) -> Result<(), PlotError> {
    let style =
        TextStyle::from(("sans-serif", 16).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for lane in &layout.lanes {
        let at = (layout.plot_left_px - 8, lane.top_px + lane.height_px / 2);
        root.draw(&Text::new(format!("CPU {}", lane.cpu), at, style.clone()))
            .map_err(draw_err)?;
    }
    Ok(())
}

fn draw_bar_labels(root: &Area<'_>, layout: &TimelineLayout) -> Result<(), PlotError> {
    let font = ("monospace", LABEL_FONT_SIZE).into_font();
    for bar in &layout.bars {
        let (x, h_pos) = match bar.label_side {
            LabelSide::Inside => (bar.left_px + LABEL_GAP_PX, HPos::Left),
            LabelSide::Right => (bar.right_px + LABEL_GAP_PX, HPos::Left),
            LabelSide::Left => (bar.left_px - LABEL_GAP_PX, HPos::Right),
        };
        let y = layout.row_top_px(bar.row) + layout.row_height_px / 2;
        let style = TextStyle::from(font.clone()).pos(Pos::new(h_pos, VPos::Center));
        root.draw(&Text::new(bar.label.clone(), (x, y), style))
            .map_err(draw_err)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- bench input

/// One row of `tests/bench.sh`'s JSON (`{"host": {…}, "rows": [row, …]}`;
/// `host` and unknown keys are ignored). One boot of one size, kernel and
/// mode in one round.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchRow {
    /// Human size such as `"1T"` (used in error messages only).
    #[serde(default)]
    pub size: Option<String>,
    /// Guest RAM in MiB (> 0): the x axis.
    pub mem_mib: f64,
    /// `"memboot"` or `"linux"`.
    pub kernel: String,
    /// memboot's `memmap=` mode, or the Linux entry (`"linux-6.12"`, the
    /// old `"linux"`, …; `bench::is_linux`).
    pub mode: String,
    #[serde(default)]
    pub round: Option<u32>,
    /// The boot CPU's memmap work.
    #[serde(default)]
    pub boot_cpu_memmap_ns: Option<f64>,
    /// Kernel entry until all memory is allocatable.
    #[serde(default)]
    pub allocatable_ns: Option<f64>,
    /// Peak RSS of the QEMU process on the host.
    #[serde(default)]
    pub host_rss_mib: Option<f64>,
    /// Struct pages written by the time memory was ready.
    #[serde(default)]
    pub pages_initialised_at_allocatable: Option<f64>,
    /// Struct pages written by the end of the boot.
    #[serde(default)]
    pub pages_initialised: Option<f64>,
}

#[derive(Deserialize)]
struct BenchFile {
    #[serde(default)]
    rows: Option<Vec<BenchRow>>,
}

/// One RAM size of a series: means over rounds (`None`: no round had a value).
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoint {
    pub mem_mib: f64,
    pub memmap_ms: Option<f64>,
    pub allocatable_ms: Option<f64>,
    pub host_rss_mib: Option<f64>,
    pub pages_at_ready: Option<f64>,
    pub pages_by_end: Option<f64>,
}

/// One `(kernel, mode)`: named `kernel mode`, or just the mode when it is a
/// Linux entry, which names the kernel itself (`linux-6.12`, `linux`).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// Sorted by `mem_mib`.
    pub points: Vec<SeriesPoint>,
}

/// The scaling plot's data: memboot series in order of first appearance,
/// then Linux.
#[derive(Debug, Clone, PartialEq)]
pub struct Bench {
    pub series: Vec<Series>,
}

/// Parses bench JSON; `name` (usually its path) is used in errors.
pub fn parse_bench(text: &str, name: &str) -> Result<Bench, PlotError> {
    let file: BenchFile = serde_json::from_str(text).map_err(|source| PlotError::BadBench {
        bench: name.into(),
        source,
    })?;
    let rows = file.rows.unwrap_or_default();
    if rows.is_empty() {
        return Err(PlotError::EmptyRows { bench: name.into() });
    }
    if let Some(index) = rows
        .iter()
        .position(|r| !(r.mem_mib.is_finite() && r.mem_mib > 0.0))
    {
        let size = rows[index].size.as_deref().unwrap_or("?");
        return Err(PlotError::BadRow {
            bench: name.into(),
            index,
            reason: format!(
                "(size {size}) has mem_mib {}, not a positive size",
                rows[index].mem_mib
            ),
        });
    }
    let bench = Bench {
        series: group_series(&rows),
    };
    let has_value = |p: &SeriesPoint| {
        [
            p.memmap_ms,
            p.allocatable_ms,
            p.host_rss_mib,
            p.pages_at_ready,
            p.pages_by_end,
        ]
        .iter()
        .any(Option::is_some)
    };
    if !bench.series.iter().flat_map(|s| &s.points).any(has_value) {
        return Err(PlotError::NoValues { bench: name.into() });
    }
    Ok(bench)
}

fn series_name(row: &BenchRow) -> String {
    if crate::bench::is_linux(&row.mode) {
        row.mode.clone()
    } else {
        format!("{} {}", row.kernel, row.mode)
    }
}

fn group_series(rows: &[BenchRow]) -> Vec<Series> {
    let mut names: Vec<String> = Vec::new();
    for row in rows {
        let name = series_name(row);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    // Stable: memboot series keep their order, Linux goes last.
    names.sort_by_key(|n| crate::bench::is_linux(n));
    let series = names.into_iter().map(|name| {
        let mine: Vec<&BenchRow> = rows.iter().filter(|r| series_name(r) == name).collect();
        Series {
            points: series_points(&mine),
            name,
        }
    });
    series.collect()
}

fn series_points(rows: &[&BenchRow]) -> Vec<SeriesPoint> {
    let mut sizes: Vec<f64> = rows.iter().map(|r| r.mem_mib).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    let point = |mem_mib: f64| {
        let at: Vec<&&BenchRow> = rows.iter().filter(|r| r.mem_mib == mem_mib).collect();
        let mean_of = |f: fn(&BenchRow) -> Option<f64>| mean(at.iter().filter_map(|r| f(r)));
        SeriesPoint {
            mem_mib,
            memmap_ms: mean_of(|r| r.boot_cpu_memmap_ns).map(|ns| ns / 1e6),
            allocatable_ms: mean_of(|r| r.allocatable_ns).map(|ns| ns / 1e6),
            host_rss_mib: mean_of(|r| r.host_rss_mib),
            pages_at_ready: mean_of(|r| r.pages_initialised_at_allocatable),
            pages_by_end: mean_of(|r| r.pages_initialised),
        }
    };
    sizes.into_iter().map(point).collect()
}

/// Mean of the positive, finite values; `None` if there are none.
fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((0.0, 0u32), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

// ---------------------------------------------------------------- scaling drawing

/// Width of a panel's plot; the legend column right of it is as wide as
/// its longest label needs.
pub const SC_PLOT_W_PX: u32 = 1100;
pub const SC_PANEL_H_PX: u32 = 560;
/// Length of a legend entry's line sample.
pub const LEGEND_LINE_PX: i32 = 24;
/// Legend rows: first row's centre below the panel's top, row pitch, left
/// padding, gap between sample and label (the labels are in the
/// timeline's label font, `LABEL_FONT_SIZE`, `LABEL_CHAR_W_PX` a character).
const LEGEND_TOP_PX: i32 = 72;
const LEGEND_ROW_PX: i32 = 22;
const LEGEND_PAD_PX: i32 = 12;
const LEGEND_GAP_PX: i32 = 8;

/// How a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// 3 px line, round markers: boot-CPU memmap time and host RSS.
    Thick,
    /// 1 px line, triangle markers: time until allocatable.
    Thin,
}

/// One line of a panel, in (GiB, y) data coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelLine {
    pub label: String,
    pub colour: RGBColor,
    pub kind: LineKind,
    pub points: Vec<(f64, f64)>,
}

struct Panel {
    caption: &'static str,
    y_desc: &'static str,
    x_gib: Range<f64>,
    lines: Vec<PanelLine>,
}

/// memboot's series colours, in order.
const PALETTE: [RGBColor; 8] = [
    pal::BLUE_700,
    pal::RED_700,
    pal::GREEN_700,
    pal::ORANGE_800,
    pal::PURPLE_600,
    pal::TEAL_700,
    pal::BROWN_500,
    pal::PINK_600,
];

/// The colour of each series: memboot's from a palette, Linux's from greys
/// (the first Linux series dark grey), each in order.
pub fn series_colours(series: &[Series]) -> Vec<RGBColor> {
    const LINUX_GREYS: [RGBColor; 3] = [pal::GREY_800, pal::GREY_500, pal::BLUEGREY_300];
    let (mut memboot, mut linux) = (0, 0);
    series
        .iter()
        .map(|s| {
            let (palette, n): (&[RGBColor], &mut usize) = if crate::bench::is_linux(&s.name) {
                (&LINUX_GREYS, &mut linux)
            } else {
                (&PALETTE, &mut memboot)
            };
            *n += 1;
            palette[(*n - 1) % palette.len()]
        })
        .collect()
}

/// The scaling plot's three panels' lines.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalingLines {
    /// Boot-CPU memmap time and time until allocatable, ms.
    pub time: Vec<PanelLine>,
    /// Struct pages written by the time memory was ready and by the end.
    pub pages: Vec<PanelLine>,
    /// Host peak RSS, MiB.
    pub rss: Vec<PanelLine>,
}

/// The panels' lines; a series contributes no line where it has no value
/// (a mean of zero, such as `ondemand`'s struct pages written by ready,
/// has no place on a log axis and counts as none).
pub fn scaling_lines(bench: &Bench) -> ScalingLines {
    let (mut time_lines, mut page_lines, mut rss_lines) = (Vec::new(), Vec::new(), Vec::new());
    for (series, colour) in bench.series.iter().zip(series_colours(&bench.series)) {
        let line = |label: String, kind, value: fn(&SeriesPoint) -> Option<f64>| PanelLine {
            label,
            colour,
            kind,
            points: series
                .points
                .iter()
                .filter_map(|p| Some((p.mem_mib / 1024.0, value(p)?)))
                .collect(),
        };
        let name = &series.name;
        time_lines.push(line(
            format!("{name}: boot-CPU memmap"),
            LineKind::Thick,
            |p| p.memmap_ms,
        ));
        time_lines.push(line(
            format!("{name}: until allocatable"),
            LineKind::Thin,
            |p| p.allocatable_ms,
        ));
        page_lines.push(line(
            format!("{name}: struct pages by the end"),
            LineKind::Thick,
            |p| p.pages_by_end,
        ));
        page_lines.push(line(
            format!("{name}: struct pages by ready"),
            LineKind::Thin,
            |p| p.pages_at_ready,
        ));
        rss_lines.push(line(name.clone(), LineKind::Thick, |p| p.host_rss_mib));
    }
    for lines in [&mut time_lines, &mut page_lines, &mut rss_lines] {
        lines.retain(|l| !l.points.is_empty());
    }
    ScalingLines {
        time: time_lines,
        pages: page_lines,
        rss: rss_lines,
    }
}

/// Draws the three panels and returns the SVG document.
pub fn render_scaling(bench: &Bench) -> Result<String, PlotError> {
    let lines = scaling_lines(bench);
    let x_gib = padded_log_range(
        bench
            .series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.mem_mib / 1024.0),
    );
    let panels = [
        Panel {
            caption: "memmap init time vs guest RAM (log-log)",
            y_desc: "time (ms, log)",
            x_gib: x_gib.clone(),
            lines: lines.time,
        },
        Panel {
            caption: "struct pages written vs guest RAM (log-log; none written is not drawn)",
            y_desc: "struct pages (log)",
            x_gib: x_gib.clone(),
            lines: lines.pages,
        },
        Panel {
            caption: "host peak RSS of QEMU vs guest RAM",
            y_desc: "host peak RSS (MiB, log)",
            x_gib,
            lines: lines.rss,
        },
    ];
    let longest_label = panels
        .iter()
        .flat_map(|p| &p.lines)
        .map(|l| l.label.chars().count())
        .max()
        .unwrap_or(0);
    let label_w_px = (longest_label as f64 * LABEL_CHAR_W_PX).ceil() as i32;
    let legend_w_px = 2 * LEGEND_PAD_PX + LEGEND_LINE_PX + LEGEND_GAP_PX + label_w_px;
    let mut svg = String::new();
    {
        let size = (
            SC_PLOT_W_PX + legend_w_px as u32,
            panels.len() as u32 * SC_PANEL_H_PX,
        );
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(&panels) {
            // The legend has a column of its own: drawn over the plot, it
            // hid the points under it.
            let (plot, legend) = area.split_horizontally(SC_PLOT_W_PX);
            draw_panel(&plot, panel)?;
            draw_legend(&legend, &panel.lines)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// A log-axis range around the values with a 1.4x margin each side.
fn padded_log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi == 0.0 {
        1.0..10.0
    } else {
        lo / 1.4..hi * 1.4
    }
}

/// The x axis' ticks: every power of two GiB in `range`.
fn powers_of_two_in(range: &Range<f64>) -> Vec<f64> {
    let (lo, hi) = (
        range.start.log2().ceil() as i32,
        range.end.log2().floor() as i32,
    );
    (lo..=hi).map(|e| 2f64.powi(e)).collect()
}

/// The y axis' ticks: 1, 2 and 5 times each power of ten in `range`.
fn one_two_five_in(range: &Range<f64>) -> Vec<f64> {
    let (lo, hi) = (
        range.start.log10().floor() as i32,
        range.end.log10().ceil() as i32,
    );
    let all = (lo..=hi).flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)));
    all.filter(|v| range.contains(v)).collect()
}

fn fmt_gib(gib: f64) -> String {
    if gib >= 1024.0 {
        format!("{} TiB", fmt_axis(gib / 1024.0))
    } else {
        format!("{} GiB", fmt_axis(gib))
    }
}

fn fmt_axis(v: f64) -> String {
    if v >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn draw_panel(area: &Area<'_>, panel: &Panel) -> Result<(), PlotError> {
    let y = padded_log_range(panel.lines.iter().flat_map(|l| &l.points).map(|p| p.1));
    let x_spec = panel
        .x_gib
        .clone()
        .log_scale()
        .with_key_points(powers_of_two_in(&panel.x_gib));
    let y_spec = y.clone().log_scale().with_key_points(one_two_five_in(&y));
    let mut chart = ChartBuilder::on(area)
        .caption(panel.caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_spec, y_spec)
        .map_err(draw_err)?;
    house_style(&mut chart.configure_mesh())
        .x_desc("guest RAM (GiB, log)")
        .y_desc(panel.y_desc)
        .x_label_formatter(&|gib| fmt_gib(*gib))
        .y_label_formatter(&|v| fmt_axis(*v))
        .draw()
        .map_err(draw_err)?;
    if panel.lines.is_empty() {
        let style = TextStyle::from(("sans-serif", 18).into_font())
            .pos(Pos::new(HPos::Center, VPos::Center));
        let (w, h) = area.dim_in_pixel();
        let at = (w as i32 / 2, h as i32 / 2);
        area.draw(&Text::new("no values in the input", at, style))
            .map_err(draw_err)?;
        return Ok(());
    }
    for line in &panel.lines {
        draw_line(&mut chart, line)?;
    }
    Ok(())
}

/// One row per line: a stretch of the line with its marker, then the label.
fn draw_legend(area: &Area<'_>, lines: &[PanelLine]) -> Result<(), PlotError> {
    let label_style = TextStyle::from(("monospace", LABEL_FONT_SIZE).into_font())
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (row, line) in lines.iter().enumerate() {
        let y = LEGEND_TOP_PX + row as i32 * LEGEND_ROW_PX;
        let style = line_style(line);
        let sample = PathElement::new(
            vec![(LEGEND_PAD_PX, y), (LEGEND_PAD_PX + LEGEND_LINE_PX, y)],
            style,
        );
        area.draw(&sample).map_err(draw_err)?;
        draw_marker(area, line, (LEGEND_PAD_PX + LEGEND_LINE_PX / 2, y))?;
        let at = (LEGEND_PAD_PX + LEGEND_LINE_PX + LEGEND_GAP_PX, y);
        area.draw(&Text::new(line.label.clone(), at, label_style.clone()))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Draws a line's point marker at `at` (data coordinates on a chart's
/// plotting area, pixels on the legend): round for thick lines, a
/// triangle for thin ones.
fn draw_marker<CT: CoordTranslate>(
    area: &DrawingArea<SVGBackend<'_>, CT>,
    line: &PanelLine,
    at: CT::From,
) -> Result<(), PlotError>
where
    CT::From: Clone,
{
    let fill = line_style(line).color.filled();
    match line.kind {
        LineKind::Thick => area.draw(&Circle::new(at, 4, fill)),
        LineKind::Thin => area.draw(&TriangleMarker::new(at, 6, fill)),
    }
    .map_err(draw_err)
}

/// Fonts and grid lines of every chart's mesh.
fn house_style<'m, 'a, 'b, X, Y, XT, YT, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
    DB: DrawingBackend,
{
    mesh.label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
}

type LogChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<WithKeyPoints<LogCoord<f64>>, WithKeyPoints<LogCoord<f64>>>,
>;

fn line_style(line: &PanelLine) -> ShapeStyle {
    let width = match line.kind {
        LineKind::Thick => 3,
        LineKind::Thin => 1,
    };
    line.colour.stroke_width(width)
}

fn draw_line<'a, 'b: 'a>(chart: &mut LogChart<'a, 'b>, line: &PanelLine) -> Result<(), PlotError> {
    chart
        .draw_series(LineSeries::new(
            line.points.iter().copied(),
            line_style(line),
        ))
        .map_err(draw_err)?;
    for &point in &line.points {
        draw_marker(chart.plotting_area(), line, point)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(cpus: u32, phases: &str) -> BootLog {
        let line = format!(
            "memboot-summary: {{\"cpus\":{cpus},\"total_ns\":1000000000,\"phases\":[{phases}]}}"
        );
        parse_log(
            &format!("[    0.1] booting\n{line}\nrun-qemu.sh: host peak RSS 77 MiB\n"),
            "t",
        )
        .unwrap()
    }

    fn phase(name: &str, cpu: u32, start_ms: u64, end_ms: u64) -> String {
        format!(
            "{{\"phase\":\"{name}\",\"cpu\":{cpu},\"start_ns\":{},\"end_ns\":{}}}",
            start_ms * 1_000_000,
            end_ms * 1_000_000
        )
    }

    #[test]
    fn folded_alloc_test_spans_get_a_bar_per_cpu_labelled_with_their_nodes() {
        let folded = |cpu: u32| {
            format!(
                "{{\"phase\":\"alloc_test\",\"cpu\":{cpu},\"nodes\":64,\"start_ns\":200000000,\"end_ns\":700000000}}"
            )
        };
        let phases = [phase("verify", 0, 10, 20), folded(0), folded(1), folded(2)];
        let layout = TimelineLayout::new(&log_with(3, &phases.join(",")));
        assert_eq!(layout.lanes.len(), 3);
        for cpu in 0..3 {
            let bars: Vec<&Bar> = layout.bars.iter().filter(|b| b.cpu == cpu).collect();
            let alloc = bars.iter().find(|b| b.label.starts_with("alloc_test"));
            assert_eq!(
                alloc.map(|b| b.label.as_str()),
                Some("alloc_test 64 nodes 500.0 ms"),
                "CPU {cpu}"
            );
        }
    }

    #[test]
    fn overlapping_phases_get_their_own_rows() {
        let phases = [
            phase("deferred_init", 0, 100, 900),
            phase("memory_blocks", 0, 150, 160),
            phase("deferred_init", 1, 100, 800),
        ];
        let log = log_with(3, &phases.join(","));
        assert_eq!(log.host_peak_rss_mib, Some(77));
        let layout = TimelineLayout::new(&log);
        assert_eq!(layout.lanes.len(), 3, "CPU 2 is idle but has a lane");
        assert_eq!(
            layout.lanes.iter().map(|l| l.rows).collect::<Vec<_>>(),
            [2, 1, 1]
        );
        assert_eq!(
            layout.bars.iter().map(|b| b.row).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(layout.x_px(0), layout.plot_left_px);
        assert_eq!(
            layout.x_px(layout.t_max_ns),
            layout.plot_left_px + layout.plot_width_px
        );
    }

    #[test]
    fn labels_in_one_row_do_not_collide() {
        let phases: Vec<String> = (0..20)
            .map(|i| phase("verify", 0, 10 * i, 10 * i + 5))
            .collect();
        let layout = TimelineLayout::new(&log_with(1, &phases.join(",")));
        for a in &layout.bars {
            for b in layout
                .bars
                .iter()
                .filter(|b| b.row == a.row && b.phase_index != a.phase_index)
            {
                assert!(
                    !overlaps(&occupied_px(a), &occupied_px(b)),
                    "{a:?} vs {b:?}"
                );
            }
        }
        assert!(
            layout.lanes[0].rows > 1,
            "20 labels do not fit side by side in 200 ms of 1 s"
        );
    }

    #[test]
    fn phase_ending_before_start_is_rejected() {
        let line = format!(
            "memboot-summary: {{\"phases\":[{}]}}",
            phase("zones", 0, 5, 4)
        );
        assert!(matches!(
            parse_log(&line, "t"),
            Err(PlotError::BadPhase { index: 0, .. })
        ));
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_ms(15_049_999), "15.0");
        assert_eq!(fmt_ms(444_589), "0.44");
        assert_eq!(fmt_bytes(1_099_511_098_368), "1.0 TiB");
        assert_eq!(fmt_bytes(17_179_343_872), "16.0 GiB");
        assert_eq!(fmt_gib(64.0), "64 GiB");
        assert_eq!(fmt_gib(32768.0), "32 TiB");
        assert_eq!(
            powers_of_two_in(&(40.0..1500.0)),
            [64.0, 128.0, 256.0, 512.0, 1024.0]
        );
        assert_eq!(one_two_five_in(&(15.0..120.0)), [20.0, 50.0, 100.0]);
    }

    #[test]
    fn bench_rows_are_averaged_per_series_and_size() {
        let json = r#"{"rows": [
            {"mem_mib": 2048, "kernel": "linux", "mode": "linux", "boot_cpu_memmap_ns": 4e6},
            {"mem_mib": 1024, "kernel": "memboot", "mode": "deferred", "boot_cpu_memmap_ns": 1e6},
            {"mem_mib": 1024, "kernel": "memboot", "mode": "deferred", "boot_cpu_memmap_ns": 3e6,
             "allocatable_ns": null, "host_rss_mib": 10, "extra": "ignored"}
        ]}"#;
        let bench = parse_bench(json, "t").unwrap();
        let names: Vec<&str> = bench.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["memboot deferred", "linux"], "Linux last");
        let point = &bench.series[0].points[0];
        assert_eq!(point.memmap_ms, Some(2.0));
        assert_eq!(
            (point.allocatable_ms, point.host_rss_mib),
            (None, Some(10.0))
        );
        let lines = scaling_lines(&bench);
        assert_eq!(lines.time.len(), 2, "no allocatable line: all null");
        assert_eq!(lines.rss.len(), 1);
        assert!(lines.pages.is_empty(), "no struct-page figures");
        assert_eq!(lines.time[0].points, [(1.0, 2.0)]);
    }

    #[test]
    fn each_linux_peer_is_a_series_of_its_own_in_grey() {
        let json = r#"{"rows": [
            {"mem_mib": 1024, "kernel": "linux", "mode": "linux-6.1", "boot_cpu_memmap_ns": 4e6},
            {"mem_mib": 1024, "kernel": "linux", "mode": "linux-6.12", "boot_cpu_memmap_ns": 3e6},
            {"mem_mib": 1024, "kernel": "memboot", "mode": "deferred", "boot_cpu_memmap_ns": 1e6},
            {"mem_mib": 1024, "kernel": "memboot", "mode": "touch", "boot_cpu_memmap_ns": 2e6}
        ]}"#;
        let bench = parse_bench(json, "t").unwrap();
        let names: Vec<&str> = bench.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "memboot deferred",
                "memboot touch",
                "linux-6.1",
                "linux-6.12"
            ]
        );
        let colours = series_colours(&bench.series);
        assert_eq!(&colours[..2], &PALETTE[..2]);
        assert_eq!(colours[2], pal::GREY_800, "the first Linux is dark grey");
        assert_ne!(colours[3], colours[2], "two peers, two greys");
    }
}
