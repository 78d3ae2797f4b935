//! A JSON object written field by field into any [`fmt::Write`], with no
//! buffer and no allocation: the kernel writes its summary this way from
//! the panic path.

use core::fmt::{self, Write};

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

    /// A fixed-point number: `value / 10^decimals`, with `decimals` digits
    /// after the point.
    pub fn fixed(&mut self, key: &str, value: u64, decimals: u32) -> fmt::Result {
        self.key(key)?;
        let scale = 10u64.pow(decimals);
        write!(
            self.out,
            "{}.{:0width$}",
            value / scale,
            value % scale,
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

    /// `"key":null`: a value the boot does not have (not the same as an
    /// empty array or object).
    pub fn null(&mut self, key: &str) -> fmt::Result {
        self.key(key)?;
        self.out.write_str("null")
    }

    /// A nested object, written by `fields`.
    pub fn object(
        &mut self,
        key: &str,
        fields: impl FnOnce(&mut JsonObject<'_, W>) -> fmt::Result,
    ) -> fmt::Result {
        self.key(key)?;
        let mut o = JsonObject::begin(&mut *self.out)?;
        fields(&mut o)?;
        o.end()
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

    /// An array of objects, each written by `item`.
    pub fn objects<T>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = T>,
        mut item: impl FnMut(&mut JsonObject<'_, W>, T) -> fmt::Result,
    ) -> fmt::Result {
        self.key(key)?;
        self.out.write_char('[')?;
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.write_char(',')?;
            }
            let mut o = JsonObject::begin(&mut *self.out)?;
            item(&mut o, v)?;
            o.end()?;
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
    fn json_object_is_valid_json() {
        let mut s = String::new();
        let mut o = JsonObject::begin(&mut s).unwrap();
        o.u64("mem_bytes", 1 << 30).unwrap();
        o.fixed("tsc_mhz", 2_495_999, 3).unwrap();
        o.str("status", "bad \"q\"\n").unwrap();
        o.bool("ok", true).unwrap();
        o.u64_array("a", [1, 2]).unwrap();
        o.u64_array("e", []).unwrap();
        o.null("n").unwrap();
        o.object("o", |o| {
            o.u64("x", 1)?;
            o.object("inner", |o| o.bool("y", false))
        })
        .unwrap();
        o.object("empty", |_| Ok(())).unwrap();
        o.end().unwrap();
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["mem_bytes"], 1u64 << 30);
        assert_eq!(v["tsc_mhz"].as_f64().unwrap(), 2495.999);
        assert_eq!(v["status"], "bad \"q\"\n");
        assert_eq!(v["a"][1], 2);
        assert!(v["e"].as_array().unwrap().is_empty());
        assert!(v["n"].is_null() && v.get("n").is_some());
        assert_eq!(v["o"], serde_json::json!({"x": 1, "inner": {"y": false}}));
        assert_eq!(v["empty"], serde_json::json!({}));
        assert_eq!(v.as_object().unwrap().len(), 9, "{s}");
    }
}
