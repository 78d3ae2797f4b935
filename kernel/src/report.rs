//! Report formatting: dmesg-style timestamps, and the boot's facts as the
//! `memboot-summary:` line ([`memboot_contract::summary::Summary`], the
//! schema the host reads back).

use core::fmt::{self, Write};

use memboot_contract::summary::{Summary, SummaryCut, TscMhz, SUMMARY_VERSION};

use crate::pipeline::facts::AllocTestReport;
use crate::pipeline::facts::MmFacts;

/// `[    5.123456] ` prefix for a time since kernel entry, like dmesg.
pub struct Timestamp(pub u64 /* ns */);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let micros = (self.0 % 1_000_000_000) / 1_000;
        write!(f, "[{secs:5}.{micros:06}]")
    }
}

/// The boot-level facts of the summary (the memory-init ones are
/// [`MmFacts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootFacts {
    /// Usable RAM in the bootloader's map (free frames plus the bootloader's).
    pub mem_bytes: u64,
    pub nodes: u64,
    pub cpus: u64,
    pub ap_online: u64,
    pub tsc_khz: u64,
    /// The kernel heap's size and its peak use.
    pub heap_bytes: u64,
    pub heap_peak_bytes: u64,
    /// How the kernel was entered: `pvh`, `bios` or `uefi`.
    pub entry: &'static str,
    /// The TSC at kernel entry as time: the VM's reset to kernel entry
    /// (firmware and entry path), 0 before the TSC rate is known.
    pub reset_to_entry_ns: u64,
}

/// The alloc test's figures by order, as the summary's arrays hold them.
struct OrderColumns {
    orders: [u64; 4],
    count: [u64; 4],
    p50_ns: [u64; 4],
    p99_ns: [u64; 4],
    max_ns: [u64; 4],
    grow_steps: [u64; 4],
}

impl OrderColumns {
    fn of(a: &AllocTestReport) -> Self {
        Self {
            orders: a.orders.map(|f| f.order.into()),
            count: a.orders.map(|f| f.count),
            p50_ns: a.orders.map(|f| f.p50_ns),
            p99_ns: a.orders.map(|f| f.p99_ns),
            max_ns: a.orders.map(|f| f.max_ns),
            grow_steps: a.orders.map(|f| f.growth_steps),
        }
    }
}

