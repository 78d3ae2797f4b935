//! Report formatting: dmesg-style timestamps and the `memboot-summary:` JSON
//! line that CI users parse.
//!
//! The summary is a contract: keys are only ever added, never renamed or
//! dropped. It is one line, one JSON object, written without allocation so
//! that the panic and exception paths can still emit it, and without a
//! length limit: [`write_summary_line`] streams it into its writer (the
//! kernel's serial line writer), after measuring it, so that a line that
//! does not go out whole is a named failure ([`SummaryCut`]), never a cut
//! line passed off as a summary.

use core::fmt::{self, Write};

use crate::pipeline::facts::{MmFacts, PhaseSpan};

/// What the summary line starts with; tools find the line by it.
pub const SUMMARY_PREFIX: &str = "memboot-summary: ";

/// The `status` of a boot whose summary line could not be written whole
/// (README "Output"): the line that says so carries the boot facts only.
pub const SUMMARY_FAILED_STATUS: &str = "summary";

/// `[    5.123456] ` prefix for a time since kernel entry, like dmesg.
pub struct Timestamp(pub u64 /* ns */);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let micros = (self.0 % 1_000_000_000) / 1_000;
        write!(f, "[{secs:5}.{micros:06}]")
    }
}

/// Writes one JSON object field by field.
pub struct JsonObject<'w, W: Write> {
    out: &'w mut W,
    first: bool,
}

impl<'w, W: Write> JsonObject<'w, W> {
    pub fn begin(out: &'w mut W) -> Result<Self, fmt::Error> {
        out.write_char('{')?;
        Ok(Self { out, first: true })
    }

    fn key(&mut self, key: &str) -> fmt::Result {
        if !self.first {
            self.out.write_char(',')?;
        }
        self.first = false;
        write_json_str(self.out, key)?;
        self.out.write_char(':')
    }

    pub fn u64(&mut self, key: &str, value: u64) -> fmt::Result {
        self.key(key)?;
        write!(self.out, "{value}")
    }

    /// A fixed-point number with `decimals` digits after the point.
    pub fn fixed(&mut self, key: &str, value_milli: u64, decimals: u32) -> fmt::Result {
        self.key(key)?;
        let scale = 10u64.pow(decimals);
        write!(
            self.out,
            "{}.{:0width$}",
            value_milli / scale,
            value_milli % scale,
            width = decimals as usize
        )
    }

    pub fn str(&mut self, key: &str, value: &str) -> fmt::Result {
        self.key(key)?;
        write_json_str(self.out, value)
    }

    pub fn bool(&mut self, key: &str, value: bool) -> fmt::Result {
        self.key(key)?;
        self.out.write_str(if value { "true" } else { "false" })
    }

    /// `"key":null`: a value the boot does not have (not the same as an
    /// empty array or object).
    pub fn null(&mut self, key: &str) -> fmt::Result {
        self.key(key)?;
        self.out.write_str("null")
    }

