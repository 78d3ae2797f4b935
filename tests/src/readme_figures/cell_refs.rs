//! Figures tied to the cell or line they quote. A figure written as a link
//! whose title names its source,
//!
//! ```text
//! [1.06×](tests/bench-results/memdesc-1t-cold/bench.md "memmap × Linux 6.12 @ 1T | deferred")
//! [175.3 ms](tests/bench-results/x/logs/1G-deferred-1.log "line: host timing: memory ready")
//! ```
//!
//! is checked against that one place: a table cell (the column's header
//! as the file writes it, ` @ `, then cells that the row holds, ` | `
//! between them, each a cell's whole text or `HEADER=TEXT` for the cell
//! under that header; exactly one row of one table of the file must have
//! them all) or a line (`line: ` and text that exactly one line of the file
//! holds). Each number of the link's text must be a number of that cell
//! or line, rounded as the text rounds it ([`super::supported`]), so a
//! figure cannot pass on a number that happens to sit elsewhere in the
//! file.

use std::path::Path;

use super::{figures, prose_of, supported, Problem, RESULTS_DIR};

/// One figure link: where in the document, its text, the file, and what
/// the title names.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRef {
    pub line: usize,
    pub text: String,
    pub path: String,
    pub source: Source,
}

/// The part of the file a [`CellRef`] quotes.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A table cell: the column's header and cells of its row.
    Cell { column: String, row: Vec<String> },
    /// The one line of the file that holds this text.
    Line(String),
}

/// `TITLE` of `[text](path "TITLE")` → what it names; `None` for a title
/// that is neither form.
fn source_of(title: &str) -> Option<Source> {
    if let Some(text) = title.strip_prefix("line: ") {
        return Some(Source::Line(text.to_string()));
    }
    let (column, row) = title.split_once(" @ ")?;
    let row: Vec<String> = row.split(" | ").map(|c| c.trim().to_string()).collect();
    (!column.is_empty() && row.iter().all(|c| !c.is_empty())).then(|| Source::Cell {
        column: column.trim().to_string(),
        row,
    })
}

/// Every link to a file under [`RESULTS_DIR`] with a title, outside code
/// fences, in `doc`.
pub fn cell_refs(doc: &str) -> Vec<Result<CellRef, Problem>> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, text) in doc.lines().enumerate() {
        if text.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence {
            continue;
        }
        let mut rest = text;
        while let Some(at) = rest.find("](") {
            let label_start = rest[..at].rfind('[').map_or(0, |s| s + 1);
            let label = &rest[label_start..at];
            let target = &rest[at + 2..];
            // A title starts before the target's first `)`; a link
            // without one ends there (its path holds no space).
            let close = target.find(')').unwrap_or(target.len());
            let titled = target.find(" \"").filter(|&q| q < close);
            let Some((path, title)) = titled.and_then(|q| {
                let title = &target[q + 2..];
                let end = title.find("\")")?;
                rest = &title[end + 2..];
                Some((&target[..q], &title[..end]))
            }) else {
                rest = &target[(close + 1).min(target.len())..];
                continue;
            };
            if !path.starts_with(RESULTS_DIR) && !path.contains(&format!("/{RESULTS_DIR}")) {
                continue;
            }
            let path = path[path.find(RESULTS_DIR).unwrap_or(0)..].to_string();
            let line = i + 1;
            out.push(match source_of(title) {
                Some(source) => Ok(CellRef {
                    line,
                    text: label.to_string(),
                    path,
                    source,
                }),
                None => Err(Problem {
                    line,
                    what: format!(
                        "[{label}]({path} \"{title}\"): a figure's title names its source as \"COLUMN @ ROW CELL | ROW CELL\" or \"line: TEXT\""
                    ),
                }),
            });
        }
    }
    out
}

