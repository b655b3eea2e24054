//! The streaming endpoints of port 10250: `/exec`, `/attach`, `/portForward` and `/run`.
//!
//! The layers, each in its own module:
//! - the wire protocols a client's streams arrive in: SPDY/3.1 (`spdy`, what the apiserver
//!   speaks to the kubelet for every kubectl transport) and the WebSocket channel protocols
//!   (`websocket`, passed through by the apiserver for other clients). Each turns an
//!   upgraded connection into [`RemoteStreams`] (exec, attach) or port-forward pairs;
//! - the runtime's side: [`crate::runtime::stdio::ProcessStdio`] (an exec process or an
//!   attached container) and [`PortDialer`] (a connection inside the pod's network
//!   namespace);
//! - between them, the copy that joins a client's streams to a process and reports how it
//!   ended.

pub(crate) mod resize;
pub(crate) mod routes;
pub(crate) mod session;
pub mod spdy;
pub mod status;
pub mod websocket;

use std::pin::Pin;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

pub use crate::runtime::stdio::{BoxRead, BoxWrite, TermSize};
pub use status::StreamStatus;

/// The client's side of an exec or attach session, whatever protocol carries it. Each
/// stream is `Some` exactly when the client asked for it.
pub struct RemoteStreams {
    /// Ends (EOF) when the client's stdin ends (SPDY FIN, WebSocket v5 CLOSE).
    pub stdin: Option<BoxRead>,
    /// Shutting a writer down signals EOF on that stream to the client.
    pub stdout: Option<BoxWrite>,
    pub stderr: Option<BoxWrite>,
    /// Terminal sizes in the order the client sent them (tty sessions of protocol v3+).
    pub resize: Option<mpsc::Receiver<TermSize>>,
    /// Where the outcome goes once stdout and stderr have been shut down.
    pub status: Box<dyn StatusSink>,
}

/// Reports the outcome of a session in the negotiated protocol's format, then closes the
/// connection (SPDY: FIN on the error stream, GOAWAY; WebSocket: channel 3, close 1000).
#[async_trait]
pub trait StatusSink: Send {
    async fn finish(self: Box<Self>, status: StreamStatus);
}

/// Opens connections to one pod's ports from inside its network namespace.
#[async_trait]
pub trait PortDialer: Send + Sync {
    /// A connection to `localhost:<port>` inside the pod (IPv4, then IPv6). The error's
    /// text is what the client sees after upstream's `error forwarding port` prefix.
    async fn dial(&self, port: u16) -> Result<TcpStream, DialError>;
    /// How upstream names the pod in port-forward errors: the sandbox id and the pod UID
    /// (`error forwarding port 80 to pod <sandbox>, uid <uid>: ...`).
    fn pod_sandbox_id(&self) -> &str;
    fn pod_uid(&self) -> &str;
}

/// Why a port-forward connection could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DialError(pub String);

/// A bidirectional byte stream, for transports that hand out one object per stream.
pub trait Duplex: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> Duplex for T {}
pub type BoxDuplex = Pin<Box<dyn Duplex>>;
