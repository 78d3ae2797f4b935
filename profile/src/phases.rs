//! The phases each kernel is profiled in: the functions whose entry opens
//! one, and how its threads are recognised (`tracker::Threads`). The one
//! table of them: run-qemu.sh asks `memboot-profile plugin-args`.

use crate::symbols::Symbols;
use crate::tracker::Threads;

/// A phase: its name in the profile and the functions that open it.
/// `functions` must all be in the symbol map; of `any_of`, the first in
/// the map opens it too, and one must be there (kernel versions rename,
/// split and inline functions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseDef {
    pub name: &'static str,
    pub functions: &'static [&'static str],
    pub any_of: &'static [&'static str],
    /// Functions that open it where the map has them (a version that
    /// inlines one runs its work inside an entry above).
    pub if_present: &'static [&'static str],
    /// Functions whose first instruction ends the phase on every thread
    /// (none: it ends at each entry's return).
    pub until: &'static [&'static str],
}

impl PhaseDef {
    const fn all(name: &'static str, functions: &'static [&'static str]) -> PhaseDef {
        PhaseDef {
            name,
            functions,
            any_of: &[],
            if_present: &[],
            until: &[],
        }
    }

    /// The entry addresses of the phase in `map`.
    pub fn entries(&self, map: &Symbols) -> Result<Vec<u64>, String> {
        let mut entries = map.entries(self.functions)?;
        if !self.any_of.is_empty() {
            let first = self
                .any_of
                .iter()
                .find_map(|n| map.entries(&[n]).ok())
                .ok_or(format!(
                    "none of {} in the symbol map (inlined or renamed in this build)",
                    self.any_of.join(", ")
                ))?;
            entries.extend(first);
        }
        for name in self.if_present {
            entries.extend(map.entries(&[name]).unwrap_or_default());
        }
        Ok(entries)
    }
}

/// Deferred struct-page init, every worker on every CPU.
pub const DEFERRED: &str = "deferred";
/// The boot CPU's struct-page init before SMP work.
pub const BOOT_CPU: &str = "boot_cpu_memmap";
/// Building the buddy allocator's free-block store (memboot's free
/// bitmaps), per present page.
pub const FREE_BITMAPS: &str = "free_bitmaps";
/// The boot CPU's free pages handed to the buddy allocator (Linux's
/// `memblock_free_all`), per page the boot CPU initialised.
pub const BUDDY_HANDOFF: &str = "buddy_handoff";
/// memboot's buddy allocation and free, per call (the allocation test's,
/// the verification self-test's): what the free-block store costs.
pub const BUDDY_ALLOC: &str = "buddy_alloc";
pub const BUDDY_FREE: &str = "buddy_free";
/// A page allocation or free of any order through the page allocator's
/// entry, per call: memboot's `PageAllocator`, Linux's `__alloc_pages` and
/// its free entries.
pub const PAGE_ALLOC: &str = "page_alloc";
pub const PAGE_FREE: &str = "page_free";
/// memboot's order-0 path: a pop from, or push onto, a per-CPU cache (the
/// refill or spill included), per call.
pub const PCP_ALLOC: &str = "pcp_alloc";
pub const PCP_FREE: &str = "pcp_free";
/// memboot's boot CPU from `boot::start` (the entry code's page tables
/// built, the final stack in use) until `Facts::memory_ready` records the
/// summary's `allocatable_ns`: what runs before a boot can allocate,
/// counted the same on any host.
pub const TO_READY: &str = "to_ready";
/// memboot's huge pages: the 1 GiB pages' struct pages written as compound
/// pages (`hugepagesz=1G hugepages=N`) and the 2 MiB pages taken from the
/// allocator and written so (`hugepagesz=2M`), per struct page written.
pub const HUGETLB: &str = "hugetlb";
/// memboot's vmemmap: the struct pages' storage reserved and mapped (at
/// boot, or reserved for first use), with the 1 GiB pages reserved and
/// their HVO frames, per present page. Linux 7.3 does the same in its
/// boot-CPU phase (`mm_core_init_early`); 6.1 and 6.12 do it in
/// `sparse_init()`, before theirs, counted in no phase.
pub const VMEMMAP: &str = "vmemmap";
/// memboot's memory-block creation (`memory_block_lookup=` decides how each
/// section finds its block), per boot: one call.
pub const MEMORY_BLOCKS: &str = "memory_blocks";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Memboot,
    Linux,
}

impl Kernel {
    pub fn parse(s: &str) -> Result<Kernel, String> {
        match s {
            "memboot" => Ok(Kernel::Memboot),
            "linux" => Ok(Kernel::Linux),
            _ => Err(format!("--kernel {s}: expected memboot or linux")),
        }
    }

