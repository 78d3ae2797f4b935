//! The raw counts named: instructions per function (the flat profile of
//! the kernel), each phase's instructions, stores and bytes stored, per
//! vCPU and per struct page, and the functions that carry them.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::nodes::VcpuCounts;
use crate::raw::{Phase, PhaseCounts, Raw};
use crate::symbols::{Symbols, KERNEL_HALF};

/// The share of kernel-half instructions that must fall in known functions
/// for the flat profile to be trusted; below it the report says where the
/// rest ran.
pub const MIN_ATTRIBUTED: f64 = 0.99;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCount {
    pub function: String,
    pub insns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    pub name: String,
    pub entries: Vec<String>,
    pub insns: u64,
    pub stores: u64,
    pub bytes: u64,
    pub per_vcpu: Vec<VcpuCounts>,
    /// Frames opened and closed, entries with no known stack pointer, and
    /// frames still open at the end: a phase whose frames do not all close
    /// counted to the end of the run.
    pub opens: u64,
    pub closes: u64,
    pub unanchored: u64,
    pub left_open: u64,
    /// Instructions of spin-waits (blocks with a `pause`) inside the phase:
    /// not in `insns` or `functions`, as they follow the host's scheduling
    /// (0 in profiles from before they were told apart).
    #[serde(default)]
    pub spin_insns: u64,
    /// Struct pages the phase initialised (given by the caller: the
    /// kernel's own count, or the defer rule applied to the map).
    pub pages: Option<u64>,
    pub insns_per_page: Option<f64>,
    pub stores_per_page: Option<f64>,
    pub bytes_per_page: Option<f64>,
    /// The phase's instructions by function, most first.
    pub functions: Vec<FunctionCount>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub kernel: String,
    pub vcpus: u32,
    pub threads: String,
    /// How the plugin counted (`Raw::plugin`; empty in older profiles).
    #[serde(default)]
    pub plugin: String,
    /// Every instruction every vCPU ran (firmware, bootloader and user
    /// space included; spin-waits and timer ticks follow the host's speed).
    pub total_insns: u64,
    pub per_vcpu_insns: Vec<u64>,
    /// Instructions at kernel-half addresses, and those in a known function.
    pub kernel_insns: u64,
    pub attributed_insns: u64,
    pub attributed_share: f64,
    /// Where unattributed kernel-half instructions ran (2 MiB regions).
    pub unattributed: Vec<FunctionCount>,
    pub phases: Vec<PhaseProfile>,
    /// Deferred init by NUMA node (`nodes`), where the boot's log was read.
    #[serde(default)]
    pub deferred_nodes: Option<crate::nodes::NodeSplit>,
    /// The flat profile: kernel-half instructions by function, most first.
    pub functions: Vec<FunctionCount>,
}

fn sorted(counts: HashMap<String, u64>) -> Vec<FunctionCount> {
    let mut v: Vec<FunctionCount> = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(function, insns)| FunctionCount { function, insns })
        .collect();
    v.sort_by(|a, b| {
        b.insns
            .cmp(&a.insns)
            .then_with(|| a.function.cmp(&b.function))
    });
    v
}

fn per_page(x: u64, pages: Option<u64>) -> Option<f64> {
    pages.filter(|&p| p > 0).map(|p| x as f64 / p as f64)
}

/// Kernel-half instructions by function: in all, per phase, and by 2 MiB
/// region where no function is known.
struct Attribution {
    flat: HashMap<String, u64>,
    by_phase: Vec<HashMap<String, u64>>,
    unknown: HashMap<String, u64>,
    kernel_insns: u64,
    attributed: u64,
}

