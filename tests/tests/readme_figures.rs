//! The README's (and `docs/`'s) measured figures against the committed
//! runs they name (`memboot_tests::readme_figures`), and each committed
//! bench table against the logs it was made from.

use std::path::{Path, PathBuf};

use memboot_tests::readme_figures::{check, RESULTS_DIR};
use memboot_tests::repo_root;
use memboot_tools::seeds::Run;

/// The documents whose figures are checked: the README and every markdown
/// file under `docs/` (results written up there), recursively.
fn documents(root: &Path) -> Vec<PathBuf> {
    fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e} (the docs are checked too)", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                markdown_under(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut docs = vec![root.join("README.md")];
    markdown_under(&root.join("docs"), &mut docs);
    docs.sort();
    docs
}

#[test]
fn every_figure_the_readme_quotes_is_in_the_run_it_names() {
    let root = repo_root();
    let mut listing = Vec::new();
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        listing.extend(
            check(&root, &text)
                .iter()
                .map(|p| format!("{name}:{}: {}", p.line, p.what)),
        );
    }
    assert!(listing.is_empty(), "{}", listing.join("\n"));
}

/// A bench run committed with `--svg DIR` keeps its logs in `DIR/logs`
/// with what `memboot-bench report` was given (`logs/report`); the whole
/// `bench.md` rebuilt from those logs (every table, cell by cell) must be
/// the committed `DIR/bench.md`. A directory with a `bench.md` but no
/// `logs/report` fails; one without `bench.md` holds no bench table.
#[test]
fn every_committed_bench_table_is_rebuilt_from_its_logs() {
    let results = repo_root().join(RESULTS_DIR);
    let mut checked = 0;
    for run in std::fs::read_dir(&results).unwrap() {
        let run = run.unwrap().path();
        if !run.join("bench.md").exists() {
            continue;
        }
        let rebuilt = Run::read(&run)
            .and_then(|r| r.bench_md())
            .unwrap_or_else(|e| panic!("{}: bench.md, but its logs: {e}", run.display()));
        let committed = std::fs::read_to_string(run.join("bench.md")).unwrap();
        assert!(
            committed == rebuilt,
            "{}/bench.md is not the table its logs make:\n{rebuilt}",
            run.display()
        );
        checked += 1;
    }
    assert!(
        checked > 0,
        "no committed bench run with logs under {RESULTS_DIR}"
    );
}

/// The README and `docs/` tie every figure they quote to the one cell or
/// line of a committed file it comes from (`readme_figures::cell_refs`).
#[test]
fn every_figure_names_its_cell_or_line() {
    let root = repo_root();
    let mut untied = Vec::new();
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        untied.extend(
            memboot_tests::readme_figures::untied_figures(&root, &text)
                .into_iter()
                .map(|p| format!("{name}:{}: {}", p.line, p.what)),
        );
    }
    assert!(untied.is_empty(), "{}", untied.join("\n"));
}
