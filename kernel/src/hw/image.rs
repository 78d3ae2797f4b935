//! The kernel image's sections where the linker put them (`linker.ld`'s
//! bounds): the same on every entry path, since the image runs where it
//! is linked.

use memboot_kernel::image_sizes::ImageSections;

extern "C" {
    // linker.ld's section bounds; only their addresses are used.
    static __text_start: u8;
    static __text_end: u8;
    static __rodata_start: u8;
    static __rodata_end: u8;
    static __data_start: u8;
    static __data_end: u8;
    static __bss_start: u8;
    static __bss_end: u8;
}

/// The image's sections as linked.
pub fn sections() -> ImageSections {
    let addr = |s: &u8| s as *const u8 as u64;
    // SAFETY: linker symbols: only their addresses are taken, never read.
    unsafe {
        ImageSections {
            text: addr(&__text_start)..addr(&__text_end),
            rodata: addr(&__rodata_start)..addr(&__rodata_end),
            data: addr(&__data_start)..addr(&__data_end),
            bss: addr(&__bss_start)..addr(&__bss_end),
        }
    }
}
