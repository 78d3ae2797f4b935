//! What the plugin needs to know of an x86-64 instruction from its bytes:
//! whether it moves the stack pointer in a way the phase tracker follows
//! (`tracker`: calls, returns, register pops and `leave`; the plugin API
//! of QEMU 7.2 cannot read registers, so the tracker estimates each vCPU's
//! stack pointer from the addresses these instructions store to or load
//! from; everything else is `Other`), how many stores of how many bytes
//! it makes where that is plain from its encoding ([`stores_of`], for
//! counting stores without a callback), and whether it is a REP string instruction
//! ([`is_rep_string`], counted once however many iterations it runs).

/// An instruction's legacy prefixes and REX prefix, and where its opcode
/// starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Prefixes {
    /// 0x66: 16-bit operands.
    opsize: bool,
    /// 0xf2 or 0xf3.
    rep: bool,
    /// The REX prefix's W (64-bit operands) and B bits.
    rex_w: bool,
    rex_b: bool,
    /// Index of the opcode's first byte.
    opcode: usize,
}

impl Prefixes {
    fn of(bytes: &[u8]) -> Prefixes {
        let mut p = Prefixes::default();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            match b {
                0x66 => p.opsize = true,
                0xf2 | 0xf3 => p.rep = true,
                0xf0 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x67 => {}
                _ => break,
            }
            i += 1;
        }
        if let Some(&rex @ 0x40..=0x4f) = bytes.get(i) {
            p.rex_w = rex & 8 != 0;
            p.rex_b = rex & 1 != 0;
            i += 1;
        }
        p.opcode = i;
        p
    }

    /// The size of a full-width operand: 8 with REX.W, 2 with 0x66, else 4.
    fn operand_bytes(self) -> u8 {
        if self.rex_w {
            8
        } else if self.opsize {
            2
        } else {
            4
        }
    }
}

/// What an instruction does to the stack, as the tracker needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackOp {
    /// `call`: stores the return address at the new stack pointer.
    Call,
    /// `ret` / `ret imm16`: loads the return address at the stack pointer,
    /// then pops it and `pop_bytes` more.
    Ret {
        pop_bytes: u16,
    },
    /// `pop %reg` (not `%rsp`, whose new value is the one loaded) and
    /// `leave`: load at the stack pointer, then pop that slot.
    Pop,
    Other,
}

impl StackOp {
    /// The instruction whose encoding starts `bytes` (legacy prefixes and a
    /// REX prefix skipped).
    pub fn of(bytes: &[u8]) -> StackOp {
        let p = Prefixes::of(bytes);
        let rex_b = p.rex_b;
        match bytes.get(p.opcode..) {
            Some([0xe8, ..]) => StackOp::Call,
            // FF /2 (near indirect call) and FF /3 (far call): ModRM.reg.
            Some([0xff, modrm, ..]) if matches!((modrm >> 3) & 7, 2 | 3) => StackOp::Call,
            Some([0xc3, ..]) => StackOp::Ret { pop_bytes: 0 },
            Some([0xc2, lo, hi, ..]) => StackOp::Ret {
                pop_bytes: u16::from_le_bytes([*lo, *hi]),
            },
            Some([0x58..=0x5b | 0x5d..=0x5f | 0xc9, ..]) => StackOp::Pop,
            Some([0x5c, ..]) if rex_b => StackOp::Pop, // pop %r12
            _ => StackOp::Other,
        }
    }

    /// The stack pointer after this instruction's stack access at `vaddr`
    /// (a store for `Call`, a load for the others), if it tells one.
    pub fn rsp_after(self, vaddr: u64, is_store: bool) -> Option<u64> {
        match (self, is_store) {
            (StackOp::Call, true) => Some(vaddr),
            (StackOp::Ret { pop_bytes }, false) => Some(vaddr + 8 + u64::from(pop_bytes)),
            (StackOp::Pop, false) => Some(vaddr + 8),
            _ => None,
        }
    }
}

