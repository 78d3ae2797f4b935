//! Where struct pages live, behind a tiny trait so the same init code runs on
//! a host `Vec` in tests and on the kernel's vmemmap area.
//!
//! The unit of backing is one 128 MiB section: its 32768 struct pages are
//! 2 MiB at 64 bytes each (one x86_64 huge page in the kernel's vmemmap),
//! 1 MiB at 32 (half of one). The struct page layout is the backing's
//! [`MemmapBacking::Page`]; everything above it is generic. A section that
//! has no present memory has no backing, so holes cost nothing; asking for its
//! pages returns `None` rather than touching unmapped memory.

use alloc::vec::Vec;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::holes::init_holes_in;
use crate::page::{PageLayout, StructPage};
use crate::sections::Vmemmap;
use crate::zones::UnavailableRange;
use crate::{pfn_to_section_nr, section_nr_to_pfn, Pfn, PfnRange, PAGES_PER_SECTION};

/// Storage for the struct pages of present sections.
///
/// # Safety
/// An implementor promises that every pointer returned by
/// [`section_ptr`](Self::section_ptr) is valid for reads and writes of
/// `PAGES_PER_SECTION` consecutive `Self::Page`s for as long as `self`
/// lives, that the same section always yields the same pointer, and that the
/// memory of distinct sections never overlaps.
pub unsafe trait MemmapBacking: Sync {
    /// The struct page layout stored.
    type Page: PageLayout;
    /// The struct page of the first PFN of `section_nr`, or `None` when the
    /// section is not backed.
    fn section_ptr(&self, section_nr: u64) -> Option<NonNull<Self::Page>>;

    /// The first section of `section_nrs` that is not backed, if any. A
    /// backing that keeps a set of sections answers in fewer steps than one
    /// [`section_ptr`](Self::section_ptr) per section.
    fn first_unbacked(&self, section_nrs: core::ops::Range<u64>) -> Option<u64> {
        section_nrs
            .into_iter()
            .find(|&nr| self.section_ptr(nr).is_none())
    }

    /// Does the backing initialise each section's hole pages itself, when
    /// it first maps the section ([`VmemmapBacking::new_lazy`])? Then memmap
    /// init leaves holes alone, and boot writes no struct page for them.
    fn initialises_holes(&self) -> bool {
        false
    }
}

/// PFN-indexed access to struct pages over a [`MemmapBacking`].
pub struct Memmap<B> {
    backing: B,
}

impl<B: MemmapBacking> Memmap<B> {
    pub fn new(backing: B) -> Self {
        Self { backing }
    }

    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// Is the section holding `pfn` backed (or, lazily, can it be)? Maps
    /// nothing.
    pub fn has_pfn(&self, pfn: u64) -> bool {
        let nr = pfn_to_section_nr(pfn);
        self.backing.first_unbacked(nr..nr + 1).is_none()
    }

    /// The first section holding a PFN of `range` that is not backed, if any.
    pub fn first_unbacked_section(&self, range: PfnRange) -> Option<u64> {
        if range.is_empty() {
            return None;
        }
        self.backing
            .first_unbacked(pfn_to_section_nr(range.start)..pfn_to_section_nr(range.end - 1) + 1)
    }

    /// Pointer to the first page of `range`, checking that the range lies in
    /// one backed section. Inlined: the allocators' `pfn_to_page`.
    #[inline]
    fn range_ptr(&self, range: PfnRange) -> Option<NonNull<B::Page>> {
        if range.is_empty() {
            return None;
        }
        let section_nr = pfn_to_section_nr(range.start);
        if pfn_to_section_nr(range.end - 1) != section_nr {
            return None;
        }
        let base = self.backing.section_ptr(section_nr)?;
        let offset = (range.start - section_nr_to_pfn(section_nr)) as usize;
        // SAFETY: offset < PAGES_PER_SECTION, inside the section's backing (trait contract).
        Some(unsafe { base.add(offset) })
    }

