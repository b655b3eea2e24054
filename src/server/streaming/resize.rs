//! The resize stream (SPDY) or channel (WebSocket): a stream of JSON objects (`{"Width":120,"Height":40}`, Go's
//! `json.Encoder`), not necessarily one per message. Go decodes the names
//! case-insensitively, so the fields are matched here by hand rather than by serde's
//! exact names.

use serde_json::Value;

use crate::runtime::stdio::TermSize;

#[derive(Debug, thiserror::Error)]
pub(super) enum ResizeError {
    #[error("invalid resize JSON")]
    Json(#[source] serde_json::Error),
    #[error("terminal size {0} is not an object with uint16 Width and Height")]
    Shape(Value),
}

/// Turns the bytes of the resize channel, as they arrive, into sizes.
#[derive(Debug, Default)]
pub(super) struct ResizeDecoder {
    pending: Vec<u8>,
}

impl ResizeDecoder {
    /// The sizes completed by `bytes`, in order. After an error the channel is unusable
    /// (upstream stops reading it).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<TermSize>, ResizeError> {
        self.pending.extend_from_slice(bytes);
        let mut values = serde_json::Deserializer::from_slice(&self.pending).into_iter::<Value>();
        let mut sizes = Vec::new();
        let mut used = 0;
        loop {
            match values.next() {
                None => {
                    used = self.pending.len();
                    break;
                }
                Some(Ok(v)) => {
                    used = values.byte_offset();
                    sizes.push(term_size(v)?);
                }
                // The rest of a value is still to come.
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => return Err(ResizeError::Json(e)),
            }
        }
        self.pending.drain(..used);
        Ok(sizes)
    }
}

fn term_size(v: Value) -> Result<TermSize, ResizeError> {
    let Value::Object(fields) = &v else {
        return Err(ResizeError::Shape(v));
    };
    // Go prefers the exact name, then any case-insensitive match, and leaves a missing field
    // zero; `None` is a value that is no uint16.
    let field = |name: &str| {
        let found = fields.get(name).or_else(|| {
            fields
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        });
        match found {
            None => Some(0),
            Some(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        }
    };
    match (field("Width"), field("Height")) {
        (Some(width), Some(height)) => Ok(TermSize { width, height }),
        _ => Err(ResizeError::Shape(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_arrive_in_order_whatever_the_message_boundaries() {
        let mut d = ResizeDecoder::default();
        let sizes = d
            .push(b"{\"Width\":120,\"Height\":40}\n{\"width\":80,")
            .unwrap();
        assert_eq!(
            sizes,
            vec![TermSize {
                width: 120,
                height: 40
            }]
        );
        let sizes = d.push(b"\"HEIGHT\":24}\n").unwrap();
        assert_eq!(
            sizes,
            vec![TermSize {
                width: 80,
                height: 24
            }]
        );
        assert!(d.push(b"").unwrap().is_empty());
    }

    #[test]
    fn garbage_and_out_of_range_sizes_are_errors() {
        assert!(ResizeDecoder::default().push(b"nope").is_err());
        assert!(ResizeDecoder::default()
            .push(b"{\"Width\":70000,\"Height\":1}")
            .is_err());
        assert!(ResizeDecoder::default().push(b"[1,2]").is_err());
    }

    #[test]
    fn resize_events_match_names_case_insensitively() {
        let v = serde_json::json!({"Width": 120, "Height": 40});
        assert_eq!(
            term_size(v).unwrap(),
            TermSize {
                width: 120,
                height: 40
            }
        );
        let v = serde_json::json!({"width": 80, "HEIGHT": 24});
        assert_eq!(
            term_size(v).unwrap(),
            TermSize {
                width: 80,
                height: 24
            }
        );
        assert!(term_size(serde_json::json!({"Width": 70000})).is_err());
        assert!(term_size(serde_json::json!(3)).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            /// Sizes written as Go's encoder writes them arrive whole and in order however
            /// the channel cuts the bytes.
            #[test]
            fn sizes_arrive_whatever_the_cuts(
                sizes in prop::collection::vec((any::<u16>(), any::<u16>()), 0..5),
                cuts in prop::collection::vec(1usize..12, 0..30),
            ) {
                let mut wire = Vec::new();
                for (w, h) in &sizes {
                    wire.extend_from_slice(format!("{{\"Width\":{w},\"Height\":{h}}}\n").as_bytes());
                }
                let mut decoder = ResizeDecoder::default();
                let mut got = Vec::new();
                let mut rest = &wire[..];
                for cut in cuts.into_iter().chain(std::iter::once(usize::MAX)) {
                    let (now, later) = rest.split_at(cut.min(rest.len()));
                    got.extend(decoder.push(now).unwrap().into_iter().map(|t| (t.width, t.height)));
                    rest = later;
                }
                prop_assert_eq!(got, sizes);
            }

            /// Any bytes are sizes or an error.
            #[test]
            fn any_bytes_are_sizes_or_an_error(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..5)) {
                let mut decoder = ResizeDecoder::default();
                for c in chunks {
                    if decoder.push(&c).is_err() {
                        break;
                    }
                }
            }
        }
    }
}
