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
        max_connections: 8,
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
        max_connections: 8,
    })
    .await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(REQUEST).await.unwrap();
    assert!(read_response(&mut c).await.starts_with("HTTP/1.1 200"));
    let closed_in_time = tokio::time::timeout(PATIENCE, closed(&mut c)).await;
    assert_eq!(closed_in_time.ok(), Some(true), "idle connection kept open");
}

#[tokio::test]
async fn beyond_the_cap_new_connections_wait_until_a_slot_frees() {
    let addr = healthz(ConnectionLimits {
        header_read_timeout: Duration::from_secs(600),
        max_connections: 2,
    })
    .await;
    // Two silent clients hold both slots.
    let first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(REQUEST).await.unwrap();
    // Not served while the slots are taken. (Waiting longer could only make this pass more
    // surely: nothing frees a slot meanwhile.)
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the cap: {early:?}");
    // A held connection that makes a request is still served normally.
    second.write_all(REQUEST).await.unwrap();
    assert!(read_response(&mut second).await.starts_with("HTTP/1.1 200"));
    // One client leaves: the waiting request goes through.
    drop(first);
    assert!(read_response(&mut third).await.starts_with("HTTP/1.1 200"));
}
