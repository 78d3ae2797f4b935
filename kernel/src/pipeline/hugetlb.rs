//! Huge pages. 1 GiB pages (`hugepagesz=1G hugepages=N`): reserved from
//! memblock as soon as it is built ([`reserve`]), before the zones and the
//! vmemmap, as Linux 7.3 reserves them; their struct pages written as
//! compound pages once memory is ready ([`run`]), as Linux's `hugetlb_init`
//! → `gather_bootmem_prealloc` writes them after `memblock_free_all`. The
//! logic is `memmap::hugetlb`; memboot's record of the pages is the
//! [`Reservation`] this step returns, nothing inside a huge page.
//!
//! 2 MiB pages (`hugepagesz=2M hugepages=N`) come from the page allocator
//! once memory is ready, in the same phase, as `hugetlb_init` takes them
//! (`deferred_init::hugetlb_pool`); their record is the [`HugePool`]
//! verification checks them against.
//!
//! The pages are `MEMBLOCK_RSRV_NOINIT`: no init strategy, deferred
//! worker, pool or free list ever sees them, so the allocation test cannot
//! take them and `memmap=ondemand` never hands them to its pool.

use alloc::vec::Vec;
use deferred_init::hugetlb_pool::{self, HugePool};
use deferred_init::PageAllocator;

use memboot_contract::hugepage_forms::report::{RegisteredLine, VmemmapLine};
use memboot_contract::hugepage_forms::{self, HugePageSize, HugePlan, Pages};
use memmap::hugetlb::hvo::{self, HvoPage};
use memmap::hugetlb::{self, Request, Reservation, UnbackedHugePage, GIGANTIC_NR_PAGES};
use memmap::memblock::Memblock;
use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;

use super::context::Ctx;
use super::error::{MemblockStageError, PipelineError};
use super::facts::Phase;
use super::input::Input;
use super::mode::EagerWork;

/// The huge pages the command line asks for: the 1 GiB pages reserved,
/// the 2 MiB pages to take once memory is ready, and the sizes Linux
/// would report, in its order (none when the command line names no huge
/// pages: then the boot prints nothing of them).
#[derive(Debug, Default)]
pub struct Huge {
    pub gigantic: Option<Reservation>,
    pub pool_2m: Option<Request>,
    pub hstates: Vec<HugePageSize>,
    /// `hugetlb_free_vmemmap=on`.
    pub hvo: bool,
}

/// The command line's huge-page plan, read as Linux reads it
/// (`memboot_contract::hugepage_forms`; its ignored parameters are the
/// kernel's held-back report's lines), with the machine it was read for:
/// `None` when it names no huge pages.
fn plan(input: &Input<'_>) -> Option<(HugePlan, hugepage_forms::Machine)> {
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
    Some((hugepage_forms::plan(&input.opts.hugetlb, machine), machine))
}

/// What `plan` asks of `size`: `None` when it names no such pages.
fn request(plan: &HugePlan, size: HugePageSize) -> Option<Request> {
    let size = plan.sizes.iter().find(|s| s.size == size)?;
    Some(match &size.pages {
        Pages::Total(n) => Request::Total(*n),
        Pages::PerNode(nodes) => Request::PerNode(nodes.clone()),
    })
}

