//! The README documents the whole user interface: every kernel option the
//! kernel accepts, with every value of `memmap=` and `test_fault=`, and every
//! flag run-qemu.sh's usage lines name, each in its table.
//!
//! The kernel's side comes from the kernel's own parser tables
//! (`options::KNOWN_KEYS`, `MemmapMode::ALL`, `TestFault::ALL`); run-qemu.sh's
//! from what `./run-qemu.sh --help` prints, the usage users read.

use std::collections::BTreeSet;
use std::process::Command;

use memboot_contract::options::{MemmapMode, TestFault, KNOWN_KEYS};
use memboot_tests::repo_root;

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).unwrap()
}

/// The rows of the first table after the heading line `heading`, each as
/// its cells (the header row and the `|---|` rule left out).
fn table_after(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let at = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no '{heading}' heading"));
    readme[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            // `\|` inside a cell is an escaped bar, not a cell border.
            let row = row.replace("\\|", "\u{0}");
            row.trim_matches('|')
                .split('|')
                .map(|c| c.replace('\u{0}', "|").trim().to_string())
                .collect()
        })
        .collect()
}

/// The code spans of a cell (`` `a` or `b c` `` gives `a`, `b c`).
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_kernel_option_and_value_is_in_the_readme_table() {
    let rows = table_after(&readme(), "## Kernel options");
    let row = |key: &str| -> &Vec<String> {
        rows.iter()
            .find(|r| code_spans(&r[0]) == [key])
            .unwrap_or_else(|| panic!("README.md's Kernel options table has no row for `{key}`"))
    };
    let keys: Vec<&str> = KNOWN_KEYS.split(", ").collect();
    assert!(keys.len() > 1, "{KNOWN_KEYS}");
    for key in &keys {
        row(key);
    }
    let documented: BTreeSet<String> = rows.iter().flat_map(|r| code_spans(&r[0])).collect();
    let known: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
    assert_eq!(
        documented, known,
        "the Kernel options table documents exactly the keys the kernel accepts"
    );
    let values = |key: &str| -> BTreeSet<String> { code_spans(&row(key)[1]).into_iter().collect() };
    for mode in MemmapMode::ALL {
        assert!(
            values("memmap").contains(mode.name()),
            "memmap={} is missing from README.md's values column",
            mode.name()
        );
    }
    for fault in TestFault::ALL {
        assert!(
            values("test_fault").contains(fault.name()),
            "test_fault={} is missing from README.md's values column",
            fault.name()
        );
    }
}

/// The flags `./run-qemu.sh --help` names (`-m` and every `--word`).
fn usage_flags() -> BTreeSet<String> {
    let out = Command::new(repo_root().join("run-qemu.sh"))
        .arg("--help")
        .output()
        .expect("run-qemu.sh runs");
    let usage = String::from_utf8(out.stderr).unwrap();
    assert!(usage.contains("-m SIZE"), "usage:\n{usage}");
    usage
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2 || *w == "-m")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_run_qemu_flag_is_in_the_readme_table() {
    let documented: BTreeSet<String> = table_after(&readme(), "## run-qemu.sh")
        .iter()
        .flat_map(|r| code_spans(&r[0]))
        .flat_map(|span| {
            span.split_whitespace()
                .filter(|w| w.starts_with('-'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let flags = usage_flags();
    assert!(flags.contains("--linux") && flags.len() > 5, "{flags:?}");
    let missing: Vec<&String> = flags.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "README.md's run-qemu.sh table has no row for {missing:?}"
    );
}

#[test]
fn a_table_is_read_row_by_row_with_escaped_bars() {
    let text =
        "x\n## H\n\nintro\n\n| a | b |\n|---|---|\n| `k` | `x\\|y` |\n| `m`, `n` | z |\n\nafter\n";
    let rows = table_after(text, "## H");
    assert_eq!(rows.len(), 2);
    assert_eq!(code_spans(&rows[0][1]), ["x|y"]);
    assert_eq!(code_spans(&rows[1][0]), ["m", "n"]);
}
