//! Every figure the README quotes from a measurement comes from a committed
//! run, and says which: a README block (a paragraph, a list item with its
//! continuation lines, a table, a fenced code block) that quotes measured
//! figures names the files it came from, with a link or a code span to a
//! path under `tests/bench-results/`. This module checks such blocks:
//!
//! - each named file exists;
//! - each row of a table in the block is a row of one of the named files
//!   (the README copies `bench.md` tables verbatim);
//! - each figure with a unit in the block's text (`12.7 s`, `116 ms`,
//!   `3636 MiB`, `0.96×`, `0.3 %`, ranges and lists such as `12.6–12.7 s` or
//!   `116.9 / 115.4 ms`) is a number of a named file in some unit, rounded
//!   as the README rounds it: `24.9 s` is supported by `24890 ms` or
//!   `24890123456` (ns), `16.2 GiB` by `16551` (MiB).
//!
//! The rounding rule accepts any source number that rounds to the figure
//! after a unit conversion, so a figure can only pass if its file holds a
//! value that says it; small round numbers (`2 s`) are weaker evidence than
//! `12.67 s`, which is why blocks name specific logs, not whole directories.

use std::path::{Path, PathBuf};

/// Where committed measurements live.
pub const RESULTS_DIR: &str = "tests/bench-results/";

/// One problem found in the README.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// 1-based line of the block's first line.
    pub line: usize,
    pub what: String,
}

/// A README block: its first line number and its text.
fn blocks(readme: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut in_fence = false;
    for (i, line) in readme.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        let item_start = !in_fence && (line.starts_with("- ") || line.starts_with("* "));
        let ends_block = !in_fence && (line.trim().is_empty() || item_start);
        if ends_block {
            if let Some(b) = current.take() {
                out.push(b);
            }
            if line.trim().is_empty() {
                continue;
            }
        }
        if fence && !in_fence {
            // A code block is a block of its own, with the paragraph
            // before it if that paragraph introduces it (ends with ':').
            if let Some((_, text)) = &current {
                if !text.trim_end().ends_with(':') {
                    out.push(current.take().unwrap());
                }
            }
        }
        let b = current.get_or_insert_with(|| (i + 1, String::new()));
        b.1.push_str(line);
        b.1.push('\n');
        if fence {
            in_fence = !in_fence;
        }
    }
    out.extend(current);
    out
}

/// The committed files a block names: paths under [`RESULTS_DIR`] in
/// markdown links `](path)` or code spans.
fn named_files(block: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut rest = block;
    while let Some(at) = rest.find(RESULTS_DIR) {
        let tail = &rest[at..];
        let end = tail.find([')', '`', ' ', '\n', ']']).unwrap_or(tail.len());
        let path = tail[..end].trim_end_matches(['.', ',', ';', ':']);
        if !path.ends_with('/') && !files.iter().any(|f| f == path) {
            files.push(path.to_string());
        }
        rest = &tail[end..];
    }
    files
}

/// A figure the README quotes: the number as written, its decimals, its unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub text: String,
    pub value: f64,
    pub decimals: usize,
    pub unit: &'static str,
}

const UNITS: [&str; 14] = [
    "ns", "µs", "us", "ms", "s", "KiB", "MiB", "GiB", "KB", "MB", "GB", "%", "×", "x",
];

/// `(factor, …)`: a source number `n` supports a figure in `unit` when
/// `n * factor` rounds to it, for one of these factors (the units a log or
/// JSON may hold the same quantity in).
fn factors(unit: &str) -> &'static [f64] {
    match unit {
        "ns" => &[1.0],
        "µs" | "us" => &[1.0, 1e-3],
        "ms" => &[1.0, 1e-3, 1e-6],
        "s" => &[1.0, 1e-3, 1e-6, 1e-9],
        "KiB" | "KB" => &[1.0, 1.0 / 1024.0],
        "MiB" | "MB" => &[1.0, 1.0 / 1024.0, 1.0 / 1048576.0],
        "GiB" | "GB" => &[1.0, 1.0 / 1024.0, 1.0 / 1048576.0, 1.0 / 1073741824.0],
        _ => &[1.0],
    }
}

