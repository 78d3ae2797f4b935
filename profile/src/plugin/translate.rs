//! Translation: each block QEMU translates gets its id, its way of being
//! counted (inline or by callback), and the callbacks that follow the
//! stack, the phases' entries and the `until=` marks.

use core::ffi::c_void;
use std::sync::atomic::Ordering;

use super::api::{
    self, BlockCounts, Insn, PluginId, Tb, CB_NO_REGS, COUNT_BYTES, COUNT_REP_AT, COUNT_STORES,
    INLINE_ADD_U64, INLINE_STORE_U64, MEM_RW, MEM_W,
};
use super::execution::{on_block, on_block_inline, on_entry, on_mem, on_until};
use super::state::{
    plugin, BlockInfo, BlockMeta, Plugin, MEM_CALL, MEM_COUNT, MEM_ENTRY_PUSH, MEM_POP, MEM_RET,
};
use crate::insn::{
    is_entry_padding, is_pause, is_push_reg, is_rep_string, is_wait_recheck, stores_of, StackOp,
    Stores,
};

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

pub(super) extern "C" fn on_translate(_id: PluginId, tb: *mut Tb) {
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
        spin: (0..n).any(|i| is_pause(bytes(i)))
            || is_wait_recheck(start, (0..n).map(|i| (vaddrs[i], bytes(i)))),
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
        first_vaddr: start,
        last_vaddr: if n > 1 { vaddrs[n - 1] } else { 0 },
    };
    register(p, tb, meta, counter);
}

/// Count `tb`'s executions: inline for most blocks, else by a callback
/// that carries `meta`.
fn register(p: &Plugin, tb: *mut Tb, meta: BlockMeta, counter: Option<api::PluginU64>) {
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
