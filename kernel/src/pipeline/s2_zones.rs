//! Stage 2, zones: DMA / DMA32 / Normal per node and the present sections,
//! printed as Linux's `free_area_init()` prints them.

use memmap::memblock::Memblock;
use memmap::zones::ZoneLayout;

use super::seams::{log_lines, Log};

/// Lay out the zones of `mb` and print them.
pub fn layout(mb: &Memblock, log: &dyn Log) -> ZoneLayout {
    let layout = ZoneLayout::new(mb);
    log_lines(log, &ReportOf(&layout, mb));
    layout
}

struct ReportOf<'a>(&'a ZoneLayout, &'a Memblock);

impl core::fmt::Display for ReportOf<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.write_report(self.1, f)
    }
}