/// Numbers written with digit-group separators (`267 381 760`,
/// `16,320`, thin spaces) read as one number.
fn number_at(s: &str) -> Option<(String, usize)> {
    let bytes: Vec<char> = s.chars().collect();
    let mut text = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let decimal_point =
            c == '.' && i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() && !text.contains('.');
        if c.is_ascii_digit() || decimal_point {
            text.push(c);
        } else if (c == ',' || c == ' ' || c == '\u{2009}' || c == '\u{202f}')
            && !text.contains('.')
            && i + 3 < bytes.len() + 1
            && bytes[i + 1..].iter().take(3).all(|d| d.is_ascii_digit())
            && bytes.get(i + 4).is_none_or(|d| !d.is_ascii_digit())
        {
            // a group separator: exactly three digits follow
        } else {
            break;
        }
        i += 1;
    }
    let consumed: usize = bytes[..i].iter().map(|c| c.len_utf8()).sum();
    (!text.is_empty()).then_some((text, consumed))
}

/// The figures of a block's prose (code spans and link targets left out).
pub fn figures(text: &str) -> Vec<Figure> {
    let prose = strip_code_and_links(text);
    let mut out = Vec::new();
    let mut pending: Vec<(String, f64, usize)> = Vec::new();
    let mut i = 0;
    let s = prose.as_str();
    while i < s.len() {
        let rest = &s[i..];
        let prev_alnum = s[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !prev_alnum {
            if let Some((num, len)) = number_at(rest) {
                let value: f64 = num.parse().unwrap_or(f64::NAN);
                let decimals = num.split_once('.').map_or(0, |(_, d)| d.len());
                pending.push((num, value, decimals));
                i += len;
                // A unit right after (one optional space)?
                let after = &s[i..];
                let after_space = after.strip_prefix(' ').unwrap_or(after);
                if let Some(unit) = UNITS.iter().find(|u| {
                    after_space.starts_with(**u)
                        && after_space[u.len()..]
                            .chars()
                            .next()
                            .is_none_or(|c| !c.is_alphanumeric())
                }) {
                    // `x` only as a ratio glued to its number (`0.96x`).
                    if *unit != "x" || !after.starts_with(' ') {
                        for (text, value, decimals) in pending.drain(..) {
                            out.push(Figure {
                                text,
                                value,
                                decimals,
                                unit,
                            });
                        }
                    }
                    pending.clear();
                }
                continue;
            }
        }
        // Numbers joined by a range or list separator share the unit that
        // follows the last of them; anything else ends the group.
        let joiners = [" – ", "–", " / ", " to ", " and ", " or ", "-"];
        if let Some(j) = joiners.iter().find(|j| rest.starts_with(**j)) {
            if !pending.is_empty() {
                i += j.len();
                continue;
            }
        }
        pending.clear();
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    out
}

fn strip_code_and_links(text: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(' ');
            }
            ']' if chars.peek() == Some(&'(') && !in_code => {
                // Skip a link target `](...)`.
                for d in chars.by_ref() {
                    if d == ')' {
                        break;
                    }
                }
                out.push(' ');
            }
            _ if in_code => {}
            _ => out.push(c),
        }
    }
    out
}

/// Every number in a source file.
fn source_numbers(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (c == '.' && !cur.is_empty() && !cur.contains('.')) {
            cur.push(c);
        } else if !cur.is_empty() {
            if let Ok(v) = cur.trim_end_matches('.').parse::<f64>() {
                out.push(v);
            }
            cur.clear();
        }
    }
    out
}

/// Does some number of `sources` support `figure`?
pub fn supported(figure: &Figure, sources: &[f64]) -> bool {
    let scale = 10f64.powi(figure.decimals as i32);
    let want = (figure.value * scale).round();
    factors(figure.unit).iter().any(|f| {
        sources
            .iter()
            .any(|n| ((n * f) * scale).round() == want || ((n * f) * scale - want).abs() < 1e-6)
    })
}

/// Table rows of a block (lines starting with `|`, not the `|---|` rule).
fn table_rows(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .collect()
}

