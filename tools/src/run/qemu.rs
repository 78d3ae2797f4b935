//! QEMU's command line: the virtual machine (accelerator, CPU, RAM, NUMA,
//! SMBIOS), the same for every kernel of the same shape, then what it
//! boots and how the kernel reports.

use std::path::{Path, PathBuf};

use super::args::{Accel, Args, BootPath, HostMemory, Linux, Usage};
use super::qemu_binary::{host_cpu, MACHINE_TYPE};

/// Linux wants node borders 8 MiB-aligned (QEMU's `numa_mem_align_shift`
/// 23).
const NODE_ALIGN_MIB: u64 = 8;

/// The RAM of each NUMA node, split the way QEMU split it by itself when no
/// node was given a size (`numa_default_auto_assign_ram()` in
/// hw/core/numa.c, gone since QEMU 5.2, where every node needs a memdev):
/// every node but the last gets RAM / nodes rounded down to 8 MiB, the last
/// node the rest. So any -m and --nodes QEMU once took boot, with one
/// backend per node of exactly that size. `mem` is `-m` as given.
pub fn split_nodes(mem_mib: u64, nodes: u64, mem: &str) -> Result<Vec<u64>, Usage> {
    let part = mem_mib / nodes / NODE_ALIGN_MIB * NODE_ALIGN_MIB;
    if nodes > 1 && part == 0 {
        // QEMU 7.2 refuses a memory-backend-ram of size 0 ("property 'size'
        // of memory-backend-ram doesn't take value '0'").
        return Err(Usage(format!("-m {mem} over {nodes} nodes leaves nodes empty: QEMU's split gives every node but the last RAM / nodes rounded down to 8 MiB, 0 here, and QEMU refuses a memory backend of size 0. Give -m at least {}M for {nodes} nodes, or at most {} nodes at -m {mem}.", nodes * NODE_ALIGN_MIB, mem_mib / NODE_ALIGN_MIB)));
    }
    let mut node_mib = vec![part; nodes as usize - 1];
    node_mib.push(mem_mib - part * (nodes - 1));
    Ok(node_mib)
}

/// The guest's physical address width. QEMU puts RAM above 4 GiB, moved up
/// to 1 TiB when it would cross the HyperTransport hole below 1 TiB, and
/// the 64-bit PCI hole after it: 44 bits (the Linux 6.1 reference runs'
/// value) covers up to ~15 TiB; larger guests get the smallest width that
/// covers 1 TiB + RAM + 64 GiB.
pub fn phys_bits(mem_mib: u64) -> u32 {
    let need_mib = mem_mib + (1 << 20) + (64 << 10);
    let mut bits = 44;
    while (1u64 << (bits - 20)) < need_mib {
        bits += 1;
    }
    bits
}

