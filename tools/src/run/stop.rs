//! How run-qemu.sh ends: its exit codes, its messages, and why it stops
//! before QEMU.

use super::args;

/// run-qemu.sh's exit codes (README "Exit codes").
pub mod exit {
    pub const OK: u8 = 0;
    pub const KERNEL: u8 = 1;
    pub const QEMU: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const SETUP: u8 = 4;
    pub const ABOVE_BASELINE: u8 = 5;
    pub const USAGE: u8 = 64;
}

/// A message to the user, on standard error.
pub fn note(message: &str) {
    eprintln!("run-qemu.sh: {message}");
}

/// Why run-qemu.sh stops before QEMU: a usage error (or a guest this host
/// cannot hold), or a setup failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    Usage(String),
    Setup(String),
}

impl Stop {
    pub fn exit_code(&self) -> u8 {
        match self {
            Stop::Usage(_) => exit::USAGE,
            Stop::Setup(_) => exit::SETUP,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            Stop::Usage(m) | Stop::Setup(m) => m,
        }
    }
}

impl From<args::Usage> for Stop {
    fn from(u: args::Usage) -> Self {
        Stop::Usage(u.0)
    }
}
