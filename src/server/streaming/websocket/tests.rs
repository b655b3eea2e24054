//! Sessions driven by tungstenite's own client, over an in-memory pipe or loopback TCP.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::*;
use crate::runtime::stdio::StdioRequest;
use crate::server::streaming::{DialError, PortDialer, RemoteStreams, StreamStatus, TermSize};

/// Generous: the machine may be loaded; nothing here waits this long when it works.
const DEADLINE: Duration = Duration::from_secs(60);

type Client = WebSocketStream<DuplexStream>;

async fn session(protocol: &'static str, req: StdioRequest) -> (RemoteStreams, Client) {
    let (server_io, client_io) = duplex(1 << 20);
    let client = WebSocketStream::from_raw_socket(client_io, Role::Client, None);
    let (streams, client) = tokio::join!(remote_command(server_io, protocol, req), client);
    (streams.expect("session starts"), client)
}

/// The next data or close message (pings and pongs are the connection's business).
async fn next<S>(client: &mut WebSocketStream<S>) -> Option<Message>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let msg = tokio::time::timeout(DEADLINE, client.next())
            .await
            .expect("the server answers in time");
        match msg {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(m)) => return Some(m),
            Some(Err(e)) => panic!("websocket error: {e}"),
            None => return None,
        }
    }
}

const OUT_ERR: StdioRequest = StdioRequest {
    stdin: false,
    stdout: true,
    stderr: true,
    tty: false,
};

#[tokio::test]
async fn the_first_message_is_empty_on_the_lowest_writable_channel() {
    let cases = [
        ("v4.channel.k8s.io", OUT_ERR, Message::binary(vec![1])),
        (
            "v4.channel.k8s.io",
            StdioRequest {
                stderr: true,
                ..Default::default()
            },
            Message::binary(vec![2]),
        ),
        (
            "",
            StdioRequest {
                stdin: true,
                ..Default::default()
            },
            Message::binary(vec![3]),
        ),
        ("base64.channel.k8s.io", OUT_ERR, Message::text("1")),
        ("v4.base64.channel.k8s.io", OUT_ERR, Message::text("1")),
    ];
    for (protocol, req, want) in cases {
        let (_streams, mut client) = session(protocol, req).await;
        assert_eq!(next(&mut client).await, Some(want), "{protocol:?} {req:?}");
    }
}

#[tokio::test]
async fn output_travels_on_channels_1_and_2_in_either_framing() {
    let (mut streams, mut client) = session("v5.channel.k8s.io", OUT_ERR).await;
    next(&mut client).await;
    streams
        .stdout
        .as_mut()
        .unwrap()
        .write_all(b"out")
        .await
        .unwrap();
    assert_eq!(
        next(&mut client).await,
        Some(Message::binary(b"\x01out".to_vec()))
    );
    streams
        .stderr
        .as_mut()
        .unwrap()
        .write_all(b"err")
        .await
        .unwrap();
    assert_eq!(
        next(&mut client).await,
        Some(Message::binary(b"\x02err".to_vec()))
    );

    let (mut streams, mut client) = session("base64.channel.k8s.io", OUT_ERR).await;
    next(&mut client).await;
    streams
        .stdout
        .as_mut()
        .unwrap()
        .write_all(b"out")
        .await
        .unwrap();
    assert_eq!(next(&mut client).await, Some(Message::text("1b3V0")));
    streams
        .stderr
        .as_mut()
        .unwrap()
        .write_all(b"\n")
        .await
        .unwrap();
    assert_eq!(next(&mut client).await, Some(Message::text("2Cg==")));
}

#[tokio::test]
async fn v5_close_of_channel_0_is_stdin_eof() {
    let req = StdioRequest {
        stdin: true,
        stdout: true,
        ..Default::default()
    };
    let (mut streams, mut client) = session("v5.channel.k8s.io", req).await;
    client
        .send(Message::binary(b"\x00abc".to_vec()))
        .await
        .unwrap();
    client
        .send(Message::binary(b"\x00def".to_vec()))
        .await
        .unwrap();
    client.send(Message::binary(vec![255, 0])).await.unwrap();
    let mut got = Vec::new();
    let read = streams.stdin.as_mut().unwrap().read_to_end(&mut got);
    tokio::time::timeout(DEADLINE, read).await.unwrap().unwrap();
    assert_eq!(got, b"abcdef");
    // The connection is still up: output still flows after stdin ended.
    next(&mut client).await;
    streams
        .stdout
        .as_mut()
        .unwrap()
        .write_all(b"after")
        .await
        .unwrap();
    assert_eq!(
        next(&mut client).await,
        Some(Message::binary(b"\x01after".to_vec()))
    );
}

