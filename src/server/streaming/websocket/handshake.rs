//! The WebSocket opening handshake (RFC 6455 §4.2) as upstream's wsstream performs it with
//! golang.org/x/net/websocket: the checks and their answers, the subprotocol picked in the
//! client's order, and the 101 response. The connection itself is hyper's upgrade.

use http_body_util::{BodyExt, Empty};
use hyper::header::{
    HeaderMap, HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::{Response, StatusCode};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tracing::debug;

use crate::server::response::{self, Body};

/// The only WebSocket version there is (RFC 6455).
const WEBSOCKET_VERSION: &str = "13";

/// Whether `name` holds `token` in any of its comma-separated values (case-insensitive).
fn has_token(headers: &HeaderMap, name: &hyper::header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// True when the request is a WebSocket upgrade: `Upgrade: websocket` and `Connection`
/// naming `upgrade`, upstream's `IsWebSocketRequest`. A missing or bad `Sec-WebSocket-Key`
/// still counts, so that [`accept`] answers it with the 400 upstream gives.
pub(crate) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    has_token(headers, &UPGRADE, "websocket") && has_token(headers, &CONNECTION, "upgrade")
}

/// The subprotocols the client offered, in its order (one or more headers, each a
/// comma-separated list).
fn offered(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// Picks the subprotocol (the first offered that `supported` lists; `""` when the client
/// offered none, if `""` is supported) and builds the 101 response. `Err` is the refusal:
/// 400 with x/net/websocket's text for a bad handshake, 403 with an empty body when nothing
/// offered is supported (what x/net answers when wsstream's protocol check fails).
// The refusal is a whole response on purpose: the router returns it as it is, once per
// request, so its size costs nothing worth a box.
#[allow(clippy::result_large_err)]
pub(crate) fn accept(
    headers: &HeaderMap,
    supported: &[&'static str],
) -> Result<(Response<Body>, &'static str), Response<Body>> {
    if !is_websocket_upgrade(headers) {
        return Err(response::text(
            StatusCode::BAD_REQUEST,
            "not websocket protocol",
        ));
    }
    let key = headers
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes())
        .filter(|k| !k.is_empty());
    let Some(key) = key else {
        return Err(response::text(
            StatusCode::BAD_REQUEST,
            "mismatch challenge/response",
        ));
    };
    let version_ok = headers
        .get(SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == WEBSOCKET_VERSION.as_bytes());
    if !version_ok {
        let mut refusal = response::text(StatusCode::BAD_REQUEST, "bad protocol version");
        refusal.headers_mut().insert(
            SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static(WEBSOCKET_VERSION),
        );
        return Err(refusal);
    }

    let offered = offered(headers);
    let wanted: &[&str] = if offered.is_empty() { &[""] } else { &offered };
    let chosen = wanted
        .iter()
        .find_map(|w| supported.iter().copied().find(|s| s == w));
    let Some(protocol) = chosen else {
        debug!(
            offered = ?offered,
            supported = ?supported,
            "requested websocket subprotocol(s) are not supported"
        );
        return Err(Response::builder()
            .status(StatusCode::FORBIDDEN)
            .body(Empty::new().boxed())
            .expect("static response"));
    };

    let mut response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(UPGRADE, "websocket")
        .header(CONNECTION, "Upgrade")
        .header(SEC_WEBSOCKET_ACCEPT, derive_accept_key(key));
    // A client that offered no subprotocol must not get the header back (RFC 6455 §4.1;
    // tungstenite's client fails the handshake on it).
    if !protocol.is_empty() {
        response = response.header(SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    let response = response
        .body(Empty::new().boxed())
        .expect("the accept key and protocol are valid header values");
    Ok((response, protocol))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::streaming::websocket::{PORTFORWARD_PROTOCOLS, REMOTECOMMAND_PROTOCOLS};

    /// RFC 6455 §1.3's example request.
    fn request(protocols: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        h.insert(
            SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        for p in protocols {
            h.append(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_str(p).unwrap());
        }
        h
    }

    fn header(r: &Response<Body>, name: hyper::header::HeaderName) -> Option<&str> {
        r.headers().get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        let (resp, protocol) = accept(&request(&[]), REMOTECOMMAND_PROTOCOLS).unwrap();
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            header(&resp, SEC_WEBSOCKET_ACCEPT),
            Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        );
        assert_eq!(header(&resp, UPGRADE), Some("websocket"));
        assert_eq!(header(&resp, CONNECTION), Some("Upgrade"));
        // No subprotocol offered: binary v1, and no protocol header in the answer.
        assert_eq!(protocol, "");
        assert_eq!(header(&resp, SEC_WEBSOCKET_PROTOCOL), None);
    }

    #[test]
    fn the_first_offered_protocol_we_support_wins() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["v5.channel.k8s.io, v4.channel.k8s.io"],
                "v5.channel.k8s.io",
            ),
            (
                &["v4.channel.k8s.io,v5.channel.k8s.io"],
                "v4.channel.k8s.io",
            ),
            (&["v4.base64.channel.k8s.io"], "v4.base64.channel.k8s.io"),
            (&["channel.k8s.io"], "channel.k8s.io"),
            (&["base64.channel.k8s.io"], "base64.channel.k8s.io"),
            // Unknown ones are skipped, also across header lines.
            (
                &["v6.channel.k8s.io", "base64.channel.k8s.io"],
                "base64.channel.k8s.io",
            ),
        ];
        for (offered, want) in cases {
            let (resp, got) = accept(&request(offered), REMOTECOMMAND_PROTOCOLS).unwrap();
            assert_eq!(got, *want, "offered {offered:?}");
            assert_eq!(header(&resp, SEC_WEBSOCKET_PROTOCOL), Some(*want));
        }
        // Port-forward has no v5 and no base64 v1.
        let (_, got) = accept(
            &request(&["v5.channel.k8s.io, v4.base64.channel.k8s.io"]),
            PORTFORWARD_PROTOCOLS,
        )
        .unwrap();
        assert_eq!(got, "v4.base64.channel.k8s.io");
        let (_, got) = accept(&request(&[]), PORTFORWARD_PROTOCOLS).unwrap();
        assert_eq!(got, "");
    }

    #[test]
    fn nothing_supported_is_forbidden() {
        let refusal =
            accept(&request(&["base64.channel.k8s.io"]), PORTFORWARD_PROTOCOLS).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn bad_handshakes_are_400() {
        let mut no_key = request(&[]);
        no_key.remove(SEC_WEBSOCKET_KEY);
        let r = accept(&no_key, REMOTECOMMAND_PROTOCOLS).unwrap_err();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);

        let mut old = request(&[]);
        old.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
        let r = accept(&old, REMOTECOMMAND_PROTOCOLS).unwrap_err();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(header(&r, SEC_WEBSOCKET_VERSION), Some("13"));

        let mut spdy = request(&[]);
        spdy.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(!is_websocket_upgrade(&spdy));
        let r = accept(&spdy, REMOTECOMMAND_PROTOCOLS).unwrap_err();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);

        let mut no_connection = request(&[]);
        no_connection.remove(CONNECTION);
        assert!(!is_websocket_upgrade(&no_connection));
        assert!(is_websocket_upgrade(&request(&[])));
    }
}
