//! The kernel image's sections, as linked (`kernel/linker.ld`), and their
//! sizes for Linux's `Memory: …K/…K available (…K kernel code, …K rwdata,
//! …K rodata, …K init, …K bss, …K reserved, …K cma-reserved)` line
//! (mm/page_alloc.c `mem_init_print_info()`), which Linux measures with
//! linker symbols too (`_etext - _stext`, …). memboot has no init sections
//! that it frees, so init is 0.

use core::ops::Range;

/// The image's sections, virtual addresses as linked. Each starts where
/// the one before ends or later; `text` starts the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSections {
    pub text: Range<u64>,
    /// Read-only data, the linker-resolved pointers and the ELF notes.
    pub rodata: Range<u64>,
    pub data: Range<u64>,
    pub bss: Range<u64>,
}

/// Bytes of each part of the loaded kernel image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageSizes {
    pub code_bytes: u64,
    pub rwdata_bytes: u64,
    pub rodata_bytes: u64,
    pub bss_bytes: u64,
}

impl ImageSizes {
    pub fn of_sections(s: &ImageSections) -> Self {
        let len = |r: &Range<u64>| r.end.saturating_sub(r.start);
        ImageSizes {
            code_bytes: len(&s.text),
            rwdata_bytes: len(&s.data),
            rodata_bytes: len(&s.rodata),
            bss_bytes: len(&s.bss),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_the_section_lengths() {
        let base = 0xffff_ffff_8100_0000;
        let s = ImageSections {
            text: base..base + 0x6_4f6e,
            rodata: base + 0x6_5000..base + 0x6_f93d,
            data: base + 0x7_0000..base + 0x7_0770,
            bss: base + 0x7_0770..base + 0x9_9c6b,
        };
        assert_eq!(
            ImageSizes::of_sections(&s),
            ImageSizes {
                code_bytes: 0x6_4f6e,
                rwdata_bytes: 0x770,
                rodata_bytes: 0xa93d,
                bss_bytes: 0x2_94fb,
            }
        );
    }
}
