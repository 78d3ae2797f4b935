//! The pipeline's seams in a host process (feature `host`): the vmemmap
//! area is one anonymous `mmap` with `MAP_NORESERVE`, so only the struct
//! pages the pipeline writes cost memory, as in a guest whose untouched
//! memory costs the host nothing; CPUs are `std` threads
//! ([`deferred_init::std_seams::ThreadExecutor`]); the log is a `Vec`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::string::{String, ToString};
use std::sync::Mutex;
use std::vec::Vec;

use memmap::sections::{Vmemmap, VMEMMAP_HUGE_PAGE_BYTES};

use super::seams::{CpuBringup, Log, MapError, VmemmapMapper};
use super::vmemmap::{PDPT_SPAN_BYTES, PD_SPAN_BYTES};
use crate::smp_error::SmpError;

/// A lazily backed vmemmap area. It also checks the pipeline's page-table
/// plan against its own model of a 4-level walk: each mapping must bring
/// exactly the tables of the 1 GiB and 512 GiB regions not seen before.
pub struct HostMapper {
    base: *mut libc::c_void,
    len: usize,
    area: Option<Vmemmap>,
    pd_regions: HashSet<u64>,
    pdpt_regions: HashSet<u64>,
    nr_mapped: u64,
    nr_tables: u64,
    /// HVO's tables as filled: each entry's physical page and whether
    /// writable.
    filled: HashMap<u64, Vec<(u64, bool)>>,
    /// The memory behind those physical pages: one page each of a memfd,
    /// which a table's entries map, so that its aliases share it.
    pages: Option<std::fs::File>,
    page_offsets: HashMap<u64, u64>,
    /// Each 2 MiB page `map_2mib` mapped: virtual → physical, and back.
    huge: HashMap<u64, u64>,
    huge_at: HashMap<u64, u64>,
    /// The 2 MiB pages split into 4 KiB entries.
    split: HashSet<u64>,
    /// Vmemmap pages moved into the memfd so that others alias them.
    shared: HashSet<u64>,
}

// SAFETY: the area is plain anonymous memory owned by the mapper.
unsafe impl Send for HostMapper {}

impl HostMapper {
    pub fn new() -> Self {
        Self {
            base: core::ptr::null_mut(),
            len: 0,
            area: None,
            pd_regions: HashSet::new(),
            pdpt_regions: HashSet::new(),
            nr_mapped: 0,
            nr_tables: 0,
            filled: HashMap::new(),
            pages: None,
            page_offsets: HashMap::new(),
            huge: HashMap::new(),
            huge_at: HashMap::new(),
            split: HashSet::new(),
            shared: HashSet::new(),
        }
    }

    /// Move the vmemmap page at `virt` (physical `phys`) into the memfd,
    /// its contents kept, so that other pages can alias it.
    fn share(&mut self, virt: u64, phys: u64) -> (i32, u64) {
        let (fd, offset) = self.page_offset(phys);
        if self.shared.insert(virt) {
            // SAFETY: `virt` is a 4 KiB page of our own area, readable.
            let n = unsafe { libc::pwrite(fd, virt as *const libc::c_void, 4096, offset as i64) };
            assert_eq!(n, 4096, "{}", std::io::Error::last_os_error());
            map_page(virt, fd, offset, true);
        }
        (fd, offset)
    }

    /// The memfd offset of physical page `phys`, given one on first use.
    fn page_offset(&mut self, phys: u64) -> (i32, u64) {
        use std::os::fd::AsRawFd;
        let file = self.pages.get_or_insert_with(|| {
            // SAFETY: a fresh anonymous file; the name is a C string.
            let fd = unsafe { libc::memfd_create(c"memboot-hvo".as_ptr(), 0) };
            assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
            // SAFETY: `fd` was just created and is owned by nothing else.
            unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        });
        let next = self.page_offsets.len() as u64 * 4096;
        let offset = *self.page_offsets.entry(phys).or_insert(next);
        if offset == next {
            file.set_len(next + 4096).expect("grow the memfd");
        }
        (file.as_raw_fd(), offset)
    }

