//! Linux's `memmap=` boot parameter on x86: a user-defined firmware map.
//!
//! Linux (arch/x86/kernel/e820.c, `parse_memmap_one`) edits its e820 table
//! with each `memmap=` form, in command-line order, before memblock sees
//! it; `e820__finish_early_params` then sanitises the table
//! (`e820__update_table`) and prints it as `user-defined physical RAM
//! map:` followed by `user: [mem …] type` lines (`e820__print_table`).
//! [`apply`] does the same to the firmware map memboot was given, with the
//! forms the options read (`memboot_contract::memmap_forms`).
//!
//! Appending leaves overlaps in the table; sanitising resolves them the
//! firmware's way: where entries overlap the highest e820 type wins, and
//! neighbours of one type merge. A limit trims the RAM entries in the table
//! when it is applied, so a later `@` form adds RAM above it again.
//!
//! Unlike Linux, RAM is only what the firmware's map has as RAM: a range
//! declared usable keeps the part that is ([`UserMap::left_out`] lists the
//! rest, which becomes a hole), and one with no firmware RAM in it at all
//! is refused ([`UserMapError::RamNotInFirmware`]). Unlike Linux too, the
//! table has no fixed capacity (Linux drops entries
//! beyond `E820_MAX_ENTRIES`, 3200 on a `NODES_SHIFT=10` kernel, with
//! `too many entries; ignoring`); the options bound the command line
//! (`MAX_FORMS`).

use alloc::vec::Vec;
use core::fmt;

use memboot_contract::memmap_forms::{
    Form, E820_ACPI, E820_NVS, E820_RAM, E820_RESERVED, E820_UNUSABLE,
};

use crate::firmware::{FirmwareEntry, RegionKind};

/// One e820 entry: `[addr, addr + size)` of e820 type `kind` (0 for an
/// entry Linux's range removal zeroed: still counted, never printed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E820Entry {
    pub(crate) addr: u64,
    pub size: u64,
    pub kind: u32,
}

/// Why the user-defined map cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserMapError {
    /// Fewer than two entries: Linux's `e820__update_table` refuses to
    /// sanitise it and panics (`Invalid user supplied memory map`).
    TooFewEntries { entries: usize },
    /// An entry's end runs past 2^64 (Linux panics the same way).
    Wraps { start: u64, size: u64 },
    /// A range declared usable (`nn@ss`) with no firmware RAM anywhere in
    /// it: Linux trusts the user there, but on a virtual machine that
    /// memory is not there (QEMU's `-m` decides), and writing struct pages
    /// or page tables into it loses them. (A range that meets firmware RAM
    /// keeps that part; the rest is left out: [`UserMap::left_out`].)
    RamNotInFirmware { start: u64, end: u64 },
    /// Memory the boot already uses is not usable RAM in the user's map.
    InUseNotRam {
        start: u64,
        end: u64,
        what: &'static str,
    },
}

impl fmt::Display for UserMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserMapError::TooFewEntries { entries } => write!(
                f,
                "the memmap= map has {entries} entr{} (Linux panics: Invalid user supplied memory map): give at least two ranges after exactmap",
                if *entries == 1 { "y" } else { "ies" }
            ),
            UserMapError::Wraps { start, size } => write!(
                f,
                "memmap= range of {size:#x} bytes at {start:#x} runs past 2^64 (Linux panics: Invalid user supplied memory map)"
            ),
            UserMapError::RamNotInFirmware { start, end } => write!(
                f,
                "memmap= declares [mem {start:#018x}-{:#018x}] usable, but the firmware's map has no RAM anywhere in it (the machine's RAM is what QEMU's -m gave it): declare RAM inside the firmware's usable ranges",
                end - 1
            ),
            UserMapError::InUseNotRam { start, end, what } => write!(
                f,
                "memmap= leaves [mem {start:#018x}-{:#018x}] ({what}) outside usable RAM, but the boot already uses it: keep it usable (an @ form over it, or no exactmap)",
                end - 1
            ),
        }
    }
}

/// The e820 table the forms edit, unsanitised between forms as Linux's is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct E820Table {
    pub(crate) entries: Vec<E820Entry>,
}

