//! Events for pods and the Node (cluster mode), written as the kubelet writes them: core/v1
//! Events from source `kubelet` on this node, correlated (combined, counted, rate-limited per
//! object) and posted by one sink task, as client-go's record package does for the kubelet.
//!
//! - `event`: the Event for a pod, a container or the Node.
//! - `correlator`: the aggregator, the repeat counter and the spam filter.
//! - `sink`: the task writing Events through the kube client, with upstream's retries.
//! - `lru`: the bounded caches the correlator keeps.
//! - `token_bucket`: the rate limits (per object, and the sink's requests).

mod correlator;
mod event;
mod lru;
mod sink;
mod token_bucket;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;
use tracing::{debug, error};

#[cfg(test)]
mod tests;

/// Events waiting for the sink before new ones are dropped (upstream's maxQueuedEvents).
pub(crate) const QUEUE_LEN: usize = 1000;

/// An Event's type, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Records Events. Cheap to clone; never blocks the caller (posting happens on its own
/// task, and a full queue drops the event with a log). `Recorder::disabled()` is the
/// standalone node's: it records nothing.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    node_name: String,
    queue: mpsc::Sender<Event>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Some(inner) => write!(f, "Recorder(node {})", inner.node_name),
            None => f.write_str("Recorder(disabled)"),
        }
    }
}

impl Recorder {
    /// A recorder that drops every event (no API server).
    pub fn disabled() -> Recorder {
        Recorder { inner: None }
    }

    /// The cluster-mode recorder for node `node_name`, and its sink: spawn the future
    /// (`tokio::spawn`); it writes Events through `client` until every clone of the
    /// recorder is dropped and the queue is empty. Events recorded before the sink runs wait
    /// in the queue.
    pub fn new(
        client: kube::Client,
        node_name: impl Into<String>,
    ) -> (Recorder, impl Future<Output = ()> + Send + 'static) {
        let (recorder, queue) = Recorder::with_queue(node_name.into(), QUEUE_LEN);
        (recorder, sink::run(client, queue))
    }

    /// A recorder whose Events (as recorded, before correlation) arrive on the receiver,
    /// for other modules' tests. Node name `test-node`; as in cluster mode, events beyond
    /// `QUEUE_LEN` unread ones are dropped.
    #[cfg(test)]
    pub(crate) fn capturing() -> (Recorder, mpsc::Receiver<Event>) {
        Recorder::with_queue("test-node".to_string(), QUEUE_LEN)
    }

    fn with_queue(node_name: String, len: usize) -> (Recorder, mpsc::Receiver<Event>) {
        let (queue, receiver) = mpsc::channel(len);
        let inner = Inner { node_name, queue };
        (
            Recorder {
                inner: Some(Arc::new(inner)),
            },
            receiver,
        )
    }

    /// An event about a pod, or about one of its containers when `field_path` is given
    /// (upstream's `spec.containers{name}` / `spec.initContainers{name}`).
    pub fn pod(
        &self,
        pod: &Pod,
        field_path: Option<&str>,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let Some(inner) = &self.inner else {
            return;
        };
        let message = message.into();
        let meta = &pod.metadata;
        debug!(
            pod = %format_args!(
                "{}_{}({})",
                meta.name.as_deref().unwrap_or_default(),
                meta.namespace.as_deref().unwrap_or_default(),
                meta.uid.as_deref().unwrap_or_default()
            ),
            field_path = field_path.unwrap_or_default(),
            event_type = event_type.as_str(),
            reason,
            message = %message,
            "event"
        );
        inner.send(
            event::pod_reference(pod, field_path),
            event_type,
            reason,
            message,
        );
    }

    /// An event about this node.
    pub fn node(&self, event_type: EventType, reason: &str, message: impl Into<String>) {
        let Some(inner) = &self.inner else {
            return;
        };
        let message = message.into();
        debug!(
            node = %inner.node_name,
            event_type = event_type.as_str(),
            reason,
            message = %message,
            "event"
        );
        let object = event::node_reference(&inner.node_name);
        inner.send(object, event_type, reason, message);
    }
}

impl Inner {
    fn send(&self, object: ObjectReference, event_type: EventType, reason: &str, message: String) {
        let event = event::make_event(
            object,
            &self.node_name,
            event_type,
            reason,
            message,
            Timestamp::now(),
        );
        match self.queue.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(event)) => error!(
                object = %sink::describe(&event.involved_object),
                reason,
                message = event.message.as_deref().unwrap_or_default(),
                "unable to record event: too many queued events, dropped event"
            ),
            // The sink has stopped: the agent is shutting down.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}
