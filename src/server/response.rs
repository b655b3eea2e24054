//! The pieces every handler answers with: the boxed body type, plain-text and byte bodies,
//! and Go's HTML escaping of the text a redirect or listing shows. A leaf: it imports nothing
//! of the server, so the router, the mux and the handlers all stand on it.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};

pub type Body = BoxBody<Bytes, Infallible>;

pub(crate) fn full(code: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("Content-Type", content_type)
        .body(Full::new(body.into()).boxed())
        .expect("static response")
}

pub(crate) fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    full(code, "text/plain; charset=utf-8", body)
}

/// A body of bytes (no content type set).
pub(crate) fn bytes_body(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

/// Go's htmlReplacer.
pub(crate) fn html_escape_into(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&#34;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            b => out.push(b),
        }
    }
}
