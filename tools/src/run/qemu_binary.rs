//! Which QEMU a boot runs: the binary (`--qemu`, MEMBOOT_QEMU, or the
//! machine's), its version, checked against the machine type every boot
//! pins, and under KVM the CPU features `-cpu host` must leave off for this
//! host's KVM to take it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::args::Args;
use super::stop::{note, Stop};

/// The environment variable that chooses the QEMU binary when `--qemu`
/// does not.
pub const QEMU_ENV: &str = "MEMBOOT_QEMU";
/// The machine's QEMU, found on PATH.
pub const DEFAULT_QEMU: &str = "qemu-system-x86_64";

/// The machine type every boot pins on every QEMU version: the one QEMU
/// 7.2 calls `pc`, so a newer QEMU builds the same virtual machine (its own
/// `pc` is its newest i440FX type, whose defaults may differ).
pub const MACHINE_TYPE: &str = "pc-i440fx-7.2";
/// The oldest QEMU that has [`MACHINE_TYPE`].
pub const MIN_VERSION: (u32, u32) = (7, 2);

/// The QEMU chosen: `--qemu`'s `flag`, else `env` (MEMBOOT_QEMU's value,
/// if set and not empty); `None`: the machine's.
pub fn choose(flag: Option<PathBuf>, env: Option<String>) -> Option<PathBuf> {
    flag.or_else(|| env.filter(|e| !e.is_empty()).map(PathBuf::from))
}

/// The binary `args` boot with: the one chosen, else the machine's.
pub fn binary(args: &Args) -> PathBuf {
    args.qemu
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_QEMU))
}

/// Where `binary` is: itself if it names a directory, else the first
/// match on PATH (itself if none).
pub fn resolve(binary: &Path) -> PathBuf {
    if binary.components().count() > 1 {
        return binary.to_path_buf();
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
        .unwrap_or_else(|| binary.to_path_buf())
}

/// A QEMU's version, from the first line `--version` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub micro: u32,
    /// The line as printed ("QEMU emulator version 10.0.2 (Debian …)").
    pub line: String,
}

impl Version {
    /// `--version`'s output: "QEMU emulator version X.Y.Z[ (package)]".
    pub fn parse(text: &str) -> Option<Version> {
        let line = text.lines().next()?.trim();
        let rest = line.strip_prefix("QEMU emulator version ")?;
        let number = rest.split_whitespace().next()?;
        let mut parts = number.split('.').map(|p| p.parse::<u32>());
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let micro = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(Version {
            major,
            minor,
            micro,
            line: line.to_string(),
        })
    }

    /// "major.minor.micro".
    pub fn number(&self) -> String {
        format!("{}.{}.{}", self.major, self.minor, self.micro)
    }

    /// The refusal of a QEMU older than [`MIN_VERSION`], if it is.
    pub fn check(&self, binary: &Path) -> Result<(), Stop> {
        if (self.major, self.minor) < MIN_VERSION {
            let (major, minor) = MIN_VERSION;
            return Err(Stop::Setup(format!(
                "{} is QEMU {}: memboot pins the machine type {MACHINE_TYPE}, which QEMU has from {major}.{minor} on; install QEMU {major}.{minor} or newer, or pass --qemu PATH (tests/qemu-peer.sh prints one)",
                binary.display(),
                self.number()
            )));
        }
        Ok(())
    }
}

/// `binary --version`, read.
pub fn version_of(binary: &Path) -> Result<Version, Stop> {
    let out = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Stop::Setup(format!(
                "cannot run {} ({e}): install QEMU (apt-get install qemu-system-x86) or pass --qemu PATH",
                binary.display()
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    Version::parse(&text).ok_or_else(|| {
        Stop::Setup(format!(
            "{} --version printed no 'QEMU emulator version X.Y.Z' line: is it QEMU? ({})",
            binary.display(),
            text.lines().next().unwrap_or("").trim()
        ))
    })
}

/// The MSRs a host's KVM has been seen to refuse for `-cpu host`, and the
/// CPU feature (QEMU's name) that makes QEMU set each. A nested KVM may
/// report `arch-capabilities` in CPUID yet refuse the MSR it names.
const REFUSED_MSRS: &[(u32, &str)] = &[(0x10a, "arch-capabilities")];

/// The MSR of QEMU's "failed to set MSR 0x… to 0x…" (kvm_buf_set_msrs,
/// before it asserts), if `stderr` has one.
pub fn refused_msr(stderr: &str) -> Option<u32> {
    let at = stderr.find("failed to set MSR 0x")?;
    let hex: String = stderr[at + "failed to set MSR 0x".len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u32::from_str_radix(&hex, 16).ok()
}

/// The feature to leave off for a refused `msr`, or the refusal.
pub fn feature_of_msr(msr: u32) -> Result<&'static str, Stop> {
    REFUSED_MSRS
        .iter()
        .find(|(m, _)| *m == msr)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            Stop::Setup(format!(
                "KVM refused MSR {msr:#x} for -cpu host (QEMU: 'failed to set MSR {msr:#x}'), which memboot does not know a CPU feature for: boot under TCG (the default), or name the feature in tools/src/run/qemu_binary.rs REFUSED_MSRS"
            ))
        })
}