/// What the stores of one execution of an instruction are, where its
/// encoding says so plainly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Exactly `count` stores of `bytes` each, every time it runs: the
    /// general-purpose instructions whose memory operand (or stack slot) is
    /// written whole by one access, and the same with a register operand
    /// (`count` 0).
    Fixed { count: u8, bytes: u8 },
    /// A REP string instruction: one store of `bytes` per iteration.
    PerIteration { bytes: u8 },
    /// Anything else (vector, x87 and system instructions, `enter`, 16-bit
    /// pushes and calls, far calls, and every encoding not in this table):
    /// its stores are counted one by one as QEMU reports them.
    Unknown,
}

/// What each execution of the instruction starting `bytes` stores
/// ([`Stores`]).
pub fn stores_of(bytes: &[u8]) -> Stores {
    let p = Prefixes::of(bytes);
    let full = p.operand_bytes();
    let code = bytes.get(p.opcode..).unwrap_or(&[]);
    let modrm = |at: usize| code.get(at).copied();
    let reg = |at: usize| modrm(at).map(|m| (m >> 3) & 7);
    // A ModRM operand at `at`: one store of `bytes` when it is memory.
    let rm = |at: usize, bytes: u8| match modrm(at) {
        Some(m) if m >> 6 == 3 => Stores::Fixed { count: 0, bytes },
        Some(_) => Stores::Fixed { count: 1, bytes },
        None => Stores::Unknown,
    };
    let slot = |bytes: u8| Stores::Fixed { count: 1, bytes };
    let string = |bytes: u8| {
        if p.rep {
            Stores::PerIteration { bytes }
        } else {
            slot(bytes)
        }
    };
    match code {
        // ALU r/m, reg (add, or, adc, sbb, and, sub, xor; cmp stores
        // nothing): byte and full forms.
        [op, ..] if *op < 0x40 && op & 7 <= 1 => match (op & 0x38, op & 7) {
            (0x38, _) => rm(1, 0).zero(),
            (_, 0) => rm(1, 1),
            _ => rm(1, full),
        },
        // Group 1: /7 is cmp.
        [0x80 | 0x81 | 0x83, ..] if reg(1) == Some(7) => rm(1, 0).zero(),
        [0x80, ..] => rm(1, 1),
        [0x81 | 0x83, ..] => rm(1, full),
        // xchg, mov r/m, reg; shifts and rotates; mov r/m, imm (/0).
        [0x86 | 0x88 | 0xc0 | 0xd0 | 0xd2, ..] => rm(1, 1),
        [0x87 | 0x89 | 0xc1 | 0xd1 | 0xd3, ..] => rm(1, full),
        [0xc6, ..] if reg(1) == Some(0) => rm(1, 1),
        [0xc7, ..] if reg(1) == Some(0) => rm(1, full),
        // mov r/m16, sreg.
        [0x8c, ..] => rm(1, 2),
        // Group 3: not (/2) and neg (/3) store; test, mul and div do not.
        [0xf6 | 0xf7, ..] if !matches!(reg(1), Some(2 | 3)) => rm(1, 0).zero(),
        [0xf6, ..] => rm(1, 1),
        [0xf7, ..] => rm(1, full),
        // inc/dec r/m8.
        [0xfe, ..] if matches!(reg(1), Some(0 | 1)) => rm(1, 1),
        // FF: inc/dec r/m; call (near) and push r/m store a stack slot
        // whatever the operand; jmp stores nothing.
        [0xff, ..] => match reg(1) {
            Some(0 | 1) => rm(1, full),
            Some(2 | 6) if !p.opsize => slot(8),
            Some(4 | 5) => Stores::Fixed { count: 0, bytes: 0 },
            _ => Stores::Unknown,
        },
        // Pushes and near calls store an 8-byte slot (with 0x66, a 2-byte
        // one: left to QEMU's reports).
        [0x50..=0x57 | 0x68 | 0x6a | 0x9c | 0xe8, ..] if !p.opsize => slot(8),
        // pop r/m64 stores the popped value.
        [0x8f, ..] if reg(1) == Some(0) && !p.opsize => rm(1, 8),
        // stos, movs.
        [0xa4 | 0xaa, ..] => string(1),
        [0xa5 | 0xab, ..] => string(full),
        // setcc r/m8.
        [0x0f, 0x90..=0x9f, ..] => rm(2, 1),
        // bt stores nothing; bts, btr, btc, shld, shrd, cmpxchg, xadd do.
        [0x0f, 0xa3, ..] => rm(2, 0).zero(),
        [0x0f, 0xab | 0xb3 | 0xbb | 0xa4 | 0xa5 | 0xac | 0xad | 0xb1 | 0xc1, ..] => rm(2, full),
        [0x0f, 0xb0 | 0xc0, ..] => rm(2, 1),
        [0x0f, 0xba, ..] if reg(2) == Some(4) => rm(2, 0).zero(),
        [0x0f, 0xba, ..] if matches!(reg(2), Some(5..=7)) => rm(2, full),
        // movnti m32/m64.
        [0x0f, 0xc3, ..] => rm(2, if p.rex_w { 8 } else { 4 }),
        _ => Stores::Unknown,
    }
}

