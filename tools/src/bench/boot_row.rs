//! One boot's row, read from its serial log: memboot's summary line or a
//! Linux peer's dmesg, and what run-qemu.sh wrote beside it.

use memboot_contract::summary::Summary;

use super::entries::{is_linux, linux_series, size_mib};
use crate::hugetlb_log::{self, HugeSize};
use crate::linux_log;
use crate::run::cpu_time::{most_waited_ns, ENTRY_TO_READY, LAST_CPU_UP_TO_READY};

/// One boot's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: String,
    pub mem_mib: u64,
    /// "memboot" or "linux".
    pub kernel: &'static str,
    /// The entry: a memmap mode (with options), or a Linux entry
    /// (`linux-6.12`, `linux-6.1-bzimage`, the old `linux`; [`is_linux`]).
    pub mode: String,
    pub round: u32,
    pub boot_cpu_memmap_ns: u64,
    pub memmap_ns: u64,
    /// `None` for a mode that hands no page to the allocator (`touch`).
    pub allocatable_ns: Option<u64>,
    pub host_rss_mib: Option<u64>,
    /// memboot: the summary's `total_ns`; Linux: when /init started.
    pub boot_ns: u64,
    /// memboot's allocation test: order-0 p50 and p99 latency (none for
    /// Linux, or with `alloc_test=0`).
    pub order0_p50_ns: Option<u64>,
    pub order0_p99_ns: Option<u64>,
    /// Present pages (memboot's summary; Linux's `Memory:` line).
    pub present_pages: Option<u64>,
    pub pages_initialised_at_allocatable: Option<u64>,
    pub pages_initialised: Option<u64>,
    /// `ondemand_drain=on` only.
    pub drain_ns: Option<u64>,
    /// Only where the allocation test grew memory (`ondemand`).
    pub grow_step_p50_ns: Option<u64>,
    pub grow_step_p99_ns: Option<u64>,
    /// The host-memory state the boot started in (`log::host_memory_state`).
    pub host_memory: Option<String>,
    /// Host-timed (run-qemu.sh's tap): QEMU's start to the kernel's first
    /// serial byte, and to memory ready (Linux: its last deferred-init
    /// line, [`crate::tap::LINUX_READY`]).
    pub entry_latency_us: Option<u64>,
    pub qemu_start_to_ready_us: Option<u64>,
    pub minor_faults: Option<u64>,
    /// The most any vCPU waited runnable for a host CPU
    /// (`run::cpu_time::most_waited_ns`): memboot from its entry to memory
    /// ready, Linux (no markers) from its last CPU up to memory ready.
    pub most_vcpu_wait_ns: Option<u64>,
    /// The slowest of run-qemu.sh's host CPU probes around the boot
    /// (`run::host_speed::slowest_probe_ns`).
    pub slowest_probe_ns: Option<u64>,
    /// memboot: the pages its boot CPU initialised (`eager_pages`).
    pub boot_cpu_pages: Option<u64>,
    /// Linux: its slowest node's deferred init as its line says (jiffies),
    /// and at printk resolution (`LinuxBoot::deferred_printk_ns`).
    pub deferred_jiffies_ms: Option<u64>,
    pub deferred_printk_ns: Option<u64>,
    /// The huge pages reserved at boot, per size, as the kernel reported
    /// them (`HugeTLB: registered …`; [`crate::hugetlb_log`]).
    pub huge_pages: Vec<HugeSize>,
}

impl Row {
    /// What run-qemu.sh wrote about the boot, beside the kernel's log.
    fn with_host_lines(mut self, text: &str) -> Self {
        self.host_memory = crate::serial_log::host_memory_state(text);
        (self.entry_latency_us, self.qemu_start_to_ready_us) = crate::tap::host_timing_us(text);
        self.minor_faults = crate::serial_log::host_minor_faults(text);
        self.most_vcpu_wait_ns = most_waited_ns(text, ENTRY_TO_READY)
            .or_else(|| most_waited_ns(text, LAST_CPU_UP_TO_READY));
        self.slowest_probe_ns = crate::run::host_speed::slowest_probe_ns(text);
        self
    }
}

