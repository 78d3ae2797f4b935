#![cfg_attr(target_os = "none", no_std, no_main)]
#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("memboot-kernel runs on x86_64-unknown-none only: use ./run-qemu.sh");
    std::process::exit(2);
}
#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }
