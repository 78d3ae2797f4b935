//! Function symbols from a `System.map` (Linux's, or `nm -n -C` of
//! memboot's unstripped ELF, which prints the same `ADDR TYPE NAME`
//! lines). A map has no sizes: a function ends where the next text symbol
//! begins, and the last one at the map's end-of-text marker.

/// The text symbols of one kernel, sorted by address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbols {
    /// (start, name), ascending; of names at one address, the first
    /// without a leading `_` (`startup_64`, not `_stext`), else the first.
    funcs: Vec<(u64, String)>,
    /// Where the text starts (`_stext` / `__text_start`), if named.
    pub text_start: Option<u64>,
    /// Where the last function ends (`_etext` / `__text_end`), if named.
    text_end: Option<u64>,
}

/// Markers that end the text rather than start a function.
const TEXT_END: &[&str] = &["_etext", "__text_end"];
const TEXT_START: &[&str] = &["_stext", "__text_start"];
/// Kernel-half addresses: the kernel's own code (not the firmware, the
/// bootloader or user space, all in the lower half).
pub const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

impl Symbols {
    pub fn parse_system_map(text: &str) -> Result<Symbols, String> {
        let mut funcs = Vec::new();
        let (mut text_start, mut text_end) = (None, None);
        for line in text.lines() {
            let mut w = line.splitn(3, ' ');
            let (Some(addr), Some(kind), Some(name)) = (w.next(), w.next(), w.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if TEXT_END.contains(&name) {
                text_end = Some(addr);
            }
            if TEXT_START.contains(&name) {
                text_start = Some(addr);
            }
            // T/t text, W/w weak (text in a kernel's map).
            if matches!(kind, "T" | "t" | "W" | "w") && addr >= KERNEL_HALF {
                funcs.push((addr, name.to_string()));
            }
        }
        funcs.sort_by_key(|(a, n)| (*a, n.starts_with('_')));
        funcs.dedup_by_key(|&mut (a, _)| a);
        if funcs.len() < 10 {
            return Err(format!(
                "{} text symbols: not a real System.map (Debian's linux-image package ships a \
                 stub; tests/linux-peer.sh --symbols fetches the real one)",
                funcs.len()
            ));
        }
        Ok(Symbols {
            funcs,
            text_start,
            text_end,
        })
    }

    /// The function holding `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self
            .funcs
            .partition_point(|&(a, _)| a <= addr)
            .checked_sub(1)?;
        let next = self
            .funcs
            .get(i + 1)
            .map(|&(a, _)| a)
            .or(self.text_end)
            .unwrap_or(u64::MAX);
        (addr < next && !TEXT_END.contains(&self.funcs[i].1.as_str()))
            .then(|| self.funcs[i].1.as_str())
    }

    /// Every address named `name`.
    pub fn addresses_of(&self, name: &str) -> Vec<u64> {
        self.funcs
            .iter()
            .filter(|(_, n)| n == name)
            .map(|&(a, _)| a)
            .collect()
    }

    /// The entry addresses of each name, or an error naming those missing
    /// (inlined away in this build, or renamed): a phase must not read 0.
    pub fn entries(&self, names: &[&str]) -> Result<Vec<u64>, String> {
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| self.addresses_of(n).is_empty())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "no function {} in the symbol map (inlined or renamed in this build)",
                missing.join(", ")
            ));
        }
        Ok(names.iter().flat_map(|n| self.addresses_of(n)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const MAP: &str = "\
0000000000000000 A __per_cpu_start
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t helper
ffffffff81000180 T memset
ffffffff81000200 D some_data
ffffffff81000300 W weak_fn
ffffffff81000400 T a5
ffffffff81000500 T a6
ffffffff81000600 T a7
ffffffff81000700 T a8
ffffffff81000800 T a9
ffffffff81000900 T _etext
";

    #[test]
    fn a_symbol_ends_where_the_next_text_symbol_starts() {
        let s = Symbols::parse_system_map(MAP).unwrap();
        assert_eq!(
            s.lookup(0xffffffff81000000),
            Some("startup_64"),
            "a name without _ first"
        );
        assert_eq!(s.lookup(0xffffffff810000ff), Some("startup_64"));
        assert_eq!(s.text_start, Some(0xffffffff81000000));
        assert_eq!(s.lookup(0xffffffff81000100), Some("helper"));
        // Data symbols start nothing: memset runs on over some_data's address.
        assert_eq!(s.lookup(0xffffffff81000250), Some("memset"));
        assert_eq!(s.lookup(0xffffffff81000300), Some("weak_fn"));
        assert_eq!(s.lookup(0xffffffff810008ff), Some("a9"));
        assert_eq!(s.lookup(0xffffffff81000900), None, "past _etext");
        assert_eq!(s.lookup(0xfffffffff0000000), None);
        assert_eq!(s.lookup(0x1000), None, "below the first function");
    }

    #[test]
    fn entries_fail_loudly_for_a_missing_name() {
        let s = Symbols::parse_system_map(MAP).unwrap();
        assert_eq!(
            s.entries(&["helper", "a5"]).unwrap(),
            vec![0xffffffff81000100, 0xffffffff81000400]
        );
        let e = s.entries(&["helper", "deferred_init_pages"]).unwrap_err();
        assert!(e.contains("no function deferred_init_pages"), "{e}");
    }

    #[test]
    fn debians_stub_map_is_refused() {
        let stub =
            "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n";
        let e = Symbols::parse_system_map(stub).unwrap_err();
        assert!(e.contains("linux-peer.sh --symbols"), "{e}");
    }
}