impl Row {
    /// Linux is ready at its last deferred-init line (`tap::LINUX_READY`),
    /// or, with huge pages, once `page_alloc_init_late()` has written their
    /// struct pages after it (6.12 and 7.3: `init_late_huge_ns`). A log
    /// whose tap timed the arrival of the ready line after it (made before
    /// the tap timed the deferred line) is moved back by the printk time
    /// between the two, which Linux printed synchronously; the huge pages'
    /// gap is added at printk time too.
    fn linux_ready_at_last_deferred_line(
        mut self,
        text: &str,
        boot: &linux_log::LinuxBoot,
    ) -> Self {
        if crate::tap::timed_at_linux_ready_line(text) && !boot.node_deferred_ms.is_empty() {
            let gap_us = boot.allocatable_ns.saturating_sub(boot.last_deferred_ns) / 1000;
            self.qemu_start_to_ready_us = self
                .qemu_start_to_ready_us
                .map(|us| us.saturating_sub(gap_us));
        }
        self.qemu_start_to_ready_us = self
            .qemu_start_to_ready_us
            .map(|us| us + boot.init_late_huge_ns / 1000);
        self
    }
}

/// A figure only some boots have: 0 (not measured in this mode, or a key
/// older summaries lack) is `None`.
fn measured(value: u64) -> Option<u64> {
    Some(value).filter(|&v| v > 0)
}

/// A memboot boot's row from its log.
fn memboot_row(text: &str, size: &str, mode: &str, round: u32) -> Result<Row, String> {
    // The last summary line: a boot whose first was cut writes a whole one
    // after it (`log::summary_json`).
    let s = crate::serial_log::read_summary(text).map_err(|e| e.to_string())?;
    if s.status != "ok" {
        return Err(format!("the boot failed: status \"{}\"", s.status));
    }
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "memboot",
        mode: mode.to_string(),
        round,
        boot_cpu_memmap_ns: s.memmap_boot_ns,
        // Huge-page preparation counts wherever it runs, as Linux's does
        // (`LinuxBoot::hugetlb_ns`); 0 without huge pages.
        memmap_ns: s.memmap_boot_ns
            + s.free_bitmaps_ns
            + s.buddy_eager_ns
            + s.deferred_ns
            + s.hugetlb_ns,
        allocatable_ns: measured(s.allocatable_ns),
        host_rss_mib: crate::serial_log::host_peak_rss_mib(text),
        boot_ns: s.total_ns,
        order0_p50_ns: order0(&s, &s.alloc_p50_ns),
        order0_p99_ns: order0(&s, &s.alloc_p99_ns),
        present_pages: measured(s.present_pages),
        pages_initialised_at_allocatable: measured(s.pages_initialised_at_allocatable),
        pages_initialised: measured(s.pages_initialised),
        drain_ns: measured(s.drain_ns),
        grow_step_p50_ns: measured(s.grow_step_p50_ns),
        grow_step_p99_ns: measured(s.grow_step_p99_ns),
        host_memory: None,
        entry_latency_us: None,
        qemu_start_to_ready_us: None,
        minor_faults: None,
        most_vcpu_wait_ns: None,
        slowest_probe_ns: None,
        boot_cpu_pages: measured(s.eager_pages),
        deferred_jiffies_ms: None,
        deferred_printk_ns: None,
        // memboot writes every struct page of its huge pages: no HVO.
        huge_pages: hugetlb_log::sizes(memboot_messages(text).iter().map(String::as_str), false),
    }
    .with_host_lines(text))
}

/// memboot's stamped messages, without their stamps.
fn memboot_messages(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| crate::serial_log::parse_stamped(l.trim_end_matches('\r')))
        .map(|(_, m)| m)
        .collect()
}

/// The order-0 entry of a per-order summary array (`alloc_p99_ns`, …),
/// found by `alloc_orders`.
fn order0(summary: &Summary<'_>, array: &[u64]) -> Option<u64> {
    let i = summary.alloc_orders.iter().position(|&o| o == 0)?;
    if summary.alloc_test_pages == 0 {
        return None; // alloc_test=0: the arrays hold no measurement
    }
    array.get(i).copied()
}

