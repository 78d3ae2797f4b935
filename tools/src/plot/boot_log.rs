//! The timeline's input: a serial log's `memboot-summary:` line and
//! run-qemu.sh's host lines, and how a phase's figures are written.

use memboot_contract::summary::{PhaseSpan, Summary};

use super::error::PlotError;

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

pub(super) fn fmt_bytes(bytes: u64) -> String {
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

pub(super) fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn log_with(cpus: u32, phases: &str) -> BootLog {
        let line = format!(
            "memboot-summary: {{\"cpus\":{cpus},\"total_ns\":1000000000,\"phases\":[{phases}]}}"
        );
        parse_log(
            &format!("[    0.1] booting\n{line}\nrun-qemu.sh: host peak RSS 77 MiB\n"),
            "t",
        )
        .unwrap()
    }

    pub(crate) fn phase(name: &str, cpu: u32, start_ms: u64, end_ms: u64) -> String {
        format!(
            "{{\"phase\":\"{name}\",\"cpu\":{cpu},\"start_ns\":{},\"end_ns\":{}}}",
            start_ms * 1_000_000,
            end_ms * 1_000_000
        )
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
    }
}
