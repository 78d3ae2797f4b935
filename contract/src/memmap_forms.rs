//! The values of Linux's `memmap=` boot parameter on x86: the forms a
//! command line may carry, parsed as Linux's `parse_memmap_one` reads them
//! (arch/x86/kernel/e820.c). `memmap::user_map` applies them to the
//! firmware map.
//!
//! | form | Linux | here |
//! |---|---|---|
//! | `exactmap` | drop every entry (`nr_entries = 0`) | [`Form::ExactMap`] |
//! | `nn[KMG]@ss[KMG]` | append usable RAM (`e820__range_add`, type 1) | [`Form::Add`] |
//! | `nn[KMG]#ss[KMG]` | append ACPI data (type 3) | [`Form::Add`] |
//! | `nn[KMG]$ss[KMG]` | append reserved (type 2) | [`Form::Add`] |
//! | `nn[KMG]` | remove RAM from `nn` up (`e820__range_remove`, as `mem=`) | [`Form::Limit`] |
//! | `nn!ss`, `nn%ss-t+u` | persistent memory, type conversion | refused ([`FormError::Unsupported`]) |
//!
//! Numbers are Linux's `memparse`: decimal or `0x` hex, then an optional
//! `K M G T P E` (either case). A leading `0` before a digit is refused:
//! Linux reads it as octal, memboot's other options as decimal.

use core::fmt;

/// e820 types (Linux `enum e820_type`).
pub const E820_RAM: u32 = 1;
pub const E820_RESERVED: u32 = 2;
pub const E820_ACPI: u32 = 3;
pub const E820_NVS: u32 = 4;
pub const E820_UNUSABLE: u32 = 5;

/// Most `memmap=` forms one command line may carry: 8192 regions with
/// their holes and a few more, and a bound on what the kernel heap holds.
pub const MAX_FORMS: usize = 16_384;

/// One `memmap=` form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `exactmap`: drop every entry of the table.
    ExactMap,
    /// `size@start` (RAM), `size#start` (ACPI data), `size$start`
    /// (reserved): append an entry of `kind` (an e820 type).
    Add { start: u64, size: u64, kind: u32 },
    /// `size`: remove RAM from `bytes` up.
    Limit { bytes: u64 },
}

/// Why a `memmap=` form was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormError {
    /// Not `exactmap` and no number where the form starts.
    NoNumber,
    /// A number with a leading zero (`010M`).
    LeadingZero,
    /// A number beyond 64 bits, or a size suffix that takes it there.
    Overflow,
    /// Something after the form (`2G@4Gx`).
    Trailing,
    /// A form Linux has that memboot refuses, with why.
    Unsupported {
        form: &'static str,
        why: &'static str,
    },
    /// `memmap=0`: would remove every byte of RAM.
    NoRamLeft,
}

impl fmt::Display for FormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormError::NoNumber => f.write_str(
                "expected a memmap mode (deferred|regions|perpfn|touch|ondemand), exactmap, or Linux's nn[KMG]@ss[KMG] (RAM), nn[KMG]#ss[KMG] (ACPI data), nn[KMG]$ss[KMG] (reserved) or nn[KMG] (limit)",
            ),
            FormError::LeadingZero => f.write_str(
                "a number starts with 0: Linux reads it as octal, memboot's other options as decimal; write it without the leading zeros, or in hex as 0x…",
            ),
            FormError::Overflow => f.write_str("a number does not fit in 64 bits"),
            FormError::Trailing => f.write_str(
                "text after the form: each form is size@start, size#start, size$start or size alone (several forms: separate them with commas or give memmap= again)",
            ),
            FormError::Unsupported { form, why } => write!(f, "the {form} form is not supported: {why}"),
            FormError::NoRamLeft => f.write_str(
                "memmap=0 removes all RAM; give the size to keep (memmap=nn[KMG], as mem=)",
            ),
        }
    }
}

/// Does `value` read as Linux `memmap=` forms rather than a memboot mode?
/// Linux's forms start with a number or `exactmap`.
pub fn is_linux_form(value: &str) -> bool {
    value.starts_with("exactmap") || value.starts_with(|c: char| c.is_ascii_digit())
}

/// Parse one `memmap=` value: forms separated by commas, as Linux's
/// `parse_memmap_opt` splits them.
pub fn parse_value(value: &str) -> impl Iterator<Item = Result<Form, FormError>> + '_ {
    value.split(',').map(parse_form)
}

/// Parse one form (no commas).
pub fn parse_form(form: &str) -> Result<Form, FormError> {
    if let Some(rest) = form.strip_prefix("exactmap") {
        return if rest.is_empty() {
            Ok(Form::ExactMap)
        } else {
            Err(FormError::Trailing)
        };
    }
    let (size, rest) = memparse(form)?;
    let Some(op) = rest.chars().next() else {
        if size == 0 {
            return Err(FormError::NoRamLeft);
        }
        return Ok(Form::Limit { bytes: size });
    };
    let kind = match op {
        '@' => E820_RAM,
        '#' => E820_ACPI,
        '$' => E820_RESERVED,
        '!' => {
            return Err(FormError::Unsupported {
                form: "nn!ss (persistent memory, e820 type 12)",
                why: "memboot initialises no persistent memory; mark the range reserved with nn$ss",
            })
        }
        '%' => {
            return Err(FormError::Unsupported {
                form: "nn%ss-t+u (change a range's type)",
                why: "add the range with the type it should have (@ RAM, # ACPI data, $ reserved) instead",
            })
        }
        _ => return Err(FormError::Trailing),
    };
    let (start, rest) = memparse(&rest[1..])?;
    if !rest.is_empty() {
        return Err(FormError::Trailing);
    }
    Ok(Form::Add { start, size, kind })
}

