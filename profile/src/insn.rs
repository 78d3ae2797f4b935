//! Which x86-64 instructions move the stack pointer in a way the phase
//! tracker follows (`tracker`): calls, returns, register pops and `leave`. The plugin API
//! of QEMU 7.2 cannot read registers, so the tracker estimates each vCPU's
//! stack pointer from the addresses these instructions store to or load
//! from; everything else is `Other`.

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
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            match b {
                0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67 => {
                    i += 1
                }
                _ => break,
            }
        }
        let mut rex_b = false;
        if let Some(&rex @ 0x40..=0x4f) = bytes.get(i) {
            rex_b = rex & 1 != 0;
            i += 1;
        }
        match bytes.get(i..) {
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
    use super::{is_entry_padding, is_push_reg};

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
