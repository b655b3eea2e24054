//! The agent's side of an attach session: a connection to the container's relay, turned
//! into the [`ProcessStdio`] the streaming server copies to and from the client.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use super::protocol::{self, Container, Frame, Wants};
use crate::runtime::stdio::{ProcessControl, ProcessEnd, ProcessStdio, StdioRequest, TermSize};
use crate::runtime::Result;

/// Bytes buffered between the relay connection and the server's copy of each output stream.
const OUTPUT_BUFFER: usize = 64 * 1024;
/// How long the relay may take to answer HELLO.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(30);

/// What a session asks of containerd about the container's own process, behind a trait so
/// tests can watch the calls.
#[async_trait]
pub trait TaskIoControl: Send + Sync {
    /// ResizePty with exec id "".
    async fn resize(&self, size: TermSize) -> Result<()>;
    /// CloseIO(stdin) with exec id "": the shim holds a write end of the stdin FIFO of its
    /// own until told to close it, so the relay letting go is not enough for EOF.
    async fn close_stdin(&self) -> Result<()>;
}

/// Connects to the relay listening on `socket` and opens the streams `io` asks for. Stdin is
/// given only when the container has one; stderr never with a terminal.
pub async fn connect(
    socket: &Path,
    io: StdioRequest,
    task: Arc<dyn TaskIoControl>,
) -> io::Result<(ProcessStdio, Container)> {
    let stream = UnixStream::connect(socket).await?;
    let (mut rd, mut wr) = stream.into_split();
    let wants = Wants {
        stdin: io.stdin,
        stdout: io.stdout,
        stderr: io.stderr,
    };
    wr.write_all(&Frame::encode(protocol::HELLO, &[wants.to_byte()]))
        .await?;
    let welcome = tokio::time::timeout(WELCOME_TIMEOUT, protocol::read_frame_async(&mut rd))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the io relay did not answer"))??;
    let container = match welcome {
        Some(f) if f.kind == protocol::WELCOME && f.payload.len() == 1 => {
            Container::from_byte(f.payload[0])
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the io relay did not welcome the session",
            ))
        }
    };
    let pair = |wanted: bool| wanted.then(|| tokio::io::duplex(OUTPUT_BUFFER));
    let (stdout_r, stdout_w) = pair(io.stdout).unzip();
    let (stderr_r, stderr_w) = pair(io.stderr && !container.tty).unzip();
    let (ended_tx, ended) = watch::channel(false);
    let demux = tokio::spawn(async move {
        let (mut out, mut err) = (stdout_w, stderr_w);
        while let Ok(Some(frame)) = protocol::read_frame_async(&mut rd).await {
            let target = match frame.kind {
                protocol::STDOUT => &mut out,
                protocol::STDERR => &mut err,
                protocol::END => break,
                _ => continue,
            };
            if let Some(w) = target {
                if w.write_all(&frame.payload).await.is_err() {
                    // The server stopped reading this stream; keep the other one going.
                    *target = None;
                }
            }
        }
        // Dropping the writers is EOF on the server's readers.
        drop((out, err));
        let _ = ended_tx.send(true);
    });
    let wr = Arc::new(Mutex::new(Some(wr)));
    let stdin = (io.stdin && container.stdin).then(|| {
        Box::pin(FramedStdin {
            wr: wr.clone(),
            pending: None,
        }) as crate::runtime::stdio::BoxWrite
    });
    let stdio = ProcessStdio {
        stdin,
        stdout: stdout_r.map(|r: DuplexStream| Box::pin(r) as crate::runtime::stdio::BoxRead),
        stderr: stderr_r.map(|r: DuplexStream| Box::pin(r) as crate::runtime::stdio::BoxRead),
        control: Box::new(AttachControl {
            wr,
            ended,
            demux: std::sync::Mutex::new(Some(demux)),
            container,
            task: Some(task),
        }),
    };
    Ok((stdio, container))
}

type SharedWriter = Arc<Mutex<Option<OwnedWriteHalf>>>;

async fn send(wr: &SharedWriter, kind: u8, payload: &[u8]) -> io::Result<()> {
    match wr.lock().await.as_mut() {
        Some(w) => w.write_all(&Frame::encode(kind, payload)).await,
        None => Err(io::ErrorKind::BrokenPipe.into()),
    }
}

