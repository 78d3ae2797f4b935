//! The memory-init pipeline booted for real: struct pages of every present
//! page initialised, verified and on the buddy lists, at sizes from 1G to
//! 1T, for every strategy. Assertions are on counts and log structure only;
//! the timings in the summary are for the bench (tests/bench.sh), not here.

use std::time::Duration;

use memboot_tests::{boot, exit_code, Boot};

/// Pages per 128 MiB section.
const PAGES_PER_SECTION: u64 = 32768;

fn describe(b: &Boot) -> String {
    b.describe()
}

/// Everything a successful full-verification boot must show.
fn assert_verified(b: &Boot, strategy: &str, nodes: u64) {
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", describe(b));
    assert_eq!(b.summary().status, "ok", "{}", describe(b));
    assert_eq!(b.summary().strategy, strategy);
    assert_eq!(b.summary().verify, "ok", "{}", describe(b));
    assert!(b.has_message("verify: ok:"), "{}", describe(b));
    let present = b.summary().present_pages;
    let eager = b.summary().eager_pages;
    let deferred = b.summary().deferred_pages;
    assert_eq!(
        eager + deferred,
        present,
        "eager + deferred must be exactly the present pages"
    );
    // Present pages, computed here from the logged firmware map (memblock's
    // rules: RAM merges, then rounds inward to pages), not from any count
    // the kernel printed.
    assert_eq!(
        present,
        b.firmware_ram_pages(),
        "present_pages must be the RAM pages of the logged memory map\n{}",
        describe(b)
    );
    // Every figure against the model of this boot's own logged firmware
    // map, SRAT, heap and options (memboot_tests::model, computed in the
    // test by the README's rules). All exact: present, low-zone, eager and
    // deferred pages (the deferral rule), hole pages, vmemmap bytes (2 MiB
    // per present section), memory blocks, reserved and free pages. Free =
    // present − reserved, where reserved counts the first MiB, the
    // bootloader's in-use lines and the heap (each rounded out to pages,
    // present pages only), the struct pages (vmemmap_bytes / 4096) and the
    // page tables mapping them (a page directory per 512 present sections'
    // GiB of vmemmap area, a PDPT per 512 GiB): all countable from the log. The
    // eager `reserved_pages` and the per-zone split also depend on where
    // memblock put the struct pages, which the model places by Linux's
    // top-down rule.
    let model = b.model();
    b.assert_summary_matches(&model);
    // One `verify: node N zone Z: P present, I initialised, R reserved, F
    // free (…)` line per populated zone, each equal to the model's zone:
    // P its present pages, I = P, R its reserved pages, F = P − R.
    let zones = b.verify_zone_lines();
    assert!(
        !zones.is_empty(),
        "no per-zone verify lines\n{}",
        describe(b)
    );
    b.assert_zone_lines_match(&model);
    let free = b.summary().free_pages;
    assert_eq!(zones.iter().map(|z| z.free).sum::<u64>(), free);
    assert_eq!(b.summary().nodes, nodes);
    assert!(b.summary().nr_memory_blocks > 0);
    assert!(
        b.has_message("x86/mm: Memory block size: "),
        "{}",
        describe(b)
    );
    assert_eq!(
        b.summary_json()["node_deferred_ns"]
            .as_array()
            .unwrap()
            .len() as u64,
        nodes
    );
}

/// With `deferred`, one `node N deferred pages initialised` line per node
/// that has deferred memory, and the workers did all of it.
fn assert_deferred_lines(b: &Boot, nodes_with_deferred: u64) {
    let lines = b
        .messages_with("deferred pages initialised in ")
        .filter(|m| m.starts_with("node "))
        .count() as u64;
    assert_eq!(lines, nodes_with_deferred, "{}", describe(b));
    assert!(
        b.has_message("deferred pages initialised: "),
        "{}",
        describe(b)
    );
}

/// The regression gate that needs no clock: `deferred` initialises the low
/// zones and at most the first section (plus the alignment remainder of the
/// section it starts in) of each node's highest zone, whatever the RAM size.
fn eager_within_gate(b: &Boot) -> bool {
    let nodes = b.summary().nodes;
    b.summary().eager_pages <= b.summary().low_zone_pages + 2 * PAGES_PER_SECTION * nodes
}

#[test]
fn deferred_1g_one_cpu() {
    let b = boot(&["-m", "1G", "--smp", "1"], &[], Duration::from_secs(300));
    assert_verified(&b, "deferred", 1);
    assert_deferred_lines(&b, 1);
    assert!(eager_within_gate(&b), "{}", describe(&b));
}

