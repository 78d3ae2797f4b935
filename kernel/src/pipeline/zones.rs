//! Zones: DMA / DMA32 / Normal per node and the present sections,
//! printed as Linux's `free_area_init()` prints them ([`log`]: the pipeline
//! prints them where the boot CPU stops working alone, with the kernel's
//! held-back boot report, since formatting them is first-run code that
//! memory init does not need).

use memmap::memblock::Memblock;
use memmap::zones::ZoneLayout;

use super::context::Ctx;
use super::facts::Phase;
use super::seams::{log_lines, Log};

/// The zones; their page counts recorded.
pub fn run(cx: &Ctx<'_>, mb: &Memblock) -> ZoneLayout {
    let (layout, _) = cx.timed(Phase::Zones, || ZoneLayout::new(mb));
    cx.facts.record(|f| {
        f.present_pages = layout.present_pages();
        f.low_zone_pages = layout.low_zone_pages();
        f.set_nodes(layout.nodes().len());
    });
    layout
}

/// Lay out the zones of `mb` and print them (memmap charged at
/// `page_bytes` per struct page).
pub fn layout(mb: &Memblock, log: &dyn Log, page_bytes: u64) -> ZoneLayout {
    let layout = ZoneLayout::new(mb);
    self::log(log, &layout, mb, page_bytes);
    layout
}

/// Print the zones as Linux does (`Zone ranges:` to the unavailable
/// ranges), the memmap charged at `page_bytes` per struct page.
pub fn log(log: &dyn Log, layout: &ZoneLayout, mb: &Memblock, page_bytes: u64) {
    log_lines(log, &ReportOf(layout, mb, page_bytes));
}

struct ReportOf<'a>(&'a ZoneLayout, &'a Memblock, u64);

impl core::fmt::Display for ReportOf<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.write_report(self.1, self.2, f)
    }
}
