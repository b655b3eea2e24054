//! Upstream's certificate manager: a pair is renewed at a jittered 70-90 % of its lifetime
//! with a new key and a new request (named by the API from `csr-`), sent with the node's
//! current credentials; the new pair is written to the store and, for the client pair, the
//! API client switches to it. A node without a serving pair asks for one at once. Each pair's
//! time to live, failed renewals and (serving pair) age at rotation go to /metrics.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use rand::Rng;
use tracing::{info, warn};

use super::csr::{self, Template};
use super::store::{Store, CLIENT_PREFIX, SERVING_PREFIX};
use super::{request, CertificateError};
use crate::api_client::ApiClient;
use crate::metrics::certificates as metrics;

/// How long a renewal waits for its request to be signed (upstream's certificate manager:
/// 15 minutes, after which it asks again).
const RENEWAL_WAIT: Duration = Duration::from_secs(15 * 60);
/// Pauses after a failed renewal: doubling from 2 s, at most 5 min.
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// When a pair valid from `not_before` to `not_after` is renewed: at 70 % of its lifetime
/// plus `jitter` (in [0, 1)) times 20 %, upstream's `nextRotationDeadline`, so a fleet of
/// nodes issued at once does not renew at once.
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let jitter = jitter.clamp(0.0, 1.0);
    not_before + Duration::from_secs_f64(total * (0.7 + 0.2 * jitter))
}

/// What one manager renews and what happens after.
pub(crate) struct Rotation {
    /// "client" or "serving", for the log.
    pub kind: &'static str,
    pub store: Store,
    pub template: Template,
    /// The client the requests go through (the node's own identity; for the client pair the
    /// reloadable one, so renewals use the newest certificate).
    pub client: kube::Client,
    /// Run after a new pair is written (the client pair: the API client reloads).
    pub after: Option<Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>>,
}

impl Rotation {
    /// The pair as /metrics names it (its TTL gauge and renewal error counter).
    fn metric_pair(&self) -> metrics::Pair {
        if self.kind == "serving" {
            metrics::Pair::Serving
        } else {
            metrics::Pair::Client
        }
    }

    /// Renews forever: sleeps until the current pair's deadline (none: now), renews, and
    /// after a failure retries with a growing pause.
    pub async fn run(self) {
        let mut retry = RETRY_FIRST;
        loop {
            let current = self.store.current();
            let not_after = current
                .as_ref()
                .ok()
                .and_then(|p| p.as_ref().map(|p| p.not_after));
            metrics::certificate_current(self.metric_pair(), not_after);
            let deadline = match current {
                Ok(Some(pair)) => {
                    let at = rotation_deadline(
                        pair.not_before,
                        pair.not_after,
                        rand::rng().random::<f64>(),
                    );
                    info!(
                        kind = self.kind,
                        not_after = %chrono::DateTime::<chrono::Utc>::from(pair.not_after),
                        rotation_deadline = %chrono::DateTime::<chrono::Utc>::from(at),
                        "certificate rotation deadline"
                    );
                    at
                }
                Ok(None) => SystemTime::now(),
                Err(e) => {
                    warn!(kind = self.kind, error = %e, "the current certificate does not load; requesting a new one");
                    SystemTime::now()
                }
            };
            if let Ok(wait) = deadline.duration_since(SystemTime::now()) {
                tokio::time::sleep(wait).await;
            }
            match self.renew().await {
                Ok(()) => {
                    retry = RETRY_FIRST;
                    if let Some(after) = &self.after {
                        after().await;
                    }
                }
                Err(e) => {
                    metrics::certificate_renew_failed(self.metric_pair());
                    warn!(kind = self.kind, error = %e, retry_in = ?retry, "certificate rotation failed");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }

    async fn renew(&self) -> Result<(), CertificateError> {
        info!(
            kind = self.kind,
            signer = self.template.signer,
            "rotating certificates"
        );
        // What the new pair replaces, for how long a certificate lived before its rotation.
        let previous = self.store.current().ok().flatten().map(|p| p.not_before);
        let key = csr::new_key()?;
        let request_pem = self.template.request_pem(&key)?;
        let client = &self.client;
        let submitted = request::create(client, &self.template, &request_pem, None).await?;
        info!(kind = self.kind, csr = %submitted.name, "waiting for the certificate to be issued");
        let cert = request::wait(client, &submitted, RENEWAL_WAIT).await?;
        let file = self
            .store
            .update(&cert, &key.serialize_pem(), chrono::Utc::now())?;
        if let Some(not_before) = previous {
            metrics::certificate_rotated(self.metric_pair(), not_before);
        }
        info!(kind = self.kind, csr = %submitted.name, cert = %file.display(), "certificate rotated");
        Ok(())
    }
}

/// Renews the client pair in `cert_dir` (written by the bootstrap) and switches `api` to each
/// new one. Returns false (and starts nothing) when the store has no pair: the kubeconfig's
/// certificate is then not the store's, and renewing it is left to whoever issued it.
pub fn spawn_client_rotation(api: Arc<ApiClient>, cert_dir: &std::path::Path, node: &str) -> bool {
    let store = Store::new(cert_dir, CLIENT_PREFIX);
    if !matches!(store.current(), Ok(Some(_))) {
        warn!(cert = %store.current_path().display(), "rotateCertificates: no client certificate pair in the cert dir; client certificate rotation is off");
        return false;
    }
    let client = api.client().clone();
    let reload = api;
    let after: Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync> = Box::new(move || {
        let api = reload.clone();
        Box::pin(async move {
            match api.reload().await {
                Ok(()) => info!("API client switched to the rotated client certificate"),
                Err(e) => warn!(error = %e, "reloading the API client after rotation failed"),
            }
        })
    });
    tokio::spawn(
        Rotation {
            kind: "client",
            store,
            template: Template::client(node),
            client,
            after: Some(after),
        }
        .run(),
    );
    true
}

/// Requests (serverTLSBootstrap) and renews the serving pair in `cert_dir` for the node's
/// host name and addresses; the main server reads the pair from there on each handshake.
pub fn spawn_serving_certificate(
    api: Arc<ApiClient>,
    cert_dir: &std::path::Path,
    node: &str,
    hostnames: Vec<String>,
    addresses: Vec<IpAddr>,
) {
    tokio::spawn(
        Rotation {
            kind: "serving",
            store: Store::new(cert_dir, SERVING_PREFIX),
            template: Template::serving(node, hostnames, addresses),
            client: api.client().clone(),
            after: None,
        }
        .run(),
    );
}
