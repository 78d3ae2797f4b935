//! The kernel log's buffer: a byte ring between the CPUs that log and the
//! one that writes the bytes to the console (Linux's printk ring buffer and
//! its console printer, much simplified: one byte stream, no records).
//!
//! * **Producers** append whole lines while they hold the producer lock
//!   ([`LogRing::lock_producer`]), so lines never interleave. A line longer
//!   than the ring is fine: its bytes are published as they are appended,
//!   and when the ring is full the producer calls its `wait` hook, which
//!   must make room (write some bytes out itself, or wait for the printer).
//!   Nothing is ever dropped.
//! * **The consumer** (the console printer) holds the consumer lock
//!   ([`LogRing::try_lock_consumer`]), hands the oldest bytes to a sink (the
//!   UART) and only then frees them, so the sink reads them in place.
//!
//! `head` counts every byte ever appended and `tail` every byte ever
//! consumed (both wrap at `usize::MAX`; `head - tail` is the fill level, at
//! most `N`). The producer writes bytes at `[head, head + n)` (mod `N`),
//! which the consumer does not read, then publishes `head` (release); the
//! consumer reads `[tail, head)` after loading `head` (acquire), then
//! publishes `tail` (release), after which the producer may reuse those
//! bytes.
//!
//! [`LineWriter`] frames lines on top: `\n` in a message becomes `\r\n`
//! (continuation lines optionally stamped again), every line ends with
//! `\r\n`, and a line left unfinished by a producer that panicked or
//! faulted is ended before the next one starts.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::report::Timestamp;

/// A byte ring of `N` bytes; see the module docs.
pub struct LogRing<const N: usize> {
    bytes: UnsafeCell<[u8; N]>,
    /// Bytes ever appended (wrapping).
    head: AtomicUsize,
    /// Bytes ever consumed (wrapping).
    tail: AtomicUsize,
    producer: spin::Mutex<ProducerState>,
    consumer: spin::Mutex<()>,
}

// SAFETY: the byte array is only reached through `Producer` (which writes
// the free part, `[head, tail + N)`) and `Consumer` (which reads the filled
// part, `[tail, head)`); each exists at most once at a time (they are lock
// guards), the two parts never overlap, and bytes change hands through the
// release/acquire pairs on `head` and `tail`.
unsafe impl<const N: usize> Sync for LogRing<N> {}

/// What the producer side knows about the stream.
struct ProducerState {
    /// The last byte appended was not the end of a line.
    mid_line: bool,
}

impl<const N: usize> Default for LogRing<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> LogRing<N> {
    pub const fn new() -> Self {
        assert!(N > 0, "a log ring needs room for at least one byte");
        Self {
            bytes: UnsafeCell::new([0; N]),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            producer: spin::Mutex::new(ProducerState { mid_line: false }),
            consumer: spin::Mutex::new(()),
        }
    }

    /// Bytes appended and not yet consumed.
    pub fn len(&self) -> usize {
        let tail = self.tail.load(Ordering::Acquire);
        self.head.load(Ordering::Acquire).wrapping_sub(tail)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub const fn capacity(&self) -> usize {
        N
    }

    /// The producer side, waiting for it if another CPU is appending.
    pub fn lock_producer(&self) -> Producer<'_, N> {
        Producer {
            ring: self,
            state: self.producer.lock(),
        }
    }

    /// The consumer side, unless someone else is consuming.
    pub fn try_lock_consumer(&self) -> Option<Consumer<'_, N>> {
        Some(Consumer {
            ring: self,
            _guard: self.consumer.try_lock()?,
        })
    }

    /// Someone holds the consumer side.
    pub fn consumer_busy(&self) -> bool {
        self.consumer.is_locked()
    }

    /// Break the producer lock (emergency path).
    ///
    /// # Safety
    /// Whoever holds it must never append again (it panicked or faulted
    /// and will not resume), or must not be running at all.
    pub unsafe fn force_unlock_producer(&self) {
        // SAFETY: the caller guarantees the holder is gone.
        unsafe { self.producer.force_unlock() }
    }

    /// Break the consumer lock (emergency path).
    ///
    /// # Safety
    /// As for [`Self::force_unlock_producer`], for the consumer.
    pub unsafe fn force_unlock_consumer(&self) {
        // SAFETY: the caller guarantees the holder is gone.
        unsafe { self.consumer.force_unlock() }
    }

    fn base(&self) -> *mut u8 {
        self.bytes.get().cast::<u8>()
    }
}

