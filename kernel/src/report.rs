//! Report formatting: dmesg-style timestamps and the `memboot-summary:` JSON
//! line that CI users parse.
//!
//! The summary is a contract: keys are only ever added, never renamed or
//! dropped. It is one line, one JSON object, written without allocation so
//! that the panic and exception paths can still emit it.

use core::fmt::{self, Write};

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
    o.u64_array(
        "node_deferred_ns",
        mm.node_deferred_ns[..mm.nr_nodes].iter().copied(),
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
    o.objects("phases", &mm.phases, |p, span| {
        p.str("phase", span.phase.name())?;
        p.u64("cpu", span.cpu.into())?;
        if let Some(node) = span.node {
            p.u64("node", node.into())?;
        }
        p.u64("start_ns", span.start_ns)?;
        p.u64("end_ns", span.end_ns)
    })?;
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
    o.end()
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

    /// Every key the summary has ever had, in order: the contract. Written
    /// out here, independently of `write_summary`, so that dropping or
    /// renaming a key fails this test.
    const CONTRACT_KEYS: [&str; 45] = [
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
        o.end().unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["mem_bytes"], 1u64 << 30);
        assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2495.999);
        assert_eq!(v["status"], "bad \"q\"\n");
        assert_eq!(v["a"][1], 2);
        assert!(v["e"].as_array().unwrap().is_empty());
    }
}
