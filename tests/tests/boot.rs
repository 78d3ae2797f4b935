//! Boot the real image under QEMU and check what the serial log says.
//!
//! Each test asserts correctness only — exit codes, log structure, counts
//! against the QEMU topology it asked for — never a duration: the wall-clock
//! bounds below exist to kill a hung guest, not to judge speed.

use std::time::Duration;

use memboot_tests::{boot, exit_code, run_script, Boot};
use memboot_tools::tap;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Usable RAM must be the `-m` size minus firmware holes. On the `pc` machine
/// those are the legacy VGA/BIOS hole (0xa0000–0x100000, 384 KiB) and a few
/// e820-reserved pages (EBDA, ACPI tables); 16 MiB is far above what QEMU
/// takes and far below any real accounting error (a lost node, a lost GiB).
const FIRMWARE_HOLES_MAX_BYTES: u64 = 16 * MIB;

fn assert_mem_close(boot: &Boot, size_bytes: u64) {
    let mem = boot.summary().mem_bytes;
    assert!(
        mem <= size_bytes && size_bytes - mem <= FIRMWARE_HOLES_MAX_BYTES,
        "mem_bytes {mem} is not within {FIRMWARE_HOLES_MAX_BYTES} bytes below -m {size_bytes}\n{}",
        boot.describe()
    );
}

