//! What a bench run compares (its sizes, entries and rounds) and what an
//! entry names: a memmap mode or a Linux entry, the peer a ratio divides
//! by, the `touch` a memmap is measured against.

use memboot_contract::hugepage_forms::HugeKey;

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

/// Is `word` (of an entry's `+` words) one of the huge-page parameters
/// both kernels read alike (`hugepagesz=1G`, `hugepages=13`,
/// `default_hugepagesz=`, `hugetlb_free_vmemmap=on`)?
pub fn is_huge_word(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(key, _)| HugeKey::of(key).is_some())
}

/// The huge-page words of an entry, each with its `+`
/// (`linux-6.12+nokaslr+hugepagesz=1G+hugepages=2` → `+hugepagesz=1G+hugepages=2`).
pub fn huge_words(entry: &str) -> String {
    kernel_of(entry)
        .split('+')
        .skip(1)
        .filter(|w| is_huge_word(w))
        .map(|w| format!("+{w}"))
        .collect()
}

/// Is `entry` a peer as the ratios divide by it: a kernel through its PVH
/// entry with nothing added but huge pages, on the run's own QEMU,
/// unprofiled (`linux-6.12`, `linux-6.12+hugepagesz=1G+hugepages=13`, or
/// the old `linux`)?
pub fn is_peer(entry: &str) -> bool {
    let Some(rest) = linux_series(entry).and_then(|s| entry.strip_prefix(&format!("linux-{s}")))
    else {
        return entry == "linux";
    };
    !entry.contains('@')
        && (rest.is_empty()
            || rest
                .strip_prefix('+')
                .is_some_and(|words| words.split('+').all(is_huge_word)))
}

/// The `touch` entry an entry's memmap is measured against: the store
/// floor with the same kernel options ("deferred+struct_page=8" →
/// "touch+struct_page=8"), so a layout is divided by a pass over struct
/// pages of its own size; plain `touch` (64 bytes, Linux's size) for a
/// Linux peer, with the entry's huge pages for a Linux entry that has
/// some.
pub fn touch_entry(entry: &str) -> String {
    let huge = huge_words(entry);
    if is_linux(entry) && !huge.is_empty() {
        return format!("touch{huge}");
    }
    match entry.find('+') {
        Some(at) if !is_peer(entry) => format!("touch{}", &entry[at..]),
        _ => "touch".to_string(),
    }
}

/// How the ratio columns name a peer: "Linux 6.12", with its huge-page
/// words ("Linux 6.12+hugepagesz=1G+hugepages=13"); the old `linux`,
/// "Linux".
pub fn peer_label(entry: &str) -> String {
    match linux_series(entry) {
        Some(series) => format!("Linux {series}{}", huge_words(entry)),
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
        assert_eq!(
            touch_entry("deferred+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on"),
            "touch+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on"
        );
        assert_eq!(
            touch_entry("linux-6.12+nokaslr+hugepagesz=1G+hugepages=13"),
            "touch+hugepagesz=1G+hugepages=13"
        );
    }

    #[test]
    fn a_peer_may_carry_huge_pages_and_nothing_else() {
        let huge = "linux-6.12+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on";
        assert!(is_peer("linux-6.12") && is_peer("linux") && is_peer(huge));
        assert_eq!(linux_series(huge), Some("6.12"));
        assert_eq!(
            peer_label(huge),
            "Linux 6.12+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on"
        );
        assert_eq!(peer_label("linux-6.12"), "Linux 6.12");
        for not in [
            "linux-6.12+nokaslr",
            "linux-6.12+hugepages=13+nokaslr",
            "linux-6.12-bzimage+hugepages=13",
            "linux-6.12+hugepages=13@qemu-10.0",
            "linux-6.12@profile",
            "deferred+hugepages=13",
        ] {
            assert!(!is_peer(not), "{not}");
        }
    }
}
