//! One upgraded connection: an [`Outbox`] (many senders, one writer task owning the sink)
//! and an [`Inbox`] of decoded channel messages. Reading the inbox is what answers pings
//! (tungstenite queues the pong and flushes it on the next read or write), so each session
//! keeps one task reading it for as long as the connection lives.

use std::pin::Pin;
use std::time::Duration;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, warn, Instrument};

use super::codec::{self, ChannelProtocol, Inbound};
use super::WsError;

/// How long the client has to answer our close frame before the connection is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// Frames queued for the writer; senders wait beyond that, so a slow client slows the
/// process's output instead of growing memory.
const OUTBOX_FRAMES: usize = 16;

type Messages = Pin<Box<dyn Stream<Item = Result<Message, tungstenite::Error>> + Send>>;

enum Outbound {
    Frame(Message),
    Close(CloseFrame),
}

/// Where frames to the client go. Cheap to clone; once every clone is dropped the writer
/// closes the connection normally.
#[derive(Clone)]
pub(super) struct Outbox {
    tx: mpsc::Sender<Outbound>,
    protocol: ChannelProtocol,
}

impl Outbox {
    /// Queues `payload` on `channel`. False once the connection can take no more.
    pub async fn send(&self, channel: u8, payload: &[u8]) -> bool {
        let frame = codec::encode(self.protocol.framing, channel, payload);
        self.tx.send(Outbound::Frame(frame)).await.is_ok()
    }

    /// Closes the connection with 1000 after everything queued before.
    pub async fn close(&self) {
        self.close_with(CloseCode::Normal, "").await;
    }

    pub async fn close_with(&self, code: CloseCode, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        // An error means the writer is gone, and the connection with it.
        let _ = self.tx.send(Outbound::Close(frame)).await;
    }
}

/// The client's channel messages.
pub(super) struct Inbox {
    messages: Messages,
    protocol: ChannelProtocol,
    /// Set once our close frame went out (or the writer stopped).
    closing: watch::Receiver<bool>,
    give_up_at: Option<Instant>,
}

impl Inbox {
    /// The next channel message; `None` once the connection ended, or once the client let
    /// [`CLOSE_GRACE`] pass without answering our close. Messages that break the framing
    /// are logged and skipped, as upstream does, except a malformed v5 close signal, which
    /// ends the connection (upstream's reader stops there too).
    pub async fn next(&mut self) -> Option<Inbound> {
        loop {
            let closing = &mut self.closing;
            let give_up_at = &mut self.give_up_at;
            let grace = async {
                let deadline = match *give_up_at {
                    Some(at) => at,
                    None => {
                        // The writer dropping its end means closing too.
                        let _ = closing.wait_for(|c| *c).await;
                        *give_up_at.insert(Instant::now() + CLOSE_GRACE)
                    }
                };
                tokio::time::sleep_until(deadline).await;
            };
            let msg = tokio::select! {
                msg = self.messages.next() => msg,
                () = grace => {
                    debug!("the client did not answer the websocket close in time");
                    return None;
                }
            };
            let msg = match msg? {
                Ok(msg) => msg,
                Err(e) => {
                    debug!(error = %e, "websocket connection ended");
                    return None;
                }
            };
            match codec::decode(self.protocol, msg) {
                Ok(Some(inbound)) => return Some(inbound),
                Ok(None) => continue,
                Err(e @ codec::DecodeError::CloseLength(_)) => {
                    warn!(error = %e, "websocket protocol error");
                    return None;
                }
                Err(e) => {
                    warn!(error = %e, "dropping a websocket message");
                    continue;
                }
            }
        }
    }
}

/// Takes over the upgraded connection. `first`, when given, is written before anything
/// else, so a failure there is the session's error.
pub(super) async fn open<IO>(
    io: IO,
    protocol: ChannelProtocol,
    first: Option<u8>,
) -> Result<(Outbox, Inbox), WsError>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    if let Some(channel) = first {
        ws.send(codec::encode(protocol.framing, channel, &[]))
            .await
            .map_err(WsError::Send)?;
    }
    let (sink, messages) = ws.split();
    let (tx, rx) = mpsc::channel(OUTBOX_FRAMES);
    let (closing_tx, closing) = watch::channel(false);
    tokio::spawn(write_loop(sink, rx, closing_tx).in_current_span());
    let messages: SplitStream<WebSocketStream<IO>> = messages;
    Ok((
        Outbox { tx, protocol },
        Inbox {
            messages: Box::pin(messages),
            protocol,
            closing,
            give_up_at: None,
        },
    ))
}

async fn write_loop<IO>(
    mut sink: SplitSink<WebSocketStream<IO>, Message>,
    mut rx: mpsc::Receiver<Outbound>,
    closing: watch::Sender<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let (msg, last) = match rx.recv().await {
            Some(Outbound::Frame(msg)) => (msg, false),
            Some(Outbound::Close(frame)) => (Message::Close(Some(frame)), true),
            // Every sender is gone: the session ended without closing.
            None => (
                Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })),
                true,
            ),
        };
        // Frames queued together go out in one flush.
        let sent = match sink.feed(msg).await {
            Ok(()) if last || rx.is_empty() => sink.flush().await,
            other => other,
        };
        if let Err(e) = sent {
            debug!(error = %e, "websocket write failed");
            break;
        }
        if last {
            break;
        }
    }
    closing.send_replace(true);
}