/// Structure every successful boot must have.
fn assert_ok_boot(boot: &Boot) {
    assert_eq!(
        boot.run.exit_code,
        exit_code::OK,
        "boot failed\n{}",
        boot.describe()
    );
    assert_eq!(boot.summary().status, "ok", "{}", boot.describe());
    assert!(
        boot.lines.len() > 10,
        "too few timestamped lines\n{}",
        boot.describe()
    );
    for pair in boot.lines.windows(2) {
        assert!(
            pair[0].0 <= pair[1].0,
            "timestamps go backwards: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let tsc_mhz = boot.summary_json()["tsc_mhz"].as_f64().expect("tsc_mhz");
    assert!(tsc_mhz > 1.0, "TSC not calibrated: {tsc_mhz}");
    assert!(boot.has_message("tsc: Detected"), "{}", boot.describe());
    assert!(
        boot.has_message("BIOS-provided physical RAM map"),
        "{}",
        boot.describe()
    );
    assert!(
        boot.messages_with("] usable").count() >= 2,
        "memory map lines missing\n{}",
        boot.describe()
    );
    assert!(boot.has_message("ACPI: RSDP"), "{}", boot.describe());
    assert!(
        boot.has_message("ACPI: APIC 0x"),
        "MADT header line\n{}",
        boot.describe()
    );
    // One summary line, parsed already; it must carry the keys of the contract.
    for key in ["mem_bytes", "nodes", "cpus", "tsc_mhz", "status"] {
        assert!(
            boot.summary_json().get(key).is_some(),
            "summary lacks {key}"
        );
    }
}

fn assert_topology(boot: &Boot, nodes: u64, cpus: u64) {
    assert_eq!(boot.summary().nodes, nodes, "{}", boot.describe());
    assert_eq!(boot.summary().cpus, cpus, "{}", boot.describe());
    let node_lines = boot
        .messages_with("NUMA: node ")
        .filter(|m| m.contains("usable RAM"))
        .count() as u64;
    assert_eq!(
        node_lines,
        nodes,
        "one 'NUMA: node N' line per node\n{}",
        boot.describe()
    );
}

/// Every CPU the MADT lists came up: `ap_online` counts the APs (all CPUs
/// but the boot CPU) and the bring-up summary line is there.
fn assert_all_cpus_online(boot: &Boot, cpus: u64) {
    assert_eq!(
        boot.summary().ap_online,
        cpus - 1,
        "every AP must come up\n{}",
        boot.describe()
    );
    let line = boot
        .messages_with("smp: Brought up")
        .next()
        .unwrap_or_else(|| panic!("no 'smp: Brought up' line\n{}", boot.describe()));
    let want = format!(", {cpus} CPU");
    assert!(line.contains(&want), "{line}: expected {want}");
}

#[test]
fn boots_1g_one_cpu() {
    let b = boot(&["-m", "1G", "--smp", "1"], &[], Duration::from_secs(180));
    assert_ok_boot(&b);
    assert_topology(&b, 1, 1);
    assert_mem_close(&b, GIB);
    assert_all_cpus_online(&b, 1);
}

#[test]
fn boots_64g_two_nodes_four_cpus() {
    let b = boot(
        &["-m", "64G", "--smp", "4", "--nodes", "2"],
        &[],
        Duration::from_secs(400),
    );
    assert_ok_boot(&b);
    assert_topology(&b, 2, 4);
    assert_all_cpus_online(&b, 4);
    assert_mem_close(&b, 64 * GIB);
    // `deferred` starts the APs before the boot CPU's eager phase, which
    // hides their bring-up from the workers that need them next.
    let booting_ns = b.first_stamp_ns("smpboot: Booting Node");
    let eager_start_ns = b.summary_json()["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "eager_memmap")
        .and_then(|p| p["start_ns"].as_u64())
        .unwrap_or_else(|| {
            panic!(
                "no eager phase
{}",
                b.describe()
            )
        });
    assert!(
        booting_ns <= eager_start_ns,
        "APs started at {booting_ns} ns, after the eager phase began at {eager_start_ns} ns"
    );
    assert!(
        b.has_message("ACPI: SRAT"),
        "SRAT expected with 2 nodes\n{}",
        b.describe()
    );
    // Each node's CPUs: QEMU puts vCPUs 0-1 on node 0 and 2-3 on node 1.
    for (node, cpus) in [(0, "2 CPUs"), (1, "2 CPUs")] {
        let line = b
            .messages_with(&format!("NUMA: node {node}:"))
            .next()
            .unwrap_or_default()
            .to_string();
        assert!(
            line.contains(cpus),
            "node {node} line should list {cpus}: {line}\n{}",
            b.describe()
        );
    }
}

/// Idle CPUs halt until an IPI wakes them: every AP is posted several jobs
/// (the self-test's first), each with a wake-up IPI that the AP takes,
/// halted or at its next halt, so the boot counts at least one per AP. The
/// host times each vCPU thread (QEMU names them): every vCPU is in both
/// lines, the whole boot's and the one from the last CPU up to memory
/// ready, with its waits, and with its page faults where the window's ends
/// read them.
#[test]
fn idle_cpus_halt_and_each_vcpu_thread_is_timed() {
    let b = boot(&["-m", "2G", "--smp", "4"], &[], Duration::from_secs(180));
    assert_ok_boot(&b);
    let woken: u64 = b
        .messages_with("smp: idle CPUs halted, woken ")
        .next()
        .and_then(|m| m.split_whitespace().nth(5)?.parse().ok())
        .unwrap_or_else(|| panic!("no wake-up count\n{}", b.describe()));
    assert!(woken >= 3, "{woken} wake-ups for 3 APs\n{}", b.describe());
    // Bring-up ends when the last AP first runs a job or halts: after
    // every AP was seen up, before the boot's end.
    let ended_us: u64 = b
        .messages_with("smp: bring-up ended ")
        .next()
        .and_then(|m| m.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or_else(|| panic!("no bring-up end\n{}", b.describe()));
    let last_up_ns = b
        .lines
        .iter()
        .filter(|(_, m)| m.starts_with("smpboot: CPU ") && m.contains(") up "))
        .map(|&(ns, _)| ns)
        .max()
        .unwrap_or_else(|| panic!("no AP up\n{}", b.describe()));
    let idle_line_ns = b.first_stamp_ns("smp: idle CPUs halted");
    assert!(
        last_up_ns / 1000 <= ended_us && ended_us * 1000 <= idle_line_ns,
        "bring-up ended at {ended_us} us; last AP up at {last_up_ns} ns\n{}",
        b.describe()
    );
    for what in [
        "whole boot",
        "from entry to memory ready",
        "from the last CPU up to memory ready",
    ] {
        let line = b
            .run
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("run-qemu.sh: host CPU time {what} (")))
            .unwrap_or_else(|| panic!("no host CPU time line for {what}\n{}", b.describe()));
        assert!(line.contains("the other 3 vCPUs"), "{line}");
        // Faults are read at the guest's markers and at the slow pace:
        // the window from the last CPU up starts in the fast stretch.
        let faults = (what != "from the last CPU up to memory ready")
            .then_some("each vCPU's host page faults [");
        for bracket in [
            "each vCPU's % [",
            "each vCPU's ms waiting runnable for a host CPU [",
        ]
        .into_iter()
        .chain(faults)
        {
            let each = line.split(bracket).nth(1).unwrap_or_default();
            let listed: Vec<&str> = each
                .split(']')
                .next()
                .unwrap_or_default()
                .split(", ")
                .filter_map(|v| v.split(':').next())
                .collect();
            assert_eq!(listed, ["0", "1", "2", "3"], "{bracket}: {line}");
        }
    }
}

/// QEMU's own split of RAM over nodes when none was given a size (QEMU ≤
/// 5.1, `numa_default_auto_assign_ram()`), which run-qemu.sh's per-node
/// backends follow: every node but the last gets RAM / nodes rounded down
/// to 8 MiB, the last the rest. In MiB.
fn qemu_node_split_mib(ram_mib: u64, nodes: u64) -> Vec<u64> {
    let part = ram_mib / nodes / 8 * 8;
    let mut sizes = vec![part; nodes as usize - 1];
    sizes.push(ram_mib - part * (nodes - 1));
    sizes
}

/// -m 1000M over 3 nodes does not divide evenly: QEMU's split gives 328M,
/// 328M and 344M. SRAT must put each node's RAM where those sizes say
/// (QEMU's proximity domain P is the P-th node given), and the kernel's
/// per-node usable RAM must be those sizes less the firmware's holes.
#[test]
fn boots_uneven_numa_split() {
    let (ram_mib, nodes) = (1000u64, 3u64);
    let sizes = qemu_node_split_mib(ram_mib, nodes);
    assert_eq!(sizes, [328, 328, 344]);
    let b = boot(
        &["-m", "1000M", "--nodes", "3", "--smp", "2"],
        &[],
        Duration::from_secs(300),
    );
    assert_ok_boot(&b);
    assert_topology(&b, nodes, 2);
    assert_all_cpus_online(&b, 2);
    assert_mem_close(&b, ram_mib * MIB);
    // `ACPI: SRAT: Node N PXM P [mem 0xSTART-0xEND]`: the kernel's node N
    // is QEMU's node P; each PXM's RAM must end where the sizes before it
    // and its own add up to (all of it is below the 4 GiB hole here).
    let mut node_of_pxm = vec![None; nodes as usize];
    let mut end_of_pxm = vec![0u64; nodes as usize];
    for m in b.messages_with("ACPI: SRAT: Node ") {
        let rest = m.strip_prefix("ACPI: SRAT: Node ").unwrap();
        let mut words = rest.split_whitespace();
        let node: u64 = words.next().unwrap().parse().unwrap();
        assert_eq!(words.next(), Some("PXM"), "{m}");
        let pxm: usize = words.next().unwrap().parse().unwrap();
        let (_, end, _) = memboot_tools::serial_log::mem_range(m).unwrap_or_else(|| panic!("{m}"));
        assert!(pxm < nodes as usize, "{m}");
        assert!(node_of_pxm[pxm].is_none_or(|n| n == node), "{m}");
        node_of_pxm[pxm] = Some(node);
        end_of_pxm[pxm] = end_of_pxm[pxm].max(end);
    }
    let mut cumulative = 0;
    for (pxm, size) in sizes.iter().enumerate() {
        cumulative += size * MIB;
        assert_eq!(
            end_of_pxm[pxm],
            cumulative,
            "PXM {pxm}'s RAM must end at {cumulative:#x}\n{}",
            b.describe()
        );
        let node = node_of_pxm[pxm].unwrap_or_else(|| panic!("no SRAT range for PXM {pxm}"));
        let prefix = format!("NUMA: node {node}: ");
        let line = b
            .messages_with(&prefix)
            .next()
            .unwrap_or_else(|| panic!("no NUMA line for node {node}\n{}", b.describe()));
        let usable_mib: u64 = line
            .split_whitespace()
            .nth(3)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            usable_mib <= *size && (size - usable_mib) * MIB <= FIRMWARE_HOLES_MAX_BYTES,
            "node {node} (PXM {pxm}): {usable_mib} MiB usable, QEMU gave it {size} MiB\n{}",
            b.describe()
        );
    }
}

/// How the boot was entered, as the log says it: the entry line is the
/// kernel's first, stamped 0 (it is written at entry, past the log ring);
/// the summary names the entry; the host timed the entry and memory ready
/// after it; the TSC at entry was read.
fn assert_entry(b: &Boot, key: &str, name: &str) {
    assert_eq!(b.summary().entry, key, "{}", b.describe());
    let (stamp, message) = &b.lines[0];
    assert_eq!(*stamp, 0, "{message}");
    assert!(
        message.starts_with("memboot ") && message.ends_with(&format!(" booting (entry: {name})")),
        "{message}"
    );
    assert!(message.contains(tap::MEMBOOT_ENTRY), "{message}");
    let (first_byte_us, ready_us) = tap::host_timing_us(&b.run.stderr);
    let (first_byte_us, ready_us) = (first_byte_us.unwrap(), ready_us.unwrap());
    assert!(
        first_byte_us > 0 && first_byte_us < ready_us,
        "{first_byte_us} {ready_us}\n{}",
        b.describe()
    );
    assert!(b.summary().reset_to_entry_ns > 0, "{}", b.describe());
}

/// The physical ranges the kernel ELF asks to be loaded at (its PT_LOAD
/// headers' p_paddr and p_memsz): where QEMU's PVH loader puts it.
fn elf_load_ranges(elf: &[u8]) -> Vec<(u64, u64)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "a little-endian ELF64");
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36) as usize, u16_at(0x38));
    (0..usize::from(phnum))
        .map(|i| phoff + i * phentsize)
        .filter(|&ph| u32_at(ph) == 1) // PT_LOAD
        .map(|ph| (u64_at(ph + 24), u64_at(ph + 24) + u64_at(ph + 40)))
        .collect()
}

