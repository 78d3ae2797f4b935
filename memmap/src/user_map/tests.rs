use super::*;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use memboot_contract::memmap_forms::{parse_form, parse_value, E820_ACPI};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[test]
fn user_lines_are_linux_bytes() {
    let e = E820Entry {
        addr: 0,
        size: 0x9fc00,
        kind: E820_RAM,
    };
    assert_eq!(
        UserLine(&e).to_string(),
        "user: [mem 0x0000000000000000-0x000000000009fbff] usable"
    );
    let e = E820Entry {
        addr: 0xfffc0000,
        size: 0x40000,
        kind: E820_RESERVED,
    };
    assert_eq!(
        UserLine(&e).to_string(),
        "user: [mem 0x00000000fffc0000-0x00000000ffffffff] reserved"
    );
}

/// QEMU's pc machine with 4 GiB: what its firmware map looks like, with
/// the bootloader's region inside the first RAM above 1 MiB.
fn pc_map() -> Vec<FirmwareEntry> {
    vec![
        FirmwareEntry::new(0, 0x9fc00, RegionKind::Usable),
        FirmwareEntry::new(0x9fc00, 0x400, RegionKind::Reserved),
        FirmwareEntry::new(0xf0000, 0x10000, RegionKind::Reserved),
        FirmwareEntry::new(0x100000, 0xf00000, RegionKind::Usable),
        FirmwareEntry::new(0x1000000, 0x200000, RegionKind::Bootloader),
        FirmwareEntry::new(0x1200000, 2 * GIB - 0x1200000, RegionKind::Usable),
        FirmwareEntry::new(0xfffc0000, 0x40000, RegionKind::Reserved),
        FirmwareEntry::new(4 * GIB, 2 * GIB, RegionKind::Usable),
    ]
}

fn forms(text: &str) -> Vec<Form> {
    parse_value(text).map(Result::unwrap).collect()
}

#[test]
fn the_firmware_map_is_sanitised_and_the_bootloader_kept_in_use() {
    let m = apply(&pc_map(), &forms("1G"), &[]).unwrap();
    let lines: Vec<String> = m.e820.iter().map(|e| UserLine(e).to_string()).collect();
    assert_eq!(
        lines,
        [
            "user: [mem 0x0000000000000000-0x000000000009fbff] usable",
            "user: [mem 0x000000000009fc00-0x000000000009ffff] reserved",
            "user: [mem 0x00000000000f0000-0x00000000000fffff] reserved",
            "user: [mem 0x0000000000100000-0x000000003fffffff] usable",
            "user: [mem 0x00000000fffc0000-0x00000000ffffffff] reserved",
        ]
    );
    assert_eq!(
        m.map.last(),
        Some(&FirmwareEntry::new(
            0x1000000,
            0x200000,
            RegionKind::Bootloader
        ))
    );
}

