//! Which phases a vCPU is in: a phase is open on a thread from the first
//! instruction of one of its entry functions until the `ret` that pops the
//! return address that call pushed (callees included, interrupt handlers on
//! their own stacks not).
//!
//! QEMU 7.2's plugin API reads no registers, so a frame is keyed by the
//! stack slot of its return address, and each vCPU's stack pointer is
//! estimated from the addresses calls store to and returns load from
//! ([`crate::insn::StackOp::rsp_after`]). A vCPU runs inside an open frame
//! while its stack pointer is at or below the frame's slot on the frame's
//! thread. "The frame's thread" is decided by [`Threads`]:
//! - `Cpu`: one thread per vCPU (memboot: each CPU runs its own worker,
//!   never preempted), so the vCPU that opened the frame;
//! - `Stack { shift }`: threads that migrate between vCPUs on stacks aligned
//!   to `1 << shift` bytes (Linux: 16 KiB `THREAD_SIZE`, `THREAD_ALIGN`),
//!   so whichever vCPU runs on that stack.
//!
//! An entry reached inside a frame of its own phase on the same thread
//! (Linux's deferred-init kthread running a chunk itself; 7.3's
//! `__free_frozen_pages` handing a large order to `__free_pages_ok`) opens
//! no frame: the outer frame covers it, and a phase's frames count the
//! calls made into it from outside.
//!
//! Frames live in a small table shared by all vCPUs: opened and closed a
//! few times a boot, read on every block executed.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Phases per run: a `u32` mask holds them.
pub const MAX_PHASES: usize = 16;
/// Frames open at once across all vCPUs (one per phase per thread).
pub const MAX_FRAMES: usize = 256;

/// How a frame's thread is recognised (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    Cpu,
    Stack { shift: u32 },
}

impl Threads {
    /// `cpu` or `stack:BYTES` (a power of two), the plugin's `threads=`.
    pub fn parse(s: &str) -> Result<Threads, String> {
        if s == "cpu" {
            return Ok(Threads::Cpu);
        }
        let bytes: u64 = s
            .strip_prefix("stack:")
            .and_then(|b| b.parse().ok())
            .ok_or(format!("threads={s}: expected cpu or stack:BYTES"))?;
        if !bytes.is_power_of_two() || bytes < 4096 {
            return Err(format!(
                "threads={s}: the stack size must be a power of two ≥ 4096"
            ));
        }
        Ok(Threads::Stack {
            shift: bytes.trailing_zeros(),
        })
    }
}

impl core::fmt::Display for Threads {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Threads::Cpu => write!(f, "cpu"),
            Threads::Stack { shift } => write!(f, "stack:{}", 1u64 << shift),
        }
    }
}

/// One open frame. `slot` 0 is a free entry; `owner` is written before
/// `slot` is published (Release) and read after `slot` is seen (Acquire).
struct Frame {
    slot: AtomicU64,
    /// phase | vcpu << 8
    owner: AtomicU64,
}

/// What a `ret` closed, for the counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    pub phase: usize,
}

/// The open frames of every phase.
pub struct Tracker {
    threads: Threads,
    frames: Box<[Frame]>,
    /// Entries below this index may be in use; scans stop here.
    high_water: AtomicUsize,
    /// Serialises open and close; readers take no lock.
    writers: Mutex<()>,
}

/// Why an entry opened no frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// No call or return seen on this vCPU yet: its stack pointer unknown.
    NoStackPointer,
    Full,
}

impl Tracker {
    pub fn new(threads: Threads) -> Tracker {
        Tracker {
            threads,
            frames: (0..MAX_FRAMES)
                .map(|_| Frame {
                    slot: AtomicU64::new(0),
                    owner: AtomicU64::new(0),
                })
                .collect(),
            high_water: AtomicUsize::new(0),
            writers: Mutex::new(()),
        }
    }

    /// `vcpu` executed the first instruction of an entry of `phase` with
    /// its stack pointer (the slot of the return address) at `rsp`. False:
    /// the thread was inside `phase` already, and no frame was opened.
    pub fn open(&self, phase: usize, vcpu: u32, rsp: u64) -> Result<bool, OpenError> {
        assert!(phase < MAX_PHASES);
        if rsp == 0 {
            return Err(OpenError::NoStackPointer);
        }
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if self.mask(vcpu, rsp) & 1 << phase != 0 {
            return Ok(false);
        }
        let i = self
            .frames
            .iter()
            .position(|f| f.slot.load(Ordering::Relaxed) == 0)
            .ok_or(OpenError::Full)?;
        let f = &self.frames[i];
        f.owner
            .store(phase as u64 | u64::from(vcpu) << 8, Ordering::Relaxed);
        // Pairs with the Acquire loads in `mask` and `ret`.
        f.slot.store(rsp, Ordering::Release);
        self.high_water.fetch_max(i + 1, Ordering::Release);
        Ok(true)
    }

    /// A return loaded its address from `slot`: closes the frames whose
    /// call pushed it (one, unless an entry calls itself with the same
    /// stack pointer, which no tail-call-free code does).
    pub fn ret(&self, slot: u64, mut closed: impl FnMut(Closed)) {
        let n = self.high_water.load(Ordering::Acquire);
        if !self.frames[..n]
            .iter()
            .any(|f| f.slot.load(Ordering::Acquire) == slot)
        {
            return;
        }
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        for f in &self.frames[..n] {
            if f.slot.load(Ordering::Relaxed) == slot {
                closed(Closed {
                    phase: (f.owner.load(Ordering::Relaxed) & 0xff) as usize,
                });
                f.slot.store(0, Ordering::Release);
            }
        }
    }

