//! One SPDY/3.1 server connection: a reader task that demultiplexes the client's frames
//! into streams (answering PINGs, noting GOAWAY and RST_STREAM, ignoring SETTINGS and
//! WINDOW_UPDATE) and a writer task that serializes every outgoing frame in order.
//!
//! There is no flow control: Go's spdystream never sends WINDOW_UPDATE, so honouring the
//! 64 KiB window would stall every transfer past it (reference §3.2). Back-pressure comes
//! from bounded queues instead: a stream whose consumer does not read eventually holds up
//! the connection's reader, as a blocked stream does in spdystream.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::mpsc as fmpsc;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, trace, warn, Instrument};

use super::frame::{read_frame, Frame, FLAG_FIN, RST_REFUSED_STREAM};
use super::headers::{HeaderBlock, HeaderDecoder, HeaderEncoder};
use super::outbox::{Outbox, Outgoing};
use super::stream::{StreamReader, StreamState, StreamWriter};

/// Chunks queued per stream before the connection's reader waits for its consumer.
const STREAM_QUEUE: usize = 32;
/// Frames queued for the writer (each sender also gets one slot of its own).
const OUTBOX_QUEUE: usize = 64;
/// How long a closed session keeps reading for the client to hang up, so our last frames
/// are not lost to a TCP reset caused by closing with unread input.
const CLOSE_DRAIN: Duration = Duration::from_secs(5);
/// How long `close` waits for the writer to put the last frames on the wire.
const CLOSE_FLUSH: Duration = Duration::from_secs(30);
/// The writer collects queued frames into one socket write up to this size.
const WRITE_BATCH: usize = 64 * 1024;
/// A connection with no frame either way for this long is dropped (the kubelet's default
/// `streamingConnectionIdleTimeout`; clients ping every 5 s, so only dead peers reach it).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// When a frame last crossed the connection, either way.
#[derive(Clone)]
struct Activity(Arc<std::sync::Mutex<Instant>>);

impl Activity {
    fn new() -> Self {
        Activity(Arc::new(std::sync::Mutex::new(Instant::now())))
    }

    fn touch(&self) {
        *self.0.lock().expect("activity lock") = Instant::now();
    }

    /// Returns once nothing has happened for [`IDLE_TIMEOUT`].
    async fn idle(&self) {
        loop {
            let deadline = *self.0.lock().expect("activity lock") + IDLE_TIMEOUT;
            if deadline <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream the client opened, not yet answered.
pub(crate) struct IncomingStream {
    pub(crate) id: u32,
    pub(crate) headers: HeaderBlock,
    rx: mpsc::Receiver<Bytes>,
    state: Arc<StreamState>,
    out: Outbox,
}

impl IncomingStream {
    /// Accepts the stream with a SYN_REPLY and hands out its halves.
    pub(crate) async fn accept(mut self) -> std::io::Result<(StreamReader, StreamWriter)> {
        self.out
            .send(Outgoing::Reply { stream_id: self.id })
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "SPDY connection closed")
            })?;
        Ok((
            StreamReader::new(self.rx, self.state.clone()),
            StreamWriter::new(self.id, self.out, self.state),
        ))
    }

    /// Refuses the stream with RST_STREAM.
    pub(crate) async fn refuse(mut self, status: u32) {
        let _ = self
            .out
            .send(Outgoing::Frame(Frame::RstStream {
                stream_id: self.id,
                status,
            }))
            .await;
    }
}

/// Ends the session from the server's side.
#[derive(Clone)]
pub(crate) struct SessionControl {
    out: Outbox,
    writer_done: watch::Receiver<bool>,
}

impl SessionControl {
    /// Sends GOAWAY after every frame queued so far and closes the connection; returns once
    /// the writer is done (or gave up).
    pub(crate) async fn close(&mut self) {
        let _ = self.out.send(Outgoing::Close).await;
        let mut done = self.writer_done.clone();
        let _ = tokio::time::timeout(CLOSE_FLUSH, done.wait_for(|d| *d)).await;
    }