/// The default boot enters through PVH, and the memory its entry occupies
/// (the image wherever its ELF headers put it, then stack and page tables)
/// is reserved, so no page of it reaches the allocator.
#[test]
fn boots_through_pvh_with_its_image_reserved() {
    let b = boot(&["-m", "2G", "--smp", "2"], &[], Duration::from_secs(180));
    assert_ok_boot(&b);
    assert_entry(&b, "pvh", "PVH");
    assert_all_cpus_online(&b, 2);
    let elf = std::fs::read(memboot_tests::repo_root().join("target/images/memboot-kernel.elf"))
        .expect("the booted ELF");
    let in_use: Vec<(u64, u64)> = b
        .messages_with("in use (")
        .filter_map(|m| memboot_tools::serial_log::mem_range(m.strip_prefix("bootloader: ")?))
        .map(|(start, end, _)| (start, end))
        .collect();
    for (start, end) in elf_load_ranges(&elf) {
        assert!(
            in_use.iter().any(|&(s, e)| s <= start && end <= e),
            "the image's [{start:#x}, {end:#x}) is not in a reserved range {in_use:x?}\n{}",
            b.describe()
        );
    }
}

/// The disk images the design card asks for boot too, through
/// rust-osdev/bootloader: `--bios` or `--uefi`.
fn boots_with_image(flag: &str, entry_key: &str, entry_name: &str) {
    let b = boot(
        &["-m", "1G", "--smp", "2", flag],
        &[],
        Duration::from_secs(300),
    );
    assert_ok_boot(&b);
    assert_entry(&b, entry_key, entry_name);
    assert_topology(&b, 1, 2);
    assert_mem_close(&b, GIB);
    assert_all_cpus_online(&b, 2);
}

