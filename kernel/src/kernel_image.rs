//! The kernel image's sizes, read from its ELF program headers, for Linux's
//! `Memory: …K/…K available (…K kernel code, …K rwdata, …K rodata, …K init,
//! …K bss, …K reserved, …K cma-reserved)` line (mm/page_alloc.c
//! `mem_init_print_info()`).
//!
//! Linux measures its sections with linker symbols (`_etext - _stext`, …);
//! memboot's image is what the bootloader loaded: its loadable segments,
//! classified by permission — executable → code, read-only → rodata,
//! writable → rwdata (file-backed part) and bss (the zero-filled rest).
//! memboot has no init sections that it frees, so init is 0.

/// Bytes of each part of the loaded kernel image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageSizes {
    pub code_bytes: u64,
    pub rwdata_bytes: u64,
    pub rodata_bytes: u64,
    pub bss_bytes: u64,
}

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
/// ELF64 header: e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38.
const EHDR_SIZE: usize = 0x40;
const PHDR_SIZE: usize = 0x38;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl ImageSizes {
    /// Sizes from a little-endian ELF64 image; `None` if it is not one or its
    /// program headers lie outside `elf`.
    pub fn from_elf(elf: &[u8]) -> Option<Self> {
        if elf.len() < EHDR_SIZE || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
            return None;
        }
        let phoff = usize::try_from(u64_at(elf, 0x20)?).ok()?;
        let phentsize = usize::from(u16_at(elf, 0x36)?);
        if phentsize < PHDR_SIZE {
            return None;
        }
        let mut sizes = Self::default();
        for i in 0..usize::from(u16_at(elf, 0x38)?) {
            let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
            if u32_at(elf, ph)? != PT_LOAD {
                continue;
            }
            let flags = u32_at(elf, ph + 4)?;
            let file_bytes = u64_at(elf, ph + 32)?;
            let mem_bytes = u64_at(elf, ph + 40)?;
            if flags & PF_X != 0 {
                sizes.code_bytes += mem_bytes;
            } else if flags & PF_W != 0 {
                sizes.rwdata_bytes += file_bytes.min(mem_bytes);
                sizes.bss_bytes += mem_bytes.saturating_sub(file_bytes);
            } else {
                sizes.rodata_bytes += mem_bytes;
            }
        }
        Some(sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// An ELF64 header and program headers `(type, flags, filesz, memsz)`.
    fn elf(phdrs: &[(u32, u32, u64, u64)]) -> Vec<u8> {
        let mut b = alloc::vec![0u8; EHDR_SIZE];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[0x20..0x28].copy_from_slice(&(EHDR_SIZE as u64).to_le_bytes());
        b[0x36..0x38].copy_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for &(ty, flags, file, mem) in phdrs {
            let mut ph = alloc::vec![0u8; PHDR_SIZE];
            ph[..4].copy_from_slice(&ty.to_le_bytes());
            ph[4..8].copy_from_slice(&flags.to_le_bytes());
            ph[32..40].copy_from_slice(&file.to_le_bytes());
            ph[40..48].copy_from_slice(&mem.to_le_bytes());
            b.extend_from_slice(&ph);
        }
        b
    }

    #[test]
    fn segments_by_permission() {
        const R: u32 = 4;
        let image = elf(&[
            (PT_LOAD, R, 0x3000, 0x3000),        // rodata
            (PT_LOAD, R | PF_X, 0x9000, 0x9000), // code
            (PT_LOAD, R | PF_W, 0x1000, 0x5000), // data + bss
            (2, R | PF_W, 0x100, 0x100),         // PT_DYNAMIC: not loaded separately
        ]);
        assert_eq!(
            ImageSizes::from_elf(&image),
            Some(ImageSizes {
                code_bytes: 0x9000,
                rwdata_bytes: 0x1000,
                rodata_bytes: 0x3000,
                bss_bytes: 0x4000,
            })
        );
    }

    #[test]
    fn not_an_elf_or_cut_short() {
        assert_eq!(ImageSizes::from_elf(b"MZ\x90\x00"), None);
        let image = elf(&[(PT_LOAD, PF_X, 1, 1)]);
        // Cut inside the last header's p_memsz (p_align, the last 8 bytes, is not read).
        assert_eq!(ImageSizes::from_elf(&image[..image.len() - 9]), None);
    }
}
