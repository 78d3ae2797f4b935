//! Linux's `memmap=` forms as real boots: the user-defined map the kernel
//! prints and the memory memblock gets, against an expectation computed
//! here from the logged firmware map and the forms alone; and a command
//! line of thousands of regions, which reaches the kernel as a fw_cfg file.

use std::time::Duration;

use memboot_tests::{boot, exit_code, Boot};
use memmap::firmware::RegionKind;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// One form as this test reads it: (start, end, e820 type) added, a RAM
/// limit, or exactmap.
#[derive(Clone, Copy)]
enum Op {
    Exact,
    Add(u64, u64, u32),
    Limit(u64),
}

/// The user map Linux's rules give, as `(start, end, type)` runs: at every
/// address the highest e820 type among the entries that cover it, where a
/// limit removes RAM from entries present when it is applied and exactmap
/// drops them all; runs of one type merged. Unlike Linux, RAM where the
/// firmware's map has none is left out.
fn expected_map(boot: &Boot, ops: &[Op]) -> Vec<(u64, u64, u32)> {
    let firmware: Vec<(u64, u64, u32)> = boot
        .boot_input()
        .map
        .iter()
        .map(|e| {
            let t = match e.kind {
                RegionKind::Usable | RegionKind::Bootloader => 1,
                RegionKind::Reserved => 2,
                RegionKind::AcpiReclaimable => 3,
                RegionKind::AcpiNvs => 4,
                RegionKind::Unusable => 5,
            };
            (e.start, e.start + e.len_bytes, t)
        })
        .collect();
    let mut cuts: Vec<u64> = firmware.iter().flat_map(|&(s, e, _)| [s, e]).collect();
    for op in ops {
        match *op {
            Op::Add(s, e, _) => cuts.extend([s, e]),
            Op::Limit(l) => cuts.push(l),
            Op::Exact => {}
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut runs: Vec<(u64, u64, u32)> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        // The types covering [a, b), replayed through the forms.
        let mut set: u32 = firmware
            .iter()
            .filter(|&&(s, e, _)| s <= a && b <= e)
            .fold(0, |m, &(_, _, t)| m | 1 << t);
        for op in ops {
            match *op {
                Op::Exact => set = 0,
                Op::Add(s, e, t) if s <= a && b <= e => set |= 1 << t,
                Op::Limit(l) if a >= l => set &= !(1 << 1),
                _ => {}
            }
        }
        let firmware_ram = firmware.iter().any(|&(s, e, t)| t == 1 && s <= a && b <= e);
        // RAM declared where the firmware has none is left out: a hole.
        if set == 0 || (set == 1 << 1 && !firmware_ram) {
            continue;
        }
        let t = 31 - set.leading_zeros();
        match runs.last_mut() {
            Some(r) if r.1 == a && r.2 == t => r.1 = b,
            _ => runs.push((a, b, t)),
        }
    }
    runs
}

fn line(&(start, end, t): &(u64, u64, u32)) -> String {
    let name = [
        "",
        "usable",
        "reserved",
        "ACPI data",
        "ACPI NVS",
        "unusable",
    ][t as usize];
    format!("user: [mem {start:#018x}-{:#018x}] {name}", end - 1)
}

/// The `user:` lines of the log, and its memblock line's region count.
fn logged(boot: &Boot) -> (Vec<String>, u64) {
    let lines = boot
        .messages_with("user: [mem ")
        .map(String::from)
        .collect();
    let memblock = boot
        .messages_with("memblock: ")
        .find_map(|m| {
            m.strip_prefix("memblock: ")?
                .split(" memory regions")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no memblock line\n{}", boot.describe()));
    (lines, memblock)
}

/// The user map's lines, memblock's regions and the present pages must be
/// what `ops` give the logged firmware map.
fn assert_user_map(boot: &Boot, ops: &[Op]) {
    assert_eq!(boot.run.exit_code, exit_code::OK, "{}", boot.describe());
    assert_eq!(boot.summary_json()["verify"], "ok");
    let want = expected_map(boot, ops);
    let (lines, regions) = logged(boot);
    let want_lines: Vec<String> = want.iter().map(line).collect();
    assert_eq!(lines, want_lines, "{}", boot.describe());
    assert!(boot.has_message("user-defined physical RAM map:"));
    // memblock: the RAM runs rounded inward to whole pages.
    let ram: Vec<(u64, u64)> = want
        .iter()
        .filter(|r| r.2 == 1)
        .map(|r| (r.0.div_ceil(4096), r.1 / 4096))
        .filter(|(s, e)| e > s)
        .collect();
    assert_eq!(regions, ram.len() as u64, "{}", boot.describe());
    let pages: u64 = ram.iter().map(|(s, e)| e - s).sum();
    assert_eq!(boot.summary().present_pages, pages);
    let bytes: u64 = want.iter().filter(|r| r.2 == 1).map(|r| r.1 - r.0).sum();
    assert_eq!(boot.summary().mem_bytes, bytes);
}

#[test]
fn memmap_forms_make_the_user_map_and_memblock_follows_it() {
    // A limit, RAM given back above it, a reserved hole inside RAM, ACPI
    // data over RAM, and a mode beside them.
    let forms = [
        "memmap=512M",
        "memmap=64M@768M",
        "memmap=4M$256M",
        "memmap=1M#300M,2M$0x30000000",
        "memmap=regions",
        "alloc_test=0",
    ];
    let ops = [
        Op::Limit(512 * MIB),
        Op::Add(768 * MIB, 832 * MIB, 1),
        Op::Add(256 * MIB, 260 * MIB, 2),
        Op::Add(300 * MIB, 301 * MIB, 3),
        Op::Add(0x3000_0000, 0x3020_0000, 2),
    ];
    let b = boot(&["-m", "1G"], &forms, Duration::from_secs(300));
    assert_user_map(&b, &ops);
    assert_eq!(b.summary().strategy, "regions");
}

#[test]
fn thousands_of_regions_reach_the_kernel_through_a_fw_cfg_file() {
    // 3000 regions of 256 KiB, a page apart, above the first 64 MiB (which
    // holds the kernel and its heap).
    const REGIONS: u64 = 3000;
    let (size, stride, base) = (256 * KIB, 260 * KIB, 64 * MIB);
    let mut forms = vec!["memmap=64M".to_string()];
    let mut ops = vec![Op::Limit(base)];
    for i in 0..REGIONS {
        let start = base + i * stride;
        forms.push(format!("memmap=256K@{start:#x}"));
        ops.push(Op::Add(start, start + size, 1));
    }
    forms.push("alloc_test=16M".into());
    let forms: Vec<&str> = forms.iter().map(String::as_str).collect();
    let b = boot(&["-m", "1G"], &forms, Duration::from_secs(300));
    assert!(
        b.run.stderr.contains("name=opt/memboot/cmdline\\,file="),
        "{}",
        b.run
            .stderr
            .lines()
            .filter(|l| l.contains("qemu:"))
            .collect::<String>()
    );
    assert_user_map(&b, &ops);
    let usable = b
        .messages_with("] usable")
        .filter(|m| m.starts_with("user:"))
        .count();
    assert!(usable as u64 > REGIONS, "{usable}");
}

#[test]
fn exactmap_drops_the_firmware_map_and_the_forms_after_it_are_the_map() {
    let forms = [
        "memmap=exactmap",
        "memmap=639K@0,255M@1M",
        "memmap=128M@384M",
        "memmap=1M$0x20000000",
        "alloc_test=16M",
    ];
    let ops = [
        Op::Exact,
        Op::Add(0, 639 * KIB, 1),
        Op::Add(MIB, 256 * MIB, 1),
        Op::Add(384 * MIB, 512 * MIB, 1),
        Op::Add(0x2000_0000, 0x2010_0000, 2),
    ];
    let b = boot(&["-m", "1G"], &forms, Duration::from_secs(300));
    assert_user_map(&b, &ops);
}

#[test]
fn the_kdump_form_boots_without_the_ebda_and_says_so() {
    // Linux's kdump documentation's form: 640K@0 covers the firmware's
    // reserved 0x9fc00-0x9ffff, which is left out with a warning.
    let forms = [
        "memmap=exactmap",
        "memmap=640K@0",
        "memmap=1000M@1M",
        "alloc_test=16M",
    ];
    let ops = [
        Op::Exact,
        Op::Add(0, 640 * KIB, 1),
        Op::Add(MIB, 1001 * MIB, 1),
    ];
    let b = boot(&["-m", "1G"], &forms, Duration::from_secs(300));
    assert_user_map(&b, &ops);
    let warnings: Vec<&str> = b
        .messages_with("left out of the user-defined map")
        .collect();
    assert_eq!(
        warnings,
        ["memboot: memmap= declares [mem 0x000000000009fc00-0x000000000009ffff] usable, but the firmware's map has no RAM there: left out of the user-defined map"],
        "{}",
        b.describe()
    );
}
