//! Linux's `report_hugepages()` lines (mm/hugetlb.c), one pair per huge
//! page size once hugetlb is set up, printed the same in 6.1, 6.12 and
//! 7.3:
//!
//! ```text
//! HugeTLB: registered 1.00 GiB page size, pre-allocated 13 pages
//! HugeTLB: 16380 KiB vmemmap can be freed for a 1.00 GiB page
//! ```
//!
//! memboot prints the first for its 1 GiB pages; the bench reads both back
//! from either kernel's log. The second says what HVO *can* free per page
//! (`hugetlb_vmemmap_optimizable_size()`, which does not look at
//! `hugetlb_free_vmemmap=`), so whether HVO ran is the command line's
//! word ([`super::plan`]), not this line's.

use core::fmt;

use super::HugePageSize;

const PREFIX: &str = "HugeTLB: ";

impl HugePageSize {
    /// The size whose Linux label ([`HugePageSize::label`]) is `label`.
    pub fn of_label(label: &str) -> Option<Self> {
        HugePageSize::ALL.into_iter().find(|s| s.label() == label)
    }

    /// Base pages (4 KiB) in one page of this size: its struct pages.
    pub const fn base_pages(self) -> u64 {
        self.bytes() >> 12
    }
}

/// `HugeTLB: registered SIZE page size, pre-allocated N pages`: N pages
/// of SIZE reserved at boot (`h->free_huge_pages`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisteredLine {
    pub size: HugePageSize,
    pub pages: u64,
}

impl fmt::Display for RegisteredLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}registered {} page size, pre-allocated {} pages",
            self.size.label(),
            self.pages
        )
    }
}

impl RegisteredLine {
    /// The line's message (no printk stamp), if it is one.
    pub fn parse(msg: &str) -> Option<Self> {
        let rest = msg.strip_prefix(PREFIX)?.strip_prefix("registered ")?;
        let (label, rest) = rest.split_once(" page size, pre-allocated ")?;
        Some(RegisteredLine {
            size: HugePageSize::of_label(label)?,
            pages: rest.strip_suffix(" pages")?.parse().ok()?,
        })
    }
}

/// `HugeTLB: K KiB vmemmap can be freed for a SIZE page`: the vmemmap HVO
/// frees per page of SIZE when it is on; what it keeps holds the struct
/// pages Linux still writes ([`VmemmapLine::kept_struct_pages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmemmapLine {
    pub freeable_kib: u64,
    pub size: HugePageSize,
}

impl fmt::Display for VmemmapLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{} KiB vmemmap can be freed for a {} page",
            self.freeable_kib,
            self.size.label()
        )
    }
}

/// Linux's `HUGETLB_VMEMMAP_RESERVE_SIZE`: the vmemmap HVO keeps per huge
/// page, one base page.
const VMEMMAP_RESERVE_BYTES: u64 = 4096;

impl VmemmapLine {
    /// The line for a page of `size` whose struct pages are
    /// `struct_page_bytes` each, as `hugetlb_vmemmap_optimizable_size()`
    /// computes it: the page's vmemmap less the page HVO keeps, none when
    /// that is all of it or the struct page is not a power of two.
    pub fn for_struct_page(size: HugePageSize, struct_page_bytes: u64) -> Self {
        let vmemmap = size.base_pages() * struct_page_bytes;
        let freeable = if struct_page_bytes.is_power_of_two() {
            vmemmap.saturating_sub(VMEMMAP_RESERVE_BYTES)
        } else {
            0
        };
        VmemmapLine {
            freeable_kib: freeable >> 10,
            size,
        }
    }

    pub fn parse(msg: &str) -> Option<Self> {
        let rest = msg.strip_prefix(PREFIX)?;
        let (kib, rest) = rest.split_once(" KiB vmemmap can be freed for a ")?;
        Some(VmemmapLine {
            freeable_kib: kib.parse().ok()?,
            size: HugePageSize::of_label(rest.strip_suffix(" page")?)?,
        })
    }

