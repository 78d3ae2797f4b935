//! The plugin's output, read back by the report: counts by guest address,
//! before any symbol is known. A line-oriented text file:
//!
//! ```text
//! memboot-profile raw 2
//! vcpus 2
//! threads cpu
//! plugin API 3 of QEMU's 2 to 4, inline
//! phase deferred 0xffffffff81012340,0xffffffff81012560
//! phase-vcpu deferred 0 insns 123 stores 45 bytes 360 opens 1 closes 1 unanchored 0 spin 12
//! phase-open deferred 0
//! vcpu 0 insns 99999
//! block 0xffffffff81000000 0,3,7 execs 100 spin 0 phases 50
//! ```
//!
//! `block` lines: the block's first address, each instruction's offset
//! from it, how often the block ran, whether it is a spin-wait (holds a
//! `pause`, or is a wait loop's re-check: `crate::insn`), and how often it ran inside each
//! phase (in `phase` line order). A block TCG translated twice is one line.
//! A phase's `insns` leave out its spin-waits' instructions, which `spin`
//! counts: how long a CPU waits for another is the host's scheduling.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A phase's counts on one vCPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhaseCounts {
    pub insns: u64,
    pub stores: u64,
    pub bytes: u64,
    /// Frames opened (an entry executed with a known stack pointer).
    pub opens: u64,
    /// Frames closed by their return.
    pub closes: u64,
    /// Entries executed before the vCPU's stack pointer was known.
    pub unanchored: u64,
    /// Instructions of spin-wait blocks run inside the phase (not in
    /// `insns`).
    pub spin_insns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    pub name: String,
    pub entries: Vec<u64>,
    /// Indexed by vCPU.
    pub per_vcpu: Vec<PhaseCounts>,
    /// Frames never closed by the end of the run.
    pub left_open: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    pub vaddr: u64,
    pub insn_offsets: Vec<u32>,
    pub execs: u64,
    /// A spin-wait block (holds a `pause`, or re-checks after one).
    pub spin: bool,
    /// Indexed like `Raw::phases`.
    pub phase_execs: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Raw {
    pub vcpus: u32,
    pub threads: String,
    /// How the plugin counted: its API version, QEMU's range, and whether
    /// inline or by callbacks (empty in files from before this line).
    pub plugin: String,
    pub phases: Vec<Phase>,
    /// Instructions per vCPU, the whole run.
    pub vcpu_insns: Vec<u64>,
    pub blocks: Vec<Block>,
}

const MAGIC: &str = "memboot-profile raw 2";

impl Raw {
    /// Blocks with the same address and instructions become one.
    pub fn merge_blocks(blocks: impl IntoIterator<Item = Block>) -> Vec<Block> {
        let mut by_key: BTreeMap<(u64, Vec<u32>), Block> = BTreeMap::new();
        for b in blocks {
            match by_key.get_mut(&(b.vaddr, b.insn_offsets.clone())) {
                Some(m) => {
                    m.execs += b.execs;
                    for (a, x) in m.phase_execs.iter_mut().zip(&b.phase_execs) {
                        *a += x;
                    }
                }
                None => {
                    by_key.insert((b.vaddr, b.insn_offsets.clone()), b);
                }
            }
        }
        by_key.into_values().collect()
    }

    pub fn to_text(&self) -> String {
        let mut s = format!("{MAGIC}\nvcpus {}\nthreads {}\n", self.vcpus, self.threads);
        if !self.plugin.is_empty() {
            let _ = writeln!(s, "plugin {}", self.plugin);
        }
        for p in &self.phases {
            let entries: Vec<String> = p.entries.iter().map(|e| format!("{e:#x}")).collect();
            let _ = writeln!(s, "phase {} {}", p.name, entries.join(","));
        }
        for p in &self.phases {
            for (v, c) in p.per_vcpu.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "phase-vcpu {} {v} insns {} stores {} bytes {} opens {} closes {} unanchored {} spin {}",
                    p.name, c.insns, c.stores, c.bytes, c.opens, c.closes, c.unanchored, c.spin_insns
                );
            }
            let _ = writeln!(s, "phase-open {} {}", p.name, p.left_open);
        }
        for (v, n) in self.vcpu_insns.iter().enumerate() {
            let _ = writeln!(s, "vcpu {v} insns {n}");
        }
        for b in &self.blocks {
            let offs: Vec<String> = b.insn_offsets.iter().map(u32::to_string).collect();
            let pe: Vec<String> = b.phase_execs.iter().map(u64::to_string).collect();
            let _ = write!(
                s,
                "block {:#x} {} execs {} spin {} phases",
                b.vaddr,
                offs.join(","),
                b.execs,
                u8::from(b.spin)
            );
            for x in pe {
                let _ = write!(s, " {x}");
            }
            s.push('\n');
        }
        s
    }

    pub fn parse(text: &str) -> Result<Raw, String> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, MAGIC)) => {}
            _ => {
                return Err(format!(
                    "not a memboot-profile raw file (first line should be '{MAGIC}')"
                ))
            }
        }
        let mut raw = Raw::default();
        for (i, line) in lines {
            let bad = |what: &str| format!("line {}: {what}: {line}", i + 1);
            let w: Vec<&str> = line.split_ascii_whitespace().collect();
            let num = |s: &str| -> Result<u64, String> {
                s.parse().map_err(|_| bad("a number expected"))
            };
            let phase_ix = |raw: &Raw, name: &str| {
                raw.phases
                    .iter()
                    .position(|p| p.name == name)
                    .ok_or_else(|| bad("unknown phase"))
            };
            match w.as_slice() {
                ["plugin", ..] => raw.plugin = line.trim_start()["plugin ".len()..].to_string(),
                ["vcpus", n] => raw.vcpus = num(n)? as u32,
                ["threads", t] => raw.threads = t.to_string(),
                ["phase", name, entries] => raw.phases.push(Phase {
                    name: name.to_string(),
                    entries: entries
                        .split(',')
                        .map(|e| hex(e).ok_or_else(|| bad("hex")))
                        .collect::<Result<_, _>>()?,
                    ..Phase::default()
                }),
                ["phase-vcpu", name, v, "insns", a, "stores", b, "bytes", c, "opens", d, "closes", e, "unanchored", f, "spin", g] =>
                {
                    let p = phase_ix(&raw, name)?;
                    let v = num(v)? as usize;
                    let per = &mut raw.phases[p].per_vcpu;
                    if per.len() <= v {
                        per.resize(v + 1, PhaseCounts::default());
                    }
                    per[v] = PhaseCounts {
                        insns: num(a)?,
                        stores: num(b)?,
                        bytes: num(c)?,
                        opens: num(d)?,
                        closes: num(e)?,
                        unanchored: num(f)?,
                        spin_insns: num(g)?,
                    };
                }
                ["phase-open", name, n] => {
                    let p = phase_ix(&raw, name)?;
                    raw.phases[p].left_open = num(n)?;
                }
                ["vcpu", v, "insns", n] => {
                    let v = num(v)? as usize;
                    if raw.vcpu_insns.len() <= v {
                        raw.vcpu_insns.resize(v + 1, 0);
                    }
                    raw.vcpu_insns[v] = num(n)?;
                }
                ["block", ..] => raw.blocks.push(block(&w, raw.phases.len()).map_err(&bad)?),
                [] => {}
                _ => return Err(bad("unknown line")),
            }
        }
        Ok(raw)
    }
}

