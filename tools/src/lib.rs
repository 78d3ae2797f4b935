//! memboot's host tools, one module per tool and the parsers they share.
//!
//! - [`run`]: `memboot-run`, run-qemu.sh's host side: flags, the
//!   host-memory refusal, QEMU's command line, the boot and its exit code.
//! - [`tap`]: `memboot-tap`, the serial tap a boot runs under: it prints
//!   the log and decides the boot's outcome from it.
//! - [`serial_log`]: where memboot's serial output is parsed (the summary
//!   line, stamped lines, the `memboot-input:` line); [`linux_log`] the
//!   same for a Linux peer's dmesg; [`hugetlb_log`] the huge pages either
//!   kernel reports.
//! - [`bench`](mod@bench), [`bench_md`], [`counted`], [`profile_table`]:
//!   `memboot-bench`, tests/bench.sh's tables from its logs.
//! - [`plot`] and [`trace`]: `memboot-plot`, SVG charts of a boot's phases
//!   and of the bench's scaling, and Chrome trace files.
//! - [`seeds`]: `memboot-seeds`, the seeds table (tests/seeds.sh).
//!
//! The instruction profile's report is `memboot-profile` (`profile/`): it
//! shares its crate with the QEMU plugin it reads, which is GPL, and
//! nothing here links it.

pub mod bench;
pub mod bench_md;
pub mod counted;
pub mod hugetlb_log;
pub mod linux_log;
pub mod plot;
pub mod profile_table;
pub mod run;
pub mod seeds;
pub mod serial_log;
pub mod tap;
pub mod trace;
