//! Every figure the README (and any markdown file under `docs/`) quotes
//! from a measurement comes from a committed run, and says which. A block
//! (a paragraph, a list item with its continuation lines, a table, a
//! fenced code block) that holds a figure with a unit of time, memory,
//! rate, ratio or share (`12.7 s`, `116 ms`, `3636 MiB`, `2600 MHz`,
//! `0.96×`, `0.3 %`; ranges and lists such as `12.6–12.7 s` or
//! `116.9 / 115.4 ms`) must name the files it came from, with a link or a
//! code span to a path under `tests/bench-results/`, unless every such
//! figure is one of the few design constants in [`CONSTANTS`]. For a block
//! that names files this module checks:
//!
//! - each named file exists;
//! - a table copied from a named file (its header row is the file's: the
//!   README copies `bench.md` tables verbatim) has each of its rows there;
//!   any other table (the README's own summary) has each of its figures
//!   in the named files;
//! - each figure with a unit in the block's text is a number of a named
//!   file in some unit, rounded as the README rounds it: `24.9 s` is
//!   supported by `24890 ms` or `24890123456` (ns), `16.2 GiB` by `16551`
//!   (MiB).
//!
//! A figure can name the one cell or line it quotes (a link whose title
//! says which, [`cell_refs`]): it is then checked against that cell or line
//! alone. Every figure of the README's and `docs/`'s prose is tied so
//! ([`untied_figures`] lists any that is not); the pooled rule below is
//! what checks the figures of a summary table (one that is not a copy).
//!
//! The rounding rule accepts any source number that rounds to the figure
//! after a unit conversion, so a figure can only pass if its file holds a
//! value that says it; small round numbers (`2 s`) are weaker evidence than
//! `12.67 s`, which is why blocks name specific logs, not whole directories.
//! Figures in code (spans and fenced blocks) are not read: they are
//! commands, options and log lines, and a log excerpt's block names its log.

use std::path::{Path, PathBuf};

mod cell_refs;
pub use cell_refs::{cell_refs, check_cell_refs, untied_figures, CellRef, Source};

/// Where committed measurements live.
pub const RESULTS_DIR: &str = "tests/bench-results/";

/// One problem found in the README.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// 1-based line of the block's first line.
    pub line: usize,
    pub what: String,
}

/// The README's blocks: first line number and text. A table, a fenced
/// code block or a list belongs with the paragraph that introduces it (one
/// ending with ':'), and so does a line that is one code span (a bench
/// table's `bench: …` heading) between the two: they are read as one
/// block, whose named files the table's rows and the figures of the
/// paragraph and of every item of the list come from.
fn blocks(readme: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    // What the last block in `out` takes in: nothing, what an introducing
    // paragraph introduces, or the next item of its list.
    #[derive(PartialEq)]
    enum Open {
        No,
        Introduced,
        List,
    }
    let mut open = Open::No;
    for (line, text) in raw_blocks(readme) {
        let first = text.lines().next().unwrap_or("");
        let trimmed = text.trim_end();
        let table = first.starts_with('|');
        let fence = first.trim_start().starts_with("```");
        let item = first.starts_with("- ")
            || first.starts_with("* ")
            || first
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let heading = !trimmed.contains('\n')
            && trimmed.len() > 1
            && trimmed.starts_with('`')
            && trimmed.ends_with('`');
        let joins = match open {
            Open::No => false,
            Open::Introduced => table || fence || heading || item,
            Open::List => item,
        };
        if joins {
            let last = out.last_mut().expect("an open block");
            last.1.push_str(&text);
            open = if heading {
                Open::Introduced
            } else if item {
                Open::List
            } else {
                Open::No
            };
            continue;
        }
        open = if trimmed.ends_with(':') {
            Open::Introduced
        } else {
            Open::No
        };
        out.push((line, text));
    }
    out
}