impl Stores {
    /// The same operand, stored to by nothing (cmp, test, bt, …).
    fn zero(self) -> Stores {
        match self {
            Stores::Fixed { .. } => Stores::Fixed { count: 0, bytes: 0 },
            other => other,
        }
    }
}

/// A string instruction with a REP prefix (ins, outs, movs, cmps, stos,
/// lods, scas): TCG may run its iterations as separate executions of a
/// block that starts with it, which the plugin counts as one instruction.
pub fn is_rep_string(bytes: &[u8]) -> bool {
    let p = Prefixes::of(bytes);
    p.rep
        && matches!(
            bytes.get(p.opcode),
            Some(0x6c..=0x6f | 0xa4..=0xa7 | 0xaa..=0xaf)
        )
}

/// `pause` (`F3 90`): the hint in every lock's wait loop (Rust's
/// `core::hint::spin_loop`, Linux's `cpu_relax`). A block that holds one
/// is a spin-wait, whose executions follow how long another CPU held what
/// it waits for: the host's scheduling, not the code.
pub fn is_pause(bytes: &[u8]) -> bool {
    bytes == [0xf3, 0x90]
}

/// The target of a conditional jump (`7x rel8`, `0F 8x rel32`) at
/// `vaddr`, or `None` for any other instruction.
pub fn jcc_target(vaddr: u64, bytes: &[u8]) -> Option<u64> {
    let (len, rel) = match *bytes {
        [0x70..=0x7f, rel] => (2, i64::from(rel as i8)),
        [0x0f, 0x80..=0x8f, a, b, c, d] => (6, i64::from(i32::from_le_bytes([a, b, c, d]))),
        _ => return None,
    };
    Some(vaddr.wrapping_add(len).wrapping_add_signed(rel))
}

/// Instructions a wait loop's re-check may have (a load, a test, the jump).
const RECHECK_MAX_INSNS: usize = 4;

/// Is the block at `start` (each instruction's address and bytes) the
/// re-check of a wait loop: a few instructions ending in a conditional
/// jump back to the two bytes right before the block? QEMU's TCG ends a
/// block after `pause` (it leaves the CPU loop) and after `hlt`, so a wait
/// laid out as `pause; recheck: load; test; jne pause` (every
/// `spin::Mutex` wait) or `sti; hlt; recheck: cli; load; test; jne sti`
/// (memboot's halting waits) runs as two blocks, and the re-check is as
/// much the wait as the `pause` is. In memboot's image these jumps go
/// back to a `pause` or to `sti; hlt`.
pub fn is_wait_recheck<'a>(
    start: u64,
    insns: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
) -> bool {
    if insns.len() > RECHECK_MAX_INSNS {
        return false;
    }
    insns
        .last()
        .and_then(|(vaddr, bytes)| jcc_target(vaddr, bytes))
        .is_some_and(|target| target == start.wrapping_sub(2))
}

/// Instructions a function may start with before its frame: `endbr64`
/// (IBT kernels) and the nops ftrace patches in (`nopl`, `nopw`, `xchg`).
pub fn is_entry_padding(bytes: &[u8]) -> bool {
    matches!(
        bytes,
        [0xf3, 0x0f, 0x1e, 0xfa]
            | [0x90]
            | [0x0f, 0x1f, ..]
            | [0x66, 0x0f, 0x1f, ..]
            | [0x66, 0x90]
    )
}

/// `push %reg` (50+r, with REX.B 41 50+r): a function's first frame store,
/// one slot below its return address.
pub fn is_push_reg(bytes: &[u8]) -> bool {
    matches!(bytes, [0x50..=0x57] | [0x41, 0x50..=0x57])
}