#[tokio::test]
async fn before_v5_stdin_ends_with_the_connection() {
    let req = StdioRequest {
        stdin: true,
        stdout: true,
        ..Default::default()
    };
    let (mut streams, mut client) = session("base64.channel.k8s.io", req).await;
    client.send(Message::text("0Zm9vCg==")).await.unwrap();
    // [255, 0] means nothing before v5 (and is no valid base64 frame either).
    client.send(Message::binary(vec![255, 0])).await.unwrap();
    client.close(None).await.unwrap();
    let mut got = Vec::new();
    let read = streams.stdin.as_mut().unwrap().read_to_end(&mut got);
    tokio::time::timeout(DEADLINE, read).await.unwrap().unwrap();
    assert_eq!(got, b"foo\n");
}

#[tokio::test]
async fn sizes_arrive_from_channel_4() {
    let req = StdioRequest {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let (mut streams, mut client) = session("v4.channel.k8s.io", req).await;
    client
        .send(Message::binary(
            b"\x04{\"Width\":100,\"Height\":40}".to_vec(),
        ))
        .await
        .unwrap();
    client
        .send(Message::binary(
            b"\x04{\"width\":81,\"height\":25}\n".to_vec(),
        ))
        .await
        .unwrap();
    let rx = streams.resize.as_mut().expect("tty sessions resize");
    let first = tokio::time::timeout(DEADLINE, rx.recv()).await.unwrap();
    let second = tokio::time::timeout(DEADLINE, rx.recv()).await.unwrap();
    assert_eq!(
        (first, second),
        (
            Some(TermSize {
                width: 100,
                height: 40
            }),
            Some(TermSize {
                width: 81,
                height: 25
            })
        )
    );
    let (streams, _client) = session("v4.channel.k8s.io", OUT_ERR).await;
    assert!(streams.resize.is_none());
}

fn exit_3() -> StreamStatus {
    StreamStatus::NonZeroExit {
        command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        code: 3,
    }
}

/// Output written before the writers were shut down, then the status, then close 1000.
async fn finish_with(
    protocol: &'static str,
    status: StreamStatus,
) -> (Vec<Message>, Option<CloseCode>) {
    let (mut streams, mut client) = session(protocol, OUT_ERR).await;
    next(&mut client).await;
    let mut stdout = streams.stdout.take().unwrap();
    let mut stderr = streams.stderr.take().unwrap();
    stdout.write_all(b"last words").await.unwrap();
    stdout.shutdown().await.unwrap();
    stderr.shutdown().await.unwrap();
    let finish = tokio::spawn(streams.status.finish(status));
    let mut data = Vec::new();
    loop {
        match next(&mut client).await {
            Some(Message::Close(frame)) => {
                tokio::time::timeout(DEADLINE, finish)
                    .await
                    .unwrap()
                    .unwrap();
                // The server ends the connection once the close handshake is done.
                assert!(next(&mut client).await.is_none());
                return (data, frame.map(|f| f.code));
            }
            Some(m) => data.push(m),
            None => panic!("the connection ended without a close frame"),
        }
    }
}

#[tokio::test]
async fn v4_and_v5_report_the_status_as_json_then_close_normally() {
    for protocol in ["v4.channel.k8s.io", "v5.channel.k8s.io"] {
        let (data, code) = finish_with(protocol, exit_3()).await;
        assert_eq!(code, Some(CloseCode::Normal));
        assert_eq!(data[0], Message::binary(b"\x01last words".to_vec()));
        let mut status = exit_3().v4_json();
        status.insert(0, 3);
        assert_eq!(data[1..], [Message::binary(status)]);

        let (data, _) = finish_with(protocol, StreamStatus::Success).await;
        let mut ok = StreamStatus::Success.v4_json();
        ok.insert(0, 3);
        assert_eq!(data.last(), Some(&Message::binary(ok)));
    }
    let (data, code) = finish_with("v4.base64.channel.k8s.io", exit_3()).await;
    assert_eq!(code, Some(CloseCode::Normal));
    let text = match data.last() {
        Some(Message::Text(t)) => t.to_string(),
        other => panic!("expected a text frame, got {other:?}"),
    };
    assert_eq!(&text[..1], "3");
    let json =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &text[1..]).unwrap();
    assert_eq!(json, exit_3().v4_json());
}

#[tokio::test]
async fn older_protocols_send_only_failure_text() {
    for protocol in ["", "channel.k8s.io"] {
        let (data, code) = finish_with(protocol, exit_3()).await;
        assert_eq!(code, Some(CloseCode::Normal));
        let mut text = exit_3().legacy_text();
        text.insert(0, 3);
        assert_eq!(
            data,
            [
                Message::binary(b"\x01last words".to_vec()),
                Message::binary(text)
            ]
        );
        let (data, code) = finish_with(protocol, StreamStatus::Success).await;
        assert_eq!(code, Some(CloseCode::Normal));
        assert_eq!(data, [Message::binary(b"\x01last words".to_vec())]);
    }
}

