//! Host tests over synthetic firmware tables: valid, broken, truncated,
//! hostile and randomly mutated.

use super::tables::*;
use super::*;
use alloc::string::ToString;
use alloc::vec;
use memmap::firmware::NodeAffinity;

const MEM_SIZE: usize = 0x4000;
const RSDP_AT: u64 = 0x100;
const RSDT_AT: u64 = 0x200;
const XSDT_AT: u64 = 0x300;
const MADT_AT: u64 = 0x1000;
const SRAT_AT: u64 = 0x2000;
const FACP_AT: u64 = 0x3000;
const GIB: u64 = 1 << 30;

/// Flat physical memory starting at address 0.
#[derive(Clone)]
struct Mem(Vec<u8>);

impl PhysMemory for Mem {
    fn read(&self, phys: u64, buf: &mut [u8]) -> Result<(), AcpiError> {
        let err = AcpiError::Unreadable {
            phys,
            len: buf.len() as u64,
        };
        let start = usize::try_from(phys).map_err(|_| err)?;
        let end = start.checked_add(buf.len()).ok_or(err)?;
        buf.copy_from_slice(self.0.get(start..end).ok_or(err)?);
        Ok(())
    }
}

impl Mem {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        let at = at as usize;
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn put_u32(&mut self, at: u64, v: u32) {
        self.put(at, &v.to_le_bytes());
    }
    /// Recomputes the checksum byte of the SDT at `at` over `len` bytes.
    fn fix_sdt(&mut self, at: u64, len: usize) {
        let at = at as usize;
        fix_checksum(&mut self.0[at..at + len], 9);
    }
    fn table_len(&self, at: u64) -> usize {
        u32_at(&self.0, at as usize + 4).unwrap() as usize
    }
}

fn fix_checksum(t: &mut [u8], at: usize) {
    t[at] = 0;
    t[at] = 0u8.wrapping_sub(sum_bytes(0, t));
}

fn sdt(sig: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(sig);
    t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    t.extend_from_slice(&[revision, 0]);
    t.extend_from_slice(b"BOCHS ");
    t.extend_from_slice(b"BXPC    ");
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(b"BXPC");
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(body);
    fix_checksum(&mut t, 9);
    t
}

fn rsdp(revision: u8, rsdt: u32, xsdt: u64) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(b"RSD PTR ");
    r.push(0);
    r.extend_from_slice(b"BOCHS ");
    r.push(revision);
    r.extend_from_slice(&rsdt.to_le_bytes());
    if revision >= 2 {
        r.extend_from_slice(&36u32.to_le_bytes());
        r.extend_from_slice(&xsdt.to_le_bytes());
        r.extend_from_slice(&[0; 4]);
    }
    fix_checksum(&mut r[..20], 8);
    if revision >= 2 {
        fix_checksum(&mut r, 32);
    }
    r
}

fn root(sig: &[u8; 4], entries: &[u64]) -> Vec<u8> {
    let mut body = Vec::new();
    for &e in entries {
        if sig == b"XSDT" {
            body.extend_from_slice(&e.to_le_bytes());
        } else {
            body.extend_from_slice(&(e as u32).to_le_bytes());
        }
    }
    sdt(sig, 1, &body)
}

fn madt(revision: u8, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0xFEE0_0000u32.to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes()); // PCAT_COMPAT
    entries.iter().for_each(|e| body.extend_from_slice(e));
    sdt(b"APIC", revision, &body)
}

fn lapic(uid: u8, id: u8, flags: u32) -> Vec<u8> {
    let mut e = vec![0, 8, uid, id];
    e.extend_from_slice(&flags.to_le_bytes());
    e
}

fn x2apic(id: u32, flags: u32, uid: u32) -> Vec<u8> {
    let mut e = vec![9, 16, 0, 0];
    [id, flags, uid]
        .iter()
        .for_each(|v| e.extend_from_slice(&v.to_le_bytes()));
    e
}

fn lapic_override(addr: u64) -> Vec<u8> {
    let mut e = vec![5, 12, 0, 0];
    e.extend_from_slice(&addr.to_le_bytes());
    e
}

fn ioapic() -> Vec<u8> {
    let mut e = vec![1, 12, 0, 0];
    e.extend_from_slice(&0xFEC0_0000u32.to_le_bytes());
    e.extend_from_slice(&0u32.to_le_bytes());
    e
}