#[cfg(test)]
mod tests {
    use super::StackOp::{self, *};
    use super::Stores::{self, *};
    use super::{
        is_entry_padding, is_pause, is_push_reg, is_rep_string, is_wait_recheck, jcc_target,
        stores_of,
    };

    /// `pause` is `F3 90` and nothing else: `nop` (90), `rep movsb`
    /// (F3 A4) and `xchg eax, r8d` (41 90) are not spin-waits.
    #[test]
    fn pause_is_only_f3_90() {
        assert!(is_pause(&[0xf3, 0x90]));
        for other in [
            &[0x90][..],
            &[0xf3, 0xa4],
            &[0x41, 0x90],
            &[0xf3, 0x90, 0x90],
        ] {
            assert!(!is_pause(other), "{other:x?}");
        }
    }

    /// The wait loop `spin::Mutex::lock` compiles to in the kernel
    /// (objdump of memboot-kernel): `pause` at 0x700, then the re-check
    /// `movzbl (%rbx),%eax; test %al,%al; jne 0x700` from 0x702.
    #[test]
    fn the_recheck_after_pause_is_part_of_the_wait() {
        let recheck: [(u64, &[u8]); 3] = [
            (0x702, &[0x0f, 0xb6, 0x03]),
            (0x705, &[0x84, 0xc0]),
            (0x707, &[0x75, 0xf7]),
        ];
        assert!(is_wait_recheck(0x702, recheck.iter().copied()));
        // The same jump from a block that starts elsewhere, a jump
        // forward, and a long block are not.
        assert!(!is_wait_recheck(0x703, recheck[1..].iter().copied()));
        let forward: [(u64, &[u8]); 1] = [(0x707, &[0x75, 0x10])];
        assert!(!is_wait_recheck(0x707, forward.iter().copied()));
        let long: Vec<(u64, &[u8])> = (0..4)
            .map(|i| (0x702 + i, &[0x90][..]))
            .chain([(0x706, &[0x75, 0xf8][..])])
            .collect();
        assert!(!is_wait_recheck(0x702, long.into_iter()));
        // rel32 form: `jne` back 8 bytes from 0x706 + 6.
        let near: [(u64, &[u8]); 1] = [(0x706, &[0x0f, 0x85, 0xf4, 0xff, 0xff, 0xff])];
        assert_eq!(jcc_target(0x706, near[0].1), Some(0x700));
        assert!(!is_wait_recheck(0x706, near.iter().copied()));
        assert!(is_wait_recheck(0x702, near.iter().copied()));
        assert_eq!(
            jcc_target(0x700, &[0xeb, 0xfe]),
            None,
            "jmp is not conditional"
        );
    }

