//! At exit: every vCPU's counts folded and collected, and the raw file
//! written.

use core::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use super::api::PluginId;
use super::state::{plugin, Plugin, Vcpu};
use crate::raw::{self, Raw};

pub(super) extern "C" fn on_exit(_id: PluginId, _udata: *mut c_void) {
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