/// The summary of a boot that ended with `status` after `total_ns`,
/// borrowing everything: building it allocates nothing.
fn summary<'a>(
    status: &'a str,
    total_ns: u64,
    boot: &'a BootFacts,
    mm: &'a MmFacts,
    columns: &'a OrderColumns,
) -> Summary<'a> {
    // Clamped, not indexed: an `nr_nodes` beyond the arrays (a bug
    // elsewhere) must not panic the one path that reports panics.
    let by_node = |ns: &'a [u64]| ns[..mm.nr_nodes.min(ns.len())].into();
    let a = &mm.alloc_test;
    Summary {
        mem_bytes: boot.mem_bytes,
        nodes: boot.nodes,
        cpus: boot.cpus,
        ap_online: boot.ap_online,
        tsc_mhz: TscMhz { khz: boot.tsc_khz },
        status: status.into(),
        total_ns,
        strategy: mm.strategy.into(),
        present_pages: mm.present_pages,
        eager_pages: mm.eager_pages,
        low_zone_pages: mm.low_zone_pages,
        deferred_pages: mm.deferred_pages,
        reserved_pages: mm.reserved_pages,
        hole_pages: mm.hole_pages,
        memmap_boot_ns: mm.memmap_boot_ns,
        buddy_eager_ns: mm.buddy_eager_ns,
        deferred_ns: mm.deferred_ns,
        node_deferred_ns: by_node(&mm.node_deferred_ns),
        deferred_workers: mm.deferred_workers,
        grown_pages: mm.grown_pages,
        memblock_ns: mm.memblock_ns,
        vmemmap_ns: mm.vmemmap_ns,
        vmemmap_bytes: mm.vmemmap_bytes,
        memory_block_ns: mm.memory_block_ns,
        memory_block_size: mm.memory_block_size,
        nr_memory_blocks: mm.nr_memory_blocks,
        free_pages: mm.free_pages,
        verify: mm.verify.name().into(),
        verify_ns: mm.verify_ns,
        phases: mm.phases.as_slice().into(),
        allocatable_ns: mm.allocatable_ns,
        pool_pages: mm.pool_pages,
        drained_pages: mm.drained_pages,
        alloc_test_bytes: a.bytes_per_node,
        alloc_test_pages: a.allocated_pages,
        alloc_test_ns: a.wall_ns,
        alloc_test_failed: a.failed,
        alloc_orders: columns.orders.as_slice().into(),
        alloc_count: columns.count.as_slice().into(),
        alloc_p50_ns: columns.p50_ns.as_slice().into(),
        alloc_p99_ns: columns.p99_ns.as_slice().into(),
        alloc_max_ns: columns.max_ns.as_slice().into(),
        alloc_grow_steps: columns.grow_steps.as_slice().into(),
        heap_bytes: boot.heap_bytes,
        heap_peak_bytes: boot.heap_peak_bytes,
        pages_initialised_at_allocatable: mm.pages_initialised_at_allocatable,
        pages_initialised: mm.pages_initialised,
        drain_ns: mm.drain_ns,
        node_drain_ns: by_node(&mm.node_drain_ns),
        drain_workers: mm.drain_workers,
        grow_step_count: a.growth.count,
        grow_step_p50_ns: a.growth.p50_ns,
        grow_step_p99_ns: a.growth.p99_ns,
        grow_step_max_ns: a.growth.max_ns,
        vmemmap_sections_mapped: mm.vmemmap_sections_mapped,
        hole_pages_on_first_use: mm.hole_pages_on_first_use,
        struct_page_bytes: mm.struct_page_bytes,
        memory_block_lookup: mm.memory_block_lookup.into(),
        entry: boot.entry.into(),
        reset_to_entry_ns: boot.reset_to_entry_ns,
        summary_version: SUMMARY_VERSION,
        buddy_store: mm.buddy_store.into(),
        buddy_index_bytes: mm.buddy_index_bytes,
        alloc_pcp_batch: mm.alloc_test.pcp_batch,
        alloc_pcp_high: mm.alloc_test.pcp_high,
        free_bitmaps_ns: mm.free_bitmaps_ns,
    }
}

