//! The sink: one task that takes recorded Events off the queue in order, correlates them and
//! writes them to the API server (client-go's recordToSink with the kubelet's event sink).
//! While the server cannot be reached it holds the queue and tries the same Event again, as
//! upstream does; recorders never wait on it, the queue drops instead.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::correlator::{Correlated, Correlator};
use super::token_bucket::TokenBucket;

/// Tries per Event before it is given up (upstream's maxTriesPerEvent).
pub(crate) const MAX_TRIES: u32 = 12;
/// The wait between tries; the first wait is a random part of it, so nodes that lost the
/// API server together do not come back together (upstream's defaultSleepDuration).
pub(crate) const RETRY_SLEEP: Duration = Duration::from_secs(10);
/// How long one create or patch may take before it counts as a failed try: a half-open
/// connection must not hold the queue for good.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The sink's own request rate: a burst of 100, then 50 a second (the kubelet's
/// eventBurst and eventRecordQPS defaults, which its event client is built with), so many
/// pods failing at once cannot swamp the API server either.
pub(crate) const REQUEST_BURST: u32 = 100;
pub(crate) const REQUEST_INTERVAL: Duration = Duration::from_millis(20);

/// The status cause the API server gives when an object is created in a namespace being
/// deleted (upstream's v1.NamespaceTerminatingCause).
const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("cannot create event {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot patch event {namespace}/{name}: {source}")]
    Patch {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("event {namespace}/{name}: no answer from the API server within {timeout:?}")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
}

impl WriteError {
    fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            WriteError::Create { source, .. } | WriteError::Patch { source, .. } => match source {
                kube::Error::Api(status) => Some(status),
                _ => None,
            },
            WriteError::Timeout { .. } => None,
        }
    }

    /// Whether the same write may succeed later. As upstream: the server's answer is final
    /// (the Event itself is at fault), except "too many requests", which client-go's REST
    /// client waits out by itself; a request that cannot be built is final; anything on the
    /// way (connection, TLS, timeout, an unreadable answer) is worth another try.
    fn retriable(&self) -> bool {
        if let Some(status) = self.api_status() {
            return status.code == 429;
        }
        match self {
            WriteError::Create { source, .. } | WriteError::Patch { source, .. } => !matches!(
                source,
                kube::Error::BuildRequest(_) | kube::Error::HttpError(_)
            ),
            WriteError::Timeout { .. } => true,
        }
    }

    /// A rejection that is no news: the Event exists already, or its namespace is going away
    /// with everything in it. Upstream logs these quietly.
    fn expected(&self) -> bool {
        self.api_status().is_some_and(|s| {
            s.is_already_exists()
                || s.details.as_ref().is_some_and(|d| {
                    d.causes
                        .iter()
                        .any(|c| c.reason == NAMESPACE_TERMINATING_CAUSE)
                })
        })
    }
}

/// Runs the sink until every recorder is gone and the queue is empty.
pub(crate) async fn run(client: kube::Client, mut queue: mpsc::Receiver<Event>) {
    let mut sink = Sink {
        client,
        correlator: Correlator::default(),
        requests: TokenBucket::full(REQUEST_BURST, REQUEST_INTERVAL, Instant::now()),
    };
    while let Some(event) = queue.recv().await {
        sink.record(event).await;
    }
    debug!("event sink stopped: no recorder left");
}

struct Sink {
    client: kube::Client,
    correlator: Correlator,
    requests: TokenBucket,
}

impl Sink {
    async fn record(&mut self, event: Event) {
        let object = describe(&event.involved_object);
        let now = Instant::now();
        let (event, patch) = match self.correlator.correlate(event, now, Timestamp::now()) {
            Correlated::Skip => {
                debug!(
                    %object,
                    "event dropped: too many events about this object (spam filter)"
                );
                return;
            }
            Correlated::Create(event) => (event, None),
            Correlated::Patch { event, patch } => (event, Some(patch)),
        };
        let mut tries = 0;
        loop {
            let err = match self.write(&event, patch.as_ref()).await {
                Ok(stored) => {
                    self.correlator.update_state(&stored);
                    return;
                }
                Err(err) => err,
            };
            let reason = event.reason.as_deref().unwrap_or_default();
            if !err.retriable() {
                if err.expected() {
                    debug!(%object, reason, error = %err, "server rejected event (will not retry)");
                } else {
                    error!(%object, reason, error = %err, "server rejected event (will not retry)");
                }
                return;
            }
            tries += 1;
            if tries >= MAX_TRIES {
                error!(%object, reason, error = %err, tries, "unable to write event (retry limit exceeded)");
                return;
            }
            warn!(%object, reason, error = %err, tries, "unable to write event (will retry after sleeping)");
            let delay = if tries == 1 {
                RETRY_SLEEP.mul_f64(rand::random::<f64>())
            } else {
                RETRY_SLEEP
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// One try: a repeat patches the Event it repeats; a new Event, or a repeat whose Event is
    /// gone (expired, or never written because the filter dropped the first), is created.
    async fn write(
        &mut self,
        event: &Event,
        patch: Option<&serde_json::Value>,
    ) -> Result<Event, WriteError> {
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let name = event.metadata.name.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let timeout = |namespace: &str, name: &str| WriteError::Timeout {
            namespace: namespace.to_string(),
            name: name.to_string(),
            timeout: REQUEST_TIMEOUT,
        };
        if let Some(patch) = patch {
            self.requests.wait().await;
            let patched = tokio::time::timeout(
                REQUEST_TIMEOUT,
                api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch)),
            )
            .await
            .map_err(|_| timeout(&namespace, &name))?;
            match patched {
                Ok(stored) => return Ok(stored),
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(source) => {
                    return Err(WriteError::Patch {
                        namespace,
                        name,
                        source,
                    })
                }
            }
        }
        let mut new = event.clone();
        new.metadata.resource_version = None;
        self.requests.wait().await;
        tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &new))
            .await
            .map_err(|_| timeout(&namespace, &name))?
            .map_err(|source| WriteError::Create {
                namespace,
                name,
                source,
            })
    }
}

/// `Pod team/web` or `Node n1`, with the container's field path when there is one.
pub(crate) fn describe(object: &k8s_openapi::api::core::v1::ObjectReference) -> String {
    let kind = object.kind.as_deref().unwrap_or_default();
    let name = object.name.as_deref().unwrap_or_default();
    let mut out = match object.namespace.as_deref().filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    };
    if let Some(path) = object.field_path.as_deref() {
        out.push(' ');
        out.push_str(path);
    }
    out
}
