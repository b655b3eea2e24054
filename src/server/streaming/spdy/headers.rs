//! SPDY/3 header blocks (draft 3.1 §2.6.10): a count, then length-prefixed name/value pairs,
//! compressed with zlib primed with the SPDY dictionary. Each direction of a connection has
//! one compression stream that runs across all its frames (every block ends with a sync
//! flush), so the encoder and decoder here live as long as the connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::DICTIONARY;

/// The most a client's header block may inflate to: Kubernetes streams carry three short
/// headers, and a deflate bomb must not take the node's memory.
const MAX_BLOCK: usize = 1024 * 1024;

/// The name/value pairs of one header block. Names are lowercase on the wire; a value with
/// several entries joins them with NUL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HeaderBlock(pub(crate) Vec<(String, String)>);

impl HeaderBlock {
    /// The first value of `name` (names compared case-insensitively, as Go's `Header.Get`
    /// after the framer lowercases them).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.split('\0').next().unwrap_or(""))
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderError {
    #[error("decompressing a header block: {0}")]
    Inflate(#[source] flate2::DecompressError),
    #[error("compressing a header block: {0}")]
    Deflate(#[source] flate2::CompressError),
    #[error("malformed header block: {0}")]
    Malformed(&'static str),
}

/// Compresses the header blocks of one direction of a connection.
pub(crate) struct HeaderEncoder {
    z: Compress,
}

impl HeaderEncoder {
    pub(crate) fn new() -> Result<Self, HeaderError> {
        // Best compression, as spdystream's framer writes.
        let mut z = Compress::new(Compression::best(), true);
        z.set_dictionary(DICTIONARY).map_err(HeaderError::Deflate)?;
        Ok(HeaderEncoder { z })
    }

    pub(crate) fn encode(&mut self, block: &HeaderBlock) -> Result<Bytes, HeaderError> {
        let mut raw = BytesMut::new();
        raw.put_u32(block.0.len() as u32);
        for (name, value) in &block.0 {
            let name = name.to_ascii_lowercase();
            raw.put_u32(name.len() as u32);
            raw.put_slice(name.as_bytes());
            raw.put_u32(value.len() as u32);
            raw.put_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut input = &raw[..];
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.z.total_in();
            self.z
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(HeaderError::Deflate)?;
            input = &input[(self.z.total_in() - before) as usize..];
            // A sync flush is complete once all input is taken and zlib left spare room.
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        Ok(Bytes::from(out))
    }
}

/// Decompresses the header blocks of one direction of a connection.
pub(crate) struct HeaderDecoder {
    z: Decompress,
}

impl HeaderDecoder {
    pub(crate) fn new() -> Self {
        HeaderDecoder {
            z: Decompress::new(true),
        }
    }

    pub(crate) fn decode(&mut self, compressed: &[u8]) -> Result<HeaderBlock, HeaderError> {
        let raw = self.inflate(compressed)?;
        parse_block(raw)
    }

    fn inflate(&mut self, mut input: &[u8]) -> Result<Bytes, HeaderError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        loop {
            if out.len() > MAX_BLOCK {
                return Err(HeaderError::Malformed("decompressed block too large"));
            }
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(256));
            }
            let (in_before, out_before) = (self.z.total_in(), self.z.total_out());
            let result = self
                .z
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            input = &input[(self.z.total_in() - in_before) as usize..];
            let progress = self.z.total_in() != in_before || self.z.total_out() != out_before;
            match result {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {
                    if input.is_empty() && out.len() < out.capacity() {
                        break;
                    }
                    if !progress {
                        return Err(HeaderError::Malformed("header block does not inflate"));
                    }
                }
                // The first block asks for the dictionary (its FDICT header).
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z
                        .set_dictionary(DICTIONARY)
                        .map_err(HeaderError::Inflate)?;
                }
                Err(e) => return Err(HeaderError::Inflate(e)),
            }
        }
        Ok(Bytes::from(out))
    }
}

fn parse_block(mut raw: Bytes) -> Result<HeaderBlock, HeaderError> {
    fn take(raw: &mut Bytes) -> Result<String, HeaderError> {
        if raw.remaining() < 4 {
            return Err(HeaderError::Malformed("truncated length"));
        }
        let len = raw.get_u32() as usize;
        if raw.remaining() < len {
            return Err(HeaderError::Malformed("truncated string"));
        }
        String::from_utf8(raw.split_to(len).to_vec())
            .map_err(|_| HeaderError::Malformed("a name or value is not UTF-8"))
    }
    if raw.remaining() < 4 {
        return Err(HeaderError::Malformed("no pair count"));
    }
    let count = raw.get_u32() as usize;
    // Each pair takes at least 8 bytes: refuse counts the data cannot hold before allocating.
    if count > raw.remaining() / 8 {
        return Err(HeaderError::Malformed("pair count exceeds the block"));
    }
    let mut pairs = Vec::with_capacity(count);
    for _ in 0..count {
        let name = take(&mut raw)?;
        let value = take(&mut raw)?;
        pairs.push((name, value));
    }
    Ok(HeaderBlock(pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::streaming::spdy::frame::{read_frame, Frame};

    fn block(pairs: &[(&str, &str)]) -> HeaderBlock {
        HeaderBlock(
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// Header blocks of the frames in a fixture, decoded through one decoder in wire order.
    async fn fixture_blocks(bytes: &[u8]) -> (Vec<(u32, HeaderBlock)>, Vec<Frame>) {
        let mut decoder = HeaderDecoder::new();
        let mut r = bytes;
        let mut blocks = Vec::new();
        let mut frames = Vec::new();
        while let Some(frame) = read_frame(&mut r).await.unwrap() {
            if let Frame::SynStream {
                stream_id,
                ref headers,
                ..
            } = frame
            {
                blocks.push((stream_id, decoder.decode(headers).unwrap()));
            }
            frames.push(frame);
        }
        (blocks, frames)
    }

    #[tokio::test]
    async fn blocks_from_a_go_exec_client_decode() {
        // hack/spdy-fixtures: moby/spdystream's framer, as client-go writes an exec -it.
        let (blocks, frames) = fixture_blocks(include_bytes!("testdata/go_exec_client.bin")).await;
        let types: Vec<_> = blocks
            .iter()
            .map(|(id, b)| (*id, b.get("streamtype").unwrap().to_string()))
            .collect();
        assert_eq!(
            types,
            [
                (1, "error".to_string()),
                (3, "stdin".to_string()),
                (5, "stdout".to_string()),
                (7, "resize".to_string())
            ]
        );
        assert!(frames.contains(&Frame::Ping { id: 1 }));
        assert!(frames.contains(&Frame::Data {
            stream_id: 3,
            flags: crate::server::streaming::spdy::frame::FLAG_FIN,
            data: Bytes::new()
        }));
    }

    #[tokio::test]
    async fn blocks_from_a_go_port_forward_client_decode() {
        let (blocks, _) =
            fixture_blocks(include_bytes!("testdata/go_portforward_client.bin")).await;
        let seen: Vec<_> = blocks
            .iter()
            .map(|(_, b)| {
                (
                    b.get("streamtype").unwrap().to_string(),
                    b.get("port").unwrap().to_string(),
                    b.get("requestid").unwrap().to_string(),
                )
            })
            .collect();
        let want: Vec<_> = [
            ("error", "8080", "0"),
            ("data", "8080", "0"),
            ("error", "9999", "1"),
            ("data", "9999", "1"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn our_blocks_decode_with_the_dictionary_across_frames() {
        let mut enc = HeaderEncoder::new().unwrap();
        let mut dec = HeaderDecoder::new();
        let blocks = [
            HeaderBlock::default(),
            block(&[("streamtype", "stdout")]),
            block(&[
                ("port", "8080"),
                ("requestid", "12"),
                ("streamtype", "data"),
            ]),
            HeaderBlock::default(),
        ];
        for b in &blocks {
            let wire = enc.encode(b).unwrap();
            assert_eq!(&dec.decode(&wire).unwrap(), b);
        }
    }

    #[test]
    fn the_first_block_names_the_spdy_dictionary() {
        // zlib FDICT: the header's flag bit and the dictionary's Adler-32, which is how a Go
        // peer's zlib.NewReaderDict knows to use it.
        let wire = HeaderEncoder::new()
            .unwrap()
            .encode(&HeaderBlock::default())
            .unwrap();
        assert_eq!(wire[0] & 0x0f, 8, "deflate");
        assert_ne!(wire[1] & 0x20, 0, "FDICT set");
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for &byte in DICTIONARY.iter() {
            a = (a + byte as u32) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(&wire[2..6], &((b << 16) | a).to_be_bytes());
    }

    #[test]
    fn names_are_lowercased_and_multi_values_read_first() {
        let mut enc = HeaderEncoder::new().unwrap();
        let mut dec = HeaderDecoder::new();
        let wire = enc
            .encode(&block(&[("StreamType", "error\0other")]))
            .unwrap();
        let back = dec.decode(&wire).unwrap();
        assert_eq!(back.0[0].0, "streamtype");
        assert_eq!(back.get("STREAMTYPE"), Some("error"));
    }

    #[test]
    fn malformed_blocks_are_errors() {
        assert!(matches!(
            parse_block(Bytes::from_static(&[0, 0, 0, 9])),
            Err(HeaderError::Malformed(_))
        ));
        assert!(matches!(
            parse_block(Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0])),
            Err(HeaderError::Malformed(_))
        ));
        assert!(HeaderDecoder::new().decode(b"not zlib").is_err());
        // A block inflating past the limit is refused, not buffered.
        let huge = HeaderBlock(vec![("x".into(), "a".repeat(2 * MAX_BLOCK))]);
        let wire = HeaderEncoder::new().unwrap().encode(&huge).unwrap();
        assert!(wire.len() < MAX_BLOCK / 100, "it compresses well");
        assert!(matches!(
            HeaderDecoder::new().decode(&wire),
            Err(HeaderError::Malformed(_))
        ));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn header_block() -> impl Strategy<Value = HeaderBlock> {
            let pair = ("[a-zA-Z0-9:-]{0,12}", ".{0,20}");
            prop::collection::vec(pair, 0..6).prop_map(HeaderBlock)
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            /// Blocks compressed one after another on one stream decode, in order, on one
            /// stream, names lowercased.
            #[test]
            fn blocks_round_trip_across_a_connection(blocks in prop::collection::vec(header_block(), 1..4)) {
                let mut encoder = HeaderEncoder::new().unwrap();
                let mut decoder = HeaderDecoder::new();
                for block in blocks {
                    let wire = encoder.encode(&block).unwrap();
                    let want = HeaderBlock(
                        block.0.iter().map(|(n, v)| (n.to_ascii_lowercase(), v.clone())).collect(),
                    );
                    prop_assert_eq!(decoder.decode(&wire).unwrap(), want);
                }
            }

            /// Whatever a client sends as a header block, first or after a good one, is a
            /// block or an error.
            #[test]
            fn any_bytes_decode_or_err(
                good in header_block(),
                junk in prop::collection::vec(any::<u8>(), 0..200),
                first in any::<bool>(),
            ) {
                let mut decoder = HeaderDecoder::new();
                if !first {
                    let wire = HeaderEncoder::new().unwrap().encode(&good).unwrap();
                    decoder.decode(&wire).unwrap();
                }
                let _ = decoder.decode(&junk);
                let _ = parse_block(Bytes::from(junk));
            }
        }
    }
}
