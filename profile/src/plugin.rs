//! The TCG plugin: QEMU calls `qemu_plugin_install` when it loads
//! `-plugin libmemboot_profile.so,out=FILE,threads=cpu|stack:BYTES,phase=NAME:ADDR[:ADDR…]…`.
//!
//! One build serves every plugin API generation QEMU has had ([`api`]):
//! a constructor declares the newest one QEMU has before QEMU reads the
//! declaration, and the install checks it against the range QEMU gives.
//!
//! What is counted, per vCPU and per phase, the same on every generation:
//! instructions (a block's count each time it executes), stores and the
//! bytes they write (each access), and per block how often it ran inside
//! each phase. How:
//! - API 1 and 2 (QEMU 7.2 to 9.0): a callback per executed block (it
//!   carries the vCPU index) adds the block's count to that vCPU's
//!   counters, and a callback on every memory access counts stores (QEMU
//!   7.2 never calls a callback registered for loads only, and calls one
//!   registered for stores on loads too: every callback is registered for
//!   both, and `qemu_plugin_mem_is_store` tells them apart). API 1 has no
//!   per-vCPU inline counters, and its inline add to a shared counter is
//!   not atomic under multi-threaded TCG.
//! - API 3 on (QEMU 9.1 on): inline, without a call out of the translated
//!   code: each block adds one execution to its vCPU's scoreboard counter
//!   for that block; its instructions, and the stores of its instructions
//!   whose encoding fixes them ([`crate::insn::stores_of`]), follow from
//!   its executions; a REP string instruction adds each iteration's store
//!   inline. The counts are folded into the phases whenever a vCPU's phase
//!   mask changes, before it changes, and at exit. Blocks that open a phase
//!   or start with a REP string instruction, the stores of any other
//!   instruction, and every store in a block where a phase opens after its
//!   start keep their callbacks.
//!
//! A block that holds a `pause`, and the re-check TCG runs as a block of
//! its own after a `pause` or a `hlt` (`insn::is_wait_recheck`), is a
//! spin-wait (a wait loop): its instructions count in the vCPU's total and in a phase's
//! spin-wait count, not in the phase's instructions, which then do not
//! depend on how long the host let another CPU hold the lock.
//!
//! Phases follow the stack: callbacks on calls, returns, pops and entry
//! pushes estimate each vCPU's stack pointer (`tracker`). A phase opens at
//! its entry function's first `push` (after `endbr64` and ftrace nops), one
//! slot below the return address whether the function was called or
//! tail-jumped to; without one, at the stack pointer the last call or
//! return left. The entry block's instructions before that store count
//! outside the phase (a few per frame opened).
//!
//! A REP string instruction counts as one instruction however many
//! iterations it runs, as the CPU's retired-instruction counters count it:
//! TCG ends a block after it and runs further iterations as executions of
//! a block that starts with it (QEMU 7.2 one iteration each, QEMU 10 a
//! batch of them), and such a block, when the vCPU's last instruction was
//! that same instruction, is not counted again. Each iteration's stores
//! are counted. (An interrupt between iterations makes the resumed
//! instruction count again.)
//!
//! The API's functions are looked up in QEMU's executable with `dlsym`
//! when the plugin is installed, so this library links without QEMU (the
//! report binary and the tests use the same crate).

pub mod api;
mod at_exit;
mod config;
mod execution;
mod translate;

use core::ffi::{c_char, c_int, c_uint, CStr};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::raw;
use crate::tracker::{Tracker, MAX_PHASES};
use api::{Api, BlockCounts, PluginId, QemuInfo, COUNT_BYTES, COUNT_STORES};
use at_exit::on_exit;
use translate::on_translate;

pub use config::Config;

/// A block as translated: where its instructions are.
struct BlockInfo {
    vaddr: u64,
    insn_offsets: Vec<u32>,
    spin: bool,
}

/// The blocks translated, each once: TCG translates a block again after
/// its cache is flushed, and the copy gets the same id.
#[derive(Default)]
struct Blocks {
    info: Vec<BlockInfo>,
    ids: HashMap<(u64, Vec<u32>), usize>,
}

/// What a block's callback needs of it: its user data, leaked for the run
/// (QEMU may run a block until the plugin's exit).
struct BlockMeta {
    id: usize,
    n_insns: u64,
    /// The phase whose entry is the block's first instruction.
    entry: Option<usize>,
    /// The phase the block's first instruction ends (`Config::until`).
    closes: Option<usize>,
    /// The block's first instruction is a REP string instruction at this
    /// address (0: it is not).
    rep_first: u64,
    /// The block's last instruction is a REP string instruction at this
    /// address (0: it is not).
    rep_last: u64,
    /// A spin-wait block ([`is_pause`](crate::insn::is_pause),
    /// [`is_wait_recheck`](crate::insn::is_wait_recheck)).
    spin: bool,
}

