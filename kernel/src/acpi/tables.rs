//! Bytes to tables: checked field reads, checksums, headers, the RSDP and
//! root table, and the type/length entry walk MADT and SRAT share.

use alloc::vec::Vec;

use super::error::Warnings;
use super::error::{AcpiError, TableProblem};
use super::info::TableInfo;
use super::limits::*;

/// Read-only access to physical memory.
pub trait PhysMemory {
    /// Copy `buf.len()` bytes from physical address `phys`; Err if not
    /// readable/out of range.
    fn read(&self, phys: u64, buf: &mut [u8]) -> Result<(), AcpiError>;
}

pub(super) fn array_at<const N: usize>(b: &[u8], offset: usize) -> Option<[u8; N]> {
    b.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

pub(super) fn u8_at(b: &[u8], offset: usize) -> Option<u8> {
    b.get(offset).copied()
}

pub(super) fn u32_at(b: &[u8], offset: usize) -> Option<u32> {
    array_at(b, offset).map(u32::from_le_bytes)
}

pub(super) fn u64_at(b: &[u8], offset: usize) -> Option<u64> {
    array_at(b, offset).map(u64::from_le_bytes)
}

pub(super) fn sum_bytes(start: u8, bytes: &[u8]) -> u8 {
    bytes.iter().fold(start, |s, &b| s.wrapping_add(b))
}

pub(super) fn read_array<const N: usize, M: PhysMemory + ?Sized>(
    mem: &M,
    phys: u64,
) -> Result<[u8; N], AcpiError> {
    let mut buf = [0u8; N];
    mem.read(phys, &mut buf)?;
    Ok(buf)
}

/// Sum of `len_bytes` bytes at `phys`, read in small chunks so that tables
/// we only validate never need a heap copy.
pub(super) fn checksum_phys<M: PhysMemory + ?Sized>(
    mem: &M,
    phys: u64,
    len_bytes: u32,
) -> Option<u8> {
    let mut chunk = [0u8; 512];
    let mut sum = 0u8;
    let mut done: u32 = 0;
    while done < len_bytes {
        let n = (len_bytes - done).min(chunk.len() as u32);
        let buf = chunk.get_mut(..n as usize)?;
        mem.read(phys.checked_add(u64::from(done))?, buf).ok()?;
        sum = sum_bytes(sum, buf);
        done += n;
    }
    Some(sum)
}

/// Parses a 36-byte SDT header (§5.2.6).
pub(super) fn parse_header(phys: u64, h: &[u8; SDT_HEADER_LEN as usize]) -> TableInfo {
    TableInfo {
        signature: array_at(h, 0).unwrap_or(SIG_UNKNOWN),
        phys,
        length: u32_at(h, 4).unwrap_or(0),
        revision: u8_at(h, 8).unwrap_or(0),
        oem_id: array_at(h, 10).unwrap_or_default(),
        oem_table_id: array_at(h, 16).unwrap_or_default(),
        oem_revision: u32_at(h, 24).unwrap_or(0),
        creator_id: array_at(h, 28).unwrap_or_default(),
        creator_revision: u32_at(h, 32).unwrap_or(0),
    }
}

/// A validated table, with a heap copy of its bytes if it was asked for.
type Fetched = (TableInfo, Option<Vec<u8>>);
/// The signature to report (expected or found) and what was wrong.
type Rejected = ([u8; 4], TableProblem);

/// Validates the table at `phys`: header readable, plausible length,
/// expected signature (if given), checksum. When `keep` says so for its
/// signature, the whole table is returned as a heap copy for parsing.
pub(super) fn fetch_table<M: PhysMemory + ?Sized>(
    mem: &M,
    phys: u64,
    expected: Option<[u8; 4]>,
    keep: impl Fn(&[u8; 4]) -> bool,
) -> Result<Fetched, Rejected> {
    let unknown = expected.unwrap_or(SIG_UNKNOWN);
    if phys == 0 {
        return Err((unknown, TableProblem::NullAddress));
    }
    let raw = read_array::<{ SDT_HEADER_LEN as usize }, M>(mem, phys)
        .map_err(|_| (unknown, TableProblem::Unreadable))?;
    let info = parse_header(phys, &raw);
    if let Some(want) = expected {
        if info.signature != want {
            return Err((
                want,
                TableProblem::BadSignature {
                    found: info.signature,
                },
            ));
        }
    }
    let sig = info.signature;
    let length = info.length;
    if !(SDT_HEADER_LEN..=MAX_TABLE_LEN).contains(&length) {
        return Err((sig, TableProblem::BadLength { length }));
    }
    if keep(&sig) {
        let mut data = Vec::new();
        data.try_reserve_exact(length as usize)
            .map_err(|_| (sig, TableProblem::OutOfMemory { length }))?;
        data.resize(length as usize, 0);
        mem.read(phys, &mut data)
            .map_err(|_| (sig, TableProblem::Unreadable))?;
        match sum_bytes(0, &data) {
            0 => Ok((info, Some(data))),
            sum => Err((sig, TableProblem::BadChecksum { sum })),
        }
    } else {
        match checksum_phys(mem, phys, length) {
            None => Err((sig, TableProblem::Unreadable)),
            Some(0) => Ok((info, None)),
            Some(sum) => Err((sig, TableProblem::BadChecksum { sum })),
        }
    }
}

pub(super) struct Rsdp {
    pub(super) revision: u8,
    pub(super) oem_id: [u8; 6],
    pub(super) length: u32,
    pub(super) rsdt: u32,
    pub(super) xsdt: u64,
}

/// §5.2.5.3: validates the RSDP at `phys`.
pub(super) fn read_rsdp<M: PhysMemory + ?Sized>(mem: &M, phys: u64) -> Result<Rsdp, AcpiError> {
    let v1 = read_array::<{ RSDP_V1_LEN as usize }, M>(mem, phys)?;
    let signature: [u8; 8] = array_at(&v1, 0).unwrap_or_default();
    if &signature != b"RSD PTR " {
        return Err(AcpiError::RsdpSignature {
            phys,
            found: signature,
        });
    }
    if sum_bytes(0, &v1) != 0 {
        return Err(AcpiError::RsdpChecksum { phys });
    }
    let mut rsdp = Rsdp {
        revision: u8_at(&v1, 15).unwrap_or(0),
        oem_id: array_at(&v1, 9).unwrap_or_default(),
        length: RSDP_V1_LEN,
        rsdt: u32_at(&v1, 16).unwrap_or(0),
        xsdt: 0,
    };
    // Revision 1 was never defined; anything below 2 is the 1.0 layout.
    if rsdp.revision >= 2 {
        let v2 = read_array::<{ RSDP_V2_LEN as usize }, M>(mem, phys)?;
        let length = u32_at(&v2, 20).unwrap_or(0);
        if !(RSDP_V2_LEN..=RSDP_MAX_LEN).contains(&length) {
            return Err(AcpiError::RsdpLength { phys, length });
        }
        match checksum_phys(mem, phys, length) {
            None => {
                return Err(AcpiError::Unreadable {
                    phys,
                    len: u64::from(length),
                })
            }
            Some(0) => {}
            Some(_) => return Err(AcpiError::RsdpExtendedChecksum { phys, length }),
        }
        rsdp.length = length;
        rsdp.xsdt = u64_at(&v2, 24).unwrap_or(0);
    }
    Ok(rsdp)
}

/// Picks and validates the root table: XSDT if possible, else RSDT.
/// Returns it with its entry size in bytes.
pub(super) fn find_root<M: PhysMemory + ?Sized>(
    mem: &M,
    rsdp_phys: u64,
    rsdp: &Rsdp,
    warnings: &mut Warnings,
) -> Result<(TableInfo, u32), AcpiError> {
    let rsdt = u64::from(rsdp.rsdt);
    let fetch_rsdt = || {
        fetch_table(mem, rsdt, Some(SIG_RSDT), |_| false)
            .map(|(t, _)| (t, 4))
            .map_err(|(signature, problem)| AcpiError::RootTable {
                signature,
                phys: rsdt,
                problem,
            })
    };
    if rsdp.revision >= 2 && rsdp.xsdt != 0 {
        match fetch_table(mem, rsdp.xsdt, Some(SIG_XSDT), |_| false) {
            Ok((t, _)) => Ok((t, 8)),
            Err((signature, problem)) if rsdt == 0 => Err(AcpiError::RootTable {
                signature,
                phys: rsdp.xsdt,
                problem,
            }),
            Err((signature, problem)) => {
                // The RSDT exists for ACPI 1.0 OSes; it is the documented
                // fallback when the XSDT is broken.
                warnings.push(signature, rsdp.xsdt, problem);
                fetch_rsdt()
            }
        }
    } else if rsdt != 0 {
        fetch_rsdt()
    } else {
        Err(AcpiError::NoRootTable { rsdp_phys })
    }
}

pub(super) struct Entry<'a> {
    pub(super) offset: usize,
    pub(super) entry_type: u8,
    /// The whole entry including its type and length bytes, so spec offsets
    /// apply directly.
    pub(super) bytes: &'a [u8],
}