    /// Each execution's stores, as the manual gives them for each form
    /// (bytes as objdump prints them).
    #[test]
    fn stores_from_the_manual() {
        let one = |bytes| Fixed { count: 1, bytes };
        let none = |bytes| Fixed { count: 0, bytes };
        let cases: &[(&[u8], Stores)] = &[
            (&[0x48, 0x89, 0x07], one(8)),                    // mov %rax,(%rdi)
            (&[0x48, 0x89, 0xc7], none(8)),                   // mov %rax,%rdi
            (&[0x89, 0x47, 0x08], one(4)),                    // mov %eax,8(%rdi)
            (&[0x66, 0x89, 0x07], one(2)),                    // mov %ax,(%rdi)
            (&[0x88, 0x07], one(1)),                          // mov %al,(%rdi)
            (&[0x48, 0x8b, 0x07], Unknown),                   // mov (%rdi),%rax: a load
            (&[0x48, 0xc7, 0x07, 0, 0, 0, 0], one(8)),        // movq $0,(%rdi)
            (&[0xc6, 0x07, 0x01], one(1)),                    // movb $1,(%rdi)
            (&[0x66, 0xc7, 0x07, 1, 0], one(2)),              // movw $1,(%rdi)
            (&[0x48, 0x01, 0x07], one(8)),                    // add %rax,(%rdi)
            (&[0x48, 0x03, 0x07], Unknown),                   // add (%rdi),%rax
            (&[0x31, 0x07], one(4)),                          // xor %eax,(%rdi)
            (&[0x48, 0x39, 0x07], none(0)),                   // cmp %rax,(%rdi)
            (&[0x48, 0x83, 0x07, 0x01], one(8)),              // addq $1,(%rdi)
            (&[0x48, 0x83, 0x3f, 0x00], none(0)),             // cmpq $0,(%rdi)
            (&[0x80, 0x0f, 0x01], one(1)),                    // orb $1,(%rdi)
            (&[0xf0, 0x48, 0x0f, 0xb1, 0x0f], one(8)),        // lock cmpxchg %rcx,(%rdi)
            (&[0xf0, 0x0f, 0xc1, 0x07], one(4)),              // lock xadd %eax,(%rdi)
            (&[0xf0, 0x48, 0x0f, 0xab, 0x07], one(8)),        // lock bts %rax,(%rdi)
            (&[0x48, 0x0f, 0xa3, 0x07], none(0)),             // bt %rax,(%rdi)
            (&[0x48, 0x87, 0x07], one(8)),                    // xchg %rax,(%rdi)
            (&[0x48, 0xff, 0x07], one(8)),                    // incq (%rdi)
            (&[0x48, 0xff, 0xc0], none(8)),                   // inc %rax
            (&[0xfe, 0x0f], one(1)),                          // decb (%rdi)
            (&[0x48, 0xf7, 0x1f], one(8)),                    // negq (%rdi)
            (&[0x48, 0xf7, 0x27], none(0)),                   // mulq (%rdi)
            (&[0x0f, 0x94, 0x07], one(1)),                    // sete (%rdi)
            (&[0x0f, 0x94, 0xc0], none(1)),                   // sete %al
            (&[0x48, 0xd1, 0x27], one(8)),                    // shlq (%rdi)
            (&[0x55], one(8)),                                // push %rbp
            (&[0x41, 0x57], one(8)),                          // push %r15
            (&[0x6a, 0x00], one(8)),                          // push $0
            (&[0xff, 0x37], one(8)),                          // push (%rdi)
            (&[0x9c], one(8)),                                // pushf
            (&[0xe8, 0, 0, 0, 0], one(8)),                    // call rel32
            (&[0xff, 0xd0], one(8)),                          // call *%rax
            (&[0xff, 0x15, 1, 2, 3, 4], one(8)),              // call *disp(%rip)
            (&[0xff, 0xe0], none(0)),                         // jmp *%rax
            (&[0xff, 0x1c, 0x24], Unknown),                   // lcall *(%rsp)
            (&[0x8f, 0x07], one(8)),                          // pop (%rdi)
            (&[0x48, 0xab], one(8)),                          // stos %rax,(%rdi)
            (&[0xf3, 0x48, 0xab], PerIteration { bytes: 8 }), // rep stos %rax,(%rdi)
            (&[0xf3, 0xaa], PerIteration { bytes: 1 }),       // rep stos %al,(%rdi)
            (&[0xf3, 0xa5], PerIteration { bytes: 4 }),       // rep movsl
            (&[0x48, 0x0f, 0xc3, 0x07], one(8)),              // movnti %rax,(%rdi)
            (&[0x66, 0x50], Unknown),                         // push %ax
            (&[0xc8, 0x10, 0x00, 0x00], Unknown),             // enter $16,$0
            (&[0x0f, 0x11, 0x07], Unknown),                   // movups %xmm0,(%rdi)
            (&[0xc5, 0xfc, 0x11, 0x07], Unknown),             // vmovups %ymm0,(%rdi)
            (&[0x0f, 0xae, 0x27], Unknown),                   // xsave (%rdi)
            (&[0x48, 0x0f, 0xc7, 0x0f], Unknown),             // cmpxchg16b (%rdi)
            (&[0xdd, 0x1f], Unknown),                         // fstpl (%rdi)
            (&[0x0f, 0x01, 0x07], Unknown),                   // sgdt (%rdi)
            (&[0x48, 0x89], Unknown),                         // cut short: no ModRM
            (&[], Unknown),
        ];
        for (bytes, want) in cases {
            assert_eq!(stores_of(bytes), *want, "{bytes:02x?}");
        }
    }