/// Reserve the 1 GiB pages the command line asks for (Linux's
/// `hugetlb_hstate_alloc_pages`), printing Linux's warning for what does
/// not fit, and note the 2 MiB pages it asks for.
pub fn reserve(cx: &Ctx<'_>, input: &Input<'_>, mb: &mut Memblock) -> Result<Huge, PipelineError> {
    let Some((plan, machine)) = plan(input) else {
        return Ok(Huge::default());
    };
    let pool_2m = request(&plan, HugePageSize::Mib2).filter(|r| *r != Request::Total(0));
    let hstates = hugepage_forms::linux_hstates(&plan, machine);
    let Some(request) = request(&plan, HugePageSize::Gib1) else {
        return Ok(Huge {
            gigantic: None,
            pool_2m,
            hstates,
            hvo: plan.hvo,
        });
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
    Ok(Huge {
        gigantic: Some(reservation),
        pool_2m,
        hstates,
        hvo: plan.hvo,
    })
}

/// The 1 GiB pages whose vmemmap HVO maps (`hugetlb_free_vmemmap=on`), their
/// frames reserved in memblock before the vmemmap is built; none when the
/// mode cannot have it, which a line says.
pub fn hvo_frames(
    cx: &Ctx<'_>,
    mb: &mut Memblock,
    huge: &Huge,
    page_bytes: u64,
) -> Result<Vec<HvoPage>, PipelineError> {
    let Some(reservation) = huge
        .gigantic
        .as_ref()
        .filter(|r| huge.hvo && !r.pages.is_empty())
    else {
        return Ok(Vec::new());
    };
    if !cx.mode.has_hvo() {
        cx.log.line(format_args!(
            "HugeTLB: HVO not applied: memmap=touch writes every struct page"
        ));
        return Ok(Vec::new());
    }
    hvo::reserve_frames(mb, reservation, page_bytes).map_err(|err| {
        PipelineError::Memblock(MemblockStageError {
            what: "HVO's page tables",
            err,
        })
    })
}

/// Write every reserved 1 GiB page's struct pages as a compound page of
/// order 18 and take the 2 MiB pages from the allocator, writing theirs as
/// compound pages of order 9, on the boot CPU, timed as the `hugetlb`
/// phase; then Linux's `HugeTLB: registered …` lines and the summary's
/// keys. `touch` has no Linux state (its store floor already wrote the
/// 1 GiB pages) and no allocator. Returns the 2 MiB pages, for
/// verification.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    memmap: &Memmap<B>,
    pages: PageAllocator<'_, '_, B>,
    huge: &Huge,
    layout: &ZoneLayout,
    hvo: &[HvoPage],
) -> Result<Option<HugePool>, PipelineError> {
    if huge.hstates.is_empty() {
        return Ok(None);
    }
    let linux_state = cx.mode.eager != EagerWork::Touch;
    let (done, ns) = cx.timed(Phase::Hugetlb, || -> Result<_, UnbackedHugePage> {
        let gigantic = match &huge.gigantic {
            Some(r) if linux_state => prep_all(memmap, r, !hvo.is_empty())?,
            _ => 0,
        };
        let pool = match &huge.pool_2m {
            Some(request) if cx.mode.has_allocator() => {
                Some(take_pool(memmap, pages, request, layout)?)
            }
            _ => None,
        };
        Ok((gigantic, pool))
    });
    let (gigantic_written, pool) = done.map_err(PipelineError::Hugetlb)?;
    let nr_nodes = layout.nodes().len();
    let mut written = gigantic_written;
    if let Some(r) = &huge.gigantic {
        cx.log.line(format_args!(
            "hugetlb: {} pages of 1.00 GiB, {gigantic_written} struct pages written as compound pages",
            r.pages.len()
        ));
        debug_assert!(
            gigantic_written == 0 || gigantic_written == r.pages.len() as u64 * GIGANTIC_NR_PAGES
        );
    }
    if let Some(pool) = &pool {
        for shortfall in &pool.shortfalls {
            cx.log.line(format_args!("{shortfall}"));
        }
        written += pool.pages.len() as u64 * HugePageSize::Mib2.base_pages();
    } else if huge.pool_2m.is_some() {
        cx.log.line(format_args!(
            "hugetlb: no 2.00 MiB pages: memmap=touch has no page allocator to take them from"
        ));
    }
    cx.log.line(format_args!(
        "hugetlb: {written} struct pages written as compound pages in {} us",
        ns / 1000
    ));
    report(cx, huge, pool.as_ref(), <B::Page as PageLayout>::BYTES);
    cx.facts.record(|f| {
        if let Some(r) = &huge.gigantic {
            f.hugepages_1g_per_node = r.per_node(nr_nodes).into();
        }
        if let Some(pool) = &pool {
            f.hugepages_2m_per_node = pool.per_node(nr_nodes).into();
        }
        f.hugetlb_ns = if written > 0 { ns } else { 0 };
        f.hvo_vmemmap_bytes_not_backed =
            hvo.len() as u64 * hvo::bytes_not_backed(<B::Page as PageLayout>::BYTES);
        f.hugetlb_struct_pages = written;
    });
    Ok(pool)
}

/// Take the 2 MiB pages `request` asks for and write each as a compound
/// page of order 9: with [`prep_all`], the profile's `hugetlb` phase, hence
/// never inlined.
#[inline(never)]
pub fn take_pool<B: MemmapBacking>(
    memmap: &Memmap<B>,
    pages: PageAllocator<'_, '_, B>,
    request: &Request,
    layout: &ZoneLayout,
) -> Result<HugePool, UnbackedHugePage> {
    let pool = hugetlb_pool::alloc_pool(&pages, layout, request, HugePageSize::Mib2);
    for p in &pool.pages {
        // SAFETY: the page is allocated to the pool alone: no free list,
        // cache or other CPU holds it, and nothing else runs meanwhile.
        unsafe { hugetlb::prep_compound(memmap, p.pfn, p.nid, pool.order()) }?;
    }
    Ok(pool)
}

/// Linux's `report_hugepages()`: for each size it has, in its order, the
/// pages it holds and the vmemmap HVO could free of one page of memboot's
/// struct-page size.
fn report(cx: &Ctx<'_>, huge: &Huge, pool: Option<&HugePool>, struct_page_bytes: u64) {
    for &size in &huge.hstates {
        let pages = match size {
            HugePageSize::Gib1 => huge.gigantic.as_ref().map_or(0, |r| r.pages.len()),
            HugePageSize::Mib2 => pool.map_or(0, |p| p.pages.len()),
        } as u64;
        cx.log
            .line(format_args!("{}", RegisteredLine { size, pages }));
        let vmemmap = VmemmapLine::for_struct_page(size, struct_page_bytes);
        cx.log.line(format_args!("{vmemmap}"));
    }
}

/// Every page's compound struct pages (with `hvo`, those of the kept
/// vmemmap page only): the profile's `hugetlb` phase
/// (`profile/src/phases.rs`), hence never inlined. Returns the struct
/// pages written.
#[inline(never)]
pub fn prep_all<B: MemmapBacking>(
    memmap: &Memmap<B>,
    huge: &Reservation,
    hvo: bool,
) -> Result<u64, UnbackedHugePage> {
    huge.pages.iter().try_fold(0u64, |n, page| {
        // SAFETY: a huge page's struct pages belong to no chunk, pool or
        // free block (they are MEMBLOCK_RSRV_NOINIT), and no other CPU
        // reads or writes them while the boot CPU runs this.
        let written = unsafe {
            if hvo {
                hugetlb::prep_gigantic_hvo(memmap, page)
            } else {
                hugetlb::prep_gigantic(memmap, page)
            }
        };
        written.map(|w| n + w)
    })
}
