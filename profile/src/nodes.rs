//! Deferred init by NUMA node: each node's instructions, stores and bytes
//! (counts, the same on any host), its workers, and the critical path: the
//! largest node's instructions per worker, what a machine with a CPU per
//! worker waits for, also the same on any host. Beside them the split the
//! vCPUs actually ran, whose parallel efficiency depends on how the host
//! scheduled them.
//!
//! A vCPU's node comes from the boot's log: memboot prints the SRAT's CPU
//! affinities as Linux does at debug level (`ACPI: SRAT: PXM p -> APIC
//! 0xNN -> Node n`; QEMU gives vCPU i the APIC id i), Linux its bring-up
//! by node (`.... node  #n, CPUs:   #2 #3`: Linux numbers CPUs in APIC
//! order, the boot CPU 0 on node 0). Without either every vCPU is on node 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A phase's counts on one vCPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VcpuCounts {
    pub insns: u64,
    pub stores: u64,
    pub bytes: u64,
}

/// One node's share of a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeCounts {
    pub node: u32,
    /// The node's vCPUs that ran the phase.
    pub workers: u32,
    pub insns: u64,
    pub stores: u64,
    pub bytes: u64,
}

/// A phase split by node and by vCPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeSplit {
    pub nodes: Vec<NodeCounts>,
    /// The largest of each node's instructions per worker.
    pub critical_path_insns: f64,
    /// Per struct page of the phase, where its pages are known.
    pub critical_path_per_page: Option<f64>,
    /// The vCPUs that ran the phase: their instructions' sum over (their
    /// number × the largest). 1.0: perfectly even.
    pub parallel_efficiency: f64,
}

/// vCPU index → node, from the boot log (see the module docs); empty
/// without SRAT or bring-up lines.
pub fn vcpu_nodes(log: &str) -> BTreeMap<u32, u32> {
    let mut nodes = BTreeMap::new();
    for l in log.lines() {
        if let Some(rest) = l.find("SRAT: PXM ").map(|at| &l[at..]) {
            let apic = rest
                .split("-> APIC 0x")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            let node = rest
                .split("-> Node ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            if let (Some(Ok(apic)), Some(Ok(node))) = (
                apic.map(|a| u32::from_str_radix(a, 16)),
                node.map(str::parse),
            ) {
                nodes.insert(apic, node);
            }
        } else if let Some(rest) = l.split(".... node ").nth(1) {
            let Some((node, cpus)) = rest.split_once(", CPUs:") else {
                continue;
            };
            let Ok(node) = node.trim().trim_start_matches('#').parse::<u32>() else {
                continue;
            };
            for cpu in cpus.split('#').filter_map(|c| c.trim().parse::<u32>().ok()) {
                nodes.insert(cpu, node);
            }
        }
    }
    if !nodes.is_empty() {
        nodes.entry(0).or_insert(0);
    }
    nodes
}

/// A phase's per-vCPU counts split by node (`nodes`: vCPU → node; a vCPU
/// not in it is on node 0), its critical path per struct page where its
/// `pages` are known. `None` when no vCPU ran it.
pub fn split(
    per_vcpu: &[VcpuCounts],
    pages: Option<u64>,
    nodes: &BTreeMap<u32, u32>,
) -> Option<NodeSplit> {
    let mut by_node: BTreeMap<u32, NodeCounts> = BTreeMap::new();
    let mut ran = Vec::new();
    for (v, c) in per_vcpu.iter().enumerate() {
        if c.insns == 0 {
            continue;
        }
        ran.push(c.insns);
        let node = nodes.get(&(v as u32)).copied().unwrap_or(0);
        let n = by_node.entry(node).or_insert(NodeCounts {
            node,
            workers: 0,
            insns: 0,
            stores: 0,
            bytes: 0,
        });
        n.workers += 1;
        n.insns += c.insns;
        n.stores += c.stores;
        n.bytes += c.bytes;
    }
    let largest = *ran.iter().max()?;
    let critical_path_insns = by_node
        .values()
        .map(|n| n.insns as f64 / f64::from(n.workers))
        .fold(0.0, f64::max);
    Some(NodeSplit {
        nodes: by_node.into_values().collect(),
        critical_path_insns,
        critical_path_per_page: pages
            .filter(|&p| p > 0)
            .map(|p| critical_path_insns / p as f64),
        parallel_efficiency: ran.iter().sum::<u64>() as f64 / (ran.len() as f64 * largest as f64),
    })
}