#[test]
fn holes_punched_with_reserved_ranges_and_ram_added_above_a_limit() {
    let m = apply(&pc_map(), &forms("1G,4M$256M,1G@4G,2M#5G"), &[]).unwrap();
    let want = [
        (0x100000, 256 * MIB - 0x100000, E820_RAM),
        (256 * MIB, 4 * MIB, E820_RESERVED),
        (260 * MIB, GIB - 260 * MIB, E820_RAM),
        (0xfffc0000, 0x40000, E820_RESERVED),
        (4 * GIB, GIB, E820_RAM),
        (5 * GIB, 2 * MIB, E820_ACPI),
    ];
    let got: Vec<(u64, u64, u32)> = m.e820[3..]
        .iter()
        .map(|e| (e.addr, e.size, e.kind))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn exactmap_drops_every_entry_and_the_in_use_ranges_must_stay_ram() {
    let m = apply(&pc_map(), &forms("exactmap,639K@0,63M@1M"), &[]).unwrap();
    assert_eq!(m.e820.len(), 2, "{:?}", m.e820);
    let err = apply(&pc_map(), &forms("exactmap,639K@0,1M@1M,1G@32M"), &[]).unwrap_err();
    assert!(
        matches!(
            err,
            UserMapError::InUseNotRam {
                start: 0x1000000,
                ..
            }
        ),
        "{err:?}"
    );
    let heap = [(0x4000_0000, 16 * MIB, "kernel heap")];
    let err = apply(&pc_map(), &forms("1G"), &heap).unwrap_err();
    assert_eq!(
        err.to_string(),
        "memmap= leaves [mem 0x0000000040000000-0x0000000040ffffff] (kernel heap) outside usable RAM, but the boot already uses it: keep it usable (an @ form over it, or no exactmap)"
    );
    assert_eq!(
        apply(&pc_map(), &forms("1G@8G"), &[]),
        Err(UserMapError::RamNotInFirmware {
            start: 8 * GIB,
            end: 9 * GIB
        })
    );
    assert_eq!(
        apply(&pc_map(), &forms("exactmap,1G@0"), &[]),
        Err(UserMapError::TooFewEntries { entries: 1 })
    );
    assert!(matches!(
        apply(&pc_map(), &forms("1G@0,2E@0xf000000000000000"), &[]),
        Err(UserMapError::Wraps { .. })
    ));
}

#[test]
fn the_kdump_form_leaves_out_the_firmwares_ebda_and_boots_on() {
    // Linux's kdump documentation: exactmap, 640K at 0, RAM above 1 MiB.
    // The firmware reserves 0x9fc00-0x9ffff (the EBDA): that part of
    // 640K@0 is not RAM, so it is left out and the rest kept.
    let m = apply(&pc_map(), &forms("exactmap,640K@0,1000M@1M"), &[]).unwrap();
    let lines: Vec<String> = m.e820.iter().map(|e| UserLine(e).to_string()).collect();
    assert_eq!(
        lines,
        [
            "user: [mem 0x0000000000000000-0x000000000009fbff] usable",
            "user: [mem 0x0000000000100000-0x000000003e8fffff] usable",
        ]
    );
    assert_eq!(m.left_out, [(0x9fc00, 0xa0000)]);
    assert_eq!(
        LeftOutLine(m.left_out[0]).to_string(),
        "memboot: memmap= declares [mem 0x000000000009fc00-0x000000000009ffff] usable, but the firmware's map has no RAM there: left out of the user-defined map"
    );
    // A range running past the firmware's RAM keeps the RAM part; without
    // exactmap the firmware's reserved ranges win over declared RAM and
    // its holes stay holes.
    let m = apply(&pc_map(), &forms("exactmap,639K@0,3G@1M"), &[]).unwrap();
    assert_eq!(m.left_out, [(2 * GIB, 3 * GIB + MIB)]);
    assert_eq!(m.e820.last().map(|e| e.addr + e.size), Some(2 * GIB));
    let m = apply(&pc_map(), &forms("1G@0"), &[]).unwrap();
    assert_eq!(m.left_out, [(0xa0000, 0xf0000)]);
    assert!(m
        .e820
        .iter()
        .any(|e| e.kind == E820_RESERVED && e.addr == 0x9fc00));
    // Nothing declared is left out when all of it is firmware RAM.
    let m = apply(&pc_map(), &forms("exactmap,639K@0,63M@1M"), &[]).unwrap();
    assert!(m.left_out.is_empty());
}

#[test]
fn a_declared_range_without_any_firmware_ram_is_still_refused() {
    // 2 GiB to 4 GiB is the pc machine's PCI hole: no RAM at all.
    let err = apply(
        &pc_map(),
        &forms("exactmap,639K@0,63M@1M,1G@0x80000000"),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        err,
        UserMapError::RamNotInFirmware {
            start: 2 * GIB,
            end: 3 * GIB
        }
    );
    assert!(
        err.to_string().contains("has no RAM anywhere in it"),
        "{err}"
    );
    // Forms an exactmap drops, or a limit trims away, declare nothing.
    assert!(apply(&pc_map(), &forms("1G@8G,exactmap,639K@0,63M@1M"), &[]).is_ok());
    assert!(apply(&pc_map(), &forms("1G@8G,7G"), &[]).is_ok());
    // A limit trims what it keeps: the refusal names the trimmed range.
    assert_eq!(
        apply(&pc_map(), &forms("3G@0x80000000,2560M"), &[]),
        Err(UserMapError::RamNotInFirmware {
            start: 2 * GIB,
            end: 2560 * MIB
        })
    );
}

#[test]
fn removing_inside_a_ram_entry_splits_it_as_linux_does() {
    let mut t = E820Table {
        entries: vec![
            E820Entry {
                addr: 0,
                size: 100,
                kind: E820_RAM,
            },
            E820Entry {
                addr: 200,
                size: 10,
                kind: E820_RESERVED,
            },
        ],
    };
    t.remove_ram(40, 20);
    assert_eq!(
        t.entries,
        [
            E820Entry {
                addr: 0,
                size: 40,
                kind: E820_RAM
            },
            E820Entry {
                addr: 200,
                size: 10,
                kind: E820_RESERVED
            },
            E820Entry {
                addr: 60,
                size: 40,
                kind: E820_RAM
            },
        ]
    );
}

// The brute-force model: the address space in units (pages) of `UNIT`
// bytes, each unit the set of e820 types that cover it; the map is each
// unit's highest type, run-length encoded.
const UNIT: u64 = 4096;
const UNITS: u64 = 96;
/// Units the model covers: every generated range ends below it.
const SPACE: u64 = 2 * UNITS;

fn model_types(entries: impl IntoIterator<Item = (u64, u64, u32)>) -> Vec<u8> {
    let mut units = vec![0u8; SPACE as usize];
    for (addr, size, kind) in entries {
        for u in addr / UNIT..(addr + size) / UNIT {
            units[u as usize] |= 1 << kind;
        }
    }
    units
}

fn model_runs(units: &[u8]) -> Vec<E820Entry> {
    let mut out: Vec<E820Entry> = Vec::new();
    for (u, &set) in units.iter().enumerate() {
        let kind = if set == 0 { 0 } else { 7 - set.leading_zeros() };
        let addr = u as u64 * UNIT;
        match out.last_mut() {
            Some(e) if e.kind == kind && e.addr + e.size == addr => e.size += UNIT,
            _ if kind == 0 => {}
            _ => out.push(E820Entry {
                addr,
                size: UNIT,
                kind,
            }),
        }
    }
    out
}

/// What `apply`'s e820 table should be, from the model alone.
fn model_apply(firmware: &[FirmwareEntry], forms: &[Form]) -> Result<Vec<E820Entry>, UserMapError> {
    let raw = firmware
        .iter()
        .map(|e| (e.start, e.len_bytes, e820_type(e.kind)));
    let fw_runs = model_runs(&model_types(raw.clone()));
    // Linux's entry count: the sanitised firmware table (or the raw one
    // if it has under two entries), then one per form that adds.
    let mut count = if firmware.len() >= 2 {
        fw_runs.len()
    } else {
        firmware.len()
    };
    let mut units = model_types(fw_runs.iter().map(|e| (e.addr, e.size, e.kind)));
    // The units each surviving `@` form declared usable, one set per form.
    let mut declared: Vec<(u64, Vec<bool>)> = Vec::new();
    for &form in forms {
        match form {
            Form::ExactMap => {
                units.iter_mut().for_each(|u| *u = 0);
                declared.clear();
                count = 0;
            }
            Form::Add { start, size, kind } => {
                for (u, set) in model_types([(start, size, kind)]).into_iter().enumerate() {
                    units[u] |= set;
                }
                if kind == E820_RAM && size > 0 {
                    let mut mine = vec![false; SPACE as usize];
                    mine[(start / UNIT) as usize..((start + size) / UNIT) as usize].fill(true);
                    declared.push((start, mine));
                }
                count += 1;
            }
            Form::Limit { bytes } => {
                for u in bytes.div_ceil(UNIT)..SPACE {
                    units[u as usize] &= !(1 << E820_RAM);
                    declared.iter_mut().for_each(|(_, d)| d[u as usize] = false);
                }
                declared.retain(|(_, d)| d.contains(&true));
            }
        }
    }
    if count < 2 {
        return Err(UserMapError::TooFewEntries { entries: count });
    }
    let fw_units = model_types(fw_runs.iter().map(|e| (e.addr, e.size, e.kind)));
    let fw_ram = |u: usize| fw_units[u].leading_zeros() == 8 - 1 - E820_RAM;
    if let Some((start, d)) = declared
        .iter()
        .find(|(_, d)| !(0..SPACE as usize).any(|u| d[u] && fw_ram(u)))
    {
        let end = (d.iter().rposition(|&b| b).unwrap() as u64 + 1) * UNIT;
        return Err(UserMapError::RamNotInFirmware { start: *start, end });
    }
    // RAM the firmware lacks is left out: a hole.
    for (u, set) in units.iter_mut().enumerate() {
        if *set == 1 << E820_RAM && !fw_ram(u) {
            *set = 0;
        }
    }
    let top_is_ram = |u: u64| units[u as usize].leading_zeros() == 8 - 1 - E820_RAM;
    let runs = model_runs(&units);
    let loader = firmware.iter().filter(|e| e.kind == RegionKind::Bootloader);
    if let Some(e) = loader
        .into_iter()
        .find(|e| !(e.start / UNIT..(e.start + e.len_bytes) / UNIT).all(top_is_ram))
    {
        return Err(UserMapError::InUseNotRam {
            start: e.start,
            end: e.start + e.len_bytes,
            what: "kernel image, page tables, boot info",
        });
    }
    Ok(runs)
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (0..UNITS, 0..UNITS / 3).prop_map(|(a, n)| (a * UNIT, n * UNIT))
}

fn firmware_entry() -> impl Strategy<Value = FirmwareEntry> {
    (range(), prop::sample::select(&RegionKind::ALL[..]))
        .prop_map(|((a, n), k)| FirmwareEntry::new(a, n, k))
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        1 => Just(Form::ExactMap),
        2 => (1..UNITS).prop_map(|u| Form::Limit { bytes: u * UNIT }),
        6 => (range(), prop::sample::select(&[E820_RAM, E820_ACPI, E820_RESERVED][..]))
            .prop_map(|((start, size), kind)| Form::Add { start, size, kind }),
    ]
}

