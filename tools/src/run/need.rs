//! The host-memory model: how much host memory a boot needs, in MiB (the
//! constants and why each value: [`memboot_contract::host_memory`]). A boot
//! that needs more than the host has available is refused before QEMU
//! starts ([`refusal`]).

use deferred_init::free_bitmap_bytes;
use memboot_contract::host_memory::{
    LINUX_BASE_MIB, LINUX_PER_TIB_MIB, LOW_ZONES_MIB, QEMU_BASE_MIB, QEMU_PER_TIB_MIB, SECTION_MIB,
    WINDOW_MIB,
};
use memboot_contract::hugepage_forms::{self, HugePageSize, Pages};
use memboot_contract::option_values::{BuddyStore, StructPageSize};
use memboot_contract::options::{Drain, MemmapMode, Options, ALLOC_TEST_DEFAULT_BYTES};
use memboot_kernel::pipeline::mode::ModePlan;
use memmap::hugetlb::hvo;

/// The virtual machine: its RAM per NUMA node and its vCPUs.
#[derive(Clone, Copy, Debug)]
pub struct Machine<'a> {
    pub node_mib: &'a [u64],
    pub smp: u64,
}

impl Machine<'_> {
    pub fn mem_mib(&self) -> u64 {
        self.node_mib.iter().sum()
    }
    fn nodes(&self) -> u64 {
        self.node_mib.len() as u64
    }
    /// `mib_per_tib` MiB per TiB of this guest's RAM, rounded up.
    fn per_tib(&self, mib_per_tib: u64) -> u64 {
        (mib_per_tib * self.mem_mib()).div_ceil(1 << 20)
    }
    /// QEMU's own memory.
    pub fn qemu_own_mib(&self) -> u64 {
        QEMU_BASE_MIB + self.per_tib(QEMU_PER_TIB_MIB)
    }
}

/// What boots.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// memboot with the options its grammar accepted.
    Memboot(Options),
    /// memboot with options its grammar refuses (why): it fails the boot
    /// (bad_option) before it writes any struct page.
    MembootRefusing(String),
    /// A stock Linux kernel, which writes every struct page (64 bytes):
    /// an upper bound, as 1 GiB huge pages only lower it (6.9 and later
    /// leave most of their tails unwritten, `crate::hugetlb_log`; HVO then
    /// frees their vmemmap), so no boot that fits is refused. memboot
    /// writes every struct page of its huge pages (phase `hugetlb`).
    Linux,
}

/// Which struct pages a boot writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StructPages {
    /// Every one: the faithful modes, ondemand with its drain, Linux.
    All,
    /// Plain `memmap=ondemand`: its eager part, what its allocation test
    /// initialises and its 1 GiB pages' struct pages (HVO's kept pages and
    /// tables with `hugetlb_free_vmemmap=on`), in MiB.
    OnDemand {
        eager_mib: u64,
        alloc_mib: u64,
        huge_mib: u64,
    },
    /// None: the kernel refuses its options first.
    None,
}

/// A boot's need, and its parts for the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub total_mib: u64,
    pub writes: StructPages,
    /// The struct pages written.
    pub struct_mib: u64,
    /// Guest RAM per MiB of struct pages (64, 128 at struct_page=32, 512
    /// at struct_page=8).
    pub ram_per_struct: u64,
    /// The buddy allocator's free bitmaps (`buddy=bitmaps`), 0 with lists.
    pub bitmap_mib: u64,
    pub qemu_mib: u64,
    /// Linux's own, beyond struct pages (0 for memboot).
    pub linux_mib: u64,
    /// Struct pages of 1 GiB pages HVO leaves unbacked, left out of
    /// `struct_mib`.
    pub hvo_unbacked_mib: u64,
    /// All guest RAM, backed before the boot (`--host-memory prefault`).
    pub prefault: bool,
}

