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
//! A block that holds a `pause` is a spin-wait (a lock's wait loop): its
//! instructions count in the vCPU's total and in a phase's spin-wait count,
//! not in the phase's instructions, which then do not depend on how long
//! the host let another CPU hold the lock.
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

use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::insn::{
    is_entry_padding, is_pause, is_push_reg, is_rep_string, stores_of, StackOp, Stores,
};
use crate::raw::{self, Raw};
use crate::tracker::{Threads, Tracker, MAX_PHASES};
use api::{
    Api, BlockCounts, Insn, PluginId, QemuInfo, Tb, CB_NO_REGS, COUNT_BYTES, COUNT_REP_AT,
    COUNT_STORES, INLINE_ADD_U64, INLINE_STORE_U64, MEM_RW, MEM_W,
};

/// The plugin's arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub out: String,
    pub threads: Threads,
    /// (name, entry addresses), in the order given.
    pub phases: Vec<(String, Vec<u64>)>,
    /// (phase index, addresses): the first instruction at one of them
    /// closes every open frame of the phase (a phase that ends at a point
    /// of the boot, not at a return).
    pub until: Vec<(usize, Vec<u64>)>,
}

impl Config {
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Config, String> {
        let (mut out, mut threads, mut phases) = (None, None, Vec::new());
        let mut until_args = Vec::new();
        for arg in args {
            match arg.split_once('=') {
                Some(("out", v)) => out = Some(v.to_string()),
                Some(("threads", v)) => threads = Some(Threads::parse(v)?),
                Some(("phase", v)) => {
                    let mut parts = v.split(':');
                    let name = parts
                        .next()
                        .filter(|n| !n.is_empty())
                        .ok_or(format!("phase={v}: no name"))?;
                    let entries = parts
                        .map(|a| {
                            raw::hex(a).ok_or(format!("phase={v}: '{a}' is not a 0x… address"))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    if entries.is_empty() {
                        return Err(format!("phase={v}: no entry address"));
                    }
                    phases.push((name.to_string(), entries));
                }
                Some(("until", v)) => until_args.push(v),
                _ => {
                    return Err(format!(
                        "unknown argument '{arg}' (out=, threads=, phase=, until=)"
                    ))
                }
            }
        }
        if phases.len() > MAX_PHASES {
            return Err(format!("{} phases: at most {MAX_PHASES}", phases.len()));
        }
        let mut until = Vec::new();
        for v in until_args {
            let mut parts = v.split(':');
            let name = parts.next().unwrap_or_default();
            let ph = phases
                .iter()
                .position(|(n, _)| n == name)
                .ok_or(format!("until={v}: no phase={name} before it"))?;
            let marks = parts
                .map(|a| raw::hex(a).ok_or(format!("until={v}: '{a}' is not a 0x… address")))
                .collect::<Result<Vec<_>, _>>()?;
            if marks.is_empty() {
                return Err(format!("until={v}: no address"));
            }
            until.push((ph, marks));
        }
        Ok(Config {
            out: out.ok_or("out=FILE is required")?,
            threads: threads.ok_or("threads=cpu|stack:BYTES is required")?,
            phases,
            until,
        })
    }
}

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
    /// A spin-wait block ([`is_pause`]).
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
/// inline: those of [`Stores::Unknown`] instructions, and of every
/// instruction in a block where a phase opens after its start).
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

/// The id of the block at `vaddr` with these instruction offsets (its
/// earlier translation's, else a new one), and, counted inline, its
/// execution counter: each execution counts `counts`.
fn block_id(
    p: &Plugin,
    vaddr: u64,
    insn_offsets: Vec<u32>,
    counts: BlockCounts,
) -> (usize, Option<api::PluginU64>) {
    let mut blocks = p.blocks.lock().unwrap_or_else(|e| e.into_inner());
    let key = (vaddr, insn_offsets);
    if let Some(&id) = blocks.ids.get(&key) {
        return (id, p.api.inline().map(|i| i.block_counter(id)));
    }
    let id = blocks.info.len();
    // Its counter exists before the id is handed out.
    let counter = p.api.inline().map(|i| i.add_block(id, counts));
    blocks.info.push(BlockInfo {
        vaddr,
        insn_offsets: key.1.clone(),
        spin: counts.spin,
    });
    blocks.ids.insert(key, id);
    p.nr_blocks.store(id + 1, Ordering::Release);
    (id, counter)
}

/// The `until=` marks in a block: the phase its first instruction ends,
/// and whether one inside it does (registered here; its stores are then
/// counted as they happen, as for an entry inside a block).
fn until_marks(p: &Plugin, insns: &[*mut Insn], vaddrs: &[u64]) -> (Option<usize>, bool) {
    let (mut at_start, mut inside) = (None, false);
    for (i, &vaddr) in vaddrs.iter().enumerate() {
        let Some(&(ph, _)) = p.config.until.iter().find(|(_, m)| m.contains(&vaddr)) else {
            continue;
        };
        if i == 0 {
            at_start = Some(ph);
        } else {
            (p.api.register_insn_exec)(insns[i], on_until, CB_NO_REGS, ph as *mut c_void);
            inside = true;
        }
    }
    (at_start, inside)
}

extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    let p = plugin();
    let n = (p.api.tb_n_insns)(tb);
    let insns: Vec<*mut Insn> = (0..n).map(|i| (p.api.tb_get_insn)(tb, i)).collect();
    let codes: Vec<([u8; 16], usize)> = insns.iter().map(|&i| p.api.bytes(i)).collect();
    let bytes = |i: usize| &codes[i].0[..codes[i].1];
    let vaddrs: Vec<u64> = insns.iter().map(|&i| (p.api.insn_vaddr)(i)).collect();
    let start = vaddrs.first().copied().unwrap_or(0);
    let mut entry_at_start = None;
    // Instruction index -> the phase whose frame its push opens.
    let mut entry_push = None;
    let mut entry_inside = false;
    let (closes_at_start, closes_inside) = until_marks(p, &insns, &vaddrs);
    entry_inside |= closes_inside;
    for (i, &vaddr) in vaddrs.iter().enumerate() {
        if let Some(ph) = p.config.phases.iter().position(|(_, e)| e.contains(&vaddr)) {
            let push = (i..n)
                .find(|&j| !is_entry_padding(bytes(j)))
                .filter(|&j| is_push_reg(bytes(j)));
            match (push, i) {
                (Some(j), _) => entry_push = Some((j, ph)),
                (None, 0) => entry_at_start = Some(ph),
                // An entry reached by falling into it mid-block.
                (None, _) => {
                    (p.api.register_insn_exec)(insns[i], on_entry, CB_NO_REGS, ph as *mut c_void);
                    entry_inside = true;
                }
            }
        }
    }
    // A phase that opens inside the block splits its stores: each is
    // counted as it happens.
    let per_access = entry_push.is_some() || entry_inside;
    let rep_at = |i: usize| {
        if is_rep_string(bytes(i)) {
            vaddrs[i]
        } else {
            0
        }
    };
    let mut counts = BlockCounts {
        insns: n as u64,
        spin: (0..n).any(|i| is_pause(bytes(i))),
        ..BlockCounts::default()
    };
    for (i, &insn) in insns.iter().enumerate() {
        let push = entry_push.filter(|&(j, _)| j == i).map(|e| e.1);
        let (stores, bytes_stored) = instrument_memory(p, insn, bytes(i), push, per_access);
        counts.stores += stores;
        counts.bytes += bytes_stored;
        if let (Some(inline), rep @ 1..) = (p.api.inline(), rep_at(i)) {
            let at = inline.counters.u64_at(COUNT_REP_AT);
            (inline.insn_inline)(insn, INLINE_STORE_U64, at, rep);
        }
    }
    let offsets = vaddrs.iter().map(|&a| (a - start) as u32).collect();
    let (id, counter) = block_id(p, start, offsets, counts);
    let meta = BlockMeta {
        id,
        n_insns: n as u64,
        entry: entry_at_start,
        closes: closes_at_start,
        rep_first: if n > 0 { rep_at(0) } else { 0 },
        rep_last: if n > 0 { rep_at(n - 1) } else { 0 },
        spin: counts.spin,
    };
    match (p.api.inline(), counter) {
        // Counted inline: most blocks.
        (Some(inline), Some(counter))
            if meta.entry.is_none() && meta.closes.is_none() && meta.rep_first == 0 =>
        {
            let rep_at = inline.counters.u64_at(COUNT_REP_AT);
            (inline.tb_inline)(tb, INLINE_ADD_U64, counter, 1);
            (inline.tb_inline)(tb, INLINE_STORE_U64, rep_at, 0);
        }
        (inline, _) => {
            let meta: *mut BlockMeta = Box::leak(Box::new(meta));
            let cb = if inline.is_some() {
                on_block_inline
            } else {
                on_block
            };
            (p.api.register_tb_exec)(tb, cb, CB_NO_REGS, meta.cast());
        }
    }
}

/// Register what follows `insn`'s memory accesses: the stack tracking of
/// calls, returns, pops and the entry push of `phase`, and its stores
/// (`per_access`: by callback, as they happen). Counted inline, the stores
/// and bytes each execution makes that the block's count adds.
fn instrument_memory(
    p: &Plugin,
    insn: *mut Insn,
    bytes: &[u8],
    entry_push: Option<usize>,
    per_access: bool,
) -> (u64, u64) {
    let op = match (StackOp::of(bytes), entry_push) {
        (_, Some(ph)) => MEM_ENTRY_PUSH | (ph as u64) << 8,
        (StackOp::Ret { pop_bytes }, _) => MEM_RET | u64::from(pop_bytes) << 8,
        (StackOp::Call, _) => MEM_CALL,
        (StackOp::Pop, _) => MEM_POP,
        (StackOp::Other, _) => 0,
    };
    let Some(inline) = p.api.inline() else {
        (p.api.register_mem)(
            insn,
            on_mem,
            CB_NO_REGS,
            MEM_RW,
            (op | MEM_COUNT) as *mut c_void,
        );
        return (0, 0);
    };
    let stores = match stores_of(bytes) {
        Stores::Fixed { count: 0, .. } => Stores::Fixed { count: 0, bytes: 0 },
        _ if per_access => Stores::Unknown,
        s => s,
    };
    let count = if stores == Stores::Unknown {
        MEM_COUNT
    } else {
        0
    };
    // The callback first: an entry push opens its phase before its own
    // store is counted.
    match op {
        0 if count == 0 => {}
        // An instruction that only stores: its stores alone.
        0 => (p.api.register_mem)(insn, on_mem, CB_NO_REGS, MEM_W, count as *mut c_void),
        _ => (p.api.register_mem)(
            insn,
            on_mem,
            CB_NO_REGS,
            MEM_RW,
            (op | count) as *mut c_void,
        ),
    }
    match stores {
        Stores::Fixed { count, bytes } => (count.into(), u64::from(count) * u64::from(bytes)),
        Stores::PerIteration { bytes } => {
            let c = |i| inline.counters.u64_at(i);
            (inline.mem_inline)(insn, MEM_W, INLINE_ADD_U64, c(COUNT_STORES), 1);
            (inline.mem_inline)(insn, MEM_W, INLINE_ADD_U64, c(COUNT_BYTES), bytes.into());
            (0, 0)
        }
        Stores::Unknown => (0, 0),
    }
}

/// `vcpu` reached an `until=` mark of `phase`: what ran before it is the
/// phase's (inline counts folded first), then every open frame of the
/// phase closes, counted on this vCPU.
fn end_at_mark(p: &Plugin, v: &mut Vcpu, vcpu: c_uint, phase: usize) {
    p.fold(v, vcpu);
    p.tracker
        .close_phase(phase, |c| v.phase[c.phase].closes += 1);
    remask(p, v, vcpu);
}

extern "C" fn on_until(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    end_at_mark(p, v, vcpu, udata as usize);
}

fn open(p: &Plugin, v: &mut Vcpu, vcpu: c_uint, phase: usize) {
    match p.tracker.open(phase, vcpu, v.rsp) {
        Ok(true) => v.phase[phase].opens += 1,
        Ok(false) => {}
        Err(_) => v.phase[phase].unanchored += 1,
    }
}

/// The phase mask at the stack pointer now; counted inline, what came
/// before a change is folded into the phases it replaces.
fn remask(p: &Plugin, v: &mut Vcpu, vcpu: c_uint) {
    let mask = p.tracker.mask(vcpu, v.rsp);
    if mask != v.mask {
        p.fold(v, vcpu);
        v.mask = mask;
    }
}

extern "C" fn on_entry(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    open(p, v, vcpu, udata as usize);
    remask(p, v, vcpu);
}

/// Callbacks: every block.
extern "C" fn on_block(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    // SAFETY: `udata` is the block's leaked `BlockMeta` (on_translate).
    let b = unsafe { &*(udata as *const BlockMeta) };
    // A REP string instruction running more iterations: counted when it
    // started.
    let continued = b.rep_first != 0 && b.rep_first == v.rep_at;
    v.rep_at = b.rep_last;
    if continued {
        return;
    }
    if let Some(ph) = b.closes {
        end_at_mark(p, v, vcpu, ph);
    }
    if let Some(ph) = b.entry {
        open(p, v, vcpu, ph);
    }
    if v.execs.len() <= b.id {
        let want = (b.id + 1).max(p.nr_blocks.load(Ordering::Relaxed)) * 2;
        v.execs.resize(want, 0);
    }
    v.execs[b.id] += 1;
    v.insns += b.n_insns;
    remask(p, v, vcpu);
    for ph in mask_phases(v.mask) {
        let pe = &mut v.phase_execs[ph];
        if pe.len() <= b.id {
            pe.resize((b.id + 1) * 2, 0);
        }
        pe[b.id] += 1;
        if b.spin {
            v.phase[ph].spin_insns += b.n_insns;
        } else {
            v.phase[ph].insns += b.n_insns;
        }
    }
}

/// Inline: a block that opens a phase or starts with a REP string
/// instruction (the others are counted without a callback).
extern "C" fn on_block_inline(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    let Some(inline) = p.api.inline() else {
        return;
    };
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    // SAFETY: `udata` is the block's leaked `BlockMeta` (on_translate).
    let b = unsafe { &*(udata as *const BlockMeta) };
    let rep_at = inline.counters.u64_at(COUNT_REP_AT);
    let continued = b.rep_first != 0 && (inline.u64_get)(rep_at, vcpu) == b.rep_first;
    (inline.u64_set)(rep_at, vcpu, 0);
    if continued {
        return;
    }
    if let Some(ph) = b.closes {
        end_at_mark(p, v, vcpu, ph);
    }
    if let Some(ph) = b.entry {
        open(p, v, vcpu, ph);
        remask(p, v, vcpu);
    }
    // Counted after the phase opened: the block runs inside it.
    (inline.u64_add)(inline.block_counter(b.id), vcpu, 1);
}

extern "C" fn on_mem(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    let ud = udata as u64;
    let store = (p.api.mem_is_store)(info);
    let op = match ud & 0xff {
        MEM_RET => StackOp::Ret {
            pop_bytes: (ud >> 8) as u16,
        },
        MEM_CALL => StackOp::Call,
        MEM_POP => StackOp::Pop,
        _ => StackOp::Other,
    };
    if ud & 0xff == MEM_ENTRY_PUSH && store {
        // The return address is the slot above the push.
        v.rsp = vaddr + 8;
        open(p, v, vcpu, (ud >> 8 & 0xffff) as usize);
        v.rsp = vaddr;
        remask(p, v, vcpu);
    }
    if store && ud & MEM_COUNT != 0 && v.mask != 0 {
        let bytes = 1u64 << (p.api.mem_size_shift)(info);
        for ph in mask_phases(v.mask) {
            v.phase[ph].stores += 1;
            v.phase[ph].bytes += bytes;
        }
    }
    if let StackOp::Ret { .. } = op {
        if !store {
            p.tracker.ret(vaddr, |c| v.phase[c.phase].closes += 1);
        }
    }
    if let Some(rsp) = op.rsp_after(vaddr, store) {
        v.rsp = rsp;
        // Counted inline, no block callback follows the stack: the mask
        // moves here.
        if p.api.inline().is_some() {
            remask(p, v, vcpu);
        }
    }
}

extern "C" fn on_exit(_id: PluginId, _udata: *mut c_void) {
    let p = plugin();
    let raw = collect(p);
    match std::fs::write(&p.config.out, raw.to_text()) {
        Ok(()) => p.api.say(&format!("wrote {}", p.config.out)),
        Err(e) => p.api.say(&format!("cannot write {}: {e}", p.config.out)),
    }
}

/// Inline: each vCPU's last counts folded, and its totals and block
/// executions read, at exit.
fn fold_at_exit(p: &Plugin) {
    let Some(inline) = p.api.inline() else {
        return;
    };
    let nr = p.nr_blocks.load(Ordering::Acquire);
    for (i, cell) in p.vcpus.0.iter().enumerate() {
        let vcpu = i as c_uint;
        // SAFETY: at exit every vCPU has stopped (Vcpus' contract).
        let v = unsafe { &mut *cell.get() };
        p.fold(v, vcpu);
        let (mut execs, mut insns) = (vec![0; nr], 0);
        inline.for_each_block(vcpu, nr, |id, n, each| {
            execs[id] = n;
            insns += n * each.insns;
        });
        (v.execs, v.insns) = (execs, insns);
    }
}

fn collect(p: &Plugin) -> Raw {
    fold_at_exit(p);
    let blocks = p.blocks.lock().unwrap_or_else(|e| e.into_inner());
    let nph = p.config.phases.len();
    // SAFETY: at exit every vCPU has stopped (Vcpus' contract).
    let vcpus: Vec<&Vcpu> = p.vcpus.0.iter().map(|c| unsafe { &*c.get() }).collect();
    let used = vcpus.iter().rposition(|v| v.insns > 0).map_or(0, |i| i + 1);
    let open = p.tracker.open_frames();
    let phases = p
        .config
        .phases
        .iter()
        .enumerate()
        .map(|(i, (name, entries))| raw::Phase {
            name: name.clone(),
            entries: entries.clone(),
            per_vcpu: vcpus[..used].iter().map(|v| v.phase[i]).collect(),
            left_open: open[i],
        })
        .collect();
    let count = |v: &Vec<u64>, id: usize| v.get(id).copied().unwrap_or(0);
    let merged = Raw::merge_blocks(blocks.info.iter().enumerate().filter_map(|(id, b)| {
        let execs: u64 = vcpus.iter().map(|v| count(&v.execs, id)).sum();
        (execs > 0).then(|| raw::Block {
            vaddr: b.vaddr,
            insn_offsets: b.insn_offsets.clone(),
            execs,
            spin: b.spin,
            phase_execs: (0..nph)
                .map(|ph| vcpus.iter().map(|v| count(&v.phase_execs[ph], id)).sum())
                .collect(),
        })
    }));
    Raw {
        vcpus: used as u32,
        threads: p.config.threads.to_string(),
        plugin: p.described.clone(),
        phases,
        vcpu_insns: vcpus[..used].iter().map(|v| v.insns).collect(),
        blocks: merged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let c = Config::parse([
            "out=/tmp/x",
            "threads=stack:16384",
            "phase=deferred:0x10:0x20",
            "phase=boot:0x30",
            "until=boot:0x40:0x50",
        ])
        .unwrap();
        assert_eq!(c.until, vec![(1, vec![0x40, 0x50])]);
        assert_eq!(c.out, "/tmp/x");
        assert_eq!(c.threads, Threads::Stack { shift: 14 });
        assert_eq!(
            c.phases,
            vec![
                ("deferred".to_string(), vec![0x10, 0x20]),
                ("boot".to_string(), vec![0x30])
            ]
        );
        for (args, why) in [
            (&["threads=cpu"][..], "out=FILE is required"),
            (&["out=x"], "threads="),
            (
                &["out=x", "threads=cpu", "phase=deferred"],
                "no entry address",
            ),
            (&["out=x", "threads=cpu", "phase=d:10"], "not a 0x… address"),
            (&["out=x", "threads=cpu", "verbose"], "unknown argument"),
            (
                &["out=x", "threads=cpu", "until=boot:0x40"],
                "no phase=boot before it",
            ),
            (
                &["out=x", "threads=cpu", "phase=boot:0x30", "until=boot"],
                "no address",
            ),
        ] {
            let e = Config::parse(args.iter().copied()).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }
}
