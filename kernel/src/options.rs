//! Kernel options: the command line that run-qemu.sh hands over through
//! QEMU's fw_cfg file `opt/memboot/cmdline`.
//!
//! Syntax: whitespace-separated `key=value` tokens. Every key is known and
//! every value checked: an unknown key, a bad value or a repeated key is an
//! [`OptionError`] and the boot fails with that message, because a silently
//! ignored option would make a measurement lie about what it measured.

use core::fmt;

/// A fault the kernel raises on purpose, so tests can check that the
/// exception path reports and exits instead of hanging or rebooting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TestFault {
    #[default]
    None,
    /// `panic!` from kernel code.
    Panic,
    /// Read from an unmapped address (#PF, vector 14).
    PageFault,
    /// `ud2` (#UD, vector 6).
    InvalidOpcode,
}

/// Parsed kernel options; `Default` is what an empty command line gives.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Options {
    pub test_fault: TestFault,
}

/// Why a command line was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionError<'a> {
    /// A token without `=`.
    Malformed { token: &'a str },
    /// A key memboot does not know.
    UnknownKey { key: &'a str },
    /// A known key with a value it does not accept.
    BadValue {
        key: &'a str,
        value: &'a str,
        expected: &'static str,
    },
    /// The same key twice: which one was meant is ambiguous.
    Repeated { key: &'a str },
}

impl fmt::Display for OptionError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Malformed { token } => {
                write!(
                    f,
                    "option '{token}' is not of the form key=value (known keys: {KNOWN_KEYS})"
                )
            }
            OptionError::UnknownKey { key } => {
                write!(f, "unknown option '{key}' (known keys: {KNOWN_KEYS})")
            }
            OptionError::BadValue {
                key,
                value,
                expected,
            } => {
                write!(f, "option {key}={value}: expected {expected}")
            }
            OptionError::Repeated { key } => write!(f, "option '{key}' given more than once"),
        }
    }
}

/// Keys accepted on the command line, for error messages and the README.
pub const KNOWN_KEYS: &str = "test_fault";

/// Parse a kernel command line.
pub fn parse(cmdline: &str) -> Result<Options, OptionError<'_>> {
    let mut options = Options::default();
    let mut seen_test_fault = false;
    for token in cmdline.split_ascii_whitespace() {
        let (key, value) = token
            .split_once('=')
            .ok_or(OptionError::Malformed { token })?;
        match key {
            "test_fault" => {
                if core::mem::replace(&mut seen_test_fault, true) {
                    return Err(OptionError::Repeated { key });
                }
                options.test_fault = match value {
                    "none" => TestFault::None,
                    "panic" => TestFault::Panic,
                    "page_fault" => TestFault::PageFault,
                    "invalid_opcode" => TestFault::InvalidOpcode,
                    _ => {
                        return Err(OptionError::BadValue {
                            key,
                            value,
                            expected: "none|panic|page_fault|invalid_opcode",
                        })
                    }
                };
            }
            _ => return Err(OptionError::UnknownKey { key }),
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(parse("").unwrap(), Options::default());
        assert_eq!(parse("  \n ").unwrap(), Options::default());
    }

    #[test]
    fn parses_test_fault() {
        assert_eq!(
            parse("test_fault=page_fault").unwrap().test_fault,
            TestFault::PageFault
        );
        assert_eq!(
            parse(" test_fault=panic ").unwrap().test_fault,
            TestFault::Panic
        );
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(
            parse("bogus=1"),
            Err(OptionError::UnknownKey { key: "bogus" })
        );
        assert_eq!(
            parse("test_fault"),
            Err(OptionError::Malformed {
                token: "test_fault"
            })
        );
        assert!(matches!(
            parse("test_fault=sometimes"),
            Err(OptionError::BadValue { .. })
        ));
        assert_eq!(
            parse("test_fault=none test_fault=panic"),
            Err(OptionError::Repeated { key: "test_fault" })
        );
        let msg = alloc::format!("{}", parse("x=1").unwrap_err());
        assert!(
            msg.contains("unknown option 'x'") && msg.contains("test_fault"),
            "{msg}"
        );
    }
}
