//! Report formatting: dmesg-style timestamps and the `memboot-summary:` JSON
//! line that CI users parse.
//!
//! The summary is a contract: keys are only ever added, never renamed or
//! dropped. It is one line, one JSON object, written without allocation so
//! that the panic and exception paths can still emit it.

use core::fmt::{self, Write};

/// `[    5.123456] ` prefix for a time since kernel entry, like dmesg.
pub struct Timestamp(pub u64 /* ns */);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let micros = (self.0 % 1_000_000_000) / 1_000;
        write!(f, "[{secs:5}.{micros:06}]")
    }
}

/// Writes one JSON object field by field.
pub struct JsonObject<'w, W: Write> {
    out: &'w mut W,
    first: bool,
}

impl<'w, W: Write> JsonObject<'w, W> {
    pub fn begin(out: &'w mut W) -> Result<Self, fmt::Error> {
        out.write_char('{')?;
        Ok(Self { out, first: true })
    }

    fn key(&mut self, key: &str) -> fmt::Result {
        if !self.first {
            self.out.write_char(',')?;
        }
        self.first = false;
        write_json_str(self.out, key)?;
        self.out.write_char(':')
    }

    pub fn u64(&mut self, key: &str, value: u64) -> fmt::Result {
        self.key(key)?;
        write!(self.out, "{value}")
    }

    /// A fixed-point number with `decimals` digits after the point.
    pub fn fixed(&mut self, key: &str, value_milli: u64, decimals: u32) -> fmt::Result {
        self.key(key)?;
        let scale = 10u64.pow(decimals);
        write!(
            self.out,
            "{}.{:0width$}",
            value_milli / scale,
            value_milli % scale,
            width = decimals as usize
        )
    }

    pub fn str(&mut self, key: &str, value: &str) -> fmt::Result {
        self.key(key)?;
        write_json_str(self.out, value)
    }

    pub fn bool(&mut self, key: &str, value: bool) -> fmt::Result {
        self.key(key)?;
        self.out.write_str(if value { "true" } else { "false" })
    }

    pub fn u64_array(&mut self, key: &str, values: impl IntoIterator<Item = u64>) -> fmt::Result {
        self.key(key)?;
        self.out.write_char('[')?;
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.write_char(',')?;
            }
            write!(self.out, "{v}")?;
        }
        self.out.write_char(']')
    }

    pub fn end(self) -> fmt::Result {
        self.out.write_char('}')
    }
}

fn write_json_str<W: Write>(out: &mut W, s: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn timestamp_like_dmesg() {
        assert_eq!(
            alloc::format!("{}", Timestamp(33_176_000)),
            "[    0.033176]"
        );
        assert_eq!(
            alloc::format!("{}", Timestamp(123_456_789_999)),
            "[  123.456789]"
        );
    }

    #[test]
    fn json_object_is_valid_json() {
        let mut s = String::new();
        let mut o = JsonObject::begin(&mut s).unwrap();
        o.u64("mem_bytes", 1 << 30).unwrap();
        o.fixed("tsc_mhz", 2_495_999, 3).unwrap();
        o.str("status", "bad \"q\"\n").unwrap();
        o.bool("ok", true).unwrap();
        o.u64_array("a", [1, 2]).unwrap();
        o.u64_array("e", []).unwrap();
        o.end().unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["mem_bytes"], 1u64 << 30);
        assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2495.999);
        assert_eq!(v["status"], "bad \"q\"\n");
        assert_eq!(v["a"][1], 2);
        assert!(v["e"].as_array().unwrap().is_empty());
    }
}
