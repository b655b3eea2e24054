//! How the servers take connections: a cap on the connections each client address may hold
//! open, a deadline for each request's headers, and upstream's write deadline for each
//! response, so a client that opens many connections, dribbles its headers byte by byte
//! (slowloris), or never reads its answers, cannot exhaust the agent's sockets, memory or
//! tasks, nor lock other clients out.
//!
//! Upstream's kubelet relies on Go's http.Server (pkg/kubelet/server/server.go:
//! ReadTimeout and WriteTimeout 4 h, IdleTimeout 90 s, MaxHeaderBytes 1 MiB) and has no cap.
//! A cap for the whole server, as here before, let one client that opened enough idle
//! connections shut every other client (the API server among them) out of 10250; a cap per
//! client address bounds what one client holds and leaves everybody else served. A
//! connection beyond its client's cap is closed at once.

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
/// still cannot take the agent's file descriptors.
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// Open connections per client on the healthz server: local health checkers, a few at a time.
pub const HEALTHZ_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

/// Largest request head hyper buffers (upstream's MaxHeaderBytes, 1 MiB).
const MAX_BUF_SIZE: usize = 1 << 20;

/// The limits one server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections_per_client: usize,
}

impl ConnectionLimits {
    /// The main and read-only servers.
    pub const SERVING: ConnectionLimits = ConnectionLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        write_timeout: WRITE_TIMEOUT,
        max_connections_per_client: MAX_CONNECTIONS_PER_CLIENT,
    };
    /// The healthz server.
    pub const HEALTHZ: ConnectionLimits = ConnectionLimits {
        header_read_timeout: HEADER_READ_TIMEOUT,
        write_timeout: WRITE_TIMEOUT,
        max_connections_per_client: HEALTHZ_MAX_CONNECTIONS_PER_CLIENT,
    };
}

/// Open connections per client address.
#[derive(Debug, Default)]
struct PerClient {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a client; dropping it gives the slot back.
struct Slot {
    table: Arc<PerClient>,
    client: IpAddr,
}

impl PerClient {
    fn take(self: &Arc<Self>, client: IpAddr, max: usize) -> Option<Slot> {
        let mut open = self.open.lock().expect("connection table lock");
        let count = open.entry(client).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(Slot {
            table: self.clone(),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().expect("connection table lock");
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                // Gone clients leave no entry behind: the table is as big as the open set.
                open.remove(&self.client);
            }
        }
    }
}

/// Accepts connections in the background, at most `limits.max_connections_per_client` open
/// at once per client address, and runs `serve` on each in its own task.
pub(crate) fn spawn_accept_loop<F, Fut>(listener: TcpListener, limits: ConnectionLimits, serve: F)
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let table = Arc::new(PerClient::default());
    let max = limits.max_connections_per_client.max(1);
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
            let Some(slot) = table.take(client, max) else {
                debug!(%client, max, "client holds too many connections: closing the new one");
                drop(stream);
                continue;
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
