//! A minimal HTTP/1.1 GET client for probes and hooks: one fresh connection per request
//! (upstream disables keep-alive for probes), redirects followed only to the same host,
//! at most `MAX_PROBE_OUTPUT` bytes of body read.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::HTTPGetAction;
use tokio::net::TcpStream;

use super::address::{join_host_port, resolve_port};
use super::{ProbeTarget, MAX_PROBE_OUTPUT};

/// A probe connection, plain or TLS.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// HTTPS for probes and hooks: upstream skips certificate verification (the target is a
/// pod the node itself runs, often with a self-signed certificate), and so does this.
mod tls {
    use std::sync::{Arc, OnceLock};

    use rustls::pki_types::ServerName;
    use tokio::net::TcpStream;
    use tokio_rustls::client::TlsStream;

    use crate::api_client::NoServerVerification;

    /// rustls refusing the client configuration (shown as rustls words it).
    #[derive(Debug, Clone, thiserror::Error)]
    #[error(transparent)]
    pub(super) struct TlsSetup(#[from] rustls::Error);

    fn connector() -> Result<tokio_rustls::TlsConnector, TlsSetup> {
        static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, TlsSetup>> = OnceLock::new();
        let cfg = CONFIG.get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoServerVerification(
                    provider.signature_verification_algorithms,
                )))
                .with_no_client_auth();
            Ok(Arc::new(cfg))
        });
        cfg.clone().map(tokio_rustls::TlsConnector::from)
    }

    pub(super) async fn connect(
        tcp: TcpStream,
        host: &str,
    ) -> Result<TlsStream<TcpStream>, String> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("invalid TLS server name {host:?}: {e}"))?;
        connector()
            .map_err(|e| e.to_string())?
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {host}: {e}"))
    }
}

/// Why a GET gave no response, worded like Go's client errors (`url` is quoted as Go's
/// url.Error quotes it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetError {
    #[error(
        "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    )]
    Timeout { url: String },
    /// The connection or the exchange failed; `reason` is already worded like Go's.
    #[error("Get {url:?}: {reason}")]
    Send { url: String, reason: String },
    #[error("Get {url:?}: failed to parse Location header {location:?}: {source}")]
    Location {
        url: String,
        location: String,
        #[source]
        source: LocationError,
    },
    #[error("Get {url:?}: stopped after {MAX_REQUESTS} redirects")]
    Redirects { url: String },
}

/// A Location header that names no URL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocationError {
    #[error("{0}")]
    Uri(#[source] hyper::http::uri::InvalidUri),
    #[error("no host")]
    NoHost,
}

/// Upstream's redirect limit: the tenth redirect is an error.
const MAX_REQUESTS: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// Path and query, always starting with '/'.
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme,
            join_host_port(&self.host, self.port),
            self.path
        )
    }
}

/// A GET to send: where, and the headers as the pod spec gave them.
#[derive(Debug, Clone)]
pub(crate) struct GetRequest {
    pub url: Url,
    pub headers: Vec<(String, String)>,
}

/// The response that ended the exchange.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Builds the request an httpGet action describes. Errors (unresolvable port, no host) are
/// configuration errors, not failures of the container.
pub(crate) fn request_for(
    action: &HTTPGetAction,
    target: &ProbeTarget,
) -> Result<GetRequest, String> {
    let scheme = action
        .scheme
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("HTTP")
        .to_ascii_lowercase();
    let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_string(),
        None => target
            .pod_ip
            .map(|ip| ip.to_string())
            .ok_or_else(|| format!("pod {} has no IP to send the HTTP GET to", target.pod))?,
    };
    let port = resolve_port(&action.port, target).map_err(|e| e.to_string())?;
    let raw = action.path.as_deref().unwrap_or("");
    let path = if raw.starts_with('/') {
        raw.to_string()
    } else {
        format!("/{raw}")
    };
    let headers = action
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    Ok(GetRequest {
        url: Url {
            scheme,
            host,
            port,
            path,
        },
        headers,
    })
}