impl Need {
    /// What the need is made of, for the dry run and the refusal.
    pub fn parts(&self, mem_mib: u64) -> String {
        if self.prefault {
            return format!("{mem_mib} MiB of guest RAM, all backed before the boot (--host-memory prefault), + {} MiB for QEMU itself", self.qemu_mib);
        }
        let mut parts = format!("{} MiB of struct pages", self.struct_mib);
        if self.hvo_unbacked_mib > 0 {
            parts += &format!(
                " (HVO leaves {} MiB of the 1 GiB pages' unbacked)",
                self.hvo_unbacked_mib
            );
        }
        if self.bitmap_mib > 0 {
            parts += &format!(" + {} MiB of free bitmaps", self.bitmap_mib);
        }
        parts += &format!(" + {} MiB for QEMU itself", self.qemu_mib);
        if self.linux_mib > 0 {
            parts += &format!(" + {} MiB for Linux's own", self.linux_mib);
        }
        parts
    }
}

/// The struct pages plain `memmap=ondemand` writes, in MiB: the low zones
/// and one section per node eagerly, and what an allocation test of
/// `alloc_test_bytes` per node initialises.
fn ondemand_struct_mib(m: &Machine, alloc_test_bytes: u64, ram_per_struct: u64) -> (u64, u64) {
    let eager_ram_mib = m.mem_mib().min(LOW_ZONES_MIB)
        + m.node_mib.iter().map(|&n| n.min(SECTION_MIB)).sum::<u64>();
    // alloc_test= on every node, at most half of each node (the kernel
    // caps it there), plus a block window per CPU per node.
    let per_node_mib = alloc_test_bytes.div_ceil(1 << 20);
    let alloc_ram_mib = if per_node_mib == 0 {
        0
    } else {
        m.node_mib
            .iter()
            .map(|&n| per_node_mib.min(n / 2))
            .sum::<u64>()
            + m.smp * m.nodes() * WINDOW_MIB
    };
    (
        eager_ram_mib.div_ceil(ram_per_struct),
        alloc_ram_mib.div_ceil(ram_per_struct),
    )
}

/// Whole 1 GiB frames of a node of `node_mib` that surely stay free
/// until the kernel reserves its 1 GiB pages: an unaligned start or end
/// loses one, memblock's top-down allocations before the reservation may
/// take the top one, and on node 0 the first GiB holds the firmware's
/// holes and the kernel, and the PCI hole splits its RAM.
fn surely_free_frames(nid: usize, node_mib: u64) -> u64 {
    let not_sure = if nid == 0 { 4 } else { 2 };
    (node_mib >> 10).saturating_sub(not_sure)
}

/// The 1 GiB pages a boot gets, bounded: the kernel reserves as many as
/// fit of what the command line asks (`memmap::hugetlb::reserve_gigantic`);
/// the host knows each node's size, not its free frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GiganticPages {
    /// Surely reserved (a node's `surely_free_frames` at most).
    pub at_least: u64,
    /// Reserved at most (a node's whole 1 GiB frames at most).
    pub at_most: u64,
    /// `hugetlb_free_vmemmap=on`, in a mode HVO applies in.
    pub hvo: bool,
}

/// The 1 GiB pages `o` asks for on `machine`, read as the kernel reads
/// the command line (`hugepage_forms::plan`; memboot runs only on CPUs
/// with 1 GiB pages).
pub fn gigantic_pages(machine: &Machine, o: &Options) -> GiganticPages {
    let plan = hugepage_forms::plan(
        &o.hugetlb,
        hugepage_forms::Machine {
            has_1g_pages: true,
            nodes: machine.node_mib.len() as u32,
        },
    );
    let Some(size) = plan.sizes.iter().find(|s| s.size == HugePageSize::Gib1) else {
        return GiganticPages::default();
    };
    let frames = |bound: &dyn Fn(usize, u64) -> u64| -> Vec<u64> {
        let nodes = machine.node_mib.iter().enumerate();
        nodes.map(|(nid, &mib)| bound(nid, mib)).collect()
    };
    let granted = |free: Vec<u64>| match &size.pages {
        Pages::Total(n) => (*n).min(free.iter().sum()),
        Pages::PerNode(asked) => asked
            .iter()
            .map(|&(nid, n)| n.min(free.get(nid as usize).copied().unwrap_or(0)))
            .sum(),
    };
    GiganticPages {
        at_least: granted(frames(&surely_free_frames)),
        at_most: granted(frames(&|_, mib| mib >> 10)),
        hvo: plan.hvo && ModePlan::of(o.memmap).has_hvo(),
    }
}