fn srat(revision: u8, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&[0; 8]);
    entries.iter().for_each(|e| body.extend_from_slice(e));
    sdt(b"SRAT", revision, &body)
}

fn srat_cpu(pxm: u32, apic_id: u8, flags: u32) -> Vec<u8> {
    let p = pxm.to_le_bytes();
    let mut e = vec![0, 16, p[0], apic_id];
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&[0, p[1], p[2], p[3]]);
    e.extend_from_slice(&0u32.to_le_bytes());
    e
}

fn srat_mem(pxm: u32, base: u64, length: u64, flags: u32) -> Vec<u8> {
    let mut e = vec![1, 40];
    e.extend_from_slice(&pxm.to_le_bytes());
    e.extend_from_slice(&[0; 2]);
    e.extend_from_slice(&base.to_le_bytes());
    e.extend_from_slice(&length.to_le_bytes());
    e.extend_from_slice(&[0; 4]);
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&[0; 8]);
    e
}

fn srat_x2(pxm: u32, x2apic_id: u32, flags: u32) -> Vec<u8> {
    let mut e = vec![2, 24, 0, 0];
    [pxm, x2apic_id, flags, 0, 0]
        .iter()
        .for_each(|v| e.extend_from_slice(&v.to_le_bytes()));
    e
}

fn facp() -> Vec<u8> {
    sdt(b"FACP", 6, &[0x5a; 100])
}

/// RSDP revision `rev` at RSDP_AT; an RSDT and (rev ≥ 2) an XSDT both
/// listing `tables`, which are placed at their addresses.
fn firmware(rev: u8, tables: &[(u64, Vec<u8>)]) -> Mem {
    firmware_sized(MEM_SIZE, rev, tables)
}

fn firmware_sized(mem_size: usize, rev: u8, tables: &[(u64, Vec<u8>)]) -> Mem {
    let mut m = Mem(vec![0; mem_size]);
    let addrs: Vec<u64> = tables.iter().map(|t| t.0).collect();
    m.put(RSDT_AT, &root(b"RSDT", &addrs));
    let xsdt = if rev >= 2 {
        m.put(XSDT_AT, &root(b"XSDT", &addrs));
        XSDT_AT
    } else {
        0
    };
    m.put(RSDP_AT, &rsdp(rev, RSDT_AT as u32, xsdt));
    for (at, t) in tables {
        m.put(*at, t);
    }
    m
}

fn four_cpus() -> Vec<Vec<u8>> {
    (0..4).map(|i| lapic(i, i, 1)).collect()
}

fn ok(m: &Mem) -> AcpiInfo {
    parse(RSDP_AT, m).expect("valid firmware must parse")
}

fn lines(info: &AcpiInfo) -> Vec<String> {
    info.report_lines().collect()
}

fn has_line(info: &AcpiInfo, want: &str) -> bool {
    let all = lines(info);
    let found = all.iter().any(|l| l == want);
    if !found {
        std::eprintln!("missing {want:?} in {all:#?}");
    }
    found
}

