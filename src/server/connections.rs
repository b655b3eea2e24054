//! How the servers take connections: a cap on the connections each client address may hold
//! open, a cap for 10250 and 10255 together below the process's open-file limit, a deadline
//! for each request's headers, and upstream's write deadline for each response, so a client
//! that opens many connections, dribbles its headers byte by byte (slowloris), or never reads
//! its answers, cannot exhaust the agent's sockets, memory or tasks, nor lock other clients
//! out.
//!
//! Upstream's kubelet relies on Go's http.Server (pkg/kubelet/server/server.go:
//! ReadTimeout and WriteTimeout 4 h, IdleTimeout 90 s, MaxHeaderBytes 1 MiB) and has no cap.
//! A cap for the whole server alone, as here once, let one client that opened enough idle
//! connections shut every other client (the API server among them) out of 10250; a cap per
//! client address bounds what one client holds and leaves everybody else served. The total
//! cap keeps many clients together (every pod on the node is one) from taking the
//! descriptors containerd's and CSI drivers' connections and the agent's file opens need. A
//! connection beyond either cap is closed at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tracing::{debug, warn};

/// Time a client has for a request's headers (the slowloris bound; Go's server has none
/// beyond its 4 h ReadTimeout). hyper starts this clock whenever the connection waits for a
/// request, first or next, so it is also the keep-alive idle timeout: 30 s, stricter than
/// upstream's IdleTimeout of 90 s, which Go clients handle (they retry on a new connection).
/// 30 s is hyper's own default and far beyond what a real client needs (headers go out in
/// one write).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Upstream's WriteTimeout (and, since the agent never reads a request body, its
/// ReadTimeout): a response (a `logs -f` included) cannot be written later than this after
/// its request was read. Upgraded connections (exec, attach, port-forward) leave HTTP and
/// have the streaming idle timeout instead.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// Open connections one client address may hold on the main and read-only servers. Long-lived
/// streams (logs -f, exec) hold one each, and the API server (or a konnectivity agent) may
/// carry many users' streams from one address: 1024 leaves room for that while one client
/// still cannot take the agent's file descriptors. Lower when the open-file limit is low, see
/// [`ConnectionLimits::serving_for`].
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// Open connections per client on the healthz server: local health checkers, a few at a time.
pub const HEALTHZ_MAX_CONNECTIONS_PER_CLIENT: usize = 64;
/// Open connections on the healthz server in all.
pub const HEALTHZ_MAX_CONNECTIONS: usize = 256;

/// Descriptors kept out of the servers' reach, at least: containerd's and CSI drivers'
/// connections, exec sessions' FIFOs and streams, log files, inotify, the runtime's own.
const MIN_RESERVED_FILES: u64 = 128;

/// Largest request head hyper buffers (upstream's MaxHeaderBytes, 1 MiB).
const MAX_BUF_SIZE: usize = 1 << 20;

/// The limits one server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections_per_client: usize,
    /// Open connections in all, over every server sharing one [`ConnectionTable`].
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The healthz server.
    pub const HEALTHZ: ConnectionLimits = ConnectionLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        write_timeout: WRITE_TIMEOUT,
        max_connections_per_client: HEALTHZ_MAX_CONNECTIONS_PER_CLIENT,
        max_connections: HEALTHZ_MAX_CONNECTIONS,
    };

    /// The main and read-only servers under the process's open-file limit as it is now (the
    /// agent raised it at start).
    pub fn serving() -> ConnectionLimits {
        Self::serving_for(crate::open_files::current_soft_limit(1024))
    }

    /// The main and read-only servers in a process that may open `open_files` descriptors:
    /// a quarter of them (at least [`MIN_RESERVED_FILES`]) stays out of the servers' reach,
    /// and one client may hold a quarter of the rest, at most [`MAX_CONNECTIONS_PER_CLIENT`],
    /// so a greedy client leaves room for three more as greedy and then some.
    pub fn serving_for(open_files: u64) -> ConnectionLimits {
        let reserved = (open_files / 4).max(MIN_RESERVED_FILES);
        let total = usize::try_from(open_files.saturating_sub(reserved))
            .unwrap_or(usize::MAX)
            .max(8);
        ConnectionLimits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_connections_per_client: (total / 4).clamp(1, MAX_CONNECTIONS_PER_CLIENT),
            max_connections: total,
        }
    }
}

/// Open connections per client address, and in all, of the servers that share it (10250
/// and 10255 share one, so a client cannot double its share by using both).
#[derive(Debug, Default)]
pub(crate) struct ConnectionTable {
    open: Mutex<OpenConnections>,
}

