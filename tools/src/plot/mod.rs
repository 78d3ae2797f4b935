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
//!
//! The work is split by role: [`parse_log`] reads a serial log
//! (`boot_log`), [`TimelineLayout`] places the bars in pixels
//! (`timeline_layout`) and [`render_timeline`] draws them
//! (`timeline_svg`); [`parse_bench`] reads the bench JSON into series
//! (`bench_json`) and [`render_scaling`] draws the panels (`scaling_svg`);
//! both charts share `chart_style` and [`PlotError`] (`error`). Here,
//! the files: [`timeline_file`] and [`scaling_file`] read the input and
//! write the SVG.

mod bench_json;
mod boot_log;
mod chart_style;
mod error;
mod scaling_svg;
mod timeline_layout;
mod timeline_svg;

pub use bench_json::{parse_bench, Bench, BenchRow, Series, SeriesPoint};
pub use boot_log::{fmt_ms, label, parse_log, BootLog};
pub use error::PlotError;
pub use scaling_svg::{
    render_scaling, scaling_lines, series_colours, LineKind, PanelLine, ScalingLines,
    LEGEND_LINE_PX, SC_PANEL_H_PX, SC_PLOT_W_PX,
};
pub use timeline_layout::{
    label_width_px, Bar, LabelSide, Lane, TimelineLayout, BAR_PAD_PX, ROW_HEIGHT_PX,
};
pub use timeline_svg::{phase_colour, render_timeline};

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