impl E820Table {
    /// Apply one form (Linux `parse_memmap_one`).
    pub(crate) fn apply(&mut self, form: Form) {
        match form {
            Form::ExactMap => self.entries.clear(),
            Form::Add { start, size, kind } => self.entries.push(E820Entry {
                addr: start,
                size,
                kind,
            }),
            Form::Limit { bytes } => self.remove_ram(bytes, u64::MAX - bytes),
        }
    }

    /// Linux's `e820__range_remove(start, size, E820_TYPE_RAM, true)`:
    /// every RAM entry loses what of it lies in `[start, start + size)`;
    /// an entry wholly inside becomes a zeroed entry, one that straddles
    /// the range keeps its head and gets its tail appended.
    pub(crate) fn remove_ram(&mut self, start: u64, size: u64) {
        let end = start + size.min(u64::MAX - start);
        let mut i = 0;
        while i < self.entries.len() {
            let e = self.entries[i];
            i += 1;
            if e.kind != E820_RAM {
                continue;
            }
            let e_end = e.addr.wrapping_add(e.size);
            let (lo, hi) = (start.max(e.addr), end.min(e_end));
            let (kept, tail) = if e.addr >= start && e_end <= end {
                (
                    E820Entry {
                        addr: 0,
                        size: 0,
                        kind: 0,
                    },
                    None,
                )
            } else if e.addr < start && e_end > end {
                let head = E820Entry {
                    size: start - e.addr,
                    ..e
                };
                (
                    head,
                    Some(E820Entry {
                        addr: end,
                        size: e_end - end,
                        kind: e.kind,
                    }),
                )
            } else if lo < hi {
                let addr = if e.addr >= lo { hi } else { e.addr };
                (
                    E820Entry {
                        addr,
                        size: e.size - (hi - lo),
                        kind: e.kind,
                    },
                    None,
                )
            } else {
                continue;
            };
            self.entries[i - 1] = kept;
            self.entries.extend(tail);
        }
    }

    /// Linux's `e820__update_table`: sorted, no overlaps (the highest type
    /// wins), neighbours of one type merged, empty entries gone.
    pub(crate) fn sanitize(&self) -> Result<Vec<E820Entry>, UserMapError> {
        if self.entries.len() < 2 {
            return Err(UserMapError::TooFewEntries {
                entries: self.entries.len(),
            });
        }
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.addr.checked_add(e.size).is_none())
        {
            return Err(UserMapError::Wraps {
                start: e.addr,
                size: e.size,
            });
        }
        Ok(sanitize(&self.entries))
    }
}

/// The change-point sweep of `e820__update_table`: at every address where
/// an entry starts or ends, the type is the highest of the entries that
/// cover it; an output entry runs while that type stays the same.
fn sanitize(entries: &[E820Entry]) -> Vec<E820Entry> {
    // (address, is_end, type); starts sort before ends at one address, so
    // entries that touch merge (Linux's `cpcompare`).
    let mut points: Vec<(u64, bool, u32)> = entries
        .iter()
        .filter(|e| e.size != 0)
        .flat_map(|e| [(e.addr, false, e.kind), (e.addr + e.size, true, e.kind)])
        .collect();
    points.sort_unstable_by_key(|&(addr, is_end, _)| (addr, is_end));
    // How many entries of each type cover the sweep's position.
    let mut covering: Vec<(u32, usize)> = Vec::new();
    let mut out: Vec<E820Entry> = Vec::new();
    // The output entry being built: its start and type (0: none).
    let (mut open_addr, mut last_type) = (0, 0);
    for (addr, is_end, kind) in points {
        match covering.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) if is_end => *n -= 1,
            Some((_, n)) => *n += 1,
            None => covering.push((kind, 1)),
        }
        let current = covering
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, _)| *k)
            .max()
            .unwrap_or(0);
        if current == last_type {
            continue;
        }
        if last_type != 0 && addr > open_addr {
            out.push(E820Entry {
                addr: open_addr,
                size: addr - open_addr,
                kind: last_type,
            });
        }
        (open_addr, last_type) = (addr, current);
    }
    out
}

