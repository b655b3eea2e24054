//! The streamed exec of `kubectl exec`: a process started through the shared exec
//! machinery of `exec` whose FIFO ends are handed to the server's copy loop as a
//! [`ProcessStdio`], with its control (resize, stdin end-of-file, hang-up, exit, removal)
//! behind [`ProcessControl`].

#[cfg(test)]
pub(crate) mod fake;

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWrite};
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::exec::ExecProcess;
use super::stdio::{ProcessControl, ProcessEnd, ProcessStdio, StdioRequest, TermSize};
use super::{Containerd, Result};

/// How long a hung-up exec process gets to end after SIGHUP before it is SIGKILLed.
pub const HANG_UP_GRACE: Duration = Duration::from_secs(5);

impl Containerd {
    /// Starts `cmd` in the running container with the requested stdio (see
    /// [`super::Runtime::exec_stdio`]). Streams the client did not ask for are still given
    /// to the shim, and read and dropped here until the session is finished.
    pub async fn exec_stdio(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
    ) -> Result<ProcessStdio> {
        let io = StdioRequest {
            stderr: io.stderr && !io.tty,
            ..io
        };
        let (process, pipes) = self
            .start_exec(container_id, cmd, io, super::exec::StateCheck::First)
            .await?;
        // Dropping the sender stops the drains (see `drain`).
        let (drain_stop, stop) = watch::channel(());
        let stdout = keep_or_drain(pipes.stdout, io.stdout, &stop);
        let stderr = pipes
            .stderr
            .and_then(|e| keep_or_drain(e, io.stderr, &stop));
        let stdin = pipes.stdin.map(SharedStdin::new);
        let control = ExecControl {
            process,
            tty: io.tty,
            stdin: stdin.clone(),
            drain_stop: Mutex::new(Some(drain_stop)),
        };
        Ok(ProcessStdio {
            stdin: stdin.map(|s| Box::pin(s) as super::stdio::BoxWrite),
            stdout,
            stderr,
            control: Box::new(control),
        })
    }
}

/// The reader when the client wants the stream; otherwise a task reads and drops it, so
/// the process never blocks on a full pipe nobody reads.
fn keep_or_drain(
    rx: pipe::Receiver,
    wanted: bool,
    stop: &watch::Receiver<()>,
) -> Option<super::stdio::BoxRead> {
    if wanted {
        return Some(Box::pin(rx));
    }
    tokio::spawn(drain(rx, stop.clone()));
    None
}

/// Reads until end-of-file or until the session is finished: a background child of the
/// process (`sleep 1d &`) can hold the pipe open long after the process exited.
async fn drain(mut rx: pipe::Receiver, mut stop: watch::Receiver<()>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            r = rx.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            // Only ever an error: the sender is dropped, never sent on.
            _ = stop.changed() => return,
        }
    }
}

/// The write end of the stdin FIFO, shared between the copy loop (which writes) and the
/// control (which closes it when the client's stdin ends, whether or not the copy loop
/// still holds its handle). Writes after the close fail with `BrokenPipe`.
#[derive(Clone)]
struct SharedStdin(Arc<Mutex<Option<pipe::Sender>>>);

impl SharedStdin {
    fn new(tx: pipe::Sender) -> Self {
        SharedStdin(Arc::new(Mutex::new(Some(tx))))
    }

    fn close(&self) {
        self.0.lock().expect("exec stdin").take();
    }

    fn poll_with<T>(
        &self,
        f: impl FnOnce(Pin<&mut pipe::Sender>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        // The lock is held only for one non-blocking poll.
        match self.0.lock().expect("exec stdin").as_mut() {
            Some(tx) => f(Pin::new(tx)),
            None => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the exec process's stdin is closed",
            ))),
        }
    }
}

impl AsyncWrite for SharedStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_with(|tx| tx.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_with(|tx| tx.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A FIFO has no half-close but closing it, and that is `close_stdin`'s to do (the
        // shim's own writer must go too).
        Poll::Ready(Ok(()))
    }
}

/// The control of one exec process.
struct ExecControl {
    process: ExecProcess,
    tty: bool,
    stdin: Option<SharedStdin>,
    /// Dropped when the session finishes, which stops the drains of unread output.
    drain_stop: Mutex<Option<watch::Sender<()>>>,
}

#[async_trait]
impl ProcessControl for ExecControl {
    async fn resize(&self, size: TermSize) -> Result<()> {
        // Only a terminal has a size; the process has one from the moment it started, and
        // exec_stdio returns only after that, so there is nothing to queue.
        if !self.tty || self.process.exited().is_some() {
            return Ok(());
        }
        self.process.resize(size.width, size.height).await
    }

    async fn close_stdin(&self) -> Result<()> {
        let Some(stdin) = &self.stdin else {
            return Ok(());
        };
        stdin.close();
        self.process.close_stdin().await
    }

    async fn hang_up(&self) {
        if self.process.exited().is_some() {
            return;
        }
        debug!(
            container_id = %self.process.container_id,
            exec_id = %self.process.exec_id,
            "exec client went away: SIGHUP"
        );
        self.process.kill(libc::SIGHUP).await;
        if tokio::time::timeout(HANG_UP_GRACE, self.process.wait())
            .await
            .is_err()
        {
            warn!(
                container_id = %self.process.container_id,
                exec_id = %self.process.exec_id,
                grace = ?HANG_UP_GRACE,
                "hung-up exec process still running: SIGKILL"
            );
            self.process.kill(libc::SIGKILL).await;
        }
    }

    async fn wait(&self) -> Result<ProcessEnd> {
        self.process.wait().await.map(ProcessEnd::Exited)
    }

    async fn finish(&self) {
        if let Some(stdin) = &self.stdin {
            stdin.close();
        }
        self.drain_stop.lock().expect("drain stop").take();
        self.process.delete().await;
    }
}
