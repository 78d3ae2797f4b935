//! Memblock, first: the firmware map, node-tagged from SRAT, with the
//! early reservations memblock cannot see in the map (Linux x86 reserves
//! the first 1 MiB; memboot's heap came out of usable RAM before memblock
//! existed). Linux: `e820__memblock_setup()`, `numa_register_memblks()`,
//! `memblock_reserve()`.

use memmap::firmware::{FirmwareRegion, NodeAffinity};
use memmap::memblock::{FirmwareReport, Memblock, MemblockConfig};

use super::context::Ctx;
use super::error::{MemblockStageError, PipelineError};
use super::facts::Phase;
use super::input::{EarlyReservation, Input};
use super::seams::Log;

/// Build memblock from the input, log it, record its time.
pub fn run(cx: &Ctx<'_>, input: &Input<'_>) -> Result<Memblock, PipelineError> {
    let (built, memblock_ns) = cx.timed(Phase::Memblock, || {
        build(
            input.map,
            input.affinity,
            input.phys_addr_bits,
            input.reserve,
        )
    });
    let (mb, report) = built.map_err(PipelineError::Memblock)?;
    log(cx.log, &mb, &report, memblock_ns);
    cx.facts.record(|f| f.memblock_ns = memblock_ns);
    Ok(mb)
}

/// Build memblock. `affinity` is `None` without SRAT: then all memory is
/// node 0 by definition and not reported as missing affinity.
pub fn build<R: FirmwareRegion>(
    regions: impl IntoIterator<Item = R>,
    affinity: Option<&[NodeAffinity]>,
    phys_addr_bits: u32,
    reserve: &[EarlyReservation],
) -> Result<(Memblock, FirmwareReport), MemblockStageError> {
    let config = MemblockConfig {
        phys_addr_bits: phys_addr_bits.clamp(32, 52),
        ..MemblockConfig::default()
    };
    let fail = |what| move |err| MemblockStageError { what, err };
    let (mut mb, mut report) =
        Memblock::from_firmware(regions, config).map_err(fail("firmware map"))?;
    if let Some(affinity) = affinity {
        mb.apply_affinity(affinity.iter().copied(), &mut report)
            .map_err(fail("SRAT affinity"))?;
    }
    for r in reserve {
        mb.reserve(r.base, r.size).map_err(fail(r.what))?;
    }
    Ok((mb, report))
}

/// The stage's log lines.
pub fn log(log: &dyn Log, mb: &Memblock, report: &FirmwareReport, memblock_ns: u64) {
    log.line(format_args!(
        "memblock: {} memory regions ({} MiB), {} reserved regions ({} MiB), phys bits {}, built in {} us",
        mb.memory().len(),
        mb.memory().total_bytes() >> 20,
        mb.reserved().len(),
        mb.reserved().total_bytes() >> 20,
        mb.phys_addr_bits(),
        memblock_ns / 1000
    ));
    let fixed = report.overlap_bytes
        + report.beyond_phys_bytes
        + report.unaligned_ram_bytes
        + report.no_affinity_bytes;
    if fixed > 0 {
        log.line(format_args!(
            "memblock: firmware map fix-ups: {} B overlapping, {} B beyond phys bits, {} B unaligned RAM, {} B without SRAT node",
            report.overlap_bytes,
            report.beyond_phys_bytes,
            report.unaligned_ram_bytes,
            report.no_affinity_bytes
        ));
    }
}
