//! The `memboot-summary:` line: one JSON object on one line, which CI
//! users and the host tools parse.
//!
//! [`Summary`] is the schema: one field per key, in the line's order. The
//! kernel's memory-init pipeline records its facts straight into one
//! (`memboot_kernel::pipeline::facts::MmFacts`), sets the boot-level keys
//! on a borrowed copy ([`Summary::borrowed`]) and streams it out without
//! allocating ([`Summary::write_line`]), so the panic and exception paths
//! can still report; the host reads it back with serde (feature `std`).
//!
//! Keys are a contract: add them at the end, never rename or drop one, and
//! bump [`SUMMARY_VERSION`] when adding. A new key is a field at the end of
//! [`Summary`], documented there, and a row of the README's key table (a
//! test finds the row missing); the writer, [`Summary::KEYS`], the host's
//! reader and the kernel's facts follow from the field, and the pipeline
//! step that measures the value sets it by the key's name.

use alloc::borrow::Cow;
use core::fmt::{self, Write};
use core::marker::PhantomData;

use crate::json::JsonObject;

/// What the summary line starts with; tools find the line by it.
pub const SUMMARY_PREFIX: &str = "memboot-summary: ";

/// The `status` of a boot whose summary line could not be written whole:
/// the line that says so carries the boot facts only.
pub const SUMMARY_FAILED_STATUS: &str = "summary";

/// The schema's version, the line's `summary_version`. A line without that
/// key is version 0 (written before it existed); keys added since read as
/// their defaults there.
pub const SUMMARY_VERSION: u64 = 8;

/// A phase of the boot, for the summary's `phases` timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize))]
#[cfg_attr(feature = "std", serde(try_from = "alloc::string::String"))]
pub enum Phase {
    Memblock,
    Zones,
    Vmemmap,
    EagerMemmap,
    BuddyHandoff,
    DeferredInit,
    MemoryBlocks,
    Verify,
    AllocTest,
    /// A drain worker (`ondemand_drain=on`), on its CPU, for its node.
    Drain,
    /// Building the buddy allocator's free-block store: the free bitmaps
    /// (`buddy=bitmaps`), before the hand-off. Since version 4.
    FreeBitmaps,
    /// Writing the 1 GiB huge pages' struct pages as compound pages
    /// (Linux's `gather_bootmem_prealloc`), after memory is ready. Since
    /// version 5.
    Hugetlb,
}

impl Phase {
    pub const ALL: [Phase; 12] = [
        Phase::Memblock,
        Phase::Zones,
        Phase::Vmemmap,
        Phase::EagerMemmap,
        Phase::BuddyHandoff,
        Phase::DeferredInit,
        Phase::MemoryBlocks,
        Phase::Verify,
        Phase::AllocTest,
        Phase::Drain,
        Phase::FreeBitmaps,
        Phase::Hugetlb,
    ];

    /// The name in the summary (`phases[].phase`).
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Memblock => "memblock",
            Phase::Zones => "zones",
            Phase::Vmemmap => "vmemmap",
            Phase::EagerMemmap => "eager_memmap",
            Phase::BuddyHandoff => "buddy_handoff",
            Phase::DeferredInit => "deferred_init",
            Phase::MemoryBlocks => "memory_blocks",
            Phase::Verify => "verify",
            Phase::AllocTest => "alloc_test",
            Phase::Drain => "drain",
            Phase::FreeBitmaps => "free_bitmaps",
            Phase::Hugetlb => "hugetlb",
        }
    }

    pub fn of_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }
}

#[cfg(feature = "std")]
impl TryFrom<alloc::string::String> for Phase {
    type Error = alloc::string::String;
    fn try_from(name: alloc::string::String) -> Result<Self, Self::Error> {
        Phase::of_name(&name).ok_or_else(|| alloc::format!("unknown phase `{name}`"))
    }
}