#[test]
fn deferred_64g_two_nodes_four_cpus() {
    let b = boot(
        &["-m", "64G", "--smp", "4", "--nodes", "2"],
        &[],
        Duration::from_secs(600),
    );
    assert_verified(&b, "deferred", 2);
    assert_deferred_lines(&b, 2);
    assert!(eager_within_gate(&b), "{}", describe(&b));
    assert_eq!(
        b.summary().deferred_workers,
        4,
        "one worker per CPU of each node"
    );
    assert!(
        b.has_message("vmemmap: node 1: "),
        "node 1's struct pages live on node 1\n{}",
        describe(&b)
    );
}

#[test]
fn deferred_256g_with_memory_only_nodes() {
    // 4 nodes of 64G, 2 vCPUs: nodes 0 and 1 have a CPU each, 2 and 3 are
    // memory-only and must be served by the others' CPUs.
    let b = boot(
        &["-m", "256G", "--smp", "2", "--nodes", "4"],
        &[],
        Duration::from_secs(900),
    );
    assert_verified(&b, "deferred", 4);
    assert_deferred_lines(&b, 4);
    assert!(
        eager_within_gate(&b),
        "eager pages must not grow with RAM\n{}",
        describe(&b)
    );
    for node in 0..4 {
        assert!(
            b.has_message(&format!("node {node} deferred pages initialised in ")),
            "{}",
            describe(&b)
        );
    }
}

#[test]
fn deferred_1t() {
    let b = boot(&["-m", "1T", "--smp", "2"], &[], Duration::from_secs(1800));
    assert_verified(&b, "deferred", 1);
    assert_deferred_lines(&b, 1);
    assert!(eager_within_gate(&b), "{}", describe(&b));
    // The platform side of a 1 TiB boot (the only 1T boot in the suite):
    // QEMU moves RAM above 4 GiB to 1 TiB here; usable RAM is still the -m
    // size minus firmware holes (< 16 MiB, see boot.rs).
    let mem = b.summary().mem_bytes;
    assert!(
        mem <= 1 << 40 && (1u64 << 40) - mem <= 16 << 20,
        "mem_bytes {mem}\n{}",
        describe(&b)
    );
    assert_eq!(b.summary().cpus, 2);
    assert!(
        b.has_message("[mem 0x0000010000000000-"),
        "RAM relocated above 1 TiB\n{}",
        describe(&b)
    );
    assert!(
        b.summary().present_pages > 260_000_000,
        "a 1 TiB guest has ~268M pages"
    );
}

#[test]
fn regions_64g_initialises_everything_eagerly_and_trips_the_gate() {
    let b = boot(
        &["-m", "64G", "--smp", "2"],
        &["memmap=regions"],
        Duration::from_secs(600),
    );
    assert_verified(&b, "regions", 1);
    assert_eq!(b.summary().deferred_pages, 0);
    assert!(
        !eager_within_gate(&b),
        "memmap=regions must trip the eager-pages gate\n{}",
        describe(&b)
    );
}

#[test]
fn perpfn_64g_initialises_everything_eagerly() {
    let b = boot(
        &["-m", "64G", "--smp", "2"],
        &["memmap=perpfn"],
        Duration::from_secs(600),
    );
    assert_verified(&b, "perpfn", 1);
    assert_eq!(b.summary().deferred_pages, 0);
    assert!(!eager_within_gate(&b));
}

