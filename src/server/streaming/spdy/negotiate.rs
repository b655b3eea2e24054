//! The HTTP side of an SPDY upgrade: the protocol handshake (apimachinery's
//! `httpstream.Handshake`, then the SPDY upgrader's header check) and the 101 answer.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::{self, HeaderMap, HeaderValue, StatusCode};

use crate::server::response::{self, Body};

pub(crate) const HEADER_PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
pub(crate) const HEADER_ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";
const SPDY_31: &str = "SPDY/3.1";

/// True when the request asks for an SPDY/3.1 upgrade (Upgrade header, case-insensitive).
pub(crate) fn is_spdy_upgrade(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("spdy/3.1"))
}

/// Validates Connection/Upgrade and X-Stream-Protocol-Version (repeated headers and comma
/// lists), picks the first client protocol we support. Err is the full refusal response.
#[allow(clippy::result_large_err)]
pub(crate) fn negotiate(
    headers: &http::HeaderMap,
    supported: &[&'static str],
) -> Result<&'static str, hyper::Response<Body>> {
    // Upstream shakes hands on the protocol first and checks the upgrade headers after.
    let client: Vec<String> = headers
        .get_all(HEADER_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if client.is_empty() {
        return Err(response::text(
            StatusCode::BAD_REQUEST,
            format!("unable to upgrade: {HEADER_PROTOCOL_VERSION} is required"),
        ));
    }
    let Some(chosen) = client
        .iter()
        .find_map(|c| supported.iter().find(|s| **s == c.as_str()).copied())
    else {
        let mut refusal = response::text(
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {}, server accepts {}",
                go_list(client.iter().map(String::as_str)),
                go_list(supported.iter().copied()),
            ),
        );
        for s in supported {
            refusal.headers_mut().append(
                HEADER_ACCEPTED_PROTOCOL_VERSIONS,
                HeaderValue::from_static(s),
            );
        }
        return Err(refusal);
    };
    let connection = first_lower(headers, http::header::CONNECTION);
    let upgrade = first_lower(headers, http::header::UPGRADE);
    if !connection.contains("upgrade") || !upgrade.contains("spdy/3.1") {
        return Err(response::text(
            StatusCode::BAD_REQUEST,
            format!(
                "unable to upgrade: missing upgrade headers in request: {}",
                go_header_dump(headers)
            ),
        ));
    }
    Ok(chosen)
}

/// The 101 Switching Protocols response for a negotiated protocol.
pub(crate) fn switching_protocols(protocol: &'static str) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, SPDY_31)
        .header(HEADER_PROTOCOL_VERSION, protocol)
        .body(Full::new(Bytes::new()).boxed())
        .expect("static response")
}

/// Go's `Header.Get`: the first value, here lowercased for the containment checks.
fn first_lower(headers: &HeaderMap, name: http::header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// A list as Go's `%v` prints a `[]string`: `[a b]`.
fn go_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(" "))
}

/// The request headers roughly as Go's `%#v` prints an `http.Header` (sorted canonical keys),
/// which is what upstream's message shows.
fn go_header_dump(headers: &HeaderMap) -> String {
    let mut keys: Vec<String> = headers.keys().map(|k| canonical(k.as_str())).collect();
    keys.sort();
    keys.dedup();
    let entries: Vec<String> = keys
        .iter()
        .map(|k| {
            let values: Vec<String> = headers
                .get_all(k.as_str())
                .iter()
                .map(|v| format!("{:?}", String::from_utf8_lossy(v.as_bytes())))
                .collect();
            format!("{k:?}:[]string{{{}}}", values.join(", "))
        })
        .collect();
    format!("http.Header{{{}}}", entries.join(", "))
}

