//! Real sockets on loopback with short limits. Only waits have deadlines (generous ones); no
//! test asserts how long anything took.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::ConnectionLimits;

use crate::server::serve_healthz_on;

/// Far longer than any step needs, even on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);
const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

async fn healthz(limits: ConnectionLimits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_healthz_on(listener, limits);
    addr
}

/// Reads one response head and body ("ok").
async fn read_response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).ends_with("ok") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Whether the server has closed the connection (EOF or reset), reading whatever it sends
/// first (hyper may answer a timed-out request before closing).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    match stream.read(&mut buf).await {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
    }
}

#[tokio::test]
async fn a_client_dribbling_its_headers_is_closed_after_the_header_timeout() {
    let addr = healthz(ConnectionLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ConnectionLimits::HEALTHZ
    })
    .await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let dribble = async {
        // One header byte at a time, far more often than the timeout, forever.
        loop {
            if slow.write_all(b"X").await.is_err() {
                // Writing failed: the server is gone; the read below says so too.
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            if tokio::time::timeout(Duration::from_millis(1), closed(&mut slow))
                .await
                .unwrap_or(false)
            {
                return;
            }
        }
    };
    tokio::time::timeout(PATIENCE, dribble)
        .await
        .expect("the dribbling client was not closed");
    // The server itself is fine.
    let mut ok = TcpStream::connect(addr).await.unwrap();
    ok.write_all(REQUEST).await.unwrap();
    assert!(read_response(&mut ok).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let addr = healthz(ConnectionLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ConnectionLimits::HEALTHZ
    })
    .await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(REQUEST).await.unwrap();
    assert!(read_response(&mut c).await.starts_with("HTTP/1.1 200"));
    let closed_in_time = tokio::time::timeout(PATIENCE, closed(&mut c)).await;
    assert_eq!(closed_in_time.ok(), Some(true), "idle connection kept open");
}

/// A connection from `source` (any 127/8 address is loopback on Linux, so one machine can
/// play several clients).
async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Whether a connection is served: a request on it gets its answer.
async fn served(stream: &mut TcpStream) -> bool {
    if stream.write_all(REQUEST).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).ends_with("ok") {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) => return false,
            Err(_) => panic!("neither served nor closed within {PATIENCE:?}"),
        }
    }
    true
}

