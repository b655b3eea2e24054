//! How the servers take connections: a cap on open connections per server and a deadline
//! for each request's headers, so a client that opens many connections, or dribbles its
//! headers byte by byte (slowloris), cannot exhaust the agent's sockets, memory or tasks.
//!
//! Upstream's kubelet relies on Go's http.Server timeouts and has no cap; the cap here is what
//! the issue asked for. Once a server has its maximum, it stops accepting: new connections
//! wait in the kernel's listen backlog (and are refused once that is full) until a slot
//! frees.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// Time a client has for a request's headers. hyper starts this clock whenever the
/// connection waits for a request, first or next, so it is also the keep-alive idle timeout.
/// 30 s is hyper's own default and far beyond what a real client needs (headers go out in one
/// write); Go clients see the idle close and retry on a new connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Open connections per server (10250, 10255). Long-lived streams (logs -f, exec) hold one
/// each; 1024 leaves room for many of them while staying well under the usual 64k file limit
/// across all servers.
pub const MAX_CONNECTIONS: usize = 1024;

/// Open connections on the healthz server: local health checkers only, a few at a time.
pub const HEALTHZ_MAX_CONNECTIONS: usize = 64;

/// Largest request head hyper buffers (Go's MaxHeaderBytes default, 1 MiB).
const MAX_BUF_SIZE: usize = 1 << 20;

/// The limits one server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The main and read-only servers.
    pub const SERVING: ConnectionLimits = ConnectionLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
    };
    /// The healthz server.
    pub const HEALTHZ: ConnectionLimits = ConnectionLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        max_connections: HEALTHZ_MAX_CONNECTIONS,
    };
}

/// Accepts connections in the background, at most `limits.max_connections` open at once,
/// and runs `serve` on each in its own task.
pub(crate) fn spawn_accept_loop<F, Fut>(listener: TcpListener, limits: ConnectionLimits, serve: F)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        loop {
            // A slot first, then accept: at the cap, connections queue in the kernel.
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and the like: pause rather than spin on the error.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let connection = serve(stream);
            tokio::spawn(async move {
                connection.await;
                drop(slot);
            });
        }
    });
}

/// Serves HTTP/1.1 on one connection with the header deadline.
pub(crate) async fn serve_connection<S, F, Fut, B>(stream: S, limits: ConnectionLimits, handler: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = hyper::service::service_fn(handler);
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_SIZE)
        .serve_connection(TokioIo::new(stream), svc)
        // exec, attach and port-forward switch protocols (SPDY/3.1, WebSocket) on the
        // connection; the apiserver dials with HTTP/1.1 for exactly that.
        .with_upgrades()
        .await
    {
        debug!(error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests;