/// Everything that defines the virtual machine but not what it boots, so
/// every guest of the same shape gets the same machine, on every QEMU
/// version. `kvm_off`: the CPU features `-cpu host` leaves off under KVM
/// ([`super::qemu_binary::kvm_features_off`]).
pub fn machine_args(args: &Args, node_mib: &[u64], kvm_off: &[&str]) -> Vec<String> {
    let mem_mib: u64 = node_mib.iter().sum();
    let smp = args.smp.to_string();
    let mut q: Vec<String> = Vec::new();
    let mut push = |words: &[&str]| q.extend(words.iter().map(|w| w.to_string()));
    // --default-devices keeps QEMU's default devices (VGA, NIC, IDE,
    // floppy, …), as a QEMU started by hand has them: only for comparing
    // with such runs.
    if !args.default_devices {
        push(&["-nodefaults"]);
    }
    push(&["-display", "none", "-no-reboot", "-smp", &smp]);
    match args.accel {
        // split-wx=on: TCG's translation cache is a memfd mapped twice
        // (writable, executable) instead of anonymous memory that QEMU asks
        // to back with transparent huge pages. With huge pages, the first
        // translation into each fresh 2 MiB of the cache stops the vCPU for
        // a huge-page fault, ~3 ms on the nested hosts this was measured
        // on, and where that falls in the boot is chance (1G ondemand,
        // memory ready 16.1 -> 13.1 ms; deferred init at 64G and 1T within
        // the host's spread: tests/bench-results/split-wx/). The emulator's
        // own cost then no longer lands in the guest's timings.
        Accel::Tcg => push(&[
            "-accel",
            "tcg,thread=multi,tb-size=512,split-wx=on",
            "-cpu",
            &format!("max,phys-bits={}", phys_bits(mem_mib)),
        ]),
        Accel::Kvm => push(&["-accel", "kvm", "-cpu", &host_cpu(kvm_off)]),
    }
    // The SMBIOS 2.1 entry point caps the tables at 64 KiB, which QEMU's
    // memory-device entries exceed from ~24T ("SMBIOS 2.1 table length ...
    // exceeds 65535"); the 3.0 (64-bit) entry point has no such cap.
    let mut machine = String::from(MACHINE_TYPE);
    if mem_mib > 8 << 20 {
        machine += ",smbios-entry-point-type=64";
    }
    // Guest RAM from memory backends with reserve=off: hosts without
    // overcommit refuse a plain `-m 1T`. --host-memory prefault backs it
    // all before the guest starts instead (prealloc=on; QEMU refuses it
    // with reserve=off). One backend per NUMA node, of its size.
    let backing = match args.host_memory {
        Some(HostMemory::Prefault) => "prealloc=on",
        _ => "reserve=off",
    };
    let mem = format!("{mem_mib}M");
    if let [_] = node_mib {
        push(&[
            "-object",
            &format!("memory-backend-ram,id=mem0,size={mem},{backing}"),
            "-machine",
            &format!("{machine},memory-backend=mem0"),
            "-m",
            &mem,
        ]);
        return q;
    }
    push(&["-machine", &machine, "-m", &mem]);
    let nodes = node_mib.len() as u64;
    for (i, size) in node_mib.iter().enumerate() {
        let i = i as u64;
        // vCPUs spread evenly, contiguous per node, earlier nodes first;
        // with fewer vCPUs than nodes the last nodes are memory-only.
        let first = (i * args.smp).div_ceil(nodes);
        let next = ((i + 1) * args.smp).div_ceil(nodes);
        let cpus = if next > first {
            format!(",cpus={first}-{}", next - 1)
        } else {
            String::new()
        };
        push(&[
            "-object",
            &format!("memory-backend-ram,id=mem{i},size={size}M,{backing}"),
            "-numa",
            &format!("node,nodeid={i},memdev=mem{i}{cpus}"),
        ]);
    }
    q
}

/// Firmware for a -kernel boot (memboot's PVH entry, and --linux): qboot,
/// QEMU's minimal firmware (qemu-system-data), which hands over to the
/// kernel in milliseconds where SeaBIOS takes tens (README "What it
/// runs"). The disk images keep what they need: SeaBIOS (QEMU's default)
/// for --bios, OVMF for --uefi.
const DIRECT_BOOT_FIRMWARE: &str = "qboot.rom";
/// OVMF's code, and the variables every UEFI boot gets a copy of.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// Where memboot's boot artefacts are.
pub struct Images<'a> {
    /// The stripped kernel ELF QEMU's -kernel loads.
    pub boot_elf: &'a Path,
    /// memboot-bios.img and memboot-uefi.img.
    pub image_dir: &'a Path,
    /// This boot's scratch directory (the UEFI variables' copy).
    pub tmpdir: &'a Path,
}

/// The longest path a unix socket's address holds (`sun_path`, 108 bytes
/// with its NUL).
const UNIX_PATH_MAX_BYTES: usize = 107;

/// Where memboot's markers arrive ([`super::markers`]): a unix socket in
/// the boot's scratch directory, or none when its path would not fit a
/// socket address (a long `TMPDIR`): the boot then goes without markers.
pub fn marker_socket(tmpdir: &Path) -> Option<PathBuf> {
    let path = tmpdir.join("marks.sock");
    (path.as_os_str().len() <= UNIX_PATH_MAX_BYTES).then_some(path)
}