    /// Pointer to the struct page of `pfn` (Linux `pfn_to_page`): its
    /// section's first struct page plus the offset, `None` if the section
    /// is not backed. The allocators' per-page lookup, inlined.
    #[inline]
    pub fn page_ptr(&self, pfn: Pfn) -> Option<NonNull<B::Page>> {
        let section_nr = pfn_to_section_nr(pfn);
        let base = self.backing.section_ptr(section_nr)?;
        // SAFETY: the offset is below PAGES_PER_SECTION, inside the
        // section's backing (trait contract).
        Some(unsafe { base.add((pfn - section_nr_to_pfn(section_nr)) as usize) })
    }

    /// The struct page of `pfn`, if its section is backed.
    pub fn page(&self, pfn: u64) -> Option<&B::Page> {
        let ptr = self.page_ptr(pfn)?;
        // SAFETY: valid per the backing contract; `&self` excludes `&mut` access
        // through the safe API, and the unsafe API's callers promise exclusivity.
        Some(unsafe { ptr.as_ref() })
    }

    /// Mutable struct page of `pfn`.
    pub fn page_mut(&mut self, pfn: u64) -> Option<&mut B::Page> {
        let mut ptr = self.page_ptr(pfn)?;
        // SAFETY: valid per the backing contract; `&mut self` makes it unique.
        Some(unsafe { ptr.as_mut() })
    }

    /// The struct pages of `range`, which must lie within one backed section.
    pub fn pages(&self, range: PfnRange) -> Option<&[B::Page]> {
        let ptr = self.range_ptr(range)?;
        // SAFETY: as for `page`; the range lies in one section's backing.
        Some(unsafe { core::slice::from_raw_parts(ptr.as_ptr(), range.nr_pages() as usize) })
    }

    /// Mutable struct pages of `range`, which must lie within one backed section.
    pub fn pages_mut(&mut self, range: PfnRange) -> Option<&mut [B::Page]> {
        let ptr = self.range_ptr(range)?;
        // SAFETY: as for `page_mut`.
        Some(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), range.nr_pages() as usize) })
    }

    /// Mutable struct pages of `range` through a shared reference, for
    /// workers that initialise disjoint chunks in parallel.
    ///
    /// # Safety
    /// For the lifetime of the returned slice no other reference (shared or
    /// mutable) to any struct page of `range` may exist or be created.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn pages_mut_unchecked(&self, range: PfnRange) -> Option<&mut [B::Page]> {
        let ptr = self.range_ptr(range)?;
        // SAFETY: the caller guarantees exclusivity; validity per the backing contract.
        Some(unsafe { core::slice::from_raw_parts_mut(ptr.as_ptr(), range.nr_pages() as usize) })
    }
}

/// Maps one section's struct pages the first time they are needed (a lazy
/// vmemmap, see [`VmemmapBacking::new_lazy`]).
///
/// # Safety
/// Once `populate(nr, prepare)` has returned `true`, the
/// `PAGES_PER_SECTION` struct pages (`P`) of section `nr` at its address in
/// the backing's area must be valid
/// for reads and writes and used for nothing else for as long as the
/// backing lives. `populate` may be called from several CPUs at once, and
/// for a section that is already mapped (it must then return `true` and
/// change nothing). The call that maps the section calls `prepare` on its
/// `PAGES_PER_SECTION` struct pages once, after mapping and before any
/// `populate` call for that section returns `true` (the backing writes the
/// section's holes there, which must be done once, before anyone uses the
/// section).
pub unsafe trait SectionPopulator<P: PageLayout>: Sync {
    fn populate(&self, section_nr: u64, prepare: &mut dyn FnMut(&mut [P])) -> bool;
}

/// The sections a lazy backing may map, what it has mapped, and who maps.
struct LazySections<P: PageLayout> {
    /// Sections that may be populated on first use.
    allowed: SectionSet,
    /// One bit per section of `allowed`: populated (set with `Release`
    /// after the populator returned).
    populated: Vec<AtomicU64>,
    nr_populated: AtomicU64,
    populator: NonNull<dyn SectionPopulator<P>>,
    /// The layout's holes (sorted), written as reserved pages with the
    /// section they lie in, when it is mapped.
    holes: Vec<UnavailableRange>,
    nr_hole_pages: AtomicU64,
}