#[test]
fn rsdp_v0_uses_rsdt() {
    let m = firmware(0, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
    let info = ok(&m);
    assert_eq!(info.revision, 0);
    assert_eq!(&info.oem_id, b"BOCHS ");
    assert_eq!(info.rsdp_length, 20);
    assert_eq!(&info.root.signature, b"RSDT");
    assert_eq!(info.root.phys, RSDT_AT);
    assert_eq!(info.tables.len(), 2);
    assert_eq!(&info.tables[0].signature, b"FACP");
    assert_eq!(info.tables[1].phys, MADT_AT);
    assert!(info.has_madt && info.pcat_compat);
    assert_eq!(info.lapic_addr, 0xFEE0_0000);
    let ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert!(info
        .cpus
        .iter()
        .all(|c| c.enabled && !c.x2apic && c.node == 0));
    assert!(!info.has_srat);
    assert_eq!(info.nr_nodes, 1);
    assert_eq!(info.memory_affinity(), None, "no SRAT: all memory node 0");
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    assert!(has_line(
        &info,
        "ACPI: RSDP 0x0000000000000100 000014 (v00 BOCHS )"
    ));
    assert!(has_line(
        &info,
        "ACPI: RSDT 0x0000000000000200 00002C (v01 BOCHS  BXPC     00000001 BXPC 00000001)"
    ));
    assert!(has_line(&info, "smpboot: Allowing 4 CPUs, 0 hotplug CPUs"));
}

#[test]
fn rsdp_v2_uses_xsdt() {
    let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
    // Make the RSDT list something else, to see which one was walked.
    m.put(FACP_AT, &facp());
    m.put(RSDT_AT, &root(b"RSDT", &[FACP_AT]));
    let info = ok(&m);
    assert_eq!(info.revision, 2);
    assert_eq!(info.rsdp_length, 36);
    assert_eq!(&info.root.signature, b"XSDT");
    assert_eq!(info.tables.len(), 1);
    assert_eq!(&info.tables[0].signature, b"APIC");
    assert_eq!(info.cpus.len(), 4);
    assert!(has_line(
        &info,
        "ACPI: RSDP 0x0000000000000100 000024 (v02 BOCHS )"
    ));
    assert!(has_line(&info, "ACPI: Local APIC address 0xfee00000"));
    assert!(has_line(
        &info,
        "ACPI: LAPIC (acpi_id[0x02] lapic_id[0x02] enabled)"
    ));
}

#[test]
fn broken_xsdt_falls_back_to_rsdt() {
    let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
    m.0[XSDT_AT as usize + 24] ^= 0x40; // oem_revision: checksum now fails
    let info = ok(&m);
    assert_eq!(&info.root.signature, b"RSDT");
    assert_eq!(info.cpus.len(), 4);
    assert_eq!(info.warnings.len(), 1);
    let w = info.warnings[0];
    assert_eq!((&w.signature, w.phys), (b"XSDT", XSDT_AT));
    assert!(matches!(w.reason, TableProblem::BadChecksum { .. }));
}

#[test]
fn broken_xsdt_without_rsdt_is_an_error() {
    let mut m = firmware(2, &[]);
    m.put(RSDP_AT, &rsdp(2, 0, XSDT_AT));
    m.put(XSDT_AT, b"XSDX");
    let err = parse(RSDP_AT, &m).unwrap_err();
    assert_eq!(
        err,
        AcpiError::RootTable {
            signature: *b"XSDT",
            phys: XSDT_AT,
            problem: TableProblem::BadSignature { found: *b"XSDX" }
        }
    );
}

#[test]
fn rsdp_errors() {
    let good = firmware(2, &[]);
    let at = RSDP_AT as usize;

    let mut m = good.clone();
    m.0[at + 10] ^= 1; // inside the OEM id: first checksum fails
    assert_eq!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RsdpChecksum { phys: RSDP_AT }
    );

    let mut m = good.clone();
    m.0[at + 33] ^= 1; // reserved byte: only the extended checksum fails
    assert_eq!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RsdpExtendedChecksum {
            phys: RSDP_AT,
            length: 36
        }
    );

    let mut m = good.clone();
    m.0[at] = b'X';
    assert!(matches!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RsdpSignature { found, .. } if &found == b"XSD PTR "
    ));

    let mut m = good.clone();
    let mut r = rsdp(2, RSDT_AT as u32, XSDT_AT);
    r[20..24].copy_from_slice(&20u32.to_le_bytes());
    fix_checksum(&mut r, 32);
    m.put(RSDP_AT, &r);
    assert_eq!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RsdpLength {
            phys: RSDP_AT,
            length: 20
        }
    );

    // Past the end of memory, and a v2 RSDP whose tail is cut off.
    let end = MEM_SIZE as u64;
    assert!(matches!(
        parse(end - 4, &good).unwrap_err(),
        AcpiError::Unreadable { .. }
    ));
    let mut m = good.clone();
    m.put(end - 20, &rsdp(2, RSDT_AT as u32, XSDT_AT)[..20]);
    assert!(matches!(
        parse(end - 20, &m).unwrap_err(),
        AcpiError::Unreadable { .. }
    ));
    assert!(matches!(
        parse(u64::MAX - 3, &good).unwrap_err(),
        AcpiError::Unreadable { .. }
    ));

    let mut m = good.clone();
    m.put(RSDP_AT, &rsdp(0, 0, 0));
    assert_eq!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::NoRootTable { rsdp_phys: RSDP_AT }
    );

    let mut m = firmware(0, &[]);
    m.0[RSDT_AT as usize + 16] ^= 1;
    assert!(matches!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RootTable { signature, problem: TableProblem::BadChecksum { .. }, .. }
            if &signature == b"RSDT"
    ));
}