/// Go's canonical MIME header key: `x-stream-protocol-version` → `X-Stream-Protocol-Version`.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::streaming::spdy::{PORTFORWARD_PROTOCOLS, REMOTECOMMAND_PROTOCOLS};

    fn request(protocols: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("Upgrade"));
        h.insert("upgrade", HeaderValue::from_static("SPDY/3.1"));
        for p in protocols {
            h.append(HEADER_PROTOCOL_VERSION, HeaderValue::from_str(p).unwrap());
        }
        h
    }

    async fn body(resp: hyper::Response<Body>) -> String {
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn kubectls_offer_gets_v4() {
        let h = request(&[
            "v5.channel.k8s.io",
            "v4.channel.k8s.io",
            "v3.channel.k8s.io",
            "v2.channel.k8s.io",
            "channel.k8s.io",
        ]);
        assert!(is_spdy_upgrade(&h));
        assert_eq!(
            negotiate(&h, REMOTECOMMAND_PROTOCOLS).unwrap(),
            "v4.channel.k8s.io"
        );
    }

    #[test]
    fn the_clients_order_wins_and_comma_lists_count() {
        let h = request(&["v2.channel.k8s.io, v4.channel.k8s.io"]);
        assert_eq!(
            negotiate(&h, REMOTECOMMAND_PROTOCOLS).unwrap(),
            "v2.channel.k8s.io"
        );
        let h = request(&["channel.k8s.io", "v4.channel.k8s.io"]);
        assert_eq!(
            negotiate(&h, REMOTECOMMAND_PROTOCOLS).unwrap(),
            "channel.k8s.io"
        );
        let h = request(&["portforward.k8s.io"]);
        assert_eq!(
            negotiate(&h, PORTFORWARD_PROTOCOLS).unwrap(),
            "portforward.k8s.io"
        );
    }

    #[tokio::test]
    async fn no_common_protocol_is_403_with_the_accepted_list() {
        let h = request(&["v5.channel.k8s.io", "v9.channel.k8s.io"]);
        let resp = negotiate(&h, REMOTECOMMAND_PROTOCOLS).unwrap_err();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let accepted: Vec<_> = resp
            .headers()
            .get_all(HEADER_ACCEPTED_PROTOCOL_VERSIONS)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        assert_eq!(accepted, REMOTECOMMAND_PROTOCOLS);
        assert_eq!(
            body(resp).await,
            "unable to upgrade: unable to negotiate protocol: client supports \
             [v5.channel.k8s.io v9.channel.k8s.io], server accepts \
             [v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]"
        );
    }

    #[tokio::test]
    async fn a_missing_protocol_header_is_400() {
        let resp = negotiate(&request(&[]), REMOTECOMMAND_PROTOCOLS).unwrap_err();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body(resp).await,
            "unable to upgrade: X-Stream-Protocol-Version is required"
        );
    }

    #[tokio::test]
    async fn missing_upgrade_headers_are_400() {
        let mut h = request(&["portforward.k8s.io"]);
        h.remove("connection");
        let resp = negotiate(&h, PORTFORWARD_PROTOCOLS).unwrap_err();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body(resp).await,
            "unable to upgrade: missing upgrade headers in request: http.Header{\
             \"Upgrade\":[]string{\"SPDY/3.1\"}, \
             \"X-Stream-Protocol-Version\":[]string{\"portforward.k8s.io\"}}"
        );
        let mut h = request(&["portforward.k8s.io"]);
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        assert!(!is_spdy_upgrade(&h));
        assert!(negotiate(&h, PORTFORWARD_PROTOCOLS).is_err());
    }

    #[test]
    fn the_101_names_the_protocol() {
        let resp = switching_protocols("v4.channel.k8s.io");
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(resp.headers()["upgrade"], "SPDY/3.1");
        assert_eq!(resp.headers()["connection"], "Upgrade");
        assert_eq!(resp.headers()[HEADER_PROTOCOL_VERSION], "v4.channel.k8s.io");
        let mut lower = HeaderMap::new();
        lower.insert("upgrade", HeaderValue::from_static("spdy/3.1"));
        assert!(is_spdy_upgrade(&lower));
    }
}