/// MiB of host memory HVO's frames for `pages` 1 GiB pages take (packed
/// per node; each node's block may straddle one more 2 MiB host page).
fn hvo_frames_mib(pages: u64, page_bytes: u64, nodes: u64) -> u64 {
    let bytes = pages * hvo::frames_per_page(page_bytes) * memmap::PAGE_SIZE;
    bytes.div_ceil(1 << 20) + 2 * nodes
}

/// The host memory `kernel` booted on `machine` needs.
pub fn need(machine: &Machine, kernel: &Kernel, prefault: bool) -> Need {
    let mem_mib = machine.mem_mib();
    let struct_page = match kernel {
        Kernel::Memboot(o) => o.struct_page,
        _ => StructPageSize::Bytes64,
    };
    let ram_per_struct = 4096 / struct_page.bytes();
    let all_mib = mem_mib.div_ceil(ram_per_struct);
    let (writes, struct_mib, hvo_unbacked_mib) = match kernel {
        Kernel::Memboot(o) => memboot_struct_mib(machine, o, ram_per_struct),
        Kernel::MembootRefusing(_) => (StructPages::None, 0, 0),
        Kernel::Linux => (StructPages::All, all_mib, 0),
    };
    let qemu_mib = machine.qemu_own_mib();
    let bitmap_mib = match kernel {
        Kernel::Memboot(o) if o.buddy_store() == BuddyStore::Bitmaps => {
            free_bitmap_bytes(mem_mib << 8, machine.nodes()).div_ceil(1 << 20)
        }
        _ => 0,
    };
    let linux_mib = match kernel {
        Kernel::Linux => LINUX_BASE_MIB + machine.per_tib(LINUX_PER_TIB_MIB),
        _ => 0,
    };
    // --host-memory prefault backs all guest RAM before the boot: what the
    // kernel writes is inside it.
    let total_mib = if prefault {
        mem_mib + qemu_mib
    } else {
        struct_mib + bitmap_mib + qemu_mib + linux_mib
    };
    Need {
        total_mib,
        writes,
        struct_mib,
        ram_per_struct,
        bitmap_mib,
        qemu_mib,
        linux_mib,
        hvo_unbacked_mib,
        prefault,
    }
}

/// The struct pages memboot with `o` writes, in MiB, and those HVO leaves
/// unbacked: every one but, with HVO, the 1 GiB pages' beyond their kept
/// pages (only the pages surely reserved are left out); plain `ondemand`
/// its eager part, its allocation test's and the 1 GiB pages' (those that
/// may be reserved).
fn memboot_struct_mib(m: &Machine, o: &Options, ram_per_struct: u64) -> (StructPages, u64, u64) {
    let all_mib = m.mem_mib().div_ceil(ram_per_struct);
    let huge = gigantic_pages(m, o);
    let page_bytes = o.struct_page.bytes();
    let huge_struct_mib = |pages: u64| pages * (1024 / ram_per_struct);
    if o.memmap == MemmapMode::OnDemand && o.ondemand_drain == Drain::Off {
        let (eager_mib, alloc_mib) = ondemand_struct_mib(m, o.alloc_test_bytes, ram_per_struct);
        let huge_mib = if huge.hvo {
            hvo_frames_mib(huge.at_most, page_bytes, m.nodes())
        } else {
            huge_struct_mib(huge.at_most)
        };
        let writes = StructPages::OnDemand {
            eager_mib,
            alloc_mib,
            huge_mib,
        };
        return (writes, (eager_mib + alloc_mib + huge_mib).min(all_mib), 0);
    }
    if !huge.hvo || huge.at_least == 0 {
        return (StructPages::All, all_mib, 0);
    }
    let unbacked = huge_struct_mib(huge.at_least).saturating_sub(hvo_frames_mib(
        huge.at_least,
        page_bytes,
        m.nodes(),
    ));
    (StructPages::All, all_mib - unbacked, unbacked)
}

