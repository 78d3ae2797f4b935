//! The TCG plugin: QEMU calls `qemu_plugin_install` when it loads
//! `-plugin libmemboot_profile.so,out=FILE,threads=cpu|stack:BYTES,phase=NAME:ADDR[:ADDR…]…`.
//!
//! Counting: a callback per executed block (it carries the vCPU index) adds
//! the block's instruction count to that vCPU's own counters; a memory
//! callback on every access counts the phase's stores and bytes and follows
//! the stack through calls, returns and pops. (QEMU 7.2 never calls a
//! callback registered for loads only, and calls one registered for stores
//! on loads too: every callback is registered for both, and
//! `qemu_plugin_mem_is_store` tells them apart.) QEMU 7.2's
//! API (v1) has no per-vCPU inline counters, and its inline add to a shared
//! counter is not atomic under multi-threaded TCG; callbacks keep the
//! counts exact with the vCPUs running in parallel as in every other boot.
//! A phase opens at its entry function's first `push` (after `endbr64` and
//! ftrace nops), one slot below the return address whether the function
//! was called or tail-jumped to; without one, at the stack pointer the last
//! call or return left. The entry block's instructions before that store
//! count outside the phase (a few per frame opened).
//! A block is counted when it starts: TCG runs a `rep`-prefixed string
//! instruction one iteration per block execution, so such an instruction
//! counts once per iteration.
//!
//! The API's functions are looked up in QEMU's executable with `dlsym`
//! when the plugin is installed, so this library links without QEMU (the
//! report binary and the tests use the same crate).

use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::insn::{is_entry_padding, is_push_reg, StackOp};
use crate::raw::{self, Raw};
use crate::tracker::{Threads, Tracker, MAX_PHASES};

/// The plugin API version this plugin was written against (QEMU 7.2: 1).
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

type PluginId = u64;
#[repr(C)]
pub struct QemuInfo {
    target_name: *const c_char,
    version_min: c_int,
    version_cur: c_int,
    system_emulation: bool,
    smp_vcpus: c_int,
    max_vcpus: c_int,
}
#[repr(C)]
pub struct Tb {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Insn {
    _opaque: [u8; 0],
}
const CB_NO_REGS: c_int = 0;
const MEM_RW: c_int = 3;

type TbTransCb = extern "C" fn(PluginId, *mut Tb);
type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);
type MemCb = extern "C" fn(c_uint, u32, u64, *mut c_void);
type AtexitCb = extern "C" fn(PluginId, *mut c_void);

/// QEMU's plugin API, from `include/qemu/qemu-plugin.h` (API version 1).
struct Api {
    register_tb_trans: extern "C" fn(PluginId, TbTransCb),
    register_tb_exec: extern "C" fn(*mut Tb, VcpuUdataCb, c_int, *mut c_void),
    register_insn_exec: extern "C" fn(*mut Insn, VcpuUdataCb, c_int, *mut c_void),
    register_mem: extern "C" fn(*mut Insn, MemCb, c_int, c_int, *mut c_void),
    register_atexit: extern "C" fn(PluginId, AtexitCb, *mut c_void),
    tb_n_insns: extern "C" fn(*const Tb) -> usize,
    tb_get_insn: extern "C" fn(*const Tb, usize) -> *mut Insn,
    insn_data: extern "C" fn(*const Insn) -> *const c_void,
    insn_size: extern "C" fn(*const Insn) -> usize,
    insn_vaddr: extern "C" fn(*const Insn) -> u64,
    mem_size_shift: extern "C" fn(u32) -> c_uint,
    mem_is_store: extern "C" fn(u32) -> bool,
    outs: extern "C" fn(*const c_char),
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

impl Api {
    fn load() -> Result<Api, String> {
        fn sym<F: Copy>(name: &CStr) -> Result<F, String> {
            // SAFETY: dlsym with RTLD_DEFAULT (null on glibc) and a
            // NUL-terminated name only looks a symbol up.
            let p = unsafe { dlsym(core::ptr::null_mut(), name.as_ptr()) };
            if p.is_null() {
                return Err(format!(
                    "QEMU exports no {name:?}: not QEMU 7.2's plugin API"
                ));
            }
            assert_eq!(
                core::mem::size_of::<F>(),
                core::mem::size_of::<*mut c_void>()
            );
            // SAFETY: F is the function-pointer type the API header gives
            // this symbol (the field it is stored in), the size of a pointer.
            Ok(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
        }
        Ok(Api {
            register_tb_trans: sym(c"qemu_plugin_register_vcpu_tb_trans_cb")?,
            register_tb_exec: sym(c"qemu_plugin_register_vcpu_tb_exec_cb")?,
            register_insn_exec: sym(c"qemu_plugin_register_vcpu_insn_exec_cb")?,
            register_mem: sym(c"qemu_plugin_register_vcpu_mem_cb")?,
            register_atexit: sym(c"qemu_plugin_register_atexit_cb")?,
            tb_n_insns: sym(c"qemu_plugin_tb_n_insns")?,
            tb_get_insn: sym(c"qemu_plugin_tb_get_insn")?,
            insn_data: sym(c"qemu_plugin_insn_data")?,
            insn_size: sym(c"qemu_plugin_insn_size")?,
            insn_vaddr: sym(c"qemu_plugin_insn_vaddr")?,
            mem_size_shift: sym(c"qemu_plugin_mem_size_shift")?,
            mem_is_store: sym(c"qemu_plugin_mem_is_store")?,
            outs: sym(c"qemu_plugin_outs")?,
        })
    }

    fn say(&self, msg: &str) {
        if let Ok(s) = std::ffi::CString::new(format!("memboot-profile: {msg}\n")) {
            (self.outs)(s.as_ptr());
        }
    }
}

/// The plugin's arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub out: String,
    pub threads: Threads,
    /// (name, entry addresses), in the order given.
    pub phases: Vec<(String, Vec<u64>)>,
}

impl Config {
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Config, String> {
        let (mut out, mut threads, mut phases) = (None, None, Vec::new());
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
                _ => return Err(format!("unknown argument '{arg}' (out=, threads=, phase=)")),
            }
        }
        if phases.len() > MAX_PHASES {
            return Err(format!("{} phases: at most {MAX_PHASES}", phases.len()));
        }
        Ok(Config {
            out: out.ok_or("out=FILE is required")?,
            threads: threads.ok_or("threads=cpu|stack:BYTES is required")?,
            phases,
        })
    }
}

