//! An exec or attach session over a WebSocket channel protocol: channels 0 stdin, 1 stdout,
//! 2 stderr, 3 error (the status), 4 resize; v5 adds the client's half-close of stdin.

use async_trait::async_trait;
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn, Instrument};

use super::codec::{ChannelProtocol, Inbound};
use super::link::{self, Inbox, Outbox};
use super::{WsError, REMOTECOMMAND_PROTOCOLS};
use crate::runtime::stdio::StdioRequest;
use crate::server::streaming::resize::ResizeDecoder;
use crate::server::streaming::{
    BoxRead, BoxWrite, RemoteStreams, StatusSink, StreamStatus, TermSize,
};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// Bytes buffered between the session's streams and the connection, each way.
const PIPE_BYTES: usize = 64 * 1024;
/// The largest payload of one outgoing frame.
const FRAME_BYTES: usize = 32 * 1024;
/// Sizes queued for the copy loop before the reader waits for it.
const RESIZE_QUEUE: usize = 16;

/// On the upgraded connection: sends the initial empty message on the lowest writable
/// channel (how upstream tells the client the session is up), and returns the client's
/// streams. stdin ends on a v5 CLOSE of channel 0 or with the connection (before v5 there
/// is no other way); shutting stdout or stderr down sends nothing (upstream neither); the
/// status goes on channel 3 (v4/v5: `metav1.Status` JSON, older: the failure text only),
/// then the connection closes with 1000.
pub(crate) async fn remote_command<IO>(
    io: IO,
    protocol: &'static str,
    req: StdioRequest,
) -> Result<RemoteStreams, WsError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let proto = ChannelProtocol::named(protocol)
        .filter(|_| REMOTECOMMAND_PROTOCOLS.contains(&protocol))
        .ok_or(WsError::UnsupportedProtocol(protocol))?;
    let first = if req.stdout {
        STDOUT
    } else if req.stderr {
        STDERR
    } else {
        ERROR
    };
    let (outbox, inbox) = link::open(io, proto, Some(first)).await?;

    let mut pumps = Vec::new();
    let mut outgoing = |wanted: bool, channel: u8| -> Option<BoxWrite> {
        wanted.then(|| {
            let (theirs, ours) = duplex(PIPE_BYTES);
            pumps.push(tokio::spawn(
                pump(ours, outbox.clone(), channel).in_current_span(),
            ));
            Box::pin(theirs) as BoxWrite
        })
    };
    let stdout = outgoing(req.stdout, STDOUT);
    let stderr = outgoing(req.stderr, STDERR);

    let (stdin_pipe, stdin) = if req.stdin {
        let (ours, theirs) = duplex(PIPE_BYTES);
        (Some(ours), Some(Box::pin(theirs) as BoxRead))
    } else {
        (None, None)
    };
    let (resize_tx, resize) = if req.tty {
        let (tx, rx) = mpsc::channel(RESIZE_QUEUE);
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    tokio::spawn(read_loop(inbox, stdin_pipe, resize_tx).in_current_span());

    Ok(RemoteStreams {
        stdin,
        stdout,
        stderr,
        resize,
        status: Box::new(WsStatus {
            outbox,
            pumps,
            json: proto.json_status,
        }),
    })
}

/// Copies what the session writes to one channel into frames, until the writer is shut
/// down (or dropped) or the connection goes. Dropping `from` then makes the session's
/// writes fail, which is how it learns the client left.
async fn pump(mut from: DuplexStream, outbox: Outbox, channel: u8) {
    let mut buf = vec![0; FRAME_BYTES];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !outbox.send(channel, &buf[..n]).await {
                    break;
                }
            }
        }
    }
}

/// Hands the client's stdin and sizes to the session for as long as the connection lives;
/// dropping `stdin` is the session's EOF.
async fn read_loop(
    mut inbox: Inbox,
    mut stdin: Option<DuplexStream>,
    mut resize: Option<mpsc::Sender<TermSize>>,
) {
    let mut sizes = ResizeDecoder::default();
    while let Some(msg) = inbox.next().await {
        match msg {
            Inbound::Data {
                channel: STDIN,
                payload,
            } => {
                if let Some(pipe) = stdin.as_mut() {
                    // The session stopped reading stdin: the rest is dropped.
                    if pipe.write_all(&payload).await.is_err() {
                        stdin = None;
                    }
                }
            }
            Inbound::Data {
                channel: RESIZE,
                payload,
            } => {
                let Some(tx) = resize.as_ref() else { continue };
                match sizes.push(&payload) {
                    Ok(new) => {
                        for size in new {
                            if tx.send(size).await.is_err() {
                                resize = None;
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "ignoring the rest of the resize channel");
                        resize = None;
                    }
                }
            }
            Inbound::Close { channel: STDIN } => {
                debug!("the client closed stdin");
                stdin = None;
            }
            Inbound::Close { channel: RESIZE } => resize = None,
            // Channels the client has no business writing.
            Inbound::Data { .. } | Inbound::Close { .. } => {}
        }
    }
}

/// Writes the status once stdout and stderr have drained, then closes.
struct WsStatus {
    outbox: Outbox,
    pumps: Vec<JoinHandle<()>>,
    json: bool,
}

#[async_trait]
impl StatusSink for WsStatus {
    async fn finish(self: Box<Self>, status: StreamStatus) {
        // The client reads output until the status arrives: everything the session wrote
        // must be on the wire first.
        for pump in self.pumps {
            let _ = pump.await;
        }
        let body = if self.json {
            status.v4_json()
        } else {
            status.legacy_text()
        };
        if !body.is_empty() {
            self.outbox.send(ERROR, &body).await;
        }
        self.outbox.close().await;
    }
}
