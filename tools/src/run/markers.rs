//! The instants memboot tells the host ([`memboot_contract::host_marker`]):
//! QEMU's `isa-debugcon` device passes each byte the guest writes to its
//! port on to a character device, here a unix socket QEMU connects to
//! (`-chardev socket,…` without `server=on`: QEMU is the client, so this
//! tool listens before QEMU starts, and QEMU's start does not wait for it).
//! [`MarkerSocket::next`] waits for the next marker with a timeout, which
//! is how the CPU-time sampler ([`super::cpu_time`]) both paces its
//! samples and takes one the moment a marker arrives, on one thread.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use memboot_contract::host_marker::HostMarker;

/// Where markers arrive: the listening socket until QEMU connects, then
/// QEMU's connection until it closes (QEMU exited).
pub struct MarkerSocket {
    listener: Option<UnixListener>,
    conn: Option<UnixStream>,
    /// Markers read but not yet handed out (one read may hold several).
    pending: VecDeque<HostMarker>,
}

impl MarkerSocket {
    /// Listen at `path` (in the boot's scratch directory, which only this
    /// user can enter).
    pub fn listen(path: &Path) -> std::io::Result<MarkerSocket> {
        Ok(MarkerSocket {
            listener: Some(UnixListener::bind(path)?),
            conn: None,
            pending: VecDeque::new(),
        })
    }

    /// No socket: [`MarkerSocket::next`] only waits (the Linux peers,
    /// which write no markers).
    pub fn none() -> MarkerSocket {
        MarkerSocket {
            listener: None,
            conn: None,
            pending: VecDeque::new(),
        }
    }

    /// The next marker, as soon as it arrives within `timeout`; `None`
    /// once `timeout` passed without one (with a zero `timeout`, what has
    /// arrived is still read). Bytes that name no marker are skipped.
    pub fn next(&mut self, timeout: Duration) -> Option<HostMarker> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(marker) = self.pending.pop_front() {
                return Some(marker);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(fd) = self.fd() else {
                std::thread::sleep(left);
                return None;
            };
            if !readable(fd, left) {
                return None;
            }
            self.read_ready();
        }
    }

    /// What to wait on: QEMU's connection, else the listener.
    fn fd(&self) -> Option<RawFd> {
        match (&self.conn, &self.listener) {
            (Some(conn), _) => Some(conn.as_raw_fd()),
            (None, Some(listener)) => Some(listener.as_raw_fd()),
            (None, None) => None,
        }
    }

    /// The socket [`MarkerSocket::fd`] names is readable: take QEMU's
    /// connection (only QEMU connects, so the listener is closed then), or
    /// read what it sent (end of file: QEMU exited).
    fn read_ready(&mut self) {
        if let Some(conn) = &mut self.conn {
            let mut buf = [0u8; 64];
            match conn.read(&mut buf) {
                Ok(0) => self.conn = None,
                Ok(n) => self
                    .pending
                    .extend(buf[..n].iter().filter_map(|&b| HostMarker::from_byte(b))),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => self.conn = None,
            }
        } else if let Some(listener) = self.listener.take() {
            match listener.accept() {
                Ok((conn, _)) => self.conn = Some(conn),
                Err(e) if e.kind() == ErrorKind::Interrupted => self.listener = Some(listener),
                Err(_) => {}
            }
        }
    }
}

/// Whether `fd` becomes readable (or hung up) within `timeout` (false
/// also when a signal cut the wait short: the caller samples early).
fn readable(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` and `ts` are valid for the call's duration, `fd` is an
    // open descriptor its owner (the caller's socket) keeps open, and a
    // null signal mask leaves the thread's mask as it is.
    unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn markers_arrive_in_order_and_other_bytes_are_skipped() {
        let dir = std::env::temp_dir().join(format!("memboot-markers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("marks.sock");
        let mut socket = MarkerSocket::listen(&path).unwrap();
        let short = Duration::from_millis(20);
        assert_eq!(socket.next(short), None, "nobody connected");
        let mut qemu = UnixStream::connect(&path).unwrap();
        qemu.write_all(b"firmware text\n").unwrap();
        qemu.write_all(&[HostMarker::BringupEnded.byte(), b'x'])
            .unwrap();
        qemu.write_all(&[HostMarker::MemoryReady.byte()]).unwrap();
        let t = Instant::now();
        assert_eq!(
            socket.next(Duration::from_secs(5)),
            Some(HostMarker::BringupEnded)
        );
        assert_eq!(
            socket.next(Duration::from_secs(5)),
            Some(HostMarker::MemoryReady)
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(socket.next(short), None, "nothing more sent");
        drop(qemu);
        assert_eq!(socket.next(short), None, "QEMU gone");
        assert!(socket.conn.is_none() && socket.listener.is_none());
        // Without a socket it only waits.
        let t = Instant::now();
        assert_eq!(MarkerSocket::none().next(short), None);
        assert!(t.elapsed() >= short);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