impl Entry<'_> {
    pub(super) fn too_short(&self) -> TableProblem {
        TableProblem::BadEntry {
            offset: self.offset as u32,
            entry_type: self.entry_type,
            entry_length: self.bytes.len() as u8,
        }
    }
}

/// Iterates type/length entries from `offset` to the end of `table`. Yields
/// one `Err` and stops on an entry whose length is < 2 (which would never
/// advance) or runs past the table end.
pub(super) struct Entries<'a> {
    pub(super) table: &'a [u8],
    pub(super) offset: usize,
    pub(super) done: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, TableProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.offset >= self.table.len() {
            return None;
        }
        let offset = self.offset;
        let entry_type = u8_at(self.table, offset).unwrap_or(0);
        let entry_length = u8_at(self.table, offset + 1).unwrap_or(0);
        let bytes = match usize::from(entry_length) {
            0 | 1 => None,
            n => self.table.get(offset..offset + n),
        };
        match bytes {
            Some(bytes) => {
                self.offset = offset + bytes.len();
                Some(Ok(Entry {
                    offset,
                    entry_type,
                    bytes,
                }))
            }
            None => {
                self.done = true;
                Some(Err(TableProblem::EntriesTruncated {
                    offset: offset as u32,
                    entry_type,
                    entry_length,
                }))
            }
        }
    }
}

pub(super) fn entries(table: &[u8], offset: usize) -> Entries<'_> {
    Entries {
        table,
        offset,
        done: false,
    }
}
