//! The HTTP source: static pods from a URL (`staticPodURL`), polled every period with the
//! configured headers. The body is one Pod or a PodList (chosen by `kind`), YAML or JSON.
//!
//! A failed poll (connection error, non-200 status, a body that does not parse or a pod that
//! does not validate) keeps the last good set and is logged; the same error repeated is logged
//! once at error level, then at debug. No update is sent before the first good poll: an empty
//! set sent for a server that is merely down at start-up would tell the pod layer to stop pods
//! that an earlier run of the agent started from this URL.
//!
//! https:// URLs are fetched over rustls and the server's certificate is checked against the
//! system's CA certificates (as upstream's Go client does): whoever can answer for the URL
//! decides what runs on the node, so an unverified answer is never taken.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::decode::{decode_manifest, Manifest};
use super::static_pod::{prepare_static_pod, SeenTimes};
use super::{drop_duplicate_names, ManifestError, SourceKind, SourceUpdate, SourcedPod};

/// Upstream's HTTP source uses a 10 s client timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A manifest body larger than this is refused rather than buffered.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("GET {url}: the server's certificate is not trusted: {reason} (https:// URLs are checked against the system's CA certificates)")]
    Certificate { url: String, reason: String },
    #[error("GET {url}: cannot set up TLS: {source}")]
    Tls {
        url: String,
        #[source]
        source: rustls::Error,
    },
    #[error("GET {url}: not a valid http:// or https:// URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("GET {url}: invalid header {name:?}: {reason}")]
    BadHeader {
        url: String,
        name: String,
        reason: String,
    },
    #[error("GET {url}: {reason}")]
    Request { url: String, reason: String },
    #[error("GET {url}: no answer within {}s", REQUEST_TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("GET {url}: HTTP status {status}")]
    Status { url: String, status: StatusCode },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// Starts the HTTP source. The task ends only when `tx`'s receiver is dropped, or at once (after
/// an error log) for a URL it can never fetch.
pub fn spawn_http_source(
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    period: Duration,
    tx: mpsc::Sender<SourceUpdate>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let roots = if url.starts_with("https://") {
            // Reading the system's store is file work: off the async runtime.
            tokio::task::spawn_blocking(system_roots)
                .await
                .unwrap_or_else(|_| RootCertStore::empty())
        } else {
            RootCertStore::empty()
        };
        let mut source = match HttpSource::with_roots(url.clone(), headers, node_name, roots) {
            Ok(source) => source,
            Err(err) => {
                tracing::error!(url = %url, "{err}; the manifest URL source is not running");
                return;
            }
        };
        if let Err(err) = source.check_request() {
            tracing::error!(url = %source.url, "{err}; the manifest URL source is not running");
            return;
        }
        source.run(period, tx).await
    })
}

struct HttpSource {
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    seen: SeenTimes,
    last_body: Option<Bytes>,
    last_error: Option<String>,
}

/// The system's CA certificates (the store rustls-native-certs finds: SSL_CERT_FILE /
/// SSL_CERT_DIR, else the distribution's bundle). Certificates it cannot read are logged and
/// skipped; an empty store makes every https:// fetch fail verification, with that error.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!("reading the system's CA certificates: {err}");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "system CA certificates that do not parse were skipped"
        );
    }
    if added == 0 {
        tracing::warn!(
            "no system CA certificates found: https:// manifest URLs cannot be verified"
        );
    }
    roots
}

impl HttpSource {
    /// A source whose https:// answers are checked against `roots` (the system's store in the
    /// agent; a test's own CA in tests: there is no flag for extra CAs, as upstream has none).
    fn with_roots(
        url: String,
        headers: BTreeMap<String, Vec<String>>,
        node_name: String,
        roots: RootCertStore,
    ) -> Result<Self, FetchError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|source| FetchError::Tls {
                url: url.clone(),
                source,
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(HttpSource {
            url,
            headers,
            node_name,
            client: Client::builder(TokioExecutor::new()).build(connector),
            seen: SeenTimes::default(),
            last_body: None,
            last_error: None,
        })
    }

