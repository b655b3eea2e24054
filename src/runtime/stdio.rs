//! The stdio of a process a client talks to: an exec process (`kubectl exec`) or a running
//! container (`kubectl attach`). The runtime opens it; the server's streaming layer copies
//! it to and from the client's streams, whatever protocol carries them (SPDY, WebSocket).

use std::pin::Pin;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Result;

pub type BoxRead = Pin<Box<dyn AsyncRead + Send>>;
pub type BoxWrite = Pin<Box<dyn AsyncWrite + Send>>;

/// A terminal size, as the resize stream carries it (`{"Width":120,"Height":40}`; the
/// names are matched case-insensitively by the decoder that reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct TermSize {
    pub width: u16,
    pub height: u16,
}

/// Which streams a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StdioRequest {
    pub stdin: bool,
    pub stdout: bool,
    /// Always false with `tty` (a terminal merges stderr into stdout).
    pub stderr: bool,
    pub tty: bool,
}

/// An opened process or container: the ends the client's streams are copied to and from,
/// and its control. Each end is `Some` exactly when it was requested and exists (attach to
/// a container without stdin gives no stdin, as containerd's CRI plugin does).
pub struct ProcessStdio {
    /// Writing feeds the process's stdin. Shutting it down is not enough to end the
    /// process's input: call [`ProcessControl::close_stdin`] when the client's stdin ends.
    pub stdin: Option<BoxWrite>,
    /// Ends (EOF) when the process's output closes.
    pub stdout: Option<BoxRead>,
    pub stderr: Option<BoxRead>,
    pub control: Box<dyn ProcessControl>,
}

/// How a streamed process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEnd {
    /// An exec process exited with this code (a signal death is 128 + the signal).
    Exited(i32),
    /// An attach session ended: the container's output closed or the container stopped.
    Detached,
}

/// Control of a streamed process. Every method may be called after the process ended.
#[async_trait]
pub trait ProcessControl: Send + Sync {
    /// Resizes the terminal (tty only; ignored otherwise). Sizes that arrive before the
    /// process has a terminal are kept and applied once it has one.
    async fn resize(&self, size: TermSize) -> Result<()>;
    /// The client's stdin ended: the process sees EOF on its stdin (for attach, only when
    /// the container is `stdinOnce` and has no tty; otherwise this session just detaches
    /// its input).
    async fn close_stdin(&self) -> Result<()>;
    /// The client went away before the process ended. An exec process gets SIGHUP, as a
    /// hung-up terminal would send, and SIGKILL if it is still there after a grace period,
    /// so abandoned sessions do not pile up processes in the container; an attach session
    /// only detaches (the container itself is never signalled).
    async fn hang_up(&self);
    /// Waits until the process exits (exec) or the attached container's output ends.
    async fn wait(&self) -> Result<ProcessEnd>;
    /// Releases what the session holds once the client is done: for exec, deletes the exec
    /// process (after it exited) and its FIFOs. Called exactly once, also after errors.
    async fn finish(&self);
}
