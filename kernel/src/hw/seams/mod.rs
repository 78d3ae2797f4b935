//! The pipeline's seams (`memboot_kernel::pipeline::seams`) implemented on
//! real hardware, one file each, named after the seam.

mod clock;
mod executor;
mod log;
mod vmemmap_mapper;

pub use clock::TscClock;
pub use executor::SmpCpus;
pub use log::SerialLog;
pub use vmemmap_mapper::KernelMapper;
