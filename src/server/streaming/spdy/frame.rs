//! SPDY/3.1 frames on the wire (draft 3.1 §2.2): an 8-byte head, then the payload. Header
//! blocks travel here still compressed; `headers` owns their zlib state, which the session
//! keeps per direction.
//!
//! Hand-written: no maintained crate speaks SPDY/3.1 as a server (the reference's §8).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The only version Kubernetes peers speak.
pub(crate) const VERSION: u16 = 3;
/// FIN, on DATA and on SYN_STREAM/SYN_REPLY/HEADERS.
pub(crate) const FLAG_FIN: u8 = 0x01;
/// The largest payload a 24-bit length can carry.
pub(crate) const MAX_LENGTH: usize = 0xff_ffff;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes (draft 3.1 §2.6.3) the server sends.
pub(crate) const RST_REFUSED_STREAM: u32 = 3;
pub(crate) const RST_CANCEL: u32 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    SynStream {
        stream_id: u32,
        assoc_id: u32,
        /// The 3-bit priority, unshifted.
        priority: u8,
        slot: u8,
        flags: u8,
        /// The compressed header block.
        headers: Bytes,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Bytes,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    /// Kept raw: Kubernetes peers never act on settings.
    Settings {
        flags: u8,
        payload: Bytes,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Bytes,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Bytes,
    },
    /// A control frame type SPDY/3.1 does not define; skipped.
    Unknown {
        kind: u16,
        flags: u8,
        payload: Bytes,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("reading a frame: {0}")]
    Io(#[source] std::io::Error),
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("{kind} frame too short ({len} bytes)")]
    TooShort { kind: &'static str, len: usize },
    #[error("frame payload of {0} bytes exceeds the 24-bit length")]
    TooLarge(usize),
}

impl Frame {
    /// Appends the frame's wire form to `out`.
    pub(crate) fn encode(&self, out: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                check_len(data.len())?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(((*flags as u32) << 24) | data.len() as u32);
                out.put_slice(data);
            }
            Frame::SynStream {
                stream_id,
                assoc_id,
                priority,
                slot,
                flags,
                headers,
            } => {
                control_head(out, TYPE_SYN_STREAM, *flags, 10 + headers.len())?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(assoc_id & 0x7fff_ffff);
                out.put_u8((priority & 0x07) << 5);
                out.put_u8(*slot);
                out.put_slice(headers);
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                control_head(out, TYPE_SYN_REPLY, *flags, 4 + headers.len())?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_slice(headers);
            }
            Frame::RstStream { stream_id, status } => {
                control_head(out, TYPE_RST_STREAM, 0, 8)?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Frame::Settings { flags, payload } => {
                control_head(out, TYPE_SETTINGS, *flags, payload.len())?;
                out.put_slice(payload);
            }
            Frame::Ping { id } => {
                control_head(out, TYPE_PING, 0, 4)?;
                out.put_u32(*id);
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control_head(out, TYPE_GOAWAY, 0, 8)?;
                out.put_u32(last_good_stream_id & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                control_head(out, TYPE_HEADERS, *flags, 4 + headers.len())?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_slice(headers);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_head(out, TYPE_WINDOW_UPDATE, 0, 8)?;
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(delta & 0x7fff_ffff);
            }
            Frame::Unknown {
                kind,
                flags,
                payload,
            } => {
                control_head(out, *kind, *flags, payload.len())?;
                out.put_slice(payload);
            }
        }
        Ok(())
    }

    /// Builds a frame from its 8-byte head and its payload.
    pub(crate) fn parse(head: [u8; 8], mut payload: Bytes) -> Result<Frame, FrameError> {
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        if first & 0x8000_0000 == 0 {
            return Ok(Frame::Data {
                stream_id: first & 0x7fff_ffff,
                flags,
                data: payload,
            });
        }
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        let kind = (first & 0xffff) as u16;
        let need = |name: &'static str, n: usize, p: &Bytes| {
            if p.len() < n {
                Err(FrameError::TooShort {
                    kind: name,
                    len: p.len(),
                })
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            TYPE_SYN_STREAM => {
                need("SYN_STREAM", 10, &payload)?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let assoc_id = payload.get_u32() & 0x7fff_ffff;
                let priority = payload.get_u8() >> 5;
                let slot = payload.get_u8();
                Frame::SynStream {
                    stream_id,
                    assoc_id,
                    priority,
                    slot,
                    flags,
                    headers: payload,
                }
            }
            TYPE_SYN_REPLY => {
                need("SYN_REPLY", 4, &payload)?;
                Frame::SynReply {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    flags,
                    headers: payload,
                }
            }
            TYPE_RST_STREAM => {
                need("RST_STREAM", 8, &payload)?;
                Frame::RstStream {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    status: payload.get_u32(),
                }
            }
            TYPE_SETTINGS => Frame::Settings { flags, payload },
            TYPE_PING => {
                need("PING", 4, &payload)?;
                Frame::Ping {
                    id: payload.get_u32(),
                }
            }
            TYPE_GOAWAY => {
                need("GOAWAY", 8, &payload)?;
                Frame::GoAway {
                    last_good_stream_id: payload.get_u32() & 0x7fff_ffff,
                    status: payload.get_u32(),
                }
            }
            TYPE_HEADERS => {
                need("HEADERS", 4, &payload)?;
                Frame::Headers {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    flags,
                    headers: payload,
                }
            }
            TYPE_WINDOW_UPDATE => {
                need("WINDOW_UPDATE", 8, &payload)?;
                Frame::WindowUpdate {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    delta: payload.get_u32() & 0x7fff_ffff,
                }
            }
            kind => Frame::Unknown {
                kind,
                flags,
                payload,
            },
        })
    }
}

