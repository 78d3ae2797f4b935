//! QEMU fw_cfg over I/O ports 0x510 (selector) / 0x511 (data), to read the
//! kernel command line that run-qemu.sh passes as `opt/memboot/cmdline`.
//! Protocol: QEMU docs/specs/fw_cfg.txt (signature key 0x0000 reads "QEMU";
//! key 0x0019 is the big-endian file directory).

use alloc::string::String;
use alloc::vec::Vec;

use x86_64::instructions::port::Port;

const SELECTOR: u16 = 0x510;
const DATA: u16 = 0x511;
const KEY_SIGNATURE: u16 = 0x0000;
const KEY_FILE_DIR: u16 = 0x0019;

fn select(key: u16) {
    // SAFETY: the fw_cfg selector port; selecting only changes what DATA reads.
    unsafe { Port::<u16>::new(SELECTOR).write(key) }
}

fn read_bytes(buf: &mut [u8]) {
    let mut data = Port::<u8>::new(DATA);
    for b in buf {
        // SAFETY: reading fw_cfg's data port streams the selected item.
        *b = unsafe { data.read() };
    }
}

/// Why the command line could not be read.
#[derive(Debug)]
pub enum FwCfgError {
    NotPresent,
    NotUtf8,
}

impl core::fmt::Display for FwCfgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FwCfgError::NotPresent => write!(f, "no QEMU fw_cfg device (not running under QEMU?)"),
            FwCfgError::NotUtf8 => write!(f, "fw_cfg file opt/memboot/cmdline is not UTF-8"),
        }
    }
}

/// The content of fw_cfg file `name`, `Ok(None)` when it does not exist.
pub fn read_file(name: &str) -> Result<Option<Vec<u8>>, FwCfgError> {
    select(KEY_SIGNATURE);
    let mut sig = [0u8; 4];
    read_bytes(&mut sig);
    if &sig != b"QEMU" {
        return Err(FwCfgError::NotPresent);
    }
    select(KEY_FILE_DIR);
    let mut count = [0u8; 4];
    read_bytes(&mut count);
    for _ in 0..u32::from_be_bytes(count) {
        // struct FWCfgFile { be32 size; be16 select; be16 reserved; char name[56]; }
        let mut entry = [0u8; 64];
        read_bytes(&mut entry);
        let size = u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
        let key = u16::from_be_bytes([entry[4], entry[5]]);
        let raw_name = &entry[8..];
        let len = raw_name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(raw_name.len());
        if &raw_name[..len] == name.as_bytes() {
            select(key);
            let mut content = alloc::vec![0u8; size];
            read_bytes(&mut content);
            return Ok(Some(content));
        }
    }
    Ok(None)
}

/// The kernel command line ("" when run-qemu.sh passed none).
pub fn cmdline() -> Result<String, FwCfgError> {
    match read_file("opt/memboot/cmdline")? {
        None => Ok(String::new()),
        Some(mut bytes) => {
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            String::from_utf8(bytes).map_err(|_| FwCfgError::NotUtf8)
        }
    }
}
