//! What the pipeline starts from: the firmware's map and SRAT, the
//! options, and what the boot reserved before it.

use memboot_contract::options::Options;
use memmap::firmware::{FirmwareEntry, NodeAffinity};

use crate::image_sizes::ImageSizes;

/// What the pipeline starts from.
pub struct Input<'a> {
    pub opts: &'a Options,
    /// The firmware memory map.
    pub map: &'a [FirmwareEntry],
    /// SRAT memory affinity; `None` without SRAT (all memory is node 0).
    pub affinity: Option<&'a [NodeAffinity]>,
    pub phys_addr_bits: u32,
    /// CPUID's hypervisor bit (Linux sizes memory blocks by it).
    pub under_hypervisor: bool,
    /// CPUID's 1 GiB pages (`pdpe1gb`): without them `hugepagesz=1G` is
    /// ignored, as Linux ignores it.
    pub has_1g_pages: bool,
    pub reserve: &'a [EarlyReservation],
    /// The kernel image's parts, for Linux's `Memory:` line.
    pub image: ImageSizes,
}

/// A range to reserve before anything is allocated from memblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyReservation {
    pub base: u64,
    pub size: u64,
    /// What it is, for messages ("low 1 MiB", "kernel heap").
    pub what: &'static str,
}
