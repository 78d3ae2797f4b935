//! `memboot-image KERNEL_ELF OUT_DIR`: writes `OUT_DIR/memboot-bios.img` and
//! `OUT_DIR/memboot-uefi.img` for the given kernel, each only when it is older
//! than the kernel (or missing).
//!
//! Boot config: framebuffer logging off and log level Warn, because the
//! bootloader's framebuffer logger costs seconds under TCG; serial logging
//! stays on so bootloader warnings land in the same log as the kernel's.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bootloader::{BiosBoot, BootConfig, UefiBoot};
use bootloader_boot_config::LevelFilter;

fn is_stale(out: &Path, kernel: &Path) -> bool {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(out), mtime(kernel), mtime(&std::env::current_exe().unwrap_or_default())) {
        (Some(o), Some(k), Some(me)) => o < k || o < me,
        _ => true,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: memboot-image KERNEL_ELF OUT_DIR");
        return ExitCode::from(2);
    }
    let kernel = PathBuf::from(&args[1]);
    let out_dir = PathBuf::from(&args[2]);
    if !kernel.is_file() {
        eprintln!("memboot-image: kernel ELF {} not found", kernel.display());
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("memboot-image: cannot create {}: {e}", out_dir.display());
        return ExitCode::from(2);
    }
    let mut config = BootConfig::default();
    config.frame_buffer_logging = false;
    config.serial_logging = true;
    config.log_level = LevelFilter::Warn;

    let bios = out_dir.join("memboot-bios.img");
    if is_stale(&bios, &kernel) {
        if let Err(e) = BiosBoot::new(&kernel).set_boot_config(&config).create_disk_image(&bios) {
            eprintln!("memboot-image: BIOS image: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let uefi = out_dir.join("memboot-uefi.img");
    if is_stale(&uefi, &kernel) {
        if let Err(e) = UefiBoot::new(&kernel).set_boot_config(&config).create_disk_image(&uefi) {
            eprintln!("memboot-image: UEFI image: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
