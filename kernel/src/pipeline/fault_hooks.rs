//! The one seam every `test_fault=` acts through: [`FaultHooks`], one
//! method per point where a fault acts, in the binary users boot. Built
//! from `test_fault=none` it does nothing at any of them, so the code
//! that calls it reads as if faults did not exist.
//!
//! | point | hook | faults |
//! |---|---|---|
//! | the options were read | [`FaultHooks::at_boot`] | `panic`, `panic_in_log`, `page_fault`, `invalid_opcode` |
//! | the APs are planned | [`FaultHooks::late_ap`] | `late_ap` |
//! | deferred init's claim loop | [`FaultHooks::claim_hooks`] | `double_init` |
//! | right before verification | [`FaultHooks::before_verify`] | `corrupt_page`, `double_init`'s log line, `list_corrupt`, `pool_overlap` |
//! | the summary line is written | [`FaultHooks::in_summary`] | `panic_in_summary` |

use core::fmt;

use deferred_init::faults::{self, DoubleInit};
use deferred_init::ClaimHooks;
use deferred_init::DeferredInit;
use memboot_contract::option_values::BuddyStore;
use memboot_contract::options::TestFault;
use memmap::init::EagerRange;
use memmap::memblock::Memblock;
use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::Pfn;

use super::seams::Log;

/// What a `test_fault=` does at each point where it acts.
pub struct FaultHooks {
    fault: TestFault,
    /// Armed for `double_init` only.
    double_init: DoubleInit,
}

/// The CPU exceptions a boot-time fault raises (the kernel's exception
/// handlers end the boot).
pub trait CpuTraps {
    /// Read an unmapped address.
    fn page_fault(&self);
    /// Execute an undefined instruction.
    fn invalid_opcode(&self);
}

/// What [`FaultHooks::before_verify`] may damage: the state verification
/// is about to check.
pub struct VerifyState<'a, 'm, B> {
    /// The mode keeps an untouched pool (`ondemand`), where `corrupt_page`
    /// picks a page initialised by growth.
    pub pool_mode: bool,
    pub memmap: &'a Memmap<B>,
    pub mb: &'a Memblock,
    pub eager: &'a [EagerRange],
    pub di: &'a DeferredInit<'m, B>,
    pub log: &'a dyn Log,
}

/// Where `test_fault=panic_in_summary` panics: part-way through the line,
/// so part of it is in the log (and perhaps on the wire).
const PANIC_IN_SUMMARY_AFTER_BYTES: usize = 300;

impl FaultHooks {
    pub const fn new(fault: TestFault) -> Self {
        Self {
            fault,
            double_init: DoubleInit::new(matches!(fault, TestFault::DoubleInit)),
        }
    }

    /// Once the command line is read: the faults that end the boot there,
    /// by a panic (inside a log line for `panic_in_log`) or an exception.
    pub fn at_boot(&self, log: &dyn Log, traps: &dyn CpuTraps) {
        match self.fault {
            TestFault::Panic => panic!("test_fault=panic requested on the command line"),
            TestFault::PanicInLog => {
                // The text before the value is already in the log when the
                // panic hits (and perhaps on the wire: lines are appended to
                // the log piece by piece).
                log.line(format_args!(
                    "test_fault: formatting a value whose Display panics; the serial lock is held and the start of this line is already in the log: {}",
                    PanicsWhenShown
                ));
            }
            TestFault::PageFault => traps.page_fault(),
            TestFault::InvalidOpcode => traps.invalid_opcode(),
            _ => {}
        }
    }

    /// Whether AP bring-up holds the first AP's startup IPIs back until
    /// its round is given up (`late_ap`), which needs a second AP to start
    /// after it: an error if `enabled_cpus` has none.
    pub fn late_ap(&self, enabled_cpus: usize) -> Result<bool, LateApNeedsCpus> {
        let late_ap = self.fault == TestFault::LateAp;
        if late_ap && enabled_cpus < 3 {
            return Err(LateApNeedsCpus { enabled_cpus });
        }
        Ok(late_ap)
    }