    /// Check a 2 MiB mapping at `virt` against the page-table model and
    /// count it.
    fn map_2mib_tables(&mut self, virt: u64, new_tables: &[u64]) -> Result<(), MapError> {
        let area = self.area.expect("choose_area first");
        let offset = virt - area.base();
        assert!(
            virt.is_multiple_of(VMEMMAP_HUGE_PAGE_BYTES)
                && virt + VMEMMAP_HUGE_PAGE_BYTES <= self.base as u64 + self.len as u64,
            "{virt:#x} outside the area"
        );
        // Regions relative to a slot-aligned origin, as the kernel's area
        // starts on a top-level slot.
        let needed = usize::from(self.pdpt_regions.insert(offset / PDPT_SPAN_BYTES))
            + usize::from(self.pd_regions.insert(offset / PD_SPAN_BYTES));
        if needed != new_tables.len() {
            return Err(MapError::TablesExhausted { virt });
        }
        self.nr_mapped += 1;
        self.nr_tables += new_tables.len() as u64;
        Ok(())
    }

    /// 2 MiB pages mapped and page-table frames they were given.
    pub fn counts(&self) -> (u64, u64) {
        (self.nr_mapped, self.nr_tables)
    }

    /// Bytes of the area the host actually backs (`mincore`): what
    /// writing struct pages cost.
    pub fn resident_bytes(&self) -> u64 {
        if self.base.is_null() {
            return 0;
        }
        const CHUNK_PAGES: usize = 1 << 20;
        let page = 4096usize;
        let nr_pages = self.len / page;
        let mut vec = std::vec![0u8; CHUNK_PAGES];
        let mut resident = 0u64;
        let mut first = 0;
        while first < nr_pages {
            let n = CHUNK_PAGES.min(nr_pages - first);
            // SAFETY: [base + first*page, + n*page) lies in our mapping and
            // `vec` has room for one byte per page.
            let rc = unsafe {
                libc::mincore(
                    (self.base as usize + first * page) as *mut libc::c_void,
                    n * page,
                    vec.as_mut_ptr(),
                )
            };
            assert_eq!(rc, 0, "mincore on our own mapping");
            resident += vec[..n].iter().filter(|&&b| b & 1 != 0).count() as u64;
            first += n;
        }
        resident * page as u64
    }
}

impl Default for HostMapper {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for HostMapper {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: unmapping exactly the region `choose_area` mapped;
            // the backing built over it is gone (it cannot outlive `run`).
            unsafe { libc::munmap(self.base, self.len) };
        }
    }
}

// SAFETY: the whole area is one private anonymous read-write mapping that
// lives until the mapper drops, so every 2 MiB page in it is valid, exclusive
// memory; distinct addresses alias only where `map_table` or `remap_4k`
// map a 4 KiB page onto one memfd page, as the contract asks; a split
// 2 MiB page keeps its memory; the host has one CPU view, so no TLB to
// flush.
unsafe impl VmemmapMapper for HostMapper {
    fn choose_area(&mut self, bytes: u64) -> Result<Vmemmap, MapError> {
        assert!(self.base.is_null(), "one area per mapper");
        let len = (bytes + VMEMMAP_HUGE_PAGE_BYTES) as usize;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(MapError::Reserve { bytes });
        }
        self.base = base;
        self.len = len;
        let aligned = (base as u64).next_multiple_of(VMEMMAP_HUGE_PAGE_BYTES);
        let area = Vmemmap::new(aligned).expect("2 MiB aligned");
        self.area = Some(area);
        Ok(area)
    }

    fn map_2mib(&mut self, virt: u64, phys: u64, new_tables: &[u64]) -> Result<(), MapError> {
        self.map_2mib_tables(virt, new_tables)?;
        self.huge.insert(virt, phys);
        self.huge_at.insert(phys, virt);
        Ok(())
    }

    fn fill_table(&mut self, table: u64, entry: &dyn Fn(usize) -> (u64, bool)) {
        self.filled.insert(table, (0..512).map(entry).collect());
    }

    fn map_table(&mut self, virt: u64, table: u64, new_tables: &[u64]) -> Result<(), MapError> {
        self.map_2mib_tables(virt, new_tables)?;
        let entries = self.filled.get(&table).cloned().expect("fill_table first");
        for (i, (phys, writable)) in entries.into_iter().enumerate() {
            let (fd, offset) = self.page_offset(phys);
            map_page(virt + i as u64 * 4096, fd, offset, writable);
        }
        Ok(())
    }

    unsafe fn split_2mib(&mut self, virt: u64, _table: u64) -> Result<u64, MapError> {
        let phys = *self
            .huge
            .get(&virt)
            .ok_or(MapError::NotSplittable { virt })?;
        if !self.split.insert(virt) {
            return Err(MapError::NotSplittable { virt });
        }
        Ok(phys)
    }

    unsafe fn remap_4k(&mut self, virt: u64, phys: u64, writable: bool) -> Result<(), MapError> {
        let two_mib = virt & !(VMEMMAP_HUGE_PAGE_BYTES - 1);
        let offset_in = phys & (VMEMMAP_HUGE_PAGE_BYTES - 1);
        let source = self.huge_at.get(&(phys - offset_in)).map(|v| v + offset_in);
        let (Some(source), true) = (source, self.split.contains(&two_mib)) else {
            return Err(MapError::NotSplittable { virt });
        };
        let (fd, offset) = self.share(source, phys);
        map_page(virt, fd, offset, writable);
        Ok(())
    }
}