/// One phase on one CPU: `[start_ns, end_ns)` since kernel entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Deserialize))]
pub struct PhaseSpan {
    pub phase: Phase,
    pub cpu: u32,
    /// The node whose memory the phase worked on, for per-node phases.
    pub node: Option<u32>,
    /// For a span folded over several nodes' spans of this CPU (`node` is
    /// then `None`): how many.
    pub nodes: Option<u32>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl PhaseSpan {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The TSC rate in kHz, written as MHz with three decimals (`tsc_mhz`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TscMhz {
    pub khz: u64,
}

#[cfg(feature = "std")]
impl<'de> serde::Deserialize<'de> for TscMhz {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mhz = <f64 as serde::Deserialize>::deserialize(d)?;
        Ok(TscMhz {
            khz: (mhz * 1000.0).round() as u64,
        })
    }
}

/// The value of a key a line lacks, per field type: 0, `""` or empty.
/// Inherent constants, not a trait's: the compiler does not look into a
/// trait's constant, so it could not tell that [`Summary::ZERO`] owns
/// nothing to drop, and a constant built from it with `..` (the kernel's
/// empty facts) would not compile.
struct Zero<T>(PhantomData<T>);

impl Zero<u64> {
    const VALUE: u64 = 0;
}

impl Zero<TscMhz> {
    const VALUE: TscMhz = TscMhz { khz: 0 };
}

impl<'a> Zero<Cow<'a, str>> {
    const VALUE: Cow<'a, str> = Cow::Borrowed("");
}

impl<'a, T: Clone> Zero<Cow<'a, [T]>> {
    const VALUE: Cow<'a, [T]> = Cow::Borrowed(&[]);
}

/// What [`Summary`] needs of a field's type: a borrowing copy, and how it
/// goes into the line.
trait SummaryValue {
    /// The field's type in a summary borrowing this one.
    type Borrowed<'b>
    where
        Self: 'b;
    /// The same value, its text and arrays borrowed: no allocation.
    fn borrowed(&self) -> Self::Borrowed<'_>;
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result;
}

impl SummaryValue for u64 {
    type Borrowed<'b> = u64;
    fn borrowed(&self) -> u64 {
        *self
    }
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result {
        o.u64(key, *self)
    }
}

impl SummaryValue for TscMhz {
    type Borrowed<'b> = TscMhz;
    fn borrowed(&self) -> TscMhz {
        *self
    }
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result {
        o.fixed(key, self.khz, 3)
    }
}

impl SummaryValue for Cow<'_, str> {
    type Borrowed<'b>
        = Cow<'b, str>
    where
        Self: 'b;
    fn borrowed(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result {
        o.str(key, self)
    }
}

impl SummaryValue for Cow<'_, [u64]> {
    type Borrowed<'b>
        = Cow<'b, [u64]>
    where
        Self: 'b;
    fn borrowed(&self) -> Cow<'_, [u64]> {
        Cow::Borrowed(self)
    }
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result {
        o.u64_array(key, self.iter().copied())
    }
}

impl SummaryValue for Cow<'_, [PhaseSpan]> {
    type Borrowed<'b>
        = Cow<'b, [PhaseSpan]>
    where
        Self: 'b;
    fn borrowed(&self) -> Cow<'_, [PhaseSpan]> {
        Cow::Borrowed(self)
    }
    fn write<W: Write>(&self, o: &mut JsonObject<'_, W>, key: &str) -> fmt::Result {
        o.objects(key, self.iter(), |p, span| {
            p.str("phase", span.phase.name())?;
            p.u64("cpu", span.cpu.into())?;
            if let Some(node) = span.node {
                p.u64("node", node.into())?;
            }
            if let Some(nodes) = span.nodes {
                p.u64("nodes", nodes.into())?;
            }
            p.u64("start_ns", span.start_ns)?;
            p.u64("end_ns", span.end_ns)
        })
    }
}

