//! The bench's report: the serial logs of one `tests/bench.sh` run read
//! back into rows (one per boot), a markdown table with every round, the
//! means and the ratios to Linux and to `memmap=touch`, and the rows as
//! JSON for the scaling chart (`memboot-plot scaling`) and for CI history.
//!
//! The figures, per boot (one definition each, for memboot and Linux):
//! - `boot_cpu_memmap_ns`: struct-page work on the boot CPU before SMP work
//!   starts (memboot's eager memmap phase; Linux's `free_area_init()` block).
//! - `memmap_ns`: struct-page work before memory is ready: memboot's
//!   boot-CPU phase, its hand-off to the buddy and deferred init; Linux's
//!   early block and its slowest node's deferred init. With huge pages,
//!   also their preparation, though it ends after memory is ready on
//!   both: memboot's `hugetlb` phase, Linux's `mem_init()` gap (6.1
//!   writes the 1 GiB pages' tails there), `page_alloc_init_late()`'s gap
//!   (6.12 and 7.3 write them there) and `hugetlb_init`
//!   (`LinuxBoot::hugetlb_ns`); the table's huge pages column says so.
//!   The drain that `ondemand_drain=on` runs after memory is ready is
//!   `drain_ns`, not here.
//! - `allocatable_ns`: kernel entry until memory is ready: memory init
//!   stops blocking the boot and every present, non-reserved page can be
//!   had from the allocator, initialised or claimable by growth (memboot's
//!   summary key, `MmFacts::allocatable_ns`; Linux: `page_alloc_init_late()`
//!   returning, read from its log, `linux_log`).
//! - `pages_initialised_at_allocatable` / `pages_initialised`: struct pages
//!   written by then / by the end of the boot (Linux: all, before ready).
//! - `drain_ns`: `ondemand_drain=on`'s drain, first claim to pool empty.
//! - `grow_step_p50_ns` / `grow_step_p99_ns`: one growth step (a block
//!   window of struct pages) during memboot's allocation test.
//! - `host_rss_mib`: QEMU's peak resident memory (run-qemu.sh's line).
//! - `huge_pages`: the huge pages reserved at boot, per size, as the
//!   kernel's `HugeTLB: registered …` lines say (`crate::hugetlb_log`); the
//!   table has a huge pages column only when some boot reserved any, so
//!   runs without them replay unchanged. Their struct pages are not in
//!   `pages_initialised` where the kernel writes them after memory is
//!   ready (memboot's `hugetlb` phase); Linux 6.9+ writes them in
//!   `gather_bootmem_prealloc()` (`crate::hugetlb_log`).
//!
//! Logs are named `SIZE-ENTRY-ROUND.log` (ENTRY: a memmap mode, or a Linux
//! entry, [`is_linux`]); an entry that was not booted at a size (its struct
//! pages do not fit the host) has `SIZE-ENTRY.skip` holding the reason
//! instead.
//!
//! Linux entries name the kernel by series: `linux-6.1`, `linux-6.12`, each
//! a peer kernel through its PVH entry, and variants such as
//! `linux-6.12-bzimage` or `linux-6.1+nokaslr` (tests/bench.sh's
//! `boot_args`). Runs committed before there were two peers name Debian
//! 12's 6.1 without a series: `linux`, `linux-pvh`, `linux-bzimage`, …; they
//! replay unchanged. The ratio columns divide by each peer entry in the run
//! (`linux-SERIES`, the same with huge-page words only, or the old
//! `linux`; [`is_peer`]), in entry order, one
//! pair of columns each: "memmap × Linux 6.12 memmap" and "QEMU start →
//! ready × Linux 6.12" (the old `linux`'s are "× Linux"). The ready ratio
//! sets the two kernels' host-timed QEMU start → memory ready over each
//! other (`tap`: memboot's entry + its `allocatable_ns`, Linux's last
//! deferred-init line): each kernel's own clock starts at its entry, and
//! Linux's `allocatable_ns` takes in its synchronous SMP bring-up and
//! initcalls. A run with no peer entry keeps one empty pair.
//!
//! By role: what a run compares and what an entry names ([`Plan`],
//! `entries`), one boot's row from its log ([`row_from_log`],
//! `boot_row`), a run's directory read back ([`read_dir`], `run_dir`),
//! the table with every round ([`table`], `means_table`), the
//! comparison in a host-memory state ([`comparison`],
//! `comparison_table`), Linux's deferred init by its two clocks
//! ([`linux_deferred`], `deferred_clocks`) and the rows as JSON
//! ([`to_json`], `results_json`).

mod boot_row;
mod comparison_table;
mod deferred_clocks;
mod entries;
mod means_table;
mod results_json;
mod run_dir;

pub use boot_row::{row_from_log, Row};
pub use comparison_table::comparison;
pub use deferred_clocks::linux_deferred;
pub use entries::{
    huge_words, is_linux, is_peer, kernel_of, linux_series, peer_label, size_mib, touch_entry, Plan,
};
pub use means_table::{columns, table, FIGURE_COLUMNS, HUGE_COLUMN};
pub use results_json::to_json;
pub use run_dir::{counted_boot_cpu_pages, counted_log_name, read_dir, Results, Warmup};
