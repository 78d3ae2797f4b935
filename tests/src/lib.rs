//! Helpers for booting memboot under QEMU (see tests/tests/).