    /// After the huge-page phase and HVO of the 2 MiB pages: `hvo_tail`
    /// writes the first tail struct page beyond the kept vmemmap page of
    /// HVO page `first_hvo` (the first 1 GiB page HVO maps, else the first
    /// 2 MiB page it remapped), which HVO maps read-only, so the write
    /// faults and the page-fault handler ends the boot naming it. Without an HVO page, a line says there is none.
    pub fn after_hugetlb<B: MemmapBacking>(
        &self,
        log: &dyn Log,
        memmap: &Memmap<B>,
        first_hvo: Option<Pfn>,
    ) {
        if self.fault != TestFault::HvoTail {
            return;
        }
        let Some(head) = first_hvo else {
            log.line(format_args!(
                "test_fault=hvo_tail: no page HVO maps (hugepagesz=1G or 2M hugepages=N hugetlb_free_vmemmap=on, memmap=deferred, regions or perpfn; 2M needs 64- or 32-byte struct pages): nothing written"
            ));
            return;
        };
        let tail = head + memmap::hugetlb::hvo::kept_struct_pages(<B::Page as PageLayout>::BYTES);
        log.line(format_args!(
            "test_fault=hvo_tail: writing the struct page of pfn {tail:#x}, the first tail of the HVO page {head:#x} beyond its kept vmemmap page"
        ));
        let range = memmap::PfnRange::new(tail, tail + 1);
        // SAFETY: nothing else refers to this struct page (the huge page's
        // tails are written by no one after the huge-page phase); the write
        // is meant to fault: HVO maps the page read-only.
        if let Some(pages) = unsafe { memmap.pages_mut_unchecked(range) } {
            // SAFETY: a valid pointer to the struct page just obtained.
            unsafe { core::ptr::write_volatile(pages.as_mut_ptr() as *mut u8, 0) };
        }
        panic!(
            "test_fault=hvo_tail: the write to pfn {tail:#x} did not fault: HVO left it writable"
        );
    }

    /// What deferred init's claim loop does after each window.
    pub fn claim_hooks(&self) -> &dyn ClaimHooks {
        &self.double_init
    }

    /// Right before verification: apply the state-damaging fault (see
    /// `deferred_init::faults`), log what was damaged, and say whether it
    /// could be.
    pub fn before_verify<B: MemmapBacking>(
        &self,
        state: &VerifyState<'_, '_, B>,
    ) -> Result<(), FaultNotApplied> {
        let fault = self.fault;
        let not_applied = |why| FaultNotApplied { fault, why };
        let VerifyState {
            pool_mode,
            memmap,
            mb,
            eager,
            di,
            log,
        } = *state;
        match fault {
            TestFault::CorruptPage => {
                let pfn = if pool_mode {
                    faults::free_page_in_claimed_windows(di).ok_or(not_applied(
                        "no free page in a block window initialised after boot",
                    ))?
                } else {
                    last_free_eager_page(mb, eager)
                        .ok_or(not_applied("no free page initialised by the boot CPU"))?
                };
                // SAFETY: every worker and allocation has returned and
                // verification has not started: nothing references this page.
                if !unsafe { faults::corrupt_page(memmap, pfn) } {
                    return Err(not_applied("the chosen page has no struct-page backing"));
                }
                let what = if <B::Page as PageLayout>::STORES_LINKS {
                    "a node bit"
                } else {
                    "its type"
                };
                log.line(format_args!(
                    "test_fault: corrupted the struct page of pfn {pfn:#x} ({what})"
                ));
            }
            TestFault::DoubleInit => {
                let pfn = self
                    .double_init
                    .window()
                    .ok_or(not_applied("no block window was initialised after boot"))?;
                log.line(format_args!(
                    "test_fault: initialised the block window at pfn {pfn:#x} (section {}) twice, bypassing its claim",
                    memmap::pfn_to_section_nr(pfn)
                ));
            }
            TestFault::ListCorrupt => {
                // SAFETY: as above; the allocator is not used again before
                // verification reports.
                let (head, target) = unsafe { faults::corrupt_list_link(di.buddy(), memmap) }
                    .ok_or(not_applied("no free block of order 1 or more"))?;
                let how = match di.buddy().store() {
                    BuddyStore::Lists => "the block's free-list link points at it",
                    BuddyStore::Bitmaps => "its bit set in the order-0 free bitmap",
                };
                log.line(format_args!(
                    "test_fault: made the allocator list pfn {target:#x}, a tail page of the free block at pfn {head:#x}, as a free block ({how})"
                ));
            }
            TestFault::PoolOverlap => {
                // SAFETY: as above.
                let pfn = unsafe { faults::place_free_block_in_pool(di, memmap) }
                    .ok_or(not_applied("the untouched pool has no free page left"))?;
                log.line(format_args!(
                    "test_fault: freed pfn {pfn:#x}, in the untouched pool, onto a free list"
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The summary line's writer: `out`, which `panic_in_summary` cuts
    /// with a panic part-way through.
    pub fn in_summary<'w>(&self, out: &'w mut dyn fmt::Write) -> SummaryWriter<'w> {
        SummaryWriter {
            out,
            left: (self.fault == TestFault::PanicInSummary).then_some(PANIC_IN_SUMMARY_AFTER_BYTES),
        }
    }
}

/// Panics when formatted, i.e. inside the log with the serial lock held.
struct PanicsWhenShown;

impl fmt::Display for PanicsWhenShown {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        panic!("test_fault=panic_in_log: Display panicked inside kprintln")
    }
}

/// Passes the summary on; with `left` set, panics once that many bytes
/// have gone through (`test_fault=panic_in_summary`).
pub struct SummaryWriter<'w> {
    out: &'w mut dyn fmt::Write,
    left: Option<usize>,
}

impl fmt::Write for SummaryWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some(left) = self.left.as_mut() {
            if s.len() >= *left {
                panic!("test_fault=panic_in_summary: panicking part-way through the summary line");
            }
            *left -= s.len();
        }
        self.out.write_str(s)
    }
}