/// A client at its cap gets its further connections closed, while other clients are served
/// as usual; once it closes one, it may open another. Before, the cap was for the whole
/// server: a client holding all slots kept everybody else waiting.
#[tokio::test]
async fn a_client_beyond_its_cap_is_refused_and_others_are_served() {
    let addr = healthz(ConnectionLimits {
        header_read_timeout: Duration::from_secs(600),
        max_connections_per_client: 2,
        ..ConnectionLimits::HEALTHZ
    })
    .await;
    // Two silent connections take the greedy client's slots.
    let first = connect_from("127.0.0.2", addr).await;
    let mut second = connect_from("127.0.0.2", addr).await;
    let mut third = connect_from("127.0.0.2", addr).await;
    assert!(!served(&mut third).await, "served beyond the client's cap");
    // Everybody else is served.
    for other in ["127.0.0.1", "127.0.0.3"] {
        assert!(
            served(&mut connect_from(other, addr).await).await,
            "{other}"
        );
    }
    // A held connection that makes a request is served normally.
    assert!(served(&mut second).await);
    // The greedy client lets one go: it may connect again (once the server saw the close).
    drop(first);
    let again = async {
        loop {
            if served(&mut connect_from("127.0.0.2", addr).await).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, again)
        .await
        .expect("the freed slot was not given back");
}

/// Past the cap for all clients together, a new connection from anyone is closed, while
/// the ones already open are served; a freed slot is given to the next. Before, there was
/// a cap per client only: enough clients together could take every descriptor.
#[tokio::test]
async fn past_the_total_cap_every_new_connection_is_closed_until_one_ends() {
    let addr = healthz(ConnectionLimits {
        header_read_timeout: Duration::from_secs(600),
        max_connections_per_client: 2,
        max_connections: 3,
        ..ConnectionLimits::HEALTHZ
    })
    .await;
    let mut a1 = connect_from("127.0.0.2", addr).await;
    let _a2 = connect_from("127.0.0.2", addr).await;
    let b1 = connect_from("127.0.0.3", addr).await;
    // Three open: a client with no connection at all is refused.
    assert!(!served(&mut connect_from("127.0.0.4", addr).await).await);
    assert!(served(&mut a1).await, "a held connection is still served");
    drop(b1);
    let again = async {
        loop {
            if served(&mut connect_from("127.0.0.4", addr).await).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, again)
        .await
        .expect("the freed slot was not given back");
}

/// The caps follow the open-file limit: the servers never reach it, one client never holds
/// the servers' share alone, and a high limit gives the usual per-client cap.
#[test]
fn the_caps_leave_descriptors_for_everything_else() {
    for files in [0u64, 64, 256, 600, 1024, 4096, 65_536, 1 << 20, u64::MAX] {
        let l = ConnectionLimits::serving_for(files);
        if files >= 1024 {
            assert!(
                (l.max_connections as u64) <= files - files / 4,
                "{files}: {l:?}"
            );
        }
        assert!(l.max_connections_per_client >= 1, "{files}: {l:?}");
        assert!(
            l.max_connections_per_client * 4 <= l.max_connections.max(4),
            "{files}: {l:?}"
        );
    }
    assert_eq!(ConnectionLimits::serving_for(600).max_connections, 450);
    assert_eq!(
        ConnectionLimits::serving_for(600).max_connections_per_client,
        112
    );
    assert_eq!(
        ConnectionLimits::serving_for(1 << 20).max_connections_per_client,
        super::MAX_CONNECTIONS_PER_CLIENT
    );
}

/// A client that sends a request and never reads the (large) answer is dropped at the write
/// deadline instead of holding its connection, task and buffers forever. Before, there was
/// no write deadline at all.
#[tokio::test]
async fn a_client_that_does_not_read_its_answer_is_dropped_at_the_write_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ConnectionLimits {
        write_timeout: Duration::from_millis(300),
        ..ConnectionLimits::serving_for(1 << 16)
    };
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        super::serve_connection(stream, limits, |_req| async {
            // Far more than the socket buffers hold.
            let body = vec![b'x'; 64 << 20];
            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                crate::server::response::bytes_body(body),
            ))
        })
        .await;
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(REQUEST).await.unwrap();
    // The client reads nothing; the server's connection must end by itself.
    tokio::time::timeout(PATIENCE, server)
        .await
        .expect("the connection outlived its write deadline")
        .unwrap();
    drop(client);
}

/// Raises the open-file soft limit to the hard one (allowed without privileges), for tests
/// that hold many sockets.
fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// The main server with its real limits: 1,100 idle connections (more than the old cap of
/// 1024 for the whole server) and a client pipelining requests without reading any answer
/// do not keep an authenticated client from its answer. Before, the idle connections alone
/// took every slot and the request waited in the kernel's backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_pipelining_clients_do_not_lock_an_authenticated_client_out() {
    use crate::server::test_harness::{Ca, MainUnderTest};
    const IDLE: usize = 1100;
    // Each connection is two descriptors here (client and server side), plus the rest.
    let limit = raise_open_file_limit();
    assert!(
        limit >= (2 * IDLE + 256) as u64,
        "the open-file limit ({limit}) is too low for this test"
    );
    let ca = Ca::new("ca");
    // The header deadline far away, so the idle connections are still held when the
    // authenticated client asks, however slowly a loaded machine gets there.
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(600),
        ..ConnectionLimits::serving_for(1 << 16)
    };
    let server = MainUnderTest::start(&ca, limits, |_| {}).await;
    // Idle clients that completed TLS and then say nothing: each holds a connection until
    // the header deadline. (With a cap for the whole server, the handshakes past the
    // cap cannot happen; those connections are kept half-open instead.)
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        // Spread over two addresses, as distinct clients would be.
        let source = if i % 2 == 0 { "127.0.0.2" } else { "127.0.0.3" };
        let tcp = connect_from(source, server.addr).await;
        let shaken =
            tokio::time::timeout(Duration::from_millis(100), server.handshake(tcp, None)).await;
        idle.push(shaken);
    }
    // Pipelining without reading: an authenticated client sends request after request and
    // never reads an answer.
    let user = ca.client("admin");
    let tcp = connect_from("127.0.0.4", server.addr).await;
    let mut pipeliner = server.handshake(tcp, Some(&user)).await.unwrap();
    let flood = b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20_000);
    let _ = tokio::time::timeout(Duration::from_secs(2), pipeliner.write_all(&flood)).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        server.request("GET", "/pods", Some(&user)),
    )
    .await
    .expect("no answer within 60 s while other clients hold connections");
    assert_eq!(answer.0, 200);
    drop(idle);
    drop(pipeliner);
}
