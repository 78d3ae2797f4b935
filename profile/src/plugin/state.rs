//! The plugin's state, shared by its callbacks: the blocks translated so
//! far, each vCPU's counters and stack tracker, and the memory callbacks'
//! user data.

use core::ffi::c_uint;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::api::{Api, BlockCounts, COUNT_BYTES, COUNT_STORES};
use super::config::Config;
use crate::raw;
use crate::tracker::{Tracker, MAX_PHASES};

/// A block as translated: where its instructions are.
pub(super) struct BlockInfo {
    pub(super) vaddr: u64,
    pub(super) insn_offsets: Vec<u32>,
    pub(super) spin: bool,
}

/// The blocks translated, each once: TCG translates a block again after
/// its cache is flushed, and the copy gets the same id.
#[derive(Default)]
pub(super) struct Blocks {
    pub(super) info: Vec<BlockInfo>,
    pub(super) ids: HashMap<(u64, Vec<u32>), usize>,
}

/// What a block's callback needs of it: its user data, leaked for the run
/// (QEMU may run a block until the plugin's exit).
pub(super) struct BlockMeta {
    pub(super) id: usize,
    pub(super) n_insns: u64,
    /// The phase whose entry is the block's first instruction.
    pub(super) entry: Option<usize>,
    /// The phase the block's first instruction ends (`Config::until`).
    pub(super) closes: Option<usize>,
    /// The block's first instruction is a REP string instruction at this
    /// address (0: it is not).
    pub(super) rep_first: u64,
    /// The block's last instruction is a REP string instruction at this
    /// address (0: it is not).
    pub(super) rep_last: u64,
    /// A spin-wait block ([`is_pause`](crate::insn::is_pause),
    /// [`is_wait_recheck`](crate::insn::is_wait_recheck)).
    pub(super) spin: bool,
    /// The address of the block's first instruction, and of its last when
    /// it has more than one (0: one instruction).
    pub(super) first_vaddr: u64,
    pub(super) last_vaddr: u64,
}

/// One vCPU's counters, touched only by that vCPU's callbacks.
#[derive(Default)]
pub(super) struct Vcpu {
    /// Stack pointer estimate (0: unknown), `StackOp::rsp_after`.
    pub(super) rsp: u64,
    /// The phases open now (`Tracker::mask`).
    pub(super) mask: u32,
    pub(super) insns: u64,
    /// Executions per block id, and per block id inside each phase.
    pub(super) execs: Vec<u64>,
    pub(super) phase_execs: [Vec<u64>; MAX_PHASES],
    pub(super) phase: [raw::PhaseCounts; MAX_PHASES],
    /// Callbacks: the REP string instruction the previous block ended with
    /// (0: none).
    pub(super) rep_at: u64,
    /// Callbacks: the previous block's last instruction (0: it had one),
    /// the phases it was counted in and whether as a spin-wait: if the next
    /// block starts there, QEMU cut it from that block (`on_block`).
    pub(super) last_at: u64,
    pub(super) last_mask: u32,
    pub(super) last_spin: bool,
    /// Inline: the REP iterations' stores and bytes, and the blocks'
    /// executions, already folded into the phases.
    pub(super) folded: [u64; 2],
    pub(super) folded_execs: Vec<u64>,
}

/// Per-vCPU state.
pub(super) struct Vcpus(pub(super) Box<[UnsafeCell<Vcpu>]>);
// SAFETY: QEMU calls a vCPU's execution and memory callbacks only on the
// thread that runs that vCPU (one per vCPU under multi-threaded TCG, one
// for all under single-threaded TCG), never two at once for one vCPU; the
// at-exit callback reads them after every vCPU has stopped.
unsafe impl Sync for Vcpus {}

pub(super) struct Plugin {
    /// How it counts, for the raw file (`Raw::plugin`).
    pub(super) described: String,
    pub(super) api: Api,
    pub(super) config: Config,
    pub(super) tracker: Tracker,
    pub(super) vcpus: Vcpus,
    pub(super) blocks: Mutex<Blocks>,
    /// Block ids handed out so far.
    pub(super) nr_blocks: AtomicUsize,
}

pub(super) static PLUGIN: OnceLock<Plugin> = OnceLock::new();

pub(super) fn plugin() -> &'static Plugin {
    PLUGIN
        .get()
        .expect("callbacks are registered after the plugin is set")
}

impl Plugin {
    /// # Safety
    /// Only from a callback for `vcpu` (see `Vcpus`'s Sync contract).
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn vcpu(&self, vcpu: c_uint) -> &mut Vcpu {
        // SAFETY: the caller runs on this vCPU's thread, the only one that
        // touches its entry.
        unsafe { &mut *self.vcpus.0[vcpu as usize].get() }
    }

    /// Inline counting: what `vcpu` counted since the last fold, added to
    /// the phases open until now (`v.mask`). On `vcpu`'s thread, or at
    /// exit.
    pub(super) fn fold(&self, v: &mut Vcpu, vcpu: c_uint) {
        let Some(inline) = self.api.inline() else {
            return;
        };
        let now =
            [COUNT_STORES, COUNT_BYTES].map(|i| (inline.u64_get)(inline.counters.u64_at(i), vcpu));
        let mut sum = BlockCounts {
            insns: 0,
            stores: now[0] - v.folded[0],
            bytes: now[1] - v.folded[1],
            spin: false,
        };
        let mut spin_insns = 0;
        v.folded = now;
        let nr = self.nr_blocks.load(Ordering::Acquire);
        if v.folded_execs.len() < nr {
            v.folded_execs.resize(nr, 0);
        }
        let phases = mask_phases(v.mask);
        inline.for_each_block(vcpu, nr, |id, execs, each| {
            let d = execs - v.folded_execs[id];
            if d == 0 {
                return;
            }
            v.folded_execs[id] = execs;
            if each.spin {
                spin_insns += d * each.insns;
            } else {
                sum.insns += d * each.insns;
            }
            sum.stores += d * each.stores;
            sum.bytes += d * each.bytes;
            for ph in phases.clone() {
                let pe = &mut v.phase_execs[ph];
                if pe.len() <= id {
                    pe.resize(nr, 0);
                }
                pe[id] += d;
            }
        });
        for ph in phases {
            v.phase[ph].insns += sum.insns;
            v.phase[ph].spin_insns += spin_insns;
            v.phase[ph].stores += sum.stores;
            v.phase[ph].bytes += sum.bytes;
        }
    }
}

/// The phases in `mask`.
pub(super) fn mask_phases(mask: u32) -> impl Iterator<Item = usize> + Clone {
    (0..MAX_PHASES).filter(move |ph| mask & (1 << ph) != 0)
}

/// A memory callback's user data: what the instruction is (low byte), its
/// argument (`ret imm16`'s bytes, the entry push's phase; bits 8–23), and
/// whether the callback counts the instruction's stores ([`MEM_COUNT`]).
pub(super) const MEM_RET: u64 = 1;
pub(super) const MEM_CALL: u64 = 2;
pub(super) const MEM_ENTRY_PUSH: u64 = 3;
pub(super) const MEM_POP: u64 = 4;
/// The callback counts this instruction's stores (callbacks: every one;
/// inline: those of [`Stores::Unknown`](crate::insn::Stores::Unknown)
/// instructions, and of every instruction in a block where a phase opens
/// after its start).
pub(super) const MEM_COUNT: u64 = 1 << 32;