/// Struct pages in a virtual area laid out like Linux's vmemmap (the page
/// of PFN `p` at `area.base() + p * P::BYTES`), of which only the sections in a
/// [`SectionSet`] are mapped, either all at once before the backing is
/// made ([`new`](Self::new)) or each the first time one of its struct
/// pages is asked for ([`new_lazy`](Self::new_lazy)).
pub struct VmemmapBacking<P: PageLayout = StructPage> {
    area: Vmemmap,
    mapped: SectionSet,
    lazy: Option<LazySections<P>>,
}

impl<P: PageLayout> VmemmapBacking<P> {
    /// # Safety
    /// For every section number in `mapped`, the section's struct pages at
    /// `area.page_addr(section_nr_to_pfn(nr), P::BYTES)` must be valid for reads and
    /// writes and used for nothing else for as long as the backing lives.
    pub unsafe fn new(area: Vmemmap, mapped: SectionSet) -> Self {
        Self {
            area,
            mapped,
            lazy: None,
        }
    }

    /// A backing whose sections of `allowed` are mapped by `populator` the
    /// first time [`section_ptr`](MemmapBacking::section_ptr) asks for one:
    /// boot maps nothing, and a section nobody reads costs nothing. The
    /// pages of `holes` (a layout's unavailable ranges, sorted) in a
    /// section are initialised as reserved (`init_unavailable_range()`)
    /// when it is mapped, before anyone gets its struct pages: a lazy
    /// memmap has no hole page to write at boot.
    ///
    /// # Safety
    /// `populator` must outlive the backing, and map each section of
    /// `allowed` at `area.page_addr(section_nr_to_pfn(nr), P::BYTES)` (its trait's
    /// contract).
    pub unsafe fn new_lazy(
        area: Vmemmap,
        allowed: SectionSet,
        populator: &dyn SectionPopulator<P>,
        holes: Vec<UnavailableRange>,
    ) -> Self {
        let words = allowed.words.len();
        // SAFETY: only the lifetime is erased; the caller guarantees the
        // populator outlives the backing, which is the only user.
        let populator: NonNull<dyn SectionPopulator<P>> =
            unsafe { core::mem::transmute(NonNull::from(populator)) };
        Self {
            area,
            mapped: SectionSet::new(),
            lazy: Some(LazySections {
                allowed,
                populated: (0..words).map(|_| AtomicU64::new(0)).collect(),
                nr_populated: AtomicU64::new(0),
                populator,
                holes,
                nr_hole_pages: AtomicU64::new(0),
            }),
        }
    }

    /// The vmemmap area the struct pages are laid out in.
    pub fn area(&self) -> Vmemmap {
        self.area
    }

    /// The sections that are, or (lazily) may be, mapped.
    pub fn mapped(&self) -> &SectionSet {
        self.lazy.as_ref().map_or(&self.mapped, |l| &l.allowed)
    }

    /// Sections a lazy backing has mapped so far (all of
    /// [`mapped`](Self::mapped) for an eager one).
    pub fn nr_populated(&self) -> u64 {
        self.lazy.as_ref().map_or(self.mapped.len(), |l| {
            l.nr_populated.load(Ordering::Acquire)
        })
    }

    /// Hole pages a lazy backing has initialised with their sections so far.
    pub fn hole_pages_on_first_use(&self) -> u64 {
        self.lazy
            .as_ref()
            .map_or(0, |l| l.nr_hole_pages.load(Ordering::Acquire))
    }

    /// Is `section_nr` mapped, mapping it first if it is lazy and allowed?
    /// Inlined: every struct-page access of the allocators comes through
    /// here, and a mapped section is one bit test.
    #[inline]
    fn ensure_mapped(&self, section_nr: u64) -> bool {
        let Some(lazy) = &self.lazy else {
            return self.mapped.contains(section_nr);
        };
        if !lazy.allowed.contains(section_nr) {
            return false;
        }
        let word = &lazy.populated[(section_nr / 64) as usize];
        let bit = 1u64 << (section_nr % 64);
        if word.load(Ordering::Acquire) & bit != 0 {
            return true;
        }
        self.populate(lazy, section_nr)
    }

