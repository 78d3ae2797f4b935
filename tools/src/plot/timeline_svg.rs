//! The timeline drawn: title, lanes, bars and labels where
//! [`TimelineLayout`] put them.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::full_palette as pal;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::boot_log::{fmt_bytes, fmt_ms, plural, BootLog};
use super::chart_style::{house_style, Area};
use super::error::{draw_err, PlotError};
use super::timeline_layout::{
    Bar, LabelSide, TimelineLayout, BAR_PAD_PX, LABEL_FONT_SIZE, LABEL_GAP_PX, TL_AXIS_H_PX,
    TL_LANE_LABEL_W_PX, TL_MARGIN_PX, TL_TITLE_H_PX,
};

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
