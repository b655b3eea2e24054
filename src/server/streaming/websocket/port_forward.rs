//! Legacy port-forward over a WebSocket (`port` query): for the i-th port, channel 2i
//! carries data both ways and 2i+1 errors to the client; each starts with the port as a
//! little-endian u16. Each port is dialled once; the session ends when all are done.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tracing::{debug, warn, Instrument};

use super::codec::{ChannelProtocol, Framing, Inbound};
use super::link::{self, Inbox, Outbox};
use super::PORTFORWARD_PROTOCOLS;
use crate::server::streaming::PortDialer;

/// Bytes buffered from the client towards each port.
const PIPE_BYTES: usize = 64 * 1024;
/// The largest payload of one outgoing frame.
const FRAME_BYTES: usize = 32 * 1024;
/// When one direction of a forwarded connection ends, how long the other gets to finish
/// (containerd's port forward waits as long, like socat).
const LINGER: Duration = Duration::from_secs(1);
/// Channel numbers are one byte and 255 is reserved, so 127 ports fit.
const MAX_PORTS: usize = 127;
/// In base64 framing a channel travels as the character `'0' + channel`, one byte only up to
/// channel 79 (`'\x7f'`): past it the character takes two bytes in the text message (as it
/// does upstream, whose own decoder then reads a wrong channel), so 40 ports fit.
const MAX_BASE64_PORTS: usize = 40;

#[derive(Debug, thiserror::Error)]
enum CopyError {
    #[error("error copying from remote stream to local connection: {0}")]
    ToPod(#[source] std::io::Error),
    #[error("error copying from local connection to remote stream: {0}")]
    FromPod(#[source] std::io::Error),
}

/// Serves a port-forward session on the upgraded connection until every port's connection
/// has ended, then closes it with 1000. Errors go to the client on the port's error channel
/// as `error forwarding port <p> to pod <sandbox>, uid <uid>: <err>`.
pub(crate) async fn port_forward<IO>(
    io: IO,
    protocol: &'static str,
    ports: Vec<u16>,
    dialer: Arc<dyn PortDialer>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let Some(proto) =
        ChannelProtocol::named(protocol).filter(|_| PORTFORWARD_PROTOCOLS.contains(&protocol))
    else {
        warn!(
            protocol,
            "port-forward over an unsupported websocket subprotocol"
        );
        return;
    };
    let (outbox, inbox) = match link::open(io, proto, None).await {
        Ok(link) => link,
        Err(e) => {
            debug!(error = %e, "port-forward connection lost before it started");
            return;
        }
    };
    let max_ports = match proto.framing {
        Framing::Binary => MAX_PORTS,
        Framing::Base64 => MAX_BASE64_PORTS,
    };
    if ports.len() > max_ports {
        warn!(
            ports = ports.len(),
            "too many ports for one port-forward connection"
        );
        outbox.close_with(CloseCode::Policy, "too many ports").await;
        drain(inbox).await;
        return;
    }

    for (i, port) in ports.iter().enumerate() {
        let data = data_channel(i);
        outbox.send(data, &port.to_le_bytes()).await;
        outbox.send(data + 1, &port.to_le_bytes()).await;
    }
    let mut to_ports = Vec::with_capacity(ports.len());
    let mut forwards = JoinSet::new();
    for (i, port) in ports.into_iter().enumerate() {
        let (ours, theirs) = duplex(PIPE_BYTES);
        to_ports.push(Some(ours));
        let forward = forward(
            port,
            data_channel(i),
            theirs,
            outbox.clone(),
            dialer.clone(),
        );
        forwards.spawn(forward.in_current_span());
    }
    let reader = tokio::spawn(read_loop(inbox, to_ports).in_current_span());
    while forwards.join_next().await.is_some() {}
    outbox.close().await;
    drop(outbox);
    let _ = reader.await;
}

fn data_channel(index: usize) -> u8 {
    u8::try_from(index * 2).expect("at most MAX_PORTS ports")
}

/// Reads until the connection ends (after our close, the client's answer).
async fn drain(mut inbox: Inbox) {
    while inbox.next().await.is_some() {}
}

/// Hands each data channel's bytes to its port. Dropping the pipes at the end is the ports'
/// EOF from the client: the legacy protocol has no half-close.
async fn read_loop(mut inbox: Inbox, mut to_ports: Vec<Option<DuplexStream>>) {
    while let Some(msg) = inbox.next().await {
        let Inbound::Data { channel, payload } = msg else {
            continue;
        };
        if channel % 2 != 0 {
            continue;
        }
        let Some(slot) = to_ports.get_mut(usize::from(channel / 2)) else {
            debug!(channel, "data for a channel this session does not have");
            continue;
        };
        if let Some(pipe) = slot.as_mut() {
            // The port's connection is gone: what the client still sends is dropped.
            if pipe.write_all(&payload).await.is_err() {
                *slot = None;
            }
        }
    }
}

/// One port: dial it inside the pod, then copy both ways.
async fn forward(
    port: u16,
    data: u8,
    from_client: DuplexStream,
    outbox: Outbox,
    dialer: Arc<dyn PortDialer>,
) {
    let result = match dialer.dial(port).await {
        Ok(conn) => copy_both(conn, from_client, &outbox, data)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        let msg = format!(
            "error forwarding port {port} to pod {}, uid {}: {e}",
            dialer.pod_sandbox_id(),
            dialer.pod_uid()
        );
        warn!(port, error = %msg, "port-forward failed");
        outbox.send(data + 1, msg.as_bytes()).await;
    }
}

async fn copy_both(
    conn: TcpStream,
    mut from_client: DuplexStream,
    outbox: &Outbox,
    data: u8,
) -> Result<(), CopyError> {
    let (mut pod_read, mut pod_write) = conn.into_split();
    let to_pod = async {
        tokio::io::copy(&mut from_client, &mut pod_write)
            .await
            .map_err(CopyError::ToPod)?;
        pod_write.shutdown().await.map_err(CopyError::ToPod)
    };
    let from_pod = async {
        let mut buf = vec![0; FRAME_BYTES];
        loop {
            let n = pod_read.read(&mut buf).await.map_err(CopyError::FromPod)?;
            if n == 0 || !outbox.send(data, &buf[..n]).await {
                return Ok(());
            }
        }
    };
    tokio::pin!(to_pod, from_pod);
    tokio::select! {
        done = &mut to_pod => {
            let _ = tokio::time::timeout(LINGER, &mut from_pod).await;
            done
        }
        done = &mut from_pod => {
            let _ = tokio::time::timeout(LINGER, &mut to_pod).await;
            done
        }
    }
}