/// Sends the GET (following same-host redirects) within `timeout`. `Err` is the transport
/// failure, worded like Go's client errors, which upstream puts into probe messages.
pub(crate) async fn get(
    req: &GetRequest,
    user_agent: &str,
    timeout: Duration,
) -> Result<Response, GetError> {
    match tokio::time::timeout(timeout, follow(req, user_agent)).await {
        Ok(r) => r,
        Err(_) => Err(GetError::Timeout {
            url: req.url.to_string(),
        }),
    }
}

async fn follow(req: &GetRequest, user_agent: &str) -> Result<Response, GetError> {
    let mut url = req.url.clone();
    let mut sent = 0;
    loop {
        let (resp, location) =
            send_once(&url, &req.headers, user_agent)
                .await
                .map_err(|reason| GetError::Send {
                    url: url.to_string(),
                    reason,
                })?;
        sent += 1;
        let Some(location) = location else {
            return Ok(resp);
        };
        let next = resolve_location(&url, &location).map_err(|source| GetError::Location {
            url: url.to_string(),
            location: location.clone(),
            source,
        })?;
        // Upstream's probes never leave the host they were pointed at: a redirect elsewhere
        // ends the exchange with the redirect response itself.
        if next.host != req.url.host {
            return Ok(resp);
        }
        if sent >= MAX_REQUESTS {
            return Err(GetError::Redirects {
                url: next.to_string(),
            });
        }
        url = next;
    }
}

/// One request on a fresh connection; the Location of a redirect response, if any.
async fn send_once(
    url: &Url,
    headers: &[(String, String)],
    user_agent: &str,
) -> Result<(Response, Option<String>), String> {
    let hostport = join_host_port(&url.host, url.port);
    let tcp = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("dial tcp {hostport}: {e}"))?;
    let stream: Box<dyn Io> = match url.scheme.as_str() {
        "http" => Box::new(tcp),
        "https" => Box::new(tls::connect(tcp, &url.host).await?),
        other => return Err(format!("unsupported scheme {other:?}")),
    };
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);

    let mut builder = Request::get(url.path.as_str());
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    if !has("host") {
        builder = builder.header(hyper::header::HOST, hostport.as_str());
    }
    if !has("user-agent") {
        builder = builder.header(hyper::header::USER_AGENT, user_agent);
    }
    if !has("accept") {
        builder = builder.header(hyper::header::ACCEPT, "*/*");
    }
    builder = builder.header(hyper::header::CONNECTION, "close");
    for (k, v) in headers {
        // An empty Accept or User-Agent in the spec means "send none", as upstream.
        if v.is_empty()
            && (k.eq_ignore_ascii_case("accept") || k.eq_ignore_ascii_case("user-agent"))
        {
            continue;
        }
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| format!("invalid header name {k:?}: {e}"))?;
        let value =
            HeaderValue::from_str(v).map_err(|e| format!("invalid value of header {k:?}: {e}"))?;
        builder = builder.header(name, value);
    }
    let request = builder
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let location = if is_redirect(status) {
        resp.headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    } else {
        None
    };
    let mut body = resp.into_body();
    let mut kept = Vec::new();
    while kept.len() < MAX_PROBE_OUTPUT {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = MAX_PROBE_OUTPUT - kept.len();
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(e)) => return Err(e.to_string()),
            None => break,
        }
    }
    conn.abort();
    Ok((
        Response {
            status: status.as_u16(),
            body: kept,
        },
        location,
    ))
}

fn is_redirect(s: StatusCode) -> bool {
    matches!(s.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Resolves a Location header against the URL that answered with it.
pub(crate) fn resolve_location(base: &Url, location: &str) -> Result<Url, LocationError> {
    if let Some(rest) = location.strip_prefix("//") {
        return resolve_location(base, &format!("{}://{rest}", base.scheme));
    }
    if location.contains("://") {
        let uri: hyper::Uri = location.parse().map_err(LocationError::Uri)?;
        let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
        let host = uri
            .host()
            .ok_or(LocationError::NoHost)?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|p| p.starts_with('/'))
            .unwrap_or_else(|| "/".into());
        return Ok(Url {
            scheme,
            host,
            port,
            path,
        });
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let base_path = base.path.split('?').next().unwrap_or("/");
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{location}")
    };
    Ok(Url {
        path,
        ..base.clone()
    })
}
