//! Output pipes for a component's stdout and stderr that keep the first
//! `cap` bytes and drop the rest, instead of trapping as wasmtime-wasi's
//! `MemoryOutputPipe` does: a flood is recorded as `truncated`, never a crash.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

#[derive(Debug, Default)]
struct Buffer {
    bytes: Vec<u8>,
    /// Bytes written in all, kept or not.
    total: u64,
}

/// A shared, capped, in-memory sink.
#[derive(Debug, Clone)]
pub(crate) struct CappedPipe {
    cap: usize,
    buf: Arc<Mutex<Buffer>>,
}

impl CappedPipe {
    /// A pipe that keeps at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> CappedPipe {
        CappedPipe { cap, buf: Arc::default() }
    }

    fn push(&self, data: &[u8]) {
        let mut b = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
        b.total += data.len() as u64;
        let room = self.cap.saturating_sub(b.bytes.len());
        let take = room.min(data.len());
        b.bytes.extend_from_slice(&data[..take]);
    }

    /// What was kept, and how many bytes were written in all.
    pub(crate) fn contents(&self) -> (Vec<u8>, u64) {
        let b = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
        (b.bytes.clone(), b.total)
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CappedPipe {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_cap_bytes_and_counts_the_rest() {
        let p = CappedPipe::new(4);
        p.push(b"abc");
        p.push(b"defgh");
        let (kept, total) = p.contents();
        assert_eq!(kept, b"abcd");
        assert_eq!(total, 8);
    }
}