    pub fn phases(self) -> &'static [PhaseDef] {
        match self {
            Kernel::Memboot => MEMBOOT_PHASES,
            Kernel::Linux => LINUX_PHASES,
        }
    }
    /// memboot: one thread per CPU, never preempted. Linux: kernel threads
    /// on 16 KiB stacks aligned to their size (`THREAD_SIZE`, `THREAD_ALIGN`
    /// without KASAN, as Debian builds it), free to migrate.
    pub fn threads(self) -> Threads {
        match self {
            Kernel::Memboot => Threads::Cpu,
            Kernel::Linux => Threads::Stack { shift: 14 },
        }
    }

    /// The plugin's arguments, comma-separated, for `-plugin SO,ARGS`.
    pub fn plugin_args(self, map: &Symbols, out: &str) -> Result<String, String> {
        let mut args = vec![format!("out={out}"), format!("threads={}", self.threads())];
        for p in self.phases() {
            let entries = p
                .entries(map)
                .map_err(|e| format!("phase {}: {e}", p.name))?;
            let hex: Vec<String> = entries.iter().map(|a| format!("{a:#x}")).collect();
            args.push(format!("phase={}:{}", p.name, hex.join(":")));
        }
        for p in self.phases().iter().filter(|p| !p.until.is_empty()) {
            let marks = map
                .entries(p.until)
                .map_err(|e| format!("phase {} (until): {e}", p.name))?;
            let hex: Vec<String> = marks.iter().map(|a| format!("{a:#x}")).collect();
            args.push(format!("until={}:{}", p.name, hex.join(":")));
        }
        if out.contains(',') {
            return Err(format!(
                "{out}: QEMU's -plugin splits its arguments at commas"
            ));
        }
        Ok(args.join(","))
    }
}

