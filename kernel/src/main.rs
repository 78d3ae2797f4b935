//! memboot kernel entry and boot flow.
//!
//! The boot's order is documented where its flow is (`hw::boot`).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("memboot-kernel runs on x86_64-unknown-none only: use ./run-qemu.sh");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
#[macro_use]
mod hw;
