//! Every kind of damage verification claims to catch, done on purpose in a
//! real boot (`test_fault=`), in a faithful mode and in `memmap=ondemand`:
//! each boot must end with status `verify`, exit 1, and a verification
//! message naming the PFN or section the fault's own log line names. The
//! expectation comes from the fault's line (what was damaged), not from
//! verification's output (what was found).
use std::time::Duration;

use memboot_tests::{boot, exit_code, Boot};

const WALL: Duration = Duration::from_secs(300);

/// Boot 1G with `opts`, expect a verification failure.
fn failing_verification(opts: &[&str]) -> Boot {
    let b = boot(&["-m", "1G", "--smp", "2"], opts, WALL);
    assert_eq!(
        b.run.exit_code,
        exit_code::KERNEL_FAILURE,
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().status, "verify", "{}", b.describe());
    assert_eq!(b.summary().verify, "failed", "{}", b.describe());
    assert!(b.has_message("verify: FAILED"), "{}", b.describe());
    b
}

/// The `0x…` number after `prefix` in the first message containing it.
fn hex_after(b: &Boot, prefix: &str) -> u64 {
    let m = b
        .messages_with(prefix)
        .next()
        .unwrap_or_else(|| panic!("no '{prefix}' line\n{}", b.describe()));
    let rest = &m[m.find(prefix).unwrap() + prefix.len()..];
    let hex: String = rest
        .trim_start_matches("0x")
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u64::from_str_radix(&hex, 16).unwrap_or_else(|_| panic!("no number in '{m}'"))
}

fn corrupt_page(mode: &str) {
    let b = failing_verification(&[mode, "test_fault=corrupt_page"]);
    let pfn = hex_after(&b, "test_fault: corrupted the struct page of pfn ");
    assert!(
        b.has_message(&format!("verify: pfn {pfn:#x}: ")),
        "verification names the corrupted pfn {pfn:#x}\n{}",
        b.describe()
    );
}

#[test]
fn corrupt_page_deferred() {
    corrupt_page("memmap=deferred");
}

/// With `ondemand` the page is one a growth step initialised: the
/// allocation test grew windows, and the corrupted pfn lies above the
/// eager part (the boot CPU initialised only the first 128 MiB section of
/// the highest zone, DMA32 here).
#[test]
fn corrupt_page_ondemand_on_a_grown_page() {
    let b = failing_verification(&["memmap=ondemand", "test_fault=corrupt_page"]);
    let pfn = hex_after(&b, "test_fault: corrupted the struct page of pfn ");
    assert!(b.summary().grown_pages > 0, "{}", b.describe());
    let dma32_first_section_end = (16u64 << 20 >> 12).next_multiple_of(32768) + 32768;
    assert!(
        pfn >= dma32_first_section_end,
        "pfn {pfn:#x} is in the pool part, initialised by growth\n{}",
        b.describe()
    );
    assert!(
        b.has_message(&format!("verify: pfn {pfn:#x}: ")),
        "{}",
        b.describe()
    );
}

fn double_init(mode: &str) {
    let b = failing_verification(&[mode, "test_fault=double_init"]);
    let line = b
        .messages_with("test_fault: initialised the block window at pfn ")
        .next()
        .unwrap_or_else(|| panic!("no double_init line\n{}", b.describe()))
        .to_string();
    let section: u64 = line
        .split("(section ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no section in '{line}'"));
    let pfn = hex_after(&b, "test_fault: initialised the block window at pfn ");
    assert_eq!(section, pfn >> 15, "128 MiB sections of 32768 pages");
    // Verification names the chunk (a section with workers, a zone of the
    // node with a pool) whose windows hold the doubled one.
    let chunk = |m: &str| -> Option<(u64, u64)> {
        let range = m.split(" chunk ").nth(1)?.split(':').next()?;
        let (start, end) = range.split_once("..")?;
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        Some((hex(start)?, hex(end)?))
    };
    assert!(
        b.messages_with("initialised twice")
            .any(|m| m.starts_with("verify: node ")
                && chunk(m).is_some_and(|(start, end)| start <= pfn && pfn < end)),
        "verification names a chunk holding pfn {pfn:#x}\n{}",
        b.describe()
    );
}

#[test]
fn double_init_deferred() {
    double_init("memmap=deferred");
}

#[test]
fn double_init_ondemand() {
    double_init("memmap=ondemand");
}

fn list_corrupt(mode: &str) {
    let b = failing_verification(&[mode, "test_fault=list_corrupt"]);
    let target = hex_after(&b, "test_fault: made the allocator list pfn ");
    let head = hex_after(&b, " of the free block at pfn ");
    assert_eq!(target, head + 1, "{}", b.describe());
    assert!(
        b.messages_with(&format!("verify: pfn {target:#x}: expected head of a free"))
            .any(|m| m.contains("not PageBuddy")),
        "verification names the link target {target:#x}\n{}",
        b.describe()
    );
}

#[test]
fn list_corrupt_deferred() {
    list_corrupt("memmap=deferred");
}

#[test]
fn list_corrupt_ondemand() {
    list_corrupt("memmap=ondemand");
}

/// `opts` (a pool mode) with `test_fault=pool_overlap`: verification
/// names the pfn the fault freed into the pool.
fn pool_overlap(opts: &[&str]) {
    let mut opts = opts.to_vec();
    opts.push("test_fault=pool_overlap");
    let b = failing_verification(&opts);
    let pfn = hex_after(&b, "test_fault: freed pfn ");
    assert!(
        b.messages_with(&format!(
            "free order-0 block {pfn:#x} lies in untouched pool memory"
        ))
        .next()
        .is_some(),
        "verification names pfn {pfn:#x}\n{}",
        b.describe()
    );
}

#[test]
fn pool_overlap_ondemand() {
    pool_overlap(&["memmap=ondemand"]);
}

/// A mode without a pool refuses the fault before anything boots further.
#[test]
fn pool_overlap_deferred_is_refused() {
    let b = boot(
        &["-m", "1G", "--smp", "2"],
        &["test_fault=pool_overlap"],
        WALL,
    );
    assert_eq!(
        b.run.exit_code,
        exit_code::KERNEL_FAILURE,
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().status, "bad_option");
    assert!(
        b.has_message(
            "Kernel command line rejected: option test_fault=pool_overlap does nothing with memmap=deferred (the default): "
        ),
        "{}",
        b.describe()
    );
}

// The damage that reads the layout's own fields (flags, list links, page
// type and order), over 32- and 8-byte struct pages, one mode each; at 8
// bytes corrupt_page flips a page's type and list_corrupt sets a free
// bitmap's bit for a page that heads no free block. double_init is seen by
// the init counters, not the pages. The host suite runs every fault in
// both modes at every size.

#[test]
fn corrupt_page_32_byte_struct_pages() {
    corrupt_page("memmap=deferred struct_page=32");
}

#[test]
fn list_corrupt_32_byte_struct_pages() {
    list_corrupt("memmap=deferred struct_page=32");
}

#[test]
fn pool_overlap_32_byte_struct_pages() {
    pool_overlap(&["memmap=ondemand", "struct_page=32"]);
}

#[test]
fn corrupt_page_8_byte_struct_pages() {
    corrupt_page("memmap=deferred struct_page=8");
}

#[test]
fn list_corrupt_8_byte_struct_pages() {
    list_corrupt("memmap=deferred struct_page=8");
}

#[test]
fn pool_overlap_8_byte_struct_pages() {
    pool_overlap(&["memmap=ondemand", "struct_page=8"]);
}
