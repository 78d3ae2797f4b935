//! `hugepagesz=1G hugepages=N` booted for real: the pages reserved node by
//! node, 1 GiB-aligned, out of the buddy allocator, their struct pages
//! written as compound pages and verified; more than fits is Linux's
//! warning and a boot that goes on. The free page count is checked against
//! the model of the boot's own logged firmware map, not a constant.

use std::time::Duration;

use memboot_tests::{boot, exit_code, Boot};

/// Base pages in a 1 GiB page.
const GIGANTIC_PAGES: u64 = 1 << 18;

/// The summary's array `key` (huge pages per node).
fn per_node_of(b: &Boot, key: &str) -> Vec<u64> {
    b.summary_json()[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key}\n{}", b.describe()))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn per_node(b: &Boot) -> Vec<u64> {
    per_node_of(b, "hugepages_1g_per_node")
}

/// A boot with `reserved` 1 GiB pages: verified, out of the free pages,
/// written as compound pages.
fn assert_reserved(b: &Boot, reserved: u64) {
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    assert!(b.has_message("verify: ok"), "{}", b.describe());
    assert_eq!(per_node(b).iter().sum::<u64>(), reserved);
    let line = format!("HugeTLB: registered 1.00 GiB page size, pre-allocated {reserved} pages");
    assert!(b.has_message(&line), "{line}\n{}", b.describe());
    let s = b.summary_json();
    assert_eq!(
        s["hugetlb_struct_pages"].as_u64(),
        Some(reserved * GIGANTIC_PAGES)
    );
    assert!(s["hugetlb_ns"].as_u64().unwrap() > 0);
    // The model's free pages are present − reserved of the logged map, no
    // huge pages: they come out of exactly those.
    let model = b.model();
    assert_eq!(b.summary().present_pages, b.firmware_ram_pages());
    assert_eq!(
        b.summary().free_pages,
        model.facts().free_pages - reserved * GIGANTIC_PAGES,
        "{}",
        b.describe()
    );
    // Every present page is initialised by init or by the huge-page phase.
    assert_eq!(
        b.summary().eager_pages + b.summary().deferred_pages + reserved * GIGANTIC_PAGES,
        b.summary().present_pages
    );
}

#[test]
fn four_1g_pages_two_per_node() {
    let b = boot(
        &["-m", "8G", "--nodes", "2"],
        &["hugepagesz=1G", "hugepages=4"],
        Duration::from_secs(300),
    );
    assert_reserved(&b, 4);
    assert_eq!(per_node(&b), [2, 2], "{}", b.describe());
    // 1 GiB-aligned: the head of each is what verify names, and the
    // verify lines count them reserved, never free.
    assert!(!b.has_message("HugeTLB: allocating"), "{}", b.describe());
    // Linux's report, as Linux 6.12 prints it for the same command line
    // at 64-byte struct pages (tests/fixtures/linux-6.12-16g-hugetlb-hvo.log):
    // each size it has, the command line's first, then 2 MiB.
    let report: Vec<&str> = b
        .messages_with("HugeTLB: ")
        .filter(|m| !m.contains("command line"))
        .collect();
    assert_eq!(
        report,
        [
            "HugeTLB: registered 1.00 GiB page size, pre-allocated 4 pages",
            "HugeTLB: 16380 KiB vmemmap can be freed for a 1.00 GiB page",
            "HugeTLB: registered 2.00 MiB page size, pre-allocated 0 pages",
            "HugeTLB: 28 KiB vmemmap can be freed for a 2.00 MiB page",
        ],
        "{}",
        b.describe()
    );
}

#[test]
fn more_than_fits_warns_and_boots() {
    let b = boot(
        &["-m", "8G", "--nodes", "2"],
        &["hugepagesz=1G", "hugepages=12"],
        Duration::from_secs(300),
    );
    let got: u64 = per_node(&b).iter().sum();
    assert!(got > 0 && got < 12, "{}", b.describe());
    let warning = format!(
        "HugeTLB: allocating 12 of page size 1.00 GiB failed.  Only allocated {got} hugepages."
    );
    assert!(b.has_message(&warning), "{warning}\n{}", b.describe());
    assert_reserved(&b, got);
}

