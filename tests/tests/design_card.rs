//! What the design card fixes, checked on the tree: the kernel logs through
//! the `uart_16550` crate and reads CPUID through `raw-cpuid` (and has no
//! hand-written UART or CPUID code left), and the kernel build settings live
//! once, in `.cargo/config.toml`, used by run-qemu.sh and `.ci/run`.

use std::process::Command;

use memboot_tests::repo_root;

fn read(path: &str) -> String {
    let full = repo_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn kernel_depends_on_the_card_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "tree",
            "-p",
            "memboot-kernel",
            "--target",
            "x86_64-unknown-none",
        ])
        .args(["-e", "normal", "--prefix", "none", "--offline"])
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for krate in [
        "uart_16550 v0.9",
        "raw-cpuid v11",
        "x86_64 v",
        "bootloader_api v",
        "spin v",
        "linked_list_allocator v",
    ] {
        assert!(
            tree.lines().any(|l| l.starts_with(krate)),
            "cargo tree lacks {krate}:\n{tree}"
        );
    }
}

#[test]
fn no_hand_written_uart_or_cpuid() {
    let serial = read("kernel/src/hw/serial.rs");
    // The old driver programmed the 16550's registers through x86_64's Port.
    assert!(
        !serial.contains("Port::"),
        "kernel/src/hw/serial.rs writes UART registers itself"
    );
    assert!(
        serial.contains("uart_16550::"),
        "kernel/src/hw/serial.rs does not use uart_16550"
    );
    let dir = repo_root().join("kernel/src");
    let mut stack = vec![dir];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    !text.contains("__cpuid"),
                    "{} reads CPUID by hand",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn one_kernel_build_configuration() {
    let config = read(".cargo/config.toml");
    for alias in ["kbuild =", "kcheck =", "kclippy =", "klibs ="] {
        assert!(config.contains(alias), ".cargo/config.toml lacks {alias}");
    }
    let script = read("run-qemu.sh");
    assert!(
        script.contains("cargo kbuild"),
        "run-qemu.sh does not build through the alias"
    );
    assert!(
        !script.contains("--target x86_64-unknown-none"),
        "run-qemu.sh has its own copy of the kernel flags"
    );
    let ci = read(".ci/run");
    assert!(
        ci.contains("cargo klibs") && ci.contains("cargo kclippy"),
        ".ci/run does not use the aliases"
    );
}