/// The form as a user writes it.
fn text(form: Form) -> String {
    match form {
        Form::ExactMap => "exactmap".into(),
        Form::Limit { bytes } => format!("{}K", bytes >> 10),
        Form::Add { start, size, kind } => {
            let op = match kind {
                E820_RAM => '@',
                E820_ACPI => '#',
                _ => '$',
            };
            format!("{size}{op}{start:#x}")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_user_map_is_the_models(
        firmware in prop::collection::vec(firmware_entry(), 0..6),
        forms in prop::collection::vec(form(), 0..8),
    ) {
        let got = apply(&firmware, &forms, &[]).map(|m| m.e820);
        prop_assert_eq!(got, model_apply(&firmware, &forms));
    }

    #[test]
    fn removal_leaves_each_ram_entry_without_the_range(
        entries in prop::collection::vec((range(), 1u32..=5), 0..6),
        (start, size) in range(),
    ) {
        let mut t = E820Table {
            entries: entries.iter().map(|&((addr, size), kind)| E820Entry { addr, size, kind }).collect(),
        };
        t.remove_ram(start, size);
        // Per type, the units each entry covers, as a multiset: RAM loses
        // exactly the removed units, every other type keeps its own.
        let count = |es: &[E820Entry], kind: u32| -> Vec<u32> {
            let mut n = vec![0u32; SPACE as usize];
            for e in es.iter().filter(|e| e.kind == kind) {
                for u in e.addr / UNIT..(e.addr + e.size) / UNIT {
                    n[u as usize] += 1;
                }
            }
            n
        };
        let before: Vec<E820Entry> = entries.iter().map(|&((addr, size), kind)| E820Entry { addr, size, kind }).collect();
        for kind in 1..=5 {
            let mut want = count(&before, kind);
            if kind == E820_RAM {
                for u in start / UNIT..(start + size) / UNIT {
                    want[u as usize] = 0;
                }
            }
            prop_assert_eq!(count(&t.entries, kind), want, "type {}", kind);
        }
    }

    #[test]
    fn every_form_reads_back_from_its_text(f in form()) {
        prop_assert_eq!(parse_form(&text(f)), Ok(f));
    }
}
