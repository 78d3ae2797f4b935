//! 1 GiB huge pages (`hugepagesz=1G hugepages=N`): reserved from memblock
//! as soon as it is built ([`reserve`]), before the zones and the vmemmap,
//! as Linux 7.3 reserves them; their struct pages written as compound
//! pages once memory is ready ([`run`]), as Linux's `hugetlb_init` →
//! `gather_bootmem_prealloc` writes them after `memblock_free_all`. The
//! logic is `memmap::hugetlb`; memboot's record of the pages is the
//! [`Reservation`] this step returns, nothing inside a huge page.
//!
//! The pages are `MEMBLOCK_RSRV_NOINIT`: no init strategy, deferred
//! worker, pool or free list ever sees them, so the allocation test cannot
//! take them and `memmap=ondemand` never hands them to its pool.

use memboot_contract::hugepage_forms::{self, HugePageSize, Pages};
use memmap::hugetlb::{self, Request, Reservation, UnbackedHugePage, GIGANTIC_NR_PAGES};
use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};

use super::context::Ctx;
use super::error::{MemblockStageError, PipelineError};
use super::facts::Phase;
use super::input::Input;
use super::mode::EagerWork;

/// What the command line asks of the 1 GiB size, read as Linux reads it
/// (`memboot_contract::hugepage_forms`; its ignored parameters are the
/// kernel's held-back report's lines): `None` when it names no 1 GiB pages.
fn request(input: &Input<'_>) -> Option<Request> {
    if input.opts.hugetlb.is_empty() {
        return None;
    }
    let nodes = input
        .affinity
        .and_then(|a| a.iter().map(|n| n.nid + 1).max())
        .unwrap_or(1);
    let machine = hugepage_forms::Machine {
        has_1g_pages: input.has_1g_pages,
        nodes,
    };
    let plan = hugepage_forms::plan(&input.opts.hugetlb, machine);
    let size = plan
        .sizes
        .into_iter()
        .find(|s| s.size == HugePageSize::Gib1)?;
    Some(match size.pages {
        Pages::Total(n) => Request::Total(n),
        Pages::PerNode(nodes) => Request::PerNode(nodes),
    })
}

/// Reserve the 1 GiB pages the command line asks for (Linux's
/// `hugetlb_hstate_alloc_pages`), printing Linux's warning for what does
/// not fit. `None` when it asks for none.
pub fn reserve(
    cx: &Ctx<'_>,
    input: &Input<'_>,
    mb: &mut Memblock,
) -> Result<Option<Reservation>, PipelineError> {
    let Some(request) = request(input) else {
        return Ok(None);
    };
    let reservation = hugetlb::reserve_gigantic(mb, &request).map_err(|err| {
        PipelineError::Memblock(MemblockStageError {
            what: "1 GiB huge pages",
            err,
        })
    })?;
    for shortfall in &reservation.shortfalls {
        cx.log.line(format_args!("{shortfall}"));
    }
    Ok(Some(reservation))
}

/// Write every reserved page's struct pages as a compound page of order
/// 18 on the boot CPU, timed as the `hugetlb` phase, then Linux's
/// `HugeTLB: registered …` line and the summary's keys. `touch` has no
/// Linux state: its store floor already wrote them.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    memmap: &Memmap<B>,
    huge: Option<&Reservation>,
    nr_nodes: usize,
) -> Result<(), PipelineError> {
    let Some(huge) = huge else {
        return Ok(());
    };
    let mut written = 0;
    let mut ns = 0;
    if cx.mode.eager != EagerWork::Touch {
        let (done, took) = cx.timed(Phase::Hugetlb, || prep_all(memmap, huge));
        written = done.map_err(PipelineError::Hugetlb)?;
        ns = took;
    }
    cx.log.line(format_args!("{}", huge.registered_line()));
    cx.log.line(format_args!(
        "hugetlb: {} pages of 1.00 GiB, {written} struct pages written as compound pages in {} us",
        huge.pages.len(),
        ns / 1000
    ));
    debug_assert!(written == 0 || written == huge.pages.len() as u64 * GIGANTIC_NR_PAGES);
    cx.facts.record(|f| {
        f.hugepages_1g_per_node = huge.per_node(nr_nodes).into();
        f.hugetlb_ns = ns;
        f.hugetlb_struct_pages = written;
    });
    Ok(())
}

/// Every page's compound struct pages: the profile's `hugetlb` phase
/// (`profile/src/phases.rs`), hence never inlined. Returns the struct
/// pages written.
#[inline(never)]
pub fn prep_all<B: MemmapBacking>(
    memmap: &Memmap<B>,
    huge: &Reservation,
) -> Result<u64, UnbackedHugePage> {
    huge.pages.iter().try_fold(0u64, |n, page| {
        // SAFETY: a huge page's struct pages belong to no chunk, pool or
        // free block (they are MEMBLOCK_RSRV_NOINIT), and no other CPU
        // reads or writes them while the boot CPU runs this.
        unsafe { hugetlb::prep_gigantic(memmap, page) }.map(|w| n + w)
    })
}
