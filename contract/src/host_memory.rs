//! The host-memory model's constants: how much host memory a boot needs,
//! so that run-qemu.sh refuses one that cannot fit before QEMU starts
//! rather than let the host run out of memory (README "Large guests").
//!
//! QEMU backs every guest byte the boot writes with host memory, on top of
//! its own. So the need is QEMU's own + the struct pages the boot writes (64
//! bytes per 4 KiB page, RAM/64; 32 with `struct_page=32`, RAM/128; Linux's
//! are 64) + for a Linux boot what Linux writes besides them, in MiB. Every
//! constant is an upper bound of what this host measured: host peak RSS
//! (`host_rss_mib`) of every boot in `tests/bench-results/1-node/bench.json`
//! and `16-nodes/bench.json`, and the 48T and 59T ondemand boots of the
//! README ("Large guests"); the host tool's unit tests check the model
//! against the committed bench.json files.

/// QEMU's own memory is `QEMU_BASE_MIB` + [`QEMU_PER_TIB_MIB`] per TiB of
/// guest RAM: QEMU, its TCG code buffer, the firmware, the kernel's page
/// tables and heap. The base covers the small guests, RSS minus the RAM/64
/// they wrote: 64G deferred 1097 - 1024 = 73 MiB (1 node), 1099 - 1024 =
/// 75 MiB (16 nodes).
pub const QEMU_BASE_MIB: u64 = 192;
/// Per TiB, covering (with the base) 1T deferred 16551 - 16384 = 167 MiB (1
/// node), 16583 - 16384 = 199 MiB (16 nodes), and the large ondemand guests
/// over 16 nodes less their ~354 MiB of struct pages and the base: 32T
/// 3639 MiB (~97 MiB per TiB), 48T 5.3 GiB and 59T 6.4 GiB (~102 per TiB).
pub const QEMU_PER_TIB_MIB: u64 = 112;

/// Linux 6.1's own (`--linux`) is `LINUX_BASE_MIB` + [`LINUX_PER_TIB_MIB`]
/// per TiB: what it writes beyond struct pages, Linux's RSS minus memboot
/// deferred's on the same machine. The base covers 64G: 1434 - 1097 = 337
/// MiB (1 node), 1556 - 1099 = 457 MiB (16 nodes).
pub const LINUX_BASE_MIB: u64 = 512;
/// Per TiB, covering (with the base) 1T: 17189 - 16551 = 638 MiB (1 node),
/// 17311 - 16583 = 728 MiB (16 nodes). Measured up to 1T only.
pub const LINUX_PER_TIB_MIB: u64 = 384;

/// What plain `memmap=ondemand` writes eagerly, at most: the low zones
/// below 4 GiB …
pub const LOW_ZONES_MIB: u64 = 4096;
/// … and one 128 MiB section per node (the rest of each node is the pool).
pub const SECTION_MIB: u64 = 128;
/// Per CPU per node, the 4 MiB block window the allocation test may have
/// claimed beyond what it allocated.
pub const WINDOW_MIB: u64 = 4;

/// Guests above this many MiB take the large-guest lock, one at a time on
/// a host: their struct pages alone are 1/64 of guest RAM in host memory
/// (16 GiB at 1 TiB).
pub const LARGE_GUEST_MIB: u64 = 64 * 1024;
