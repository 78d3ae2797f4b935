//! The phases each kernel is profiled in: the functions whose entry opens
//! one, and how its threads are recognised (`tracker::Threads`). The one
//! table of them: run-qemu.sh asks `memboot-profile plugin-args`.

use crate::symbols::Symbols;
use crate::tracker::Threads;

/// A phase: its name in the profile and the functions that open it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhaseDef {
    pub name: &'static str,
    pub functions: &'static [&'static str],
}

/// Deferred struct-page init, every worker on every CPU.
pub const DEFERRED: &str = "deferred";
/// The boot CPU's struct-page init before SMP work.
pub const BOOT_CPU: &str = "boot_cpu_memmap";
/// Building the buddy allocator's free-block store (memboot's free
/// bitmaps), per present page.
pub const FREE_BITMAPS: &str = "free_bitmaps";
/// The boot CPU's free pages handed to the buddy allocator (Linux's
/// `memblock_free_all`), per page the boot CPU initialised.
pub const BUDDY_HANDOFF: &str = "buddy_handoff";
/// memboot's buddy allocation and free, per call (the allocation test's,
/// the verification self-test's): what the free-block store costs.
pub const BUDDY_ALLOC: &str = "buddy_alloc";
pub const BUDDY_FREE: &str = "buddy_free";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Memboot,
    Linux,
}

impl Kernel {
    pub fn parse(s: &str) -> Result<Kernel, String> {
        match s {
            "memboot" => Ok(Kernel::Memboot),
            "linux" => Ok(Kernel::Linux),
            _ => Err(format!("--kernel {s}: expected memboot or linux")),
        }
    }

    pub fn phases(self) -> &'static [PhaseDef] {
        match self {
            // Names as `nm -C` prints them (no hash). run_cpu_workers runs
            // each CPU's workers (kernel/src/pipeline/deferred_workers.rs);
            // eager_memmap::init is the boot CPU's share of struct pages. Both are
            // #[inline(never)] for this table, as are the buddy allocator's
            // alloc and free.
            Kernel::Memboot => &[
                PhaseDef {
                    name: DEFERRED,
                    functions: &["deferred_init::run::DeferredInit<B>::run_cpu_workers"],
                },
                PhaseDef {
                    name: BOOT_CPU,
                    functions: &["memboot_kernel::pipeline::eager_memmap::init"],
                },
                PhaseDef {
                    name: FREE_BITMAPS,
                    functions: &["deferred_init::buddy::BuddyAllocator<B>::with_store"],
                },
                PhaseDef {
                    name: BUDDY_HANDOFF,
                    functions: &["deferred_init::handoff::free_eager_pages"],
                },
                PhaseDef {
                    name: BUDDY_ALLOC,
                    functions: &["deferred_init::buddy::BuddyAllocator<B>::alloc"],
                },
                PhaseDef {
                    name: BUDDY_FREE,
                    functions: &["deferred_init::buddy::BuddyAllocator<B>::free"],
                },
            ],
            // mm/mm_init.c (6.1: mm/page_alloc.c): the per-node kthread, and
            // the chunk function padata runs on helper threads of the same
            // node (its address is taken, so it is never inlined away);
            // free_area_init() holds memmap_init() (the bench's boot-CPU
            // figure, tests/src/linux_log.rs, times the same block).
            Kernel::Linux => &[
                PhaseDef {
                    name: DEFERRED,
                    functions: &["deferred_init_memmap", "deferred_init_memmap_chunk"],
                },
                PhaseDef {
                    name: BOOT_CPU,
                    functions: &["free_area_init"],
                },
                // mm_core_init(): the boot CPU's free pages to the buddy
                // allocator, after free_area_init().
                PhaseDef {
                    name: BUDDY_HANDOFF,
                    functions: &["memblock_free_all"],
                },
            ],
        }
    }

    /// memboot: one thread per CPU, never preempted. Linux: kernel threads
    /// on 16 KiB stacks aligned to their size (`THREAD_SIZE`, `THREAD_ALIGN`
    /// without KASAN, as Debian builds it), free to migrate.
    pub fn threads(self) -> Threads {
        match self {
            Kernel::Memboot => Threads::Cpu,
            Kernel::Linux => Threads::Stack { shift: 14 },
        }
    }

    /// The plugin's arguments, comma-separated, for `-plugin SO,ARGS`.
    pub fn plugin_args(self, map: &Symbols, out: &str) -> Result<String, String> {
        let mut args = vec![format!("out={out}"), format!("threads={}", self.threads())];
        for p in self.phases() {
            let entries = map
                .entries(p.functions)
                .map_err(|e| format!("phase {}: {e}", p.name))?;
            let hex: Vec<String> = entries.iter().map(|a| format!("{a:#x}")).collect();
            args.push(format!("phase={}:{}", p.name, hex.join(":")));
        }
        if out.contains(',') {
            return Err(format!(
                "{out}: QEMU's -plugin splits its arguments at commas"
            ));
        }
        Ok(args.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments_name_every_entry() {
        let mut map = String::new();
        for (i, name) in [
            "deferred_init_memmap",
            "x",
            "deferred_init_memmap_chunk",
            "y",
            "free_area_init",
            "z",
            "memblock_free_all",
        ]
        .iter()
        .chain(&["a", "b", "c", "d", "e", "f"])
        .enumerate()
        {
            map += &format!(
                "{:016x} t {name}\n",
                0xffffffff81000000u64 + 0x100 * i as u64
            );
        }
        let s = Symbols::parse_system_map(&map).unwrap();
        assert_eq!(
            Kernel::Linux.plugin_args(&s, "/tmp/p.raw").unwrap(),
            "out=/tmp/p.raw,threads=stack:16384,\
             phase=deferred:0xffffffff81000000:0xffffffff81000200,\
             phase=boot_cpu_memmap:0xffffffff81000400,\
             phase=buddy_handoff:0xffffffff81000600"
        );
        let e = Kernel::Memboot.plugin_args(&s, "/tmp/p.raw").unwrap_err();
        assert!(
            e.contains("phase deferred: no function deferred_init::run"),
            "{e}"
        );
        assert!(Kernel::Linux.plugin_args(&s, "/tmp/a,b").is_err());
    }

    /// Every function the Linux phases rely on exists in each peer's real
    /// System.map fetched here (tests/linux-peer.sh --symbols): Debian's
    /// builds inline many small static functions, and a missing entry must
    /// fail here, not read 0. Says which maps it checked; none fetched is
    /// not a pass of the check, so it says that too.
    #[test]
    fn linux_phase_functions_exist_in_each_fetched_system_map() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/linux-peer");
        let mut checked = vec![];
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let map = entry.path().join("System.map");
            // The peers the bench compares with: 6.1 and 6.12.
            if !(name.starts_with("linux-6.1.") || name.starts_with("linux-6.12.")) || !map.exists()
            {
                continue;
            }
            let s = Symbols::parse_system_map(&std::fs::read_to_string(&map).unwrap()).unwrap();
            for p in Kernel::Linux.phases() {
                s.entries(p.functions)
                    .unwrap_or_else(|e| panic!("{name}: phase {}: {e}", p.name));
            }
            checked.push(name);
        }
        eprintln!(
            "checked the System.map of: {checked:?} (tests/linux-peer.sh --symbols fetches them)"
        );
    }
}
