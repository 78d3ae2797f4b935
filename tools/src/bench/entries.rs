//! What a bench run compares (its sizes, entries and rounds) and what an
//! entry names: a memmap mode or a Linux entry, the peer a ratio divides
//! by, the `touch` a memmap is measured against.

use crate::linux_log;

/// What a bench run compared.
pub struct Plan<'a> {
    pub sizes: &'a [String],
    pub entries: &'a [String],
    pub rounds: u32,
}

/// `64G` → MiB (the sizes run-qemu.sh accepts; no suffix = MiB).
pub fn size_mib(size: &str) -> Result<u64, String> {
    let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size '{size}': expected e.g. 64G or 1T"))?;
    match &size[digits.len()..] {
        "" | "M" => Ok(n),
        "G" => Ok(n << 10),
        "T" => Ok(n << 20),
        other => Err(format!("size '{size}': unknown suffix '{other}'")),
    }
}

/// What an entry boots, without how tests/bench.sh runs it: the entry
/// less its `@…` words (`@qemu-10.0`: another QEMU; `@profile`: under the
/// instruction profile).
pub fn kernel_of(entry: &str) -> &str {
    entry.split('@').next().unwrap_or(entry)
}

/// Is `entry` a Linux boot (`linux-6.12`, `linux-6.1-bzimage+nokaslr`, the
/// old `linux`, `linux-pvh`, `linux-6.12@qemu-10.0`, …)?
pub fn is_linux(entry: &str) -> bool {
    let kernel = kernel_of(entry);
    kernel == "linux" || kernel.starts_with("linux-") || kernel.starts_with("linux+")
}

/// The kernel series a Linux entry names: `6.12` of `linux-6.12`,
/// `linux-6.12-bzimage` or `linux-6.12+nokaslr`; `None` for the old names
/// (`linux`, `linux-pvh`, … Debian 12's 6.1) and for memboot entries.
pub fn linux_series(entry: &str) -> Option<&str> {
    let rest = kernel_of(entry).strip_prefix("linux-")?;
    let end = rest.find(['-', '+']).unwrap_or(rest.len());
    linux_log::series_of_release(&rest[..end]).filter(|s| s.len() == end)
}

/// Is `entry` a peer as the ratios divide by it: a kernel through its PVH
/// entry with nothing added, on the run's own QEMU, unprofiled
/// (`linux-6.12`, or the old `linux`)?
pub fn is_peer(entry: &str) -> bool {
    entry == "linux" || linux_series(entry).is_some_and(|s| entry == format!("linux-{s}"))
}

/// The `touch` entry an entry's memmap is measured against: the store
/// floor with the same kernel options ("deferred+struct_page=8" →
/// "touch+struct_page=8"), so a layout is divided by a pass over struct
/// pages of its own size; plain `touch` (64 bytes, Linux's size) for a
/// Linux peer.
pub fn touch_entry(entry: &str) -> String {
    match entry.find('+') {
        Some(at) if !is_peer(entry) => format!("touch{}", &entry[at..]),
        _ => "touch".to_string(),
    }
}

/// How the ratio columns name a peer: "Linux 6.12"; the old `linux`, "Linux".
pub fn peer_label(entry: &str) -> String {
    match linux_series(entry) {
        Some(series) => format!("Linux {series}"),
        None => "Linux".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_is_measured_against_touch_with_its_options() {
        assert_eq!(touch_entry("deferred+struct_page=8"), "touch+struct_page=8");
        assert_eq!(
            touch_entry("deferred+struct_page=32+buddy=bitmaps"),
            "touch+struct_page=32+buddy=bitmaps"
        );
        assert_eq!(touch_entry("deferred"), "touch");
        assert_eq!(touch_entry("touch+struct_page=8"), "touch+struct_page=8");
        assert_eq!(touch_entry("linux-6.12"), "touch");
    }
}