/// Reads one frame; `None` at a clean end of the stream (between frames).
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<Frame>, FrameError> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        let n = r.read(&mut head[got..]).await.map_err(FrameError::Io)?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        got += n;
    }
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    let mut payload = BytesMut::zeroed(len);
    r.read_exact(&mut payload).await.map_err(FrameError::Io)?;
    Frame::parse(head, payload.freeze()).map(Some)
}

fn check_len(len: usize) -> Result<(), FrameError> {
    if len > MAX_LENGTH {
        return Err(FrameError::TooLarge(len));
    }
    Ok(())
}

fn control_head(out: &mut BytesMut, kind: u16, flags: u8, len: usize) -> Result<(), FrameError> {
    check_len(len)?;
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(((flags as u32) << 24) | len as u32);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(frame: Frame) {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf).unwrap();
        let mut r = &buf[..];
        let back = read_frame(&mut r).await.unwrap().unwrap();
        assert_eq!(back, frame);
        assert!(r.is_empty(), "{frame:?} left {} bytes", r.len());
    }

    #[tokio::test]
    async fn every_frame_type_round_trips() {
        let block = Bytes::from_static(b"\x78\xbb compressed");
        for frame in [
            Frame::SynStream {
                stream_id: 7,
                assoc_id: 0,
                priority: 5,
                slot: 0,
                flags: FLAG_FIN,
                headers: block.clone(),
            },
            Frame::SynReply {
                stream_id: 7,
                flags: 0,
                headers: block.clone(),
            },
            Frame::RstStream {
                stream_id: 9,
                status: RST_CANCEL,
            },
            Frame::Settings {
                flags: 1,
                payload: Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 7, 0, 1, 0, 0]),
            },
            Frame::Ping { id: 0xdead_beef },
            Frame::GoAway {
                last_good_stream_id: 11,
                status: 0,
            },
            Frame::Headers {
                stream_id: 3,
                flags: 0,
                headers: block.clone(),
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 65536,
            },
            Frame::Data {
                stream_id: 5,
                flags: 0,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                data: Bytes::new(),
            },
            Frame::Unknown {
                kind: 10,
                flags: 0,
                payload: Bytes::from_static(b"x"),
            },
        ] {
            round_trip(frame).await;
        }
    }

    #[tokio::test]
    async fn a_data_frame_of_the_largest_length_round_trips() {
        let data = Bytes::from((0..MAX_LENGTH).map(|i| i as u8).collect::<Vec<_>>());
        round_trip(Frame::Data {
            stream_id: 1,
            flags: 0,
            data,
        })
        .await;
        let too_big = Frame::Data {
            stream_id: 1,
            flags: 0,
            data: Bytes::from(vec![0; MAX_LENGTH + 1]),
        };
        assert!(matches!(
            too_big.encode(&mut BytesMut::new()),
            Err(FrameError::TooLarge(_))
        ));
    }

    #[tokio::test]
    async fn wire_layout_matches_the_draft() {
        let mut buf = BytesMut::new();
        Frame::Ping { id: 1 }.encode(&mut buf).unwrap();
        assert_eq!(&buf[..], &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]);
        buf.clear();
        Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: Bytes::from_static(b"ab"),
        }
        .encode(&mut buf)
        .unwrap();
        assert_eq!(&buf[..], &[0, 0, 0, 3, 1, 0, 0, 2, b'a', b'b']);
    }

    #[tokio::test]
    async fn other_versions_and_truncated_frames_are_errors() {
        let mut r: &[u8] = &[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
        assert!(matches!(
            read_frame(&mut r).await,
            Err(FrameError::Version(2))
        ));
        let mut r: &[u8] = &[0x80, 3, 0, 6, 0, 0, 0, 2, 0, 0];
        assert!(matches!(
            read_frame(&mut r).await,
            Err(FrameError::TooShort { .. })
        ));
        let mut r: &[u8] = &[0, 0, 0, 1, 0];
        assert!(matches!(read_frame(&mut r).await, Err(FrameError::Io(_))));
        let mut r: &[u8] = &[];
        assert!(read_frame(&mut r).await.unwrap().is_none());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
            prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
        }

        /// Frames as the wire can carry them: 31-bit ids and deltas, 3-bit priorities,
        /// control types SPDY/3.1 leaves undefined as Unknown.
        fn frame() -> impl Strategy<Value = Frame> {
            let id = 0u32..=0x7fff_ffff;
            prop_oneof![
                (
                    id.clone(),
                    id.clone(),
                    0u8..8,
                    any::<u8>(),
                    any::<u8>(),
                    bytes(40)
                )
                    .prop_map(
                        |(stream_id, assoc_id, priority, slot, flags, headers)| Frame::SynStream {
                            stream_id,
                            assoc_id,
                            priority,
                            slot,
                            flags,
                            headers,
                        }
                    ),
                (id.clone(), any::<u8>(), bytes(40)).prop_map(|(stream_id, flags, headers)| {
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                }),
                (id.clone(), any::<u32>())
                    .prop_map(|(stream_id, status)| Frame::RstStream { stream_id, status }),
                (any::<u8>(), bytes(40))
                    .prop_map(|(flags, payload)| Frame::Settings { flags, payload }),
                any::<u32>().prop_map(|id| Frame::Ping { id }),
                (id.clone(), any::<u32>()).prop_map(|(last_good_stream_id, status)| {
                    Frame::GoAway {
                        last_good_stream_id,
                        status,
                    }
                }),
                (id.clone(), any::<u8>(), bytes(40)).prop_map(|(stream_id, flags, headers)| {
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }),
                (id.clone(), id.clone())
                    .prop_map(|(stream_id, delta)| Frame::WindowUpdate { stream_id, delta }),
                (id, any::<u8>(), bytes(100)).prop_map(|(stream_id, flags, data)| Frame::Data {
                    stream_id,
                    flags,
                    data
                }),
                (
                    any::<u16>()
                        .prop_filter("undefined types", |k| !(1..=9).contains(k) || *k == 5),
                    any::<u8>(),
                    bytes(40)
                )
                    .prop_map(|(kind, flags, payload)| Frame::Unknown {
                        kind,
                        flags,
                        payload
                    }),
            ]
        }

        fn read_all(mut wire: &[u8]) -> Result<Vec<Frame>, FrameError> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut frames = Vec::new();
                while let Some(f) = read_frame(&mut wire).await? {
                    frames.push(f);
                }
                Ok(frames)
            })
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(512))]

            /// Frames written back to back read back as themselves, in order.
            #[test]
            fn frames_round_trip(frames in prop::collection::vec(frame(), 1..6)) {
                let mut wire = BytesMut::new();
                for f in &frames {
                    f.encode(&mut wire).unwrap();
                }
                prop_assert_eq!(read_all(&wire).unwrap(), frames);
            }

            /// Any bytes from a client are frames or an error, never a panic; a frame
            /// that parses is written back as the same bytes, less what the wire ignores.
            #[test]
            fn any_bytes_read_as_frames_or_an_error(head in any::<[u8; 8]>(), payload in bytes(64)) {
                if let Ok(f) = Frame::parse(head, payload) {
                    let mut wire = BytesMut::new();
                    f.encode(&mut wire).unwrap();
                    prop_assert_eq!(Frame::parse(wire[..8].try_into().unwrap(), wire.split_off(8).freeze()).unwrap(), f);
                }
            }

            #[test]
            fn any_stream_reads_as_frames_or_an_error(wire in prop::collection::vec(any::<u8>(), 0..200)) {
                let _ = read_all(&wire);
            }
        }
    }
}