/// The e820 type of a firmware map kind: the bootloader's regions are RAM
/// to the firmware (memboot marks them in use afterwards).
pub const fn e820_type(kind: RegionKind) -> u32 {
    match kind {
        RegionKind::Usable | RegionKind::Bootloader => E820_RAM,
        RegionKind::AcpiReclaimable => E820_ACPI,
        RegionKind::AcpiNvs => E820_NVS,
        RegionKind::Reserved => E820_RESERVED,
        RegionKind::Unusable => E820_UNUSABLE,
    }
}

/// The firmware map kind of an e820 type (every type not named is
/// reserved, as `bootmap::region_kind` reads the firmware's).
pub(crate) const fn region_kind(kind: u32) -> RegionKind {
    match kind {
        E820_RAM => RegionKind::Usable,
        E820_ACPI => RegionKind::AcpiReclaimable,
        E820_NVS => RegionKind::AcpiNvs,
        E820_UNUSABLE => RegionKind::Unusable,
        _ => RegionKind::Reserved,
    }
}

/// Linux's name of an e820 type in its map lines (`e820_print_type`).
pub const fn type_name(kind: u32) -> &'static str {
    match kind {
        E820_RAM => "usable",
        E820_RESERVED => "reserved",
        E820_ACPI => "ACPI data",
        E820_NVS => "ACPI NVS",
        E820_UNUSABLE => "unusable",
        _ => "type",
    }
}

/// A user map line, byte for byte as Linux prints it after the timestamp:
/// `user: [mem %#018Lx-%#018Lx] usable`.
pub struct UserLine<'a>(pub &'a E820Entry);

impl fmt::Display for UserLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "user: [mem {:#018x}-{:#018x}] {}",
            e.addr,
            e.addr + e.size - 1,
            type_name(e.kind)
        )?;
        if !matches!(e.kind, E820_RAM..=E820_UNUSABLE) {
            write!(f, " {}", e.kind)?;
        }
        Ok(())
    }
}

/// Linux's line before the user map.
pub const USER_MAP_HEADING: &str = "user-defined physical RAM map:";

/// A firmware map with the user's forms applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserMap {
    /// The sanitised e820 table, as Linux prints it.
    pub e820: Vec<E820Entry>,
    /// The same as memblock's input: the user's entries, then the
    /// firmware's `Bootloader` regions again (memblock resolves the
    /// overlap: in-use RAM wins over usable).
    pub map: Vec<FirmwareEntry>,
    /// `[start, end)` ranges declared usable that are not RAM in the
    /// firmware's map, left out of `e820` (neither RAM nor any other type:
    /// a hole), in address order; the kernel prints a [`LeftOutLine`] for
    /// each. Linux's kdump form `memmap=exactmap memmap=640K@0 …` declares
    /// the firmware's EBDA (0x9fc00–0x9ffff on a PC) usable: Linux takes
    /// it, memboot keeps the boot going without it.
    pub left_out: Vec<(u64, u64)>,
}

/// The warning for one left-out range of [`UserMap::left_out`].
pub struct LeftOutLine(pub (u64, u64));

impl fmt::Display for LeftOutLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, end) = self.0;
        write!(
            f,
            "memboot: memmap= declares [mem {start:#018x}-{:#018x}] usable, but the firmware's map has no RAM there: left out of the user-defined map",
            end - 1
        )
    }
}