#[test]
fn boots_with_the_bios_image() {
    boots_with_image("--bios", "bios", "BIOS bootloader");
}

#[test]
fn boots_with_uefi() {
    boots_with_image("--uefi", "uefi", "UEFI bootloader");
}

/// Boot a small guest with `kernel_opts` that must fail: exit code 1 and
/// the summary's `status` naming the failure.
fn failing_boot(kernel_opts: &[&str], status: &str) -> Boot {
    let b = boot(
        &["-m", "512M", "--smp", "1"],
        kernel_opts,
        Duration::from_secs(180),
    );
    assert_eq!(
        b.run.exit_code,
        exit_code::KERNEL_FAILURE,
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().status, status, "{}", b.describe());
    b
}

#[test]
fn unknown_kernel_option_fails_with_kernel_exit_code() {
    let b = failing_boot(&["bogus=1"], "bad_option");
    assert!(b.has_message("unknown option 'bogus'"), "{}", b.describe());
}

#[test]
fn malformed_kernel_option_fails_with_kernel_exit_code() {
    let b = failing_boot(&["test_fault=sometimes"], "bad_option");
    assert!(
        b.has_message("option test_fault=sometimes: expected"),
        "{}",
        b.describe()
    );
}

#[test]
fn page_fault_is_reported_not_rebooted() {
    let b = failing_boot(&["test_fault=page_fault"], "exception");
    let line = b
        .messages_with("EXCEPTION: vector 14 (page fault)")
        .next()
        .unwrap_or_else(|| panic!("{}", b.describe()));
    assert!(
        line.contains("cr2 0x00000dead0000000"),
        "CR2 must be the faulting address: {line}"
    );
}