/// The struct below is the schema: its fields, in order, are the line's
/// keys, so the writer, [`Summary::KEYS`], [`Summary::ZERO`] and
/// [`Summary::borrowed`] cannot disagree with it.
macro_rules! summary_schema {
    (
        $(#[$meta:meta])*
        pub struct $name:ident<$lt:lifetime> {
            $( $(#[$fmeta:meta])* pub $key:ident: $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name<$lt> {
            $( $(#[$fmeta])* pub $key: $ty, )*
        }

        impl<$lt> $name<$lt> {
            /// Every key 0, `""` or empty: what a line lacking a key reads
            /// it as ([`Default`]), and what the kernel's facts start from.
            pub const ZERO: Self = $name { $( $key: Zero::<$ty>::VALUE, )* };
        }

        impl Default for $name<'_> {
            fn default() -> Self {
                Self::ZERO
            }
        }

        impl $name<'_> {
            /// Every key, in the line's order.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($key)),*];

            /// The same summary, its text and arrays borrowed: the kernel
            /// sets the keys it knows only at the end of the boot on this
            /// copy, which allocates nothing.
            pub fn borrowed(&self) -> $name<'_> {
                $name { $( $key: SummaryValue::borrowed(&self.$key), )* }
            }

            /// The JSON object, streamed into `out`: no buffer, no
            /// allocation.
            pub fn write_json<W: Write>(&self, out: &mut W) -> fmt::Result {
                let mut o = JsonObject::begin(out)?;
                $( SummaryValue::write(&self.$key, &mut o, stringify!($key))?; )*
                o.end()
            }
        }
    };
}

summary_schema! {
    /// The `memboot-summary:` object. Durations are ns; `*_ns` stamps are
    /// since kernel entry; arrays by node are by node index, an entry per
    /// node with memory.
    #[derive(Clone, Debug, PartialEq, Eq)]
    #[cfg_attr(feature = "std", derive(serde::Deserialize))]
    #[cfg_attr(feature = "std", serde(default))]
    pub struct Summary<'a> {
        /// Usable RAM in the firmware's map.
        pub mem_bytes: u64,
        pub nodes: u64,
        pub cpus: u64,
        pub ap_online: u64,
        pub tsc_mhz: TscMhz,
        /// `ok`, or the error's name.
        pub status: Cow<'a, str>,
        pub total_ns: u64,
        /// The `memmap=` mode (`none` before memory init). The key keeps
        /// the name `strategy`, but it holds the mode: `ondemand` and
        /// `touch` are modes, not `memmap::Strategy` values.
        pub strategy: Cow<'a, str>,
        pub present_pages: u64,
        pub eager_pages: u64,
        /// Present pages of every zone below its node's highest zone.
        pub low_zone_pages: u64,
        pub deferred_pages: u64,
        pub reserved_pages: u64,
        /// Hole pages the boot CPU initialised as reserved (`eager_memmap`).
        pub hole_pages: u64,
        pub memmap_boot_ns: u64,
        pub buddy_eager_ns: u64,
        pub deferred_ns: u64,
        pub node_deferred_ns: Cow<'a, [u64]>,
        pub deferred_workers: u64,
        pub grown_pages: u64,
        pub memblock_ns: u64,
        pub vmemmap_ns: u64,
        pub vmemmap_bytes: u64,
        pub memory_block_ns: u64,
        pub memory_block_size: u64,
        pub nr_memory_blocks: u64,
        pub free_pages: u64,
        /// `ok`, `failed`, `off` or `none` (not reached).
        pub verify: Cow<'a, str>,
        pub verify_ns: u64,
        pub phases: Cow<'a, [PhaseSpan]>,
        /// Kernel entry → memory is ready (0: never). The one definition,
        /// in every mode and for the bench's Linux figure (README
        /// "Output"): memory init has stopped blocking the boot and every
        /// present, non-reserved page can be had from the allocator,
        /// initialised or claimable by growth.
        /// - `deferred`: the boot CPU is back from waiting for the
        ///   deferred-init workers (Linux: `page_alloc_init_late()` returns
        ///   from its wait for the `pgdatinit` threads);
        /// - `regions`, `perpfn`: the boot CPU has handed its pages to the
        ///   buddy allocator (it did all the work itself);
        /// - `ondemand`: the untouched pool is handed to the allocator,
        ///   which grows into it (`ondemand_drain=on` drains it after this
        ///   point);
        /// - `touch`: never, it has no allocator: 0, as for a failed boot.
        pub allocatable_ns: u64,
        /// Present pages still uninitialised at the end (`ondemand`).
        pub pool_pages: u64,
        /// Pages initialised by drain workers after boot
        /// (`ondemand_drain=on`).
        pub drained_pages: u64,
        /// The allocation test: bytes asked for per node, pages allocated
        /// on all nodes, its wall time and failed allocations.
        pub alloc_test_bytes: u64,
        pub alloc_test_pages: u64,
        pub alloc_test_ns: u64,
        pub alloc_test_failed: u64,
        /// The orders the allocation test mixes; the arrays after it are
        /// by order, in this order.
        pub alloc_orders: Cow<'a, [u64]>,
        pub alloc_count: Cow<'a, [u64]>,
        pub alloc_p50_ns: Cow<'a, [u64]>,
        pub alloc_p99_ns: Cow<'a, [u64]>,
        pub alloc_max_ns: Cow<'a, [u64]>,
        /// Block windows the allocations of each order initialised.
        pub alloc_grow_steps: Cow<'a, [u64]>,
        pub heap_bytes: u64,
        pub heap_peak_bytes: u64,
        /// Struct pages written when memory was ready: eager pages, hole
        /// pages initialised as reserved, and whatever workers and growth
        /// had done by then (0 where `allocatable_ns` is 0).
        pub pages_initialised_at_allocatable: u64,
        /// Struct pages written by the end of the boot (the same parts).
        pub pages_initialised: u64,
        /// `ondemand_drain=on`: the drain's first claim → the pool empty,
        /// over all nodes and per node, and the workers that ran.
        pub drain_ns: u64,
        pub node_drain_ns: Cow<'a, [u64]>,
        pub drain_workers: u64,
        /// The growth steps the allocation test took (`ondemand`), one
        /// block window of struct pages each, and their latency.
        pub grow_step_count: u64,
        pub grow_step_p50_ns: u64,
        pub grow_step_p99_ns: u64,
        pub grow_step_max_ns: u64,
        /// Sections whose struct pages are mapped at the end of the boot:
        /// all present ones when mapped at boot, those first use needed
        /// otherwise.
        pub vmemmap_sections_mapped: u64,
        /// Hole pages a lazy vmemmap initialised with their sections, as
        /// each was first mapped (`ondemand`, whose boot writes no hole
        /// page).
        pub hole_pages_on_first_use: u64,
        /// Bytes per struct page (`struct_page=`).
        pub struct_page_bytes: u64,
        /// How each section's block was found (`memory_block_lookup=`:
        /// `indexed` or `linear`; `none` before the blocks were created).
        pub memory_block_lookup: Cow<'a, str>,
        /// `pvh`, `bios` or `uefi`.
        pub entry: Cow<'a, str>,
        pub reset_to_entry_ns: u64,
        /// [`SUMMARY_VERSION`] when written by this schema.
        pub summary_version: u64,
        /// Where the buddy allocator kept free blocks: `lists`, `bitmaps`,
        /// or `none` (no allocator). Since version 2.
        pub buddy_store: Cow<'a, str>,
        /// Bytes of the allocator's own structures beyond the struct pages
        /// (the bitmaps). Since version 2.
        pub buddy_index_bytes: u64,
        /// Order-0 pages each CPU's cache takes from or gives back to the
        /// free blocks at once during the allocation test; 0: no per-CPU
        /// caches (no test, or before they existed). Since version 3.
        pub alloc_pcp_batch: u64,
        /// The most order-0 pages a CPU's cache held then. Since version 3.
        pub alloc_pcp_high: u64,
        /// Building the allocator's free-block store before the hand-off
        /// (the free bitmaps; next to nothing for lists): part of the
        /// struct-page work before memory is ready. Since version 4.
        pub free_bitmaps_ns: u64,
        /// 1 GiB huge pages reserved at boot (`hugepagesz=1G hugepages=`),
        /// by node. Since version 5.
        pub hugepages_1g_per_node: Cow<'a, [u64]>,
        /// The huge-page phase: writing their struct pages as compound
        /// pages on the boot CPU. Since version 5.
        pub hugetlb_ns: u64,
        /// Struct pages that phase wrote (262144 per 1 GiB page, 512 per
        /// 2 MiB page, heads included): not in `pages_initialised`. Since
        /// version 5.
        pub hugetlb_struct_pages: u64,
        /// 2 MiB huge pages taken from the page allocator once memory was
        /// ready (`hugepagesz=2M hugepages=`), by node. Since version 6.
        pub hugepages_2m_per_node: Cow<'a, [u64]>,
        /// Vmemmap bytes of the 1 GiB pages that HVO left unbacked
        /// (`hugetlb_free_vmemmap=on`): their struct pages less one kept
        /// page and its page tables each. Since version 7.
        pub hvo_vmemmap_bytes_not_backed: u64,
        /// Vmemmap bytes of the 2 MiB pages that HVO freed to the page
        /// allocator once they were taken (`hugetlb_free_vmemmap=on`):
        /// their vmemmap base pages less the kept one each (28 KiB a page
        /// at 64 bytes). Since version 8.
        pub hvo_2m_vmemmap_bytes_freed: u64,
    }
}

/// A summary line that did not go out whole: its writer took `sent` of its
/// `len` bytes (the prefix included), so whatever reached the line is cut
/// and is not valid JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryCut {
    pub sent: usize,
    pub len: usize,
}