    /// A nested object, written by `fields`.
    pub fn object(
        &mut self,
        key: &str,
        fields: impl FnOnce(&mut JsonObject<'_, W>) -> fmt::Result,
    ) -> fmt::Result {
        self.key(key)?;
        let mut o = JsonObject::begin(&mut *self.out)?;
        fields(&mut o)?;
        o.end()
    }

    pub fn u64_array(&mut self, key: &str, values: impl IntoIterator<Item = u64>) -> fmt::Result {
        self.key(key)?;
        self.out.write_char('[')?;
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.write_char(',')?;
            }
            write!(self.out, "{v}")?;
        }
        self.out.write_char(']')
    }

    /// An array of objects, each written by `item`.
    pub fn objects<T>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = T>,
        mut item: impl FnMut(&mut JsonObject<'_, W>, T) -> fmt::Result,
    ) -> fmt::Result {
        self.key(key)?;
        self.out.write_char('[')?;
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.write_char(',')?;
            }
            let mut o = JsonObject::begin(&mut *self.out)?;
            item(&mut o, v)?;
            o.end()?;
        }
        self.out.write_char(']')
    }

    pub fn end(self) -> fmt::Result {
        self.out.write_char('}')
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

/// The `memboot-summary:` object. Keys are a contract: add, never rename
/// or drop (the host test lists every one).
pub fn write_summary<W: Write>(
    out: &mut W,
    status: &str,
    total_ns: u64,
    boot: &BootFacts,
    mm: &MmFacts,
) -> fmt::Result {
    let mut o = JsonObject::begin(out)?;
    o.u64("mem_bytes", boot.mem_bytes)?;
    o.u64("nodes", boot.nodes)?;
    o.u64("cpus", boot.cpus)?;
    o.u64("ap_online", boot.ap_online)?;
    o.fixed("tsc_mhz", boot.tsc_khz, 3)?;
    o.str("status", status)?;
    o.u64("total_ns", total_ns)?;
    o.str("strategy", mm.strategy)?;
    o.u64("present_pages", mm.present_pages)?;
    o.u64("eager_pages", mm.eager_pages)?;
    o.u64("low_zone_pages", mm.low_zone_pages)?;
    o.u64("deferred_pages", mm.deferred_pages)?;
    o.u64("reserved_pages", mm.reserved_pages)?;
    o.u64("hole_pages", mm.hole_pages)?;
    o.u64("memmap_boot_ns", mm.memmap_boot_ns)?;
    o.u64("buddy_eager_ns", mm.buddy_eager_ns)?;
    o.u64("deferred_ns", mm.deferred_ns)?;
    // `take`, not a slice: an `nr_nodes` beyond the array (a bug elsewhere)
    // must not panic the one path that reports panics.
    o.u64_array(
        "node_deferred_ns",
        mm.node_deferred_ns.iter().take(mm.nr_nodes).copied(),
    )?;
    o.u64("deferred_workers", mm.deferred_workers)?;
    o.u64("grown_pages", mm.grown_pages)?;
    o.u64("memblock_ns", mm.memblock_ns)?;
    o.u64("vmemmap_ns", mm.vmemmap_ns)?;
    o.u64("vmemmap_bytes", mm.vmemmap_bytes)?;
    o.u64("memory_block_ns", mm.memory_block_ns)?;
    o.u64("memory_block_size", mm.memory_block_size)?;
    o.u64("nr_memory_blocks", mm.nr_memory_blocks)?;
    o.u64("free_pages", mm.free_pages)?;
    o.str("verify", mm.verify.name())?;
    o.u64("verify_ns", mm.verify_ns)?;
    o.objects("phases", &mm.phases, write_phase)?;
    o.u64("allocatable_ns", mm.allocatable_ns)?;
    o.u64("pool_pages", mm.pool_pages)?;
    o.u64("drained_pages", mm.drained_pages)?;
    let a = &mm.alloc_test;
    o.u64("alloc_test_bytes", a.bytes_per_node)?;
    o.u64("alloc_test_pages", a.allocated_pages)?;
    o.u64("alloc_test_ns", a.wall_ns)?;
    o.u64("alloc_test_failed", a.failed)?;
    o.u64_array("alloc_orders", a.orders.iter().map(|f| f.order.into()))?;
    o.u64_array("alloc_count", a.orders.iter().map(|f| f.count))?;
    o.u64_array("alloc_p50_ns", a.orders.iter().map(|f| f.p50_ns))?;
    o.u64_array("alloc_p99_ns", a.orders.iter().map(|f| f.p99_ns))?;
    o.u64_array("alloc_max_ns", a.orders.iter().map(|f| f.max_ns))?;
    o.u64_array("alloc_grow_steps", a.orders.iter().map(|f| f.growth_steps))?;
    o.u64("heap_bytes", boot.heap_bytes)?;
    o.u64("heap_peak_bytes", boot.heap_peak_bytes)?;
    o.u64(
        "pages_initialised_at_allocatable",
        mm.pages_initialised_at_allocatable,
    )?;
    o.u64("pages_initialised", mm.pages_initialised)?;
    o.u64("drain_ns", mm.drain_ns)?;
    o.u64_array(
        "node_drain_ns",
        mm.node_drain_ns.iter().take(mm.nr_nodes).copied(),
    )?;
    o.u64("drain_workers", mm.drain_workers)?;
    o.u64("grow_step_count", a.growth.count)?;
    o.u64("grow_step_p50_ns", a.growth.p50_ns)?;
    o.u64("grow_step_p99_ns", a.growth.p99_ns)?;
    o.u64("grow_step_max_ns", a.growth.max_ns)?;
    o.u64("vmemmap_sections_mapped", mm.vmemmap_sections_mapped)?;
    o.u64("hole_pages_on_first_use", mm.hole_pages_on_first_use)?;
    o.u64("struct_page_bytes", mm.struct_page_bytes)?;
    o.str("memory_block_lookup", mm.memory_block_lookup)?;
    o.str("entry", boot.entry)?;
    o.u64("reset_to_entry_ns", boot.reset_to_entry_ns)?;
    o.end()
}

/// One element of the summary's `phases` array.
fn write_phase<W: Write>(p: &mut JsonObject<'_, W>, span: &PhaseSpan) -> fmt::Result {
    p.str("phase", span.phase.name())?;
    p.u64("cpu", span.cpu.into())?;
    if let Some(node) = span.node {
        p.u64("node", node.into())?;
    }
    if let Some(nodes) = span.nodes {
        p.u64("nodes", nodes.into())?;
    }
    p.u64("start_ns", span.start_ns)?;
    p.u64("end_ns", span.end_ns)
}

/// A summary line that did not go out whole: its writer took `sent` of its
/// `len` bytes (the prefix included), so whatever reached the line is cut
/// and is not valid JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryCut {
    pub sent: usize,
    pub len: usize,
}

