//! Talking to a registry: which host serves an image's API, whether plain HTTP may be tried
//! (loopback registries always, as Docker does; others only when named insecure), the
//! oci-client configuration, and the mapping of its errors to the registry's answer.

use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;

use super::credentials::RegistryCredential;
use super::PullError;

/// Docker Hub's API lives on another host than its image names.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// The registry host of a normalized reference (`docker.io`, `127.0.0.1:5000`).
pub fn registry_host(normalized: &str) -> &str {
    normalized.split('/').next().unwrap_or(normalized)
}

/// The host to send API requests to for an image host.
pub fn api_host(host: &str) -> &str {
    match host {
        "docker.io" | "index.docker.io" => DOCKER_HUB_API,
        other => other,
    }
}

/// The host without its port, IPv6 brackets removed.
pub fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

/// localhost, 127.0.0.0/8 and ::1: registries Docker reaches over plain HTTP unasked.
pub fn is_loopback(host: &str) -> bool {
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost")
        || IpAddr::from_str(name).is_ok_and(|ip| ip.is_loopback())
}

/// True when `host` is named by an insecure-registry entry: `host:port` exactly, a bare
/// host (any port), or a CIDR range holding the host's IP address.
pub fn is_listed_insecure(host: &str, insecure: &[String]) -> bool {
    let host = host.to_ascii_lowercase();
    let name = host_name(&host);
    insecure.iter().any(|entry| {
        let e = entry
            .trim()
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_ascii_lowercase();
        if let Some((net, bits)) = e.split_once('/') {
            return match (
                IpAddr::from_str(net),
                bits.parse::<u8>(),
                IpAddr::from_str(name),
            ) {
                (Ok(net), Ok(bits), Ok(ip)) => in_cidr(ip, net, bits),
                _ => false,
            };
        }
        // A bare host (no port) covers every port of that host.
        e == host || e == name
    })
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// How a registry may be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTPS with verified certificates: every registry not named insecure.
    Https,
    /// HTTPS without certificate checks, then plain HTTP when that fails at the transport
    /// level (Docker's behaviour for insecure and loopback registries).
    HttpsThenHttp,
}

pub fn transport_for(host: &str, insecure: &[String]) -> Transport {
    if is_loopback(host) || is_listed_insecure(host, insecure) {
        Transport::HttpsThenHttp
    } else {
        Transport::Https
    }
}

/// Whether a connection skips the certificate check: only HTTPS to a registry that may be
/// reached insecurely (loopback, or listed in insecureRegistries), Docker's rule. Every
/// other registry's certificate is checked.
pub fn skip_verify(transport: Transport, plain_http: bool) -> bool {
    transport == Transport::HttpsThenHttp && !plain_http
}

/// The oci-client reference for a normalized image name, aimed at the API host.
pub fn oci_reference(normalized: &str) -> Result<Reference, oci_client::ParseError> {
    let mut r = Reference::from_str(normalized)?;
    let api = api_host(r.registry()).to_string();
    if api != r.registry() {
        r.set_mirror_registry(api);
    }
    Ok(r)
}

/// A fresh oci-client for one pull attempt. Fresh on purpose: its auth store and token
/// cache are per client, and one pod's credentials must never serve another pod's pull.
pub fn oci_client(api_host: &str, plain_http: bool, skip_verify: bool) -> oci_client::Client {
    super::install_crypto_provider();
    let protocol = if plain_http {
        ClientProtocol::HttpsExcept(vec![api_host.to_string()])
    } else {
        ClientProtocol::Https
    };
    oci_client::Client::new(ClientConfig {
        protocol,
        accept_invalid_certificates: skip_verify,
        // The platform is chosen by us from the raw index (see `platform`).
        platform_resolver: None,
        connect_timeout: Some(Duration::from_secs(10)),
        // A stalled transfer is an error, a slow one is not.
        read_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    })
}

pub fn registry_auth(cred: Option<&RegistryCredential>) -> RegistryAuth {
    match cred {
        None => RegistryAuth::Anonymous,
        Some(c) => match &c.registry_token {
            Some(t) => RegistryAuth::Bearer(t.clone()),
            None => RegistryAuth::Basic(c.username.clone(), c.password.clone()),
        },
    }
}

/// True for errors that say nothing came back from the server at all (refused, reset,
/// TLS failure, timeout): the cases where an insecure registry is retried over HTTP and
/// that otherwise mean "unreachable".
pub fn is_transport_error(e: &OciDistributionError) -> bool {
    matches!(e, OciDistributionError::RequestError(_))
}

/// The whole `source()` chain, since reqwest's top-level message ("error sending request")
/// hides the useful part (connection refused, certificate, ...).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let msg = c.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = c.source();
    }
    s
}

