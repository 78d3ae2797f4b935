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
//! QEMU 7.2's x86 translator ends a block before an instruction after the
//! first that would reach into another page and translates it again as the
//! first of the next block, yet lists it to plugins in the first block too,
//! cut at the page end: counted there, a loop straddling a page would count
//! one instruction a turn too many, and the same code more or less by where
//! the linker put it. A block that starts at the address the vCPU's
//! previous block listed last takes that instruction back from the phases
//! it was counted in (callbacks; the inline path, QEMU 9.1 on, is not
//! known to list it).
//!
//! The API's functions are looked up in QEMU's executable with `dlsym`
//! when the plugin is installed, so this library links without QEMU (the
//! report binary and the tests use the same crate).

pub mod api;
mod at_exit;
mod config;
mod execution;
mod state;
mod translate;

use core::ffi::{c_char, c_int, CStr};
use std::cell::UnsafeCell;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use crate::tracker::Tracker;
use api::{Api, PluginId, QemuInfo};
use at_exit::on_exit;
use state::{plugin, Blocks, Plugin, Vcpu, Vcpus, PLUGIN};
use translate::on_translate;

pub use config::Config;

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
