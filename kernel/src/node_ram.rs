//! Usable RAM per NUMA node as the boot reports it before memblock exists
//! (`NUMA: node N: X MiB usable RAM, …`): the firmware map's RAM entries
//! (free and the bootloader's) intersected with each node's SRAT ranges.
//!
//! Raw firmware bytes, like the `memboot: …K usable RAM` line: not rounded
//! to pages and not resolved against reserved entries, which memblock does
//! later (`memmap::memblock::Memblock::apply_affinity` tags its regions
//! with the same ranges). A node's overlapping SRAT ranges count once;
//! RAM no range covers counts for no node. Without SRAT all RAM is node 0.

use alloc::vec;
use alloc::vec::Vec;

use memmap::firmware::{FirmwareEntry, NodeAffinity};

/// Bytes of RAM of each node `0..nr_nodes` (index = node). Entries of
/// `srat` for nodes from `nr_nodes` on are ignored.
pub fn ram_bytes_per_node(
    map: &[FirmwareEntry],
    srat: Option<&[NodeAffinity]>,
    nr_nodes: usize,
) -> Vec<u64> {
    let mut bytes = vec![0u64; nr_nodes];
    let ram = || map.iter().filter(|e| e.kind.is_ram());
    let Some(srat) = srat else {
        if let Some(node0) = bytes.first_mut() {
            *node0 = ram().map(|e| e.len_bytes).sum();
        }
        return bytes;
    };
    for (node, node_bytes) in bytes.iter_mut().enumerate() {
        let mut ranges: Vec<(u64, u64)> = srat
            .iter()
            .filter(|a| a.nid as usize == node)
            .map(|a| (a.start, a.start.saturating_add(a.len_bytes)))
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        *node_bytes = ram()
            .map(|e| {
                let end = e.start.saturating_add(e.len_bytes);
                merged
                    .iter()
                    .map(|&(s, t)| t.min(end).saturating_sub(s.max(e.start)))
                    .sum::<u64>()
            })
            .sum();
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap::firmware::RegionKind::{self, *};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn e(start: u64, end: u64, kind: RegionKind) -> FirmwareEntry {
        FirmwareEntry::new(start, end - start, kind)
    }
    fn a(start: u64, end: u64, nid: u32) -> NodeAffinity {
        NodeAffinity::new(start, end - start, nid)
    }

    /// QEMU's 3-node layout shrunk: RAM 0–639 KiB, 1 MiB–3 GiB (16–18 MiB
    /// of it the bootloader's), 4–6 GiB; node 0 = 0–1 GiB, node 1 =
    /// 1–3 GiB and 4–5 GiB, node 2 = 5–6 GiB, node 3 CPUs only.
    #[test]
    fn each_node_gets_the_ram_of_its_ranges_by_hand() {
        let map = [
            e(0, 0x9fc00, Usable),
            e(0x9fc00, 0xa0000, Reserved),
            e(0xf0000, 0x100000, Reserved),
            e(MIB, 16 * MIB, Usable),
            e(16 * MIB, 18 * MIB, Bootloader),
            e(18 * MIB, 3 * GIB, Usable),
            e(3 * GIB, 3 * GIB + 64 * MIB, AcpiNvs),
            e(4 * GIB, 6 * GIB, Usable),
        ];
        let srat = [
            a(0, 0xa0000, 0),
            a(MIB, GIB, 0),
            a(GIB, 3 * GIB, 1),
            a(4 * GIB, 5 * GIB, 1),
            a(5 * GIB, 6 * GIB, 2),
        ];
        // Node 0: 0x9fc00 below 640 KiB, then 1 MiB..1 GiB (the
        // bootloader's 2 MiB included); the reserved 0x9fc00..0xa0000 in
        // its range is not RAM.
        let node0 = 0x9fc00 + (GIB - MIB);
        // Node 1: 1..3 GiB and 4..5 GiB; the ACPI NVS above 3 GiB is not RAM.
        let node1 = 2 * GIB + GIB;
        assert_eq!(
            ram_bytes_per_node(&map, Some(&srat), 4),
            [node0, node1, GIB, 0]
        );
        // Without SRAT: every RAM byte on node 0, 0x9fc00 + (3 GiB − 1 MiB)
        // + 2 GiB.
        assert_eq!(
            ram_bytes_per_node(&map, None, 1),
            [0x9fc00 + 3 * GIB - MIB + 2 * GIB]
        );
        assert_eq!(ram_bytes_per_node(&map, None, 0), Vec::<u64>::new());
    }

    #[test]
    fn overlapping_ranges_count_once_and_uncovered_ram_counts_nowhere() {
        let map = [e(0, 4 * GIB, Usable)];
        // Node 0 twice over 1..2 GiB, node 1 only 3..3.5 GiB; 0..1 GiB,
        // 2..3 GiB and 3.5..4 GiB have no node.
        let srat = [
            a(GIB, 2 * GIB, 0),
            a(GIB + MIB, 2 * GIB, 0),
            a(GIB, GIB + 512 * MIB, 0),
            a(3 * GIB, 3 * GIB + 512 * MIB, 1),
            a(0, GIB, 7),
        ];
        assert_eq!(
            ram_bytes_per_node(&map, Some(&srat), 2),
            [GIB, 512 * MIB],
            "node 7 is beyond nr_nodes"
        );
        // A range running past the end of the address space ends there.
        let srat = [NodeAffinity::new(2 * GIB, u64::MAX, 0)];
        assert_eq!(ram_bytes_per_node(&map, Some(&srat), 1), [2 * GIB]);
    }
}