/// A block as translated: where its instructions are.
struct BlockInfo {
    vaddr: u64,
    insn_offsets: Vec<u32>,
}

/// One vCPU's counters, touched only by that vCPU's callbacks.
#[derive(Default)]
struct Vcpu {
    /// Stack pointer estimate (0: unknown), `StackOp::rsp_after`.
    rsp: u64,
    /// The phases of the block running now (`Tracker::mask`).
    mask: u32,
    insns: u64,
    /// Executions per block id, and per block id inside each phase.
    execs: Vec<u64>,
    phase_execs: [Vec<u64>; MAX_PHASES],
    phase: [raw::PhaseCounts; MAX_PHASES],
}

/// Per-vCPU state.
struct Vcpus(Box<[UnsafeCell<Vcpu>]>);
// SAFETY: QEMU calls a vCPU's execution and memory callbacks only on the
// thread that runs that vCPU (one per vCPU under multi-threaded TCG, one
// for all under single-threaded TCG), never two at once for one vCPU; the
// at-exit callback reads them after every vCPU has stopped.
unsafe impl Sync for Vcpus {}

struct Plugin {
    api: Api,
    config: Config,
    tracker: Tracker,
    vcpus: Vcpus,
    blocks: Mutex<Vec<BlockInfo>>,
    nr_blocks: AtomicU64,
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
}

/// A memory callback's user data: what the instruction is (low byte) and
/// its argument (`ret imm16`'s bytes, the entry push's phase).
const MEM_RET: u64 = 1;
const MEM_CALL: u64 = 2;
const MEM_ENTRY_PUSH: u64 = 3;
const MEM_POP: u64 = 4;