    /// Map `section_nr` of a lazy backing for the first time.
    #[cold]
    fn populate(&self, lazy: &LazySections<P>, section_nr: u64) -> bool {
        let word = &lazy.populated[(section_nr / 64) as usize];
        let bit = 1u64 << (section_nr % 64);
        // SAFETY: new_lazy's caller keeps the populator alive as long as
        // the backing.
        let populator = unsafe { lazy.populator.as_ref() };
        let section = PfnRange::new(
            section_nr_to_pfn(section_nr),
            section_nr_to_pfn(section_nr + 1),
        );
        let mut write_holes = |pages: &mut [P]| {
            let n = init_holes_in(pages, section, &lazy.holes);
            lazy.nr_hole_pages.fetch_add(n, Ordering::AcqRel);
        };
        if !populator.populate(section_nr, &mut write_holes) {
            return false;
        }
        if word.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
            lazy.nr_populated.fetch_add(1, Ordering::AcqRel);
        }
        true
    }
}

// SAFETY: pointers are returned only for sections that are mapped: those
// in `mapped`, which `new`'s caller promised are valid, exclusive blocks
// of one section's struct pages, or those a lazy backing's populator
// returned `true` for, which its contract makes the same; sections are
// `PAGES_PER_SECTION * P::BYTES` apart in the area, so they never overlap,
// and the address of a section never changes.
unsafe impl<P: PageLayout> MemmapBacking for VmemmapBacking<P> {
    type Page = P;
    #[inline]
    fn section_ptr(&self, section_nr: u64) -> Option<NonNull<P>> {
        if !self.ensure_mapped(section_nr) {
            return None;
        }
        NonNull::new(
            self.area
                .page_addr(section_nr_to_pfn(section_nr), P::BYTES)? as *mut P,
        )
    }

    /// Without mapping anything: the sections a lazy backing may map count
    /// as backed.
    fn first_unbacked(&self, section_nrs: core::ops::Range<u64>) -> Option<u64> {
        self.mapped().first_missing(section_nrs)
    }

    fn initialises_holes(&self) -> bool {
        self.lazy.is_some()
    }
}

// SAFETY: the backing holds addresses only; access discipline is the
// `Memmap` API's, and the area is not tied to a thread.
unsafe impl<P: PageLayout> Send for VmemmapBacking<P> {}
// SAFETY: as above.
unsafe impl<P: PageLayout> Sync for VmemmapBacking<P> {}

/// A set of section numbers, one bit each (32 KiB for 32 TiB of RAM).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SectionSet {
    words: Vec<u64>,
    len: u64,
}