/// The container's stdin as an `AsyncWrite`: each write becomes one STDIN frame, written whole
/// under the connection's lock so a later CLOSE_STDIN can never overtake it.
struct FramedStdin {
    wr: SharedWriter,
    pending: Option<Pin<Box<dyn Future<Output = io::Result<usize>> + Send>>>,
}

impl AsyncWrite for FramedStdin {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            // Chunks stay well under the relay's frame limit.
            let data = buf[..buf.len().min(protocol::MAX_PAYLOAD / 2)].to_vec();
            let wr = self.wr.clone();
            self.pending = Some(Box::pin(async move {
                send(&wr, protocol::STDIN, &data).await?;
                Ok(data.len())
            }));
        }
        let done = self.pending.as_mut().map(|f| f.as_mut().poll(cx));
        match done {
            Some(Poll::Ready(r)) => {
                self.pending = None;
                Poll::Ready(r)
            }
            _ => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.pending.as_mut().map(|f| f.as_mut().poll(cx)) {
            None => Poll::Ready(Ok(())),
            Some(Poll::Pending) => Poll::Pending,
            Some(Poll::Ready(r)) => {
                self.pending = None;
                Poll::Ready(r.map(|_| ()))
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Ending the input is `close_stdin`'s decision (stdinOnce); see `ProcessStdio::stdin`.
        self.poll_flush(cx)
    }
}

struct AttachControl {
    wr: SharedWriter,
    ended: watch::Receiver<bool>,
    demux: std::sync::Mutex<Option<JoinHandle<()>>>,
    container: Container,
    /// None for a container without a relay (nothing to resize or close).
    task: Option<Arc<dyn TaskIoControl>>,
}

impl AttachControl {
    async fn detach(&self) {
        if let Some(mut w) = self.wr.lock().await.take() {
            let _ = w.shutdown().await;
        }
        if let Some(h) = self.demux.lock().unwrap_or_else(|e| e.into_inner()).take() {
            h.abort();
        }
    }
}

#[async_trait]
impl ProcessControl for AttachControl {
    async fn resize(&self, size: TermSize) -> Result<()> {
        match &self.task {
            Some(task) if self.container.tty && !*self.ended.borrow() => task.resize(size).await,
            _ => Ok(()),
        }
    }

    async fn close_stdin(&self) -> Result<()> {
        // A relay already gone has nothing left to close.
        if send(&self.wr, protocol::CLOSE_STDIN, b"").await.is_err() {
            return Ok(());
        }
        // As containerd's CRI plugin: the container's stdin ends with the first session's
        // only for stdinOnce without a tty (its output keeps flowing until the container
        // stops); otherwise the session ends with its input, as `kubectl attach -i` expects.
        match &self.task {
            Some(task) if self.container.stdin_once && !self.container.tty => {
                task.close_stdin().await
            }
            _ => {
                self.detach().await;
                Ok(())
            }
        }
    }

    async fn hang_up(&self) {
        // Attach never signals the container: the session just leaves.
        self.detach().await;
    }

    async fn wait(&self) -> Result<ProcessEnd> {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
        Ok(ProcessEnd::Detached)
    }

    async fn finish(&self) {
        self.detach().await;
    }
}

/// Attach to a container without a relay (its output goes to the logger): no streams carry
/// anything, and they end when `exited` resolves (the container stopped).
pub fn silent_until(
    io: StdioRequest,
    exited: impl Future<Output = ()> + Send + 'static,
) -> ProcessStdio {
    let pair = |wanted: bool| wanted.then(|| tokio::io::duplex(1));
    let (stdout_r, stdout_w) = pair(io.stdout).unzip();
    let (stderr_r, stderr_w) = pair(io.stderr && !io.tty).unzip();
    let (ended_tx, ended) = watch::channel(false);
    let waiter = tokio::spawn(async move {
        exited.await;
        drop((stdout_w, stderr_w));
        let _ = ended_tx.send(true);
    });
    ProcessStdio {
        stdin: None,
        stdout: stdout_r.map(|r: DuplexStream| Box::pin(r) as crate::runtime::stdio::BoxRead),
        stderr: stderr_r.map(|r: DuplexStream| Box::pin(r) as crate::runtime::stdio::BoxRead),
        control: Box::new(AttachControl {
            wr: Arc::new(Mutex::new(None)),
            ended,
            demux: std::sync::Mutex::new(Some(waiter)),
            container: Container::default(),
            task: None,
        }),
    }
}

#[cfg(test)]
mod tests;