#[tokio::test]
async fn pings_are_answered() {
    let (_streams, mut client) = session("v5.channel.k8s.io", OUT_ERR).await;
    client
        .send(Message::Ping(Bytes::from_static(b"alive?")))
        .await
        .unwrap();
    loop {
        let msg = tokio::time::timeout(DEADLINE, client.next()).await.unwrap();
        match msg {
            Some(Ok(Message::Pong(p))) => {
                assert_eq!(&p[..], b"alive?");
                break;
            }
            Some(Ok(_)) => continue,
            other => panic!("no pong: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_client_that_leaves_breaks_the_sessions_writes() {
    let (mut streams, client) = session("v4.channel.k8s.io", OUT_ERR).await;
    drop(client);
    let stdout = streams.stdout.as_mut().unwrap();
    let write = async {
        // The pipe takes some bytes before the pump notices the connection is gone.
        loop {
            if stdout.write_all(&[0; 4096]).await.is_err() {
                break;
            }
        }
    };
    tokio::time::timeout(DEADLINE, write).await.unwrap();
}

/// Dials 127.0.0.1:<port> (the test's "pod" is the host).
struct LoopbackDialer;

#[async_trait]
impl PortDialer for LoopbackDialer {
    async fn dial(&self, port: u16) -> Result<TcpStream, DialError> {
        TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| DialError(format!("failed to connect to localhost:{port}: {e}")))
    }
    fn pod_sandbox_id(&self) -> &str {
        "sandbox-1"
    }
    fn pod_uid(&self) -> &str {
        "uid-1"
    }
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn port_forward_prefixes_each_channel_and_copies_both_ways() {
    let pod = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = pod.local_addr().unwrap().port();
    let closed = closed_port().await;
    let server = tokio::spawn(async move {
        let (mut conn, _) = pod.accept().await.unwrap();
        let mut got = [0; 4];
        conn.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        conn.write_all(b"pong").await.unwrap();
        // Closing ends the forward, and with every port done, the session.
    });

    let (server_io, client_io) = duplex(1 << 20);
    let session = tokio::spawn(port_forward(
        server_io,
        "v4.channel.k8s.io",
        vec![open, closed],
        Arc::new(LoopbackDialer),
    ));
    let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;

    let le = |ch: u8, p: u16| Message::binary(vec![ch, p.to_le_bytes()[0], p.to_le_bytes()[1]]);
    let mut prefixes = Vec::new();
    for _ in 0..4 {
        prefixes.push(next(&mut client).await.unwrap());
    }
    assert_eq!(
        prefixes,
        [le(0, open), le(1, open), le(2, closed), le(3, closed)]
    );

    client
        .send(Message::binary(b"\x00ping".to_vec()))
        .await
        .unwrap();
    let mut pong = false;
    let mut refused = None;
    let code = loop {
        match next(&mut client).await {
            Some(Message::Binary(b)) if b[0] == 0 => {
                assert_eq!(&b[1..], b"pong");
                pong = true;
            }
            Some(Message::Binary(b)) if b[0] == 3 => {
                refused = Some(String::from_utf8(b[1..].to_vec()).unwrap());
            }
            Some(Message::Close(frame)) => break frame.map(|f| f.code),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(pong);
    let refused = refused.expect("an error for the closed port");
    assert!(
        refused.starts_with(&format!(
            "error forwarding port {closed} to pod sandbox-1, uid uid-1: failed to connect to localhost:{closed}: "
        )),
        "{refused}"
    );
    assert_eq!(code, Some(CloseCode::Normal));
    // Reading on sends the client's half of the close handshake, which ends the session.
    assert!(next(&mut client).await.is_none());
    tokio::time::timeout(DEADLINE, session)
        .await
        .unwrap()
        .unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn port_forward_in_base64() {
    let closed = closed_port().await;
    let (server_io, client_io) = duplex(1 << 20);
    tokio::spawn(port_forward(
        server_io,
        "v4.base64.channel.k8s.io",
        vec![closed],
        Arc::new(LoopbackDialer),
    ));
    let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
    let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b);
    let port = b64(&closed.to_le_bytes());
    assert_eq!(
        next(&mut client).await,
        Some(Message::text(format!("0{port}")))
    );
    assert_eq!(
        next(&mut client).await,
        Some(Message::text(format!("1{port}")))
    );
    match next(&mut client).await {
        Some(Message::Text(t)) => {
            assert_eq!(&t[..1], "1");
            let text = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &t[1..])
                .unwrap();
            assert!(String::from_utf8(text)
                .unwrap()
                .starts_with(&format!("error forwarding port {closed} to pod sandbox-1")));
        }
        other => panic!("expected the error text, got {other:?}"),
    }
}

/// Found by `codec::tests::properties::channel_messages_round_trip`: in base64 framing the
/// 41st port's channel (80) is written as a two-byte character no client reads back as its
/// channel, so such a session is refused as one of more than 127 ports is.
#[tokio::test]
async fn base64_port_forward_takes_at_most_40_ports() {
    for (ports, refused) in [(40u16, false), (41, true)] {
        let (server_io, client_io) = duplex(1 << 20);
        let closed = closed_port().await;
        tokio::spawn(port_forward(
            server_io,
            "v4.base64.channel.k8s.io",
            vec![closed; usize::from(ports)],
            Arc::new(LoopbackDialer),
        ));
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        match next(&mut client).await {
            Some(Message::Close(Some(frame))) => {
                assert!(refused, "{ports} ports: closed with {frame:?}");
                assert_eq!(frame.code, CloseCode::Policy);
            }
            Some(Message::Text(t)) => assert!(!refused, "{ports} ports: got {t:?}"),
            other => panic!("{ports} ports: {other:?}"),
        }
    }
}

/// The whole path as the router will run it: hyper's upgrade, [`accept`], then a session,
/// against tungstenite's client (which checks Sec-WebSocket-Accept and the subprotocol).
#[tokio::test]
async fn an_exec_through_hypers_upgrade() {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let service = service_fn(
            |mut req: hyper::Request<hyper::body::Incoming>| async move {
                let (resp, protocol) = match accept(req.headers(), REMOTECOMMAND_PROTOCOLS) {
                    Ok(ok) => ok,
                    Err(refusal) => return Ok::<_, Infallible>(refusal),
                };
                let upgrade = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    let io = TokioIo::new(upgrade.await.unwrap());
                    let req = StdioRequest {
                        stdin: true,
                        stdout: true,
                        ..Default::default()
                    };
                    let mut s = remote_command(io, protocol, req).await.unwrap();
                    // A `cat`: stdin back on stdout until stdin ends.
                    let mut stdout = s.stdout.take().unwrap();
                    tokio::io::copy(s.stdin.as_mut().unwrap(), &mut stdout)
                        .await
                        .unwrap();
                    stdout.shutdown().await.unwrap();
                    s.status.finish(StreamStatus::Success).await;
                });
                Ok(resp)
            },
        );
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
            .await
            .unwrap();
    });

    let mut request = format!("ws://{addr}/exec/ns/pod/c?input=1&output=1")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "v5.channel.k8s.io, v4.channel.k8s.io".parse().unwrap(),
    );
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, resp) = tokio_tungstenite::client_async(request, tcp).await.unwrap();
    assert_eq!(
        resp.headers()["Sec-WebSocket-Protocol"],
        "v5.channel.k8s.io"
    );
    assert_eq!(next(&mut client).await, Some(Message::binary(vec![1])));
    client
        .send(Message::binary(b"\x00hello".to_vec()))
        .await
        .unwrap();
    client.send(Message::binary(vec![255, 0])).await.unwrap();
    let mut out = Vec::new();
    let code = loop {
        match next(&mut client).await {
            Some(Message::Binary(b)) if b[0] == 1 => out.extend_from_slice(&b[1..]),
            Some(Message::Binary(b)) if b[0] == 3 => {
                let status: serde_json::Value = serde_json::from_slice(&b[1..]).unwrap();
                assert_eq!(status["status"], "Success");
            }
            Some(Message::Close(frame)) => break frame.map(|f| f.code),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(out, b"hello");
    assert_eq!(code, Some(CloseCode::Normal));
}

/// A client that never answers our close frame is cut off after the grace period, so a
/// finished session does not hold its connection forever (paused clock: no real wait).
#[tokio::test(start_paused = true)]
async fn a_client_that_ignores_the_close_is_dropped() {
    let (server_io, mut client_io) = duplex(1 << 20);
    let req = StdioRequest {
        stdout: true,
        ..Default::default()
    };
    let mut s = remote_command(server_io, "", req).await.unwrap();
    s.stdout.take().unwrap().shutdown().await.unwrap();
    s.status.finish(StreamStatus::Success).await;
    let mut raw = Vec::new();
    tokio::time::timeout(DEADLINE, client_io.read_to_end(&mut raw))
        .await
        .expect("the server drops the connection")
        .unwrap();
    // Unmasked server frames: the empty stdout message [1], then close 1000 (0x03e8).
    assert_eq!(raw, [0x82, 0x01, 0x01, 0x88, 0x02, 0x03, 0xe8]);
}

#[tokio::test]
async fn a_protocol_this_route_does_not_speak_is_an_error() {
    let (server_io, _client_io) = duplex(1024);
    let err = remote_command(server_io, "v5.base64.channel.k8s.io", OUT_ERR)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, WsError::UnsupportedProtocol(_)));
}