    #[test]
    fn rep_string_instructions() {
        assert!(is_rep_string(&[0xf3, 0x48, 0xab])); // rep stos %rax
        assert!(is_rep_string(&[0xf3, 0xa4])); // rep movsb
        assert!(is_rep_string(&[0xf2, 0xae])); // repnz scasb
        assert!(is_rep_string(&[0x66, 0xf3, 0xab])); // rep stosw
        assert!(!is_rep_string(&[0x48, 0xab])); // stos, once
        assert!(!is_rep_string(&[0xf3, 0xc3])); // repz ret
        assert!(!is_rep_string(&[0xf3, 0x0f, 0x1e, 0xfa])); // endbr64
        assert!(!is_rep_string(&[]));
    }

    #[test]
    fn a_frame_starts_with_a_push_after_padding() {
        assert!(is_entry_padding(&[0xf3, 0x0f, 0x1e, 0xfa])); // endbr64
        assert!(is_entry_padding(&[0x0f, 0x1f, 0x44, 0x00, 0x00])); // nopl 0x0(%rax,%rax,1)
        assert!(!is_entry_padding(&[0x55]));
        assert!(is_push_reg(&[0x55])); // push %rbp
        assert!(is_push_reg(&[0x41, 0x57])); // push %r15
        assert!(!is_push_reg(&[0x48, 0x83, 0xec, 0x08])); // sub $8,%rsp
        assert!(!is_push_reg(&[0x6a, 0x00])); // push $0: not a frame's register
    }

    #[test]
    fn encodings_from_the_manual() {
        // Bytes as objdump prints them for each form.
        let cases: &[(&[u8], StackOp)] = &[
            (&[0xe8, 0, 0, 0, 0], Call),                  // call rel32
            (&[0xff, 0xd0], Call),                        // call *%rax
            (&[0x41, 0xff, 0xd3], Call),                  // call *%r11
            (&[0xff, 0x15, 1, 2, 3, 4], Call),            // call *disp(%rip)
            (&[0x3e, 0xff, 0xd0], Call),                  // notrack call *%rax
            (&[0xff, 0x1c, 0x24], Call),                  // lcall *(%rsp)
            (&[0xff, 0xe0], Other),                       // jmp *%rax (FF /4)
            (&[0xff, 0x30], Other),                       // push (%rax) (FF /6)
            (&[0xc3], Ret { pop_bytes: 0 }),              // ret
            (&[0xf3, 0xc3], Ret { pop_bytes: 0 }),        // repz ret
            (&[0xc2, 0x10, 0x00], Ret { pop_bytes: 16 }), // ret $16
            // iretq: QEMU reports its helper's loads for it, the frame's
            // and the descriptor tables' alike, so they tell no stack
            // pointer; the register pops before it put the estimate back
            // on the interrupted stack.
            (&[0x48, 0xcf], Other),
            (&[0x5d], Pop),               // pop %rbp
            (&[0x41, 0x5f], Pop),         // pop %r15
            (&[0x41, 0x5c], Pop),         // pop %r12
            (&[0x5c], Other),             // pop %rsp: a stack switch
            (&[0xc9], Pop),               // leave
            (&[0xe9, 0, 0, 0, 0], Other), // jmp rel32 (a return thunk jump)
            (&[0x48, 0x89, 0xe5], Other), // mov %rsp,%rbp
            (&[0xf3, 0x48, 0xab], Other), // rep stos %rax,(%rdi)
            (&[], Other),
            (&[0x66], Other),
        ];
        for (bytes, want) in cases {
            assert_eq!(StackOp::of(bytes), *want, "{bytes:02x?}");
        }
    }

    #[test]
    fn stack_pointer_after_each_access() {
        assert_eq!(Call.rsp_after(0x1000, true), Some(0x1000));
        assert_eq!(Call.rsp_after(0x1000, false), None); // call *mem's load of the target
        assert_eq!(Ret { pop_bytes: 0 }.rsp_after(0x1000, false), Some(0x1008));
        assert_eq!(Ret { pop_bytes: 16 }.rsp_after(0x1000, false), Some(0x1018));
        assert_eq!(Pop.rsp_after(0x1000, false), Some(0x1008));
        assert_eq!(Other.rsp_after(0x1000, true), None);
    }
}