    /// Close every open frame of `phase`, whichever thread opened it: the
    /// phase ends at a point of the boot (`until=`), not at a return.
    pub fn close_phase(&self, phase: usize, mut closed: impl FnMut(Closed)) {
        let n = self.high_water.load(Ordering::Acquire);
        let _w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        for f in &self.frames[..n] {
            if f.slot.load(Ordering::Relaxed) != 0
                && (f.owner.load(Ordering::Relaxed) & 0xff) as usize == phase
            {
                closed(Closed { phase });
                f.slot.store(0, Ordering::Release);
            }
        }
    }

    /// The phases `vcpu`, with its stack pointer at `rsp`, runs in now: a
    /// bit per phase.
    #[inline]
    pub fn mask(&self, vcpu: u32, rsp: u64) -> u32 {
        let n = self.high_water.load(Ordering::Acquire);
        let mut mask = 0;
        for f in &self.frames[..n] {
            let slot = f.slot.load(Ordering::Acquire);
            if slot == 0 || rsp == 0 || rsp > slot {
                continue;
            }
            let owner = f.owner.load(Ordering::Relaxed);
            let mine = match self.threads {
                Threads::Cpu => (owner >> 8) as u32 == vcpu,
                Threads::Stack { shift } => slot >> shift == rsp >> shift,
            };
            if mine {
                mask |= 1 << (owner & 0xff);
            }
        }
        mask
    }

    /// Frames still open (their `ret` never seen), per phase.
    pub fn open_frames(&self) -> [u64; MAX_PHASES] {
        let mut open = [0; MAX_PHASES];
        for f in self.frames.iter() {
            if f.slot.load(Ordering::Acquire) != 0 {
                open[(f.owner.load(Ordering::Relaxed) & 0xff) as usize] += 1;
            }
        }
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_covers_its_callees_until_its_return() {
        let t = Tracker::new(Threads::Cpu);
        assert_eq!(t.mask(0, 0x8000), 0);
        assert_eq!(t.open(1, 0, 0x8000), Ok(true));
        assert_eq!(t.mask(0, 0x8000), 0b10, "the entry's own instructions");
        assert_eq!(t.mask(0, 0x7f00), 0b10, "a callee, deeper on the stack");
        assert_eq!(t.mask(0, 0x8008), 0, "the caller, above the slot");
        assert_eq!(t.mask(1, 0x7f00), 0, "another CPU's thread");
        let mut closed = vec![];
        t.ret(0x7f00, |c| closed.push(c)); // a callee returns
        assert!(closed.is_empty());
        t.ret(0x8000, |c| closed.push(c));
        assert_eq!(closed, [Closed { phase: 1 }]);
        assert_eq!(t.mask(0, 0x7f00), 0);
        assert_eq!(t.open_frames(), [0; MAX_PHASES]);
    }

    #[test]
    fn stack_threads_follow_the_stack_not_the_cpu() {
        let t = Tracker::new(Threads::parse("stack:16384").unwrap());
        let top = 0xffff_c900_0001_0000_u64; // a 16 KiB-aligned stack's end
        t.open(0, 0, top - 0x100).unwrap();
        assert_eq!(t.mask(1, top - 0x800), 1, "migrated to vCPU 1");
        assert_eq!(
            t.mask(0, top - 0x4000 - 0x800),
            0,
            "the stack below: another thread"
        );
        assert_eq!(
            t.mask(0, 0xffff_c900_0000_2000),
            0,
            "an IRQ stack elsewhere"
        );
        // An entry of the phase inside it on the same thread: no frame.
        assert_eq!(t.open(0, 1, top - 0x400), Ok(false));
        assert_eq!(t.open_frames()[0], 1);
        let mut closed = vec![];
        t.ret(top - 0x400, |c| closed.push(c));
        assert!(closed.is_empty(), "the nested return closes nothing");
        assert_eq!(t.mask(1, top - 0x300), 1, "the outer frame still open");
        // The same entry on another thread's stack opens its own frame.
        assert_eq!(t.open(0, 0, top - 0x4000 - 0x100), Ok(true));
        assert_eq!(t.open_frames()[0], 2);
    }

    #[test]
    fn a_phase_closed_at_a_mark_closes_on_every_thread() {
        let t = Tracker::new(Threads::Cpu);
        t.open(2, 0, 0x8000).unwrap();
        t.open(2, 1, 0x9000).unwrap();
        t.open(1, 0, 0x7000).unwrap();
        let mut closed = vec![];
        t.close_phase(2, |c| closed.push(c));
        assert_eq!(closed, [Closed { phase: 2 }, Closed { phase: 2 }]);
        assert_eq!(t.mask(0, 0x6000), 0b10, "phase 1 stays open");
        assert_eq!(t.mask(1, 0x8000), 0);
        let mut later = vec![];
        t.ret(0x8000, |c| later.push(c));
        assert!(later.is_empty(), "its return closes nothing more");
    }

    #[test]
    fn an_entry_without_a_known_stack_pointer_opens_nothing() {
        let t = Tracker::new(Threads::Cpu);
        assert_eq!(t.open(0, 0, 0), Err(OpenError::NoStackPointer));
        assert_eq!(t.mask(0, 0x1000), 0);
    }

    #[test]
    fn thread_forms() {
        assert_eq!(Threads::parse("cpu"), Ok(Threads::Cpu));
        assert_eq!(
            Threads::parse("stack:16384"),
            Ok(Threads::Stack { shift: 14 })
        );
        assert_eq!(Threads::Stack { shift: 14 }.to_string(), "stack:16384");
        assert!(Threads::parse("stack:1000").is_err());
        assert!(Threads::parse("thread").is_err());
    }
}
