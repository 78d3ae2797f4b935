//! The hardware seams the pipeline runs on, each a small trait:
//!
//! * [`VmemmapMapper`]: maps the vmemmap area (x86-64 page tables on the
//!   kernel; a lazily backed `mmap` on the host);
//! * [`Executor`]: runs one job on every CPU at once (APs on the kernel,
//!   `std` threads on the host), from `deferred-init`;
//! * [`Clock`]: nanoseconds since kernel entry (TSC; `Instant`), from
//!   `deferred-init`;
//! * [`Log`]: one dmesg line per call (the serial console; a `Vec`);
//! * [`CpuBringup`]: starts the other CPUs (local APIC, trampoline,
//!   INIT/STARTUP IPIs; nothing on the host, whose threads always run);
//! * [`BOOT_CPU`]: which of the executor's CPUs the pipeline itself runs on.
//!
//! Struct-page storage is [`memmap::store::VmemmapBacking`] over what the
//! mapper mapped, so the pipeline is the same code on both sides.

use alloc::string::String;
use core::fmt;

use memmap::sections::Vmemmap;

use crate::smp_error::SmpError;

pub use deferred_init::{Clock, CpuId, Executor};

/// The boot CPU's index for [`Executor::on_each_cpu`]: the CPU the pipeline
/// runs on, which also takes part in every parallel phase.
pub const BOOT_CPU: CpuId = 0;
/// A console that prints one line per call (the kernel adds the
/// `[seconds.micros]` stamp).
pub trait Log: Sync {
    fn line(&self, args: fmt::Arguments<'_>);
    /// Memory is ready (or, for a mode without an allocator, its struct
    /// pages are written): the console may write the log out from here.
    /// Until then lines are only kept (on the kernel, an idle AP writing
    /// the UART would take host time from the CPUs doing memory init).
    fn memory_ready(&self) {}
}

/// Starts the CPUs other than the boot CPU, in two calls the pipeline
/// makes where its mode says ([`super::mode::ModePlan::cpus`]):
/// [`start`](Self::start), which returns at once, and
/// [`wait_online`](Self::wait_online) before the executor's first job.
/// Between them the boot CPU goes on with its own work, which hides the
/// bring-up. On the kernel an idle AP also writes the log out, so before
/// `start` nothing but the boot CPU's own work runs: a mode whose memory
/// is ready on the boot CPU alone pays for neither bring-up nor the
/// console before it is. Bring-up edits page tables of its own (the local
/// APIC's registers, the trampoline's identity mapping), so `start`
/// borrows the pipeline's mapper `M` for that: one editor of the page
/// tables at a time. Either call's failure ends the pipeline with
/// [`PipelineError::Smp`](super::error::PipelineError::Smp).
pub trait CpuBringup<M>: Sync {
    /// Start the CPUs that are not running yet, without waiting for them.
    fn start(&self, mapper: &mut M) -> Result<(), SmpError>;
    /// Wait until every CPU `start` started runs jobs or was left out
    /// (an AP that never answers is reported, not an error).
    fn wait_online(&self) -> Result<(), SmpError>;
}

/// Print a multi-line `Display` value line by line.
pub fn log_lines(log: &dyn Log, text: &dyn fmt::Display) {
    let mut s = String::new();
    let _ = fmt::write(&mut s, format_args!("{text}"));
    for line in s.lines() {
        log.line(format_args!("{line}"));
    }
}

/// Why the vmemmap area could not be set up or a section not mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No free range of top-level page-table slots for a area this large.
    NoArea { bytes: u64 },
    /// The page tables need a frame the plan did not provide.
    TablesExhausted { virt: u64 },
    /// Something is mapped there already.
    AlreadyMapped { virt: u64 },
    /// The host could not reserve the area's address space.
    Reserve { bytes: u64 },
    /// A section asked for on first use has no struct pages reserved (it
    /// is not a present section).
    NotReserved { section_nr: u64 },
    /// HVO asked to split a 2 MiB mapping, or remap a 4 KiB page of one,
    /// that is not there as such.
    NotSplittable { virt: u64 },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MapError::NoArea { bytes } => write!(
                f,
                "no free top-level page-table slots for a {} GiB vmemmap area (the bootloader's mappings use them); boot with less RAM or a bootloader that leaves the higher half free",
                bytes >> 30
            ),
            MapError::TablesExhausted { virt } => write!(
                f,
                "mapping {virt:#x} needed a page-table frame the vmemmap plan did not provide: the area overlaps existing page tables; this is a memboot bug, report it with the log"
            ),
            MapError::AlreadyMapped { virt } => write!(
                f,
                "vmemmap address {virt:#x} is already mapped; the chosen area is not free, a memboot bug"
            ),
            MapError::Reserve { bytes } => write!(
                f,
                "could not reserve {} GiB of address space for the vmemmap area (mmap with MAP_NORESERVE failed); raise the address-space limit (ulimit -v)",
                bytes >> 30
            ),
            MapError::NotReserved { section_nr } => write!(
                f,
                "section {section_nr}'s struct pages were asked for but none were reserved (not a present section); a memboot bug, report it with the log"
            ),
            MapError::NotSplittable { virt } => write!(
                f,
                "HVO asked to split or remap vmemmap address {virt:#x}, which no 2 MiB mapping (or split one) maps; a memboot bug, report it with the log"
            ),
        }
    }
}