/// Maps an oci-client error to the registry's answer. `what` names the object asked for
/// (a manifest reference or a blob digest) for the BadDigest case and the detail.
pub fn map_error(image: &str, registry: &str, what: &str, e: OciDistributionError) -> PullError {
    let unauthorized = |detail: String| PullError::Unauthorized {
        image: image.to_string(),
        registry: registry.to_string(),
        detail,
    };
    let not_found = |detail: String| PullError::NotFound {
        image: image.to_string(),
        registry: registry.to_string(),
        detail,
    };
    let other = |detail: String| PullError::Other {
        image: image.to_string(),
        detail: format!("registry {registry}: {detail}"),
    };
    match e {
        OciDistributionError::UnauthorizedError { url } => {
            unauthorized(format!("401 Unauthorized for {url}"))
        }
        OciDistributionError::AuthenticationFailure(reason) => {
            unauthorized(format!("token request refused: {}", reason.trim()))
        }
        OciDistributionError::ImageManifestNotFoundError(m) => not_found(m),
        OciDistributionError::RegistryError { envelope, url } => {
            let text = envelope
                .errors
                .iter()
                .map(|x| format!("{:?}: {}", x.code, x.message))
                .collect::<Vec<_>>()
                .join("; ");
            let detail = format!("{text} ({url})");
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|x| &x.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                unauthorized(detail)
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::ManifestBlobUnknown
                )
            }) {
                not_found(detail)
            } else {
                other(detail)
            }
        }
        OciDistributionError::ServerError { code, url, message } => {
            let detail = format!("HTTP {code} for {url}: {}", message.trim());
            match code {
                401 | 403 => unauthorized(detail),
                404 => not_found(detail),
                _ => other(detail),
            }
        }
        OciDistributionError::DigestError(d) => PullError::BadDigest {
            image: image.to_string(),
            digest: what.to_string(),
            detail: format!("from registry {registry}: {d}"),
        },
        OciDistributionError::RequestError(r) => PullError::Unreachable {
            image: image.to_string(),
            registry: registry.to_string(),
            detail: chain(&r),
        },
        OciDistributionError::IoError(io) => match digest_error_in(&io) {
            Some(d) => PullError::BadDigest {
                image: image.to_string(),
                digest: what.to_string(),
                detail: format!("from registry {registry}: {d}"),
            },
            None => PullError::Unreachable {
                image: image.to_string(),
                registry: registry.to_string(),
                detail: chain(&io),
            },
        },
        other_err => other(format!("{what}: {}", chain(&other_err))),
    }
}

