//! memboot-run: the host side of `run-qemu.sh`, which builds what is stale
//! and then runs this tool with the user's flags. It reads the flags
//! ([`args`]) and the kernel options with the kernel's own grammar
//! ([`memboot_contract::options`]), refuses a guest whose host memory
//! ([`need`]) would not fit this host, builds QEMU's command line
//! ([`qemu`]), and for a boot waits for the chosen host-memory state
//! ([`host_state`]), runs QEMU under the serial tap and maps its status to an
//! exit code ([`boot`]). Messages start `run-qemu.sh: `: the user ran that.

use std::path::Path;

pub mod args;
pub mod boot;
mod check;
pub mod cpu_time;
pub mod host_kernel;
pub mod host_speed;
pub mod host_state;
pub mod markers;
pub mod need;
mod paths;
pub mod qemu;
pub mod qemu_binary;
pub mod quote;
mod stop;

pub use check::{check, Checked};
pub use paths::Paths;
pub use stop::{exit, note, Stop};

use args::{Accel, Args, BootPath};
use need::Kernel;

/// memboot's kernel options for a checked boot: those after `--`, and
/// under TCG the TSC rate Linux gets as tsc_early_khz=, unless the options
/// give one: memboot then calibrates nothing, as Linux does not. Not added
/// to a line the kernel refuses: it could only change which error the
/// kernel reports.
pub fn memboot_opts(c: &Checked, tsc_khz: Option<u64>) -> Vec<String> {
    let args = &c.args;
    let mut opts = args.kernel_opts.clone();
    let tcg_khz = tsc_khz.filter(|_| args.accel == Accel::Tcg);
    if let (Some(khz), false, Kernel::Memboot(o)) = (tcg_khz, args.calibrate_tsc, &c.kernel) {
        if o.tsc_khz.is_none() {
            opts.push(format!("tsc_khz={khz}"));
        }
    }
    opts
}

/// QEMU's full command line for a checked boot. `tsc_khz`: the host's TSC
/// rate, if known; `plugin`: --profile's plugin arguments.
pub fn qemu_command(
    c: &Checked,
    paths: &Paths,
    tmpdir: &Path,
    tsc_khz: Option<u64>,
    plugin: Option<&str>,
) -> Vec<String> {
    let args = &c.args;
    let binary = qemu_binary::binary(args);
    let mut q = vec![binary.display().to_string()];
    q.extend(qemu::machine_args(args, &c.node_mib, &c.kvm_off));
    // Named vCPU threads and QEMU's pid, for their host CPU time.
    q.extend(cpu_time::QEMU_ARGS.map(String::from));
    q.extend([
        "-pidfile".into(),
        boot::pidfile(tmpdir).display().to_string(),
    ]);
    let tcg_khz = tsc_khz.filter(|_| args.accel == Accel::Tcg);
    match (&args.linux, &c.kernel) {
        (Some(linux), _) => q.extend(qemu::linux_boot_args(linux, tcg_khz, &args.kernel_opts)),
        (None, _) => {
            let opts = memboot_opts(c, tsc_khz);
            let (boot_elf, image_dir) = (paths.boot_elf(), paths.image_dir());
            let images = qemu::Images {
                boot_elf: &boot_elf,
                image_dir: &image_dir,
                tmpdir,
            };
            q.extend(qemu::memboot_boot_args(args.boot_path, &images, &opts));
        }
    }
    if let Some(plugin) = plugin {
        q.push("-plugin".into());
        q.push(format!("{},{plugin}", paths.profile_plugin().display()));
    }
    q
}

/// What `--dry-run` prints after QEMU's command line, each line after
/// `run-qemu.sh: ` (documented interface: tests/bench.sh reads them).
pub fn dry_run_lines(c: &Checked) -> [String; 2] {
    [
        need::struct_pages_line(&c.need),
        format!(
            "host memory: the boot needs {} MiB ({}), {} MiB available",
            c.need.total_mib,
            c.need.parts(c.args.mem_mib),
            c.available_mib
        ),
    ]
}

/// The build steps run-qemu.sh runs before it runs this tool to boot, as
/// words: `time` (GNU time installed), `qemu` (the machine's QEMU,
/// installed when missing; not when `--qemu` or MEMBOOT_QEMU chose one),
/// `ovmf`, `kernel` (the
/// toolchain's pieces, the kernel and its stripped copy), `images` (the
/// disk images, through the runner workspace), and the host tools `tap`,
/// `plot`, `profiler`. A dry run needs none; --no-build only GNU time and
/// QEMU.
pub fn build_steps(args: &Args) -> Vec<&'static str> {
    let mut steps = Vec::new();
    if args.dry_run {
        return steps;
    }
    steps.push("time");
    if args.qemu.is_none() {
        steps.push("qemu");
    }
    if args.boot_path == BootPath::Uefi {
        steps.push("ovmf");
    }
    if args.no_build {
        return steps;
    }
    if args.linux.is_none() {
        steps.push("kernel");
        if args.boot_path != BootPath::Pvh || args.build_only {
            steps.push("images");
        }
    }
    steps.push("tap");
    // The timeline and trace tool: for --svg and --trace, and with
    // --build-only so that later --no-build boots (the tests, the bench)
    // can draw too.
    if args.svg.is_some() || args.trace.is_some() || args.build_only {
        steps.push("plot");
    }
    if args.profile.is_some() || args.build_only {
        steps.push("profiler");
    }
    steps
}
