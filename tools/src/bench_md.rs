//! A bench run's whole `bench.md`, as `memboot-bench report` prints it and
//! the committed-table test rebuilds it: the per-boot table
//! ([`bench::table`]), the comparisons ([`bench::comparison`]), Linux's
//! deferred init by its two clocks ([`bench::linux_deferred`]), and, when
//! the run has profiles, their tables ([`profile_table::tables`]) and
//! those of its counted boots ([`counted::tables`]).

use std::path::Path;

use crate::bench::{self, Plan, Results};
use crate::{counted, profile_table};

/// The text of `bench.md` for the run whose logs are in `dir`.
pub fn render(dir: &Path, results: &Results, plan: &Plan, heading: &str) -> Result<String, String> {
    let mut out = bench::table(results, plan, heading);
    if let Some(comparison) = bench::comparison(results, plan) {
        out += &comparison;
    }
    if let Some(linux) = bench::linux_deferred(results, plan) {
        out += &linux;
    }
    if let Some(tables) = profile_table::tables(dir, plan)? {
        out += &tables;
    }
    if let Some(tables) = counted::tables(dir, plan)? {
        out += &tables;
    }
    Ok(out)
}
