//! Sessions end to end over an in-memory connection, with the test client playing
//! client-go's part.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::frame::{Frame, MAX_LENGTH, RST_CANCEL};
use super::testclient::{TestClient, DEADLINE};
use super::{port_forward, remote_command, SpdyError};
use crate::runtime::stdio::{StdioRequest, TermSize};
use crate::server::streaming::{DialError, PortDialer, RemoteStreams, StreamStatus};

const V4: &str = "v4.channel.k8s.io";

/// Starts `remote_command` and creates the client's streams in client-go's order, each
/// after the previous one's reply. Returns the server's streams and the client's ids.
async fn exec_session(
    protocol: &'static str,
    req: StdioRequest,
) -> (TestClient, RemoteStreams, Ids) {
    let (mut client, server) = TestClient::pair();
    let serving = tokio::spawn(remote_command(server, protocol, req));
    let error = client.create(&[("streamtype", "error")]).await;
    let mut ids = Ids {
        error,
        ..Ids::default()
    };
    if req.stdin {
        ids.stdin = client.create(&[("streamtype", "stdin")]).await;
    }
    if req.stdout {
        ids.stdout = client.create(&[("streamtype", "stdout")]).await;
    }
    if req.stderr && !req.tty {
        ids.stderr = client.create(&[("streamtype", "stderr")]).await;
    }
    if req.tty && protocol != "v2.channel.k8s.io" {
        ids.resize = client.create(&[("streamtype", "resize")]).await;
    }
    let streams = tokio::time::timeout(DEADLINE, serving)
        .await
        .expect("streams collected")
        .unwrap()
        .expect("session set up");
    (client, streams, ids)
}

#[derive(Debug, Default, Clone, Copy)]
struct Ids {
    error: u32,
    stdin: u32,
    stdout: u32,
    stderr: u32,
    resize: u32,
}

fn all_streams() -> StdioRequest {
    StdioRequest {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    }
}

#[tokio::test]
async fn an_exec_session_carries_stdio_then_the_v4_status_and_goodbye() {
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    assert!(streams.resize.is_none());

    client.data(ids.stdin, b"hello ", false).await;
    client.data(ids.stdin, b"world", false).await;
    client.data(ids.stdin, b"", true).await;
    let mut stdin = Vec::new();
    streams
        .stdin
        .take()
        .unwrap()
        .read_to_end(&mut stdin)
        .await
        .expect("stdin ends with EOF on the client's FIN");
    assert_eq!(stdin, b"hello world");

    let mut stdout = streams.stdout.take().unwrap();
    let mut stderr = streams.stderr.take().unwrap();
    stdout.write_all(b"out").await.unwrap();
    stderr.write_all(b"err").await.unwrap();
    stdout.shutdown().await.unwrap();
    stderr.shutdown().await.unwrap();
    client
        .wait(|s| s.fin.contains(&ids.stdout) && s.fin.contains(&ids.stderr))
        .await;
    assert_eq!(client.take_data(ids.stdout), b"out");
    assert_eq!(client.take_data(ids.stderr), b"err");

    let status = StreamStatus::NonZeroExit {
        command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        code: 3,
    };
    streams.status.finish(status.clone()).await;
    client
        .wait(|s| s.fin.contains(&ids.error) && s.goaway && s.closed)
        .await;
    assert_eq!(client.take_data(ids.error), status.v4_json());
    // Our side of stdin is closed at the end, as the client reads it until then.
    assert!(client.seen.fin.contains(&ids.stdin));
}

#[tokio::test]
async fn a_writer_dropped_without_shutdown_still_ends_its_stream() {
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    let mut stdout = streams.stdout.take().unwrap();
    stdout.write_all(b"partial").await.unwrap();
    drop(stdout);
    client.wait(|s| s.fin.contains(&ids.stdout)).await;
    assert_eq!(client.take_data(ids.stdout), b"partial");
}