#[test]
fn touch_64g_writes_the_same_pages_without_state() {
    let b = boot(
        &["-m", "64G", "--smp", "2"],
        &["memmap=touch"],
        Duration::from_secs(600),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", describe(&b));
    assert_eq!(b.summary().strategy, "touch");
    assert_eq!(b.summary().verify, "off");
    assert_eq!(
        b.summary().eager_pages + b.summary().deferred_pages,
        b.summary().present_pages
    );
    assert!(eager_within_gate(&b), "touch uses the deferred split");
    // The deferred split exactly, and no Linux state: no reserved or hole
    // pages, nothing free (the model says 0 for all three with touch).
    let model = b.model();
    b.assert_summary_matches(&model);
    assert!(b.verify_zone_lines().is_empty(), "touch is not verified");
}

#[test]
fn deferred_64g_one_thread_per_node_and_2g_blocks() {
    let b = boot(
        &["-m", "64G", "--smp", "2"],
        &["threads_per_node=1", "memory_block_size=2G"],
        Duration::from_secs(600),
    );
    assert_verified(&b, "deferred", 1);
    assert_eq!(b.summary().deferred_workers, 1);
    assert_eq!(b.summary().memory_block_size, 2 << 30);
    assert_eq!(
        b.summary().nr_memory_blocks,
        64 / 2 + 1,
        "64G below and above the 4G hole: 33 blocks of 2G"
    );
    assert_eq!(b.summary().memory_block_lookup, "indexed");
}

/// `memory_block_lookup=linear` (Linux's search before 4fb6eabf1037)
/// creates the blocks the model says, and says how it found them.
#[test]
fn linear_memory_block_lookup_creates_the_model_s_blocks() {
    let b = boot(
        &["-m", "2G", "--smp", "2"],
        &["memory_block_lookup=linear", "memory_block_size=128M"],
        Duration::from_secs(300),
    );
    assert_verified(&b, "deferred", 1);
    assert_eq!(b.summary().memory_block_lookup, "linear");
    assert!(
        b.has_message("memory: each section's block found by a linear search"),
        "{}",
        describe(&b)
    );
    // 2G: 16 sections of 128M, each its own block (the model's count).
    assert_eq!(b.summary().nr_memory_blocks, 16);
    b.assert_summary_matches(&b.model());
}

/// A smaller struct page (`struct_page=32` or `8`) in every faithful
/// mode, checked against the model of the same map at that size (a half or
/// an eighth of the vmemmap, its page tables and placement), and the
/// vmemmap line names the layout.
fn boot_small(bytes: u64, size: &str, extra: &[&str], opts: &[&str]) -> Boot {
    let mut args = vec!["-m", size, "--smp", "2"];
    args.extend_from_slice(extra);
    let layout = format!("struct_page={bytes}");
    let mut kernel = vec![layout.as_str()];
    kernel.extend_from_slice(opts);
    let b = boot(&args, &kernel, Duration::from_secs(600));
    assert_eq!(b.summary().struct_page_bytes, bytes, "{}", describe(&b));
    let named = format!("MiB of {bytes}-byte struct pages");
    assert!(
        b.messages_with("vmemmap: ").any(|m| m.contains(&named)),
        "{}",
        describe(&b)
    );
    b
}

fn boot_32_byte(size: &str, extra: &[&str], opts: &[&str]) -> Boot {
    boot_small(32, size, extra, opts)
}

#[test]
fn deferred_16g_two_nodes_with_32_byte_struct_pages() {
    let b = boot_32_byte("16G", &["--nodes", "2"], &[]);
    assert_verified(&b, "deferred", 2);
    assert_deferred_lines(&b, 2);
}

/// The 8-byte struct page keeps the buddy allocator's free blocks in
/// bitmaps; the summary says so and how large they are, and the heap grew
/// to hold them.
#[test]
fn deferred_16g_two_nodes_with_8_byte_struct_pages() {
    let b = boot_small(8, "16G", &["--nodes", "2"], &[]);
    assert_verified(&b, "deferred", 2);
    assert_deferred_lines(&b, 2);
    let s = b.summary();
    assert_eq!(s.buddy_store, "bitmaps", "{}", describe(&b));
    // Two bits per present page at most, with a summary word per 64 and
    // rounding per zone: computed here from the pages, not the kernel's sizes.
    let two_bits = s.present_pages / 4;
    assert!(
        s.buddy_index_bytes >= two_bits * 9 / 10 && s.buddy_index_bytes <= s.heap_bytes,
        "{} bytes of bitmaps for {} pages: {}",
        s.buddy_index_bytes,
        s.present_pages,
        describe(&b)
    );
}

/// Three nodes of 328, 328 and 344 MiB: node 1's first whole section is
/// section 3, whose 32-byte struct pages share a huge page with node 0's
/// section 2. The model maps that huge page once, from node 0, and so
/// must the boot (memblock's reservations, vmemmap bytes, free pages). At
/// 8 bytes eight sections share one, from all three nodes.
#[test]
fn deferred_uneven_nodes_share_huge_pages_with_smaller_struct_pages() {
    for bytes in [32, 8] {
        let b = boot_small(bytes, "1000M", &["--nodes", "3"], &[]);
        assert_verified(&b, "deferred", 3);
    }
}

/// The bitmap store at 32 bytes, to tell what the page size buys from what
/// the store does.
#[test]
fn bitmaps_serve_32_byte_struct_pages_too() {
    let b = boot_32_byte("2G", &[], &["buddy=bitmaps"]);
    assert_verified(&b, "deferred", 1);
    assert_eq!(b.summary().buddy_store, "bitmaps", "{}", describe(&b));
    assert!(b.summary().buddy_index_bytes > 0);
}

#[test]
fn regions_perpfn_and_touch_with_smaller_struct_pages() {
    for bytes in [32, 8] {
        for mode in ["regions", "perpfn"] {
            let b = boot_small(bytes, "2G", &[], &[&format!("memmap={mode}")]);
            assert_verified(&b, mode, 1);
            assert_eq!(b.summary().deferred_pages, 0);
        }
        let b = boot_small(bytes, "2G", &[], &["memmap=touch"]);
        assert_eq!(b.summary().strategy, "touch");
        b.assert_summary_matches(&b.model());
    }
}