#[derive(Debug, Default)]
struct OpenConnections {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// One open connection of a client; dropping it gives the slot back.
struct Slot {
    table: Arc<ConnectionTable>,
    client: IpAddr,
}

/// Why a connection was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    ClientFull,
    ServerFull,
}

impl ConnectionTable {
    fn take(self: &Arc<Self>, client: IpAddr, limits: &ConnectionLimits) -> Result<Slot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mine = open.per_client.get(&client).copied().unwrap_or(0);
        if mine >= limits.max_connections_per_client.max(1) {
            return Err(Refusal::ClientFull);
        }
        if open.total >= limits.max_connections.max(1) {
            return Err(Refusal::ServerFull);
        }
        open.total += 1;
        *open.per_client.entry(client).or_insert(0) += 1;
        Ok(Slot {
            table: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.per_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                // Gone clients leave no entry behind: the table is as big as the open set.
                open.per_client.remove(&self.client);
            }
        }
    }
}

/// Accepts connections in the background, within `limits`' caps counted in `table`, and runs
/// `serve` on each in its own task.
pub(crate) fn spawn_accept_loop<F, Fut>(
    listener: TcpListener,
    limits: ConnectionLimits,
    table: Arc<ConnectionTable>,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and the like: pause rather than spin on the error.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // An IPv4 client reaching an IPv6 socket counts as its IPv4 address.
            let client = peer.ip().to_canonical();
            let slot = match table.take(client, &limits) {
                Ok(slot) => slot,
                Err(Refusal::ClientFull) => {
                    debug!(%client, max = limits.max_connections_per_client,
                        "client holds too many connections: closing the new one");
                    continue;
                }
                Err(Refusal::ServerFull) => {
                    debug!(%client, max = limits.max_connections,
                        "the servers hold too many connections: closing the new one");
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

/// Serves HTTP/1.1 on one connection with the header deadline and each response's write
/// deadline.
pub(crate) async fn serve_connection<S, F, Fut, B>(stream: S, limits: ConnectionLimits, handler: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let clock = Arc::new(WriteClock::default());
    let io = WriteDeadline {
        inner: stream,
        clock: clock.clone(),
        timer: None,
    };
    let handler = Arc::new(handler);
    let write_timeout = limits.write_timeout;
    let svc = hyper::service::service_fn(move |req| {
        let (handler, clock) = (handler.clone(), clock.clone());
        async move {
            // The clock starts once the request head is read, as Go's WriteTimeout.
            clock.set(Some(tokio::time::Instant::now() + write_timeout));
            let response = handler(req).await?;
            if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                // The connection leaves HTTP: exec, attach and port-forward sessions have
                // the streaming idle timeout instead of a deadline.
                clock.set(None);
            }
            Ok::<_, Infallible>(response)
        }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_SIZE)
        .serve_connection(TokioIo::new(io), svc)
        // exec, attach and port-forward switch protocols (SPDY/3.1, WebSocket) on the
        // connection; the apiserver dials with HTTP/1.1 for exactly that.
        .with_upgrades()
        .await
    {
        debug!(error = %e, "connection ended with an error");
    }
}

/// The write deadline of a connection's current response (None: no deadline).
#[derive(Debug, Default)]
struct WriteClock {
    deadline: Mutex<Option<Instant>>,
}

impl WriteClock {
    fn set(&self, deadline: Option<Instant>) {
        *self.deadline.lock().expect("write clock lock") = deadline;
    }

    fn get(&self) -> Option<Instant> {
        *self.deadline.lock().expect("write clock lock")
    }
}

/// A connection whose writes fail once the current response's deadline has passed, as a Go
/// connection's write deadline: a client that stops reading is dropped, not held forever.
struct WriteDeadline<S> {
    inner: S,
    clock: Arc<WriteClock>,
    /// The timer of the deadline a blocked write waits under.
    timer: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<S> WriteDeadline<S> {
    /// Err once the deadline has passed; else arms the timer so a blocked write wakes at it.
    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        let Some(deadline) = self.clock.get() else {
            self.timer = None;
            return Ok(());
        };
        if !matches!(&self.timer, Some((armed, _)) if *armed == deadline) {
            self.timer = Some((deadline, Box::pin(tokio::time::sleep_until(deadline))));
        }
        let (_, timer) = self.timer.as_mut().expect("armed above");
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the response was not written within the write timeout",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