/// Linux's `memparse`: a number (decimal or `0x` hex) and an optional
/// binary suffix; the rest of the text after it.
fn memparse(text: &str) -> Result<(u64, &str), FormError> {
    let (radix, digits_from) = match text.get(..2) {
        Some("0x" | "0X") => (16, 2),
        _ => (10, 0),
    };
    let body = &text[digits_from..];
    let len = body
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(body.len());
    if len == 0 {
        return Err(FormError::NoNumber);
    }
    if radix == 10 && len > 1 && body.starts_with('0') {
        return Err(FormError::LeadingZero);
    }
    let n = u64::from_str_radix(&body[..len], radix).map_err(|_| FormError::Overflow)?;
    let rest = &body[len..];
    let Some(shift) = suffix_shift(rest) else {
        return Ok((n, rest));
    };
    let bytes = n.checked_mul(1 << shift).ok_or(FormError::Overflow)?;
    Ok((bytes, &rest[1..]))
}

/// The shift of `memparse()`'s size suffix at the start of `rest` (`K`
/// 10 … `E` 60, either case); `None` without one.
pub(crate) fn suffix_shift(rest: &str) -> Option<u32> {
    match rest.chars().next().map(|c| c.to_ascii_uppercase()) {
        Some('K') => Some(10),
        Some('M') => Some(20),
        Some('G') => Some(30),
        Some('T') => Some(40),
        Some('P') => Some(50),
        Some('E') => Some(60),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn parses_linux_forms() {
        assert_eq!(parse_form("exactmap"), Ok(Form::ExactMap));
        assert_eq!(
            parse_form("2G@4G"),
            Ok(Form::Add {
                start: 4 * GIB,
                size: 2 * GIB,
                kind: E820_RAM
            })
        );
        assert_eq!(
            parse_form("64k#0x7fff0000"),
            Ok(Form::Add {
                start: 0x7fff_0000,
                size: 64 << 10,
                kind: E820_ACPI
            })
        );
        assert_eq!(
            parse_form("1m$1t"),
            Ok(Form::Add {
                start: 1 << 40,
                size: MIB,
                kind: E820_RESERVED
            })
        );
        assert_eq!(parse_form("3G"), Ok(Form::Limit { bytes: 3 * GIB }));
        assert_eq!(parse_form("4096"), Ok(Form::Limit { bytes: 4096 }));
        assert_eq!(
            parse_form("0@0"),
            Ok(Form::Add {
                start: 0,
                size: 0,
                kind: E820_RAM
            })
        );
        let forms: Vec<_> = parse_value("exactmap,640K@0,1G@1M").collect();
        assert_eq!(forms.len(), 3);
        assert!(forms.iter().all(Result::is_ok));
    }

    #[test]
    fn refuses_what_linux_would_misread_or_memboot_does_not_do() {
        assert_eq!(parse_form("010M"), Err(FormError::LeadingZero));
        assert_eq!(parse_form("1M@010M"), Err(FormError::LeadingZero));
        assert_eq!(parse_form("x"), Err(FormError::NoNumber));
        assert_eq!(parse_form("1M@"), Err(FormError::NoNumber));
        assert_eq!(parse_form("0x"), Err(FormError::NoNumber));
        assert_eq!(parse_form("1M@1Gx"), Err(FormError::Trailing));
        assert_eq!(parse_form("1Mq"), Err(FormError::Trailing));
        assert_eq!(parse_form("exactmapx"), Err(FormError::Trailing));
        assert_eq!(parse_form("16E"), Err(FormError::Overflow));
        assert_eq!(parse_form("99999999999999999999"), Err(FormError::Overflow));
        assert_eq!(parse_form("0"), Err(FormError::NoRamLeft));
        assert!(matches!(
            parse_form("1G!4G"),
            Err(FormError::Unsupported { .. })
        ));
        assert!(matches!(
            parse_form("1G%4G-1+2"),
            Err(FormError::Unsupported { .. })
        ));
        // Every refusal says what to write instead.
        for e in [
            FormError::LeadingZero,
            FormError::Trailing,
            FormError::NoNumber,
        ] {
            assert!(e.to_string().len() > 40, "{e}");
        }
    }

    #[test]
    fn linux_forms_are_told_from_modes_by_their_first_character() {
        for v in ["exactmap", "2G@4G", "0x100$0", "3G"] {
            assert!(is_linux_form(v), "{v}");
        }
        for v in ["deferred", "regions", "perpfn", "touch", "ondemand", ""] {
            assert!(!is_linux_form(v), "{v}");
        }
    }
}
