//! QEMU's plugin API as this plugin uses it (`include/qemu/qemu-plugin.h`),
//! looked up in QEMU's executable when the plugin is installed, and the
//! API version the plugin declares.
//!
//! Three generations matter: version 1 (QEMU 4.2 to 8.2), version 2 (QEMU
//! 9.0: it refuses version 1, `qemu_plugin_insn_data` copies the bytes
//! instead of pointing at them, per-vCPU scoreboards and inline adds), and
//! version 3 on (QEMU 9.1 on: inline stores, conditional callbacks; QEMU
//! 10.0 is at version 4 and still takes 2 and 3).

use core::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

pub type PluginId = u64;

#[repr(C)]
pub struct QemuInfo {
    pub target_name: *const c_char,
    pub version_min: c_int,
    pub version_cur: c_int,
    pub system_emulation: bool,
    pub smp_vcpus: c_int,
    pub max_vcpus: c_int,
}
#[repr(C)]
pub struct Tb {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct Insn {
    _opaque: [u8; 0],
}

/// A scoreboard: one entry per vCPU, written by inline operations.
#[derive(Clone, Copy)]
pub struct Score(*mut c_void);
// SAFETY: a handle QEMU gives out once and that is only passed back to
// QEMU's API, from any vCPU thread.
unsafe impl Send for Score {}
// SAFETY: as above.
unsafe impl Sync for Score {}

/// `qemu_plugin_u64`: one `u64` of every vCPU's entry of a scoreboard.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PluginU64 {
    score: *mut c_void,
    offset: usize,
}

impl Score {
    /// The `u64` at index `i` of every entry.
    pub fn u64_at(self, i: usize) -> PluginU64 {
        PluginU64 {
            score: self.0,
            offset: i * core::mem::size_of::<u64>(),
        }
    }
}

pub const CB_NO_REGS: c_int = 0;
pub const MEM_W: c_int = 2;
pub const MEM_RW: c_int = 3;
pub const INLINE_ADD_U64: c_int = 0;
/// API 3 on.
pub const INLINE_STORE_U64: c_int = 1;

pub type TbTransCb = extern "C" fn(PluginId, *mut Tb);
pub type VcpuUdataCb = extern "C" fn(c_uint, *mut c_void);
pub type MemCb = extern "C" fn(c_uint, u32, u64, *mut c_void);
pub type AtexitCb = extern "C" fn(PluginId, *mut c_void);

/// The plugin API version this plugin is written for, as QEMU reads it
/// right after loading the plugin: set by `choose_api` first.
#[no_mangle]
pub static qemu_plugin_version: AtomicI32 = AtomicI32::new(1);

/// Run when QEMU loads the plugin (`dlopen` runs `.init_array`), before
/// QEMU reads [`qemu_plugin_version`].
#[used]
#[link_section = ".init_array"]
static CHOOSE_API: extern "C" fn() = choose_api;

/// The newest API generation QEMU has of the three the plugin knows, found
/// by a function each one added: a QEMU with version 2 refuses version 1.
extern "C" fn choose_api() {
    let version = if lookup(c"qemu_plugin_register_vcpu_tb_exec_cond_cb").is_some() {
        3
    } else if lookup(c"qemu_plugin_scoreboard_new").is_some() {
        2
    } else {
        1
    };
    qemu_plugin_version.store(version, Ordering::Relaxed);
}

