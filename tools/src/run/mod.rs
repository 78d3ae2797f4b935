//! memboot-run: the host side of `run-qemu.sh`, which builds what is stale
//! and then runs this tool with the user's flags. It reads the flags
//! ([`args`]) and the kernel options with the kernel's own grammar
//! ([`memboot_contract::options`]), refuses a guest whose host memory
//! ([`need`]) would not fit this host, builds QEMU's command line
//! ([`qemu`]), and for a boot waits for the chosen host-memory state
//! ([`host_state`]), runs QEMU under the serial tap and maps its status to an
//! exit code ([`boot`]). Messages start `run-qemu.sh: `: the user ran that.

use std::path::{Path, PathBuf};

use memboot_contract::options::{self, OptionError};

pub mod args;
pub mod boot;
pub mod cpu_time;
pub mod host_state;
pub mod need;
pub mod qemu;
pub mod qemu_binary;
pub mod quote;

use args::{Accel, Args, BootPath, HostMemory};
use need::{Kernel, Machine, Need};

/// run-qemu.sh's exit codes (README "Exit codes").
pub mod exit {
    pub const OK: u8 = 0;
    pub const KERNEL: u8 = 1;
    pub const QEMU: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const SETUP: u8 = 4;
    pub const ABOVE_BASELINE: u8 = 5;
    pub const USAGE: u8 = 64;
}

/// A message to the user, on standard error.
pub fn note(message: &str) {
    eprintln!("run-qemu.sh: {message}");
}

/// Why run-qemu.sh stops before QEMU: a usage error (or a guest this host
/// cannot hold), or a setup failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    Usage(String),
    Setup(String),
}

impl Stop {
    pub fn exit_code(&self) -> u8 {
        match self {
            Stop::Usage(_) => exit::USAGE,
            Stop::Setup(_) => exit::SETUP,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            Stop::Usage(m) | Stop::Setup(m) => m,
        }
    }
}

impl From<args::Usage> for Stop {
    fn from(u: args::Usage) -> Self {
        Stop::Usage(u.0)
    }
}

/// Where the repository's build outputs are.
pub struct Paths {
    pub root: PathBuf,
}

impl Paths {
    /// The repository this tool was built from (`tools/`'s parent).
    pub fn of_this_build() -> Paths {
        let host = Path::new(env!("CARGO_MANIFEST_DIR"));
        Paths {
            root: host.parent().unwrap_or(host).to_path_buf(),
        }
    }
    /// The kernel ELF with its debug info (symbols for --profile).
    pub fn kernel_elf(&self) -> PathBuf {
        self.root
            .join("target/kernel/x86_64-unknown-none/release/memboot-kernel")
    }
    pub fn image_dir(&self) -> PathBuf {
        self.root.join("target/images")
    }
    /// The stripped copy QEMU's -kernel loads and the disk images carry.
    pub fn boot_elf(&self) -> PathBuf {
        self.image_dir().join("memboot-kernel.elf")
    }
    /// A host tool of the release build (memboot-tap, memboot-plot, …).
    pub fn tool(&self, name: &str) -> PathBuf {
        self.root.join("target/release").join(name)
    }
    /// --profile's TCG plugin.
    pub fn profile_plugin(&self) -> PathBuf {
        self.tool("libmemboot_profile.so")
    }
}

/// A command line, checked: the machine's shape, what boots, and the host
/// memory it needs.
pub struct Checked {
    pub args: Args,
    /// The RAM of each NUMA node, in MiB ([`qemu::split_nodes`]).
    pub node_mib: Vec<u64>,
    pub kernel: Kernel,
    pub need: Need,
    pub available_mib: u64,
    /// Under KVM, the CPU features `-cpu host` leaves off (found by
    /// [`qemu_binary::kvm_features_off`] before the boot).
    pub kvm_off: Vec<&'static str>,
}

impl Checked {
    pub fn machine(&self) -> Machine<'_> {
        Machine {
            node_mib: &self.node_mib,
            smp: self.args.smp,
        }
    }
}

/// The kernel options after `--`, read as the kernel reads them: joined
/// by spaces into the one command line it gets (fw_cfg) and parsed with its
/// grammar. A repeated key is a usage error here; any other line the kernel
/// refuses is left to it: it fails the boot (bad_option, exit 1) before it
/// writes any struct page. --linux does not read them: they are Linux's,
/// where repeats are legal.
fn kernel_of(args: &Args) -> Result<Kernel, Stop> {
    if args.linux.is_some() {
        return Ok(Kernel::Linux);
    }
    let line = args.kernel_opts.join(" ");
    match options::parse(&line) {
        Ok(o) => Ok(Kernel::Memboot(o)),
        Err(e @ OptionError::Repeated { key }) => Err(Stop::Usage(format!(
            "kernel option '{key}' given twice: the kernel would refuse the command line (bad_option: {e}); give it once"
        ))),
        Err(e) => Ok(Kernel::MembootRefusing(e.to_string())),
    }
}

/// Check `args` against a host with `available` memory: the node split,
/// the kernel options and the host-memory refusal.
pub fn check(args: Args, available: &host_state::Available) -> Result<Checked, Stop> {
    let node_mib = qemu::split_nodes(args.mem_mib, args.nodes, &args.mem)?;
    let kernel = kernel_of(&args)?;
    let machine = Machine {
        node_mib: &node_mib,
        smp: args.smp,
    };
    let prefault = args.host_memory == Some(HostMemory::Prefault);
    let need = need::need(&machine, &kernel, prefault);
    if need.total_mib > available.mib {
        let have = format!(
            "this host has {} MiB available ({})",
            available.mib, available.source
        );
        return Err(Stop::Usage(need::refusal(
            &machine, &kernel, &need, &args.mem, &have,
        )));
    }
    Ok(Checked {
        args,
        node_mib,
        kernel,
        need,
        available_mib: available.mib,
        kvm_off: Vec::new(),
    })
}

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