#[tokio::test]
async fn a_reset_from_the_client_ends_stdin_cleanly_and_stops_writes() {
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    client.data(ids.stdin, b"partial", false).await;
    // stdout's first: the reader handles frames in order, so once stdin has ended the
    // stdout reset is known too.
    for stream_id in [ids.stdout, ids.stdin] {
        client
            .send(Frame::RstStream {
                stream_id,
                status: RST_CANCEL,
            })
            .await;
    }
    let mut stdin = Vec::new();
    streams
        .stdin
        .take()
        .unwrap()
        .read_to_end(&mut stdin)
        .await
        .expect("RST ends stdin as EOF");
    assert_eq!(stdin, b"partial");
    let mut stdout = streams.stdout.take().unwrap();
    let write = stdout.write_all(b"x").await;
    assert_eq!(write.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    // The rest of the session carries on.
    let mut stderr = streams.stderr.take().unwrap();
    stderr.write_all(b"e").await.unwrap();
    stderr.shutdown().await.unwrap();
    client.wait(|s| s.fin.contains(&ids.stderr)).await;
    assert_eq!(client.take_data(ids.stderr), b"e");
}

#[tokio::test]
async fn legacy_protocols_report_success_as_an_empty_error_stream() {
    let req = StdioRequest {
        stdout: true,
        ..Default::default()
    };
    let (mut client, streams, ids) = exec_session("v2.channel.k8s.io", req).await;
    let mut stdout = streams.stdout.unwrap();
    stdout.shutdown().await.unwrap();
    streams.status.finish(StreamStatus::Success).await;
    client
        .wait(|s| s.fin.contains(&ids.error) && s.goaway)
        .await;
    assert!(client.take_data(ids.error).is_empty());

    let (mut client, streams, ids) = exec_session("v3.channel.k8s.io", req).await;
    let failure = StreamStatus::Internal {
        message: "error executing command in container: not found".into(),
    };
    streams.status.finish(failure.clone()).await;
    client
        .wait(|s| s.fin.contains(&ids.error) && s.goaway)
        .await;
    assert_eq!(client.take_data(ids.error), failure.legacy_text());
}

#[tokio::test]
async fn a_tty_session_decodes_resizes_in_order() {
    let req = StdioRequest {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: true,
    };
    let (mut client, mut streams, ids) = exec_session(V4, req).await;
    assert!(streams.stderr.is_none(), "a terminal has no stderr stream");
    // kubectl attach -t: (w+1, h+1) then (w, h); split mid-object across frames.
    client
        .data(ids.resize, b"{\"Width\":121,\"Hei", false)
        .await;
    client
        .data(
            ids.resize,
            b"ght\":41}\n{\"width\":120,\"height\":40}\n",
            false,
        )
        .await;
    let resize = streams.resize.as_mut().unwrap();
    let first = tokio::time::timeout(DEADLINE, resize.recv()).await.unwrap();
    let second = tokio::time::timeout(DEADLINE, resize.recv()).await.unwrap();
    assert_eq!(
        first,
        Some(TermSize {
            width: 121,
            height: 41
        })
    );
    assert_eq!(
        second,
        Some(TermSize {
            width: 120,
            height: 40
        })
    );
    client.data(ids.resize, b"", true).await;
    assert_eq!(
        tokio::time::timeout(DEADLINE, resize.recv()).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn more_than_the_flow_control_window_moves_both_ways_without_window_updates() {
    const SIZE: usize = 1024 * 1024 + 17;
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    let pattern = |i: usize| (i * 7 % 251) as u8;
    let mut stdin = streams.stdin.take().unwrap();
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        stdin.read_to_end(&mut got).await.map(|_| got)
    });
    let mut stdout = streams.stdout.take().unwrap();
    let writing = tokio::spawn(async move {
        let data: Vec<u8> = (0..SIZE).map(pattern).collect();
        stdout.write_all(&data).await?;
        stdout.shutdown().await
    });
    let sent: Vec<u8> = (0..SIZE).map(|i| pattern(i + 1)).collect();
    for chunk in sent.chunks(32 * 1024) {
        client.data(ids.stdin, chunk, false).await;
    }
    client.data(ids.stdin, b"", true).await;
    let got = tokio::time::timeout(DEADLINE, reading)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(got == sent, "stdin arrived intact ({} bytes)", got.len());
    tokio::time::timeout(DEADLINE, writing)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    client.wait(|s| s.fin.contains(&ids.stdout)).await;
    let out = client.take_data(ids.stdout);
    assert_eq!(out.len(), SIZE);
    assert!(out.iter().enumerate().all(|(i, b)| *b == pattern(i)));
}

#[tokio::test]
async fn a_data_frame_of_16_mib_arrives_whole() {
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    let mut stdin = streams.stdin.take().unwrap();
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        stdin.read_to_end(&mut got).await.map(|_| got)
    });
    let big = vec![0x5a; MAX_LENGTH];
    client.data(ids.stdin, &big, true).await;
    let got = tokio::time::timeout(DEADLINE, reading)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), MAX_LENGTH);
    assert!(got.iter().all(|b| *b == 0x5a));
}

