//! Output pipes for a component's stdout and stderr that keep the head and the
//! tail of what is written within `cap` bytes and count the middle
//! ([`HeadTail`]), instead of trapping as wasmtime-wasi's `MemoryOutputPipe`
//! does: a flood is recorded as `truncated`, never a crash.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::capture::HeadTail;
use crate::{OutputTap, Stream};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A shared, capped, in-memory sink.
#[derive(Clone)]
pub(crate) struct CappedPipe {
    buf: Arc<Mutex<HeadTail>>,
    /// Sees each write as it comes (`warden call --stream`).
    tap: Option<(OutputTap, Stream)>,
}

impl std::fmt::Debug for CappedPipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CappedPipe").field("buf", &self.buf).field("tap", &self.tap.as_ref().map(|t| t.1)).finish()
    }
}

impl CappedPipe {
    /// A pipe that keeps at most `cap` bytes: the first half and the last half.
    pub(crate) fn new(cap: usize) -> CappedPipe {
        CappedPipe { buf: Arc::new(Mutex::new(HeadTail::new(cap))), tap: None }
    }

    /// The same pipe, showing each write to `tap` as `stream`.
    pub(crate) fn tapped(mut self, tap: Option<&OutputTap>, stream: Stream) -> CappedPipe {
        self.tap = tap.map(|t| (t.clone(), stream));
        self
    }

    fn push(&self, data: &[u8]) {
        if let Some((tap, stream)) = &self.tap {
            tap(*stream, data);
        }
        self.buf.lock().unwrap_or_else(PoisonError::into_inner).push(data);
    }

    /// What was kept, and the count of what was not.
    pub(crate) fn contents(&self) -> HeadTail {
        self.buf.lock().unwrap_or_else(PoisonError::into_inner).clone()
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
    fn keeps_the_head_and_tail_and_counts_the_rest() {
        let p = CappedPipe::new(4);
        p.push(b"abc");
        p.push(b"defgh");
        let kept = p.contents();
        assert_eq!(kept.joined(), b"abgh");
        assert_eq!(kept.total(), 8);
    }
}