/// A Linux boot's row from its log; `entry` is a Linux entry ([`is_linux`]).
/// An entry that names a series must have booted a kernel of that series.
fn linux_row(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    let boot = linux_log::parse(text).map_err(|e| e.to_string())?;
    if let Some(want) = linux_series(entry) {
        match boot.series() {
            Some(got) if got == want => {}
            Some(_) => {
                return Err(format!(
                    "entry {entry} names Linux {want}, but the log is of Linux {}: \
                     tests/bench.sh booted the wrong vmlinux (tests/linux-peer.sh's vmlinux-{want})",
                    boot.release.as_deref().unwrap_or("?")
                ))
            }
            None => {
                return Err(format!(
                    "entry {entry} names Linux {want}, but the log has no 'Linux version' line \
                     to check it by: pass the whole serial log"
                ))
            }
        }
    }
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "linux",
        mode: entry.to_string(),
        round,
        boot_cpu_memmap_ns: boot.early_memmap_ns,
        memmap_ns: boot.early_memmap_ns + boot.deferred_ms() * 1_000_000 + boot.hugetlb_ns,
        allocatable_ns: Some(boot.allocatable_ns),
        host_rss_mib: boot.host_peak_rss_mib,
        boot_ns: boot.init_started_ns,
        order0_p50_ns: None,
        order0_p99_ns: None,
        present_pages: boot.present_pages,
        // Linux waits for every deferred page before memory is ready.
        pages_initialised_at_allocatable: boot.pages_initialised,
        pages_initialised: boot.pages_initialised,
        drain_ns: None,
        grow_step_p50_ns: None,
        grow_step_p99_ns: None,
        host_memory: None,
        entry_latency_us: None,
        qemu_start_to_ready_us: None,
        minor_faults: None,
        most_vcpu_wait_ns: None,
        slowest_probe_ns: None,
        boot_cpu_pages: None,
        deferred_jiffies_ms: Some(boot.deferred_ms()),
        deferred_printk_ns: boot.deferred_printk_ns,
        huge_pages: boot.huge_pages.clone(),
    }
    .with_host_lines(text)
    .linux_ready_at_last_deferred_line(text, &boot))
}

/// One log → one row; a Linux entry ([`is_linux`]) reads a Linux log.
pub fn row_from_log(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    if is_linux(entry) {
        linux_row(text, size, entry, round)
    } else {
        memboot_row(text, size, entry, round)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// memboot's row takes the most a vCPU waited from entry to memory
    /// ready, where its markers bound every timed phase; a log without that
    /// window falls back to the one from the last CPU up (Linux's).
    #[test]
    fn the_most_a_vcpu_waited_comes_from_the_entry_to_ready_window() {
        let log = include_str!("../../../kernel/tests/fixtures/4g-deferred.log");
        let window = |what: &str, waits: &str| {
            format!(
                "run-qemu.sh: host CPU time {what} (0.1–0.2 s after QEMU started; 9 samples): 9.0 ms; vCPU 0 50.0 %, the other 1 vCPUs 50.0 %, QEMU's other threads 0.0 %; each vCPU's % [0: 50.0, 1: 50.0]; each vCPU's ms waiting runnable for a host CPU [{waits}]\n"
            )
        };
        let row = |text: &str| row_from_log(text, "4G", "deferred", 1).unwrap();
        assert_eq!(row(log).most_vcpu_wait_ns, None);
        let last_up = format!("{log}{}", window(LAST_CPU_UP_TO_READY, "0: 0.1, 1: 0.2"));
        assert_eq!(row(&last_up).most_vcpu_wait_ns, Some(200_000));
        let both = format!("{last_up}{}", window(ENTRY_TO_READY, "0: 1.5, 1: 3.0"));
        assert_eq!(row(&both).most_vcpu_wait_ns, Some(3_000_000));
    }
}
