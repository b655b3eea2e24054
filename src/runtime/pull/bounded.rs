//! Registry requests whose answers are read into memory, with a bound on each: manifests and
//! indexes (`MAX_MANIFEST`, containerd's bound) and the bodies of refused requests (1 MiB,
//! containers/image's bound on error bodies, enough for any registry's error envelope).
//!
//! Why not oci-client for these: its manifest calls read the whole body (`Response::bytes`)
//! before anything looks at it, so a registry, or anyone in the path of a plain-HTTP one,
//! could make the agent hold any amount of memory. These requests go out through reqwest
//! (the client oci-client itself is built on, with the same TLS settings) and carry the
//! credentials oci-client's authentication produced (`connect`); blobs still stream through
//! oci-client into containerd.

use bytes::{Bytes, BytesMut};
use oci_client::errors::{OciDistributionError, OciEnvelope};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use std::time::Duration;

use super::manifest;

/// The most of a refused request's body read for its message.
const MAX_ERROR_BODY: u64 = 1 << 20;

/// Why a bounded request gave no document.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The registry's own answer or a transport failure, as oci-client reports them (so
    /// `registry::map_error` treats both alike).
    #[error(transparent)]
    Registry(#[from] OciDistributionError),
    /// The body, declared or as sent, is past the bound; the rest is never read.
    #[error("the registry sent more than {limit} bytes, the most read of a manifest or index")]
    TooLarge { limit: u64 },
}

/// How requests authenticate: what oci-client's authentication against the registry gave.
#[derive(Clone)]
pub(crate) enum Credentials {
    Anonymous,
    Bearer(String),
    Basic(String, String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs.
        f.write_str(match self {
            Credentials::Anonymous => "Anonymous",
            Credentials::Bearer(_) => "Bearer(..)",
            Credentials::Basic(..) => "Basic(..)",
        })
    }
}

impl Credentials {
    /// From oci-client's `auth` result: its bearer token when the registry asked for one;
    /// otherwise the basic credentials it was given (sent as oci-client sends them), or none.
    pub(crate) fn from_auth(token: Option<String>, auth: &RegistryAuth) -> Credentials {
        match (token, auth) {
            (Some(t), _) => Credentials::Bearer(t),
            (None, RegistryAuth::Basic(user, password)) => {
                Credentials::Basic(user.clone(), password.clone())
            }
            (None, _) => Credentials::Anonymous,
        }
    }
}

/// Manifest requests against one registry, over HTTPS or plain HTTP as `connect` found it.
pub(crate) struct ManifestClient {
    http: reqwest::Client,
    scheme: &'static str,
    credentials: Credentials,
}