#[test]
fn per_node_counts_on_ondemand_and_8_byte_pages() {
    let b = boot(
        &["-m", "8G", "--nodes", "2"],
        &[
            "memmap=ondemand",
            "struct_page=8",
            "hugepagesz=1G",
            "hugepages=0:1,1:2",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    assert_eq!(per_node(&b), [1, 2], "{}", b.describe());
    assert_eq!(
        b.summary_json()["hugetlb_struct_pages"].as_u64(),
        Some(3 * GIGANTIC_PAGES)
    );
}

fn per_node_2m(b: &Boot) -> Vec<u64> {
    per_node_of(b, "hugepages_2m_per_node")
}

/// 2 MiB pages, the default size (a bare `hugepages=`), taken from the
/// allocator once memory is ready: round-robin over the nodes, written as
/// compound pages, verified, and out of the free pages the model of the
/// logged firmware map gives.
#[test]
fn default_size_2m_pages_come_from_the_allocator_round_robin() {
    let b = boot(
        &["-m", "4G", "--nodes", "2"],
        &["hugepages=101"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    assert_eq!(per_node_2m(&b), [51, 50], "{}", b.describe());
    let line = "HugeTLB: registered 2.00 MiB page size, pre-allocated 101 pages";
    assert!(b.has_message(line), "{line}\n{}", b.describe());
    let s = b.summary_json();
    assert_eq!(s["hugetlb_struct_pages"].as_u64(), Some(101 * 512));
    // `free_pages` is counted when init is done, before the huge pages
    // are taken: the model's. Verification, after, counts them apart in
    // its zone lines.
    assert_eq!(
        b.summary().free_pages,
        b.model().facts().free_pages,
        "{}",
        b.describe()
    );
    let in_huge_pages: u64 = b
        .messages_with("verify: node ")
        .filter_map(|l| l.strip_suffix(" in huge pages"))
        .map(|l| l.rsplit(", ").next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(in_huge_pages, 101 * 512, "{}", b.describe());
    // Init wrote every present page; the huge-page phase wrote these again.
    assert_eq!(
        b.summary().eager_pages + b.summary().deferred_pages,
        b.summary().present_pages
    );
}

/// More 2 MiB pages than a node has, beside 1 GiB pages and at 32 bytes:
/// the node's pages until it has none, Linux's warning, a boot that goes
/// on and verifies.
#[test]
fn more_2m_pages_than_a_node_has_warn_and_boot() {
    let b = boot(
        &["-m", "4G", "--nodes", "2"],
        &[
            "struct_page=32",
            "hugepagesz=1G",
            "hugepages=1",
            "hugepagesz=2M",
            "hugepages=1:100000",
        ],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    let got = per_node_2m(&b);
    assert_eq!(got[0], 0, "{}", b.describe());
    assert!(got[1] > 0, "{}", b.describe());
    let warning = format!(
        "HugeTLB: allocating 100000 of page size 2.00 MiB failed node1.  Only allocated {} hugepages.",
        got[1]
    );
    assert!(b.has_message(&warning), "{warning}\n{}", b.describe());
    assert_eq!(per_node(&b).iter().sum::<u64>(), 1, "{}", b.describe());
}

/// HVO (`hugetlb_free_vmemmap=on`) at each struct-page size: each 1 GiB
/// page's vmemmap is one kept base page plus its page tables (two at 8
/// bytes, where the vmemmap is one 2 MiB page, else three: a shared table
/// serves every 2 MiB after the first), the rest unbacked; only the kept
/// page's struct pages are written; verification reads every other tail
/// as the kept struct page it aliases and passes.
#[test]
fn hvo_keeps_one_vmemmap_page_per_1g_page_at_each_size() {
    for struct_page in [64u64, 32, 8] {
        let b = boot(
            &["-m", "8G", "--nodes", "2"],
            &[
                "hugepagesz=1G",
                "hugepages=4",
                "hugetlb_free_vmemmap=on",
                &format!("struct_page={struct_page}"),
            ],
            Duration::from_secs(300),
        );
        assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
        assert_eq!(b.summary().verify, "ok", "{}", b.describe());
        let vmemmap = GIGANTIC_PAGES * struct_page;
        let frames = if vmemmap > 2 << 20 { 3 } else { 2 };
        let s = b.summary_json();
        assert_eq!(
            s["hvo_vmemmap_bytes_not_backed"].as_u64(),
            Some(4 * (vmemmap - frames * 4096)),
            "{}",
            b.describe()
        );
        assert_eq!(
            s["hugetlb_struct_pages"].as_u64(),
            Some(4 * 4096 / struct_page)
        );
        assert!(b.has_message("vmemmap: HVO: the struct pages of 4 pages of 1.00 GiB"));
    }
}

/// A write to a tail struct page beyond the kept vmemmap page faults, and
/// the page-fault handler names that struct page's PFN; where HVO cannot
/// apply (`ondemand`), a line says so and the boot verifies.
#[test]
fn a_write_beyond_the_kept_page_faults_naming_the_page() {
    // The first tail beyond the kept page: 64 struct pages into a 1 GiB
    // page (4096 / 64).
    assert_hvo_tail_fault(&["hugepagesz=1G", "hugepages=2"], GIGANTIC_PAGES);

    let b = boot(
        &["-m", "4G"],
        &[
            "memmap=ondemand",
            "hugepagesz=1G",
            "hugepages=2",
            "hugetlb_free_vmemmap=on",
        ],
        Duration::from_secs(300),
    );
    // ondemand maps the huge pages' vmemmap at boot as HVO does, the rest
    // on first use: only the kept struct pages are written, and first use
    // never maps an HVO section.
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    assert!(!b.has_message("HugeTLB: HVO not applied"));
    assert_eq!(
        b.summary_json()["hugetlb_struct_pages"].as_u64(),
        Some(2 * (4096 / 64))
    );
    assert!(b.has_message(
        "vmemmap: HVO: the struct pages of 2 pages of 1.00 GiB mapped onto one kept page each"
    ));
    let first_use = b
        .messages_with("vmemmap: ")
        .find(|m| m.contains("sections mapped on first use"))
        .unwrap_or_else(|| panic!("no first-use line\n{}", b.describe()));
    let of: u64 = first_use
        .split(" of ")
        .nth(1)
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .unwrap();
    // 4 GiB is 32 sections, 16 of them the two 1 GiB pages'.
    assert_eq!(of, 32 - 16, "{first_use}");
}

/// HVO of the 2 MiB pages (`hugetlb_free_vmemmap=on`) at each struct-page
/// size, applied after they are taken from the allocator: each page's
/// vmemmap base pages after the kept one (7 at 64 bytes, 3 at 32) go back
/// to the allocator, the split mappings' page tables come from it, and
/// verification reads every tail beyond the kept page as the kept struct
/// page it aliases and passes; at 8 bytes a page's struct pages fill one
/// base page and a line says there is nothing to free. The freed frames
/// join either free-block store (`buddy=lists`, `buddy=bitmaps`, whose
/// bitmaps must grow to cover ranges managed late). With `ondemand` the
/// frames lie in the untouched pool at the node's top: they are taken out
/// of it first (their struct pages written then), the line says so, and
/// the drain that later claims their windows leaves them free.
#[test]
fn hvo_frees_the_vmemmap_of_2m_pages_at_each_size() {
    const PAGES: u64 = 64;
    for (struct_page, freed_per_page, buddy, memmap) in [
        (64u64, 7u64, "lists", "deferred"),
        (32, 3, "lists", "deferred"),
        (8, 0, "bitmaps", "deferred"),
        (64, 7, "bitmaps", "deferred"),
        (64, 7, "lists", "ondemand"),
        (32, 3, "bitmaps", "ondemand"),
    ] {
        let mut args = vec![
            "hugepagesz=2M".to_string(),
            format!("hugepages={PAGES}"),
            "hugetlb_free_vmemmap=on".into(),
            format!("struct_page={struct_page}"),
            format!("buddy={buddy}"),
            format!("memmap={memmap}"),
        ];
        if memmap == "ondemand" {
            // The drain claims the windows the taken frames lie in: it
            // must leave them as HVO freed them.
            args.push("ondemand_drain=on".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let b = boot(
            &["-m", "4G", "--nodes", "2"],
            &args,
            Duration::from_secs(300),
        );
        let from_pool = b
            .messages_with("HugeTLB: HVO: the vmemmap of ")
            .any(|m| m.contains("taken out of the pool first"));
        assert_eq!(from_pool, memmap == "ondemand", "{}", b.describe());
        assert_eq!(b.summary_json()["buddy_store"].as_str(), Some(buddy));
        assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
        assert_eq!(b.summary().verify, "ok", "{}", b.describe());
        assert_eq!(per_node_2m(&b), [PAGES / 2, PAGES / 2], "{}", b.describe());
        let s = b.summary_json();
        assert_eq!(
            s["hvo_2m_vmemmap_bytes_freed"].as_u64(),
            Some(PAGES * freed_per_page * 4096),
            "{}",
            b.describe()
        );
        let said = if freed_per_page > 0 {
            format!("HugeTLB: HVO: the vmemmap of {PAGES} pages of 2.00 MiB remapped onto one kept page each")
        } else {
            "HugeTLB: HVO of the 2.00 MiB pages frees nothing at 8-byte struct pages".into()
        };
        assert!(b.has_message(&said), "{said}\n{}", b.describe());
        // The huge pages and, with HVO, a page table per split 2 MiB
        // vmemmap mapping (one per 2 MiB of struct pages they touch).
        let in_huge_pages: u64 = b
            .messages_with("verify: node ")
            .filter_map(|l| l.strip_suffix(" in huge pages"))
            .map(|l| l.rsplit(", ").next().unwrap().parse::<u64>().unwrap())
            .sum();
        let tables = in_huge_pages - PAGES * 512;
        assert!(
            if freed_per_page > 0 {
                (1..=PAGES).contains(&tables)
            } else {
                tables == 0
            },
            "{in_huge_pages}\n{}",
            b.describe()
        );
    }
}

/// On a boot with only 2 MiB pages, `test_fault=hvo_tail` writes the first
/// tail beyond the kept vmemmap page of the first one: HVO mapped it
/// read-only onto the kept page, and the page-fault handler names it.
#[test]
fn a_write_beyond_the_kept_page_of_a_2m_page_faults_naming_it() {
    // 64 struct pages into a 2 MiB page (4096 / 64).
    assert_hvo_tail_fault(&["hugepagesz=2M", "hugepages=8"], 512);
}

/// A 4G boot with `huge` pages, HVO and `test_fault=hvo_tail` stops with
/// a page fault on the struct page 64 pages into a huge page of
/// `base_pages`, which the handler names.
fn assert_hvo_tail_fault(huge: &[&str], base_pages: u64) {
    let mut opts = huge.to_vec();
    opts.extend(["hugetlb_free_vmemmap=on", "test_fault=hvo_tail"]);
    let b = boot(&["-m", "4G"], &opts, Duration::from_secs(300));
    assert_eq!(b.summary().status, "exception", "{}", b.describe());
    let line = b
        .messages_with("test_fault=hvo_tail: writing the struct page of pfn ")
        .next()
        .unwrap_or_else(|| panic!("no test_fault line\n{}", b.describe()));
    let pfn = line
        .split("pfn 0x")
        .nth(1)
        .and_then(|r| u64::from_str_radix(r.split(',').next()?, 16).ok())
        .unwrap();
    assert_eq!(pfn % base_pages, 64, "{line}");
    let named = format!("the struct page of pfn {pfn:#x}: a write to a read-only struct page");
    assert!(b.has_message(&named), "{named}\n{}", b.describe());
}