impl SectionSet {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn insert(&mut self, section_nr: u64) {
        let word = (section_nr / 64) as usize;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let bit = 1 << (section_nr % 64);
        if self.words[word] & bit == 0 {
            self.words[word] |= bit;
            self.len += 1;
        }
    }
    #[inline]
    pub fn contains(&self, section_nr: u64) -> bool {
        self.words
            .get((section_nr / 64) as usize)
            .is_some_and(|w| w & (1 << (section_nr % 64)) != 0)
    }
    /// Insert every section of `section_nrs`, a word at a time.
    pub fn insert_range(&mut self, section_nrs: core::ops::Range<u64>) {
        if section_nrs.is_empty() {
            return;
        }
        let (first, last) = (
            (section_nrs.start / 64) as usize,
            ((section_nrs.end - 1) / 64) as usize,
        );
        // Grown once: a word at a time cost a `resize` call per 64
        // sections (most of a 59T boot's instructions before ready).
        if last >= self.words.len() {
            self.words.resize(last + 1, 0);
        }
        let head = u64::MAX << (section_nrs.start % 64);
        let tail = u64::MAX >> (63 - (section_nrs.end - 1) % 64);
        if first == last {
            self.set_bits(first, head & tail);
            return;
        }
        self.set_bits(first, head);
        // Whole words, ~7500 at 59T: a fresh one adds 64, and only an
        // overlap needs a count (a software popcount on this target).
        let mut added = 0;
        for w in &mut self.words[first + 1..last] {
            added += if *w == 0 {
                64
            } else {
                u64::from((!*w).count_ones())
            };
            *w = u64::MAX;
        }
        self.len += added;
        self.set_bits(last, tail);
    }
    fn set_bits(&mut self, word: usize, mask: u64) {
        let old = self.words[word];
        self.len += u64::from((mask & !old).count_ones());
        self.words[word] = old | mask;
    }
    /// The first section of `section_nrs` not in the set, if any: a word
    /// (64 sections) at a time, full words skipped in one scan (a 59T
    /// boot checks ~7500 words before memory is ready).
    pub(crate) fn first_missing(&self, section_nrs: core::ops::Range<u64>) -> Option<u64> {
        if section_nrs.is_empty() {
            return None;
        }
        let word = |w: usize| self.words.get(w).copied().unwrap_or(0);
        let last = ((section_nrs.end - 1) / 64) as usize;
        let mut w = (section_nrs.start / 64) as usize;
        let mut missing = !word(w) & (u64::MAX << (section_nrs.start % 64));
        while missing == 0 && w < last {
            w += 1;
            let stop = last.min(self.words.len());
            if w < stop {
                w += self.words[w..stop]
                    .iter()
                    .take_while(|&&x| x == u64::MAX)
                    .count();
            }
            missing = !word(w);
        }
        let first = w as u64 * 64 + u64::from(missing.trailing_zeros());
        (missing != 0 && first < section_nrs.end).then_some(first)
    }
    /// Number of sections in the set.
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Host-side backing: one heap block per present section.
pub struct VecBacking<P: PageLayout = StructPage> {
    /// `(section_nr, pages)`, sorted by section number.
    sections: Vec<(u64, NonNull<P>)>,
}

// SAFETY: the pointers are owned heap blocks; access discipline is the
// `Memmap` API's (shared reads, or exclusive writes as its unsafe API demands).
unsafe impl<P: PageLayout> Sync for VecBacking<P> {}
// SAFETY: as above; the blocks are plain heap memory with no thread affinity.
unsafe impl<P: PageLayout> Send for VecBacking<P> {}

impl<P: PageLayout> VecBacking<P> {
    /// Back the given sections (duplicates ignored) with zeroed struct pages.
    pub fn new(section_nrs: impl IntoIterator<Item = u64>) -> Self {
        let mut nrs: Vec<u64> = section_nrs.into_iter().collect();
        nrs.sort_unstable();
        nrs.dedup();
        let sections = nrs
            .into_iter()
            .map(|nr| {
                let block: Vec<P> = alloc::vec![P::ZERO; PAGES_PER_SECTION as usize];
                let ptr = alloc::boxed::Box::into_raw(block.into_boxed_slice()) as *mut P;
                // SAFETY: Box::into_raw never returns null.
                (nr, unsafe { NonNull::new_unchecked(ptr) })
            })
            .collect();
        Self { sections }
    }

    /// Back every section that intersects one of `ranges`.
    pub fn for_ranges<'a>(ranges: impl IntoIterator<Item = &'a PfnRange>) -> Self {
        let mut nrs = Vec::new();
        for r in ranges {
            if r.is_empty() {
                continue;
            }
            nrs.extend(pfn_to_section_nr(r.start)..=pfn_to_section_nr(r.end - 1));
        }
        Self::new(nrs)
    }

    /// Backed section numbers, ascending.
    pub fn section_nrs(&self) -> impl Iterator<Item = u64> + '_ {
        self.sections.iter().map(|(nr, _)| *nr)
    }
}

// SAFETY: each pointer is a live heap block of PAGES_PER_SECTION pages owned
// by `self`, one per section, never moved or freed before drop.
unsafe impl<P: PageLayout> MemmapBacking for VecBacking<P> {
    type Page = P;
    fn section_ptr(&self, section_nr: u64) -> Option<NonNull<P>> {
        let i = self
            .sections
            .binary_search_by_key(&section_nr, |(nr, _)| *nr)
            .ok()?;
        Some(self.sections[i].1)
    }
}

