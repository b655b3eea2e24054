//! Events for pods and the Node (cluster mode). INTERFACE STUB shared by the cluster-mode
//! work in progress: the recorder that aggregates, rate-limits and posts Events lands with
//! the events work; until then every call is dropped.

use k8s_openapi::api::core::v1::Pod;

/// An Event's type, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Records Events. Cheap to clone; never blocks the caller (posting happens on its own
/// task). `Recorder::disabled()` is the standalone node's: it records nothing.
#[derive(Debug, Clone, Default)]
pub struct Recorder {}

impl Recorder {
    /// A recorder that drops every event (no API server).
    pub fn disabled() -> Recorder {
        Recorder {}
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
        let _ = (pod, field_path, event_type, reason, message.into());
    }

    /// An event about this node.
    pub fn node(&self, event_type: EventType, reason: &str, message: impl Into<String>) {
        let _ = (event_type, reason, message.into());
    }
}