impl fmt::Display for SummaryCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the summary line was cut after {} of its {} bytes, so the line above is not a valid summary: the boot fails with status `{SUMMARY_FAILED_STATUS}` and the next summary line has the boot facts only; report it with this log",
            self.sent, self.len
        )
    }
}

/// Counts the bytes a formatting would write, storing none.
struct ByteCount(usize);

impl Write for ByteCount {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Passes at most `len` bytes on to `out`, counting what it took, so a
/// second formatting that came out longer than the measured one stops at
/// the measured end instead of running on.
struct Bounded<'w, W: Write> {
    out: &'w mut W,
    len: usize,
    sent: usize,
}

impl<W: Write> Write for Bounded<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if s.len() > self.len - self.sent {
            return Err(fmt::Error);
        }
        self.out.write_str(s)?;
        self.sent += s.len();
        Ok(())
    }
}

/// `memboot-summary: {json}` into `line`, streamed piece by piece: no
/// buffer, so no length limit and no allocation (the panic path uses it).
/// The line is measured first, then written; `Ok(len)` when all `len`
/// bytes went out, [`SummaryCut`] when `line` refused some (the caller
/// ends the line, fails the boot with [`SUMMARY_FAILED_STATUS`] and writes
/// a second line with [`MmFacts::EMPTY`]). The line's end (`\r\n`) is the
/// writer's business: this writes no newline, and JSON escapes every one.
pub fn write_summary_line<W: Write>(
    line: &mut W,
    status: &str,
    total_ns: u64,
    boot: &BootFacts,
    mm: &MmFacts,
) -> Result<usize, SummaryCut> {
    let mut count = ByteCount(SUMMARY_PREFIX.len());
    let measured = write_summary(&mut count, status, total_ns, boot, mm);
    let len = count.0;
    // Counting cannot fail; if formatting did anyway (a `Display` error),
    // nothing was sent, which is a cut at byte 0.
    measured.map_err(|_| SummaryCut { sent: 0, len })?;
    let mut out = Bounded {
        out: line,
        len,
        sent: 0,
    };
    let streamed = out
        .write_str(SUMMARY_PREFIX)
        .and_then(|()| write_summary(&mut out, status, total_ns, boot, mm));
    match streamed {
        Ok(()) if out.sent == len => Ok(len),
        _ => Err(SummaryCut {
            sent: out.sent,
            len,
        }),
    }
}

