//! Joins a client's streams to a process: stdin in, stdout and stderr out, terminal sizes
//! through, and the outcome reported once the output is drained.
//!
//! The order at the end follows upstream's server, because the Go client depends on it: the
//! process exits, its output is drained, stdout and stderr are closed, and only then is the
//! status written (a client reads the status after both output streams ended, so writing it
//! earlier would hang it).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::debug;

use super::{BoxRead, BoxWrite, RemoteStreams, StreamStatus};
use crate::runtime::stdio::{ProcessControl, ProcessEnd, ProcessStdio};

/// How long output may keep arriving after the process exited: a background child that
/// inherited stdout (`sh -c 'sleep 1d &'`) would otherwise hold the session open forever.
/// containerd's CRI plugin bounds the same wait (`drain_exec_sync_io_timeout`).
pub(crate) const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// What the session runs, for the status messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionKind {
    Exec { command: Vec<String> },
    Attach,
}

impl SessionKind {
    /// The status of a runtime failure, in upstream's words.
    pub(crate) fn failure(&self, error: impl std::fmt::Display) -> StreamStatus {
        let message = match self {
            SessionKind::Exec { .. } => format!("error executing command in container: {error}"),
            SessionKind::Attach => format!("error attaching to container: {error}"),
        };
        StreamStatus::Internal { message }
    }

    fn status(&self, end: ProcessEnd) -> StreamStatus {
        match (self, end) {
            (SessionKind::Exec { command }, ProcessEnd::Exited(code)) if code != 0 => {
                StreamStatus::NonZeroExit {
                    command: command.clone(),
                    code,
                }
            }
            _ => StreamStatus::Success,
        }
    }
}

/// Why a copy towards or from the client stopped.
enum Copied {
    /// The source ended (EOF).
    Done,
    /// The client went away (a read or write on its side failed).
    ClientGone,
}

/// Runs a session to its end and reports it. Never returns an error: whatever happens is
/// reported to the client in its status, and the process is always finished.
pub(crate) async fn run(kind: SessionKind, remote: RemoteStreams, process: ProcessStdio) {
    let ProcessStdio {
        stdin: proc_stdin,
        stdout: proc_stdout,
        stderr: proc_stderr,
        control,
    } = process;
    let control: std::sync::Arc<dyn ProcessControl> = control.into();
    let (gone_tx, mut gone_rx) = mpsc::channel::<()>(4);

    if let Some(client_stdin) = remote.stdin {
        let (control, gone) = (control.clone(), gone_tx.clone());
        tokio::spawn(async move {
            match copy_stdin(client_stdin, proc_stdin).await {
                Copied::Done => {
                    if let Err(e) = control.close_stdin().await {
                        debug!(error = %e, "closing the process's stdin failed");
                    }
                }
                Copied::ClientGone => {
                    let _ = gone.send(()).await;
                }
            }
        });
    }
    if let Some(mut sizes) = remote.resize {
        let control = control.clone();
        tokio::spawn(async move {
            while let Some(size) = sizes.recv().await {
                if let Err(e) = control.resize(size).await {
                    debug!(error = %e, "resize failed");
                }
            }
        });
    }
    let stdout = spawn_output(proc_stdout, remote.stdout, gone_tx.clone());
    let stderr = spawn_output(proc_stderr, remote.stderr, gone_tx);

    // Wait for the end; a client that leaves first hangs the process up (once), and the
    // wait goes on until the process is gone.
    let mut hung_up = false;
    let waited = {
        let wait = control.wait();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                end = &mut wait => break end,
                Some(()) = gone_rx.recv(), if !hung_up => {
                    hung_up = true;
                    debug!("client went away: hanging the session up");
                    control.hang_up().await;
                }
            }
        }
    };

    let deadline = tokio::time::Instant::now() + OUTPUT_DRAIN;
    for output in [stdout, stderr].into_iter().flatten() {
        close_output(output, deadline).await;
    }
    control.finish().await;
    let status = match waited {
        Ok(end) => kind.status(end),
        Err(e) => kind.failure(e),
    };
    remote.status.finish(status).await;
}

/// Copies the client's stdin into the process's (or, when the process has none, reads and
/// drops it so the client is never blocked). EOF from the client is `Done`.
async fn copy_stdin(mut from: BoxRead, to: Option<BoxWrite>) -> Copied {
    let mut buf = vec![0u8; 32 * 1024];
    let mut to = to;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => return Copied::ClientGone,
        };
        if let Some(w) = to.as_mut() {
            if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                // The process closed its stdin: keep reading so the client is not blocked.
                to = None;
            }
        }
    }
    if let Some(mut w) = to {
        let _ = w.shutdown().await;
    }
    Copied::Done
}

type OutputTask = JoinHandle<(Option<BoxWrite>, Copied)>;

/// Copies one of the process's outputs to the client. Without a client stream the output is
/// read and dropped, so the process never blocks on a full pipe.
fn spawn_output(
    from: Option<BoxRead>,
    to: Option<BoxWrite>,
    gone: mpsc::Sender<()>,
) -> Option<OutputTask> {
    let mut from = from?;
    Some(tokio::spawn(async move {
        let mut to = to;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return (to, Copied::Done),
                Ok(n) => n,
            };
            if let Some(w) = to.as_mut() {
                if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                    let _ = gone.send(()).await;
                    return (None, Copied::ClientGone);
                }
            }
        }
    }))
}

/// Waits for an output copy to reach EOF until `deadline`, then closes the client's stream
/// (EOF for the client). A copy still running at the deadline is dropped with its stream.
async fn close_output(task: OutputTask, deadline: tokio::time::Instant) {
    let abort = task.abort_handle();
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok((Some(mut w), Copied::Done))) => {
            let _ = w.shutdown().await;
        }
        Ok(_) => {}
        Err(_) => {
            debug!("output still open after the process exited: closing it");
            abort.abort();
        }
    }
}

#[cfg(test)]
mod tests;
