//! Report formatting: dmesg-style timestamps, and the boot's facts as the
//! `memboot-summary:` line ([`memboot_contract::summary::Summary`], the
//! schema the host reads back).

use core::fmt::{self, Write};

use memboot_contract::summary::{Summary, SummaryCut, TscMhz, SUMMARY_VERSION};

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

/// The keys the boot learns outside the memory-init pipeline ([`MmFacts`]
/// has the rest): kept apart, so that the line still has them when a
/// fault left the pipeline's facts locked.
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

/// `memboot-summary: {json}` into `line`, streamed without a buffer or an
/// allocation (the panic path uses it): the memory-init facts `mm` as
/// recorded, with the keys only the end of the boot knows set on a
/// borrowed copy ([`Summary::write_line`]).
pub fn write_summary_line<W: Write>(
    line: &mut W,
    status: &str,
    total_ns: u64,
    boot: &BootFacts,
    mm: &MmFacts,
) -> Result<usize, SummaryCut> {
    Summary {
        mem_bytes: boot.mem_bytes,
        nodes: boot.nodes,
        cpus: boot.cpus,
        ap_online: boot.ap_online,
        tsc_mhz: TscMhz { khz: boot.tsc_khz },
        heap_bytes: boot.heap_bytes,
        heap_peak_bytes: boot.heap_peak_bytes,
        entry: boot.entry.into(),
        reset_to_entry_ns: boot.reset_to_entry_ns,
        status: status.into(),
        total_ns,
        summary_version: SUMMARY_VERSION,
        ..mm.borrowed()
    }
    .write_line(line)
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
        mm.strategy = "ondemand".into();
        mm.set_nodes(nodes as usize);
        mm.verify = VerifyOutcome::Ok.name().into();
        let phases = mm.phases.to_mut();
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
            phases.push(span(phase, 0, None));
        }
        let node_of = |cpu: u32| (0..nodes).find(|&n| cpu < ((n + 1) * cpus).div_ceil(nodes));
        for phase in [Phase::DeferredInit, Phase::Drain] {
            for cpu in 0..cpus {
                phases.push(span(phase, cpu, node_of(cpu)));
            }
        }
        if fold {
            for cpu in 0..cpus {
                phases.push(PhaseSpan {
                    nodes: Some(nodes),
                    ..span(Phase::AllocTest, cpu, None)
                });
            }
        } else {
            for node in 0..nodes {
                for cpu in 0..cpus {
                    phases.push(span(Phase::AllocTest, cpu, Some(node)));
                }
            }
        }
        for (i, ns) in mm.node_deferred_ns.to_mut().iter_mut().enumerate() {
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

    /// Facts with every key a distinct value, by its place in
    /// [`Summary::KEYS`]: numbers `1000 + i`, text `"key i"`, arrays
    /// `[1000 + i, 1001 + i]`, and a phase; with those values by key.
    fn numbered_mm_facts() -> (MmFacts, serde_json::Map<String, serde_json::Value>) {
        use serde_json::json;
        let mut empty = String::new();
        MmFacts::EMPTY.write_json(&mut empty).unwrap();
        let empty: serde_json::Value = serde_json::from_str(&empty).unwrap();
        let mut numbered = serde_json::Map::new();
        for (i, key) in Summary::KEYS.iter().enumerate() {
            let n = 1000 + i as u64;
            let value = match &empty[key] {
                serde_json::Value::Number(_) => json!(n),
                serde_json::Value::String(_) => json!(alloc::format!("key {i}")),
                serde_json::Value::Array(_) if *key == "phases" => {
                    json!([{"phase": "verify", "cpu": n, "start_ns": n, "end_ns": n + 1}])
                }
                serde_json::Value::Array(_) => json!([n, n + 1]),
                other => panic!("{key}: {other}"),
            };
            numbered.insert(String::from(*key), value);
        }
        let mut mm = MmFacts::EMPTY;
        *mm = serde_json::from_value(numbered.clone().into()).unwrap();
        (mm, numbered)
    }

    /// `BootFacts` numbered apart from `numbered_mm_facts`'s values, and
    /// the `(key, value)` each must be read back as.
    fn numbered_boot_facts() -> (BootFacts, Vec<(&'static str, serde_json::Value)>) {
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
            ("mem_bytes", 92.into()),
            ("nodes", 93.into()),
            ("cpus", 94.into()),
            ("ap_online", 95.into()),
            ("tsc_mhz", 0.096.into()),
            ("heap_bytes", 97.into()),
            ("heap_peak_bytes", 98.into()),
            ("entry", "bios".into()),
            ("reset_to_entry_ns", 99.into()),
        ]);
        (boot, want)
    }

    /// Each fact lands under its own key: every value distinct, read back
    /// by key name; the boot facts, status, time and version replace what
    /// the memory-init facts hold under those keys, and nothing else does.
    #[test]
    fn every_fact_lands_under_its_key() {
        let (mm, mut want) = numbered_mm_facts();
        let (boot, boot_want) = numbered_boot_facts();
        for (key, value) in boot_want {
            assert!(want.insert(key.into(), value).is_some(), "{key}");
        }
        let total_ns = 100;
        want.insert("status".into(), "panic".into());
        want.insert("total_ns".into(), total_ns.into());
        want.insert("summary_version".into(), SUMMARY_VERSION.into());
        let mut line = String::new();
        write_summary_line(&mut line, "panic", total_ns, &boot, &mm).unwrap();
        let v = parse_line(&line);
        assert_eq!(v.as_object().unwrap().len(), Summary::KEYS.len());
        for key in Summary::KEYS {
            assert_eq!(v[key], want[*key], "{key}");
        }
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