impl Attribution {
    /// Attribute every kernel-half instruction of `raw`'s blocks.
    fn of(raw: &Raw, symbols: &Symbols) -> Attribution {
        let nph = raw.phases.len();
        let mut flat: HashMap<String, u64> = HashMap::new();
        let mut by_phase: Vec<HashMap<String, u64>> = vec![HashMap::new(); nph];
        let mut unknown: HashMap<String, u64> = HashMap::new();
        let (mut kernel_insns, mut attributed) = (0, 0);
        for b in &raw.blocks {
            for &off in &b.insn_offsets {
                let addr = b.vaddr + u64::from(off);
                if addr < KERNEL_HALF {
                    continue;
                }
                kernel_insns += b.execs;
                match symbols.lookup(addr) {
                    Some(f) => {
                        attributed += b.execs;
                        *flat.entry(f.to_string()).or_default() += b.execs;
                        for (ph, &n) in b.phase_execs.iter().enumerate() {
                            // A phase's functions hold its instructions,
                            // which leave spin-waits out.
                            if n > 0 && !b.spin {
                                *by_phase[ph].entry(f.to_string()).or_default() += n;
                            }
                        }
                    }
                    None => {
                        *unknown
                            .entry(format!("{:#x}", addr & !0x1f_ffff))
                            .or_default() += b.execs
                    }
                }
            }
        }
        Attribution {
            flat,
            by_phase,
            unknown,
            kernel_insns,
            attributed,
        }
    }
}

/// Phase `p`'s counts, the functions `funcs` that ran in it and, given its
/// struct `pages`, the figures per page.
fn phase_profile(
    p: &Phase,
    funcs: HashMap<String, u64>,
    symbols: &Symbols,
    pages: Option<u64>,
) -> PhaseProfile {
    let sum = |f: fn(&PhaseCounts) -> u64| p.per_vcpu.iter().map(f).sum::<u64>();
    let (insns, stores, bytes) = (sum(|c| c.insns), sum(|c| c.stores), sum(|c| c.bytes));
    PhaseProfile {
        name: p.name.clone(),
        entries: p
            .entries
            .iter()
            .map(|e| symbols.lookup(*e).unwrap_or("?").to_string())
            .collect(),
        insns,
        stores,
        bytes,
        per_vcpu: p
            .per_vcpu
            .iter()
            .map(|c| VcpuCounts {
                insns: c.insns,
                stores: c.stores,
                bytes: c.bytes,
            })
            .collect(),
        opens: sum(|c| c.opens),
        closes: sum(|c| c.closes),
        unanchored: sum(|c| c.unanchored),
        left_open: p.left_open,
        spin_insns: sum(|c| c.spin_insns),
        pages,
        insns_per_page: per_page(insns, pages),
        stores_per_page: per_page(stores, pages),
        bytes_per_page: per_page(bytes, pages),
        functions: sorted(funcs),
    }
}

impl Profile {
    /// `pages`: struct pages initialised per phase name, where known.
    pub fn new(
        kernel: &str,
        raw: &Raw,
        symbols: &Symbols,
        pages: &HashMap<String, u64>,
    ) -> Profile {
        let Attribution {
            flat,
            by_phase,
            unknown,
            kernel_insns,
            attributed,
        } = Attribution::of(raw, symbols);
        let phases = raw
            .phases
            .iter()
            .zip(by_phase)
            .map(|(p, funcs)| phase_profile(p, funcs, symbols, pages.get(&p.name).copied()))
            .collect();
        Profile {
            kernel: kernel.to_string(),
            vcpus: raw.vcpus,
            threads: raw.threads.clone(),
            plugin: raw.plugin.clone(),
            total_insns: raw.vcpu_insns.iter().sum(),
            per_vcpu_insns: raw.vcpu_insns.clone(),
            kernel_insns,
            attributed_insns: attributed,
            attributed_share: if kernel_insns == 0 {
                0.0
            } else {
                attributed as f64 / kernel_insns as f64
            },
            unattributed: sorted(unknown).into_iter().take(8).collect(),
            phases,
            deferred_nodes: None,
            functions: sorted(flat),
        }
    }

    /// Deferred init split by node, each vCPU on the node the boot's log
    /// (`log`: its SRAT lines) puts it.
    pub fn split_by_node(&mut self, log: &str) {
        let nodes = crate::nodes::vcpu_nodes(log);
        self.deferred_nodes = self
            .phase(crate::phases::DEFERRED)
            .and_then(|p| crate::nodes::split(&p.per_vcpu, p.pages, &nodes));
    }