/// The cells of a markdown table row, each trimmed.
pub(super) fn cells(row: &str) -> Vec<String> {
    row.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The rows of `file`'s tables whose header has `header`'s cells in its
/// order (every column, or some left out), each cut to those columns;
/// `None` when no table of `file` has such a header (of two columns or
/// more).
pub(super) fn copyable_rows(file: &str, header: &str) -> Option<Vec<Vec<String>>> {
    let want = cells(header);
    if want.len() < 2 {
        return None;
    }
    let mut found: Option<Vec<Vec<String>>> = None;
    for (head, rows) in tables(file) {
        // `want`'s columns in `head`, in order.
        let mut at = Vec::new();
        let mut from = 0;
        for w in &want {
            match head[from..].iter().position(|h| h == w) {
                Some(i) => {
                    at.push(from + i);
                    from += i + 1;
                }
                None => break,
            }
        }
        if at.len() < want.len() {
            continue;
        }
        found
            .get_or_insert_with(Vec::new)
            .extend(rows.iter().map(|r| {
                at.iter()
                    .map(|&i| r.get(i).cloned().unwrap_or_default())
                    .collect()
            }));
    }
    found
}

/// Is the table `rows` (its header row first) a copy of a table of one
/// of `files` with some of its columns left out: its header that table's
/// with columns left out, in the file's order, and each of its rows one
/// of that table's rows, cut to those columns? (A copy with every column
/// has the file's header line and is checked row by row as such.)
pub(super) fn projected_copy(files: &[String], rows: &[&str]) -> bool {
    let Some((header, body)) = rows.split_first() else {
        return false;
    };
    let copyable: Vec<Vec<String>> = files
        .iter()
        .filter_map(|f| copyable_rows(f, header))
        .flatten()
        .collect();
    !copyable.is_empty() && !body.is_empty() && body.iter().all(|r| copyable.contains(&cells(r)))
}

/// The markdown tables of a file: each as its header cells and rows.
fn tables(text: &str) -> Vec<(Vec<String>, Vec<Vec<String>>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let rule = lines.get(i + 1).is_some_and(|r| r.starts_with("|---"));
        if l.starts_with('|') && rule {
            let rows = lines[i + 2..]
                .iter()
                .take_while(|r| r.starts_with('|'))
                .map(|r| cells(r))
                .collect();
            out.push((cells(l), rows));
        }
    }
    out
}

/// The text a [`Source`] names in `file`, or why there is not exactly one.
fn quoted(file: &str, source: &Source) -> Result<String, String> {
    match source {
        Source::Line(text) => {
            let found: Vec<&str> = file.lines().filter(|l| l.contains(text.as_str())).collect();
            match found[..] {
                [one] => Ok(one.to_string()),
                [] => Err(format!("no line holds \"{text}\"")),
                _ => Err(format!("{} lines hold \"{text}\": name one", found.len())),
            }
        }
        Source::Cell { column, row } => {
            let mut found = Vec::new();
            for (header, rows) in tables(file) {
                let Some(at) = header.iter().position(|h| h == column) else {
                    continue;
                };
                let holds = |r: &[String], want: &String| match want.split_once('=') {
                    Some((h, v)) if header.iter().any(|x| x == h) => {
                        header.iter().zip(r).any(|(x, c)| x == h && c == v)
                    }
                    _ => r.iter().any(|c| c == want),
                };
                for r in rows {
                    if row.iter().all(|want| holds(&r, want)) {
                        found.push(r.get(at).cloned().unwrap_or_default());
                    }
                }
            }
            match &found[..] {
                [one] => Ok(one.clone()),
                [] => Err(format!(
                    "no table has a column \"{column}\" with a row holding {}",
                    row.join(", ")
                )),
                _ => Err(format!(
                    "{} rows under \"{column}\" hold {}: name more of the row",
                    found.len(),
                    row.join(", ")
                )),
            }
        }
    }
}

