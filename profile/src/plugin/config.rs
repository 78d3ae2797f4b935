//! The plugin's arguments, as QEMU passes them: `out=`, `threads=`,
//! `phase=` and `until=`.

use crate::raw;
use crate::tracker::{Threads, MAX_PHASES};

/// The plugin's arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub out: String,
    pub threads: Threads,
    /// (name, entry addresses), in the order given.
    pub phases: Vec<(String, Vec<u64>)>,
    /// (phase index, addresses): the first instruction at one of them
    /// closes every open frame of the phase (a phase that ends at a point
    /// of the boot, not at a return).
    pub until: Vec<(usize, Vec<u64>)>,
}

impl Config {
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Config, String> {
        let (mut out, mut threads, mut phases) = (None, None, Vec::new());
        let mut until_args = Vec::new();
        for arg in args {
            match arg.split_once('=') {
                Some(("out", v)) => out = Some(v.to_string()),
                Some(("threads", v)) => threads = Some(Threads::parse(v)?),
                Some(("phase", v)) => {
                    let mut parts = v.split(':');
                    let name = parts
                        .next()
                        .filter(|n| !n.is_empty())
                        .ok_or(format!("phase={v}: no name"))?;
                    let entries = parts
                        .map(|a| {
                            raw::hex(a).ok_or(format!("phase={v}: '{a}' is not a 0x… address"))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    if entries.is_empty() {
                        return Err(format!("phase={v}: no entry address"));
                    }
                    phases.push((name.to_string(), entries));
                }
                Some(("until", v)) => until_args.push(v),
                _ => {
                    return Err(format!(
                        "unknown argument '{arg}' (out=, threads=, phase=, until=)"
                    ))
                }
            }
        }
        if phases.len() > MAX_PHASES {
            return Err(format!("{} phases: at most {MAX_PHASES}", phases.len()));
        }
        let mut until = Vec::new();
        for v in until_args {
            let mut parts = v.split(':');
            let name = parts.next().unwrap_or_default();
            let ph = phases
                .iter()
                .position(|(n, _)| n == name)
                .ok_or(format!("until={v}: no phase={name} before it"))?;
            let marks = parts
                .map(|a| raw::hex(a).ok_or(format!("until={v}: '{a}' is not a 0x… address")))
                .collect::<Result<Vec<_>, _>>()?;
            if marks.is_empty() {
                return Err(format!("until={v}: no address"));
            }
            until.push((ph, marks));
        }
        Ok(Config {
            out: out.ok_or("out=FILE is required")?,
            threads: threads.ok_or("threads=cpu|stack:BYTES is required")?,
            phases,
            until,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let c = Config::parse([
            "out=/tmp/x",
            "threads=stack:16384",
            "phase=deferred:0x10:0x20",
            "phase=boot:0x30",
            "until=boot:0x40:0x50",
        ])
        .unwrap();
        assert_eq!(c.until, vec![(1, vec![0x40, 0x50])]);
        assert_eq!(c.out, "/tmp/x");
        assert_eq!(c.threads, Threads::Stack { shift: 14 });
        assert_eq!(
            c.phases,
            vec![
                ("deferred".to_string(), vec![0x10, 0x20]),
                ("boot".to_string(), vec![0x30])
            ]
        );
        for (args, why) in [
            (&["threads=cpu"][..], "out=FILE is required"),
            (&["out=x"], "threads="),
            (
                &["out=x", "threads=cpu", "phase=deferred"],
                "no entry address",
            ),
            (&["out=x", "threads=cpu", "phase=d:10"], "not a 0x… address"),
            (&["out=x", "threads=cpu", "verbose"], "unknown argument"),
            (
                &["out=x", "threads=cpu", "until=boot:0x40"],
                "no phase=boot before it",
            ),
            (
                &["out=x", "threads=cpu", "phase=boot:0x30", "until=boot"],
                "no address",
            ),
        ] {
            let e = Config::parse(args.iter().copied()).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
        }
    }
}