#[test]
fn error_messages_name_the_address_and_a_remedy() {
    let m = firmware(0, &[]);
    let msg = parse(RSDP_AT + 1, &m).unwrap_err().to_string();
    assert!(msg.contains("0x101") && msg.contains("bootloader"), "{msg}");
    let e = AcpiError::RootTable {
        signature: *b"RSDT",
        phys: 0x200,
        problem: TableProblem::BadLength { length: 3 },
    };
    let msg = e.to_string();
    assert!(msg.contains("RSDT") && msg.contains("length 3"), "{msg}");
}

#[test]
fn bad_madt_checksum_is_a_warning_and_skipped() {
    let mut m = firmware(2, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
    m.0[MADT_AT as usize + 44 + 3] = 9; // an APIC id
    let info = ok(&m);
    assert!(!info.has_madt);
    assert!(info.cpus.is_empty());
    assert_eq!(info.lapic_addr, DEFAULT_LAPIC_ADDR);
    assert_eq!(info.tables.len(), 1);
    assert_eq!(info.warnings.len(), 1);
    let w = info.warnings[0];
    assert_eq!((&w.signature, w.phys), (b"APIC", MADT_AT));
    assert!(matches!(w.reason, TableProblem::BadChecksum { sum } if sum != 0));
    let msg = w.to_string();
    assert!(
        msg.starts_with("ACPI: [APIC] at 0x0000000000001000: checksum"),
        "{msg}"
    );
    assert!(msg.ends_with("table ignored"), "{msg}");
    assert!(has_line(&info, "smpboot: Allowing 0 CPUs, 0 hotplug CPUs"));
}

#[test]
fn impossible_lengths_are_warnings() {
    for (length, want) in [
        (10, TableProblem::BadLength { length: 10 }),
        (35, TableProblem::BadLength { length: 35 }),
        (
            0x2000_0000,
            TableProblem::BadLength {
                length: 0x2000_0000,
            },
        ),
        (u32::MAX, TableProblem::BadLength { length: u32::MAX }),
        // Plausible, but runs past the end of memory.
        (0x4000, TableProblem::Unreadable),
    ] {
        let mut m = firmware(0, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
        m.put_u32(MADT_AT + 4, length);
        m.fix_sdt(MADT_AT, 36);
        let info = ok(&m);
        assert!(info.cpus.is_empty(), "length {length}");
        assert_eq!(info.tables.len(), 1, "FACP is still listed");
        assert_eq!(info.warnings.len(), 1);
        assert_eq!(info.warnings[0].reason, want);
    }
}

#[test]
fn madt_too_short_for_its_fixed_fields() {
    let mut m = firmware(0, &[(MADT_AT, madt(5, &[]))]);
    m.put_u32(MADT_AT + 4, 40);
    m.fix_sdt(MADT_AT, 40);
    let info = ok(&m);
    assert!(!info.has_madt);
    assert_eq!(
        info.warnings[0].reason,
        TableProblem::BadLength { length: 40 }
    );
}

#[test]
fn xapic_and_x2apic_for_the_same_cpu_are_deduplicated() {
    let entries = [
        lapic(0, 0, 1),
        lapic(1, 1, 1),
        ioapic(),
        x2apic(0, 1, 0),
        x2apic(1, 1, 1),
        x2apic(0x100, 1, 2),
    ];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    let got: Vec<(u32, u32, bool)> = info
        .cpus
        .iter()
        .map(|c| (c.apic_id, c.uid, c.x2apic))
        .collect();
    assert_eq!(got, [(0, 0, false), (1, 1, false), (0x100, 2, true)]);
    assert_eq!(info.duplicate_cpus, 2);
    assert!(info.warnings.is_empty());
    assert_eq!(info.cpu_by_apic_id(0x100).map(|c| c.uid), Some(2));
    assert!(has_line(
        &info,
        "ACPI: X2APIC (apic_id[0x100] uid[0x02] enabled)"
    ));
    assert!(has_line(
        &info,
        "ACPI: 2 duplicate processor entries ignored"
    ));
    assert!(has_line(&info, "smpboot: Allowing 3 CPUs, 0 hotplug CPUs"));
}

#[test]
fn duplicate_that_is_enabled_marks_the_cpu_enabled() {
    let entries = [lapic(0, 0, 2), x2apic(0, 1, 0)];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    assert_eq!(info.cpus.len(), 1);
    assert!(info.cpus[0].enabled && !info.cpus[0].online_capable);
}

#[test]
fn disabled_and_online_capable_cpus() {
    let entries = [
        lapic(0, 0, 1),    // enabled
        lapic(1, 1, 2),    // online capable: hot-pluggable
        lapic(2, 2, 0),    // disabled: never usable
        lapic(3, 0xFF, 1), // broadcast id: not a CPU
        x2apic(4, 3, 4),   // both bits: enabled wins
        x2apic(u32::MAX, 1, 5),
    ];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    let got: Vec<(u32, bool, bool)> = info
        .cpus
        .iter()
        .map(|c| (c.apic_id, c.enabled, c.online_capable))
        .collect();
    assert_eq!(got, [(0, true, false), (1, false, true), (4, true, false)]);
    assert!(info.cpus.iter().all(AcpiCpu::usable));
    assert_eq!(info.ignored_cpus, 3);
    assert!(has_line(
        &info,
        "ACPI: LAPIC (acpi_id[0x01] lapic_id[0x01] online-capable)"
    ));
    assert!(has_line(&info, "smpboot: Allowing 3 CPUs, 1 hotplug CPUs"));

    // Before MADT revision 5 the Online Capable bit was reserved.
    let info = ok(&firmware(2, &[(MADT_AT, madt(4, &entries))]));
    let ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
    assert_eq!(ids, [0, 4]);
    assert_eq!(info.ignored_cpus, 4);
}

#[test]
fn lapic_address_override() {
    let entries = [
        lapic(0, 0, 1),
        lapic_override(0x1_0000_0000),
        lapic_override(0x2000),
    ];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    assert_eq!(info.lapic_addr, 0x1_0000_0000);
}

#[test]
fn srat_with_two_sparse_domains() {
    let cpus = four_cpus();
    let srat_entries = [
        srat_cpu(0, 0, 1),
        srat_cpu(0, 1, 1),
        srat_cpu(7, 2, 1),
        srat_cpu(7, 3, 1),
        srat_mem(0, 0, 0xA_0000, 1),
        srat_mem(0, 0x10_0000, GIB - 0x10_0000, 1),
        srat_mem(7, GIB, GIB, 1 | 2),
        srat_mem(7, 4 * GIB, GIB, 1 | 4),
    ];
    let m = firmware(
        2,
        &[(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(3, &srat_entries))],
    );
    let info = ok(&m);
    assert!(info.has_srat);
    assert_eq!(info.nr_nodes, 2);
    assert_eq!(info.node_count(), 2);
    let nodes: Vec<u32> = info.cpus.iter().map(|c| c.node).collect();
    assert_eq!(nodes, [0, 0, 1, 1]);
    let mem: Vec<(u64, u64, u32, u32, bool, bool)> = info
        .mem_affinity
        .iter()
        .map(|r| {
            (
                r.base,
                r.length,
                r.node,
                r.proximity_domain,
                r.hotplug,
                r.nonvolatile,
            )
        })
        .collect();
    assert_eq!(
        mem,
        [
            (0, 0xA_0000, 0, 0, false, false),
            (0x10_0000, GIB - 0x10_0000, 0, 0, false, false),
            (GIB, GIB, 1, 7, true, false),
            (4 * GIB, GIB, 1, 7, false, true),
        ]
    );
    assert_eq!(
        info.memory_affinity(),
        Some(vec![
            NodeAffinity::new(0, 0xA_0000, 0),
            NodeAffinity::new(0x10_0000, GIB - 0x10_0000, 0),
            NodeAffinity::new(GIB, GIB, 1),
            NodeAffinity::new(4 * GIB, GIB, 1),
        ])
    );
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    assert!(has_line(&info, "ACPI: SRAT: PXM 7 -> APIC 0x02 -> Node 1"));
    assert!(has_line(
        &info,
        "ACPI: SRAT: Node 0 PXM 0 [mem 0x00000000-0x0009ffff]"
    ));
    assert!(has_line(
        &info,
        "ACPI: SRAT: Node 0 PXM 0 [mem 0x00100000-0x3fffffff]"
    ));
    assert!(has_line(
        &info,
        "ACPI: SRAT: Node 1 PXM 7 [mem 0x40000000-0x7fffffff] hotplug"
    ));
    assert!(has_line(
        &info,
        "ACPI: SRAT: Node 1 PXM 7 [mem 0x100000000-0x13fffffff] non-volatile"
    ));
    assert!(has_line(&info, "ACPI: SRAT: 2 NUMA nodes"));
}

#[test]
fn memory_only_node_is_numbered_after_cpu_nodes() {
    // The memory-only domain comes first in the table, but as in Linux
    // processor domains are numbered first.
    let srat_entries = [
        srat_mem(9, 2 * GIB, GIB, 1),
        srat_cpu(5, 0, 1),
        srat_x2(3, 0x100, 1),
        srat_mem(5, 0, GIB, 1),
    ];
    let cpus = [lapic(0, 0, 1), x2apic(0x100, 1, 1), lapic(2, 2, 1)];
    let m = firmware(
        2,
        &[(SRAT_AT, srat(3, &srat_entries)), (MADT_AT, madt(5, &cpus))],
    );
    let info = ok(&m);
    assert_eq!(info.nr_nodes, 3);
    let nodes: Vec<(u32, u32)> = info.cpus.iter().map(|c| (c.apic_id, c.node)).collect();
    // APIC 2 is not in the SRAT: node 0.
    assert_eq!(nodes, [(0, 0), (0x100, 1), (2, 0)]);
    let mem: Vec<(u32, u32)> = info
        .mem_affinity
        .iter()
        .map(|r| (r.proximity_domain, r.node))
        .collect();
    assert_eq!(mem, [(9, 2), (5, 0)]);
    assert!(has_line(
        &info,
        "ACPI: SRAT: PXM 3 -> x2APIC 0x0100 -> Node 1"
    ));
}

#[test]
fn srat_skips_disabled_and_handles_revision_and_ranges() {
    let srat_entries = [
        srat_cpu(0x0102_0304, 0, 1),
        srat_cpu(6, 1, 0),              // disabled
        srat_x2(6, 2, 0),               // disabled
        srat_mem(6, 0, GIB, 0),         // disabled
        srat_mem(0x0102_0304, 0, 0, 1), // zero length: no memory
        srat_mem(0x0102_0304, 0, GIB, 1),
        srat_mem(0x0102_0304, u64::MAX, 2, 1), // wraps
        srat_mem(0x0102_0304, u64::MAX, 1, 1), // the last byte: fine
    ];
    let cpus = [lapic(0, 0, 1), lapic(1, 1, 1)];
    let tables = [(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(3, &srat_entries))];
    let info = ok(&firmware(2, &tables));
    assert_eq!(info.nr_nodes, 1);
    assert_eq!(info.cpu_affinity.len(), 1);
    assert_eq!(info.cpu_affinity[0].proximity_domain, 0x0102_0304);
    assert_eq!(info.mem_affinity.len(), 2);
    assert_eq!(
        info.warnings[0].reason,
        TableProblem::BadRange {
            base: u64::MAX,
            length: 2
        }
    );
    assert!(has_line(
        &info,
        "ACPI: SRAT: Node 0 PXM 16909060 [mem 0xffffffffffffffff-0xffffffffffffffff]"
    ));

    // SRAT revision 1 (ACPI 2.0): only the low 8 domain bits exist.
    let tables = [(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(1, &srat_entries))];
    let info = ok(&firmware(2, &tables));
    assert_eq!(info.cpu_affinity[0].proximity_domain, 0x04);
    assert_eq!(info.mem_affinity[0].proximity_domain, 0x04);
}

#[test]
fn no_srat_means_one_node() {
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]));
    assert!(!info.has_srat);
    assert_eq!(info.nr_nodes, 1);
    assert_eq!(info.node_count(), 1);
    assert!(info.cpus.iter().all(|c| c.node == 0));
    assert!(has_line(&info, "ACPI: no SRAT; everything is on node 0"));
}

