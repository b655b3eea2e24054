//! SPDY/3.1: what the apiserver speaks to the kubelet for exec, attach and port-forward
//! (reference §3-§5). No maintained crate serves SPDY, so the subset Kubernetes uses is
//! written here, in layers:
//! - `frame`: the frame codec; `headers` and `dictionary`: header blocks and their zlib
//!   compression primed with the SPDY/3 dictionary;
//! - `session`: one connection (stream demux, SYN_REPLY, PING echo, GOAWAY, RST_STREAM; no
//!   flow control, as Go peers never send WINDOW_UPDATE), `stream`: a stream's halves as
//!   tokio byte streams;
//! - `negotiate`: the HTTP handshake before the upgrade;
//! - `remotecommand` (exec, attach) and `portforward`: the two protocols on top.

mod dictionary;
mod frame;
mod headers;
mod negotiate;
mod outbox;
mod portforward;
mod remotecommand;
mod session;
mod stream;
#[cfg(test)]
mod testclient;
#[cfg(test)]
mod tests;

pub(crate) use negotiate::{is_spdy_upgrade, negotiate, switching_protocols};
pub(crate) use portforward::port_forward;
pub(crate) use remotecommand::remote_command;

/// The remotecommand protocols served over SPDY, in upstream's order (v5 is WebSocket-only).
pub(crate) const REMOTECOMMAND_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];
/// The port-forward protocol.
pub(crate) const PORTFORWARD_PROTOCOLS: &[&str] = &["portforward.k8s.io"];

/// Why an exec or attach session could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpdyError {
    /// Upstream's words for a client that did not create its streams in time.
    #[error("timed out waiting for client to create streams")]
    StreamCreationTimeout,
    #[error("connection closed before the client created its streams")]
    ConnectionClosed,
}