/// Check the README at `root`: every block that names committed results.
pub fn check(root: &Path, readme: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (line, block) in blocks(readme) {
        // A directory in a command (`--svg tests/bench-results/1-node`)
        // says where a run wrote, not what a figure came from.
        let files: Vec<String> = named_files(&block)
            .into_iter()
            .filter(|f| !root.join(f).is_dir())
            .collect();
        if files.is_empty() {
            continue;
        }
        let mut texts = Vec::new();
        for f in &files {
            let path: PathBuf = root.join(f);
            match std::fs::read_to_string(&path) {
                Ok(t) => texts.push(t),
                Err(e) => problems.push(Problem {
                    line,
                    what: format!("{f}: {e}"),
                }),
            }
        }
        let rows = table_rows(&block);
        for row in &rows {
            if !row.starts_with("| size |") && !texts.iter().any(|t| t.lines().any(|l| l == *row)) {
                problems.push(Problem {
                    line,
                    what: format!("table row not in {}: {row}", files.join(", ")),
                });
            }
        }
        let prose: String = block
            .lines()
            .filter(|l| !l.starts_with('|'))
            .collect::<Vec<_>>()
            .join("\n");
        let numbers: Vec<f64> = texts.iter().flat_map(|t| source_numbers(t)).collect();
        for fig in figures(&prose) {
            if !supported(&fig, &numbers) {
                problems.push(Problem {
                    line,
                    what: format!(
                        "{} {} is in none of {}",
                        fig.text,
                        fig.unit,
                        files.join(", ")
                    ),
                });
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(text: &str) -> Vec<(String, &'static str)> {
        figures(text)
            .into_iter()
            .map(|f| (f.text, f.unit))
            .collect()
    }

    #[test]
    fn figures_with_units_ranges_and_lists() {
        assert_eq!(
            units("took 12.6–12.7 s and 116.9 / 115.4 ms, 3636 MiB, 0.96× Linux, 0.3 % written"),
            [
                ("12.6".into(), "s"),
                ("12.7".into(), "s"),
                ("116.9".into(), "ms"),
                ("115.4".into(), "ms"),
                ("3636".into(), "MiB"),
                ("0.96".into(), "×"),
                ("0.3".into(), "%"),
            ]
        );
        // Sizes, counts and code are not measured figures.
        assert!(units("-m 1T over 16 nodes, 2 rounds, `took 5 s`, 64G").is_empty());
        assert_eq!(units("267 381 760 pages in 24 s"), [("24".into(), "s")]);
        assert_eq!(units("16,320 phases, 1.45 MB")[0].1, "MB");
    }

    #[test]
    fn a_figure_is_supported_by_the_same_value_in_another_unit() {
        let fig = |text: &str| figures(text).remove(0);
        assert!(supported(&fig("24.9 s"), &[24890.0]));
        assert!(supported(&fig("24.9 s"), &[24_890_123_456.0]));
        assert!(supported(&fig("16.2 GiB"), &[16551.0]));
        assert!(
            !supported(&fig("16.5 GiB"), &[16551.0]),
            "16551 MiB is 16.2 GiB"
        );
        assert!(!supported(&fig("713 ms"), &[362_000_000.0]));
        assert!(supported(&fig("0.96×"), &[0.96]));
    }

    #[test]
    fn blocks_name_their_files_and_unsupported_figures_are_problems() {
        let dir = std::env::temp_dir().join(format!("readme-figures-{}", std::process::id()));
        let results = dir.join(RESULTS_DIR);
        std::fs::create_dir_all(&results).unwrap();
        std::fs::write(
            results.join("run.log"),
            "deferred took 12702 ms\n| 1T | x |\n",
        )
        .unwrap();
        let readme = "# t\n\nA run ([log](tests/bench-results/run.log)): 12.7 s.\n\n\
                      Another ([log](tests/bench-results/run.log)): 13.4 s.\n\n\
                      | 1T | x |\n| 1T | y |\n`tests/bench-results/run.log`\n\n\
                      Unsourced: 99 s.\n\nMissing (`tests/bench-results/none.log`).\n";
        let problems = check(&dir, readme);
        let whats: Vec<&str> = problems.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(problems.len(), 3, "{whats:?}");
        assert!(whats[0].starts_with("13.4 s is in none of"), "{whats:?}");
        assert!(whats[1].starts_with("table row not in") && whats[1].ends_with("| 1T | y |"));
        assert!(
            whats[2].starts_with("tests/bench-results/none.log"),
            "{whats:?}"
        );
        assert_eq!(problems[0].line, 5);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
