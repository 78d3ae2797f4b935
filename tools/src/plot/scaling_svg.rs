//! The scaling chart drawn: the series' lines per panel, their colours,
//! the log axes and the legend column.

use std::ops::Range;

use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::prelude::*;
use plotters::style::full_palette as pal;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::bench_json::{Bench, Series, SeriesPoint};
use super::chart_style::{house_style, Area};
use super::error::{draw_err, PlotError};
use super::timeline_layout::{LABEL_CHAR_W_PX, LABEL_FONT_SIZE};

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
    use crate::plot::parse_bench;

    #[test]
    fn formats() {
        assert_eq!(fmt_gib(64.0), "64 GiB");
        assert_eq!(fmt_gib(32768.0), "32 TiB");
        assert_eq!(
            powers_of_two_in(&(40.0..1500.0)),
            [64.0, 128.0, 256.0, 512.0, 1024.0]
        );
        assert_eq!(one_two_five_in(&(15.0..120.0)), [20.0, 50.0, 100.0]);
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