/// A `block` line's words, with one count per phase of `nr_phases`.
fn block(w: &[&str], nr_phases: usize) -> Result<Block, &'static str> {
    let ["block", vaddr, offs, "execs", execs, "spin", spin, "phases", pe @ ..] = w else {
        return Err("unknown line");
    };
    let spin = match *spin {
        "0" => false,
        "1" => true,
        _ => return Err("spin 0 or 1 expected"),
    };
    if pe.len() != nr_phases {
        return Err("one count per phase expected");
    }
    let num = |s: &str| s.parse::<u64>().map_err(|_| "a number expected");
    Ok(Block {
        vaddr: hex(vaddr).ok_or("hex")?,
        insn_offsets: offs
            .split(',')
            .map(|o| o.parse().map_err(|_| "offsets"))
            .collect::<Result<_, _>>()?,
        execs: num(execs)?,
        spin,
        phase_execs: pe.iter().map(|x| num(x)).collect::<Result<_, _>>()?,
    })
}

pub fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Raw {
        Raw {
            vcpus: 2,
            threads: "cpu".into(),
            plugin: "API 3 of QEMU's 2 to 4, inline".into(),
            phases: vec![Phase {
                name: "deferred".into(),
                entries: vec![0xffffffff81000010, 0xffffffff81000020],
                per_vcpu: vec![
                    PhaseCounts {
                        insns: 10,
                        stores: 2,
                        bytes: 16,
                        opens: 1,
                        closes: 1,
                        unanchored: 0,
                        spin_insns: 6,
                    },
                    PhaseCounts {
                        insns: 7,
                        stores: 1,
                        bytes: 8,
                        opens: 1,
                        closes: 0,
                        unanchored: 1,
                        spin_insns: 0,
                    },
                ],
                left_open: 1,
            }],
            vcpu_insns: vec![100, 50],
            blocks: vec![Block {
                vaddr: 0xffffffff81000010,
                insn_offsets: vec![0, 4, 7],
                execs: 5,
                spin: true,
                phase_execs: vec![3],
            }],
        }
    }

    #[test]
    fn text_round_trip() {
        let raw = sample();
        assert_eq!(Raw::parse(&raw.to_text()).unwrap(), raw);
    }

    #[test]
    fn malformed_lines_are_named() {
        assert!(Raw::parse("hello")
            .unwrap_err()
            .contains("not a memboot-profile raw file"));
        let bad = sample().to_text().replace("phases 3", "phases 3 4");
        assert!(
            Raw::parse(&bad)
                .unwrap_err()
                .contains("one count per phase"),
            "{bad}"
        );
        let bad = sample()
            .to_text()
            .replace("phase-open deferred", "phase-open boot");
        assert!(Raw::parse(&bad).unwrap_err().contains("unknown phase"));
    }

    #[test]
    fn retranslated_blocks_merge() {
        let b = |execs, pe| Block {
            vaddr: 0x10,
            insn_offsets: vec![0, 2],
            execs,
            spin: false,
            phase_execs: vec![pe],
        };
        let other = Block {
            vaddr: 0x10,
            insn_offsets: vec![0],
            execs: 1,
            spin: false,
            phase_execs: vec![0],
        };
        let merged = Raw::merge_blocks([b(2, 1), other.clone(), b(3, 0)]);
        assert_eq!(merged, vec![other, b(5, 1)]);
    }
}
