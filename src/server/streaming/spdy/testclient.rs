//! A small SPDY client for the tests: opens streams as client-go does and records what the
//! server sends, per stream.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use super::frame::{read_frame, Frame, FLAG_FIN};
use super::headers::{HeaderBlock, HeaderDecoder, HeaderEncoder};

/// Generous: the tests run on a loaded 2-core machine.
pub(super) const DEADLINE: Duration = Duration::from_secs(120);

/// Everything the server sent so far.
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) replies: HashSet<u32>,
    pub(super) data: HashMap<u32, Vec<u8>>,
    pub(super) fin: HashSet<u32>,
    pub(super) rst: HashMap<u32, u32>,
    pub(super) pings: Vec<u32>,
    pub(super) goaway: bool,
    /// The server closed the connection.
    pub(super) closed: bool,
}

pub(super) struct TestClient {
    w: WriteHalf<DuplexStream>,
    enc: HeaderEncoder,
    frames: mpsc::UnboundedReceiver<Option<Frame>>,
    next_id: u32,
    pub(super) seen: Seen,
}

impl TestClient {
    /// A client on one end of an in-memory connection; the other end is for the server.
    pub(super) fn pair() -> (TestClient, DuplexStream) {
        let (client, server) = tokio::io::duplex(256 * 1024);
        let (r, w) = tokio::io::split(client);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(read_all(r, tx));
        (
            TestClient {
                w,
                enc: HeaderEncoder::new().unwrap(),
                frames: rx,
                next_id: 1,
                seen: Seen::default(),
            },
            server,
        )
    }

    pub(super) async fn send(&mut self, frame: Frame) {
        send_frame(&mut self.w, frame).await;
    }

    /// Sends SYN_STREAM with these headers; returns the stream id.
    pub(super) async fn open(&mut self, headers: &[(&str, &str)]) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let block = HeaderBlock(
            headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        );
        let headers = self.enc.encode(&block).unwrap();
        self.send(Frame::SynStream {
            stream_id: id,
            assoc_id: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers,
        })
        .await;
        id
    }

    /// Opens a stream and waits for its SYN_REPLY, as client-go's `CreateStream` does.
    pub(super) async fn create(&mut self, headers: &[(&str, &str)]) -> u32 {
        let id = self.open(headers).await;
        self.wait(|s| s.replies.contains(&id)).await;
        id
    }

    pub(super) async fn data(&mut self, stream_id: u32, data: &[u8], fin: bool) {
        self.send(Frame::Data {
            stream_id,
            flags: if fin { FLAG_FIN } else { 0 },
            data: Bytes::copy_from_slice(data),
        })
        .await;
    }

    /// Reads frames until `done` holds (or panics after [`DEADLINE`]).
    pub(super) async fn wait(&mut self, done: impl Fn(&Seen) -> bool) {
        tokio::time::timeout(DEADLINE, async {
            while !done(&self.seen) {
                match self.frames.recv().await {
                    Some(Some(frame)) => self.record(frame),
                    Some(None) | None => {
                        self.seen.closed = true;
                        assert!(
                            done(&self.seen),
                            "server closed the connection: {:?}",
                            self.seen
                        );
                        return;
                    }
                }
            }
        })
        .await
        .expect("condition not reached before the deadline");
    }

    fn record(&mut self, frame: Frame) {
        let s = &mut self.seen;
        match frame {
            Frame::SynReply { stream_id, .. } => {
                s.replies.insert(stream_id);
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                assert!(!s.fin.contains(&stream_id), "DATA after FIN on {stream_id}");
                s.data
                    .entry(stream_id)
                    .or_default()
                    .extend_from_slice(&data);
                if flags & FLAG_FIN != 0 {
                    s.fin.insert(stream_id);
                }
            }
            Frame::RstStream { stream_id, status } => {
                s.rst.insert(stream_id, status);
            }
            Frame::Ping { id } => s.pings.push(id),
            Frame::GoAway { .. } => s.goaway = true,
            other => panic!("unexpected frame from the server: {other:?}"),
        }
    }

    pub(super) fn take_data(&mut self, stream_id: u32) -> Vec<u8> {
        self.seen.data.remove(&stream_id).unwrap_or_default()
    }

    /// Hangs up the connection without a goodbye.
    pub(super) async fn hang_up(mut self) {
        let _ = self.w.shutdown().await;
    }
}

async fn send_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: Frame) {
    let mut buf = BytesMut::new();
    frame.encode(&mut buf).unwrap();
    w.write_all(&buf).await.unwrap();
}

/// Reads the server's frames, decoding header blocks in wire order (one zlib stream).
async fn read_all(mut r: ReadHalf<DuplexStream>, tx: mpsc::UnboundedSender<Option<Frame>>) {
    let mut dec = HeaderDecoder::new();
    loop {
        match read_frame(&mut r).await {
            Ok(Some(frame)) => {
                if let Frame::SynReply { headers, .. } = &frame {
                    let block = dec.decode(headers).expect("server header block decodes");
                    assert!(block.0.is_empty(), "SYN_REPLY carries no headers");
                }
                if tx.send(Some(frame)).is_err() {
                    return;
                }
            }
            _ => {
                let _ = tx.send(None);
                return;
            }
        }
    }
}
