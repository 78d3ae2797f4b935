//! The `memboot-input:` line read back into a [`BootInput`] (feature
//! `host`): the one parser of the line, for the host pipeline tests
//! (replaying a fixture) and the boot tests (the model's input).
//!
//! Keys the parser does not know are ignored (the contract only adds
//! keys); a key it needs that is missing or of the wrong type is an error
//! naming it.

use std::fmt;
use std::string::{String, ToString};
use std::vec::Vec;

use memmap::firmware::{FirmwareEntry, NodeAffinity};
use serde_json::{Map, Value};

use super::{kind_of_name, BootInput, INPUT_PREFIX};
use crate::image_sizes::ImageSizes;

/// Why a line is not a readable input line.
#[derive(Debug)]
pub enum InputLineError {
    /// The line does not start with [`INPUT_PREFIX`].
    NotAnInputLine,
    /// What follows the prefix is not JSON.
    Json(serde_json::Error),
    /// `key` (a path such as `firmware_map[2].start`) is missing or not
    /// `want`.
    Key { key: String, want: &'static str },
    /// A firmware-map entry's kind is none of the kinds the kernel writes.
    Kind { index: usize, name: String },
}

const RECAPTURE: &str = "re-capture the log with the current kernel (kernel/tests/fixtures/capture.sh for the fixtures)";

impl fmt::Display for InputLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnInputLine => write!(
                f,
                "not a memboot-input line: it must start with `{INPUT_PREFIX}`; pass the line the kernel printed before its pipeline ran (a log from an older kernel has none: {RECAPTURE})"
            ),
            Self::Json(e) => write!(
                f,
                "the memboot-input line is not JSON ({e}): the log is cut or edited; {RECAPTURE}"
            ),
            Self::Key { key, want } => write!(
                f,
                "the memboot-input line's `{key}` is missing or not {want}: the log comes from a kernel with another input contract (README \"Output\"); {RECAPTURE}"
            ),
            Self::Kind { index, name } => write!(
                f,
                "the memboot-input line's `firmware_map[{index}].kind` is `{name}`, not a region kind the kernel writes (usable, bootloader, acpi_reclaimable, acpi_nvs, reserved, unusable); {RECAPTURE}"
            ),
        }
    }
}

impl std::error::Error for InputLineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Json(e) => Some(e),
            _ => None,
        }
    }
}

/// `memboot-input: {json}` (a trailing `\r` of a serial log allowed) →
/// the input it prints.
pub fn parse_line(line: &str) -> Result<BootInput, InputLineError> {
    let json = line
        .trim_end_matches('\r')
        .strip_prefix(INPUT_PREFIX)
        .ok_or(InputLineError::NotAnInputLine)?;
    from_json(json)
}

/// The line's JSON object → the input it prints.
pub fn from_json(json: &str) -> Result<BootInput, InputLineError> {
    let v: Value = serde_json::from_str(json).map_err(InputLineError::Json)?;
    let top = Obj::of(&v, "the line")?;
    let map = top
        .array("firmware_map")?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let e = Obj::of(e, &format!("firmware_map[{i}]"))?;
            let name = e.str("kind")?;
            let kind = kind_of_name(name).ok_or_else(|| InputLineError::Kind {
                index: i,
                name: name.to_string(),
            })?;
            Ok(FirmwareEntry::new(e.u64("start")?, e.u64("length")?, kind))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let srat = match top.get("srat")? {
        Value::Null => None,
        _ => Some(
            top.array("srat")?
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let a = Obj::of(a, &format!("srat[{i}]"))?;
                    Ok(NodeAffinity::new(
                        a.u64("start")?,
                        a.u64("length")?,
                        a.u32("node")?,
                    ))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let cpu_nodes = top
        .array("cpu_nodes")?
        .iter()
        .enumerate()
        .map(|(i, n)| as_u32(n, || format!("cpu_nodes[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let heap = top.obj("heap")?;
    let image = top.obj("image")?;
    let cmdline = top.str("cmdline")?.to_string();
    let (heap_base, heap_bytes) = (heap.u64("base")?, heap.u64("size")?);
    // The boot applied the command line's memmap= forms to the map; a
    // command line or map it refused ran no pipeline to replay.
    let user_map = memboot_contract::options::parse(&cmdline)
        .ok()
        .and_then(|opts| super::user_map(&map, &opts, heap_base, heap_bytes).ok())
        .flatten()
        .map(|m| m.map);
    Ok(BootInput {
        map,
        srat,
        cpu_nodes,
        heap_base,
        heap_bytes,
        phys_addr_bits: top.u32("phys_addr_bits")?,
        under_hypervisor: top.bool("under_hypervisor")?,
        cmdline,
        image: ImageSizes {
            code_bytes: image.u64("code_bytes")?,
            rwdata_bytes: image.u64("rwdata_bytes")?,
            rodata_bytes: image.u64("rodata_bytes")?,
            bss_bytes: image.u64("bss_bytes")?,
        },
        user_map,
        has_1g_pages: true,
    })
}

/// A JSON object and its path in the line, for errors.
struct Obj<'v> {
    fields: &'v Map<String, Value>,
    path: String,
}

impl<'v> Obj<'v> {
    fn of(v: &'v Value, path: &str) -> Result<Self, InputLineError> {
        let fields = v.as_object().ok_or_else(|| InputLineError::Key {
            key: path.to_string(),
            want: "an object",
        })?;
        Ok(Self {
            fields,
            path: path.to_string(),
        })
    }
    fn key(&self, key: &str) -> String {
        if self.path == "the line" {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
    fn wrong(&self, key: &str, want: &'static str) -> InputLineError {
        InputLineError::Key {
            key: self.key(key),
            want,
        }
    }
    fn get(&self, key: &str) -> Result<&'v Value, InputLineError> {
        self.fields
            .get(key)
            .ok_or_else(|| self.wrong(key, "present"))
    }
    fn u64(&self, key: &str) -> Result<u64, InputLineError> {
        self.get(key)?
            .as_u64()
            .ok_or_else(|| self.wrong(key, "an unsigned 64-bit integer"))
    }
    fn u32(&self, key: &str) -> Result<u32, InputLineError> {
        as_u32(self.get(key)?, || self.key(key))
    }
    fn bool(&self, key: &str) -> Result<bool, InputLineError> {
        self.get(key)?
            .as_bool()
            .ok_or_else(|| self.wrong(key, "true or false"))
    }
    fn str(&self, key: &str) -> Result<&'v str, InputLineError> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| self.wrong(key, "a string"))
    }
    fn array(&self, key: &str) -> Result<&'v Vec<Value>, InputLineError> {
        self.get(key)?
            .as_array()
            .ok_or_else(|| self.wrong(key, "an array"))
    }
    fn obj(&self, key: &str) -> Result<Obj<'v>, InputLineError> {
        Obj::of(self.get(key)?, &self.key(key))
    }
}

fn as_u32(v: &Value, key: impl FnOnce() -> String) -> Result<u32, InputLineError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| InputLineError::Key {
            key: key(),
            want: "an unsigned 32-bit integer",
        })
}

