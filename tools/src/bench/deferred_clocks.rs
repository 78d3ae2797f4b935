//! Linux's deferred init by its two clocks: its own line's jiffies and
//! the printk stamps around it.

use std::fmt::Write as _;

use super::entries::{is_linux, Plan};
use super::means_table::series;
use super::run_dir::Results;

/// Linux's deferred init by its two clocks, a row per boot: its slowest
/// node's line (jiffies: Debian's HZ=250 makes every figure a multiple of
/// 4 ms) and, at printk resolution, SMP's last line to the last node line
/// (an upper bound: the threads' start and wake-up are in it). `None`
/// for a run without Linux boots.
pub fn linux_deferred(results: &Results, plan: &Plan) -> Option<String> {
    let mut out = String::from(
        "\nLinux's deferred init by its own clocks: the slowest node's `deferred pages initialised in` \
         figure (jiffies) and, at printk resolution, `smpboot: Total of N processors activated` to the \
         last node's line (an upper bound)\n\n| size | entry | round | jiffies ms | printk ms |\n|---|---|---|---|---|\n",
    );
    let mut any = false;
    for size in plan.sizes {
        for entry in plan.entries.iter().filter(|e| is_linux(e)) {
            for r in series(&results.rows, size, entry) {
                any = true;
                let _ = writeln!(
                    out,
                    "| {size} | {entry} | {} | {} | {} |",
                    r.round,
                    r.deferred_jiffies_ms
                        .map_or("–".into(), |ms| ms.to_string()),
                    r.deferred_printk_ns
                        .map_or("–".into(), |ns| format!("{:.1}", ns as f64 / 1e6)),
                );
            }
        }
    }
    any.then_some(out)
}