    /// Asks for the close without waiting (for `Drop`).
    pub(crate) fn close_soon(&mut self) {
        if self.out.try_send(Outgoing::Close).is_err() {
            // A full queue: queue it from a task (none without a runtime, where the
            // connection's tasks are gone too).
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let mut out = self.out.clone();
                rt.spawn(
                    async move {
                        let _ = out.send(Outgoing::Close).await;
                    }
                    .in_current_span(),
                );
            }
        }
    }
}

pub(crate) struct Session {
    /// Streams in the order the client opened them. Dropping it refuses later streams.
    pub(crate) incoming: mpsc::Receiver<IncomingStream>,
    pub(crate) control: SessionControl,
}

/// Starts serving SPDY on an upgraded connection.
pub(crate) fn start<IO>(io: IO) -> Session
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let (out_tx, out_rx) = fmpsc::channel(OUTBOX_QUEUE);
    let (incoming_tx, incoming_rx) = mpsc::channel(16);
    let (lost_tx, lost_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(false);
    let activity = Activity::new();
    tokio::spawn(write_loop(write, out_rx, lost_rx, done_tx, activity.clone()).in_current_span());
    tokio::spawn(
        read_loop(
            read,
            activity,
            out_tx.clone(),
            incoming_tx,
            lost_tx,
            done_rx.clone(),
        )
        .in_current_span(),
    );
    Session {
        incoming: incoming_rx,
        control: SessionControl {
            out: out_tx,
            writer_done: done_rx,
        },
    }
}

struct OpenStream {
    tx: Option<mpsc::Sender<Bytes>>,
    state: Arc<StreamState>,
}

async fn read_loop<R>(
    read: R,
    activity: Activity,
    mut out: Outbox,
    incoming: mpsc::Sender<IncomingStream>,
    lost: watch::Sender<bool>,
    mut writer_done: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, read);
    let mut decoder = HeaderDecoder::new();
    let mut streams: HashMap<u32, OpenStream> = HashMap::new();
    let mut goaway = false;
    let mut last_id = 0u32;
    loop {
        let frame = tokio::select! {
            f = read_frame(&mut r) => f,
            _ = activity.idle() => {
                warn!(idle = ?IDLE_TIMEOUT, "SPDY connection idle, closing");
                break;
            }
            _ = wait_true(&mut writer_done) => {
                // We closed (or lost the socket's write side): read on briefly so the
                // client can take our last frames and hang up itself.
                let _ = tokio::time::timeout(CLOSE_DRAIN, async {
                    while let Ok(Some(_)) = read_frame(&mut r).await {}
                })
                .await;
                break;
            }
        };
        let frame = match frame {
            Ok(Some(f)) => {
                activity.touch();
                f
            }
            Ok(None) => {
                debug!("SPDY client closed the connection");
                break;
            }
            Err(e) => {
                debug!(error = %e, "SPDY connection ended");
                break;
            }
        };
        match frame {
            Frame::SynStream {
                stream_id,
                headers,
                flags,
                ..
            } => {
                let headers = match decoder.decode(&headers) {
                    Ok(h) => h,
                    Err(e) => {
                        warn!(error = %e, "SPDY header block from the client is corrupt, closing");
                        break;
                    }
                };
                if goaway || stream_id <= last_id || stream_id % 2 == 0 {
                    debug!(stream_id, "refusing a SPDY stream");
                    let _ = out
                        .send(Outgoing::Frame(Frame::RstStream {
                            stream_id,
                            status: RST_REFUSED_STREAM,
                        }))
                        .await;
                    continue;
                }
                last_id = stream_id;
                let state = Arc::new(StreamState::default());
                let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                let tx = if flags & FLAG_FIN != 0 {
                    state.peer_done.store(true, Ordering::Release);
                    None
                } else {
                    Some(tx)
                };
                let stream = IncomingStream {
                    id: stream_id,
                    headers,
                    rx,
                    state: state.clone(),
                    out: out.clone(),
                };
                if let Err(refused) = incoming.send(stream).await {
                    refused.0.refuse(RST_REFUSED_STREAM).await;
                    continue;
                }
                if tx.is_some() {
                    streams.insert(stream_id, OpenStream { tx, state });
                }
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let Some(open) = streams.get_mut(&stream_id) else {
                    trace!(stream_id, "DATA for a stream that is not open, dropped");
                    continue;
                };
                if !data.is_empty() {
                    if let Some(tx) = &open.tx {
                        if tx.send(data).await.is_err() {
                            // Nobody reads this stream any more.
                            open.tx = None;
                        }
                    }
                }
                if flags & FLAG_FIN != 0 {
                    open.state.peer_done.store(true, Ordering::Release);
                    streams.remove(&stream_id);
                }
            }
            Frame::RstStream { stream_id, status } => {
                debug!(stream_id, status, "SPDY stream reset by the client");
                if let Some(open) = streams.remove(&stream_id) {
                    open.state.peer_done.store(true, Ordering::Release);
                    open.state.reset.store(true, Ordering::Release);
                }
            }
            Frame::Ping { id } => {
                // Odd ids are the client's; an even one would answer a ping of ours, and
                // we send none.
                if id % 2 == 1 {
                    let _ = out.send(Outgoing::Frame(Frame::Ping { id })).await;
                }
            }
            Frame::GoAway { .. } => {
                debug!("SPDY client sent GOAWAY");
                goaway = true;
            }
            Frame::SynReply { headers, .. } | Frame::Headers { headers, .. } => {
                // Unused by Kubernetes, but their blocks advance the shared zlib stream.
                if let Err(e) = decoder.decode(&headers) {
                    warn!(error = %e, "SPDY header block from the client is corrupt, closing");
                    break;
                }
            }
            Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => {
                trace!(?frame, "SPDY frame ignored");
            }
        }
    }
    // Streams still open end with an error (not EOF): the client is gone.
    drop(streams);
    let _ = lost.send(true);
}

