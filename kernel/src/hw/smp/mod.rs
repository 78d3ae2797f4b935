//! SMP: start every application processor (AP) the MADT lists and run jobs
//! on them.
//!
//! Bring-up runs in the background, in three steps the boot drives:
//!
//! 1. [`prepare_aps`], before memory init, plans the CPUs and publishes
//!    them (the BSP and every AP to be started; the pipeline's `cpu_nodes`
//!    come from them), from the MADT and CPUID alone.
//! 2. [`launch`], called by the memory-init pipeline where its mode first
//!    needs other CPUs soon (`ModePlan::cpus`: before the eager phase for
//!    the worker modes, once memory is ready for `ondemand`), sets up the
//!    local APIC and installs the trampoline through the pipeline's page
//!    tables (lent to it: one editor at a time), sends only the first AP
//!    (the starter) its IPIs and returns without waiting for it. Until an
//!    AP is up nobody writes the log out (see `serial`): the lines wait in
//!    the ring, so neither bring-up nor the console costs the boot CPU
//!    anything before `launch`. The starter, in `ap_entry`, checks itself
//!    in and starts the other APs one after another, waiting for each.
//! 3. [`wait_online`], called before the first jobs (the pipeline's
//!    `CpuBringup::wait_online`), fails if [`launch`] has not run (starting
//!    the CPUs there could edit page tables memory init holds), waits for
//!    the starter to finish (or, if the starter never arrived, takes its
//!    round back and starts the others itself), prints the bring-up lines
//!    and runs the self-test. [`end_bringup`], once memory init returned
//!    its page tables, does the same if no stage ran jobs and removes the
//!    trampoline's identity mapping through them.
//!
//! An AP that did not come up stays in the list; its jobs run on the BSP.
//! `test_fault=late_ap` holds the starter's IPIs back until the BSP has
//! given up on it and prepared the next AP's round, then sends them: the
//! late AP must leave that round alone and halt (`protocol`).
//!
//! The modules, one job each:
//!
//! * `percpu`: one CPU's record (identity, handshake, job mailbox);
//! * `state`: the bring-up's state, one owner (`Smp`), and the queries on
//!   it ([`online_cpus`], [`aps_online`], ...);
//! * `trampoline`: the real-mode entry, its page and the per-round claim;
//! * `protocol`: INIT-SIPI-SIPI, the timeouts, starting one AP after
//!   another;
//! * `bringup`: the three steps above and `ap_entry`;
//! * `scope`: jobs on the online CPUs ([`scope`]) and the self-test.

mod bringup;
mod percpu;
mod protocol;
mod scope;
mod state;
mod trampoline;

pub use bringup::{end_bringup, launch, prepare_aps, wait_online};
pub use percpu::CpuInfo;
pub use scope::scope;
pub use state::{aps_online, bringup_ended_ns, cpu_count, online_cpus};