impl ManifestClient {
    pub(crate) fn new(
        plain_http: bool,
        skip_verify: bool,
        credentials: Credentials,
    ) -> Result<ManifestClient, FetchError> {
        super::install_crypto_provider();
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(skip_verify)
            // As `registry::oci_client`.
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("kubelet-rs/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(OciDistributionError::RequestError)?;
        Ok(ManifestClient {
            http,
            scheme: if plain_http { "http" } else { "https" },
            credentials,
        })
    }

    /// The manifest URL of the reference's digest or tag, as oci-client spells it.
    fn url(&self, r: &Reference) -> String {
        let reference = match r.digest() {
            Some(d) => d,
            None => r.tag().unwrap_or("latest"),
        };
        let ns = r
            .namespace()
            .map(|ns| format!("?ns={ns}"))
            .unwrap_or_default();
        format!(
            "{}://{}/v2/{}/manifests/{reference}{ns}",
            self.scheme,
            r.resolve_registry(),
            r.repository()
        )
    }

    fn request(&self, method: Method, url: &str) -> RequestBuilder {
        let req = self
            .http
            .request(method, url)
            .header(reqwest::header::ACCEPT, manifest::ACCEPTED.join(", "));
        // reqwest drops the Authorization header on a redirect to another host.
        match &self.credentials {
            Credentials::Anonymous => req,
            Credentials::Bearer(t) => req.bearer_auth(t),
            Credentials::Basic(u, p) => req.basic_auth(u, Some(p)),
        }
    }

    /// The digest the reference names now: the registry's `Docker-Content-Digest` on a
    /// HEAD, else the digest of the document a (bounded) GET returns.
    pub(crate) async fn digest(&self, r: &Reference) -> Result<String, FetchError> {
        let url = self.url(r);
        let head = self
            .request(Method::HEAD, &url)
            .send()
            .await
            .map_err(OciDistributionError::RequestError)?;
        if head.status().is_success() {
            if let Some(d) = content_digest(&head) {
                return Ok(d);
            }
        }
        let body = self.get_url(&url).await?;
        Ok(manifest::sha256_digest(&body))
    }

    /// The manifest or index, at most `images::MAX_MANIFEST` bytes of it.
    pub(crate) async fn get(&self, r: &Reference) -> Result<Bytes, FetchError> {
        self.get_url(&self.url(r)).await
    }

    async fn get_url(&self, url: &str) -> Result<Bytes, FetchError> {
        let resp = self
            .request(Method::GET, url)
            .send()
            .await
            .map_err(OciDistributionError::RequestError)?;
        let status = resp.status();
        if status != StatusCode::OK {
            let body = read_truncated(resp, MAX_ERROR_BODY).await;
            return Err(status_error(status, &body, url).into());
        }
        read_limited(resp, crate::runtime::images::MAX_MANIFEST).await
    }
}

fn content_digest(resp: &Response) -> Option<String> {
    resp.headers()
        .get("Docker-Content-Digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The body, or `TooLarge` as soon as it is known to pass `limit`: from its declared length
/// before reading anything, else when the bytes read pass it. The response is dropped then,
/// and the rest of the body with it.
pub(crate) async fn read_limited(mut resp: Response, limit: u64) -> Result<Bytes, FetchError> {
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(FetchError::TooLarge { limit });
    }
    let mut out = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(OciDistributionError::RequestError)?
    {
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(FetchError::TooLarge { limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Up to `limit` bytes of a refused request's body, for its message; a body that cannot be
/// read is empty.
async fn read_truncated(mut resp: Response, limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = (limit as usize).saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() as u64 >= limit {
            break;
        }
    }
    out
}

/// A refused request as oci-client reports one (its `validate_registry_response`): 401 is
/// Unauthorized, another client error carries the registry's error envelope when the body
/// is one, anything else is a server error with the body as its message.
fn status_error(status: StatusCode, body: &[u8], url: &str) -> OciDistributionError {
    if status == StatusCode::UNAUTHORIZED {
        return OciDistributionError::UnauthorizedError {
            url: url.to_string(),
        };
    }
    if status.is_success() {
        return OciDistributionError::SpecViolationError(format!(
            "Expected HTTP Status {}, got {status} instead",
            StatusCode::OK
        ));
    }
    if status.is_client_error() {
        if let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(body) {
            return OciDistributionError::RegistryError {
                envelope,
                url: url.to_string(),
            };
        }
    }
    OciDistributionError::ServerError {
        code: status.as_u16(),
        url: url.to_string(),
        message: String::from_utf8_lossy(body).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! Against a small HTTP/1.1 server on loopback that answers every request with one
    //! scripted response and counts the body bytes it managed to send.

    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const MANIFEST: &str = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:aa","size":2},"layers":[]}"#;

    /// What the server sends after the status line and headers.
    #[derive(Clone)]
    enum Body {
        /// These bytes, with their Content-Length.
        Exact(&'static str),
        /// `total` bytes of JSON-ish filler, length undeclared (the end is the close).
        Endless { total: u64 },
        /// A Content-Length of `declared`, then filler until the client goes.
        Declared { declared: u64 },
    }

    struct Server {
        addr: std::net::SocketAddr,
        sent: Arc<AtomicU64>,
        requests: Arc<std::sync::Mutex<Vec<String>>>,
    }

    async fn serve(status: &'static str, headers: &'static str, body: Body) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (sent2, requests2) = (sent.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let (sent, requests, body) = (sent2.clone(), requests2.clone(), body.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let is_head = head.starts_with("HEAD ");
                    requests.lock().unwrap().push(head);
                    let length = match &body {
                        Body::Exact(b) => format!("Content-Length: {}\r\n", b.len()),
                        Body::Endless { .. } => String::new(),
                        Body::Declared { declared } => format!("Content-Length: {declared}\r\n"),
                    };
                    let reply =
                        format!("HTTP/1.1 {status}\r\n{headers}{length}Connection: close\r\n\r\n");
                    if conn.write_all(reply.as_bytes()).await.is_err() || is_head {
                        return;
                    }
                    let total = match &body {
                        Body::Exact(b) => {
                            let _ = conn.write_all(b.as_bytes()).await;
                            sent.fetch_add(b.len() as u64, Ordering::SeqCst);
                            return;
                        }
                        Body::Endless { total } => *total,
                        Body::Declared { declared } => *declared,
                    };
                    let chunk = vec![b' '; 64 << 10];
                    let mut left = total;
                    while left > 0 {
                        let n = left.min(chunk.len() as u64) as usize;
                        if conn.write_all(&chunk[..n]).await.is_err() {
                            return;
                        }
                        sent.fetch_add(n as u64, Ordering::SeqCst);
                        left -= n as u64;
                    }
                });
            }
        });
        Server {
            addr,
            sent,
            requests,
        }
    }

    fn reference(server: &Server) -> Reference {
        format!("{}/library/app:1", server.addr).parse().unwrap()
    }

    fn client(credentials: Credentials) -> ManifestClient {
        ManifestClient::new(true, false, credentials).unwrap()
    }

    const HUGE: u64 = 64 << 20;

    #[tokio::test]
    async fn an_endless_manifest_is_refused_without_reading_it_all() {
        let server = serve("200 OK", "", Body::Endless { total: HUGE }).await;
        let err = client(Credentials::Anonymous)
            .get(&reference(&server))
            .await
            .unwrap_err();
        assert!(
            matches!(err, FetchError::TooLarge { limit } if limit == 4 << 20),
            "{err}"
        );
        assert!(err.to_string().contains("more than 4194304 bytes"), "{err}");
        // The server stops once the client has gone; what it sent past the bound is what
        // the sockets' buffers took, far from the whole.
        tokio::time::timeout(Duration::from_secs(60), async {
            let mut last = u64::MAX;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = server.sent.load(Ordering::SeqCst);
                if now == last {
                    break;
                }
                last = now;
            }
        })
        .await
        .unwrap();
        let sent = server.sent.load(Ordering::SeqCst);
        assert!(sent < HUGE / 2, "the server sent {sent} bytes");
    }

    #[tokio::test]
    async fn a_declared_oversize_manifest_is_refused_before_its_body() {
        let server = serve("200 OK", "", Body::Declared { declared: HUGE }).await;
        let err = client(Credentials::Anonymous)
            .get(&reference(&server))
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::TooLarge { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_manifest_within_the_bound_is_read_with_the_credentials() {
        let server = serve("200 OK", "", Body::Exact(MANIFEST)).await;
        let c = client(Credentials::Bearer("tok".into()));
        let r = reference(&server);
        assert_eq!(&c.get(&r).await.unwrap()[..], MANIFEST.as_bytes());
        // No digest header on the HEAD: the digest of the document itself.
        assert_eq!(
            c.digest(&r).await.unwrap(),
            manifest::sha256_digest(MANIFEST.as_bytes())
        );
        let requests = server.requests.lock().unwrap().clone();
        assert!(
            requests[0].starts_with("GET /v2/library/app/manifests/1 "),
            "{requests:?}"
        );
        assert!(requests[1].starts_with("HEAD "), "{requests:?}");
        assert!(requests[2].starts_with("GET "), "{requests:?}");
        assert!(
            requests
                .iter()
                .all(|r| r.to_ascii_lowercase().contains("authorization: bearer tok")),
            "{requests:?}"
        );
    }

    #[tokio::test]
    async fn the_registrys_digest_header_answers_the_head() {
        let server = serve(
            "200 OK",
            "Docker-Content-Digest: sha256:abc\r\n",
            Body::Exact(MANIFEST),
        )
        .await;
        let d = client(Credentials::Anonymous)
            .digest(&reference(&server))
            .await
            .unwrap();
        assert_eq!(d, "sha256:abc");
        assert_eq!(server.requests.lock().unwrap().len(), 1, "a HEAD only");
    }

    #[tokio::test]
    async fn refusals_are_reported_as_oci_client_reports_them() {
        let server = serve("401 Unauthorized", "", Body::Exact("")).await;
        let err = client(Credentials::Anonymous)
            .get(&reference(&server))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FetchError::Registry(OciDistributionError::UnauthorizedError { .. })
            ),
            "{err}"
        );
        let server = serve(
            "404 Not Found",
            "",
            Body::Exact(r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#),
        )
        .await;
        let err = client(Credentials::Anonymous)
            .get(&reference(&server))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                FetchError::Registry(OciDistributionError::RegistryError { .. })
            ),
            "{err}"
        );
        // An endless error body is cut at its bound, not read whole.
        let server = serve(
            "500 Internal Server Error",
            "",
            Body::Endless { total: HUGE },
        )
        .await;
        let err = client(Credentials::Anonymous)
            .get(&reference(&server))
            .await
            .unwrap_err();
        match err {
            FetchError::Registry(OciDistributionError::ServerError { code, message, .. }) => {
                assert_eq!(code, 500);
                assert_eq!(message.len() as u64, MAX_ERROR_BODY);
            }
            e => panic!("{e}"),
        }
    }
}