impl<P: PageLayout> Drop for VecBacking<P> {
    fn drop(&mut self) {
        for (_, ptr) in self.sections.drain(..) {
            let slice =
                core::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), PAGES_PER_SECTION as usize);
            // SAFETY: created by Box::into_raw of a boxed slice of this length in `new`.
            drop(unsafe { alloc::boxed::Box::from_raw(slice) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ZoneType;

    /// `first_missing` against a section-by-section search, over a set
    /// with full words, empty words, single bits and word edges, for every
    /// range inside and past it.
    #[test]
    fn first_missing_equals_the_first_section_not_contained() {
        let mut set = SectionSet::new();
        for nr in (0..64).chain(70..71).chain(127..200).chain(192..257) {
            set.insert(nr);
        }
        for start in 0..300 {
            for end in start..300 {
                let naive = (start..end).find(|&nr| !set.contains(nr));
                assert_eq!(set.first_missing(start..end), naive, "{start}..{end}");
            }
        }
    }

    /// Records which sections it was asked to map; refuses section 7.
    struct CountingPopulator {
        calls: std::sync::Mutex<std::vec::Vec<u64>>,
        area: u64,
    }

    // SAFETY: the test's area backs every section it is asked for (an
    // 8-section heap block at the area's base), and nothing else uses it.
    unsafe impl SectionPopulator<StructPage> for CountingPopulator {
        fn populate(&self, section_nr: u64, prepare: &mut dyn FnMut(&mut [StructPage])) -> bool {
            let mut calls = self.calls.lock().unwrap();
            let first = !calls.contains(&section_nr);
            calls.push(section_nr);
            if section_nr == 7 {
                return false;
            }
            if first {
                let at = self.area + section_nr * PAGES_PER_SECTION * 64;
                // SAFETY: the section's 2 MiB of the test's heap block,
                // under the lock, which every other call for it waits on.
                prepare(unsafe {
                    core::slice::from_raw_parts_mut(
                        at as *mut StructPage,
                        PAGES_PER_SECTION as usize,
                    )
                });
            }
            true
        }
    }

    /// A lazy backing maps a section the first time one of its struct
    /// pages is asked for, once however many CPUs ask at once; asking
    /// whether a section is backed maps nothing; sections outside the
    /// allowed set, or that the populator refuses, are not backed.
    #[test]
    fn a_lazy_backing_maps_each_section_on_first_use_only() {
        use std::alloc::{alloc_zeroed, dealloc, Layout};
        let layout = Layout::from_size_align(8 * (2 << 20), 2 << 20).unwrap();
        // SAFETY: a non-zero size.
        let block = unsafe { alloc_zeroed(layout) };
        assert!(!block.is_null());
        let area = Vmemmap::new(block as u64).unwrap();
        let mut allowed = SectionSet::new();
        allowed.insert_range(0..2);
        allowed.insert_range(3..8);
        let populator = CountingPopulator {
            calls: std::sync::Mutex::new(std::vec::Vec::new()),
            area: block as u64,
        };
        let s = PAGES_PER_SECTION;
        let hole = |start: u64, nr_pages: u64| UnavailableRange {
            nid: 1,
            zone: ZoneType::Normal,
            pfns: PfnRange::new(start, start + nr_pages),
            nr_pages,
        };
        // In sections 1 (twice), 3 (never mapped) and 4.
        let holes = std::vec![
            hole(s + 100, 100),
            hole(s + 300, 1),
            hole(3 * s, 10),
            hole(4 * s + 1000, 10),
        ];
        // SAFETY: the populator outlives the memmap; sections 0..8 lie in
        // the heap block at the area's base.
        let mm = Memmap::new(unsafe { VmemmapBacking::new_lazy(area, allowed, &populator, holes) });
        let calls = || populator.calls.lock().unwrap().clone();
        assert!(mm.has_pfn(3 * s) && !mm.has_pfn(2 * s));
        assert_eq!(mm.first_unbacked_section(PfnRange::new(0, 8 * s)), Some(2));
        assert!(calls().is_empty(), "asking maps nothing");
        assert_eq!(mm.backing().nr_populated(), 0);

        assert!(mm.page(s + 5).is_some());
        assert!(mm.page(s + 9).is_some());
        assert_eq!(calls(), [1], "mapped once, on first use");
        assert_eq!(mm.backing().hole_pages_on_first_use(), 101);
        for pfn in [s + 100, s + 199, s + 300] {
            let page = mm.page(pfn).unwrap();
            assert!(
                page.is_reserved() && page.links_match(pfn, ZoneType::Normal, 1),
                "{pfn:#x}"
            );
        }
        for pfn in [s + 99, s + 200, s + 299, s + 301] {
            assert!(
                !mm.page(pfn).unwrap().is_reserved(),
                "{pfn:#x} is not a hole"
            );
        }
        assert!(mm.page(2 * s).is_none(), "not allowed");
        assert!(mm.page(7 * s).is_none(), "refused by the populator");
        assert_eq!(calls(), [1, 7]);

        std::thread::scope(|t| {
            for _ in 0..8 {
                t.spawn(|| assert!(mm.page(4 * s + 1).is_some()));
            }
        });
        assert!(calls().iter().filter(|&&n| n == 4).count() >= 1);
        assert_eq!(
            mm.backing().nr_populated(),
            2,
            "sections 1 and 4, each once"
        );
        assert_eq!(
            mm.backing().hole_pages_on_first_use(),
            111,
            "section 4's holes written once, however many CPUs asked"
        );
        assert!(mm.page(4 * s + 1009).unwrap().is_reserved());
        drop(mm);
        // SAFETY: allocated above with this layout; the memmap is gone.
        unsafe { dealloc(block, layout) };
    }

    /// `insert_range` equals one `insert` per section, word edges and
    /// overlaps included.
    #[test]
    fn insert_range_equals_inserting_each_section() {
        for (a, b) in [
            (0, 0),
            (0, 64),
            (3, 70),
            (63, 65),
            (64, 200),
            (5, 6),
            (100, 300),
        ] {
            let mut ranged = SectionSet::new();
            let mut single = SectionSet::new();
            for (s, e) in [(a, b), (a / 2, a + 3), (b, b + 130), (1, b + 200)] {
                ranged.insert_range(s..e);
                for nr in s..e {
                    single.insert(nr);
                }
                assert_eq!(ranged.len(), single.len(), "{s}..{e}");
                assert!((0..700).all(|nr| ranged.contains(nr) == single.contains(nr)));
            }
        }
    }

    #[test]
    fn section_set_counts_each_section_once() {
        let mut s = SectionSet::new();
        assert!(s.is_empty() && !s.contains(0));
        for nr in [5, 64, 5, 262_143] {
            s.insert(nr);
        }
        assert_eq!(s.len(), 3);
        assert!(s.contains(5) && s.contains(64) && s.contains(262_143));
        assert!(!s.contains(63) && !s.contains(262_144) && !s.contains(6));
    }

    #[test]
    fn vmemmap_backing_addresses_follow_the_vmemmap_layout() {
        let area = Vmemmap::new(0x4000_0000).unwrap();
        let mut mapped = SectionSet::new();
        mapped.insert(3);
        // SAFETY: the pointers are only compared, never dereferenced.
        let b = unsafe { VmemmapBacking::<StructPage>::new(area, mapped) };
        assert!(b.section_ptr(2).is_none());
        let p = b.section_ptr(3).unwrap().as_ptr() as u64;
        assert_eq!(p, 0x4000_0000 + 3 * PAGES_PER_SECTION * 64);
    }

    #[test]
    fn vec_backing_maps_present_sections_only() {
        let mut mm = Memmap::new(VecBacking::<StructPage>::new([0, 2]));
        assert!(mm.has_pfn(5));
        assert!(!mm.has_pfn(PAGES_PER_SECTION + 5));
        assert!(mm.page(PAGES_PER_SECTION).is_none());
        let pfn = 2 * PAGES_PER_SECTION + 9;
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::Dma, 0);
        assert_eq!(mm.page(pfn).unwrap().refcount(), 1);
        // Ranges crossing a section boundary are refused.
        assert!(mm
            .pages(PfnRange::new(PAGES_PER_SECTION - 1, PAGES_PER_SECTION + 1))
            .is_none());
        let pieces: Vec<_> = PfnRange::new(10, 2 * PAGES_PER_SECTION + 3)
            .section_pieces()
            .collect();
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[0], PfnRange::new(10, PAGES_PER_SECTION));
        assert_eq!(
            pieces[2],
            PfnRange::new(2 * PAGES_PER_SECTION, 2 * PAGES_PER_SECTION + 3)
        );
    }
}