    pub fn phase(&self, name: &str) -> Option<&PhaseProfile> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// The figures for the log's tail, one `memboot-profile:` line each.
    pub fn log_lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "memboot-profile: {}: {} instructions on {} vCPUs ({}), {} at kernel-half addresses, {:.2} % of them in known functions{}",
            self.kernel,
            self.total_insns,
            self.vcpus,
            self.per_vcpu_insns.iter().map(u64::to_string).collect::<Vec<_>>().join(" + "),
            self.kernel_insns,
            100.0 * self.attributed_share,
            if self.plugin.is_empty() {
                String::new()
            } else {
                format!("; counted by plugin {}", self.plugin)
            }
        )];
        if self.attributed_share < MIN_ATTRIBUTED {
            let top: Vec<String> = self
                .unattributed
                .iter()
                .map(|u| format!("{} in the 2 MiB at {}", u.insns, u.function))
                .collect();
            out.push(format!(
                "memboot-profile: below {:.0} % attributed: code outside the symbol map ran: {}",
                100.0 * MIN_ATTRIBUTED,
                top.join(", ")
            ));
        }
        for p in &self.phases {
            let mut line = format!(
                "memboot-profile: phase {}: {} instructions, {} stores, {} bytes stored ({} frames opened, {} closed",
                p.name, p.insns, p.stores, p.bytes, p.opens, p.closes
            );
            if p.unanchored > 0 || p.left_open > 0 {
                line += &format!(
                    ", {} entries without a stack pointer, {} left open",
                    p.unanchored, p.left_open
                );
            }
            line += ")";
            if p.spin_insns > 0 {
                line += &format!("; {} instructions in spin-waits left out", p.spin_insns);
            }
            if let (Some(pages), Some(i), Some(s), Some(b)) = (
                p.pages,
                p.insns_per_page,
                p.stores_per_page,
                p.bytes_per_page,
            ) {
                line += &format!("; per struct page ({pages} pages): {i:.1} instructions, {s:.2} stores, {b:.1} bytes");
            } else if p.closes > 0 {
                // A phase of calls (the allocator's), not of struct pages.
                let per_call = |x: u64| x as f64 / p.closes as f64;
                line += &format!(
                    "; per call ({} calls): {:.0} instructions, {:.1} stores",
                    p.closes,
                    per_call(p.insns),
                    per_call(p.stores)
                );
            }
            let top: Vec<String> = p
                .functions
                .iter()
                .take(5)
                .map(|f| {
                    format!(
                        "{} {:.1} %",
                        f.function,
                        100.0 * f.insns as f64 / p.insns.max(1) as f64
                    )
                })
                .collect();
            line += &format!("; top: {}", top.join(", "));
            out.push(line);
        }
        if let Some(split) = &self.deferred_nodes {
            out.push(crate::nodes::split_line(crate::phases::DEFERRED, split));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{Block, Phase, PhaseCounts};

    fn map() -> Symbols {
        let mut m = String::new();
        for (i, name) in [
            "entry",
            "init_page",
            "free_page",
            "other",
            "e",
            "f",
            "g",
            "h",
            "i",
            "j",
        ]
        .iter()
        .enumerate()
        {
            m += &format!(
                "{:016x} t {name}\n",
                0xffffffff81000000u64 + 0x100 * i as u64
            );
        }
        m += "ffffffff81000a00 T _etext\n";
        Symbols::parse_system_map(&m).unwrap()
    }

    /// A run whose blocks, phase counts and attribution are worked out by
    /// hand below.
    fn raw() -> Raw {
        let block = |vaddr, offs: &[u32], execs, pe| Block {
            vaddr,
            insn_offsets: offs.to_vec(),
            execs,
            spin: false,
            phase_execs: vec![pe],
        };
        Raw {
            vcpus: 2,
            threads: "cpu".into(),
            plugin: String::new(),
            phases: vec![Phase {
                name: "deferred".into(),
                entries: vec![0xffffffff81000000],
                per_vcpu: vec![
                    PhaseCounts {
                        insns: 2 + 3 * 10,
                        stores: 10,
                        bytes: 640,
                        opens: 1,
                        closes: 1,
                        unanchored: 0,
                        spin_insns: 0,
                    },
                    PhaseCounts {
                        insns: 2 * 5,
                        stores: 0,
                        bytes: 0,
                        opens: 0,
                        closes: 0,
                        unanchored: 0,
                        spin_insns: 2 * 4,
                    },
                ],
                left_open: 0,
            }],
            vcpu_insns: vec![1000, 500],
            blocks: vec![
                // entry: 2 instructions once in the phase.
                block(0xffffffff81000000, &[0, 4], 1, 1),
                // a block crossing from init_page into free_page: 2 + 1.
                block(0xffffffff810001f8, &[0, 4, 8], 10, 10),
                // free_page alone, 5 times, in the phase.
                block(0xffffffff81000200, &[0, 3], 5, 5),
                // other, never in the phase: 100 × 4.
                block(0xffffffff81000300, &[0, 1, 2, 3], 100, 0),
                // other's wait loop (a `pause`), 4 times, in the phase.
                Block {
                    spin: true,
                    ..block(0xffffffff81000310, &[0, 2], 4, 4)
                },
                // firmware (lower half): not kernel instructions.
                block(0xf0000, &[0; 50], 10, 0),
                // kernel half, past _etext: unattributed.
                block(0xffffffff82000000, &[0], 7, 0),
            ],
        }
    }

    #[test]
    fn instructions_are_named_by_the_function_holding_them() {
        let pages = HashMap::from([("deferred".to_string(), 16u64)]);
        let p = Profile::new("memboot", &raw(), &map(), &pages);
        let f = |fs: &[FunctionCount], name: &str| {
            fs.iter().find(|f| f.function == name).map(|f| f.insns)
        };
        assert_eq!(f(&p.functions, "entry"), Some(2));
        assert_eq!(f(&p.functions, "init_page"), Some(20));
        assert_eq!(f(&p.functions, "free_page"), Some(10 + 10));
        assert_eq!(f(&p.functions, "other"), Some(400 + 8));
        assert_eq!(p.kernel_insns, 2 + 30 + 10 + 408 + 7);
        assert_eq!(p.attributed_insns, 2 + 30 + 10 + 408);
        assert_eq!(
            p.unattributed,
            vec![FunctionCount {
                function: "0xffffffff82000000".into(),
                insns: 7
            }]
        );
        assert_eq!(p.functions[0].function, "other", "most first");
        let d = p.phase("deferred").unwrap();
        assert_eq!((d.insns, d.stores, d.bytes), (42, 10, 640));
        assert_eq!(d.insns_per_page, Some(42.0 / 16.0));
        assert_eq!(d.bytes_per_page, Some(40.0));
        assert_eq!(f(&d.functions, "free_page"), Some(20));
        // Its spin-wait is counted apart, not as its function's.
        assert_eq!(f(&d.functions, "other"), None);
        assert_eq!(d.spin_insns, 8);
        assert_eq!(d.entries, ["entry"]);
        // The plugin's per-vCPU phase total and its per-block counts agree.
        assert_eq!(d.functions.iter().map(|f| f.insns).sum::<u64>(), d.insns);
        assert_eq!(p.total_insns, 1500);
    }

    #[test]
    fn log_lines_say_what_was_not_attributed() {
        let p = Profile::new("memboot", &raw(), &map(), &HashMap::new());
        let lines = p.log_lines();
        // 450 of 457.
        assert!(
            lines[0].contains("98.47 % of them in known functions"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("7 in the 2 MiB at 0xffffffff82000000"),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with(
            "memboot-profile: phase deferred: 42 instructions, 10 stores, 640 bytes stored"
        ));
        assert!(!lines[2].contains("per struct page"), "no pages given");
        assert!(
            lines[2].contains("; 8 instructions in spin-waits left out;"),
            "{}",
            lines[2]
        );
        assert!(
            lines[2].contains("top: free_page 47.6 %, init_page 47.6 %, entry 4.8 %"),
            "{}",
            lines[2]
        );
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Profile>(&json).unwrap(), p);
    }
}
