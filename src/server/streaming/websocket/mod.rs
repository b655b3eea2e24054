//! The WebSocket channel protocols (`channel.k8s.io`, `base64.channel.k8s.io`,
//! `v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `v5.channel.k8s.io`) the apiserver passes
//! through to the kubelet for clients other than kubectl, server side.
//!
//! - `handshake`: is this a WebSocket upgrade, which subprotocol, the 101 answer or refusal;
//! - `codec`: what each subprotocol means, and its channel framing (binary or base64);
//! - `link`: one upgraded connection as a queue of outgoing frames and a stream of incoming
//!   channel messages;
//! - `remote_command`: an exec or attach session as [`RemoteStreams`](super::RemoteStreams);
//! - `port_forward`: the legacy port-forward protocol, one connection per port;

mod codec;
mod handshake;
mod link;
mod port_forward;
mod remote_command;

#[cfg(test)]
mod tests;

pub(crate) use handshake::{accept, is_websocket_upgrade};
pub(crate) use port_forward::port_forward;
pub(crate) use remote_command::remote_command;

/// The subprotocols `/exec` and `/attach` speak; `""` stands for a client that offered none
/// (binary framing, the pre-v4 status), as upstream's table has it.
pub(crate) const REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    codec::V5_BINARY,
    codec::V4_BINARY,
    codec::V4_BASE64,
    codec::V1_BINARY,
    codec::V1_BASE64,
    codec::NONE,
];

/// The subprotocols of legacy WebSocket port-forward (upstream has no base64 v1 here).
pub(crate) const PORTFORWARD_PROTOCOLS: &[&str] =
    &[codec::V4_BINARY, codec::V4_BASE64, codec::NONE];

/// Why a WebSocket session could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WsError {
    #[error("websocket subprotocol {0:?} is not supported here")]
    UnsupportedProtocol(&'static str),
    #[error("unable to write to the websocket connection")]
    Send(#[source] tokio_tungstenite::tungstenite::Error),
}
