//! tests/apt-install.sh never removes a package silently: run against a
//! fake `apt-get` first on PATH, which answers `--simulate` with the plan
//! given and records every other call, it must refuse a plan with
//! removals (exit 3, naming them) unless CI=true or
//! MEMBOOT_APT_ALLOW_REMOVE=1, and install a plan without.

use std::path::{Path, PathBuf};
use std::process::Command;

use memboot_tests::repo_root;

/// A scratch directory with a fake `apt-get` whose `--simulate` prints
/// `plan`; its other calls are appended to `calls`.
fn fake_apt(name: &str, plan: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memboot-apt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plan"), plan).unwrap();
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in\n*\" --simulate \"*) cat '{0}/plan' ;;\n*) echo \"$*\" >>'{0}/calls' ;;\nesac\n",
        dir.display()
    );
    let apt = dir.join("apt-get");
    std::fs::write(&apt, script).unwrap();
    let mut perms = std::fs::metadata(&apt).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&apt, perms).unwrap();
    dir
}

/// tests/apt-install.sh qemu-system-x86 with `dir`'s apt-get first on
/// PATH and `env` set (CI and MEMBOOT_APT_ALLOW_REMOVE unset otherwise):
/// its exit code, stderr, and the apt-get calls besides --simulate.
fn install(dir: &Path, env: &[(&str, &str)]) -> (i32, String, Vec<String>) {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let mut cmd = Command::new(repo_root().join("tests/apt-install.sh"));
    cmd.arg("qemu-system-x86")
        .env("PATH", path)
        .env_remove("CI")
        .env_remove("MEMBOOT_APT_ALLOW_REMOVE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap_or_default();
    let _ = std::fs::remove_file(dir.join("calls"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        calls.lines().map(str::to_string).collect(),
    )
}

/// What apt printed on this fleet's machine image (a backported qemu-utils
/// 10.0 conflicts with Debian 12's QEMU 7.2), trimmed.
const PLAN_WITH_REMOVAL: &str = "\
Reading package lists...
Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]
Inst libfdt1 (1.6.1-4+b1 Debian:12.14/oldstable [amd64])
Inst qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.14/oldstable [amd64])
Conf qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.14/oldstable [amd64])
";

#[test]
fn a_removal_is_refused_unless_allowed_and_named_either_way() {
    let dir = fake_apt("removal", PLAN_WITH_REMOVAL);
    let (code, stderr, calls) = install(&dir, &[]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("would remove qemu-utils"), "{stderr}");
    assert!(stderr.contains("MEMBOOT_APT_ALLOW_REMOVE=1"), "{stderr}");
    assert!(
        !calls.iter().any(|c| c.starts_with("install")),
        "installed anyway: {calls:?}"
    );
    for env in [("CI", "true"), ("MEMBOOT_APT_ALLOW_REMOVE", "1")] {
        let (code, stderr, calls) = install(&dir, &[env]);
        assert_eq!(code, 0, "{env:?}: {stderr}");
        assert!(stderr.contains("removes qemu-utils"), "{env:?}: {stderr}");
        assert!(
            calls
                .iter()
                .any(|c| c.contains("install -y") && c.contains("qemu-system-x86")),
            "{env:?}: {calls:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_plan_without_removals_installs() {
    let plan: String = PLAN_WITH_REMOVAL
        .lines()
        .filter(|l| !l.starts_with("Remv"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = fake_apt("plain", &plan);
    let (code, stderr, calls) = install(&dir, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("remove"), "{stderr}");
    assert!(calls.iter().any(|c| c.contains("install -y")), "{calls:?}");
    let _ = std::fs::remove_dir_all(dir);
}