impl fmt::Display for SummaryCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the summary line was cut after {} of its {} bytes, so the line above is not a valid summary: the boot fails with status `{SUMMARY_FAILED_STATUS}` and the next summary line has the boot facts only; report it with this log",
            self.sent, self.len
        )
    }
}

/// Counts the bytes a formatting would write, storing none.
struct ByteCount(usize);

impl Write for ByteCount {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Passes at most `len` bytes on to `out`, counting what it took, so a
/// second formatting that came out longer than the measured one stops at
/// the measured end instead of running on.
struct Bounded<'w, W: Write> {
    out: &'w mut W,
    len: usize,
    sent: usize,
}

impl<W: Write> Write for Bounded<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if s.len() > self.len - self.sent {
            return Err(fmt::Error);
        }
        self.out.write_str(s)?;
        self.sent += s.len();
        Ok(())
    }
}

impl Summary<'_> {
    /// `memboot-summary: {json}` into `line`, streamed piece by piece: no
    /// length limit and no allocation. The line is measured first, then
    /// written; `Ok(len)` when all `len` bytes went out, [`SummaryCut`]
    /// when `line` refused some (the caller ends the line, fails the boot
    /// with [`SUMMARY_FAILED_STATUS`] and writes a second line with the
    /// boot facts only). No newline: the line's end is the writer's, and
    /// JSON escapes every one inside.
    pub fn write_line<W: Write>(&self, line: &mut W) -> Result<usize, SummaryCut> {
        let mut count = ByteCount(SUMMARY_PREFIX.len());
        let measured = self.write_json(&mut count);
        let len = count.0;
        // Counting cannot fail; if formatting did anyway (a `Display`
        // error), nothing was sent, which is a cut at byte 0.
        measured.map_err(|_| SummaryCut { sent: 0, len })?;
        let mut out = Bounded {
            out: line,
            len,
            sent: 0,
        };
        let streamed = out
            .write_str(SUMMARY_PREFIX)
            .and_then(|()| self.write_json(&mut out));
        match streamed {
            Ok(()) if out.sent == len => Ok(len),
            _ => Err(SummaryCut {
                sent: out.sent,
                len,
            }),
        }
    }
}

#[cfg(test)]
mod tests;
