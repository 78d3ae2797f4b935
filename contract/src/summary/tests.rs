use super::*;
use alloc::string::String;
use alloc::vec::Vec;

/// The schema version whose keys [`CONTRACT_KEYS`] lists.
const CONTRACT_VERSION: u64 = 4;

/// Every key of the lines up to [`CONTRACT_VERSION`], in order: the
/// contract that the lines already written (logs, fixtures, CI users'
/// files) rely on. Written out here, independently of the schema, so that
/// dropping, renaming or reordering one of them fails this test. A key
/// added since needs no entry, only [`SUMMARY_VERSION`] bumped past
/// [`CONTRACT_VERSION`].
const CONTRACT_KEYS: [&str; 66] = [
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
    "summary_version",
    "buddy_store",
    "buddy_index_bytes",
    "alloc_pcp_batch",
    "alloc_pcp_high",
    "free_bitmaps_ns",
];

/// A summary with a distinct value in every field that has one.
fn sample() -> Summary<'static> {
    Summary {
        mem_bytes: 1 << 30,
        nodes: 2,
        cpus: 4,
        ap_online: 3,
        tsc_mhz: TscMhz { khz: 2_445_237 },
        status: "ok".into(),
        total_ns: 99,
        strategy: "deferred".into(),
        present_pages: 262_000,
        node_deferred_ns: Cow::Owned(alloc::vec![5, 7]),
        verify: "ok".into(),
        phases: Cow::Owned(alloc::vec![
            PhaseSpan {
                phase: Phase::DeferredInit,
                cpu: 1,
                node: Some(3),
                nodes: None,
                start_ns: 10,
                end_ns: 20,
            },
            PhaseSpan {
                phase: Phase::AllocTest,
                cpu: 0,
                node: None,
                nodes: Some(64),
                start_ns: 30,
                end_ns: 45,
            },
        ]),
        alloc_orders: Cow::Owned(alloc::vec![0, 1, 9, 10]),
        memory_block_lookup: "indexed".into(),
        entry: "pvh".into(),
        reset_to_entry_ns: 44,
        summary_version: SUMMARY_VERSION,
        buddy_store: "bitmaps".into(),
        buddy_index_bytes: 4096,
        alloc_pcp_batch: 63,
        alloc_pcp_high: 378,
        ..Summary::default()
    }
}

fn json_of(s: &Summary<'_>) -> String {
    let mut out = String::new();
    s.write_json(&mut out).unwrap();
    out
}

#[test]
fn the_line_has_every_contract_key_in_order() {
    assert!(
        Summary::KEYS.starts_with(&CONTRACT_KEYS),
        "{:?}",
        Summary::KEYS
    );
    let added = &Summary::KEYS[CONTRACT_KEYS.len()..];
    assert!(
        added.is_empty() || SUMMARY_VERSION > CONTRACT_VERSION,
        "keys {added:?} were added: bump SUMMARY_VERSION"
    );
    let text = json_of(&sample());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v.as_object().unwrap().len(), Summary::KEYS.len());
    let positions: Vec<usize> = Summary::KEYS
        .iter()
        .map(|k| text.find(&alloc::format!("\"{k}\":")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2445.237);
    assert_eq!(v["node_deferred_ns"], serde_json::json!([5, 7]));
    assert_eq!(v["summary_version"], SUMMARY_VERSION);
    assert_eq!(
        v["phases"],
        serde_json::json!([
            {"phase": "deferred_init", "cpu": 1, "node": 3, "start_ns": 10, "end_ns": 20},
            {"phase": "alloc_test", "cpu": 0, "nodes": 64, "start_ns": 30, "end_ns": 45}
        ])
    );
}

#[test]
fn the_host_reads_back_what_the_kernel_writes() {
    let written = sample();
    let read: Summary<'static> = serde_json::from_str(&json_of(&written)).unwrap();
    assert_eq!(read, written);
}

/// The copy the kernel writes borrows every text and array (no
/// allocation) and writes the same line.
#[test]
fn a_borrowed_summary_is_the_same_summary() {
    let owned = sample();
    let borrowed = owned.borrowed();
    assert!(matches!(borrowed.phases, Cow::Borrowed(_)));
    assert!(matches!(borrowed.node_deferred_ns, Cow::Borrowed(_)));
    assert!(matches!(borrowed.status, Cow::Borrowed(_)));
    assert_eq!(borrowed, owned);
    assert_eq!(json_of(&borrowed), json_of(&owned));
}

#[test]
fn a_line_before_the_version_key_is_version_0_with_defaults() {
    let read: Summary<'static> =
        serde_json::from_str(r#"{"mem_bytes":5,"status":"ok","tsc_mhz":2245.780}"#).unwrap();
    assert_eq!(read.summary_version, 0);
    assert_eq!((read.mem_bytes, read.status.as_ref()), (5, "ok"));
    assert_eq!(read.tsc_mhz.khz, 2_245_780);
    assert!(read.phases.is_empty());
}

#[test]
fn every_phase_name_reads_back_and_an_unknown_one_is_an_error() {
    for phase in Phase::ALL {
        assert_eq!(Phase::of_name(phase.name()), Some(phase));
    }
    let bad = r#"{"phases":[{"phase":"warp","cpu":0,"start_ns":0,"end_ns":1}]}"#;
    let err = serde_json::from_str::<Summary<'static>>(bad).unwrap_err();
    assert!(err.to_string().contains("unknown phase `warp`"), "{err}");
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
    let summary = sample();
    let mut whole = String::new();
    let len = summary.write_line(&mut whole).unwrap();
    assert_eq!(len, whole.len());
    let json = whole.strip_prefix(SUMMARY_PREFIX).unwrap();
    serde_json::from_str::<serde_json::Value>(json).unwrap();
    for cap in [0, 1, SUMMARY_PREFIX.len(), 100, len / 2, len - 1] {
        let mut out = Refusing {
            taken: String::new(),
            cap,
        };
        let cut = summary.write_line(&mut out).unwrap_err();
        assert_eq!(cut.len, len, "cap {cap}");
        assert_eq!(cut.sent, out.taken.len(), "cap {cap}");
        assert!(cut.sent <= cap, "cap {cap}: {cut:?}");
        assert!(whole.starts_with(&out.taken), "cap {cap}: sent a prefix");
        let text = cut.to_string();
        assert!(text.contains(&alloc::format!("after {} of its {len} bytes", cut.sent)));
        assert!(text.contains("status `summary`"), "{text}");
    }
    for cap in [len, len + 1, usize::MAX] {
        let mut out = Refusing {
            taken: String::new(),
            cap,
        };
        assert_eq!(summary.write_line(&mut out), Ok(len));
        assert_eq!(out.taken, whole);
    }
}
