//! A command line checked before anything runs: the node split, the kernel
//! options read with the kernel's grammar, and the host-memory refusal.

use memboot_contract::options::{self, OptionError};

use super::args::{Accel, Args, HostMemory};
use super::host_state;
use super::need::{self, Kernel, Machine, Need};
use super::qemu;
use super::qemu_binary::{self, Version};
use super::stop::Stop;

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
    /// [`Checked::prepare_qemu`] before the boot).
    pub kvm_off: Vec<&'static str>,
}

impl Checked {
    pub fn machine(&self) -> Machine<'_> {
        Machine {
            node_mib: &self.node_mib,
            smp: self.args.smp,
        }
    }

    /// The QEMU this boots with, before it boots: its version read and
    /// checked, and under KVM the CPU features this host's KVM refuses left
    /// off (`kvm_off`).
    pub fn prepare_qemu(&mut self) -> Result<Version, Stop> {
        let binary = qemu_binary::binary(&self.args);
        let version = qemu_binary::version_of(&binary)?;
        version.check(&binary)?;
        if self.args.accel == Accel::Kvm {
            self.kvm_off = qemu_binary::kvm_features_off(&binary)?;
        }
        Ok(version)
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