// Names as `nm -C` prints them (no hash). run_cpu_workers runs each CPU's
// workers (kernel/src/pipeline/deferred_workers.rs); eager_memmap::init is
// the boot CPU's share of struct pages. Each is #[inline(never)] for this
// table, as are the allocators' entries.
const MEMBOOT_PHASES: &[PhaseDef] = &[
    PhaseDef::all(
        DEFERRED,
        &["deferred_init::run::DeferredInit<B>::run_cpu_workers"],
    ),
    PhaseDef::all(BOOT_CPU, &["memboot_kernel::pipeline::eager_memmap::init"]),
    PhaseDef::all(
        FREE_BITMAPS,
        &["deferred_init::buddy::BuddyAllocator<B>::with_store"],
    ),
    PhaseDef::all(BUDDY_HANDOFF, &["deferred_init::handoff::free_eager_pages"]),
    PhaseDef::all(
        BUDDY_ALLOC,
        &["deferred_init::buddy::BuddyAllocator<B>::alloc"],
    ),
    PhaseDef::all(
        BUDDY_FREE,
        &["deferred_init::buddy::BuddyAllocator<B>::free"],
    ),
    PhaseDef::all(
        PAGE_ALLOC,
        &["deferred_init::page_alloc::PageAllocator<B>::alloc"],
    ),
    PhaseDef::all(
        PAGE_FREE,
        &["deferred_init::page_alloc::PageAllocator<B>::free_pages"],
    ),
    PhaseDef::all(PCP_ALLOC, &["deferred_init::pcp::PerCpuPages::alloc"]),
    PhaseDef::all(PCP_FREE, &["deferred_init::pcp::PerCpuPages::free"]),
    PhaseDef::all(
        MEMORY_BLOCKS,
        &["memboot_kernel::pipeline::memory_blocks::create"],
    ),
    PhaseDef::all(
        HUGETLB,
        &[
            "memboot_kernel::pipeline::hugetlb::prep_all",
            "memboot_kernel::pipeline::hugetlb::take_pool",
        ],
    ),
    PhaseDef::all(
        VMEMMAP,
        &[
            "memmap::hugetlb::reserve_gigantic",
            "memmap::hugetlb::hvo::reserve_frames",
            "memboot_kernel::pipeline::vmemmap::populate",
            "memboot_kernel::pipeline::vmemmap::SectionMapper<M>::reserve",
        ],
    ),
    PhaseDef {
        name: TO_READY,
        functions: &["memboot_kernel::hw::boot::flow::start"],
        any_of: &[],
        if_present: &[],
        until: &["memboot_kernel::pipeline::facts::Facts::memory_ready"],
    },
];
// mm/mm_init.c (6.1: mm/page_alloc.c): the per-node kthread, and
// the chunk function padata runs on helper threads of the same
// node (its address is taken, so it is never inlined away);
// free_area_init() holds memmap_init() (the bench's boot-CPU
// figure, tools/src/linux_log.rs, times the same block).
const LINUX_PHASES: &[PhaseDef] = &[
    PhaseDef::all(
        DEFERRED,
        &["deferred_init_memmap", "deferred_init_memmap_chunk"],
    ),
    // 7.3 inlines free_area_init() into mm_core_init_early(), which
    // also reserves boot-time huge pages (none unless asked for).
    PhaseDef {
        name: BOOT_CPU,
        functions: &[],
        any_of: &["free_area_init", "mm_core_init_early"],
        if_present: &[],
        until: &[],
    },
    // mm_core_init(): the boot CPU's free pages to the buddy
    // allocator, after free_area_init(); with huge pages it also writes
    // the reserved 1 GiB pages' struct pages (every tail in 6.1, only the
    // heads since 6.9: memmap_init_reserved_pages()).
    PhaseDef::all(BUDDY_HANDOFF, &["memblock_free_all"]),
    // mm/hugetlb.c: the initcall that prepares the boot-time huge pages
    // (the 1 GiB pages' tails since 6.9), as memboot's hugetlb phase
    // does. 6.12 and 7.3 hand the pages to padata helper threads
    // (gather_bootmem_prealloc_parallel, its address taken); 6.1 does it
    // all on the initcall's thread.
    PhaseDef {
        name: HUGETLB,
        functions: &["hugetlb_init"],
        any_of: &[],
        if_present: &["gather_bootmem_prealloc_parallel"],
        until: &[],
    },
    // mm/page_alloc.c: the allocator's core entry (7.3's frozen one,
    // which __alloc_pages_noprof calls; 6.12's; 6.1's) and its free entry
    // for the orders the per-CPU lists take (6.1 and 6.12 free_unref_page;
    // 7.3's __free_frozen_pages, every order). Not __free_pages_ok: memmap
    // init hands its pages to the buddy allocator through it
    // (__free_pages_core), which memboot counts in its memmap phases; nor
    // the batch free_unref_folios, one call for many folios.
    PhaseDef {
        name: PAGE_ALLOC,
        functions: &[],
        any_of: &[
            "__alloc_frozen_pages_noprof",
            "__alloc_pages_noprof",
            "__alloc_pages",
        ],
        if_present: &[],
        until: &[],
    },
    PhaseDef {
        name: PAGE_FREE,
        functions: &[],
        any_of: &["__free_frozen_pages", "free_unref_page"],
        if_present: &[],
        until: &[],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments_name_every_entry() {
        let mut map = String::new();
        for (i, name) in [
            "deferred_init_memmap",
            "x",
            "deferred_init_memmap_chunk",
            "y",
            "free_area_init",
            "z",
            "memblock_free_all",
            "__alloc_pages",
            "__free_pages_ok",
            "free_unref_page",
            "free_unref_page_list",
            "hugetlb_init",
        ]
        .iter()
        .chain(&["a", "b", "c", "d", "e", "f"])
        .enumerate()
        {
            map += &format!(
                "{:016x} t {name}\n",
                0xffffffff81000000u64 + 0x100 * i as u64
            );
        }
        let s = Symbols::parse_system_map(&map).unwrap();
        assert_eq!(
            Kernel::Linux.plugin_args(&s, "/tmp/p.raw").unwrap(),
            "out=/tmp/p.raw,threads=stack:16384,\
             phase=deferred:0xffffffff81000000:0xffffffff81000200,\
             phase=boot_cpu_memmap:0xffffffff81000400,\
             phase=buddy_handoff:0xffffffff81000600,\
             phase=hugetlb:0xffffffff81000b00,\
             phase=page_alloc:0xffffffff81000700,\
             phase=page_free:0xffffffff81000900"
        );
        // 6.12's and 7.3's padata chunk function opens it too.
        let with_padata = format!("{map}ffffffff82000000 t gather_bootmem_prealloc_parallel\n");
        let s2 = Symbols::parse_system_map(&with_padata).unwrap();
        assert!(Kernel::Linux
            .plugin_args(&s2, "/tmp/p.raw")
            .unwrap()
            .contains("phase=hugetlb:0xffffffff81000b00:0xffffffff82000000,"));
        // 6.1's map lacks the later kernels' names; one without any of a
        // phase's alternatives is refused, naming them.
        let old: String = map
            .lines()
            .filter(|l| !l.ends_with(" __alloc_pages"))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = Kernel::Linux
            .plugin_args(&Symbols::parse_system_map(&old).unwrap(), "/tmp/p.raw")
            .unwrap_err();
        assert!(
            e.contains("phase page_alloc: none of __alloc_frozen_pages_noprof"),
            "{e}"
        );
        let e = Kernel::Memboot.plugin_args(&s, "/tmp/p.raw").unwrap_err();
        assert!(
            e.contains("phase deferred: no function deferred_init::run"),
            "{e}"
        );
        assert!(Kernel::Linux.plugin_args(&s, "/tmp/a,b").is_err());
    }

    /// Every function the Linux phases rely on exists in each peer's real
    /// System.map fetched here (tests/linux-peer.sh --symbols): Debian's
    /// builds inline many small static functions, and a missing entry must
    /// fail here, not read 0. Says which maps it checked; none fetched is
    /// not a pass of the check, so it says that too.
    #[test]
    fn linux_phase_functions_exist_in_each_fetched_system_map() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/linux-peer");
        let mut checked = vec![];
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let map = entry.path().join("System.map");
            // The peers the bench compares with.
            if !name.starts_with("linux-") || !map.exists() {
                continue;
            }
            let s = Symbols::parse_system_map(&std::fs::read_to_string(&map).unwrap()).unwrap();
            for p in Kernel::Linux.phases() {
                p.entries(&s)
                    .unwrap_or_else(|e| panic!("{name}: phase {}: {e}", p.name));
            }
            checked.push(name);
        }
        eprintln!(
            "checked the System.map of: {checked:?} (tests/linux-peer.sh --symbols fetches them)"
        );
    }
}
