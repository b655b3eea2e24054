//! What a negotiated subprotocol means, and its framing of channel messages: binary
//! (`[channel][payload]`) or base64 (a text message, `'0'+channel` then the padded standard
//! base64 of the payload). Upstream's wsstream codec, written here because no crate knows
//! these framings; it is a few lines over tungstenite's messages.

use base64::Engine;
use bytes::Bytes;
use tokio_tungstenite::tungstenite::Message;

pub(super) const V5_BINARY: &str = "v5.channel.k8s.io";
pub(super) const V4_BINARY: &str = "v4.channel.k8s.io";
pub(super) const V4_BASE64: &str = "v4.base64.channel.k8s.io";
pub(super) const V1_BINARY: &str = "channel.k8s.io";
pub(super) const V1_BASE64: &str = "base64.channel.k8s.io";
/// No `Sec-WebSocket-Protocol` at all: binary, as `channel.k8s.io`.
pub(super) const NONE: &str = "";

/// The v5 half-close signal: `[255, channel]`.
pub(super) const CLOSE_CHANNEL: u8 = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Binary,
    Base64,
}

/// What a subprotocol changes in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ChannelProtocol {
    pub framing: Framing,
    /// v4 and later write the status as `metav1.Status` JSON, always; older ones only the
    /// failure text.
    pub json_status: bool,
    /// v5 clients half-close a channel with `[255, channel]`.
    pub stream_close: bool,
}

impl ChannelProtocol {
    pub fn named(name: &str) -> Option<ChannelProtocol> {
        let (framing, json_status, stream_close) = match name {
            V5_BINARY => (Framing::Binary, true, true),
            V4_BINARY => (Framing::Binary, true, false),
            V4_BASE64 => (Framing::Base64, true, false),
            V1_BINARY | NONE => (Framing::Binary, false, false),
            V1_BASE64 => (Framing::Base64, false, false),
            _ => return None,
        };
        Some(ChannelProtocol {
            framing,
            json_status,
            stream_close,
        })
    }
}

/// One message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Inbound {
    Data {
        channel: u8,
        payload: Bytes,
    },
    /// v5: the client will send nothing more on `channel`.
    Close {
        channel: u8,
    },
}

#[derive(Debug, thiserror::Error)]
pub(super) enum DecodeError {
    #[error("invalid base64 data on channel {channel}")]
    Base64 {
        channel: u8,
        #[source]
        source: base64::DecodeError,
    },
    #[error("single channel byte should follow stream close signal, got {0} bytes")]
    CloseLength(usize),
}

/// The message carrying `payload` on `channel`.
pub(super) fn encode(framing: Framing, channel: u8, payload: &[u8]) -> Message {
    match framing {
        Framing::Binary => {
            let mut frame = Vec::with_capacity(payload.len() + 1);
            frame.push(channel);
            frame.extend_from_slice(payload);
            Message::binary(frame)
        }
        Framing::Base64 => {
            let mut frame = String::with_capacity(1 + payload.len().div_ceil(3) * 4);
            frame.push(char::from(b'0'.wrapping_add(channel)));
            base64::engine::general_purpose::STANDARD.encode_string(payload, &mut frame);
            Message::text(frame)
        }
    }
}

