//! The struct pages each phase of a Linux boot initialised, counted in the
//! run itself: the calls of `__init_single_page` inside the phase. Every
//! struct page Linux initialises at boot goes through it (memmap_init's
//! range loop and `init_unavailable_range`'s holes on the boot CPU,
//! `deferred_init_pages` in the deferred threads), so the divisors of
//! Linux's per-page figures are Linux's own, never memboot's. Where a
//! build inlines it into every caller (Debian's 6.12 does; 6.1 calls it)
//! no call is made and the pages stay unknown: a per-page figure then
//! reads "–", not a figure divided by someone else's count.

use std::collections::HashMap;

use crate::phases::{BOOT_CPU, BUDDY_HANDOFF, DEFERRED, HUGETLB};
use crate::raw::Raw;
use crate::symbols::Symbols;

/// The function every struct page Linux initialises goes through.
pub const PAGE_FUNCTION: &str = "__init_single_page";

/// Calls of the function at `entries` inside each phase of `raw`: the
/// executions, in the phase, of the blocks that start at an entry (a call
/// enters there; nothing jumps back to a function's first instruction, its
/// `endbr64` or ftrace padding).
pub fn calls_per_phase(raw: &Raw, entries: &[u64]) -> Vec<u64> {
    let mut calls = vec![0; raw.phases.len()];
    for b in raw.blocks.iter().filter(|b| entries.contains(&b.vaddr)) {
        for (c, n) in calls.iter_mut().zip(&b.phase_execs) {
            *c += n;
        }
    }
    calls
}

/// Pages per phase name: deferred init's, the boot CPU's and hugetlb's
/// calls, and the boot CPU's again for its hand-off (the pages it
/// initialised, as memboot's `buddy_handoff` divides by its eager pages). Empty when the
/// run made no call at all (inlined everywhere in this build).
pub fn pages(raw: &Raw, symbols: &Symbols) -> Result<HashMap<String, u64>, String> {
    let entries = symbols.entries(&[PAGE_FUNCTION])?;
    let calls = calls_per_phase(raw, &entries);
    if calls.iter().all(|&c| c == 0) {
        return Ok(HashMap::new());
    }
    let of = |name: &str| {
        raw.phases
            .iter()
            .position(|p| p.name == name)
            .map(|i| calls[i])
    };
    let mut pages = HashMap::new();
    for (phase, counted_in) in [
        (DEFERRED, DEFERRED),
        (BOOT_CPU, BOOT_CPU),
        (BUDDY_HANDOFF, BOOT_CPU),
        (HUGETLB, HUGETLB),
    ] {
        if let Some(n) = of(counted_in) {
            pages.insert(phase.to_string(), n);
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{Block, Phase};

    fn phase(name: &str) -> Phase {
        Phase {
            name: name.into(),
            ..Phase::default()
        }
    }

    fn block(vaddr: u64, phase_execs: Vec<u64>) -> Block {
        Block {
            vaddr,
            insn_offsets: vec![0, 4],
            execs: phase_execs.iter().sum::<u64>() + 1,
            spin: false,
            phase_execs,
        }
    }

    #[test]
    fn pages_are_the_calls_made_inside_each_phase() {
        // A map of enough functions to pass for a real one.
        let map_of = |names: &[&str]| {
            let mut m = String::new();
            for (i, name) in names
                .iter()
                .chain(&["f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10"])
                .enumerate()
            {
                m += &format!(
                    "{:016x} T {name}\n",
                    0xffffffff81000000u64 + 0x100 * i as u64
                );
            }
            Symbols::parse_system_map(&m).unwrap()
        };
        let map = map_of(&["memmap_init", "__init_single_page", "other"]);
        let raw = Raw {
            phases: vec![phase(DEFERRED), phase(BOOT_CPU), phase(BUDDY_HANDOFF)],
            blocks: vec![
                // The entry block, and the same entry translated again
                // (another block length): both are calls.
                block(0xffffffff81000100, vec![300, 20, 0]),
                Block {
                    insn_offsets: vec![0],
                    ..block(0xffffffff81000100, vec![12, 1, 0])
                },
                // Inside the function, past its entry: not a call.
                block(0xffffffff81000110, vec![900, 90, 0]),
                block(0xffffffff81000200, vec![5, 5, 5]),
            ],
            ..Raw::default()
        };
        let pages = pages(&raw, &map).unwrap();
        assert_eq!(pages[DEFERRED], 312);
        assert_eq!(pages[BOOT_CPU], 21);
        assert_eq!(pages[BUDDY_HANDOFF], 21);
        // Inlined into every caller: not one call, no page count.
        let inlined = Raw {
            blocks: raw.blocks[2..].to_vec(),
            ..raw.clone()
        };
        assert!(super::pages(&inlined, &map).unwrap().is_empty());
        let no_function = map_of(&["memmap_init"]);
        assert!(super::pages(&raw, &no_function)
            .unwrap_err()
            .contains("__init_single_page"));
    }
}