#[tokio::test]
async fn pings_are_echoed_and_settings_and_window_updates_ignored() {
    let (mut client, streams, ids) = exec_session(V4, all_streams()).await;
    client
        .send(Frame::Settings {
            flags: 0,
            payload: Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 7, 0, 1, 0, 0]),
        })
        .await;
    client
        .send(Frame::WindowUpdate {
            stream_id: ids.stdout,
            delta: 1 << 20,
        })
        .await;
    client.send(Frame::Ping { id: 7 }).await;
    client.send(Frame::Ping { id: 9 }).await;
    client.wait(|s| s.pings.len() == 2).await;
    assert_eq!(client.seen.pings, [7, 9]);
    // The session is still whole: output still flows.
    let mut stdout = streams.stdout.unwrap();
    stdout.write_all(b"still here").await.unwrap();
    stdout.shutdown().await.unwrap();
    client.wait(|s| s.fin.contains(&ids.stdout)).await;
    assert_eq!(client.take_data(ids.stdout), b"still here");
}

#[tokio::test(start_paused = true)]
async fn streams_not_created_in_time_end_the_session() {
    let (mut client, server) = TestClient::pair();
    let serving = tokio::spawn(remote_command(server, V4, all_streams()));
    client.create(&[("streamtype", "error")]).await;
    client.create(&[("streamtype", "stdin")]).await;
    let result = serving.await.unwrap();
    assert!(matches!(result, Err(SpdyError::StreamCreationTimeout)));
    client.wait(|s| s.goaway && s.closed).await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_dropped_but_pings_keep_it_alive() {
    use super::session::IDLE_TIMEOUT;
    let (mut client, mut streams, ids) = exec_session(V4, all_streams()).await;
    // Pings every 5 s, as kubectl and the apiserver send, for longer than the timeout.
    let start = tokio::time::Instant::now();
    let mut id = 1;
    while start.elapsed() < IDLE_TIMEOUT + IDLE_TIMEOUT / 2 {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        client.send(Frame::Ping { id }).await;
        let want = client.seen.pings.len() + 1;
        client.wait(|s| s.pings.len() == want).await;
        id += 2;
    }
    // Then silence: the session ends and its streams with it.
    let mut stdin = streams.stdin.take().unwrap();
    let mut buf = Vec::new();
    assert!(stdin.read_to_end(&mut buf).await.is_err());
    assert!(start.elapsed() >= IDLE_TIMEOUT + IDLE_TIMEOUT / 2 + IDLE_TIMEOUT);
    client.wait(|s| s.closed).await;
    assert!(!client.seen.fin.contains(&ids.stdout));
}

#[tokio::test]
async fn a_client_that_disappears_fails_stdin_and_writes() {
    let (client, mut streams, _) = exec_session(V4, all_streams()).await;
    client.hang_up().await;
    let mut stdin = streams.stdin.take().unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(DEADLINE, stdin.read_to_end(&mut buf))
        .await
        .unwrap();
    assert!(read.is_err(), "stdin ends with an error, not EOF: {read:?}");
    let mut stdout = streams.stdout.take().unwrap();
    let write = tokio::time::timeout(DEADLINE, async {
        loop {
            stdout.write_all(&[0; 1024]).await?;
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    })
    .await
    .unwrap();
    assert!(write.is_err());
}

#[tokio::test]
async fn unknown_stream_types_are_answered_but_not_counted() {
    let req = StdioRequest {
        stdout: true,
        ..Default::default()
    };
    let (mut client, server) = TestClient::pair();
    let serving = tokio::spawn(remote_command(server, V4, req));
    client.create(&[("streamtype", "error")]).await;
    client.create(&[("streamtype", "bogus")]).await;
    let stdout = client.create(&[("streamtype", "stdout")]).await;
    let streams = tokio::time::timeout(DEADLINE, serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let mut w = streams.stdout.unwrap();
    w.write_all(b"x").await.unwrap();
    w.shutdown().await.unwrap();
    client.wait(|s| s.fin.contains(&stdout)).await;
    assert_eq!(client.take_data(stdout), b"x");
    // Streams after the session's own are refused.
    let late = client.open(&[("streamtype", "stdin")]).await;
    client.wait(|s| s.rst.contains_key(&late)).await;
}

/// Dials one loopback listener for port 8080; every other port is closed.
struct TestDialer {
    target: std::net::SocketAddr,
}

#[async_trait]
impl PortDialer for TestDialer {
    async fn dial(&self, port: u16) -> Result<TcpStream, DialError> {
        if port != 8080 {
            return Err(DialError(format!(
                "failed to connect to localhost:{port} inside namespace \"sandbox-1\", IPv4: connection refused IPv6 dial not attempted"
            )));
        }
        TcpStream::connect(self.target)
            .await
            .map_err(|e| DialError(e.to_string()))
    }
    fn pod_sandbox_id(&self) -> &str {
        "sandbox-1"
    }
    fn pod_uid(&self) -> &str {
        "uid-1"
    }
}

#[tokio::test]
async fn twenty_port_forward_pairs_run_at_once() {
    const PAIRS: usize = 20;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    // The pod's server answers nobody until all twenty are connected: a forwarder that
    // handled pairs one at a time would never get there.
    tokio::spawn(async move {
        let mut conns = Vec::new();
        while conns.len() < PAIRS {
            conns.push(listener.accept().await.unwrap().0);
        }
        for mut conn in conns {
            tokio::spawn(async move {
                conn.write_all(b"hello\n").await.unwrap();
                let mut got = Vec::new();
                conn.read_to_end(&mut got).await.unwrap();
                conn.write_all(&got.to_ascii_uppercase()).await.unwrap();
            });
        }
    });
    let (mut client, server) = TestClient::pair();
    let serving = tokio::spawn(port_forward(server, Arc::new(TestDialer { target })));

    let mut data_ids = Vec::new();
    let mut error_ids = Vec::new();
    for i in 0..PAIRS {
        let rid = i.to_string();
        let error = client
            .create(&[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", &rid),
            ])
            .await;
        // client-go closes its side of the error stream right away.
        client.data(error, b"", true).await;
        let data = client
            .create(&[
                ("streamtype", "data"),
                ("port", "8080"),
                ("requestid", &rid),
            ])
            .await;
        // No FIN yet: once the pod has the data stream's end, the answer has the half-close
        // grace (1 s) to come back, and setting up the other pairs on a loaded machine could
        // outlast it. The FINs go out once every pair heard the pod.
        client
            .data(data, format!("ping-{i}").as_bytes(), false)
            .await;
        data_ids.push(data);
        error_ids.push(error);
    }
    client
        .wait(|s| {
            data_ids
                .iter()
                .all(|id| s.data.get(id).is_some_and(|d| d.starts_with(b"hello\n")))
        })
        .await;
    for id in &data_ids {
        client.data(*id, b"", true).await;
    }
    client
        .wait(|s| {
            data_ids
                .iter()
                .chain(&error_ids)
                .all(|id| s.fin.contains(id))
        })
        .await;
    for (i, id) in data_ids.iter().enumerate() {
        assert_eq!(
            String::from_utf8(client.take_data(*id)).unwrap(),
            format!("hello\nPING-{i}")
        );
    }
    for id in &error_ids {
        assert!(client.take_data(*id).is_empty(), "no error on {id}");
    }
    client
        .send(Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        })
        .await;
    client.hang_up().await;
    tokio::time::timeout(DEADLINE, serving)
        .await
        .expect("port_forward returns once the client hangs up")
        .unwrap();
}

#[tokio::test]
async fn a_closed_port_gets_upstreams_error_text() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let (mut client, server) = TestClient::pair();
    tokio::spawn(port_forward(server, Arc::new(TestDialer { target })));
    let error = client
        .create(&[
            ("streamtype", "error"),
            ("port", "9999"),
            ("requestid", "0"),
        ])
        .await;
    client.data(error, b"", true).await;
    let data = client
        .create(&[("streamtype", "data"), ("port", "9999"), ("requestid", "0")])
        .await;
    client
        .wait(|s| s.fin.contains(&error) && s.fin.contains(&data))
        .await;
    assert_eq!(
        String::from_utf8(client.take_data(error)).unwrap(),
        "error forwarding port 9999 to pod sandbox-1, uid uid-1: failed to connect to \
         localhost:9999 inside namespace \"sandbox-1\", IPv4: connection refused IPv6 dial not attempted"
    );
}

#[tokio::test]
async fn invalid_port_forward_streams_are_reset() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let (mut client, server) = TestClient::pair();
    tokio::spawn(port_forward(server, Arc::new(TestDialer { target })));
    let no_port = client.open(&[("streamtype", "data")]).await;
    let zero = client.open(&[("streamtype", "data"), ("port", "0")]).await;
    let too_big = client
        .open(&[("streamtype", "data"), ("port", "70000")])
        .await;
    let no_type = client.open(&[("port", "80")]).await;
    let bad_type = client
        .open(&[("streamtype", "stdin"), ("port", "80")])
        .await;
    let ids = [no_port, zero, too_big, no_type, bad_type];
    client
        .wait(|s| ids.iter().all(|id| s.rst.get(id) == Some(&RST_CANCEL)))
        .await;
    assert!(ids.iter().all(|id| !client.seen.replies.contains(id)));
}