/// A block callback's user data: block id, instruction count and the phase
/// whose entry is the block's first instruction (0: none, else phase + 1).
fn block_udata(id: u64, n_insns: usize, entry: Option<usize>) -> *mut c_void {
    (id << 16 | (n_insns as u64) << 4 | entry.map_or(0, |p| p as u64 + 1)) as *mut c_void
}

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
    let api = match Api::load() {
        Ok(api) => api,
        Err(e) => {
            eprintln!("memboot-profile: {e}");
            return 1;
        }
    };
    // SAFETY: QEMU's contract above.
    let args: Vec<&str> = (0..argc.max(0) as usize)
        .map(|i| {
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
    // SAFETY: QEMU's contract above.
    let info = unsafe { &*info };
    if !info.system_emulation {
        api.say("needs system emulation (qemu-system-*)");
        return 1;
    }
    if info.version_cur < 1 {
        api.say("QEMU's plugin API is older than version 1");
        return 1;
    }
    let max_vcpus = info.max_vcpus.max(info.smp_vcpus).max(1) as usize;
    let state = Plugin {
        api,
        tracker: Tracker::new(config.threads),
        config,
        vcpus: Vcpus(
            (0..max_vcpus)
                .map(|_| UnsafeCell::new(Vcpu::default()))
                .collect(),
        ),
        blocks: Mutex::new(Vec::new()),
        nr_blocks: AtomicU64::new(0),
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

extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
    let p = plugin();
    let n = (p.api.tb_n_insns)(tb);
    let insns: Vec<*mut Insn> = (0..n).map(|i| (p.api.tb_get_insn)(tb, i)).collect();
    let bytes = |insn: *mut Insn| {
        let size = (p.api.insn_size)(insn);
        // SAFETY: QEMU's insn_data points at the instruction's `size`
        // bytes for the duration of this callback.
        unsafe { core::slice::from_raw_parts((p.api.insn_data)(insn) as *const u8, size) }
    };
    let start = insns.first().map_or(0, |&i| (p.api.insn_vaddr)(i));
    let mut offsets = Vec::with_capacity(n);
    let mut entry_at_start = None;
    // Instruction index -> the phase whose frame its push opens.
    let mut entry_push = None;
    for (i, &insn) in insns.iter().enumerate() {
        let vaddr = (p.api.insn_vaddr)(insn);
        offsets.push((vaddr - start) as u32);
        if let Some(ph) = p.config.phases.iter().position(|(_, e)| e.contains(&vaddr)) {
            let push = (i..n)
                .find(|&j| !is_entry_padding(bytes(insns[j])))
                .filter(|&j| is_push_reg(bytes(insns[j])));
            match (push, i) {
                (Some(j), _) => entry_push = Some((j, ph)),
                (None, 0) => entry_at_start = Some(ph),
                // An entry reached by falling into it mid-block.
                (None, _) => {
                    (p.api.register_insn_exec)(insn, on_entry, CB_NO_REGS, ph as *mut c_void)
                }
            }
        }
    }
    for (i, &insn) in insns.iter().enumerate() {
        let ud = match StackOp::of(bytes(insn)) {
            _ if entry_push.is_some_and(|(j, _)| j == i) => {
                MEM_ENTRY_PUSH | (entry_push.unwrap().1 as u64) << 8
            }
            StackOp::Ret { pop_bytes } => MEM_RET | u64::from(pop_bytes) << 8,
            StackOp::Call => MEM_CALL,
            StackOp::Pop => MEM_POP,
            StackOp::Other => 0,
        };
        (p.api.register_mem)(insn, on_mem, CB_NO_REGS, MEM_RW, ud as *mut c_void);
    }
    let id = p.nr_blocks.fetch_add(1, Ordering::Relaxed);
    {
        let mut blocks = p.blocks.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert_eq!(blocks.len() as u64, id);
        blocks.push(BlockInfo {
            vaddr: start,
            insn_offsets: offsets,
        });
    }
    (p.api.register_tb_exec)(tb, on_block, CB_NO_REGS, block_udata(id, n, entry_at_start));
}

fn open(p: &Plugin, v: &mut Vcpu, vcpu: c_uint, phase: usize) {
    match p.tracker.open(phase, vcpu, v.rsp) {
        Ok(()) => v.phase[phase].opens += 1,
        Err(_) => v.phase[phase].unanchored += 1,
    }
}

extern "C" fn on_entry(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    open(p, v, vcpu, udata as usize);
    v.mask = p.tracker.mask(vcpu, v.rsp);
}

extern "C" fn on_block(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    let ud = udata as u64;
    let (id, n) = ((ud >> 16) as usize, (ud >> 4) & 0xfff);
    if ud & 0xf != 0 {
        open(p, v, vcpu, (ud & 0xf) as usize - 1);
    }
    if v.execs.len() <= id {
        let want = (id + 1).max(p.nr_blocks.load(Ordering::Relaxed) as usize) * 2;
        v.execs.resize(want, 0);
    }
    v.execs[id] += 1;
    v.insns += n;
    v.mask = p.tracker.mask(vcpu, v.rsp);
    let mut mask = v.mask;
    while mask != 0 {
        let ph = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let pe = &mut v.phase_execs[ph];
        if pe.len() <= id {
            pe.resize((id + 1) * 2, 0);
        }
        pe[id] += 1;
        v.phase[ph].insns += n;
    }
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
        open(p, v, vcpu, (ud >> 8) as usize);
        v.rsp = vaddr;
        v.mask = p.tracker.mask(vcpu, v.rsp);
    }
    if store && v.mask != 0 {
        let bytes = 1u64 << (p.api.mem_size_shift)(info);
        let mut mask = v.mask;
        while mask != 0 {
            let ph = mask.trailing_zeros() as usize;
            mask &= mask - 1;
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

fn collect(p: &Plugin) -> Raw {
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
    let merged = Raw::merge_blocks(blocks.iter().enumerate().filter_map(|(id, b)| {
        let execs: u64 = vcpus.iter().map(|v| count(&v.execs, id)).sum();
        (execs > 0).then(|| raw::Block {
            vaddr: b.vaddr,
            insn_offsets: b.insn_offsets.clone(),
            execs,
            phase_execs: (0..nph)
                .map(|ph| vcpus.iter().map(|v| count(&v.phase_execs[ph], id)).sum())
                .collect(),
        })
    }));
    Raw {
        vcpus: used as u32,
        threads: p.config.threads.to_string(),
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
        ])
        .unwrap();
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
        ] {
            let e = Config::parse(args.iter().copied()).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }

    #[test]
    fn block_user_data_packs_what_the_callback_unpacks() {
        let ud = block_udata(123_456, 512, Some(2)) as u64;
        assert_eq!((ud >> 16, (ud >> 4) & 0xfff, ud & 0xf), (123_456, 512, 3));
        assert_eq!(block_udata(7, 1, None) as u64 & 0xf, 0);
    }
}
