//! Port-forward's dial: a TCP connection to `localhost:<port>` as seen from inside a pod's
//! network namespace, as containerd's CRI plugin opens it (`sandbox_portforward_linux.go`):
//! IPv4 first, then IPv6, one after the other, so no attempt runs outside the namespace.
//!
//! `setns(CLONE_NEWNET)` moves the calling thread, so the dial runs on a throwaway std
//! thread that exits right after it (see `netns` for why tokio threads must never change
//! namespace). A socket keeps the namespace it was created in, so the connection is handed
//! to tokio afterwards and used from any thread.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sched::{setns, CloneFlags};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Bounds each connect attempt, so a listener that never answers cannot hold the stream
/// (containerd uses the same 5 s).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a port-forward connection could not be opened. The texts are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum PortForwardError {
    #[error("invalid port")]
    InvalidPort,
    /// Nothing answered on either loopback address (containerd's words, including its
    /// missing colon after IPv6 and the trailing space).
    #[error(
        "failed to connect to localhost:{port} inside namespace {namespace:?}, IPv4: {v4} IPv6 {v6} "
    )]
    Connect {
        port: u16,
        /// The pinned namespace's path, or `host` for a hostNetwork pod.
        namespace: String,
        v4: Box<DialFailure>,
        v6: Box<DialFailure>,
    },
    #[error("failed to enter network namespace {path}: {source}")]
    EnterNetns {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("port-forward to port {port}: {source}")]
    Socket {
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("port-forward to port {port}: the dialling thread died before answering")]
    Thread { port: u16 },
}

/// One failed connect, worded as Go's `net.Dial` error (`dial tcp4 127.0.0.1:80: connect:
/// connection refused`), which is what upstream's message embeds.
#[derive(Debug, thiserror::Error)]
#[error("dial {network} {addr}: {}", go_error_text(.source))]
pub struct DialFailure {
    network: &'static str,
    addr: SocketAddr,
    #[source]
    source: io::Error,
}

/// Go words an errno in lower case under the syscall's name (`connect: connection
/// refused`) and a timeout as `i/o timeout`.
fn go_error_text(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::TimedOut {
        return "i/o timeout".into();
    }
    match e.raw_os_error() {
        Some(errno) => {
            let desc = nix::errno::Errno::from_raw(errno).desc();
            let mut chars = desc.chars();
            let lower = match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => String::new(),
            };
            format!("connect: {lower}")
        }
        None => e.to_string(),
    }
}

/// Connects to `localhost:<port>` inside the network namespace pinned at `netns` (`None`:
/// a hostNetwork pod, dialled from the agent's own namespace): `127.0.0.1` first, then
/// `[::1]`.
pub async fn dial(netns: Option<&Path>, port: u16) -> Result<TcpStream, PortForwardError> {
    if port == 0 {
        return Err(PortForwardError::InvalidPort);
    }
    let netns = netns.map(Path::to_path_buf);
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("port-forward-dial".into())
        .spawn(move || {
            // The receiver may be gone (the client left): the socket is then just closed.
            let _ = tx.send(dial_on_throwaway_thread(netns.as_deref(), port));
        })
        .map_err(|source| PortForwardError::Socket { port, source })?;
    let std_stream = rx.await.map_err(|_| PortForwardError::Thread { port })??;
    std_stream
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(std_stream))
        .map_err(|source| PortForwardError::Socket { port, source })
}

/// Leaves the calling thread inside the pod's namespace: call it only on a thread that
/// exits right afterwards.
fn dial_on_throwaway_thread(
    netns: Option<&Path>,
    port: u16,
) -> Result<std::net::TcpStream, PortForwardError> {
    if let Some(path) = netns {
        let enter = |source| PortForwardError::EnterNetns {
            path: path.to_path_buf(),
            source,
        };
        let ns = File::open(path).map_err(enter)?;
        setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| enter(io::Error::from(e)))?;
    }
    let attempt = |network, addr: SocketAddr| {
        std::net::TcpStream::connect_timeout(&addr, DIAL_TIMEOUT).map_err(|source| DialFailure {
            network,
            addr,
            source,
        })
    };
    let v4 = match attempt("tcp4", (Ipv4Addr::LOCALHOST, port).into()) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    let v6 = match attempt("tcp6", (Ipv6Addr::LOCALHOST, port).into()) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    Err(PortForwardError::Connect {
        port,
        namespace: netns.map_or_else(|| "host".to_string(), |p| p.display().to_string()),
        v4: Box::new(v4),
        v6: Box::new(v6),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn port_zero_is_refused() {
        let e = dial(None, 0).await.unwrap_err();
        assert_eq!(e.to_string(), "invalid port");
    }

    #[tokio::test]
    async fn host_network_dials_loopback_from_the_host() {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(b"hello").await.unwrap();
        });
        let mut conn = dial(None, port).await.unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn ipv6_is_tried_when_ipv4_has_no_listener() {
        // Skipped where the host has no IPv6 loopback (some containers): nothing to test.
        let Ok(listener) = tokio::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).await else {
            return;
        };
        let port = listener.local_addr().unwrap().port();
        if std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            return; // the port is taken on IPv4: the fallback would not be exercised.
        }
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(_, a)| a) });
        let conn = dial(None, port).await.unwrap();
        assert!(conn.peer_addr().unwrap().is_ipv6());
        assert!(accepted.await.unwrap().unwrap().is_ipv6());
    }

    #[tokio::test]
    async fn a_closed_port_gives_upstreams_text() {
        // A port just freed: nothing listens on it.
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = dial(None, port).await.unwrap_err();
        let text = e.to_string();
        let prefix = format!(
            "failed to connect to localhost:{port} inside namespace \"host\", IPv4: \
             dial tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: "
        );
        assert!(text.starts_with(&prefix), "{text}");
        assert!(text.ends_with(' '), "{text:?}");
    }

    #[tokio::test]
    async fn a_missing_namespace_is_an_error_naming_it() {
        let e = dial(Some(Path::new("/nonexistent/netns")), 80)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("failed to enter network namespace /nonexistent/netns:"),
            "{e}"
        );
    }
}
