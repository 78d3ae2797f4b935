//! Out of heap memory in the middle of a memblock edit.
//!
//! memblock promises that an edit which cannot get memory returns
//! `MemblockError::OutOfMemory` and leaves both tables as they were: every
//! buffer an edit fills is sized with `try_reserve` before the first write.
//! A `Vec` that outgrows its reservation would instead call
//! `handle_alloc_error` and abort the kernel. This test binary's global
//! allocator fails the test thread's n-th allocation, for every n until the
//! edit succeeds: a too-small reservation aborts the binary, a partial write
//! shows up as a changed table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::null_mut;

use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind::*};
use memmap::memblock::{Memblock, MemblockConfig, MemblockError, MemblockRegion};

struct FailingAlloc;

thread_local! {
    /// Allocations this thread may still make; `None`: no limit. Other test
    /// threads (and the harness) are never limited.
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Spend one allocation of the budget; false when it is used up.
fn take_one() -> bool {
    BUDGET
        .try_with(|b| match b.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                b.set(Some(n - 1));
                true
            }
        })
        .unwrap_or(true)
}

// SAFETY: forwards to `System`, or fails with null as `GlobalAlloc` allows.
unsafe impl GlobalAlloc for FailingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if take_one() {
            // SAFETY: the caller's contract for `alloc`, passed on.
            unsafe { System.alloc(layout) }
        } else {
            null_mut()
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every pointer this hands out
        // does) with `layout`, the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if take_one() {
            // SAFETY: as for `dealloc`, and `new_size` per the caller.
            unsafe { System.realloc(ptr, layout, new_size) }
        } else {
            null_mut()
        }
    }
}

#[global_allocator]
static GLOBAL: FailingAlloc = FailingAlloc;

const MIB: u64 = 1 << 20;
const PAGE: u64 = 0x1000;

type Tables = (Vec<MemblockRegion>, Vec<MemblockRegion>);

fn tables(mb: &Memblock) -> Tables {
    (
        mb.memory().regions().to_vec(),
        mb.reserved().regions().to_vec(),
    )
}

/// Run `edit` on a copy of `mb` with 0, 1, 2, ... allocations allowed until
/// it succeeds. Each failure must be `OutOfMemory` with the tables
/// unchanged; the success must equal the unlimited run. Returns how many
/// budgets failed (so a test can insist the edit needed the heap at all).
fn check_edit<T: PartialEq + std::fmt::Debug>(
    mb: &Memblock,
    edit: impl Fn(&mut Memblock) -> Result<T, MemblockError>,
) -> usize {
    let mut unlimited = mb.clone();
    let expect_value = edit(&mut unlimited).unwrap();
    let expect = tables(&unlimited);
    let before = tables(mb);
    for budget in 0..64 {
        // `clone` allocates the tables with capacity == length, so any growth
        // the edit makes needs the heap.
        let mut copy = mb.clone();
        BUDGET.with(|b| b.set(Some(budget)));
        let got = edit(&mut copy);
        BUDGET.with(|b| b.set(None));
        match got {
            Ok(v) => {
                assert_eq!(v, expect_value, "budget {budget}");
                assert_eq!(tables(&copy), expect, "budget {budget}");
                return budget;
            }
            Err(MemblockError::OutOfMemory { .. }) => {
                assert_eq!(tables(&copy), before, "budget {budget}: failed edit wrote");
            }
            Err(e) => panic!("budget {budget}: {e}"),
        }
    }
    panic!("edit still failing with 64 allocations allowed");
}

/// Memory at pages [1,2), [3,4), [5,6) of each MiB below 4 MiB, and
/// reservations at 8 MiB and 10 MiB.
fn fragmented() -> Memblock {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    for mib in 0..4 {
        for page in [1, 3, 5] {
            mb.add(mib * MIB + page * PAGE, PAGE, 0).unwrap();
        }
    }
    mb.reserve(8 * MIB, PAGE).unwrap();
    mb.reserve(10 * MIB, PAGE).unwrap();
    mb
}

#[test]
fn add_of_new_disjoint_memory_survives_oom() {
    // Overlaps nothing: the table grows by one region.
    let failed = check_edit(&fragmented(), |mb| mb.add(16 * MIB, MIB, 0));
    assert!(failed > 0);
}

#[test]
fn add_filling_several_gaps_survives_oom() {
    // [0, 7 pages) around three regions: four gap pieces and three kept
    // regions, seven pieces that merge into one.
    let failed = check_edit(&fragmented(), |mb| mb.add(0, 7 * PAGE, 0));
    assert!(failed > 0);
    let mut mb = fragmented();
    mb.add(0, 7 * PAGE, 0).unwrap();
    assert_eq!(
        (mb.memory().regions()[0].base, mb.memory().regions()[0].size),
        (0, 7 * PAGE)
    );
}

#[test]
fn remove_of_a_whole_region_between_neighbours_survives_oom() {
    // Drops [MiB + 3 pages, + 1 page) exactly: nothing of it is kept, only
    // its neighbours are rewritten.
    let failed = check_edit(&fragmented(), |mb| mb.remove(MIB + 3 * PAGE, PAGE));
    assert!(failed > 0);
}

#[test]
fn remove_splitting_a_region_survives_oom() {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0, 4 * MIB, 0).unwrap();
    let failed = check_edit(&mb, |mb| mb.remove(MIB, PAGE));
    assert!(failed > 0);
}

#[test]
fn reserve_and_free_survive_oom() {
    let mb = fragmented();
    assert!(check_edit(&mb, |mb| mb.reserve(12 * MIB, PAGE)) > 0);
    assert!(check_edit(&mb, |mb| mb.reserve(7 * MIB, 4 * MIB)) > 0);
    assert!(check_edit(&mb, |mb| mb.free(8 * MIB, PAGE)) > 0);
    assert!(check_edit(&mb, |mb| mb.alloc(PAGE, 0, None)) > 0);
}

#[test]
fn from_firmware_and_affinity_survive_oom() {
    let map = [
        FirmwareEntry::new(0, 0x9fc00, Usable),
        FirmwareEntry::new(MIB, 63 * MIB, Usable),
        FirmwareEntry::new(8 * MIB, MIB, Bootloader),
        FirmwareEntry::new(20 * MIB, MIB, Reserved),
        FirmwareEntry::new(128 * MIB, 128 * MIB, Usable),
    ];
    let expect = Memblock::from_firmware(map, MemblockConfig::default()).unwrap();
    let mut failed = 0;
    loop {
        BUDGET.with(|b| b.set(Some(failed)));
        let got = Memblock::from_firmware(map, MemblockConfig::default());
        BUDGET.with(|b| b.set(None));
        match got {
            Ok((mb, report)) => {
                assert_eq!(tables(&mb), tables(&expect.0));
                assert_eq!(report, expect.1);
                break;
            }
            Err(e) => assert!(matches!(e, MemblockError::OutOfMemory { .. }), "{e}"),
        }
        failed += 1;
        assert!(failed < 64, "from_firmware still failing");
    }
    assert!(failed > 0);

    let affinity = [
        NodeAffinity::new(0, 32 * MIB, 0),
        NodeAffinity::new(32 * MIB, 224 * MIB, 1),
    ];
    let (mb, report) = expect;
    let failed = check_edit(&mb, |mb| {
        let mut report = report;
        mb.apply_affinity(affinity, &mut report).map(|()| report)
    });
    assert!(failed > 0);
}