/// The producer side of a [`LogRing`] (a lock guard).
pub struct Producer<'r, const N: usize> {
    ring: &'r LogRing<N>,
    state: spin::MutexGuard<'r, ProducerState>,
}

impl<const N: usize> Producer<'_, N> {
    /// Append as much of `bytes` as fits now; returns how many.
    pub fn try_push(&mut self, bytes: &[u8]) -> usize {
        let ring = self.ring;
        let head = ring.head.load(Ordering::Relaxed); // only we write it
        let tail = ring.tail.load(Ordering::Acquire);
        let free = N - head.wrapping_sub(tail);
        let n = free.min(bytes.len());
        if n == 0 {
            return 0;
        }
        let at = head % N;
        let first = n.min(N - at);
        // SAFETY: `[head, head + n)` mod N is free space (n <= N - fill),
        // which the consumer does not read until `head` is published below;
        // `at + first <= N` and `n - first <= at`, so both copies stay
        // inside the array, and they never overlap `bytes` (a shared borrow
        // of other memory: the ring's array is only reached through these
        // raw pointers).
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), ring.base().add(at), first);
            core::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), ring.base(), n - first);
        }
        ring.head.store(head.wrapping_add(n), Ordering::Release);
        self.state.mid_line = bytes[n - 1] != b'\n';
        n
    }

    /// Append all of `bytes`, calling `wait` whenever the ring is full
    /// (it must make room, or wait for someone who does).
    pub fn push(&mut self, mut bytes: &[u8], wait: &mut dyn FnMut()) {
        while !bytes.is_empty() {
            let n = self.try_push(bytes);
            bytes = &bytes[n..];
            if n == 0 {
                wait();
            }
        }
    }

    /// The last byte appended did not end a line (its writer stopped
    /// part-way, or is still writing it).
    pub fn mid_line(&self) -> bool {
        self.state.mid_line
    }
}

/// The consumer side of a [`LogRing`] (a lock guard).
pub struct Consumer<'r, const N: usize> {
    ring: &'r LogRing<N>,
    _guard: spin::MutexGuard<'r, ()>,
}

impl<const N: usize> Consumer<'_, N> {
    /// Hand up to `max` of the oldest bytes to `sink` (in at most two
    /// slices, when they wrap), then free them. Returns how many.
    pub fn drain(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let ring = self.ring;
        let tail = ring.tail.load(Ordering::Relaxed); // only we write it
        let head = ring.head.load(Ordering::Acquire);
        let n = head.wrapping_sub(tail).min(max);
        if n == 0 {
            return 0;
        }
        let at = tail % N;
        let first = n.min(N - at);
        // SAFETY: `[tail, tail + n)` mod N was published by the producer
        // (n <= head - tail) and it does not write there before `tail`
        // moves past it below; both slices lie inside the array.
        let (a, b) = unsafe {
            (
                core::slice::from_raw_parts(ring.base().add(at), first),
                core::slice::from_raw_parts(ring.base(), n - first),
            )
        };
        sink(a);
        if !b.is_empty() {
            sink(b);
        }
        ring.tail.store(tail.wrapping_add(n), Ordering::Release);
        n
    }

    /// Drain until the ring is empty (including what producers append
    /// meanwhile), `chunk` bytes at a time.
    pub fn drain_all(&mut self, chunk: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let mut total = 0;
        loop {
            let n = self.drain(chunk, sink);
            if n == 0 {
                return total;
            }
            total += n;
        }
    }
}