/// memboot's boot: the kernel or disk image, the serial port and exit
/// device the kernel reports through, the debug console it tells the
/// host its instants on (its bytes to [`marker_socket`], where run-qemu.sh
/// listens), and the kernel options (fw_cfg): `opts`, the options after
/// `--` and any the host adds.
pub fn memboot_boot_args(boot_path: BootPath, images: &Images, opts: &[String]) -> Vec<String> {
    let mut q: Vec<String> = [
        "-serial",
        "stdio",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
    ]
    .map(String::from)
    .into();
    if let Some(socket) = marker_socket(images.tmpdir) {
        // QEMU connects as the client (no `server=on`): it does not wait
        // for a peer, and fails to start without one, so run-qemu.sh
        // listens before it starts QEMU.
        q.extend([
            "-chardev".into(),
            format!(
                "socket,id=marks,path={}",
                socket.display().to_string().replace(',', ",,")
            ),
            "-device".into(),
            format!(
                "isa-debugcon,iobase={:#x},chardev=marks",
                memboot_contract::host_marker::PORT
            ),
        ]);
    }
    // The disk images' bootloader sets a graphics mode, so they get a VGA
    // device; snapshot=on opens them read-only, so parallel boots share them.
    let image = |name: &str| {
        format!(
            "format=raw,file={},snapshot=on",
            images.image_dir.join(name).display()
        )
    };
    match boot_path {
        BootPath::Pvh => q.extend([
            "-bios".into(),
            DIRECT_BOOT_FIRMWARE.into(),
            "-kernel".into(),
            images.boot_elf.display().to_string(),
        ]),
        BootPath::Bios => q.extend([
            "-vga".into(),
            "std".into(),
            "-drive".into(),
            image("memboot-bios.img"),
        ]),
        BootPath::Uefi => q.extend([
            "-vga".into(),
            "std".into(),
            "-drive".into(),
            format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"),
            "-drive".into(),
            format!(
                "if=pflash,format=raw,file={}",
                uefi_vars(images.tmpdir).display()
            ),
            "-drive".into(),
            image("memboot-uefi.img"),
        ]),
    }
    if !opts.is_empty() {
        let cmdline = opts.join(" ");
        // QEMU's option syntax: a comma in a value is doubled.
        let value = if cmdline.len() > CMDLINE_STRING_MAX_BYTES {
            let file = cmdline_file(images.tmpdir).display().to_string();
            format!("file={}", file.replace(',', ",,"))
        } else {
            format!("string={}", cmdline.replace(',', ",,"))
        };
        q.extend([
            "-fw_cfg".into(),
            format!("name=opt/memboot/cmdline,{value}"),
        ]);
    }
    q
}

/// Longest command line passed as `-fw_cfg …,string=`; a longer one (Linux
/// `memmap=` forms for thousands of regions) goes in a file
/// ([`write_cmdline_file`]): Linux caps one argument of `exec` at 128 KiB
/// (`MAX_ARG_STRLEN`), and a command line that long would also flood
/// `--print-cmd`.
pub const CMDLINE_STRING_MAX_BYTES: usize = 32 << 10;

/// Where a long command line goes, in a boot's scratch directory.
pub fn cmdline_file(tmpdir: &Path) -> PathBuf {
    tmpdir.join("cmdline")
}

/// Write the command line `opts` to [`cmdline_file`] when
/// [`memboot_boot_args`] passes it as a file (no trailing newline: the
/// kernel echoes the file as its command line).
pub fn write_cmdline_file(tmpdir: &Path, opts: &[String]) -> std::io::Result<()> {
    let cmdline = opts.join(" ");
    if cmdline.len() > CMDLINE_STRING_MAX_BYTES {
        std::fs::write(cmdline_file(tmpdir), cmdline)?;
    }
    Ok(())
}

/// The UEFI variables' copy in a boot's scratch directory.
pub fn uefi_vars(tmpdir: &Path) -> PathBuf {
    tmpdir.join("vars.fd")
}

/// A stock Linux kernel and initramfs through QEMU's -kernel on the same
/// serial port. The command line asks for what the bench parses:
/// timestamps, every message, initcall timings; and panic=-1, so a panic
/// reboots at once and -no-reboot ends the boot instead of the timeout.
/// `tsc_khz`: the guest's TSC rate for Linux's tsc_early_khz=, under TCG.
pub fn linux_boot_args(linux: &Linux, tsc_khz: Option<u64>, extra: &[String]) -> Vec<String> {
    let mut cmdline =
        String::from("console=ttyS0 printk.time=1 ignore_loglevel initcall_debug panic=-1");
    if let Some(khz) = tsc_khz {
        cmdline += &format!(" tsc_early_khz={khz}");
    }
    if !extra.is_empty() {
        cmdline += " ";
        cmdline += &extra.join(" ");
    }
    vec![
        "-serial".into(),
        "stdio".into(),
        "-bios".into(),
        DIRECT_BOOT_FIRMWARE.into(),
        "-kernel".into(),
        linux.kernel.display().to_string(),
        "-initrd".into(),
        linux.initrd.display().to_string(),
        "-append".into(),
        cmdline,
    ]
}