#[test]
fn zero_and_one_length_entries_stop_the_walk() {
    for bad_len in [0u8, 1] {
        let entries = [lapic(0, 0, 1), vec![0, bad_len, 0, 0], lapic(1, 1, 1)];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.cpus.len(), 1);
        assert_eq!(
            info.warnings[0].reason,
            TableProblem::EntriesTruncated {
                offset: 52,
                entry_type: 0,
                entry_length: bad_len
            }
        );
        assert!(info.warnings[0]
            .to_string()
            .ends_with("rest of table ignored"));

        let entries = [srat_cpu(1, 0, 1), vec![1, bad_len], srat_cpu(2, 1, 1)];
        let info = ok(&firmware(2, &[(SRAT_AT, srat(3, &entries))]));
        assert_eq!(info.nr_nodes, 1);
        assert!(matches!(
            info.warnings[0].reason,
            TableProblem::EntriesTruncated { .. }
        ));
    }
}

#[test]
fn truncated_entries_and_tables() {
    // Last entry claims more bytes than the table has.
    let entries = [lapic(0, 0, 1), vec![9, 200, 0, 0]];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    assert_eq!(info.cpus.len(), 1);
    assert!(matches!(
        info.warnings[0].reason,
        TableProblem::EntriesTruncated {
            entry_type: 9,
            entry_length: 200,
            ..
        }
    ));

    // A single byte left for an entry header.
    let entries = [lapic(0, 0, 1), vec![0]];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    assert_eq!(info.cpus.len(), 1);
    assert_eq!(info.warnings.len(), 1);

    // Entries too short for their type are skipped, the walk goes on.
    let entries = [
        vec![0, 4, 0, 0],
        vec![9, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        vec![5, 6, 0, 0, 0, 0],
        lapic(1, 1, 1),
    ];
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
    assert_eq!(info.cpus.len(), 1);
    assert_eq!(info.warnings.len(), 3);
    assert_eq!(
        info.warnings[0].reason,
        TableProblem::BadEntry {
            offset: 44,
            entry_type: 0,
            entry_length: 4
        }
    );
    assert_eq!(info.lapic_addr, 0xFEE0_0000);

    // A table cut off by the end of memory.
    let mut m = firmware(2, &[(FACP_AT, facp())]);
    let t = madt(5, &four_cpus());
    let at = (MEM_SIZE - 40) as u64;
    m.put(at, &t[..40]);
    m.put(XSDT_AT, &root(b"XSDT", &[at, FACP_AT]));
    let info = ok(&m);
    assert_eq!(info.tables.len(), 1);
    assert_eq!(info.warnings[0].reason, TableProblem::Unreadable);
    assert_eq!(
        (&info.warnings[0].signature, info.warnings[0].phys),
        (b"APIC", at)
    );

    // Header itself unreadable, and a pointer far outside memory.
    m.put(
        XSDT_AT,
        &root(b"XSDT", &[MEM_SIZE as u64 - 8, u64::MAX - 2, FACP_AT]),
    );
    let info = ok(&m);
    assert_eq!(info.tables.len(), 1);
    assert_eq!(info.warnings.len(), 2);
    assert!(info
        .warnings
        .iter()
        .all(|w| w.reason == TableProblem::Unreadable));
    assert_eq!(&info.warnings[0].signature, b"????");

    // A root table cut off by the end of memory is fatal.
    let mut m = firmware(0, &[]);
    m.put_u32(RSDT_AT + 4, 0x8000);
    m.fix_sdt(RSDT_AT, 36);
    assert!(matches!(
        parse(RSDP_AT, &m).unwrap_err(),
        AcpiError::RootTable {
            problem: TableProblem::Unreadable,
            ..
        }
    ));
}

#[test]
fn null_duplicate_and_second_tables() {
    let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
    let second = MADT_AT + 0x800;
    m.put(second, &madt(5, &[lapic(9, 9, 1)]));
    m.put(XSDT_AT, &root(b"XSDT", &[0, MADT_AT, MADT_AT, second]));
    let info = ok(&m);
    assert_eq!(info.cpus.len(), 4, "the first MADT is used");
    assert_eq!(info.tables.len(), 2, "both valid MADTs are listed");
    let reasons: Vec<TableProblem> = info.warnings.iter().map(|w| w.reason).collect();
    assert_eq!(
        reasons,
        [
            TableProblem::NullAddress,
            TableProblem::DuplicateAddress,
            TableProblem::DuplicateTable
        ]
    );
    assert_eq!(info.warnings[2].phys, second);
}

#[test]
fn works_through_dyn_phys_memory() {
    let m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
    let dyn_mem: &dyn PhysMemory = &m;
    assert_eq!(parse(RSDP_AT, dyn_mem).unwrap().cpus.len(), 4);
}

#[test]
fn limits_cap_cpus_nodes_and_warnings() {
    const BIG_MADT_AT: u64 = 0x1_0000;
    const BIG_SRAT_AT: u64 = 0x4_0000;
    let cpus: Vec<Vec<u8>> = (0..MAX_CPUS as u32 + 5).map(|i| x2apic(i, 1, i)).collect();
    let mems: Vec<Vec<u8>> = (0..MAX_SRAT_NODES as u64 + 3)
        .map(|i| srat_mem(i as u32 * 2, i * GIB, GIB, 1))
        .collect();
    let tables = [(BIG_MADT_AT, madt(5, &cpus)), (BIG_SRAT_AT, srat(3, &mems))];
    let info = ok(&firmware_sized(0x6_0000, 2, &tables));
    assert_eq!(info.cpus.len(), MAX_CPUS);
    assert_eq!(info.nr_nodes, MAX_SRAT_NODES as u32);
    assert_eq!(info.mem_affinity.len(), MAX_SRAT_NODES);
    let reasons: Vec<TableProblem> = info.warnings.iter().map(|w| w.reason).collect();
    assert_eq!(
        reasons,
        [
            TableProblem::LimitReached {
                what: "CPUs",
                limit: MAX_CPUS as u32
            },
            TableProblem::LimitReached {
                what: "NUMA nodes",
                limit: MAX_SRAT_NODES as u32
            },
        ]
    );

    // Many bad entries: 64 warnings kept, the rest counted.
    let short: Vec<Vec<u8>> = (0..70).map(|_| vec![0, 2]).collect();
    let info = ok(&firmware(2, &[(MADT_AT, madt(5, &short))]));
    assert_eq!(info.warnings.len(), MAX_WARNINGS);
    assert_eq!(info.suppressed_warnings, 6);
    assert!(has_line(&info, "ACPI: 6 more warnings suppressed"));
}

/// A fixed-seed xorshift64 generator: deterministic, no extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_mutations_never_panic() {
    let madt_entries = [
        lapic(0, 0, 1),
        lapic(1, 1, 2),
        ioapic(),
        lapic_override(0xFEE0_0000),
        x2apic(0, 1, 0),
        x2apic(0x100, 1, 1),
    ];
    let srat_entries = [
        srat_cpu(0, 0, 1),
        srat_cpu(7, 1, 1),
        srat_x2(7, 0x100, 1),
        srat_mem(0, 0, GIB, 1),
        srat_mem(7, GIB, GIB, 3),
    ];
    let base = firmware(
        2,
        &[
            (FACP_AT, facp()),
            (MADT_AT, madt(5, &madt_entries)),
            (SRAT_AT, srat(3, &srat_entries)),
        ],
    );
    let regions: Vec<(u64, usize)> = [RSDT_AT, XSDT_AT, MADT_AT, SRAT_AT, FACP_AT]
        .iter()
        .map(|&at| (at, base.table_len(at)))
        .chain([(RSDP_AT, 36)])
        .collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut parsed = 0;
    for _ in 0..5000 {
        let mut m = base.clone();
        for _ in 0..=rng.below(8) {
            let (at, len) = regions[rng.below(regions.len())];
            // Also hit a few bytes past the end of each structure.
            let i = at as usize + rng.below(len + 8);
            match rng.below(3) {
                0 => m.0[i] ^= 1 << rng.below(8),
                1 => m.0[i] = rng.next() as u8,
                _ => m.0[i] = [0, 1, 2, 0xFF][rng.below(4)],
            }
        }
        // Half the time repair every checksum, so the mutations reach
        // the entry parsers instead of stopping at the checksum check.
        if rng.below(2) == 0 {
            for &(at, len) in &regions[..5] {
                let claimed = m.table_len(at);
                let len = if (36..=MEM_SIZE - at as usize).contains(&claimed) {
                    claimed
                } else {
                    len
                };
                m.fix_sdt(at, len);
            }
            let r = RSDP_AT as usize;
            fix_checksum(&mut m.0[r..r + 20], 8);
            fix_checksum(&mut m.0[r..r + 36], 32);
        }
        let Ok(info) = parse(RSDP_AT, &m) else {
            continue;
        };
        parsed += 1;
        assert!(info.nr_nodes >= 1);
        assert!(info
            .cpus
            .iter()
            .all(|c| c.node < info.nr_nodes && c.usable()));
        assert!(info.mem_affinity.iter().all(|r| r.node < info.nr_nodes));
        let mut ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), info.cpus.len(), "APIC ids are unique");
        assert!(info.report_lines().count() >= 3);
        let _ = format!("{info:?}");
    }
    assert!(parsed > 1000, "only {parsed} mutated inputs parsed");
}