/// What plain `memmap=ondemand` with the default allocation test would
/// need instead, for the refusal's suggestion.
fn ondemand_need_mib(machine: &Machine, ram_per_struct: u64) -> u64 {
    let all_mib = machine.mem_mib().div_ceil(ram_per_struct);
    let (eager, alloc) = ondemand_struct_mib(machine, ALLOC_TEST_DEFAULT_BYTES, ram_per_struct);
    (eager + alloc).min(all_mib) + machine.qemu_own_mib()
}

/// `bytes` as a size the kernel reads back (`alloc_test=`): in the largest
/// unit that divides it.
fn size_text(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Why a boot that needs `need` cannot start where `have` (e.g. "this host
/// has N MiB available (MemAvailable)") says so; `mem` is `-m` as given.
pub fn refusal(machine: &Machine, kernel: &Kernel, need: &Need, mem: &str, have: &str) -> String {
    let total = need.total_mib;
    let parts = need.parts(machine.mem_mib());
    let ondemand = || ondemand_need_mib(machine, need.ram_per_struct);
    if need.prefault {
        return format!("-m {mem} with --host-memory prefault: the boot needs {total} MiB of host memory ({parts}) and {have}. Boot a smaller -m, or in another host-memory state (cold backs only what the boot writes).");
    }
    match (kernel, need.writes) {
        (Kernel::Linux, _) => format!("-m {mem} with Linux writes every struct page: the boot needs {total} MiB of host memory ({parts}) and {have}. Boot a smaller -m, or memboot with memmap=ondemand (struct pages initialised when first allocated; it would need {} MiB).", ondemand()),
        (Kernel::Memboot(o), StructPages::All) => {
            let what = if o.memmap == MemmapMode::OnDemand {
                "memmap=ondemand ondemand_drain=on".to_string()
            } else {
                format!("memmap={}", o.memmap.name())
            };
            let hvo = match need.hvo_unbacked_mib {
                0 => String::new(),
                n => format!(" less {n} MiB HVO leaves unbacked"),
            };
            format!("-m {mem} with {what} writes every struct page: the boot needs {total} MiB of host memory ({} MiB of struct pages, RAM/{}{hvo}, + {} MiB for QEMU itself) and {have}. Boot it with memmap=ondemand (struct pages initialised when first allocated; it would need {} MiB), or a smaller -m.", need.struct_mib, need.ram_per_struct, need.qemu_mib, ondemand())
        }
        (Kernel::Memboot(o), StructPages::OnDemand { eager_mib, alloc_mib, huge_mib }) if alloc_mib > 0 => format!("-m {mem} with memmap=ondemand alloc_test={} initialises the struct pages of what the allocation test allocates on {} node(s): the boot needs {total} MiB of host memory ({} MiB of struct pages: {eager_mib} MiB eager, {alloc_mib} MiB for alloc_test, {huge_mib} MiB for 1 GiB pages; + {} MiB for QEMU itself) and {have}. Give a smaller alloc_test= per node (alloc_test=0 skips the test), or a smaller -m.", size_text(o.alloc_test_bytes), machine.nodes(), need.struct_mib, need.qemu_mib),
        (Kernel::MembootRefusing(_), _) => format!("-m {mem}, whose kernel options the kernel refuses before it writes a struct page: the boot needs {total} MiB of host memory ({parts}) and {have}. Boot a smaller -m."),
        _ => format!("-m {mem} with memmap=ondemand and no allocation test: the boot needs {total} MiB of host memory ({parts}) and {have}. Boot a smaller -m."),
    }
}

/// The dry run's line on which struct pages the boot writes (tests/bench.sh
/// reads it), after `run-qemu.sh: `.
pub fn struct_pages_line(need: &Need) -> String {
    match need.writes {
        StructPages::All if need.hvo_unbacked_mib > 0 => format!(
            "struct pages: every one written but those of the 1 GiB pages HVO leaves unbacked ({} MiB of host memory)",
            need.struct_mib
        ),
        StructPages::All => format!(
            "struct pages: every one written ({} MiB of host memory)",
            need.struct_mib
        ),
        StructPages::OnDemand { .. } => "struct pages: initialised when first allocated".into(),
        StructPages::None => {
            "struct pages: none written (the kernel refuses its options first)".into()
        }
    }
}