#[cfg(test)]
mod tests {
    use super::super::tests::two_node_input;
    use super::super::write_input_line;
    use super::*;

    fn line_of(input: &BootInput) -> String {
        let mut line = String::new();
        write_input_line(&mut line, input).unwrap();
        line
    }

    /// struct → line → struct, for a machine with SRAT and one without,
    /// and the largest values each field holds.
    #[test]
    fn the_line_reads_back_as_the_input_it_prints() {
        let input = two_node_input();
        assert_eq!(parse_line(&line_of(&input)).unwrap(), input);
        // As a serial log carries it.
        let logged = line_of(&input) + "\r";
        assert_eq!(parse_line(&logged).unwrap(), input);

        let mut bare = two_node_input();
        bare.srat = None;
        bare.cpu_nodes = std::vec![0];
        bare.cmdline = String::new();
        bare.under_hypervisor = false;
        bare.image = ImageSizes::default();
        assert_eq!(parse_line(&line_of(&bare)).unwrap(), bare);

        let mut empty_srat = two_node_input();
        empty_srat.srat = Some(Vec::new());
        assert_eq!(parse_line(&line_of(&empty_srat)).unwrap(), empty_srat);

        let mut extremes = two_node_input();
        extremes.map.push(FirmwareEntry::new(
            u64::MAX - 1,
            u64::MAX,
            memmap::firmware::RegionKind::Reserved,
        ));
        extremes.cpu_nodes = std::vec![u32::MAX];
        extremes.heap_bytes = u64::MAX;
        extremes.phys_addr_bits = u32::MAX;
        extremes.cmdline = "ünïcode \\ \u{1} end".to_string();
        assert_eq!(parse_line(&line_of(&extremes)).unwrap(), extremes);
    }

    #[test]
    fn a_line_that_is_not_the_contract_is_an_error_naming_what() {
        let good = line_of(&two_node_input());
        let err = |line: &str| parse_line(line).unwrap_err().to_string();
        assert!(err(&good[1..]).contains("must start with `memboot-input: `"));
        assert!(err(&good[..good.len() - 1]).contains("not JSON"));
        let e = err(&good.replace("\"kind\":\"acpi_nvs\"", "\"kind\":\"ACPI NVS\""));
        assert!(e.contains("firmware_map[6].kind` is `ACPI NVS`"), "{e}");
        let e = err(&good.replace("\"size\":", "\"bytes\":"));
        assert!(e.contains("`heap.size` is missing"), "{e}");
        let e = err(&good.replace("\"node\":1", "\"node\":-1"));
        assert!(e.contains("`srat[2].node`") && e.contains("32-bit"), "{e}");
        let e = err(&good.replace("[0,0,1]", "[0,4294967296,1]"));
        assert!(e.contains("`cpu_nodes[1]`"), "{e}");
        let e = err(&good.replace("\"under_hypervisor\":true", "\"under_hypervisor\":1"));
        assert!(
            e.contains("`under_hypervisor`") && e.contains("true or false"),
            "{e}"
        );
        assert!(e.contains("capture.sh"), "says what to do: {e}");
    }

    #[test]
    fn keys_the_parser_does_not_know_are_ignored() {
        let input = two_node_input();
        let line = line_of(&input).replacen('{', "{\"added_later\":[1,{}],", 1);
        assert_eq!(parse_line(&line).unwrap(), input);
    }
}