    async fn run(&mut self, period: Duration, tx: mpsc::Sender<SourceUpdate>) {
        let mut last_sent: Option<Vec<SourcedPod>> = None;
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.poll().await {
                Ok(Some(pods)) => {
                    if self.last_error.take().is_some() {
                        tracing::info!(url = %self.url, "manifest URL {} is answering again", self.url);
                    }
                    if last_sent.as_ref() != Some(&pods) {
                        let update = SourceUpdate {
                            source: SourceKind::Http,
                            pods: pods.clone(),
                        };
                        if tx.send(update).await.is_err() {
                            return;
                        }
                        last_sent = Some(pods);
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    let message = err.to_string();
                    if self.last_error.as_deref() == Some(message.as_str()) {
                        tracing::debug!(url = %self.url, "{message}; keeping the last good pods");
                    } else {
                        tracing::error!(url = %self.url, "{message}; keeping the last good pods");
                        self.last_error = Some(message);
                    }
                }
            }
        }
    }

    /// Fetches and decodes the URL. `Ok(None)`: the body is the same as last time.
    async fn poll(&mut self) -> Result<Option<Vec<SourcedPod>>, FetchError> {
        let body = self.fetch().await?;
        if self.last_body.as_ref() == Some(&body) {
            return Ok(None);
        }
        let mut pods = drop_duplicate_names(SourceKind::Http, self.decode(&body)?);
        self.seen.stamp(&mut pods);
        self.last_body = Some(body);
        Ok(Some(pods))
    }

    fn check_request(&self) -> Result<Request<Empty<Bytes>>, FetchError> {
        let url = &self.url;
        let uri: Uri =
            url.parse()
                .map_err(|e: hyper::http::uri::InvalidUri| FetchError::BadUrl {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(FetchError::BadUrl {
                url: url.clone(),
                reason: "expected http[s]://host[:port]/path".into(),
            });
        }
        let mut request = Request::get(uri);
        for (name, values) in &self.headers {
            for value in values {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        request.body(Empty::new()).map_err(|e| {
            let name = self
                .headers
                .keys()
                .find(|n| hyper::header::HeaderName::from_bytes(n.as_bytes()).is_err())
                .cloned()
                .unwrap_or_default();
            FetchError::BadHeader {
                url: url.clone(),
                name,
                reason: e.to_string(),
            }
        })
    }

    async fn fetch(&self) -> Result<Bytes, FetchError> {
        let request = self.check_request()?;
        let url = &self.url;
        let exchange =
            async {
                let response = self.client.request(request).await.map_err(|e| {
                    match certificate_problem(&e) {
                        Some(reason) => FetchError::Certificate {
                            url: url.clone(),
                            reason,
                        },
                        None => FetchError::Request {
                            url: url.clone(),
                            reason: error_chain(&e),
                        },
                    }
                })?;
                if response.status() != StatusCode::OK {
                    return Err(FetchError::Status {
                        url: url.clone(),
                        status: response.status(),
                    });
                }
                let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                    .collect()
                    .await
                    .map_err(|e| FetchError::Request {
                        url: url.clone(),
                        reason: format!("reading the body: {e}"),
                    })?;
                Ok(body.to_bytes())
            };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| FetchError::Timeout { url: url.clone() })?
    }

    fn decode(&self, body: &[u8]) -> Result<Vec<SourcedPod>, ManifestError> {
        // An empty answer is an empty set, as upstream treats it.
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let parse_error = |source| ManifestError::Decode {
            origin: self.url.clone(),
            source,
        };
        let (pods, listed) = match decode_manifest(body).map_err(parse_error)? {
            Manifest::Pod(pod) => (vec![*pod], false),
            Manifest::List(pods) => (pods, true),
        };
        pods.into_iter()
            .enumerate()
            .map(|(i, pod)| {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let pod = prepare_static_pod(pod, SourceKind::Http, &self.url, &self.node_name)
                    .map_err(|errors| ManifestError::Invalid {
                        pod: name,
                        origin: if listed {
                            format!("{} items[{i}]", self.url)
                        } else {
                            self.url.clone()
                        },
                        errors,
                    })?;
                Ok(SourcedPod {
                    pod,
                    origin: self.url.clone(),
                })
            })
            .collect()
    }
}

/// The certificate rustls refused somewhere in `err`'s causes, if that is what failed. The
/// connector reports it as an io::Error holding an io::Error holding the rustls error, and
/// `source()` skips over what an io::Error holds, so each io::Error's inner error is looked
/// into as well.
fn certificate_problem(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(rustls::Error::InvalidCertificate(c)) = err.downcast_ref::<rustls::Error>() {
        return Some(format!("{c:?}"));
    }
    let held = err
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref());
    if let Some(found) = held.and_then(|inner| certificate_problem(inner)) {
        return Some(found);
    }
    err.source().and_then(certificate_problem)
}

/// An error and its causes on one line ("client error (Connect): tcp connect error: ...").
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