/// `-cpu host` less `off`, as QEMU reads it.
pub fn host_cpu(off: &[&str]) -> String {
    let mut cpu = String::from("host");
    for f in off {
        cpu += ",-";
        cpu += f;
    }
    cpu
}

/// The features `-cpu host` must leave off for this host's KVM: QEMU is
/// started paused with a 64 MiB machine, which sets every vCPU's MSRs,
/// and told to quit; while KVM refuses an MSR (QEMU asserts), the feature
/// behind it goes off and QEMU is asked again. Each one left off is said.
pub fn kvm_features_off(binary: &Path) -> Result<Vec<&'static str>, Stop> {
    let mut off: Vec<&'static str> = Vec::new();
    loop {
        let cpu = host_cpu(&off);
        let mut probe = Command::new(binary)
            .args(["-machine", MACHINE_TYPE, "-accel", "kvm", "-cpu", &cpu])
            .args(["-m", "64", "-display", "none", "-nodefaults", "-S"])
            .args(["-monitor", "stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Stop::Setup(format!("cannot run {}: {e}", binary.display())))?;
        if let Some(mut stdin) = probe.stdin.take() {
            let _ = stdin.write_all(b"quit\n");
        }
        let out = probe
            .wait_with_output()
            .map_err(|e| Stop::Setup(format!("{}: {e}", binary.display())))?;
        if out.status.success() {
            return Ok(off);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let Some(msr) = refused_msr(&stderr) else {
            return Err(Stop::Setup(format!(
                "QEMU could not start a KVM guest with -cpu {cpu}: {}",
                stderr.trim()
            )));
        };
        let feature = feature_of_msr(msr)?;
        if off.contains(&feature) {
            return Err(Stop::Setup(format!(
                "KVM still refuses MSR {msr:#x} with -cpu {cpu}: {}",
                stderr.trim()
            )));
        }
        note(&format!(
            "--accel kvm: this host's KVM refuses MSR {msr:#x} ({feature}) for -cpu host; booting with -cpu {}",
            host_cpu(&[&off[..], &[feature]].concat())
        ));
        off.push(feature);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_over_the_environment() {
        let flag = Some(PathBuf::from("/a/qemu"));
        assert_eq!(choose(flag.clone(), Some("/b/qemu".into())), flag);
        assert_eq!(choose(None, Some("/b/qemu".into())), Some("/b/qemu".into()));
        assert_eq!(choose(None, Some(String::new())), None);
        assert_eq!(choose(None, None), None);
    }

    #[test]
    fn versions_as_debian_and_upstream_print_them() {
        let v = Version::parse("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n").unwrap();
        assert_eq!((v.major, v.minor, v.micro), (10, 0, 2));
        assert_eq!(
            v.line,
            "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"
        );
        let v = Version::parse("QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18+b3)")
            .unwrap();
        assert_eq!(v.number(), "7.2.19");
        assert!(v.check(Path::new("q")).is_ok());
        let v = Version::parse("QEMU emulator version 8.2").unwrap();
        assert_eq!(v.number(), "8.2.0");
        assert!(Version::parse("qemu-img version 10.0.2").is_none());
        assert!(Version::parse("").is_none());
    }

    #[test]
    fn older_than_the_pinned_machine_type_is_refused() {
        for (text, refused) in [
            ("QEMU emulator version 7.1.0", true),
            (
                "QEMU emulator version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6)",
                true,
            ),
            ("QEMU emulator version 7.2.0", false),
            ("QEMU emulator version 8.0.0", false),
            ("QEMU emulator version 10.0.2", false),
        ] {
            let v = Version::parse(text).unwrap();
            match v.check(Path::new("/usr/bin/qemu")) {
                Err(Stop::Setup(m)) => {
                    assert!(refused, "{text}");
                    assert!(m.contains("pc-i440fx-7.2") && m.contains("--qemu"), "{m}");
                }
                Err(other) => panic!("{other:?}"),
                Ok(()) => assert!(!refused, "{text}"),
            }
        }
    }

    #[test]
    fn a_refused_msr_names_its_feature() {
        let stderr = "qemu-system-x86_64: error: failed to set MSR 0x10a to 0xc000069\nqemu-system-x86_64: ../target/i386/kvm/kvm.c:3849: kvm_buf_set_msrs: Assertion `ret == cpu->kvm_msr_buf->nmsrs' failed.\n";
        assert_eq!(refused_msr(stderr), Some(0x10a));
        assert_eq!(feature_of_msr(0x10a).unwrap(), "arch-capabilities");
        assert_eq!(refused_msr("could not access KVM kernel module"), None);
        match feature_of_msr(0x48) {
            Err(Stop::Setup(m)) => assert!(m.contains("0x48"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(host_cpu(&[]), "host");
        assert_eq!(
            host_cpu(&["arch-capabilities", "x"]),
            "host,-arch-capabilities,-x"
        );
    }
}
