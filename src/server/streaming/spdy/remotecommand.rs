//! exec and attach over SPDY (`v4.channel.k8s.io` and older): collect the streams the client
//! creates, hand them out as [`RemoteStreams`], and report the outcome on the error stream.

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::{debug, warn, Instrument};

use super::session::{self, IncomingStream, SessionControl};
use super::stream::{StreamReader, StreamWriter};
use super::SpdyError;
use crate::runtime::stdio::{StdioRequest, TermSize};
use crate::server::streaming::resize::ResizeDecoder;
use crate::server::streaming::{RemoteStreams, StatusSink, StreamStatus};

/// How long the client has to create all its streams (upstream's
/// `DefaultStreamCreationTimeout`).
pub(crate) const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

const STREAM_TYPE: &str = "streamtype";

/// Runs on the upgraded connection: serves the SPDY session, accepts the streams an
/// exec/attach client creates (within 30 s) and returns them as [`RemoteStreams`]. The
/// session runs on in the background until the status is reported or the client leaves.
pub(crate) async fn remote_command<IO>(
    io: IO,
    protocol: &'static str,
    req: StdioRequest,
) -> Result<RemoteStreams, SpdyError>
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut session = session::start(io);
    let wanted = Wanted::new(protocol, req);
    let collected = tokio::time::timeout(
        STREAM_CREATION_TIMEOUT,
        collect(&mut session.incoming, wanted),
    )
    .await;
    // Streams opened after these are refused.
    drop(session.incoming);
    let streams = match collected {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            session.control.close_soon();
            return Err(e);
        }
        Err(_) => {
            session.control.close_soon();
            return Err(SpdyError::StreamCreationTimeout);
        }
    };
    let resize = streams.resize.map(|(r, _)| {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(decode_resizes(r, tx).in_current_span());
        rx
    });
    let (_, error) = streams
        .error
        .expect("collect returns only with an error stream");
    let (stdin, stdin_writer) = match streams.stdin {
        Some((r, w)) => (Some(Box::pin(r) as _), Some(w)),
        None => (None, None),
    };
    Ok(RemoteStreams {
        stdin,
        stdout: streams.stdout.map(|(_, w)| Box::pin(w) as _),
        stderr: streams.stderr.map(|(_, w)| Box::pin(w) as _),
        resize,
        status: Box::new(SpdyStatus {
            error,
            stdin: stdin_writer,
            v4: protocol == "v4.channel.k8s.io",
            control: session.control,
            finished: false,
        }),
    })
}

/// Which streams the client must create, from the request and the protocol version.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    resize: bool,
}

impl Wanted {
    fn new(protocol: &str, req: StdioRequest) -> Self {
        Wanted {
            stdin: req.stdin,
            stdout: req.stdout,
            // A terminal merges stderr into stdout.
            stderr: req.stderr && !req.tty,
            // Resize exists from v3 on.
            resize: req.tty && matches!(protocol, "v4.channel.k8s.io" | "v3.channel.k8s.io"),
        }
    }
}

type Halves = (StreamReader, StreamWriter);

#[derive(Default)]
struct Collected {
    error: Option<Halves>,
    stdin: Option<Halves>,
    stdout: Option<Halves>,
    stderr: Option<Halves>,
    resize: Option<Halves>,
}

impl Collected {
    fn complete(&self, w: Wanted) -> bool {
        self.error.is_some()
            && self.stdin.is_some() == w.stdin
            && self.stdout.is_some() == w.stdout
            && self.stderr.is_some() == w.stderr
            && self.resize.is_some() == w.resize
    }
}

async fn collect(
    incoming: &mut mpsc::Receiver<IncomingStream>,
    wanted: Wanted,
) -> Result<Collected, SpdyError> {
    let mut got = Collected::default();
    while !got.complete(wanted) {
        let stream = incoming.recv().await.ok_or(SpdyError::ConnectionClosed)?;
        let kind = stream.headers.get(STREAM_TYPE).unwrap_or("").to_string();
        let id = stream.id;
        let slot = match kind.as_str() {
            "error" => Some(&mut got.error),
            "stdin" if wanted.stdin => Some(&mut got.stdin),
            "stdout" if wanted.stdout => Some(&mut got.stdout),
            "stderr" if wanted.stderr => Some(&mut got.stderr),
            "resize" if wanted.resize => Some(&mut got.resize),
            _ => None,
        };
        // Every stream gets its reply, as upstream's handler gives one; only the streams
        // this session asked for count.
        let halves = stream
            .accept()
            .await
            .map_err(|_| SpdyError::ConnectionClosed)?;
        match slot {
            Some(slot) if slot.is_none() => *slot = Some(halves),
            Some(_) => warn!(stream_id = id, stream_type = %kind, "duplicate stream ignored"),
            None => warn!(stream_id = id, stream_type = %kind, "unexpected stream type ignored"),
        }
    }
    Ok(got)
}

/// Reads the resize stream: JSON objects such as `{"Width":120,"Height":40}` one after the
/// other, names matched case-insensitively as Go's decoder does.
async fn decode_resizes(mut r: StreamReader, tx: mpsc::Sender<TermSize>) {
    let mut sizes = ResizeDecoder::default();
    let mut chunk = [0u8; 1024];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) => {
                debug!(error = %e, "resize stream ended");
                return;
            }
        };
        match sizes.push(&chunk[..n]) {
            Ok(got) => {
                for size in got {
                    if tx.send(size).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                // Upstream stops handling resizes at the first bad event.
                warn!(error = %e, "bad resize event, no more resizes for this session");
                return;
            }
        }
    }
}

/// Reports the outcome on the error stream, then ends the session.
struct SpdyStatus {
    error: StreamWriter,
    /// Our side of the stdin stream, closed at the end (the client reads it until then).
    stdin: Option<StreamWriter>,
    v4: bool,
    control: SessionControl,
    finished: bool,
}

#[async_trait]
impl StatusSink for SpdyStatus {
    async fn finish(mut self: Box<Self>, status: StreamStatus) {
        self.finished = true;
        let body = if self.v4 {
            status.v4_json()
        } else {
            status.legacy_text()
        };
        if !body.is_empty() {
            if let Err(e) = self.error.write_all(&body).await {
                debug!(error = %e, "status not delivered");
            }
        }
        let _ = self.error.shutdown().await;
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = stdin.shutdown().await;
        }
        self.control.close().await;
    }
}

impl Drop for SpdyStatus {
    fn drop(&mut self) {
        // A session dropped without a status still ends its connection.
        if !self.finished {
            self.control.close_soon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streams_wanted_follow_the_request_and_version() {
        let tty = StdioRequest {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        let w = Wanted::new("v4.channel.k8s.io", tty);
        assert!(w.stdin && w.stdout && !w.stderr && w.resize);
        let w = Wanted::new("v2.channel.k8s.io", tty);
        assert!(!w.resize);
        let plain = StdioRequest {
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let w = Wanted::new("v4.channel.k8s.io", plain);
        assert!(!w.stdin && w.stdout && w.stderr && !w.resize);
    }
}
