//! The timeline's pixel geometry: a lane per CPU, a sub-row per overlap,
//! and where each bar and its label sit, computed before drawing so that
//! the renderer and the tests agree.

use std::ops::Range;

use memboot_contract::summary::PhaseSpan;

use super::boot_log::{label, BootLog};

const TL_WIDTH_PX: u32 = 1400;
pub(super) const TL_TITLE_H_PX: u32 = 36;
pub(super) const TL_MARGIN_PX: u32 = 16;
pub(super) const TL_LANE_LABEL_W_PX: u32 = 64;
pub(super) const TL_AXIS_H_PX: u32 = 44;
/// Height of one sub-row of a lane.
pub const ROW_HEIGHT_PX: i32 = 22;
/// Gap between a bar and the top and bottom of its sub-row.
pub const BAR_PAD_PX: i32 = 3;
/// Font size handed to plotters (the SVG says `font-size` = this / 1.24).
pub(super) const LABEL_FONT_SIZE: f64 = 15.0;
/// A generous monospace advance at that size (0.6 em of 12.1 px, rounded up).
pub(super) const LABEL_CHAR_W_PX: f64 = 7.6;
pub(super) const LABEL_GAP_PX: i32 = 4;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::boot_log::tests::{log_with, phase};

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
}