/// `memboot-summary: {json}` into `line`, streamed without a buffer or an
/// allocation (the panic path uses it): [`Summary::write_line`].
pub fn write_summary_line<W: Write>(
    line: &mut W,
    status: &str,
    total_ns: u64,
    boot: &BootFacts,
    mm: &MmFacts,
) -> Result<usize, SummaryCut> {
    let columns = OrderColumns::of(&mm.alloc_test);
    summary(status, total_ns, boot, mm, &columns).write_line(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::facts::{Phase, PhaseSpan, VerifyOutcome};
    use alloc::string::String;
    use alloc::vec::Vec;
    use memboot_contract::summary::{SUMMARY_FAILED_STATUS, SUMMARY_PREFIX};

    /// The largest machine run-qemu.sh accepts.
    const MAX_CPUS: u32 = 255;
    const MAX_NODES: u32 = 64;

    /// The facts a boot of `cpus` CPUs over `nodes` nodes records, with
    /// every kind of phase at once (a boot has deferred workers or drain
    /// workers, not both): the boot CPU's phases, a deferred and a drain
    /// worker per CPU on its node (run-qemu.sh's contiguous spread), and an
    /// alloc_test phase per (CPU, node), or per CPU over all nodes if
    /// `fold` (what the kernel records past `MAX_NODE_SPANS`). Stamps are
    /// 13 digits (a boot of hours), the longest a timeline is likely to
    /// carry.
    fn facts_of(cpus: u32, nodes: u32, fold: bool) -> MmFacts {
        let mut mm = MmFacts::EMPTY;
        mm.strategy = "ondemand";
        mm.nr_nodes = nodes as usize;
        mm.verify = VerifyOutcome::Ok;
        let mut t = 1_000_000_000_000u64;
        let mut span = |phase, cpu, node| {
            t += 1_234_567;
            PhaseSpan {
                phase,
                cpu,
                node,
                nodes: None,
                start_ns: t,
                end_ns: t + 999_999,
            }
        };

        for phase in [
            Phase::Memblock,
            Phase::Zones,
            Phase::Vmemmap,
            Phase::EagerMemmap,
            Phase::BuddyHandoff,
            Phase::MemoryBlocks,
            Phase::Verify,
        ] {
            mm.phases.push(span(phase, 0, None));
        }
        let node_of = |cpu: u32| (0..nodes).find(|&n| cpu < ((n + 1) * cpus).div_ceil(nodes));
        for phase in [Phase::DeferredInit, Phase::Drain] {
            for cpu in 0..cpus {
                mm.phases.push(span(phase, cpu, node_of(cpu)));
            }
        }
        if fold {
            for cpu in 0..cpus {
                mm.phases.push(PhaseSpan {
                    nodes: Some(nodes),
                    ..span(Phase::AllocTest, cpu, None)
                });
            }
        } else {
            for node in 0..nodes {
                for cpu in 0..cpus {
                    mm.phases.push(span(Phase::AllocTest, cpu, Some(node)));
                }
            }
        }
        for (i, ns) in mm.node_deferred_ns.iter_mut().enumerate() {
            *ns = 1_000_000_000 + i as u64;
        }
        mm.deferred_workers = cpus.into();
        mm
    }

    fn boot_of(cpus: u32, nodes: u32) -> BootFacts {
        BootFacts {
            mem_bytes: 512 << 20,
            nodes: nodes.into(),
            cpus: cpus.into(),
            ap_online: (cpus - 1).into(),
            tsc_khz: 2_445_237,
            heap_bytes: 56 << 20,
            heap_peak_bytes: 3 << 20,
            entry: "pvh",
            reset_to_entry_ns: 44_000_000,
        }
    }

    fn parse_line(line: &str) -> serde_json::Value {
        let json = line
            .strip_prefix(SUMMARY_PREFIX)
            .unwrap_or_else(|| panic!("no prefix: {}", &line[..line.len().min(80)]));
        serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e})"))
    }

    /// The largest machine as the kernel records it (alloc_test folded per
    /// CPU): whole JSON, every key, a lane's phases for every CPU.
    #[test]
    fn folded_summary_of_255_cpus_on_64_nodes_is_whole_json_with_every_key() {
        let mm = facts_of(MAX_CPUS, MAX_NODES, true);
        let mut line = String::new();
        let len = write_summary_line(&mut line, "ok", 7, &boot_of(MAX_CPUS, MAX_NODES), &mm)
            .expect("a String takes any length");
        assert_eq!(len, line.len());
        let v = parse_line(&line);
        let obj = v.as_object().unwrap();
        for key in Summary::KEYS {
            assert!(obj.contains_key(*key), "no {key}");
        }
        assert_eq!(obj.len(), Summary::KEYS.len());
        assert_eq!(
            (v["nodes"].as_u64(), v["cpus"].as_u64()),
            (Some(64), Some(255))
        );
        let phases = v["phases"].as_array().unwrap();
        assert_eq!(phases.len(), 7 + 2 * 255 + 255);
        let alloc: Vec<&serde_json::Value> = phases
            .iter()
            .filter(|p| p["phase"] == "alloc_test")
            .collect();
        assert_eq!(alloc.len(), 255);
        for (cpu, p) in alloc.iter().enumerate() {
            assert_eq!(p["cpu"], cpu as u64);
            assert_eq!(p["nodes"], 64, "{p}");
            assert!(p.get("node").is_none(), "{p}");
        }
        // ~90 bytes a phase: well under a tenth of the unfolded line.
        assert!(len < 100 * 1024, "{len} bytes");
    }

    /// The same machine with every alloc_test span kept (16,320 of them,
    /// what the kernel recorded before it folded): the writer has no
    /// length limit, whatever the facts hold.
    #[test]
    fn summary_of_255_cpus_on_64_nodes_is_whole_json_with_every_key() {
        let mm = facts_of(MAX_CPUS, MAX_NODES, false);
        let mut line = String::new();
        let len = write_summary_line(&mut line, "ok", 7, &boot_of(MAX_CPUS, MAX_NODES), &mm)
            .expect("a String takes any length");
        assert_eq!(len, line.len());
        // The fixed 16 KiB buffer this replaced was cut past ~190 phases.
        assert!(len > 1 << 20, "{len} bytes: expected over 1 MiB");
        let v = parse_line(&line);
        let obj = v.as_object().unwrap();
        for key in Summary::KEYS {
            assert!(obj.contains_key(*key), "no {key}");
        }
        assert_eq!(obj.len(), Summary::KEYS.len());
        assert_eq!(v["nodes"], 64);
        assert_eq!(v["cpus"], 255);
        assert_eq!(v["verify"], "ok");
        assert_eq!(v["node_deferred_ns"].as_array().unwrap().len(), 64);
        let phases = v["phases"].as_array().unwrap();
        // 7 boot-CPU phases, a deferred and a drain worker per CPU, and an
        // alloc_test phase per (CPU, node).
        assert_eq!(phases.len(), 7 + 2 * 255 + 255 * 64);
        let mut alloc: Vec<(u64, u64)> = phases
            .iter()
            .filter(|p| p["phase"] == "alloc_test")
            .map(|p| (p["cpu"].as_u64().unwrap(), p["node"].as_u64().unwrap()))
            .collect();
        alloc.sort_unstable();
        alloc.dedup();
        assert_eq!(alloc.len(), 255 * 64, "every (CPU, node) once");
        assert_eq!(alloc.last(), Some(&(254, 63)));
        // Every CPU has a lane of its own: each appears in the phases.
        let mut lanes: Vec<u64> = phases.iter().map(|p| p["cpu"].as_u64().unwrap()).collect();
        lanes.sort_unstable();
        lanes.dedup();
        assert_eq!(lanes, (0..255).collect::<Vec<u64>>());
    }

    #[test]
    fn the_fallback_line_is_valid_json_with_status_summary() {
        let boot = BootFacts {
            mem_bytes: u64::MAX,
            nodes: u64::MAX,
            cpus: u64::MAX,
            ap_online: u64::MAX,
            tsc_khz: u64::MAX,
            heap_bytes: u64::MAX,
            heap_peak_bytes: u64::MAX,
            entry: "uefi",
            reset_to_entry_ns: u64::MAX,
        };
        let mut line = String::new();
        write_summary_line(
            &mut line,
            SUMMARY_FAILED_STATUS,
            u64::MAX,
            &boot,
            &MmFacts::EMPTY,
        )
        .unwrap();
        let v = parse_line(&line);
        assert_eq!(v["status"], "summary");
        assert_eq!(v["summary_version"], SUMMARY_VERSION);
        assert_eq!(v.as_object().unwrap().len(), Summary::KEYS.len());
        assert_eq!(v["phases"], serde_json::json!([]));
    }

    #[test]
    fn node_count_beyond_the_array_does_not_panic() {
        let mut mm = MmFacts::EMPTY;
        mm.nr_nodes = usize::MAX;
        let mut line = String::new();
        write_summary_line(&mut line, "ok", 0, &BootFacts::default(), &mm).unwrap();
        let v = parse_line(&line);
        assert_eq!(
            v["node_deferred_ns"].as_array().unwrap().len(),
            memmap::page::MAX_NUMNODES as usize
        );
    }

    /// `MmFacts` with every summary number a distinct value, and the
    /// `(key, value)` each must be read back as.
    fn numbered_mm_facts() -> (MmFacts, Vec<(&'static str, u64)>) {
        let mut mm = MmFacts::EMPTY;
        let mm_keys: [(&str, &mut u64); 25] = [
            ("present_pages", &mut mm.present_pages),
            ("eager_pages", &mut mm.eager_pages),
            ("low_zone_pages", &mut mm.low_zone_pages),
            ("deferred_pages", &mut mm.deferred_pages),
            ("reserved_pages", &mut mm.reserved_pages),
            ("hole_pages", &mut mm.hole_pages),
            ("memmap_boot_ns", &mut mm.memmap_boot_ns),
            ("buddy_eager_ns", &mut mm.buddy_eager_ns),
            ("deferred_ns", &mut mm.deferred_ns),
            ("deferred_workers", &mut mm.deferred_workers),
            ("grown_pages", &mut mm.grown_pages),
            ("memblock_ns", &mut mm.memblock_ns),
            ("vmemmap_ns", &mut mm.vmemmap_ns),
            ("vmemmap_bytes", &mut mm.vmemmap_bytes),
            ("memory_block_ns", &mut mm.memory_block_ns),
            ("memory_block_size", &mut mm.memory_block_size),
            ("nr_memory_blocks", &mut mm.nr_memory_blocks),
            ("free_pages", &mut mm.free_pages),
            ("verify_ns", &mut mm.verify_ns),
            ("allocatable_ns", &mut mm.allocatable_ns),
            ("pool_pages", &mut mm.pool_pages),
            ("drained_pages", &mut mm.drained_pages),
            ("pages_initialised", &mut mm.pages_initialised),
            ("drain_ns", &mut mm.drain_ns),
            ("free_bitmaps_ns", &mut mm.free_bitmaps_ns),
        ];
        let mut want = Vec::new();
        for (i, (key, field)) in mm_keys.into_iter().enumerate() {
            *field = 1000 + i as u64;
            want.push((key, 1000 + i as u64));
        }
        mm.pages_initialised_at_allocatable = 77;
        mm.hole_pages_on_first_use = 78;
        mm.struct_page_bytes = 79;
        mm.vmemmap_sections_mapped = 80;
        mm.drain_workers = 81;
        mm.alloc_test.bytes_per_node = 82;
        mm.alloc_test.allocated_pages = 83;
        mm.alloc_test.wall_ns = 84;
        mm.alloc_test.failed = 85;
        mm.alloc_test.growth.count = 86;
        mm.alloc_test.growth.p50_ns = 87;
        mm.alloc_test.growth.p99_ns = 88;
        mm.alloc_test.growth.max_ns = 89;
        mm.alloc_test.orders[2].count = 90;
        mm.alloc_test.orders[3].p99_ns = 91;
        mm.alloc_test.pcp_batch = 1100;
        mm.alloc_test.pcp_high = 1101;
        want.extend([
            ("pages_initialised_at_allocatable", 77),
            ("hole_pages_on_first_use", 78),
            ("struct_page_bytes", 79),
            ("vmemmap_sections_mapped", 80),
            ("drain_workers", 81),
            ("alloc_test_bytes", 82),
            ("alloc_test_pages", 83),
            ("alloc_test_ns", 84),
            ("alloc_test_failed", 85),
            ("grow_step_count", 86),
            ("grow_step_p50_ns", 87),
            ("grow_step_p99_ns", 88),
            ("grow_step_max_ns", 89),
            ("alloc_pcp_batch", 1100),
            ("alloc_pcp_high", 1101),
        ]);
        (mm, want)
    }

    /// `BootFacts` numbered on from `numbered_mm_facts`'s values, and the
    /// `(key, value)` each must be read back as.
    fn numbered_boot_facts() -> (BootFacts, Vec<(&'static str, u64)>) {
        let boot = BootFacts {
            mem_bytes: 92,
            nodes: 93,
            cpus: 94,
            ap_online: 95,
            tsc_khz: 96,
            heap_bytes: 97,
            heap_peak_bytes: 98,
            entry: "bios",
            reset_to_entry_ns: 99,
        };
        let want = Vec::from([
            ("mem_bytes", 92),
            ("nodes", 93),
            ("cpus", 94),
            ("ap_online", 95),
            ("heap_bytes", 97),
            ("heap_peak_bytes", 98),
            ("reset_to_entry_ns", 99),
        ]);
        (boot, want)
    }

    /// Each fact lands under its own key: every number distinct, read
    /// back by key name.
    #[test]
    fn every_fact_lands_under_its_key() {
        let (mm, mut want) = numbered_mm_facts();
        let (boot, boot_want) = numbered_boot_facts();
        want.extend(boot_want);
        let total_ns = 100;
        want.push(("total_ns", total_ns));
        let mut line = String::new();
        write_summary_line(&mut line, "ok", total_ns, &boot, &mm).unwrap();
        let v = parse_line(&line);
        for (key, value) in want {
            assert_eq!(v[key], value, "{key}");
        }
        assert_eq!(v["alloc_count"][2], 90);
        assert_eq!(v["alloc_p99_ns"][3], 91);
        assert_eq!(v["tsc_mhz"].as_f64(), Some(0.096));
        assert_eq!(v["entry"], "bios");
    }

    #[test]
    fn timestamp_like_dmesg() {
        assert_eq!(
            alloc::format!("{}", Timestamp(33_176_000)),
            "[    0.033176]"
        );
        assert_eq!(
            alloc::format!("{}", Timestamp(123_456_789_999)),
            "[  123.456789]"
        );
    }
}