/// The version `choose_api` declared.
pub fn declared_version() -> c_int {
    qemu_plugin_version.load(Ordering::Relaxed)
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// A symbol of the process (QEMU's executable exports the plugin API).
fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT (null on glibc) and a NUL-terminated
    // name only looks a symbol up.
    let p = unsafe { dlsym(core::ptr::null_mut(), name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// `name` as the function-pointer type `F` the header of `version` gives
/// it.
fn sym<F: Copy>(name: &CStr, version: c_int) -> Result<F, String> {
    let p = lookup(name).ok_or_else(|| {
        format!("QEMU exports no {name:?}: not QEMU's plugin API version {version}")
    })?;
    assert_eq!(
        core::mem::size_of::<F>(),
        core::mem::size_of::<*mut c_void>()
    );
    // SAFETY: F is the function-pointer type the API header of `version`
    // gives this symbol (the field it is stored in), the size of a pointer.
    Ok(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// `qemu_plugin_insn_data`: version 1 points at the bytes, 2 on copies.
#[derive(Clone, Copy)]
enum InsnData {
    V1(extern "C" fn(*const Insn) -> *const c_void),
    V2(extern "C" fn(*const Insn, *mut c_void, usize) -> usize),
}

/// Blocks per scoreboard of block execution counts.
pub const CHUNK_BLOCKS: usize = 4096;
/// The per-vCPU counters' scoreboard: these `u64`s in each entry. Stores
/// and bytes of REP string instructions, one add per iteration.
pub const COUNT_STORES: usize = 0;
pub const COUNT_BYTES: usize = 1;
/// The REP string instruction about to run or just run (0: none).
pub const COUNT_REP_AT: usize = 2;
const COUNTERS: usize = 3;

/// What one execution of a block counts besides its REP iterations: its
/// instructions, and the stores of its instructions that make a fixed
/// number of them ([`crate::insn::Stores::Fixed`]); a spin-wait block's
/// instructions go to the phases' spin-wait count instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    pub insns: u64,
    pub stores: u64,
    pub bytes: u64,
    /// The block holds a `pause` ([`crate::insn::is_pause`]).
    pub spin: bool,
}

/// [`CHUNK_BLOCKS`] blocks' execution counts (a scoreboard) and what each
/// execution counts.
struct Chunk {
    score: Score,
    counts: Vec<BlockCounts>,
}

/// Version 3's inline counting: every vCPU counts into its own scoreboard
/// entries, without a call out of the translated code.
pub struct Inline {
    scoreboard_new: extern "C" fn(usize) -> *mut c_void,
    scoreboard_find: extern "C" fn(*mut c_void, c_uint) -> *mut c_void,
    pub tb_inline: extern "C" fn(*mut Tb, c_int, PluginU64, u64),
    pub insn_inline: extern "C" fn(*mut Insn, c_int, PluginU64, u64),
    pub mem_inline: extern "C" fn(*mut Insn, c_int, c_int, PluginU64, u64),
    pub u64_get: extern "C" fn(PluginU64, c_uint) -> u64,
    pub u64_set: extern "C" fn(PluginU64, c_uint, u64),
    pub u64_add: extern "C" fn(PluginU64, c_uint, u64),
    /// `COUNTERS` `u64`s per vCPU.
    pub counters: Score,
    /// The blocks, [`CHUNK_BLOCKS`] per chunk, by block id.
    chunks: Mutex<Vec<Chunk>>,
}

impl Inline {
    fn load(v: c_int) -> Result<Inline, String> {
        let scoreboard_new: extern "C" fn(usize) -> *mut c_void =
            sym(c"qemu_plugin_scoreboard_new", v)?;
        let counters = scoreboard_new(COUNTERS * core::mem::size_of::<u64>());
        if counters.is_null() {
            return Err("qemu_plugin_scoreboard_new returned no scoreboard".into());
        }
        Ok(Inline {
            scoreboard_new,
            scoreboard_find: sym(c"qemu_plugin_scoreboard_find", v)?,
            tb_inline: sym(c"qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu", v)?,
            insn_inline: sym(c"qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu", v)?,
            mem_inline: sym(c"qemu_plugin_register_vcpu_mem_inline_per_vcpu", v)?,
            u64_get: sym(c"qemu_plugin_u64_get", v)?,
            u64_set: sym(c"qemu_plugin_u64_set", v)?,
            u64_add: sym(c"qemu_plugin_u64_add", v)?,
            counters: Score(counters),
            chunks: Mutex::new(Vec::new()),
        })
    }

    /// Block `id` (ids are handed out in order), which counts `counts`
    /// each execution: its execution counter, its chunk made with its first
    /// block.
    pub fn add_block(&self, id: usize, counts: BlockCounts) -> PluginU64 {
        let mut chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        while chunks.len() <= id / CHUNK_BLOCKS {
            let score = (self.scoreboard_new)(CHUNK_BLOCKS * core::mem::size_of::<u64>());
            assert!(!score.is_null(), "qemu_plugin_scoreboard_new failed");
            chunks.push(Chunk {
                score: Score(score),
                counts: vec![BlockCounts::default(); CHUNK_BLOCKS],
            });
        }
        let chunk = &mut chunks[id / CHUNK_BLOCKS];
        chunk.counts[id % CHUNK_BLOCKS] = counts;
        chunk.score.u64_at(id % CHUNK_BLOCKS)
    }

    /// Block `id`'s execution counter.
    pub fn block_counter(&self, id: usize) -> PluginU64 {
        let chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        chunks[id / CHUNK_BLOCKS].score.u64_at(id % CHUNK_BLOCKS)
    }

    /// `f(id, executions on vcpu, what each counts)` for the first `nr`
    /// blocks, with new blocks held back meanwhile. On `vcpu`'s own thread
    /// (or once every vCPU stopped): only it writes its counts.
    pub fn for_each_block(
        &self,
        vcpu: c_uint,
        nr: usize,
        mut f: impl FnMut(usize, u64, BlockCounts),
    ) {
        let chunks = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        for (k, chunk) in chunks.iter().enumerate() {
            let first = k * CHUNK_BLOCKS;
            if first >= nr {
                break;
            }
            let entry = (self.scoreboard_find)(chunk.score.0, vcpu) as *const u64;
            // SAFETY: `vcpu`'s entry of a scoreboard of CHUNK_BLOCKS u64s,
            // which QEMU keeps until the plugin is uninstalled (the plugin
            // never frees it) and moves only when vCPUs are added, with
            // every vCPU stopped; only `vcpu` writes it, and this runs on its
            // thread.
            let execs = unsafe { core::slice::from_raw_parts(entry, CHUNK_BLOCKS) };
            let n = (nr - first).min(CHUNK_BLOCKS);
            for (i, (&execs, &counts)) in execs.iter().zip(&chunk.counts).take(n).enumerate() {
                f(first + i, execs, counts);
            }
        }
    }
}

/// How stores and block executions are counted.
pub enum Counting {
    /// Versions 1 and 2: a callback per block executed and per store.
    Callbacks,
    /// Version 3 on.
    Inline(Inline),
}

/// QEMU's plugin API, for the version `choose_api` declared.
pub struct Api {
    pub register_tb_trans: extern "C" fn(PluginId, TbTransCb),
    pub register_tb_exec: extern "C" fn(*mut Tb, VcpuUdataCb, c_int, *mut c_void),
    pub register_insn_exec: extern "C" fn(*mut Insn, VcpuUdataCb, c_int, *mut c_void),
    pub register_mem: extern "C" fn(*mut Insn, MemCb, c_int, c_int, *mut c_void),
    pub register_atexit: extern "C" fn(PluginId, AtexitCb, *mut c_void),
    pub tb_n_insns: extern "C" fn(*const Tb) -> usize,
    pub tb_get_insn: extern "C" fn(*const Tb, usize) -> *mut Insn,
    insn_data: InsnData,
    insn_size: extern "C" fn(*const Insn) -> usize,
    pub insn_vaddr: extern "C" fn(*const Insn) -> u64,
    pub mem_size_shift: extern "C" fn(u32) -> c_uint,
    pub mem_is_store: extern "C" fn(u32) -> bool,
    outs: extern "C" fn(*const c_char),
    pub counting: Counting,
}

impl Api {
    /// The API of `version`.
    pub fn load(version: c_int) -> Result<Api, String> {
        let v = version;
        let insn_data = if version >= 2 {
            InsnData::V2(sym(c"qemu_plugin_insn_data", v)?)
        } else {
            InsnData::V1(sym(c"qemu_plugin_insn_data", v)?)
        };
        let counting = if version >= 3 {
            Counting::Inline(Inline::load(v)?)
        } else {
            Counting::Callbacks
        };
        Ok(Api {
            register_tb_trans: sym(c"qemu_plugin_register_vcpu_tb_trans_cb", v)?,
            register_tb_exec: sym(c"qemu_plugin_register_vcpu_tb_exec_cb", v)?,
            register_insn_exec: sym(c"qemu_plugin_register_vcpu_insn_exec_cb", v)?,
            register_mem: sym(c"qemu_plugin_register_vcpu_mem_cb", v)?,
            register_atexit: sym(c"qemu_plugin_register_atexit_cb", v)?,
            tb_n_insns: sym(c"qemu_plugin_tb_n_insns", v)?,
            tb_get_insn: sym(c"qemu_plugin_tb_get_insn", v)?,
            insn_data,
            insn_size: sym(c"qemu_plugin_insn_size", v)?,
            insn_vaddr: sym(c"qemu_plugin_insn_vaddr", v)?,
            mem_size_shift: sym(c"qemu_plugin_mem_size_shift", v)?,
            mem_is_store: sym(c"qemu_plugin_mem_is_store", v)?,
            outs: sym(c"qemu_plugin_outs", v)?,
            counting,
        })
    }

    pub fn inline(&self) -> Option<&Inline> {
        match &self.counting {
            Counting::Inline(i) => Some(i),
            Counting::Callbacks => None,
        }
    }

    /// An instruction's bytes (an x86 instruction is at most 15 long).
    pub fn bytes(&self, insn: *mut Insn) -> ([u8; 16], usize) {
        let mut buf = [0u8; 16];
        let size = (self.insn_size)(insn).min(buf.len());
        match self.insn_data {
            InsnData::V1(data) => {
                // SAFETY: QEMU's insn_data points at the instruction's
                // `size` bytes for the duration of the translation callback.
                let bytes = unsafe { core::slice::from_raw_parts(data(insn) as *const u8, size) };
                buf[..size].copy_from_slice(bytes);
            }
            InsnData::V2(data) => {
                data(insn, buf.as_mut_ptr().cast(), size);
            }
        }
        (buf, size)
    }

    pub fn say(&self, msg: &str) {
        if let Ok(s) = std::ffi::CString::new(format!("memboot-profile: {msg}\n")) {
            (self.outs)(s.as_ptr());
        }
    }
}