#[tokio::test(start_paused = true)]
async fn a_pair_left_incomplete_times_out_on_its_error_stream() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let (mut client, server) = TestClient::pair();
    tokio::spawn(port_forward(server, Arc::new(TestDialer { target })));
    let error = client
        .create(&[
            ("streamtype", "error"),
            ("port", "8080"),
            ("requestid", "4"),
        ])
        .await;
    client.wait(|s| s.fin.contains(&error)).await;
    let text = String::from_utf8(client.take_data(error)).unwrap();
    assert!(
        text.ends_with(", request=4) timed out waiting for streams"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_request_id_is_derived_from_stream_ids() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        conn.write_all(b"old client").await.unwrap();
    });
    let (mut client, server) = TestClient::pair();
    tokio::spawn(port_forward(server, Arc::new(TestDialer { target })));
    // Stream 1 (error) and 3 (data, 3 - 2 = 1) pair up.
    let error = client
        .create(&[("streamtype", "error"), ("port", "8080")])
        .await;
    let data = client
        .create(&[("streamtype", "data"), ("port", "8080")])
        .await;
    client.data(data, b"", true).await;
    client.wait(|s| s.fin.contains(&data)).await;
    assert_eq!(client.take_data(data), b"old client");
    client.wait(|s| s.fin.contains(&error)).await;
}
