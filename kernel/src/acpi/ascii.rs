//! Table ids in messages: what the tables, their errors and their
//! summaries print signatures and OEM ids with.

use core::fmt;

/// Prints bytes as ASCII: NUL as space (OEM ids are often NUL padded), other
/// non-printable bytes as `?`.
pub(super) struct Ascii<'a>(pub(super) &'a [u8]);

impl fmt::Display for Ascii<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for &b in self.0 {
            let c = match b {
                0 => ' ',
                0x20..=0x7e => char::from(b),
                _ => '?',
            };
            f.write_char(c)?;
        }
        Ok(())
    }
}
