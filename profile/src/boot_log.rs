//! What the report reads from a memboot boot's serial log: where its text
//! ran (checked against the ELF's symbols: the plugin's entry addresses
//! came from them) and the struct pages each phase initialised, from the
//! summary line, the per-page divisors.

use std::collections::HashMap;

use memboot_contract::summary::{Summary, SUMMARY_PREFIX};

use crate::phases::{BOOT_CPU, BUDDY_HANDOFF, DEFERRED, FREE_BITMAPS, HUGETLB, VMEMMAP};
use crate::symbols::Symbols;

const TEXT_LINE: &str = "memboot: image text [";

/// The pages per phase, after checking the text address.
pub fn memboot_pages(log: &str, symbols: &Symbols) -> Result<HashMap<String, u64>, String> {
    let ran_at = log
        .lines()
        .find_map(|l| {
            let rest = &l[l.find(TEXT_LINE)? + TEXT_LINE.len()..];
            u64::from_str_radix(rest.split('-').next()?.strip_prefix("0x")?, 16).ok()
        })
        .ok_or("the log has no 'memboot: image text [...]' line: not a whole memboot log")?;
    if Some(ran_at) != symbols.text_start {
        return Err(format!(
            "the boot ran its text at {ran_at:#x}, the ELF's symbols put it at {}: \
             the profile's entries and names would be off (a different kernel ELF?)",
            symbols
                .text_start
                .map_or("nowhere".into(), |a| format!("{a:#x}"))
        ));
    }
    let line = log
        .lines()
        .rev()
        .find_map(|l| {
            l.find(SUMMARY_PREFIX)
                .map(|i| &l[i + SUMMARY_PREFIX.len()..])
        })
        .ok_or("the log has no memboot-summary line: the boot did not finish")?;
    let summary: Summary<'static> =
        serde_json::from_str(line).map_err(|e| format!("memboot-summary: {e}"))?;
    Ok(HashMap::from([
        (DEFERRED.to_string(), summary.deferred_pages),
        (BOOT_CPU.to_string(), summary.eager_pages),
        (FREE_BITMAPS.to_string(), summary.present_pages),
        (VMEMMAP.to_string(), summary.present_pages),
        (BUDDY_HANDOFF.to_string(), summary.eager_pages),
        (HUGETLB.to_string(), summary.hugetlb_struct_pages),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbols(text_start: &str) -> Symbols {
        let mut m = format!("{text_start} T __text_start\n");
        for i in 0..10 {
            m += &format!("ffffffff8100{i}000 t f{i}\n");
        }
        Symbols::parse_system_map(&m).unwrap()
    }

    const LOG: &str = "\
[    0.005676] memboot: entered through PVH 6.420 ms after the VM's reset (TSC 14419755 at entry)
[    0.005680] memboot: image text [0xffffffff81000000-0xffffffff8106874d]
memboot-summary: {\"status\":\"ok\",\"deferred_pages\":5,\"eager_pages\":0}
memboot-summary: {\"status\":\"ok\",\"deferred_pages\":3375104,\"eager_pages\":819103}
";

    #[test]
    fn pages_from_the_last_summary() {
        let pages = memboot_pages(LOG, &symbols("ffffffff81000000")).unwrap();
        assert_eq!(pages[DEFERRED], 3375104);
        assert_eq!(pages[BOOT_CPU], 819103);
    }

    #[test]
    fn a_text_address_other_than_the_symbols_is_refused() {
        let e = memboot_pages(LOG, &symbols("ffffffff81200000")).unwrap_err();
        assert!(e.contains("ran its text at 0xffffffff81000000"), "{e}");
        let e = memboot_pages("memboot-summary: {}", &symbols("ffffffff81000000")).unwrap_err();
        assert!(e.contains("no 'memboot: image text"), "{e}");
        let cut = LOG.lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(memboot_pages(&cut, &symbols("ffffffff81000000"))
            .unwrap_err()
            .contains("did not finish"));
    }
}
