//! One definition of "memory is ready" (`allocatable_ns`) and of the work
//! done by then, in every mode, checked on real boots: the struct pages
//! written are compared with the pages of the present sections counted from
//! the logged firmware map (Linux writes exactly those before it is ready),
//! and the moment is placed against the phases the summary records.

use std::time::Duration;

use memboot_tests::{boot, exit_code, Boot};

const WALL: Duration = Duration::from_secs(300);

fn boot_ok(opts: &[&str]) -> Boot {
    let b = boot(&["-m", "2G", "--smp", "2"], opts, WALL);
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    b
}

/// `[start_ns, end_ns]` of every phase named `phase`.
fn spans(b: &Boot, phase: &str) -> Vec<(u64, u64)> {
    b.summary_json()["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter(|p| p["phase"] == phase)
        .map(|p| {
            (
                p["start_ns"].as_u64().unwrap(),
                p["end_ns"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn deferred_is_ready_once_every_struct_page_is_written() {
    let b = boot_ok(&["memmap=deferred"]);
    let all = b.firmware_section_pages();
    assert_eq!(b.summary().pages_initialised_at_allocatable, all);
    assert_eq!(b.summary().pages_initialised, all);
    // Ready when the boot CPU is back from waiting for the workers.
    let ready = b.summary().allocatable_ns;
    let workers = spans(&b, "deferred_init");
    assert!(!workers.is_empty(), "{}", b.describe());
    assert!(
        workers.iter().all(|&(_, end)| end <= ready),
        "{workers:?} vs {ready}"
    );
    assert!(spans(&b, "alloc_test")
        .iter()
        .all(|&(start, _)| start >= ready));
    assert_eq!(b.summary().drain_ns, 0);
}

#[test]
fn ondemand_is_ready_before_most_struct_pages_are_written() {
    let b = boot_ok(&["memmap=ondemand"]);
    let all = b.firmware_section_pages();
    let at_ready = b.summary().pages_initialised_at_allocatable;
    let at_end = b.summary().pages_initialised;
    // Boot writes no struct page at all: not even holes, which the lazy
    // vmemmap writes with their sections.
    assert_eq!(at_ready, 0, "{}", b.describe());
    assert_eq!(b.summary().hole_pages, 0);
    // What the allocation test grew comes on top, with the holes of the
    // sections mapped by the end: verification reads every hole, so all of
    // them (as the model of the logged map counts them), each once; the
    // rest stays untouched: written + untouched pool = every struct page.
    let holes: u64 = b.model().zones.iter().map(|z| z.holes).sum();
    assert!(holes > 0, "the first MiB's holes");
    assert_eq!(b.summary().hole_pages_on_first_use, holes);
    assert_eq!(at_end, holes + b.summary().grown_pages);
    assert!(at_end < all, "{at_end} of {all}");
    let ready = b.summary().allocatable_ns;
    assert!(spans(&b, "alloc_test")
        .iter()
        .all(|&(start, _)| start >= ready));
    // The growth steps the test took, and their cost per step.
    let steps = b.summary().grow_step_count;
    assert!(steps > 0, "{}", b.describe());
    let grow_steps: u64 = b.summary_json()["alloc_grow_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(steps, grow_steps, "every growth step timed once");
    let (p50, p99) = (b.summary().grow_step_p50_ns, b.summary().grow_step_p99_ns);
    assert!(0 < p50 && p50 <= p99 && p99 <= b.summary().grow_step_max_ns);
    assert!(b.has_message("alloc_test: growth: "), "{}", b.describe());
}

#[test]
fn the_drain_has_its_own_keys_and_comes_after_ready() {
    let b = boot_ok(&["memmap=ondemand", "ondemand_drain=on"]);
    assert_eq!(b.summary().deferred_ns, 0, "the drain is not deferred init");
    assert_eq!(b.summary().deferred_workers, 0);
    assert!(spans(&b, "deferred_init").is_empty());
    assert!(b.summary().drain_ns > 0);
    assert!(b.summary().drain_workers > 0);
    let ready = b.summary().allocatable_ns;
    let drains = spans(&b, "drain");
    assert!(!drains.is_empty(), "{}", b.describe());
    assert!(drains.iter().all(|&(start, _)| start >= ready));
    // The drain ends with every struct page written.
    assert_eq!(b.summary().pages_initialised, b.firmware_section_pages());
    assert_eq!(b.summary().pool_pages, 0);
    // drain_ns spans the drain's first claim to its last.
    let (first, last) = (
        drains.iter().map(|s| s.0).min().unwrap(),
        drains.iter().map(|s| s.1).max().unwrap(),
    );
    assert_eq!(b.summary().drain_ns, last - first);
}

#[test]
fn touch_is_never_ready() {
    let b = boot_ok(&["memmap=touch", "alloc_test=0"]);
    assert_eq!(b.summary().allocatable_ns, 0, "no allocator");
    assert_eq!(b.summary().pages_initialised_at_allocatable, 0);
    // One store per present page: every present page of the map.
    assert_eq!(b.summary().pages_initialised, b.firmware_ram_pages());
}