/// One vCPU's counters, touched only by that vCPU's callbacks.
#[derive(Default)]
struct Vcpu {
    /// Stack pointer estimate (0: unknown), `StackOp::rsp_after`.
    rsp: u64,
    /// The phases open now (`Tracker::mask`).
    mask: u32,
    insns: u64,
    /// Executions per block id, and per block id inside each phase.
    execs: Vec<u64>,
    phase_execs: [Vec<u64>; MAX_PHASES],
    phase: [raw::PhaseCounts; MAX_PHASES],
    /// Callbacks: the REP string instruction the previous block ended with
    /// (0: none).
    rep_at: u64,
    /// Inline: the REP iterations' stores and bytes, and the blocks'
    /// executions, already folded into the phases.
    folded: [u64; 2],
    folded_execs: Vec<u64>,
}

/// Per-vCPU state.
struct Vcpus(Box<[UnsafeCell<Vcpu>]>);
// SAFETY: QEMU calls a vCPU's execution and memory callbacks only on the
// thread that runs that vCPU (one per vCPU under multi-threaded TCG, one
// for all under single-threaded TCG), never two at once for one vCPU; the
// at-exit callback reads them after every vCPU has stopped.
unsafe impl Sync for Vcpus {}

struct Plugin {
    /// How it counts, for the raw file (`Raw::plugin`).
    described: String,
    api: Api,
    config: Config,
    tracker: Tracker,
    vcpus: Vcpus,
    blocks: Mutex<Blocks>,
    /// Block ids handed out so far.
    nr_blocks: AtomicUsize,
}

static PLUGIN: OnceLock<Plugin> = OnceLock::new();

fn plugin() -> &'static Plugin {
    PLUGIN
        .get()
        .expect("callbacks are registered after the plugin is set")
}

impl Plugin {
    /// # Safety
    /// Only from a callback for `vcpu` (see `Vcpus`'s Sync contract).
    #[allow(clippy::mut_from_ref)]
    unsafe fn vcpu(&self, vcpu: c_uint) -> &mut Vcpu {
        // SAFETY: the caller runs on this vCPU's thread, the only one that
        // touches its entry.
        unsafe { &mut *self.vcpus.0[vcpu as usize].get() }
    }

    /// Inline counting: what `vcpu` counted since the last fold, added to
    /// the phases open until now (`v.mask`). On `vcpu`'s thread, or at
    /// exit.
    fn fold(&self, v: &mut Vcpu, vcpu: c_uint) {
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
fn mask_phases(mask: u32) -> impl Iterator<Item = usize> + Clone {
    (0..MAX_PHASES).filter(move |ph| mask & (1 << ph) != 0)
}

/// A memory callback's user data: what the instruction is (low byte), its
/// argument (`ret imm16`'s bytes, the entry push's phase; bits 8–23), and
/// whether the callback counts the instruction's stores ([`MEM_COUNT`]).
const MEM_RET: u64 = 1;
const MEM_CALL: u64 = 2;
const MEM_ENTRY_PUSH: u64 = 3;
const MEM_POP: u64 = 4;
/// The callback counts this instruction's stores (callbacks: every one;
/// inline: those of [`Stores::Unknown`](crate::insn::Stores::Unknown)
/// instructions, and of every instruction in a block where a phase opens
/// after its start).
const MEM_COUNT: u64 = 1 << 32;

/// Called by QEMU when it loads the plugin.
///
/// # Safety
/// QEMU passes a valid `info` for the call and `argc` NUL-terminated
/// strings in `argv` that live as long as the plugin.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU's contract above.
    let info = unsafe { &*info };
    let version = api::declared_version();
    if !(info.version_min..=info.version_cur).contains(&version) {
        eprintln!(
            "memboot-profile: declared plugin API {version}, QEMU takes {} to {}",
            info.version_min, info.version_cur
        );
        return 1;
    }
    let api = match Api::load(version) {
        Ok(api) => api,
        Err(e) => {
            eprintln!("memboot-profile: {e}");
            return 1;
        }
    };
    let args: Vec<&str> = (0..argc.max(0) as usize)
        .map(|i| {
            // SAFETY: QEMU's contract above.
            unsafe { CStr::from_ptr(*argv.add(i)) }
                .to_str()
                .unwrap_or("")
        })
        .collect();
    let config = match Config::parse(args) {
        Ok(c) => c,
        Err(e) => {
            api.say(&e);
            return 1;
        }
    };
    if !info.system_emulation {
        api.say("needs system emulation (qemu-system-*)");
        return 1;
    }
    let max_vcpus = info.max_vcpus.max(info.smp_vcpus).max(1) as usize;
    let how = match api.inline() {
        Some(_) => "inline",
        None => "callbacks",
    };
    let described = format!(
        "API {version} of QEMU's {} to {}, {how}",
        info.version_min, info.version_cur
    );
    let state = Plugin {
        described,
        api,
        tracker: Tracker::new(config.threads),
        config,
        vcpus: Vcpus(
            (0..max_vcpus)
                .map(|_| UnsafeCell::new(Vcpu::default()))
                .collect(),
        ),
        blocks: Mutex::new(Blocks::default()),
        nr_blocks: AtomicUsize::new(0),
    };
    if PLUGIN.set(state).is_err() {
        eprintln!("memboot-profile: loaded twice");
        return 1;
    }
    let p = plugin();
    (p.api.register_tb_trans)(id, on_translate);
    (p.api.register_atexit)(id, on_exit, core::ptr::null_mut());
    0
}