/// The last free page the boot CPU initialised: every mode initialises
/// those, while deferred memory may still be untouched.
fn last_free_eager_page(mb: &Memblock, eager: &[EagerRange]) -> Option<Pfn> {
    mb.free_ranges(None)
        .flat_map(|(free, _)| eager.iter().filter_map(move |e| free.intersect(&e.pfns)))
        .last()
        .map(|free| free.end - 1)
}

/// A `test_fault=` that could not damage anything on this machine: the
/// boot must not then report a verification that proved nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultNotApplied {
    pub fault: TestFault,
    pub why: &'static str,
}

impl fmt::Display for FaultNotApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Kernel command line rejected: test_fault={}: {}; nothing was damaged, so this boot cannot test verification (use a larger -m, or alloc_test= so that growth initialises memory)",
            self.fault.name(),
            self.why
        )
    }
}

/// `test_fault=late_ap` on a machine without a second AP to start after
/// the late one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LateApNeedsCpus {
    pub enabled_cpus: usize,
}

impl fmt::Display for LateApNeedsCpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "test_fault=late_ap: {} CPUs; it gives up on the first AP and needs a second one to start after it: boot with --smp 3 or more",
            self.enabled_cpus
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use core::fmt::Write;

    /// Every test fault but `none`: they all act somewhere.
    fn acting() -> impl Iterator<Item = TestFault> {
        TestFault::ALL.into_iter().filter(|&f| f != TestFault::None)
    }

    fn summary_through(hooks: &FaultHooks, pieces: &[&str]) -> String {
        let mut out = String::new();
        let mut w = hooks.in_summary(&mut out);
        for p in pieces {
            w.write_str(p).unwrap();
        }
        out
    }

    #[test]
    fn without_a_fault_the_summary_goes_through_whole() {
        let piece = "x".repeat(100);
        let pieces = [piece.as_str(); 10];
        for fault in acting().filter(|&f| f != TestFault::PanicInSummary) {
            let text = summary_through(&FaultHooks::new(fault), &pieces);
            assert_eq!(text.len(), 1000, "{}", fault.name());
        }
        let none = FaultHooks::new(TestFault::None);
        assert_eq!(summary_through(&none, &pieces).len(), 1000);
    }

    #[test]
    fn panic_in_summary_cuts_the_line_part_way() {
        let hooks = FaultHooks::new(TestFault::PanicInSummary);
        let mut out = String::new();
        let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut w = hooks.in_summary(&mut out);
            for _ in 0..10 {
                w.write_str(&"x".repeat(100)).unwrap();
            }
        }));
        assert!(cut.is_err(), "the writer panicked");
        assert!(!out.is_empty() && out.len() < 1000, "cut at {}", out.len());
    }

    #[test]
    fn late_ap_asks_for_a_second_ap() {
        let late = FaultHooks::new(TestFault::LateAp);
        assert_eq!(late.late_ap(3), Ok(true));
        assert_eq!(late.late_ap(2), Err(LateApNeedsCpus { enabled_cpus: 2 }));
        for fault in acting().filter(|&f| f != TestFault::LateAp) {
            assert_eq!(FaultHooks::new(fault).late_ap(1), Ok(false));
        }
    }

    #[test]
    fn only_double_init_initialises_a_window_again() {
        let window = memmap::PfnRange::new(1024, 2048);
        let double = FaultHooks::new(TestFault::DoubleInit);
        assert!(double.claim_hooks().init_again(window));
        assert!(!double.claim_hooks().init_again(window), "once");
        assert_eq!(double.double_init.window(), Some(1024));
        for fault in acting().filter(|&f| f != TestFault::DoubleInit) {
            assert!(!FaultHooks::new(fault).claim_hooks().init_again(window));
        }
    }
}