/// Maps the vmemmap area with 2 MiB pages, one per present section.
///
/// The pipeline plans everything a mapping needs (the backing memory and
/// the page-table frames, both from memblock, node-local) so that the same
/// memory is reserved on the host as on hardware; the mapper only writes
/// the translation.
///
/// # Safety
/// An implementor promises that after [`map_2mib`](Self::map_2mib)`(virt, ..)`
/// returns `Ok`, the 2 MiB at `virt` are valid for reads and writes, used
/// for nothing else, for as long as the mapper lives, and that distinct
/// `virt`s never alias; and that after [`map_table`](Self::map_table)
/// each 4 KiB of the 2 MiB at `virt` maps what the table's entry says
/// (HVO: many read-only aliases of one page), for as long as it lives;
/// that [`split_2mib`](Self::split_2mib) leaves every 4 KiB of the 2 MiB
/// mapping the same memory, read-write; and that after
/// [`remap_4k`](Self::remap_4k) the 4 KiB reads as the page it names, on
/// every CPU before that CPU next runs an [`Executor`] job (the old
/// translation is out of every TLB by then).
pub unsafe trait VmemmapMapper: Send {
    /// Pick a area of at least `bytes` (2 MiB aligned) whose page-table
    /// structure is entirely unused, so every table the mapping needs is new.
    fn choose_area(&mut self, bytes: u64) -> Result<Vmemmap, MapError>;

    /// Map the 2 MiB page at `virt` (inside the area) to physical `phys`.
    /// `new_tables` are fresh frames, in the order the walk needs them
    /// (page-directory-pointer table first, then page directory), exactly
    /// as [`crate::pipeline::vmemmap::tables_needed`] planned.
    fn map_2mib(&mut self, virt: u64, phys: u64, new_tables: &[u64]) -> Result<(), MapError>;

    /// Write the 512 entries of the page-table frame `table` (reserved for
    /// it alone): entry `i` maps the 4 KiB page at physical `entry(i).0`,
    /// writable when `entry(i).1`.
    fn fill_table(&mut self, table: u64, entry: &dyn Fn(usize) -> (u64, bool));

    /// Map the 2 MiB at `virt` (inside the area) through the page table
    /// `table`, filled by [`fill_table`](Self::fill_table); several 2 MiB
    /// may share one. `new_tables` as for [`map_2mib`](Self::map_2mib).
    fn map_table(&mut self, virt: u64, table: u64, new_tables: &[u64]) -> Result<(), MapError>;

    /// Split the 2 MiB page mapped at `virt` by [`map_2mib`](Self::map_2mib)
    /// into 4 KiB entries in the page-table frame `table`, each mapping the
    /// same memory read-write (Linux's `vmemmap_split_pmd`). Returns the
    /// physical address the 2 MiB page maps.
    ///
    /// # Safety
    /// `table` must be a frame of RAM that nothing else uses: from now on
    /// it is a live page table, the mapper's for as long as it lives.
    unsafe fn split_2mib(&mut self, virt: u64, table: u64) -> Result<u64, MapError>;

    /// Point the 4 KiB at `virt`, inside a 2 MiB page split by
    /// [`split_2mib`](Self::split_2mib), at physical `phys`, a page of the
    /// area this mapper maps (HVO: the kept vmemmap page), writable or
    /// read-only; the old translation leaves every CPU's TLB before that
    /// CPU next runs a job (Linux's `vmemmap_remap_pte` and
    /// `flush_tlb_kernel_range`).
    ///
    /// # Safety
    /// No reference into the 4 KiB at `virt` may be alive, nor any CPU
    /// running a job: from now on it reads as `phys`, and the frame it
    /// mapped is the caller's (HVO frees it).
    unsafe fn remap_4k(&mut self, virt: u64, phys: u64, writable: bool) -> Result<(), MapError>;
}