/// The split's line for the log.
pub fn split_line(phase: &str, s: &NodeSplit) -> String {
    let nodes: Vec<String> = s
        .nodes
        .iter()
        .map(|n| format!("{}: {} on {}", n.node, n.insns, n.workers))
        .collect();
    format!(
        "memboot-profile: phase {phase} by node (instructions on workers): {}; critical path {:.0} instructions{}; the vCPUs' split ran at parallel efficiency {:.3}",
        nodes.join(", "),
        s.critical_path_insns,
        s.critical_path_per_page
            .map_or(String::new(), |p| format!(" ({p:.3} per struct page)")),
        s.parallel_efficiency
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-vCPU counts of `insns` each (stores a half, bytes four times).
    fn phase(per_vcpu: &[u64]) -> Vec<VcpuCounts> {
        per_vcpu
            .iter()
            .map(|&insns| VcpuCounts {
                insns,
                stores: insns / 2,
                bytes: insns * 4,
            })
            .collect()
    }

    #[test]
    fn the_srat_lines_place_each_vcpu() {
        let log = "[    0.129327] ACPI: SRAT: PXM 0 -> APIC 0x00 -> Node 0\n\
                   [    0.129331] ACPI: SRAT: PXM 1 -> APIC 0x01 -> Node 1\n\
                   [    0.129335] ACPI: SRAT: PXM 1 -> APIC 0x0a -> Node 1\n\
                   [    0.129339] ACPI: SRAT: Node 0 PXM 0 [mem 0x00000000-0x0009ffff]\n";
        let m = vcpu_nodes(log);
        assert_eq!(m, BTreeMap::from([(0, 0), (1, 1), (10, 1)]));
        assert!(vcpu_nodes("no srat").is_empty());
        let linux = "[    0.974766] smpboot: x86: Booting SMP configuration:\n\
                     [    0.974969] .... node  #0, CPUs:      #1\n\
                     [    0.977544] .... node  #1, CPUs:   #2 #3\n\
                     [    0.980000] .... node  #2, CPUs:   #4  #5\n";
        assert_eq!(
            vcpu_nodes(linux),
            BTreeMap::from([(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)])
        );
    }

    /// Node 1's two workers share 300, node 0's one worker 200: the critical
    /// path is 200 (node 0), the split's efficiency 500 / (3 × 200).
    #[test]
    fn the_critical_path_is_the_largest_node_per_worker() {
        let nodes = BTreeMap::from([(0, 0), (1, 1), (2, 1), (3, 1)]);
        let s = split(&phase(&[200, 100, 200, 0]), Some(1000), &nodes).unwrap();
        assert_eq!(
            s.nodes,
            vec![
                NodeCounts {
                    node: 0,
                    workers: 1,
                    insns: 200,
                    stores: 100,
                    bytes: 800
                },
                NodeCounts {
                    node: 1,
                    workers: 2,
                    insns: 300,
                    stores: 150,
                    bytes: 1200
                },
            ]
        );
        assert_eq!(s.critical_path_insns, 200.0);
        assert_eq!(s.critical_path_per_page, Some(0.2));
        assert!((s.parallel_efficiency - 500.0 / 600.0).abs() < 1e-12);
        let line = split_line("deferred", &s);
        assert!(
            line.contains(
                "0: 200 on 1, 1: 300 on 2; critical path 200 instructions (0.200 per struct page)"
            ),
            "{line}"
        );
        // Without SRAT every vCPU is node 0's.
        let one = split(&phase(&[200, 100]), None, &BTreeMap::new()).unwrap();
        assert_eq!((one.nodes.len(), one.critical_path_insns), (1, 150.0));
        assert!(split(&phase(&[0, 0]), None, &nodes).is_none());
    }
}