/// `text` without its figure links (`[figure](path "title")`, whole).
pub(super) fn strip_tied_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let target = &rest[at + 2..];
        let close = target.find(')').unwrap_or(target.len());
        let titled = target.find(" \"").is_some_and(|q| q < close);
        let end = target.find("\")").map(|e| e + 2);
        match (rest[..at].rfind('['), end) {
            (Some(open), Some(e)) if titled => {
                out.push_str(&rest[..open]);
                out.push(' ');
                rest = &target[e..];
            }
            _ => {
                out.push_str(&rest[..at + 2]);
                rest = target;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Check every figure link of `doc` against the one cell or line it names.
pub fn check_cell_refs(root: &Path, doc: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    for r in cell_refs(doc) {
        let r = match r {
            Ok(r) => r,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        let problem = |what: String| Problem {
            line: r.line,
            what: format!("[{}]({}): {what}", r.text, r.path),
        };
        let file = match std::fs::read_to_string(root.join(&r.path)) {
            Ok(f) => f,
            Err(e) => {
                problems.push(problem(e.to_string()));
                continue;
            }
        };
        let quoted = match quoted(&file, &r.source) {
            Ok(q) => q,
            Err(e) => {
                problems.push(problem(e));
                continue;
            }
        };
        let numbers = super::source_numbers(&quoted);
        let mut figs = figures(&r.text);
        if figs.is_empty() {
            // A table cell's figures carry their unit in its header.
            figs = bare_numbers(&r.text);
        }
        if figs.is_empty() {
            problems.push(problem("the link's text holds no number".into()));
        }
        for f in figs.iter().filter(|f| !supported(f, &numbers)) {
            problems.push(problem(format!(
                "{} {} is not in the cell or line it names: {quoted}",
                f.text, f.unit
            )));
        }
    }
    problems
}

/// The numbers of `text` that stand alone (not inside a word such as
/// `d3ee62e`, `1G` or `p50`), as figures without a unit.
fn bare_numbers(text: &str) -> Vec<super::Figure> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len()
            && (chars[j].is_ascii_digit()
                || (chars[j] == '.' && j + 1 < chars.len() && chars[j + 1].is_ascii_digit()))
        {
            j += 1;
        }
        let word = j < chars.len() && chars[j].is_alphanumeric();
        if !word {
            let num: String = chars[i..j].iter().collect();
            out.push(super::Figure {
                value: num.parse().unwrap_or(f64::NAN),
                decimals: num.split_once('.').map_or(0, |(_, d)| d.len()),
                text: num,
                unit: "",
            });
        }
        i = j;
    }
    out
}

/// A summary table's cell that must be tied: figures alone (no words;
/// units and separators allowed), one of them written with decimals or
/// with four digits or more (labels such as node counts and sizes are
/// neither).
fn measured_cell(cell: &str) -> bool {
    let words = cell
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .all(|w| super::UNITS.contains(&w));
    words
        && bare_numbers(cell)
            .iter()
            .any(|f| f.decimals > 0 || f.text.len() >= 4)
}

/// Figures of `doc` that no figure link holds: in its prose, and in the
/// cells of a table that is not a copy of a file its block names (a
/// copy is checked row for row by [`super::check`]). Code is not read.
/// `doc`'s named paths are relative to the repository at `root`.
pub fn untied_figures(root: &Path, doc: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (line, block) in super::blocks(doc) {
        let mut text = prose_of(&block);
        let rows = super::table_rows(&block);
        if !rows.is_empty() && !is_copy(root, &block, &rows) {
            text.push('\n');
            text += &rows.join("\n");
            // A table of measurements names the runs it summarises; one
            // that names none (options, layouts) holds design values.
            let measured = !super::named_files(&block).is_empty();
            for row in rows[1..].iter().filter(|_| measured) {
                let untied = strip_tied_links(row);
                for cell in untied.split('|').skip(2).filter(|c| measured_cell(c)) {
                    problems.push(Problem {
                        line,
                        what: format!(
                            "table cell \"{}\" is not tied to a cell or line: write each number as [N](FILE \"COLUMN @ ROW\") (row {row})",
                            cell.trim()
                        ),
                    });
                }
            }
        }
        for f in figures(&strip_tied_links(&text)) {
            if !super::is_constant(&f) {
                problems.push(Problem {
                    line,
                    what: format!(
                        "{} {} is not tied to a cell or line: write it as [{} {}](FILE \"COLUMN @ ROW\")",
                        f.text, f.unit, f.text, f.unit
                    ),
                });
            }
        }
    }
    problems
}

/// Is the table `rows` (its header row first) a copy of one of the files
/// `block` names: its header is a line of that file, or it is a
/// [`projected_copy`] of it?
fn is_copy(root: &Path, block: &str, rows: &[&str]) -> bool {
    let texts: Vec<String> = super::named_files(block)
        .iter()
        .filter_map(|f| std::fs::read_to_string(root.join(f)).ok())
        .collect();
    texts.iter().any(|t| t.lines().any(|l| l == rows[0])) || projected_copy(&texts, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BENCH: &str = "heading\n\n| size | mode | memmap ms | memmap × Linux 6.12 |\n|---|---|---|---|\n| 1T | deferred | 21837.5 (21060.8–22614.2) | 1.06 (1.04–1.08) |\n| 1T | touch | 20817.6 | 1.01 |\n\nrun-qemu.sh: host timing: memory ready 175.324 ms after QEMU started\n";

    fn with_file(name: &str, text: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("cell-refs-{name}-{}", std::process::id()));
        let dir = root.join(RESULTS_DIR).join("run");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bench.md"), text).unwrap();
        root
    }

    fn problems(doc: &str) -> Vec<String> {
        let root = with_file("p", BENCH);
        let out = check_cell_refs(&root, doc)
            .into_iter()
            .map(|p| p.what)
            .collect();
        std::fs::remove_dir_all(root).unwrap();
        out
    }

    #[test]
    fn a_figure_passes_only_on_the_cell_it_names() {
        let link = |text: &str, title: &str| {
            format!("took [{text}](tests/bench-results/run/bench.md \"{title}\") of it\n")
        };
        assert!(problems(&link("1.06×", "memmap × Linux 6.12 @ 1T | deferred")).is_empty());
        assert!(problems(&link("1.04–1.08×", "memmap × Linux 6.12 @ deferred")).is_empty());
        assert!(problems(&link("21.8 s", "memmap ms @ deferred")).is_empty());
        // 1.01 is in the file, but in touch's row, not deferred's.
        let wrong = problems(&link("1.01×", "memmap × Linux 6.12 @ 1T | deferred"));
        assert!(wrong[0].contains("not in the cell"), "{wrong:?}");
        // Two rows hold 1T: the title must say which.
        let ambiguous = problems(&link("1.06×", "memmap × Linux 6.12 @ 1T"));
        assert!(ambiguous[0].contains("2 rows"), "{ambiguous:?}");
        // A cell by its header: `mode=touch`.
        assert!(problems(&link("1.01×", "memmap × Linux 6.12 @ mode=touch")).is_empty());
        let by_header = problems(&link("1.01×", "memmap × Linux 6.12 @ size=touch"));
        assert!(by_header[0].contains("no table"), "{by_header:?}");
        let no_column = problems(&link("1.06×", "memmap × Linux 6.1 @ deferred"));
        assert!(no_column[0].contains("no table"), "{no_column:?}");
        let line = problems(&link("175.3 ms", "line: host timing: memory ready"));
        assert!(line.is_empty(), "{line:?}");
        // An untitled link before a titled one on the same line.
        let two = format!(
            "see [log](tests/bench-results/run/x.log), then {}",
            link("1.06×", "memmap × Linux 6.12 @ 1T | deferred")
        );
        assert!(problems(&two).is_empty(), "{:?}", problems(&two));
        let bad = problems(&link("1.06×", "somewhere"));
        assert!(bad[0].contains("names its source"), "{bad:?}");
    }

    #[test]
    fn untied_figures_are_listed() {
        let doc = "took [1.06×](tests/bench-results/run/bench.md \"memmap × Linux 6.12 @ deferred\") and 0.5× of it\n";
        let root = Path::new("/nonexistent");
        let untied: Vec<String> = untied_figures(root, doc)
            .into_iter()
            .map(|p| p.what)
            .collect();
        assert_eq!(untied.len(), 1, "{untied:?}");
        assert!(untied[0].starts_with("0.5 ×"), "{untied:?}");
        // A plain link before a tied one hides nothing between them.
        let plain = "[log](tests/bench-results/run/x.log) took 2.5 s, then [1.06×](tests/bench-results/run/bench.md \"memmap × Linux 6.12 @ deferred\")\n";
        let untied: Vec<String> = untied_figures(root, plain)
            .into_iter()
            .map(|p| p.what)
            .collect();
        assert_eq!(untied.len(), 1, "{untied:?}");
        assert!(untied[0].starts_with("2.5 s"), "{untied:?}");
        // A summary table's cells are figures too; a copied table's are not.
        let summary = "From [bench.md](tests/bench-results/run/bench.md):\n\n| size | memmap ms |\n|---|---|\n| 1T | 21837.5 ms |\n";
        let root = with_file("summary", BENCH);
        assert_eq!(
            untied_figures(&root, summary).len(),
            2,
            "the cell, and its figure"
        );
        // A unitless cell is a figure too; tied, it passes the cell check.
        let unitless = "From [bench.md](tests/bench-results/run/bench.md):\n\n| size | memmap |\n|---|---|\n| 1T | 21837.5 |\n";
        assert_eq!(untied_figures(&root, unitless).len(), 1);
        let tied = "From x:\n\n| size | memmap |\n|---|---|\n| 1T | [21837.5](tests/bench-results/run/bench.md \"memmap ms @ deferred\") |\n";
        assert!(untied_figures(&root, tied).is_empty());
        assert!(check_cell_refs(&root, tied).is_empty());
        let wrong = tied.replace("[21837.5]", "[20817.6]");
        assert_eq!(check_cell_refs(&root, &wrong).len(), 1);
        let copy = "From [bench.md](tests/bench-results/run/bench.md):\n\n| size | mode | memmap ms | memmap × Linux 6.12 |\n|---|---|---|---|\n| 1T | touch | 20817.6 | 1.01 |\n";
        assert!(untied_figures(&root, copy).is_empty());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_copy_may_leave_columns_out() {
        let root = with_file("projection", BENCH);
        let cut = |r: &[&str]| r.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(
            copyable_rows(BENCH, "| mode | memmap ms |"),
            Some(vec![
                cut(&["deferred", "21837.5 (21060.8–22614.2)"]),
                cut(&["touch", "20817.6"])
            ])
        );
        assert_eq!(copyable_rows(BENCH, "| memmap ms | mode |"), None);
        assert_eq!(copyable_rows(BENCH, "| mode |"), None);
        // A table with a column of the file's left out, each row the
        // file's cut to its columns, is a copy: its cells need no ties.
        let named = "From [bench.md](tests/bench-results/run/bench.md):\n\n";
        let projected = format!(
            "{named}| size | mode | memmap × Linux 6.12 |\n|---|---|---|\n| 1T | touch | 1.01 |\n| 1T | deferred | 1.06 (1.04–1.08) |\n"
        );
        assert!(untied_figures(&root, &projected).is_empty());
        let found = super::super::check(&root, &projected);
        assert!(found.is_empty(), "{found:?}");
        // A row that is not the file's makes it a summary, whose
        // measured cells are tied.
        let wrong = projected.replace("| touch | 1.01 |", "| touch | 1.06 (1.04–1.08) |");
        let untied = untied_figures(&root, &wrong);
        assert_eq!(untied.len(), 2, "{untied:?}");
        // Columns in another order than the file's: a summary, whose
        // measured cells are tied.
        let reordered = format!(
            "{named}| mode | size | memmap ms |\n|---|---|---|\n| touch | 1T | 20817.6 |\n"
        );
        assert_eq!(untied_figures(&root, &reordered).len(), 1);
        std::fs::remove_dir_all(root).unwrap();
    }
}