async fn write_loop<W>(
    mut w: W,
    mut rx: fmpsc::Receiver<Outgoing>,
    mut lost: watch::Receiver<bool>,
    done: watch::Sender<bool>,
    activity: Activity,
) where
    W: AsyncWrite + Unpin,
{
    let mut encoder = match HeaderEncoder::new() {
        Ok(e) => Some(e),
        Err(e) => {
            warn!(error = %e, "cannot set up SPDY header compression");
            None
        }
    };
    let mut buf = BytesMut::with_capacity(WRITE_BATCH + 1024);
    let mut last_good = 0u32;
    'serve: loop {
        let first = tokio::select! {
            biased;
            _ = wait_true(&mut lost) => break,
            m = rx.next() => m,
        };
        let Some(mut msg) = first else { break };
        let mut closing = false;
        loop {
            match msg {
                Outgoing::Frame(frame) => {
                    if let Err(e) = frame.encode(&mut buf) {
                        warn!(error = %e, "SPDY frame not sent");
                    }
                }
                Outgoing::Reply { stream_id } => {
                    last_good = last_good.max(stream_id);
                    let Some(enc) = encoder.as_mut() else {
                        break 'serve;
                    };
                    match enc.encode(&HeaderBlock::default()) {
                        Ok(headers) => {
                            let frame = Frame::SynReply {
                                stream_id,
                                flags: 0,
                                headers,
                            };
                            if let Err(e) = frame.encode(&mut buf) {
                                warn!(error = %e, "SPDY frame not sent");
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "SPDY header compression failed, closing");
                            break 'serve;
                        }
                    }
                }
                Outgoing::Close => {
                    let goaway = Frame::GoAway {
                        last_good_stream_id: last_good,
                        status: 0,
                    };
                    let _ = goaway.encode(&mut buf);
                    closing = true;
                    break;
                }
            }
            if buf.len() >= WRITE_BATCH {
                break;
            }
            match rx.try_recv() {
                Ok(next) => msg = next,
                Err(_) => break,
            }
        }
        let written = tokio::select! {
            biased;
            _ = wait_true(&mut lost) => break,
            r = async {
                w.write_all(&buf).await?;
                w.flush().await
            } => r,
        };
        buf.clear();
        if let Err(e) = written {
            debug!(error = %e, "SPDY connection write failed");
            break;
        }
        activity.touch();
        if closing {
            let _ = w.shutdown().await;
            break;
        }
    }
    // Dropping the queue makes every later write on a stream fail.
    drop(rx);
    let _ = done.send(true);
}

/// Waits until a flag is set (or its sender is gone), holding no borrow across the await.
async fn wait_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|v| *v).await;
}
