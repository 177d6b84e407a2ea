//! An output buffer of encoded packets, ready for a vectored write.

use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;

/// Payloads at least this long are kept as shared `Bytes` (one iovec each, no copy);
/// shorter ones are copied into the contiguous tail, which is cheaper than an extra iovec.
const SHARE_THRESHOLD: usize = 1024;

/// The capacity a tail starts with once something is written into an empty buffer: one
/// allocation for a wake-up's usual output instead of a series of small ones growing it.
const TAIL_FIRST_CAPACITY: usize = 512;

/// Encoded output waiting to be written: a queue of shared chunks followed by a contiguous tail.
/// Once everything was written it lets go of its allocations, so an idle connection holds
/// none (its CONNACK's, or a burst's). Kept small inline: every connection's task holds one.
#[derive(Debug, Default)]
pub struct OutBuf {
    chunks: VecDeque<Bytes>,
    tail: BytesMut,
}

impl OutBuf {
    /// An empty buffer; allocates nothing until something is written.
    pub fn new() -> OutBuf {
        OutBuf::default()
    }

    /// Total bytes waiting.
    pub fn len(&self) -> usize {
        self.chunks_len() + self.tail.len()
    }

    /// Bytes waiting in the shared chunks (a few at most: large payloads and sealed tails).
    fn chunks_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `bytes` into the tail.
    pub fn put_slice(&mut self, bytes: &[u8]) {
        self.tail_mut().extend_from_slice(bytes);
    }

    /// Appends shared bytes, by reference when large, by copy when small.
    pub fn put_bytes(&mut self, bytes: Bytes) {
        if bytes.len() < SHARE_THRESHOLD {
            self.put_slice(&bytes);
        } else {
            self.seal_tail();
            self.chunks.push_back(bytes);
        }
    }

    /// The contiguous tail, for encoders that write into a `BytesMut`.
    pub fn tail_mut(&mut self) -> &mut BytesMut {
        if self.tail.capacity() == 0 {
            self.tail.reserve(TAIL_FIRST_CAPACITY);
        }
        &mut self.tail
    }

    pub(crate) fn tail_len(&self) -> usize {
        self.tail.len()
    }

    pub(crate) fn patch_tail(&mut self, index: usize, byte: u8) {
        if let Some(slot) = self.tail.get_mut(index) {
            *slot = byte;
        }
    }

    fn seal_tail(&mut self) {
        if !self.tail.is_empty() {
            let sealed = self.tail.split().freeze();
            self.chunks.push_back(sealed);
        }
    }

    /// Fills `dst` with slices of the waiting bytes, in order; returns how many were filled.
    pub fn io_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for chunk in self.chunks.iter() {
            if n == dst.len() {
                return n;
            }
            dst[n] = IoSlice::new(chunk);
            n += 1;
        }
        if n < dst.len() && !self.tail.is_empty() {
            dst[n] = IoSlice::new(&self.tail);
            n += 1;
        }
        n
    }

    /// Drops the first `n` bytes (they were written).
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if n >= front.len() {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
        if n > 0 {
            let n = n.min(self.tail.len());
            self.tail.advance(n);
        }
        if self.chunks.is_empty() && self.tail.is_empty() {
            // Nothing left: free the tail and the chunk queue (a wake-up that writes again
            // allocates what it needs; an idle connection keeps nothing).
            self.tail = BytesMut::new();
            self.chunks = VecDeque::new();
        }
    }

    /// Takes everything as one contiguous `Bytes` (for tests and simple transports).
    pub fn take_all(&mut self) -> Bytes {
        self.seal_tail();
        let mut all = BytesMut::with_capacity(self.chunks_len());
        for chunk in self.chunks.drain(..) {
            all.extend_from_slice(&chunk);
        }
        all.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_pieces_come_out_in_order() {
        let mut out = OutBuf::new();
        out.put_slice(b"ab");
        out.put_bytes(Bytes::from(vec![b'x'; SHARE_THRESHOLD]));
        out.put_slice(b"cd");
        assert_eq!(out.len(), 4 + SHARE_THRESHOLD);
        let mut slices = [IoSlice::new(&[]); 8];
        let n = out.io_slices(&mut slices);
        assert_eq!(n, 3);
        out.advance(3);
        assert_eq!(out.len(), 1 + SHARE_THRESHOLD);
        let all = out.take_all();
        assert_eq!(all.len(), 1 + SHARE_THRESHOLD);
        assert_eq!(&all[all.len() - 2..], b"cd");
    }
}