/// Blocks as the markdown separates them: by blank lines, list items and
/// fences.
fn raw_blocks(readme: &str) -> Vec<(usize, String)> {
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

pub(crate) const UNITS: [&str; 17] = [
    "ns", "µs", "us", "ms", "s", "KiB", "MiB", "GiB", "KB", "MB", "GB", "kHz", "MHz", "GHz", "%",
    "×", "x",
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
        "kHz" => &[1.0, 1e3],
        "MHz" => &[1.0, 1e-3, 1e-6],
        "GHz" => &[1.0, 1e-3, 1e-6, 1e-9],
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
                // A unit right after: one optional space, or a line break
                // with the next line's indentation (`(12340` / `ms)`).
                let after = &s[i..];
                let after_space = after
                    .strip_prefix('\n')
                    .map(|next| next.trim_start_matches(' '))
                    .or_else(|| after.strip_prefix(' '))
                    .unwrap_or(after);
                let glued = after_space.len() == after.len();
                if let Some(unit) = UNITS.iter().find(|u| {
                    after_space.starts_with(**u)
                        && after_space[u.len()..]
                            .chars()
                            .next()
                            .is_none_or(|c| !c.is_alphanumeric())
                }) {
                    // `x` only as a ratio glued to its number (`0.96x`);
                    // `×` between two numbers is a product (`255 × 64`).
                    let product = *unit == "×"
                        && after_space[unit.len()..]
                            .trim_start_matches(' ')
                            .starts_with(|c: char| c.is_ascii_digit());
                    if (*unit != "x" || glued) && !product {
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
                // Skip a link target `](...)`, a quoted title with any
                // `)` in it included.
                let mut quoted = false;
                for d in chars.by_ref() {
                    match d {
                        '"' => quoted = !quoted,
                        ')' if !quoted => break,
                        _ => {}
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

/// Design constants a block may quote without naming a run: sizes fixed
/// by Linux's layout, QEMU, memboot's design or the build hosts, not
/// measured.
/// `(figure, unit, what it is)`; keep it to what the README's design
/// sections need, and give a measured figure its file instead.
pub const CONSTANTS: [(&str, &str, &str); 17] = [
    (
        "32",
        "KiB",
        "the longest command line QEMU gets as a fw_cfg string (qemu::CMDLINE_STRING_MAX_BYTES)",
    ),
    (
        "12",
        "MiB",
        "the sparse seed's regions (seeds::SPARSE_REGION_BYTES)",
    ),
    (
        "64",
        "MiB",
        "the sparse seed's low RAM kept (seeds::SPARSE_LOW_BYTES)",
    ),
    (
        "4",
        "GiB",
        "where the pc machine's RAM above its PCI hole starts",
    ),
    ("4", "KiB", "a page (PAGE_SIZE)"),
    ("1", "%", "run-qemu.sh --baseline-margin's default"),
    (
        "16",
        "KiB",
        "a Linux kernel thread's stack (x86_64 THREAD_SIZE without KASAN)",
    ),
    (
        "99",
        "%",
        "the instruction profile's attribution floor (report::MIN_ATTRIBUTED)",
    ),
    ("64", "KiB", "SMBIOS 2.1's table limit"),
    ("2", "MiB", "a huge page: one vmemmap mapping"),
    (
        "1",
        "GiB",
        "a gigantic page: one direct-map mapping where the CPU has pdpe1gb",
    ),
    (
        "4",
        "MiB",
        "a block window: 1024 pages, the largest buddy block",
    ),
    (
        "8",
        "MiB",
        "QEMU's NUMA split granularity: run-qemu.sh's smallest node",
    ),
    (
        "128",
        "MiB",
        "a memory section (x86_64 SECTION_SIZE_BITS = 27)",
    ),
    ("4", "GiB", "the 32-bit boundary, where DMA32 ends"),
    ("16", "GiB", "a 1 TiB guest's struct pages: RAM/64"),
    (
        "24",
        "GiB",
        "the build hosts' RAM, which `Large guests` is sized for",
    ),
];

/// Is `figure` one of the [`CONSTANTS`]?
pub fn is_constant(figure: &Figure) -> bool {
    CONSTANTS
        .iter()
        .any(|&(text, unit, _)| figure.text == text && figure.unit == unit)
}

/// The text of a block outside its table rows.
fn prose_of(block: &str) -> String {
    block
        .lines()
        .filter(|l| !l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Check a markdown document (the README, or a file under `docs/`) whose
/// named paths are relative to the repository at `root`: every block that
/// quotes a measured figure names committed results, and what it quotes is
/// in them.
pub fn check(root: &Path, readme: &str) -> Vec<Problem> {
    let mut problems = check_cell_refs(root, readme);
    for (line, block) in blocks(readme) {
        // A directory in a command (`--svg tests/bench-results/1-node`)
        // says where a run wrote, not what a figure came from.
        let files: Vec<String> = named_files(&block)
            .into_iter()
            .filter(|f| !root.join(f).is_dir())
            .collect();
        if files.is_empty() {
            problems.extend(unsourced(line, &block));
        } else {
            problems.extend(check_sourced(root, line, &block, &files));
        }
    }
    problems
}

/// A block that names no committed file: any measured figure in it
/// (table cells count too: a table of figures is a measurement).
fn unsourced(line: usize, block: &str) -> Option<Problem> {
    let measured: Vec<String> = figures(block)
        .iter()
        .filter(|f| !is_constant(f))
        .map(|f| format!("{} {}", f.text, f.unit))
        .collect();
    (!measured.is_empty()).then(|| Problem {
        line,
        what: format!(
            "{} quoted, but the block names no committed file under {RESULTS_DIR}: link the file the figures came from, drop figures no committed run holds, or add a design constant to readme_figures::CONSTANTS",
            measured.join(", ")
        ),
    })
}

/// A block that names `files`: each figure it quotes is in them.
fn check_sourced(root: &Path, line: usize, block: &str, files: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut texts = Vec::new();
    for f in files {
        let path: PathBuf = root.join(f);
        match std::fs::read_to_string(&path) {
            Ok(t) => texts.push(t),
            Err(e) => problems.push(Problem {
                line,
                what: format!("{f}: {e}"),
            }),
        }
    }
    let numbers: Vec<f64> = texts.iter().flat_map(|t| source_numbers(t)).collect();
    // A table whose header row is a named file's is a copy of that
    // file's table (a bench.md), row for row; so is one that leaves some
    // of its columns out and whose every row is one of the table's, cut
    // to its columns. Any other table is the README's own summary, whose
    // figures must each be in the files.
    let rows = table_rows(block);
    let in_files = |row: &str| texts.iter().any(|t| t.lines().any(|l| l == row));
    let projected = cell_refs::projected_copy(&texts, &rows);
    let copied = projected || rows.first().is_some_and(|header| in_files(header));
    for row in &rows {
        if copied {
            if !projected && !in_files(row) {
                problems.push(Problem {
                    line,
                    what: format!("table row not in {}: {row}", files.join(", ")),
                });
            }
            continue;
        }
        for fig in figures(row).iter().filter(|f| !supported(f, &numbers)) {
            problems.push(Problem {
                line,
                what: format!(
                    "{} {} (table row {row}) is in none of {}",
                    fig.text,
                    fig.unit,
                    files.join(", ")
                ),
            });
        }
    }
    // Figures tied to a cell or line are checked there
    // (`check_cell_refs`), not against every number of the files.
    for fig in figures(&cell_refs::strip_tied_links(&prose_of(block))) {
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
        // A unit on the next line still belongs to its number.
        assert_eq!(units("the rest (12340\n  ms)"), [("12340".into(), "ms")]);
        // `×` between numbers is a product, not a ratio.
        assert!(units("255 CPUs × 64 nodes, 64 × 64").is_empty());
        assert_eq!(units("12.5× faster"), [("12.5".into(), "×")]);
    }

    #[test]
    fn tables_lists_and_headings_belong_to_the_paragraph_that_introduces_them() {
        let text = "Intro ([log](tests/bench-results/a.log)):\n\n`bench: heading`\n\n\
                    | size | x |\n|---|---|\n\nNot introduced.\n\n\
                    From [b](tests/bench-results/b.md):\n\n- one\n- two\n  more\n\n\
                    Steps:\n\n1. first\n2. second\n\nAfter.\n";
        let got: Vec<usize> = blocks(text).iter().map(|b| b.0).collect();
        let line_of = |t: &str| text.lines().position(|l| l.starts_with(t)).unwrap() + 1;
        assert_eq!(
            got,
            [
                line_of("Intro"),
                line_of("Not introduced"),
                line_of("From"),
                line_of("Steps"),
                line_of("After")
            ]
        );
        let from = &blocks(text)[2].1;
        assert!(from.contains("- two\n  more"), "{from}");
    }

    #[test]
    fn a_summary_table_is_checked_figure_by_figure_and_a_copy_row_by_row() {
        let dir = std::env::temp_dir().join(format!("readme-tables-{}", std::process::id()));
        let results = dir.join(RESULTS_DIR);
        std::fs::create_dir_all(&results).unwrap();
        std::fs::write(
            results.join("b.md"),
            "| size | ms |\n|---|---|\n| 1T | 12.5 |\nratio 95.8\n",
        )
        .unwrap();
        let named = "From [b](tests/bench-results/b.md):\n\n";
        // A copy of the file's table: every row verbatim.
        let copy = format!("{named}| size | ms |\n|---|---|\n| 1T | 12.6 |\n");
        let found = check(&dir, &copy);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].what.starts_with("table row not in"));
        // The README's own table: each figure in the file.
        let own =
            format!("{named}| files | caught |\n|---|---|\n| a.rs | 95.8 % |\n| b.rs | 97.1 % |\n");
        let found = check(&dir, &own);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].what.starts_with("97.1 % (table row | b.rs"),
            "{found:?}"
        );
        std::fs::remove_dir_all(dir).unwrap();
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
        assert_eq!(problems.len(), 4, "{whats:?}");
        assert!(whats[0].starts_with("13.4 s is in none of"), "{whats:?}");
        assert!(whats[1].starts_with("table row not in") && whats[1].ends_with("| 1T | y |"));
        assert!(
            whats[2].starts_with("99 s quoted, but the block names no committed file"),
            "{whats:?}"
        );
        assert!(
            whats[3].starts_with("tests/bench-results/none.log"),
            "{whats:?}"
        );
        let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
        let line_of = |text: &str| readme.lines().position(|l| l.starts_with(text)).unwrap() + 1;
        assert_eq!(
            lines,
            [
                line_of("Another"),
                line_of("| 1T | x |"),
                line_of("Unsourced"),
                line_of("Missing")
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_block_without_a_file_may_quote_design_constants_only() {
        let dir = std::env::temp_dir();
        let problems = |text: &str| check(&dir, text);
        // Every constant, in prose, passes without a file.
        let constants: Vec<String> = CONSTANTS
            .iter()
            .map(|(figure, unit, _)| format!("{figure} {unit}"))
            .collect();
        let prose = format!("Design: {}.\n", constants.join(", "));
        assert!(problems(&prose).is_empty(), "{:?}", problems(&prose));
        // The same number in another unit is a figure, and so is a
        // constant's unit with another number.
        for figure in ["5 GiB", "3 KiB", "0.5 ×", "12 %", "2600.000 MHz"] {
            let text = format!("Intro.\n\nIt took {figure} here.\n");
            let found = problems(&text);
            assert_eq!(found.len(), 1, "{figure}: {found:?}");
            assert_eq!(found[0].line, 3);
        }
        // A table of figures is a measurement too.
        let table = "| size | ms |\n|---|---|\n| 1T | 11254.4 ms |\n";
        assert_eq!(problems(table).len(), 1);
        // Code is not prose: a command's `--timeout 900 s` or a fenced log
        // excerpt quotes no figure of its own.
        assert!(problems("Run `sleep 5 s` first.\n").is_empty());
        assert!(problems("```\n[ 0.1] took 5 ms\n```\n").is_empty());
        // Numbers without a unit (sizes, counts, commits) are not figures.
        assert!(problems("-m 1T over 16 nodes at 5b6e776, 262144 sections.\n").is_empty());
    }
}