/// Map the memfd page at `offset` of `fd` at `virt` (4 KiB of our own
/// area), writable or read-only.
fn map_page(virt: u64, fd: i32, offset: u64, writable: bool) {
    let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
    // SAFETY: the 4 KiB replaced lies in our own area, and the caller
    // holds no reference into it (the mapper's contract).
    let at = unsafe {
        libc::mmap(
            virt as *mut libc::c_void,
            4096,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            offset as libc::off_t,
        )
    };
    assert_ne!(at, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
}

/// A log that keeps its lines, and notes when it was told memory is ready.
#[derive(Default)]
pub struct VecLog {
    lines: Mutex<Vec<String>>,
    lines_before_memory_ready: Mutex<Vec<usize>>,
}

impl VecLog {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// For each [`Log::memory_ready`] call, how many lines came before it.
    pub fn lines_before_memory_ready(&self) -> Vec<usize> {
        self.lines_before_memory_ready.lock().unwrap().clone()
    }
}

impl Log for VecLog {
    fn line(&self, args: fmt::Arguments<'_>) {
        self.lines.lock().unwrap().push(args.to_string());
    }

    fn memory_ready(&self) {
        let n = self.lines.lock().unwrap().len();
        self.lines_before_memory_ready.lock().unwrap().push(n);
    }
}

/// The host's [`CpuBringup`]: its threads always run, so starting them and
/// waiting for them are only noted: how many lines the pipeline had logged
/// when it asked, so that tests see where in the boot's order that was.
/// `wait_fails` makes every wait fail with that error, as an AP that took
/// its stack and never arrived makes the kernel's.
pub struct NotedBringup<'a> {
    log: &'a VecLog,
    lines_before_start: Mutex<Vec<usize>>,
    lines_before_wait: Mutex<Vec<usize>>,
    wait_fails: Option<SmpError>,
}

impl<'a> NotedBringup<'a> {
    pub fn new(log: &'a VecLog, wait_fails: Option<SmpError>) -> Self {
        NotedBringup {
            log,
            lines_before_start: Mutex::new(Vec::new()),
            lines_before_wait: Mutex::new(Vec::new()),
            wait_fails,
        }
    }

    /// For each call of `start`, the number of lines logged before it.
    pub fn lines_before_each_start(&self) -> Vec<usize> {
        self.lines_before_start.lock().unwrap().clone()
    }

    /// For each call of `wait_online`, the number of lines logged before it.
    pub fn lines_before_each_wait(&self) -> Vec<usize> {
        self.lines_before_wait.lock().unwrap().clone()
    }

    fn note(&self, calls: &Mutex<Vec<usize>>) {
        let n = self.log.lines.lock().unwrap().len();
        calls.lock().unwrap().push(n);
    }
}

impl<M> CpuBringup<M> for NotedBringup<'_> {
    fn start(&self, _mapper: &mut M) -> Result<(), SmpError> {
        self.note(&self.lines_before_start);
        Ok(())
    }
    fn wait_online(&self) -> Result<(), SmpError> {
        self.note(&self.lines_before_wait);
        self.wait_fails.clone().map_or(Ok(()), Err)
    }
}
