//! The scaling chart's input: `tests/bench.sh`'s JSON rows, grouped into
//! series and averaged over rounds.

use serde::Deserialize;

use super::error::PlotError;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::scaling_lines;

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
}
