//! The struct pages of holes: `init_unavailable_range()`'s reserved pages
//! in a hole's zone and node. Written by the init strategies at boot
//! (`init`) and by a lazy vmemmap when it first maps a section (`store`),
//! so below both.

use crate::page::PageLayout;
use crate::zones::UnavailableRange;
use crate::{Pfn, PfnRange};

/// `init_unavailable_range()` for the pages of `holes` (sorted, as the
/// layout lists them) inside `pfns`, whose struct pages are `pages` (the
/// first is `pfns.start`'s): what a lazy vmemmap writes when it maps a
/// section. Returns the number of pages written.
pub(crate) fn init_holes_in<P: PageLayout>(
    pages: &mut [P],
    pfns: PfnRange,
    holes: &[UnavailableRange],
) -> u64 {
    let first = holes.partition_point(|u| u.pfns.end <= pfns.start);
    let mut n = 0;
    for u in holes[first..]
        .iter()
        .take_while(|u| u.pfns.start < pfns.end)
    {
        let Some(piece) = u.pfns.intersect(&pfns) else {
            continue;
        };
        let at = (piece.start - pfns.start) as usize;
        init_hole_pages(
            &mut pages[at..at + piece.nr_pages() as usize],
            piece.start,
            u,
        );
        n += piece.nr_pages();
    }
    n
}

/// One hole's pages, the first being `start_pfn`: reserved, in the hole's
/// zone and node.
pub(crate) fn init_hole_pages<P: PageLayout>(
    pages: &mut [P],
    start_pfn: Pfn,
    hole: &UnavailableRange,
) {
    for (pfn, page) in (start_pfn..).zip(pages.iter_mut()) {
        page.init_single_page(pfn, hole.zone, hole.nid);
        page.set_hole();
    }
}