/// The channel message in `msg`; `None` for control messages and empty ones. Upstream reads
/// text and binary messages alike, whatever the framing.
pub(super) fn decode(
    protocol: ChannelProtocol,
    msg: Message,
) -> Result<Option<Inbound>, DecodeError> {
    let mut data = match msg {
        Message::Binary(b) => b,
        Message::Text(t) => Bytes::from(t),
        _ => return Ok(None),
    };
    if data.is_empty() {
        return Ok(None);
    }
    if protocol.stream_close && data[0] == CLOSE_CHANNEL {
        if data.len() != 2 {
            return Err(DecodeError::CloseLength(data.len() - 1));
        }
        return Ok(Some(Inbound::Close { channel: data[1] }));
    }
    let first = data.split_to(1)[0];
    match protocol.framing {
        Framing::Binary => Ok(Some(Inbound::Data {
            channel: first,
            payload: data,
        })),
        Framing::Base64 => {
            let channel = first.wrapping_sub(b'0');
            let payload = base64::engine::general_purpose::STANDARD
                .decode(&data)
                .map_err(|source| DecodeError::Base64 { channel, source })?;
            Ok(Some(Inbound::Data {
                channel,
                payload: payload.into(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(name: &str) -> ChannelProtocol {
        ChannelProtocol::named(name).unwrap()
    }

    #[test]
    fn binary_frames_carry_the_channel_byte_first() {
        assert_eq!(
            encode(Framing::Binary, 1, b"hi"),
            Message::binary(vec![1, b'h', b'i'])
        );
        assert_eq!(encode(Framing::Binary, 3, b""), Message::binary(vec![3]));
        let got = decode(proto(V4_BINARY), Message::binary(vec![0, b'x', b'y'])).unwrap();
        assert_eq!(
            got,
            Some(Inbound::Data {
                channel: 0,
                payload: Bytes::from_static(b"xy")
            })
        );
    }

    #[test]
    fn base64_frames_are_text_with_a_digit_channel() {
        // wsstream's own example: "\n" on stdout is "1Cg==".
        assert_eq!(encode(Framing::Base64, 1, b"\n"), Message::text("1Cg=="));
        assert_eq!(encode(Framing::Base64, 1, b""), Message::text("1"));
        // and "foo\n" on stdin arrives as "0Zm9vCg==".
        let got = decode(proto(V1_BASE64), Message::text("0Zm9vCg==")).unwrap();
        assert_eq!(
            got,
            Some(Inbound::Data {
                channel: 0,
                payload: Bytes::from_static(b"foo\n")
            })
        );
        let bad = decode(proto(V4_BASE64), Message::text("0!!"));
        assert!(matches!(bad, Err(DecodeError::Base64 { channel: 0, .. })));
    }

    #[test]
    fn close_signals_are_v5_only() {
        let close = Message::binary(vec![255, 0]);
        assert_eq!(
            decode(proto(V5_BINARY), close.clone()).unwrap(),
            Some(Inbound::Close { channel: 0 })
        );
        // Before v5, 255 is just a channel nobody uses.
        assert_eq!(
            decode(proto(V4_BINARY), close).unwrap(),
            Some(Inbound::Data {
                channel: 255,
                payload: Bytes::from_static(&[0])
            })
        );
        assert!(matches!(
            decode(proto(V5_BINARY), Message::binary(vec![255, 0, 1])),
            Err(DecodeError::CloseLength(2))
        ));
    }

    #[test]
    fn control_and_empty_messages_carry_nothing() {
        let p = proto(V4_BINARY);
        assert_eq!(decode(p, Message::Ping(Bytes::new())).unwrap(), None);
        assert_eq!(decode(p, Message::binary(Vec::new())).unwrap(), None);
        assert_eq!(decode(p, Message::Close(None)).unwrap(), None);
    }

    #[test]
    fn protocols_differ_in_status_and_close() {
        assert!(proto(V5_BINARY).stream_close && proto(V5_BINARY).json_status);
        assert!(!proto(V4_BASE64).stream_close && proto(V4_BASE64).json_status);
        assert_eq!(proto(NONE), proto(V1_BINARY));
        assert!(!proto(V1_BASE64).json_status);
        assert_eq!(proto(V1_BASE64).framing, Framing::Base64);
        assert!(ChannelProtocol::named("v5.base64.channel.k8s.io").is_none());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn protocol() -> impl Strategy<Value = ChannelProtocol> {
            prop::sample::select(vec![
                V5_BINARY, V4_BINARY, V4_BASE64, V1_BINARY, V1_BASE64, NONE,
            ])
            .prop_map(|name| ChannelProtocol::named(name).unwrap())
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(512))]

            /// A channel message encoded in a protocol's framing decodes as itself. v5's
            /// close signal takes channel 255's first byte, so data on 255 is not v5's.
            #[test]
            fn channel_messages_round_trip(
                protocol in protocol(),
                channel in any::<u8>(),
                payload in prop::collection::vec(any::<u8>(), 0..64),
            ) {
                // Base64 framing writes channels 80 to 207 as two-byte characters, as
                // upstream does; the sessions never use them (port_forward's limit).
                let unused = (protocol.stream_close && channel == CLOSE_CHANNEL)
                    || (protocol.framing == Framing::Base64 && !b'0'.wrapping_add(channel).is_ascii());
                if unused {
                    return Ok(());
                }
                let msg = encode(protocol.framing, channel, &payload);
                prop_assert_eq!(
                    decode(protocol, msg).unwrap(),
                    Some(Inbound::Data { channel, payload: Bytes::from(payload) })
                );
            }

            /// Any message from a client is a channel message, nothing, or an error.
            #[test]
            fn any_message_decodes_or_errs(
                protocol in protocol(),
                data in prop::collection::vec(any::<u8>(), 0..64),
                text in ".{0,40}",
            ) {
                let _ = decode(protocol, Message::binary(data.clone()));
                let _ = decode(protocol, Message::text(text));
                let _ = decode(protocol, Message::Ping(data.into()));
            }
        }
    }
}