fn write_json_str<W: Write>(out: &mut W, s: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::facts::{Phase, PhaseSpan, VerifyOutcome};
    use alloc::string::String;
    use alloc::vec::Vec;

    /// Every key the summary has ever had, in order: the contract. Written
    /// out here, independently of `write_summary`, so that dropping or
    /// renaming a key fails this test.
    const CONTRACT_KEYS: [&str; 60] = [
        "mem_bytes",
        "nodes",
        "cpus",
        "ap_online",
        "tsc_mhz",
        "status",
        "total_ns",
        "strategy",
        "present_pages",
        "eager_pages",
        "low_zone_pages",
        "deferred_pages",
        "reserved_pages",
        "hole_pages",
        "memmap_boot_ns",
        "buddy_eager_ns",
        "deferred_ns",
        "node_deferred_ns",
        "deferred_workers",
        "grown_pages",
        "memblock_ns",
        "vmemmap_ns",
        "vmemmap_bytes",
        "memory_block_ns",
        "memory_block_size",
        "nr_memory_blocks",
        "free_pages",
        "verify",
        "verify_ns",
        "phases",
        "allocatable_ns",
        "pool_pages",
        "drained_pages",
        "alloc_test_bytes",
        "alloc_test_pages",
        "alloc_test_ns",
        "alloc_test_failed",
        "alloc_orders",
        "alloc_count",
        "alloc_p50_ns",
        "alloc_p99_ns",
        "alloc_max_ns",
        "alloc_grow_steps",
        "heap_bytes",
        "heap_peak_bytes",
        "pages_initialised_at_allocatable",
        "pages_initialised",
        "drain_ns",
        "node_drain_ns",
        "drain_workers",
        "grow_step_count",
        "grow_step_p50_ns",
        "grow_step_p99_ns",
        "grow_step_max_ns",
        "vmemmap_sections_mapped",
        "hole_pages_on_first_use",
        "struct_page_bytes",
        "memory_block_lookup",
        "entry",
        "reset_to_entry_ns",
    ];

    #[test]
    fn summary_keeps_every_contract_key_in_order() {
        let mut mm = MmFacts::EMPTY;
        mm.nr_nodes = 2;
        mm.node_deferred_ns[1] = 7;
        mm.verify = VerifyOutcome::Ok;
        mm.phases.push(PhaseSpan {
            phase: Phase::DeferredInit,
            cpu: 1,
            node: Some(3),
            nodes: None,
            start_ns: 10,
            end_ns: 20,
        });
        let boot = BootFacts {
            mem_bytes: 1 << 30,
            tsc_khz: 2_445_237,
            ..BootFacts::default()
        };
        let mut s = String::new();
        write_summary(&mut s, "ok", 99, &boot, &mm).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        // serde_json sorts keys; compare as sets, then check the order in the text.
        let mut want = CONTRACT_KEYS.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want);
        let positions: Vec<usize> = CONTRACT_KEYS
            .iter()
            .map(|k| s.find(&alloc::format!("\"{k}\":")).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{s}");
        assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2445.237);
        assert_eq!(v["node_deferred_ns"], serde_json::json!([0, 7]));
        assert_eq!(v["verify"], "ok");
        assert_eq!(
            v["phases"],
            serde_json::json!([{"phase": "deferred_init", "cpu": 1, "node": 3, "start_ns": 10, "end_ns": 20}])
        );
    }

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
        for key in CONTRACT_KEYS {
            assert!(obj.contains_key(key), "no {key}");
        }
        assert_eq!(obj.len(), CONTRACT_KEYS.len());
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
        for key in CONTRACT_KEYS {
            assert!(obj.contains_key(key), "no {key}");
        }
        assert_eq!(obj.len(), CONTRACT_KEYS.len());
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

    /// A writer that takes whole pieces until `cap` bytes, then refuses.
    struct Refusing {
        taken: String,
        cap: usize,
    }

    impl Write for Refusing {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            if self.taken.len() + s.len() > self.cap {
                return Err(fmt::Error);
            }
            self.taken.push_str(s);
            Ok(())
        }
    }

    #[test]
    fn a_line_goes_out_whole_or_is_a_named_cut() {
        let mm = facts_of(16, 16, false);
        let boot = boot_of(16, 16);
        let mut whole = String::new();
        let len = write_summary_line(&mut whole, "ok", 7, &boot, &mm).unwrap();
        parse_line(&whole);
        for cap in [0, 1, SUMMARY_PREFIX.len(), 100, len / 2, len - 1] {
            let mut out = Refusing {
                taken: String::new(),
                cap,
            };
            let cut = write_summary_line(&mut out, "ok", 7, &boot, &mm).unwrap_err();
            assert_eq!(cut.len, len, "cap {cap}");
            assert_eq!(cut.sent, out.taken.len(), "cap {cap}");
            assert!(cut.sent <= cap, "cap {cap}: {cut:?}");
            assert!(whole.starts_with(&out.taken), "cap {cap}: sent a prefix");
            let text = cut.to_string();
            assert!(text.contains(&format!("after {} of its {len} bytes", cut.sent)));
            assert!(text.contains("status `summary`"), "{text}");
        }
        for cap in [len, len + 1, usize::MAX] {
            let mut out = Refusing {
                taken: String::new(),
                cap,
            };
            assert_eq!(write_summary_line(&mut out, "ok", 7, &boot, &mm), Ok(len));
            assert_eq!(out.taken, whole);
        }
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
        assert_eq!(v.as_object().unwrap().len(), CONTRACT_KEYS.len());
        assert_eq!(v["phases"], serde_json::json!([]));
    }

    #[test]
    fn node_count_beyond_the_array_does_not_panic() {
        let mut mm = MmFacts::EMPTY;
        mm.nr_nodes = usize::MAX;
        let mut s = String::new();
        write_summary(&mut s, "ok", 0, &BootFacts::default(), &mm).unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(
            v["node_deferred_ns"].as_array().unwrap().len(),
            memmap::page::MAX_NUMNODES as usize
        );
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

    #[test]
    fn json_object_is_valid_json() {
        let mut s = String::new();
        let mut o = JsonObject::begin(&mut s).unwrap();
        o.u64("mem_bytes", 1 << 30).unwrap();
        o.fixed("tsc_mhz", 2_495_999, 3).unwrap();
        o.str("status", "bad \"q\"\n").unwrap();
        o.bool("ok", true).unwrap();
        o.u64_array("a", [1, 2]).unwrap();
        o.u64_array("e", []).unwrap();
        o.null("n").unwrap();
        o.object("o", |o| {
            o.u64("x", 1)?;
            o.object("inner", |o| o.bool("y", false))
        })
        .unwrap();
        o.object("empty", |_| Ok(())).unwrap();
        o.end().unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["mem_bytes"], 1u64 << 30);
        assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2495.999);
        assert_eq!(v["status"], "bad \"q\"\n");
        assert_eq!(v["a"][1], 2);
        assert!(v["e"].as_array().unwrap().is_empty());
        assert!(v["n"].is_null() && v.get("n").is_some());
        assert_eq!(v["o"], serde_json::json!({"x": 1, "inner": {"y": false}}));
        assert_eq!(v["empty"], serde_json::json!({}));
        assert_eq!(v.as_object().unwrap().len(), 9, "{s}");
    }
}
