//! The callbacks QEMU makes as the guest runs (blocks executed, memory
//! accesses, phase entries and `until=` marks inside a block): they open
//! and close phases and count into the vCPU's counters.

use core::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use super::api::COUNT_REP_AT;
use super::state::{
    mask_phases, plugin, BlockMeta, Plugin, Vcpu, MEM_CALL, MEM_COUNT, MEM_ENTRY_PUSH, MEM_POP,
    MEM_RET,
};
use crate::insn::StackOp;

/// `vcpu` reached an `until=` mark of `phase`: what ran before it is the
/// phase's (inline counts folded first), then every open frame of the
/// phase closes, counted on this vCPU.
fn end_at_mark(p: &Plugin, v: &mut Vcpu, vcpu: c_uint, phase: usize) {
    p.fold(v, vcpu);
    p.tracker
        .close_phase(phase, |c| v.phase[c.phase].closes += 1);
    remask(p, v, vcpu);
}

pub(super) extern "C" fn on_until(vcpu: c_uint, udata: *mut c_void) {
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

pub(super) extern "C" fn on_entry(vcpu: c_uint, udata: *mut c_void) {
    let p = plugin();
    // SAFETY: a callback for `vcpu`.
    let v = unsafe { p.vcpu(vcpu) };
    open(p, v, vcpu, udata as usize);
    remask(p, v, vcpu);
}

/// QEMU 7.2's x86 translator ends a block before an instruction after its
/// first that would reach into another page and translates that
/// instruction again as the first of a new block, but it has already
/// listed it to plugins in the first block, whose count then includes an
/// instruction it never runs; a loop straddling a page counted one
/// instruction a turn too many. The listed bytes stop at the page end, so
/// translation cannot tell such an instruction from one that ends a block
/// there; at run time the next block starting at its address does (as with
/// a REP string instruction, whose next block is handled before this).
fn uncount_cut_instruction(v: &mut Vcpu, b: &BlockMeta) {
    if v.last_at == 0 || b.first_vaddr != v.last_at {
        return;
    }
    v.insns = v.insns.saturating_sub(1);
    for ph in mask_phases(v.last_mask) {
        if v.last_spin {
            v.phase[ph].spin_insns = v.phase[ph].spin_insns.saturating_sub(1);
        } else {
            v.phase[ph].insns = v.phase[ph].insns.saturating_sub(1);
        }
    }
    v.last_at = 0;
}

/// Callbacks: every block.
pub(super) extern "C" fn on_block(vcpu: c_uint, udata: *mut c_void) {
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
    uncount_cut_instruction(v, b);
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
    (v.last_at, v.last_mask, v.last_spin) = (b.last_vaddr, v.mask, b.spin);
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
pub(super) extern "C" fn on_block_inline(vcpu: c_uint, udata: *mut c_void) {
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

pub(super) extern "C" fn on_mem(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
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

#[cfg(test)]
mod tests {
    use super::{uncount_cut_instruction, BlockMeta, Vcpu};

    fn block(first_vaddr: u64, last_vaddr: u64, spin: bool) -> BlockMeta {
        BlockMeta {
            id: 0,
            n_insns: 0,
            entry: None,
            closes: None,
            rep_first: 0,
            rep_last: 0,
            spin,
            first_vaddr,
            last_vaddr,
        }
    }

    /// The loop of memboot's `init_window` that straddled a page: the
    /// block before listed the instruction at 0x…dffc last, and the next
    /// block starts there: one instruction taken back, from the phases it
    /// was counted in, once. A block starting anywhere else takes nothing.
    #[test]
    fn a_block_starting_at_the_last_listed_instruction_takes_it_back() {
        let cut = 0xffff_ffff_8102_dffc;
        let mut v = Vcpu {
            insns: 40,
            ..Vcpu::default()
        };
        v.phase[0].insns = 40;
        v.phase[1].insns = 40;
        (v.last_at, v.last_mask, v.last_spin) = (cut, 0b01, false);
        uncount_cut_instruction(&mut v, &block(cut + 7, 0, false));
        assert_eq!((v.insns, v.phase[0].insns), (40, 40), "not the cut one");
        uncount_cut_instruction(&mut v, &block(cut, cut + 12, false));
        assert_eq!((v.insns, v.phase[0].insns, v.phase[1].insns), (39, 39, 40));
        uncount_cut_instruction(&mut v, &block(cut, cut + 12, false));
        assert_eq!(v.insns, 39, "once");
        (v.last_at, v.last_mask, v.last_spin) = (cut, 0b10, true);
        v.phase[1].spin_insns = 5;
        uncount_cut_instruction(&mut v, &block(cut, 0, false));
        assert_eq!(
            (v.phase[1].insns, v.phase[1].spin_insns),
            (40, 4),
            "a spin-wait's"
        );
    }
}