/// oci-client's verifying blob stream reports a digest mismatch as an io::Error wrapping
/// its DigestError.
pub fn digest_error_in(io: &std::io::Error) -> Option<String> {
    io.get_ref()
        .and_then(|inner| inner.downcast_ref::<oci_client::errors::DigestError>())
        .map(|d| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::errors::{OciEnvelope, OciError};

    #[test]
    fn docker_hub_api_host() {
        assert_eq!(api_host("docker.io"), "registry-1.docker.io");
        assert_eq!(api_host("index.docker.io"), "registry-1.docker.io");
        assert_eq!(api_host("quay.io"), "quay.io");
        let r = oci_reference("docker.io/library/busybox:1.36").unwrap();
        assert_eq!(r.resolve_registry(), "registry-1.docker.io");
        assert_eq!(r.repository(), "library/busybox");
        assert_eq!(r.tag(), Some("1.36"));
        let r = oci_reference("127.0.0.1:5000/x/y@sha256:0123456789012345678901234567890123456789012345678901234567890123").unwrap();
        assert_eq!(r.resolve_registry(), "127.0.0.1:5000");
        assert!(r.digest().is_some());
    }

    #[test]
    fn registry_host_of_normalized_names() {
        assert_eq!(registry_host("docker.io/library/busybox:1"), "docker.io");
        assert_eq!(registry_host("[::1]:5000/a:b"), "[::1]:5000");
        assert_eq!(host_name("[::1]:5000"), "::1");
        assert_eq!(host_name("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_name("reg.io"), "reg.io");
    }

    #[test]
    fn loopback_detection() {
        for h in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.3.4.5",
            "[::1]:80",
            "::1",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "10.0.0.1:5000",
            "docker.io",
            "localhost.example.com",
            "[::2]:5000",
            "128.0.0.1",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
        assert_eq!(
            transport_for("127.0.0.1:5000", &[]),
            Transport::HttpsThenHttp
        );
        assert_eq!(transport_for("reg.lan:5000", &[]), Transport::Https);
    }

    #[test]
    fn insecure_list_entries() {
        let list = vec![
            "reg.lan:5000".to_string(),
            "plain.lan".to_string(),
            "10.1.0.0/16".to_string(),
            "http://other.lan:8080/".to_string(),
        ];
        assert!(is_listed_insecure("reg.lan:5000", &list));
        assert!(!is_listed_insecure("reg.lan:5001", &list));
        assert!(is_listed_insecure("plain.lan", &list));
        assert!(is_listed_insecure("10.1.2.3:5000", &list));
        assert!(!is_listed_insecure("10.2.0.1:5000", &list));
        assert!(is_listed_insecure("other.lan:8080", &list));
        assert_eq!(
            transport_for("reg.lan:5000", &list),
            Transport::HttpsThenHttp
        );
    }

    #[test]
    fn certificates_are_checked_unless_the_registry_is_insecure() {
        let remote = transport_for("registry.example", &[]);
        assert!(
            !skip_verify(remote, false),
            "a remote registry's certificate is checked"
        );
        let local = transport_for("127.0.0.1:5000", &[]);
        assert!(skip_verify(local, false));
        // Plain HTTP has no certificate; nothing to skip.
        assert!(!skip_verify(local, true));
        let listed = transport_for("reg.lan:5000", &["reg.lan:5000".to_string()]);
        assert!(skip_verify(listed, false));
    }

    #[test]
    fn plain_http_only_for_loopback_or_listed_registries() {
        // As --insecure-registry fills it: the entries exactly as given on the command line.
        let list: Vec<String> = ["Reg.LAN:5000", " plain.lan ", "10.1.0.0/16", "fd00::/8"]
            .map(String::from)
            .to_vec();
        for (host, expected) in [
            ("reg.lan:5000", Transport::HttpsThenHttp),
            ("REG.lan:5000", Transport::HttpsThenHttp),
            ("reg.lan:5001", Transport::Https),
            ("reg.lan", Transport::Https),
            ("plain.lan", Transport::HttpsThenHttp),
            ("plain.lan:8443", Transport::HttpsThenHttp),
            ("sub.plain.lan", Transport::Https),
            ("10.1.200.3:5000", Transport::HttpsThenHttp),
            ("10.1.0.1", Transport::HttpsThenHttp),
            ("10.2.0.1:5000", Transport::Https),
            ("[fd00::5]:5000", Transport::HttpsThenHttp),
            ("[fe80::1]:5000", Transport::Https),
            ("docker.io", Transport::Https),
            ("127.0.0.1:5000", Transport::HttpsThenHttp),
            ("localhost:5000", Transport::HttpsThenHttp),
        ] {
            assert_eq!(transport_for(host, &list), expected, "{host}");
        }
        // Without entries only loopback registries get the plain HTTP fallback.
        for host in ["reg.lan:5000", "10.1.200.3:5000", "[fd00::5]:5000"] {
            assert_eq!(transport_for(host, &[]), Transport::Https, "{host}");
        }
        // A malformed CIDR names nothing rather than everything.
        let bad = vec!["10.1.0.0/99".to_string(), "nonsense/8".to_string()];
        assert_eq!(transport_for("10.1.0.1:5000", &bad), Transport::Https);
    }

    fn envelope(code: OciErrorCode) -> OciDistributionError {
        OciDistributionError::RegistryError {
            envelope: OciEnvelope {
                errors: vec![OciError {
                    code,
                    message: "msg".into(),
                    detail: serde_json::Value::Null,
                }],
            },
            url: "http://r/v2/x/manifests/y".into(),
        }
    }

    #[test]
    fn maps_registry_answers() {
        let m = |e| map_error("r/x:y", "r", "r/x:y", e);
        assert!(matches!(
            m(OciDistributionError::UnauthorizedError { url: "u".into() }),
            PullError::Unauthorized { .. }
        ));
        assert!(matches!(
            m(OciDistributionError::AuthenticationFailure("no".into())),
            PullError::Unauthorized { .. }
        ));
        assert!(matches!(
            m(envelope(OciErrorCode::Denied)),
            PullError::Unauthorized { .. }
        ));
        assert!(matches!(
            m(envelope(OciErrorCode::ManifestUnknown)),
            PullError::NotFound { .. }
        ));
        assert!(matches!(
            m(envelope(OciErrorCode::NameUnknown)),
            PullError::NotFound { .. }
        ));
        assert!(matches!(
            m(envelope(OciErrorCode::Toomanyrequests)),
            PullError::Other { .. }
        ));
        assert!(matches!(
            m(OciDistributionError::ServerError {
                code: 404,
                url: "u".into(),
                message: "".into()
            }),
            PullError::NotFound { .. }
        ));
        assert!(matches!(
            m(OciDistributionError::ServerError {
                code: 403,
                url: "u".into(),
                message: "".into()
            }),
            PullError::Unauthorized { .. }
        ));
        let bad = m(OciDistributionError::DigestError(
            oci_client::errors::DigestError::VerificationError {
                expected: "sha256:a".into(),
                actual: "sha256:b".into(),
            },
        ));
        assert!(matches!(bad, PullError::BadDigest { .. }));
        let io = std::io::Error::other(oci_client::errors::DigestError::VerificationError {
            expected: "sha256:a".into(),
            actual: "sha256:b".into(),
        });
        assert!(matches!(
            m(OciDistributionError::IoError(io)),
            PullError::BadDigest { .. }
        ));
    }

    #[test]
    fn messages_name_image_and_registry() {
        let e = map_error(
            "127.0.0.1:5000/x:y",
            "127.0.0.1:5000",
            "127.0.0.1:5000/x:y",
            envelope(OciErrorCode::ManifestUnknown),
        )
        .to_string();
        assert!(
            e.contains("127.0.0.1:5000/x:y") && e.contains("not found"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
}
