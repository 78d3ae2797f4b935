//! Where the repository's build outputs are.

use std::path::{Path, PathBuf};

/// Where the repository's build outputs are.
pub struct Paths {
    pub root: PathBuf,
}

impl Paths {
    /// The repository this tool was built from (`tools/`'s parent).
    pub fn of_this_build() -> Paths {
        let host = Path::new(env!("CARGO_MANIFEST_DIR"));
        Paths {
            root: host.parent().unwrap_or(host).to_path_buf(),
        }
    }
    /// The kernel ELF with its debug info (symbols for --profile).
    pub fn kernel_elf(&self) -> PathBuf {
        self.root
            .join("target/kernel/x86_64-unknown-none/release/memboot-kernel")
    }
    pub fn image_dir(&self) -> PathBuf {
        self.root.join("target/images")
    }
    /// The stripped copy QEMU's -kernel loads and the disk images carry.
    pub fn boot_elf(&self) -> PathBuf {
        self.image_dir().join("memboot-kernel.elf")
    }
    /// A host tool of the release build (memboot-tap, memboot-plot, …).
    pub fn tool(&self, name: &str) -> PathBuf {
        self.root.join("target/release").join(name)
    }
    /// --profile's TCG plugin.
    pub fn profile_plugin(&self) -> PathBuf {
        self.tool("libmemboot_profile.so")
    }
}
