//! The two halves of one SPDY stream as tokio byte streams: what the client sends on it
//! (`StreamReader`) and what we send (`StreamWriter`, DATA frames, FIN on shutdown).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures::Sink;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use super::frame::{Frame, FLAG_FIN};
use super::outbox::{Outbox, Outgoing};

/// Go's `io.Copy` writes at most 32 KiB per DATA frame; we split larger writes the same way.
pub(crate) const MAX_DATA_CHUNK: usize = 32 * 1024;

/// What the connection's reader learned about a stream from the client.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// The client ended its side (FIN or RST): the reader's end is a clean EOF. Without it,
    /// a closed channel means the connection was lost.
    pub(crate) peer_done: AtomicBool,
    /// The client reset the stream: our writes have nowhere to go.
    pub(crate) reset: AtomicBool,
}

pub(crate) struct StreamReader {
    rx: mpsc::Receiver<Bytes>,
    chunk: Bytes,
    state: Arc<StreamState>,
}

impl StreamReader {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>, state: Arc<StreamState>) -> Self {
        StreamReader {
            rx,
            chunk: Bytes::new(),
            state,
        }
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.chunk.is_empty() {
                let n = self.chunk.len().min(buf.remaining());
                buf.put_slice(&self.chunk.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(chunk) => self.chunk = chunk,
                None if self.state.peer_done.load(Ordering::Acquire) => return Poll::Ready(Ok(())),
                None => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "SPDY connection lost",
                    )))
                }
            }
        }
    }
}

pub(crate) struct StreamWriter {
    id: u32,
    out: Outbox,
    state: Arc<StreamState>,
    fin_sent: bool,
}

impl StreamWriter {
    pub(crate) fn new(id: u32, out: Outbox, state: Arc<StreamState>) -> Self {
        StreamWriter {
            id,
            out,
            state,
            fin_sent: false,
        }
    }

    fn poll_send(&mut self, cx: &mut Context<'_>, frame: Frame) -> Poll<io::Result<()>> {
        let mut out = Pin::new(&mut self.out);
        if ready!(out.as_mut().poll_ready(cx)).is_err() {
            return Poll::Ready(Err(closed()));
        }
        out.start_send(Outgoing::Frame(frame))
            .map_err(|_| closed())?;
        Poll::Ready(Ok(()))
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "SPDY connection closed")
}

impl AsyncWrite for StreamWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.fin_sent {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write on a closed SPDY stream",
            )));
        }
        if self.state.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY stream reset by the client",
            )));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = buf.len().min(MAX_DATA_CHUNK);
        let frame = Frame::Data {
            stream_id: self.id,
            flags: 0,
            data: Bytes::copy_from_slice(&buf[..n]),
        };
        ready!(self.poll_send(cx, frame))?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Frames are queued in order; the connection's writer flushes whenever its queue
        // runs dry.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.fin_sent || self.state.reset.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        let frame = Frame::Data {
            stream_id: self.id,
            flags: FLAG_FIN,
            data: Bytes::new(),
        };
        ready!(self.poll_send(cx, frame))?;
        self.fin_sent = true;
        Poll::Ready(Ok(()))
    }
}

impl Drop for StreamWriter {
    /// A writer dropped without a shutdown still ends its stream for the client (best
    /// effort: a full queue skips it, and the session's close ends every stream anyway).
    fn drop(&mut self) {
        if !self.fin_sent && !self.state.reset.load(Ordering::Acquire) {
            let _ = self.out.try_send(Outgoing::Frame(Frame::Data {
                stream_id: self.id,
                flags: FLAG_FIN,
                data: Bytes::new(),
            }));
        }
    }
}