/// Apply `forms`, in order, to the firmware map `firmware` (sanitised
/// first, as Linux sanitises the firmware's table before its parameters
/// are read). `in_use`: memory the boot already occupies besides the
/// firmware map's `Bootloader` regions (the kernel heap); all of it must
/// stay usable RAM.
pub fn apply(
    firmware: &[FirmwareEntry],
    forms: &[Form],
    in_use: &[(u64, u64, &'static str)],
) -> Result<UserMap, UserMapError> {
    let mut table = E820Table {
        entries: firmware
            .iter()
            .map(|e| E820Entry {
                addr: e.start,
                size: e.len_bytes,
                kind: e820_type(e.kind),
            })
            .collect(),
    };
    if table.entries.len() >= 2
        && table
            .entries
            .iter()
            .all(|e| e.addr.checked_add(e.size).is_some())
    {
        table.entries = sanitize(&table.entries);
    }
    let firmware_e820 = table.entries.clone();
    let declared = apply_forms(&mut table, forms);
    let e820 = table.sanitize()?;
    if let Some(&(start, end)) = declared
        .iter()
        .find(|&&(start, end)| !meets_ram(&firmware_e820, start, end))
    {
        return Err(UserMapError::RamNotInFirmware { start, end });
    }
    let (e820, left_out) = keep_firmware_ram(e820, &firmware_e820);
    let loader = firmware
        .iter()
        .filter(|e| e.kind == RegionKind::Bootloader)
        .map(|e| {
            (
                e.start,
                e.start + e.len_bytes,
                "kernel image, page tables, boot info",
            )
        });
    for (start, end, what) in loader.chain(in_use.iter().map(|&(s, len, w)| (s, s + len, w))) {
        if !covered_by_ram(&e820, start, end) {
            return Err(UserMapError::InUseNotRam { start, end, what });
        }
    }
    let mut map: Vec<FirmwareEntry> = e820
        .iter()
        .map(|e| FirmwareEntry::new(e.addr, e.size, region_kind(e.kind)))
        .collect();
    map.extend(firmware.iter().filter(|e| e.kind == RegionKind::Bootloader));
    Ok(UserMap {
        e820,
        map,
        left_out,
    })
}

/// Apply `forms` to `table` in order; returns the `[start, end)` ranges
/// the `@` forms declared usable that are still in the table at the end
/// (an `exactmap` drops those before it, a limit trims them as it trims
/// every RAM entry).
fn apply_forms(table: &mut E820Table, forms: &[Form]) -> Vec<(u64, u64)> {
    let mut declared: Vec<(u64, u64)> = Vec::new();
    for &form in forms {
        table.apply(form);
        match form {
            Form::ExactMap => declared.clear(),
            Form::Add {
                start,
                size,
                kind: E820_RAM,
            } if size > 0 => declared.push((start, start.saturating_add(size))),
            Form::Add { .. } => {}
            Form::Limit { bytes } => {
                declared.retain(|&(start, _)| start < bytes);
                declared.iter_mut().for_each(|r| r.1 = r.1.min(bytes));
            }
        }
    }
    declared
}

/// Does `[start, end)` share any byte with RAM in `e820`?
fn meets_ram(e820: &[E820Entry], start: u64, end: u64) -> bool {
    e820.iter().any(|e| {
        e.kind == E820_RAM && e.size > 0 && e.addr < end && start < e.addr.saturating_add(e.size)
    })
}

/// `e820`'s RAM cut to what is RAM in `firmware` (sorted, no overlaps):
/// the table to use, and the `[start, end)` ranges cut out of it. Every
/// other type stays as it is.
fn keep_firmware_ram(
    e820: Vec<E820Entry>,
    firmware: &[E820Entry],
) -> (Vec<E820Entry>, Vec<(u64, u64)>) {
    let mut kept = Vec::with_capacity(e820.len());
    let mut left_out = Vec::new();
    for e in e820 {
        if e.kind != E820_RAM {
            kept.push(e);
            continue;
        }
        let end = e.addr + e.size;
        let mut at = e.addr;
        for f in firmware.iter().filter(|f| f.kind == E820_RAM) {
            let (lo, hi) = (f.addr.max(at), f.addr.saturating_add(f.size).min(end));
            if lo >= hi {
                continue;
            }
            if lo > at {
                left_out.push((at, lo));
            }
            kept.push(E820Entry {
                addr: lo,
                size: hi - lo,
                kind: E820_RAM,
            });
            at = hi;
        }
        if at < end {
            left_out.push((at, end));
        }
    }
    (kept, left_out)
}

/// Is `[start, end)` wholly RAM in `e820` (sorted, no overlaps; an
/// unsanitised table of under two entries is fine too)?
fn covered_by_ram(e820: &[E820Entry], mut start: u64, end: u64) -> bool {
    for e in e820.iter().filter(|e| e.kind == E820_RAM) {
        if e.addr <= start && start < e.addr + e.size {
            start = e.addr + e.size;
        }
        if start >= end {
            return true;
        }
    }
    start >= end
}

#[cfg(test)]
mod tests;