    /// The struct pages (`struct_page_bytes` each) in the vmemmap HVO
    /// keeps for one page: those `hugetlb_folio_init_vmemmap()` writes
    /// (head and the tails in `HUGETLB_VMEMMAP_RESERVE_SIZE`), 64 of a
    /// 1 GiB page's 262144 with Linux's 64-byte struct page.
    pub fn kept_struct_pages(&self, struct_page_bytes: u64) -> u64 {
        let vmemmap = self.size.base_pages() * struct_page_bytes;
        vmemmap.saturating_sub(self.freeable_kib << 10) / struct_page_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    // Linux 6.12.118+deb13-amd64, -m 16G, `hugepagesz=1G hugepages=13
    // hugetlb_free_vmemmap=on` (and the 2 MiB size it registers anyway).
    const LINES: [&str; 4] = [
        "HugeTLB: registered 1.00 GiB page size, pre-allocated 13 pages",
        "HugeTLB: 16380 KiB vmemmap can be freed for a 1.00 GiB page",
        "HugeTLB: registered 2.00 MiB page size, pre-allocated 0 pages",
        "HugeTLB: 28 KiB vmemmap can be freed for a 2.00 MiB page",
    ];

    #[test]
    fn linux_report_lines_read_back_as_printed() {
        let r = RegisteredLine::parse(LINES[0]).unwrap();
        assert_eq!((r.size, r.pages), (HugePageSize::Gib1, 13));
        assert_eq!(r.to_string(), LINES[0]);
        let v = VmemmapLine::parse(LINES[1]).unwrap();
        assert_eq!((v.size, v.freeable_kib), (HugePageSize::Gib1, 16380));
        assert_eq!(v.to_string(), LINES[1]);
        let r2 = RegisteredLine::parse(LINES[2]).unwrap();
        assert_eq!((r2.size, r2.pages), (HugePageSize::Mib2, 0));
        let v2 = VmemmapLine::parse(LINES[3]).unwrap();
        assert_eq!(v2.to_string(), LINES[3]);
        // Neither reads the other's line, nor a shortfall warning.
        assert_eq!(RegisteredLine::parse(LINES[1]), None);
        assert_eq!(VmemmapLine::parse(LINES[0]), None);
        let short =
            "HugeTLB: allocating 13 of page size 1.00 GiB failed.  Only allocated 12 hugepages.";
        assert_eq!(RegisteredLine::parse(short), None);
        assert_eq!(VmemmapLine::parse(short), None);
    }

    #[test]
    fn hvo_keeps_one_vmemmap_page_per_huge_page() {
        // 16 MiB of vmemmap per 1 GiB page less 16380 KiB: 4 KiB, 64
        // struct pages; 32 KiB per 2 MiB page less 28 KiB: the same.
        let one_gib = VmemmapLine::parse(LINES[1]).unwrap();
        assert_eq!(one_gib.kept_struct_pages(64), 64);
        assert_eq!(
            VmemmapLine::parse(LINES[3]).unwrap().kept_struct_pages(64),
            64
        );
        // A size HVO cannot free anything of keeps every struct page.
        let none = VmemmapLine {
            freeable_kib: 0,
            size: HugePageSize::Gib1,
        };
        assert_eq!(none.kept_struct_pages(64), 262144);
    }

    /// memboot's own struct-page sizes give Linux's figure at 64 bytes and
    /// the same rule's at 32 and 8 (a 2 MiB page's 4 KiB of 8-byte struct
    /// pages is the page HVO keeps: nothing to free).
    #[test]
    fn the_line_for_each_struct_page_size() {
        let line = |size, bytes| VmemmapLine::for_struct_page(size, bytes).to_string();
        assert_eq!(line(HugePageSize::Gib1, 64), LINES[1]);
        assert_eq!(line(HugePageSize::Mib2, 64), LINES[3]);
        assert_eq!(
            line(HugePageSize::Gib1, 32),
            "HugeTLB: 8188 KiB vmemmap can be freed for a 1.00 GiB page"
        );
        assert_eq!(
            line(HugePageSize::Gib1, 8),
            "HugeTLB: 2044 KiB vmemmap can be freed for a 1.00 GiB page"
        );
        assert_eq!(
            line(HugePageSize::Mib2, 8),
            "HugeTLB: 0 KiB vmemmap can be freed for a 2.00 MiB page"
        );
        // And each reads back to the struct pages HVO keeps: one page's.
        for bytes in [64, 32] {
            let v = VmemmapLine::for_struct_page(HugePageSize::Gib1, bytes);
            assert_eq!(v.kept_struct_pages(bytes), 4096 / bytes);
        }
    }

    #[test]
    fn an_unknown_size_label_is_not_a_line() {
        assert_eq!(
            RegisteredLine::parse("HugeTLB: registered 16.0 MiB page size, pre-allocated 1 pages"),
            None
        );
    }
}