/// Writes one line into a ring: `\n` in the text becomes `\r\n` (and, with
/// `restamp_ns`, the next line starts with that stamp), [`Self::end_line`]
/// ends it. Created with [`LineWriter::new`], which first ends a line a
/// previous writer left unfinished, so a line never starts inside another.
pub struct LineWriter<'p, 'r, 'w, const N: usize> {
    producer: &'p mut Producer<'r, N>,
    wait: &'w mut dyn FnMut(),
    restamp_ns: Option<u64>,
}

impl<'p, 'r, 'w, const N: usize> LineWriter<'p, 'r, 'w, N> {
    pub fn new(
        producer: &'p mut Producer<'r, N>,
        wait: &'w mut dyn FnMut(),
        restamp_ns: Option<u64>,
    ) -> Self {
        if producer.mid_line() {
            producer.push(b"\r\n", wait);
        }
        Self {
            producer,
            wait,
            restamp_ns,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        self.producer.push(bytes, self.wait);
    }

    /// `\r\n`: the line is complete.
    pub fn end_line(mut self) {
        self.put(b"\r\n");
    }
}

impl<const N: usize> Write for LineWriter<'_, '_, '_, N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s.as_bytes();
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.put(&rest[..nl]);
            self.put(b"\r\n");
            if let Some(ns) = self.restamp_ns {
                write!(self, "{} ", Timestamp(ns))?;
            }
            rest = &rest[nl + 1..];
        }
        self.put(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    fn drain_to_vec<const N: usize>(ring: &LogRing<N>, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = ring.try_lock_consumer().expect("consumer free");
        c.drain(max, &mut |b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn empty_ring_drains_nothing() {
        let ring = LogRing::<8>::new();
        assert!(ring.is_empty());
        assert_eq!(drain_to_vec(&ring, 100), b"");
    }

    #[test]
    fn bytes_come_out_in_order_across_the_wrap() {
        let ring = LogRing::<8>::new();
        let mut out = Vec::new();
        for round in 0..20u8 {
            let chunk: Vec<u8> = (0..5).map(|i| round * 5 + i).collect();
            assert_eq!(ring.lock_producer().try_push(&chunk), 5);
            assert_eq!(ring.len(), 5);
            // Drain in two uneven steps so head and tail wrap at different
            // points.
            out.extend(drain_to_vec(&ring, 3));
            out.extend(drain_to_vec(&ring, 8));
            assert!(ring.is_empty());
        }
        let want: Vec<u8> = (0..100).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn a_full_ring_takes_no_more_until_drained() {
        let ring = LogRing::<8>::new();
        let mut p = ring.lock_producer();
        assert_eq!(p.try_push(b"0123456789"), 8);
        assert_eq!(p.try_push(b"x"), 0);
        assert_eq!(ring.len(), 8);
        drop(p);
        assert_eq!(drain_to_vec(&ring, 2), b"01");
        let mut p = ring.lock_producer();
        assert_eq!(p.try_push(b"abc"), 2);
        drop(p);
        assert_eq!(drain_to_vec(&ring, 100), b"234567ab");
    }

    #[test]
    fn one_consumer_at_a_time() {
        let ring = LogRing::<8>::new();
        let c = ring.try_lock_consumer();
        assert!(c.is_some());
        assert!(ring.consumer_busy());
        assert!(ring.try_lock_consumer().is_none());
        drop(c);
        assert!(ring.try_lock_consumer().is_some());
    }

    /// A line far longer than the ring arrives whole when `wait` drains.
    #[test]
    fn push_waits_for_room_and_drops_nothing() {
        let ring = LogRing::<16>::new();
        let line: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let out = std::cell::RefCell::new(Vec::new());
        let mut waits = 0;
        let mut wait = || {
            waits += 1;
            let mut c = ring.try_lock_consumer().unwrap();
            c.drain(5, &mut |b| out.borrow_mut().extend_from_slice(b));
        };
        ring.lock_producer().push(&line, &mut wait);
        out.borrow_mut().extend(drain_to_vec(&ring, usize::MAX));
        assert_eq!(*out.borrow(), line);
        assert!(waits >= (1000 - 16) / 5, "{waits} waits");
    }

    fn write_line<const N: usize>(ring: &LogRing<N>, restamp: Option<u64>, text: &str) {
        let mut p = ring.lock_producer();
        let mut wait = || panic!("ring full");
        let mut w = LineWriter::new(&mut p, &mut wait, restamp);
        w.write_str(text).unwrap();
        w.end_line();
    }

    fn text<const N: usize>(ring: &LogRing<N>) -> String {
        String::from_utf8(drain_to_vec(ring, usize::MAX)).unwrap()
    }

    #[test]
    fn lines_end_in_crlf_and_newlines_become_crlf() {
        let ring = LogRing::<256>::new();
        write_line(&ring, None, "one");
        write_line(&ring, None, "two\nthree");
        assert_eq!(text(&ring), "one\r\ntwo\r\nthree\r\n");
    }

    #[test]
    fn continuation_lines_are_stamped_when_asked() {
        let ring = LogRing::<256>::new();
        write_line(&ring, Some(1_500_000), "PANIC: a\nb");
        assert_eq!(text(&ring), "PANIC: a\r\n[    0.001500] b\r\n");
    }

    /// A writer that stops part-way (it panicked) leaves its line open; the
    /// next line ends it first, and only then.
    #[test]
    fn an_unfinished_line_is_ended_before_the_next() {
        let ring = LogRing::<256>::new();
        {
            let mut p = ring.lock_producer();
            let mut wait = || panic!("ring full");
            let mut w = LineWriter::new(&mut p, &mut wait, None);
            w.write_str("cut sho").unwrap();
            // dropped without end_line
        }
        assert!(ring.lock_producer().mid_line());
        write_line(&ring, None, "next");
        assert!(!ring.lock_producer().mid_line());
        write_line(&ring, None, "after");
        assert_eq!(text(&ring), "cut sho\r\nnext\r\nafter\r\n");
    }

    /// Several producer threads and one consumer thread: every line comes
    /// out whole, each producer's lines in its order.
    #[test]
    fn concurrent_producers_and_a_consumer_keep_lines_whole() {
        static RING: LogRing<64> = LogRing::new();
        const PRODUCERS: usize = 3;
        const LINES: usize = 300;
        let done = std::sync::atomic::AtomicUsize::new(0);
        let out = std::thread::scope(|s| {
            for p in 0..PRODUCERS {
                let done = &done;
                s.spawn(move || {
                    for i in 0..LINES {
                        let mut prod = RING.lock_producer();
                        let mut wait = std::thread::yield_now;
                        let mut w = LineWriter::new(&mut prod, &mut wait, None);
                        // Longer than the ring now and then.
                        let pad = "x".repeat(i % 97);
                        write!(w, "p{p} line {i} {pad}").unwrap();
                        w.end_line();
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
            let consumer = s.spawn(|| {
                let mut out = Vec::new();
                loop {
                    let finished = done.load(Ordering::SeqCst) == PRODUCERS;
                    if let Some(mut c) = RING.try_lock_consumer() {
                        c.drain(7, &mut |b| out.extend_from_slice(b));
                    }
                    if finished && RING.is_empty() {
                        return out;
                    }
                    std::thread::yield_now();
                }
            });
            consumer.join().unwrap()
        });
        let text = String::from_utf8(out).unwrap();
        let mut next = [0usize; PRODUCERS];
        let mut lines = 0;
        for line in text.split_terminator("\r\n") {
            let mut parts = line.splitn(4, ' ');
            let p: usize = parts.next().unwrap()[1..].parse().unwrap();
            assert_eq!(parts.next(), Some("line"));
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(i, next[p], "producer {p} out of order");
            assert_eq!(parts.next().unwrap_or(""), "x".repeat(i % 97));
            next[p] += 1;
            lines += 1;
        }
        assert!(text.ends_with("\r\n"));
        assert_eq!(lines, PRODUCERS * LINES);
    }
}
