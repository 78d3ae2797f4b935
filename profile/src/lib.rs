//! memboot-profile: guest instructions per phase and per function, counted
//! by a QEMU TCG plugin, the same on any host.
//!
//! - [`plugin`]: the plugin QEMU loads; counts by guest address into a raw
//!   file ([`raw`]).
//! - [`phases`]: which functions open each phase, per kernel.
//! - [`symbols`] and [`report`]: the raw counts named by function, the
//!   phases' figures per struct page ([`boot_log`]: memboot's pages from
//!   its summary; [`linux_pages`]: Linux's, counted in its run), as JSON
//!   and as log lines.
//! - [`compare`]: a profile against a committed baseline (run-qemu.sh
//!   `--baseline`), the CI's instruction-count gate.
//! - [`nodes`]: deferred init by NUMA node, and its critical path.
//! - [`insn`] and [`tracker`]: how a phase is followed through calls,
//!   returns, interrupts and (for Linux) thread migration.

pub mod boot_log;
pub mod compare;
pub mod insn;
pub mod linux_pages;
pub mod nodes;
pub mod phases;
pub mod plugin;
pub mod raw;
pub mod report;
pub mod symbols;
pub mod tracker;
