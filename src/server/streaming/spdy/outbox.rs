//! The one queue every stream and the session's reader put frames on for the session's
//! writer task: the writer alone compresses header blocks and writes the connection, so
//! frames go out whole and in order. Below both the session and its streams.

use futures::channel::mpsc as fmpsc;

use super::frame::Frame;

/// What the writer task puts on the wire.
pub(crate) enum Outgoing {
    Frame(Frame),
    /// SYN_REPLY with an empty header block (compressed by the writer, in wire order).
    Reply {
        stream_id: u32,
    },
    /// GOAWAY, then shut the connection down.
    Close,
}

pub(crate) type Outbox = fmpsc::Sender<Outgoing>;
