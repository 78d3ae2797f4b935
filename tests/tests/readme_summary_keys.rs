//! The README's table of summary keys against the keys the kernel writes:
//! every key of a `memboot-summary:` line is documented, and the table
//! documents no key the line lacks.
//!
//! The kernel's keys come from a summary line written by the kernel's own
//! writer (`report::write_summary_line`), which writes every key whatever
//! the facts; the committed fixture logs would lag behind a key added
//! since they were captured.

use std::collections::BTreeSet;

use memboot_kernel::pipeline::facts::MmFacts;
use memboot_kernel::report::{write_summary_line, BootFacts};
use memboot_tests::repo_root;
use memboot_tools::serial_log::summary_json_of;

/// The top-level keys of a summary line the kernel writes.
fn kernel_keys() -> BTreeSet<String> {
    let mut line = String::new();
    write_summary_line(&mut line, "ok", 1, &BootFacts::default(), &MmFacts::EMPTY)
        .expect("a summary line into a String is never cut");
    let json = summary_json_of(&line).expect("the line has the summary prefix");
    let summary: serde_json::Value = serde_json::from_str(json).expect("the line is JSON");
    summary
        .as_object()
        .expect("the summary is an object")
        .keys()
        .cloned()
        .collect()
}

/// The keys the README's summary table documents: the first `| key |
/// meaning |` table after the code block showing a `memboot-summary:`
/// line; a row may document several keys (`` `a` / `b` ``), each in
/// backticks in its first cell.
fn readme_keys(readme: &str) -> BTreeSet<String> {
    let example = readme
        .find("\nmemboot-summary: {")
        .expect("the README shows a summary line");
    let table = &readme[example..];
    let table = &table[table
        .find("\n| key | meaning |")
        .expect("a `| key | meaning |` table follows the summary line")
        + 1..];
    let mut keys = BTreeSet::new();
    for row in table.lines().take_while(|l| l.starts_with('|')).skip(2) {
        let first_cell = row.split('|').nth(1).unwrap_or("");
        keys.extend(first_cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    keys
}

#[test]
fn the_readme_documents_exactly_the_summary_keys_the_kernel_writes() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let (kernel, documented) = (kernel_keys(), readme_keys(&readme));
    let undocumented: Vec<&String> = kernel.difference(&documented).collect();
    let stale: Vec<&String> = documented.difference(&kernel).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "README.md's summary-key table (Output): add a row for {undocumented:?}; \
         drop or fix the rows for {stale:?}, which the kernel does not write"
    );
    assert!(kernel.len() > 1, "{kernel:?}");
}

#[test]
fn a_row_may_document_several_keys() {
    let readme = "x\n```\nmemboot-summary: {}\n```\n\n| key | meaning |\n|---|---|\n\
                  | `a` / `b` | two |\n| `c` | one, not `d` |\n\nafter\n| `e` | other |\n";
    assert_eq!(
        readme_keys(readme),
        ["a", "b", "c"].map(String::from).into()
    );
}