#[test]
fn invalid_opcode_is_reported() {
    let b = failing_boot(&["test_fault=invalid_opcode"], "exception");
    assert!(
        b.has_message("EXCEPTION: vector 6 (invalid opcode)"),
        "{}",
        b.describe()
    );
}

#[test]
fn panic_is_reported() {
    let b = failing_boot(&["test_fault=panic"], "panic");
    assert!(b.has_message("PANIC:"), "{}", b.describe());
}

#[test]
fn script_rejects_bad_usage_without_booting() {
    for args in [
        &["-m", "12Q"][..],
        &["--smp", "0"],
        &["--accel", "xen"],
        &["--frobnicate"],
        // QEMU's split would leave 16 of 17 nodes without memory.
        &["-m", "128M", "--nodes", "17"],
        &["-m", "1G", "-m", "2G"],
        &["-m", "17592186044417T"],
    ] {
        let run = run_script(args, Duration::from_secs(30));
        assert_eq!(
            run.exit_code,
            exit_code::USAGE,
            "run-qemu.sh {args:?}: {run:?}"
        );
        assert!(
            run.stderr.contains("run-qemu.sh:"),
            "a usage error says why: {run:?}"
        );
    }
}

#[test]
fn timeout_has_its_own_exit_code() {
    // A 1-second bound cannot fit a boot from the BIOS image under TCG:
    // its stages read the image through int 13h for seconds first.
    let b = boot(
        &["-m", "512M", "--smp", "1", "--bios", "--timeout", "1"],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(b.run.exit_code, exit_code::TIMEOUT, "{}", b.describe());
}

/// `test_fault=panic_in_log` panics inside `kprintln!`, with the serial lock
/// held and the start of that line already sent. The panic handler's
/// emergency log (through the uart_16550 driver) must break the lock, end the
/// half-sent line and print the panic on stamped lines of its own.
#[test]
fn panic_inside_kprintln_is_reported_through_emergency_log() {
    let b = failing_boot(&["test_fault=panic_in_log"], "panic");
    assert_eq!(b.run.exit_code, 1, "{}", b.describe());
    assert_eq!(b.summary().status, "panic", "{}", b.describe());
    // `lines` holds only `[    s.micros] ...` lines: both parts of the
    // panic report (location, then message) must be stamped.
    assert!(
        b.lines
            .iter()
            .any(|(_, m)| m.starts_with("PANIC: panicked at ")),
        "no stamped PANIC line\n{}",
        b.describe()
    );
    assert!(
        b.lines
            .iter()
            .any(|(_, m)| m == "test_fault=panic_in_log: Display panicked inside kprintln"),
        "the panic message is not on a stamped line of its own\n{}",
        b.describe()
    );
    // The interrupted line was ended before the report, not run into it.
    assert!(
        b.messages_with("test_fault: formatting")
            .all(|m| !m.contains("PANIC")),
        "{}",
        b.describe()
    );
}

/// `run-qemu.sh --svg FILE` draws the boot's timeline: an SVG with a lane
/// per CPU and the pipeline's phases (the drawing itself is tested on
/// committed logs in plot.rs; this is the script's end of it).
#[test]
fn svg_timeline_of_a_boot() {
    let svg = std::env::temp_dir().join(format!("memboot-timeline-{}.svg", std::process::id()));
    let path = svg.to_str().unwrap();
    let b = boot(
        &["-m", "1G", "--smp", "2", "--svg", path],
        &["verify=off"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert!(
        b.run
            .stderr
            .contains(&format!("boot timeline written to {path}")),
        "{}",
        b.describe()
    );
    let text = std::fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{path}: {e}"));
    std::fs::remove_file(&svg).unwrap();
    assert!(
        text.contains("<svg"),
        "not an SVG: {}",
        &text[..text.len().min(200)]
    );
    for want in ["CPU 0", "CPU 1", "eager_memmap", "deferred_init"] {
        assert!(text.contains(want), "the timeline has no '{want}'");
    }
}

/// A stamped message with its figures masked: every decimal or hex number
/// becomes `#` (durations differ from boot to boot).
fn masked(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut chars = msg.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
            {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// `console=direct` writes each line out as it is logged instead of
/// buffering it until an AP prints, and prints the boot report and the zone
/// lines where they are known instead of holding them back: the boot
/// succeeds with the same lines as a buffered boot's, figures aside; the
/// report comes before memblock's line and the zones before the vmemmap's
/// (after both in a buffered boot), and every other line keeps its order.
/// The first AP's `smpboot: CPU 1 (APIC 0x1) up …` line is the AP's own,
/// logged while the boot CPU goes on logging: where it falls among the boot
/// CPU's lines differs from boot to boot in either mode, so it is only
/// counted.
#[test]
fn direct_console_logs_the_same_lines_early() {
    const AP_LINE: &str = "smpboot: CPU # (APIC #) up ";
    const REPORT: &str = "BIOS-provided physical RAM map:";
    const ZONES: &str = "Zone ranges:";
    let boot_with = |console: &str| {
        let b = boot(
            &["-m", "1G", "--smp", "2"],
            &["verify=off", console],
            Duration::from_secs(300),
        );
        assert_ok_boot(&b);
        let command_line = format!("Kernel command line: verify=off {console}");
        assert!(b.has_message(&command_line), "{}", b.describe());
        let messages: Vec<String> = b
            .lines
            .iter()
            .filter(|(_, m)| !m.starts_with("Kernel command line: "))
            .map(|(_, m)| masked(m))
            .collect();
        let ap_lines = messages.iter().filter(|m| m.starts_with(AP_LINE)).count();
        assert_eq!(ap_lines, 1, "{}", b.describe());
        messages
            .into_iter()
            .filter(|m| !m.starts_with(AP_LINE))
            .collect::<Vec<_>>()
    };
    let at = |lines: &[String], prefix: &str| {
        lines
            .iter()
            .position(|m| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' in {lines:#?}"))
    };
    let buffered = boot_with("console=buffered");
    let direct = boot_with("console=direct");
    assert!(buffered.len() > 50, "{buffered:?}");
    let sorted = |lines: &[String]| {
        let mut v = lines.to_vec();
        v.sort();
        v
    };
    assert_eq!(sorted(&buffered), sorted(&direct), "the same lines");
    // Where the report and the zones go out.
    assert!(
        at(&direct, REPORT) < at(&direct, "memblock: "),
        "{direct:#?}"
    );
    assert!(at(&direct, ZONES) < at(&direct, "vmemmap: "), "{direct:#?}");
    assert!(
        at(&buffered, REPORT) > at(&buffered, "vmemmap: "),
        "{buffered:#?}"
    );
    assert!(
        at(&buffered, ZONES) > at(&buffered, "vmemmap: "),
        "{buffered:#?}"
    );
    // The blocks that moved: the report up to memblock's line, the zones
    // up to the vmemmap's. Everything else in the same order.
    let moved: Vec<&String> = direct[at(&direct, REPORT)..at(&direct, "memblock: ")]
        .iter()
        .chain(&direct[at(&direct, ZONES)..at(&direct, "vmemmap: ")])
        .collect();
    let rest = |lines: &[String]| {
        lines
            .iter()
            .filter(|m| !moved.contains(m))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(rest(&buffered), rest(&direct));
}

/// An AP that runs the trampoline after the CPU starting it gave up on it
/// (seen at 255 vCPUs on a busy host: it took the next AP's stack and
/// `PerCpu`, and the boot failed with `smp`). `test_fault=late_ap` holds
/// the first AP's (the starter's) startup IPIs back, so the boot CPU gives
/// up on it when the APs are first needed and starts the others itself;
/// with the next AP's round prepared it sends the late AP its IPIs and
/// waits until it took that round or halted at the claim (the trampoline
/// counts APs that halt there): it must have halted, leaving the round
/// alone, and the other APs must come up with their own ids.
#[test]
fn a_late_ap_halts_instead_of_taking_the_next_aps_round() {
    let b = boot(
        &["-m", "1G", "--smp", "3"],
        &["alloc_test=0", "test_fault=late_ap"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().status, "ok");
    for want in [
        // The starter given up on, on the background path's fallback.
        "smpboot: CPU 1 (APIC 0x1) did not come up (test_fault=late_ap",
        // The race: the late AP reached the claim with APIC 0x2's round
        // there, and halted.
        "smpboot: test_fault=late_ap: the late AP left alone the round prepared for APIC 0x2",
        "smpboot: 1 AP(s) reached the trampoline after their round was given up, and halted there",
        "smpboot: CPU 2 (APIC 0x2) up ",
        "smp: CPU 1 (APIC 0x1) did not come up: its jobs run on the boot CPU",
        "smp: self-test passed: 2 of 3 CPUs ran one job each",
    ] {
        assert!(b.has_message(want), "no '{want}'\n{}", b.describe());
    }
    assert_eq!(b.summary().ap_online, 1, "only the late AP is missing");
    assert!(
        b.has_message("smp: Brought up 1 node, 2 CPUs"),
        "{}",
        b.describe()
    );
    // With no second AP to start after it, the fault cannot act: refused.
    let b = boot(
        &["-m", "512M", "--smp", "2"],
        &["test_fault=late_ap"],
        Duration::from_secs(180),
    );
    assert_eq!(
        b.run.exit_code,
        exit_code::KERNEL_FAILURE,
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().status, "bad_option");
    assert!(
        b.has_message("Kernel command line rejected: test_fault=late_ap: "),
        "{}",
        b.describe()
    );
}

/// Linux 6.1 on this QEMU machine with `-m 65000M` (RAM ends at 66024 MiB,
/// not 128 MiB aligned; a guest, so no bare-metal 2 GiB) prints
/// `x86/mm: Memory block size: 128MB` (seen with `run-qemu.sh --linux`):
/// memboot must size its blocks the same way.
#[test]
fn memory_block_size_follows_linux_on_a_guest_with_an_unaligned_end() {
    let b = boot(
        &["-m", "65000M", "--smp", "1"],
        &["alloc_test=0", "verify=off"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert!(
        b.has_message("x86/mm: Memory block size: 128MB"),
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().memory_block_size, 128 * MIB);
}

/// The TSC rate: given by run-qemu.sh under TCG (the host's, as Linux gets
/// it), nothing is measured and the first line comes at once; with
/// `--calibrate-tsc` the PIT measures it, says how precisely, and agrees
/// with the host's rate within that (plus the host's own rounding, 0.1 %).
#[test]
fn tsc_rate_given_or_calibrated() {
    let host_khz: f64 = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("cpu MHz")?
                .split(':')
                .nth(1)?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .expect("cpu MHz")
        * 1000.0;
    let detected_khz = |b: &Boot| -> f64 {
        let line = b
            .messages_with("tsc: Detected ")
            .next()
            .unwrap_or_else(|| panic!("{}", b.describe()));
        let mhz: f64 = line["tsc: Detected ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        mhz * 1000.0
    };
    let opts = ["alloc_test=0", "verify=off"];
    let given = boot(&["-m", "1G"], &opts, Duration::from_secs(300));
    assert_eq!(given.run.exit_code, exit_code::OK, "{}", given.describe());
    assert!(given.has_message("tsc: frequency source: tsc_khz option"));
    assert_eq!(detected_khz(&given), host_khz.trunc());
    let measured = boot(
        &["-m", "1G", "--calibrate-tsc"],
        &opts,
        Duration::from_secs(300),
    );
    assert_eq!(
        measured.run.exit_code,
        exit_code::OK,
        "{}",
        measured.describe()
    );
    let source = measured
        .messages_with("tsc: frequency source: PIT channel 2 calibration")
        .next()
        .unwrap_or_else(|| panic!("{}", measured.describe()))
        .to_string();
    let ppm: f64 = source
        .split("within ")
        .nth(1)
        .and_then(|r| r.strip_suffix(" ppm)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no uncertainty in '{source}'"));
    let off = (detected_khz(&measured) - host_khz).abs() / host_khz;
    assert!(
        off <= ppm / 1e6 + 1e-3,
        "{off} off the host's rate, said within {ppm} ppm"
    );
}
