//! ACPI table parsing (in progress).
