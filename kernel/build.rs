//! Links the bare-metal kernel binary through `linker.ld` (fixed addresses,
//! one image for the bootloader and for QEMU's PVH loader). The host build
//! of the library and its tests links as usual.

fn main() {
    println!("cargo:rerun-if-changed=linker.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo:rustc-link-arg-bin=memboot-kernel=-T{dir}/linker.ld");
        // No read-only-after-relocation segment: nothing relocates this
        // image, and the GOT the linker filled in sits with .data.
        println!("cargo:rustc-link-arg-bin=memboot-kernel=-znorelro");
    }
}
