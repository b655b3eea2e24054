//! The core/v1 Event as the kubelet writes it (client-go's record.makeEvent with the
//! kubelet's event source): what it is about, who reports it, when, and its name.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::EventType;

/// The kubelet's component name, in `source.component` and `reportingComponent`.
pub(crate) const COMPONENT: &str = "kubelet";

/// Where an Event about an object without a namespace (the Node) is written.
const DEFAULT_NAMESPACE: &str = "default";

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The reference to a pod, or to one of its containers when `field_path` is given, as
/// client-go's reference.GetPartialReference makes it from the typed pod.
pub(crate) fn pod_reference(pod: &Pod, field_path: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: field_path.map(str::to_string),
    }
}

/// The reference the kubelet uses for its Node: the node name also stands in for the UID
/// (the Node's real UID is not known before registration), no API version, no namespace.
pub(crate) fn node_reference(node_name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".to_string()),
        name: Some(node_name.to_string()),
        uid: Some(node_name.to_string()),
        ..ObjectReference::default()
    }
}

/// `<object name>.<time in ns as hex>`: unique per object and occurrence, as upstream names
/// its Events.
pub(crate) fn event_name(object_name: &str, at: Timestamp) -> String {
    format!("{object_name}.{:x}", at.as_nanosecond())
}

/// A new Event (count 1) about `involved`, reported by the kubelet on `node_name` at `at`.
pub(crate) fn make_event(
    involved: ObjectReference,
    node_name: &str,
    event_type: EventType,
    reason: &str,
    message: String,
    at: Timestamp,
) -> Event {
    let namespace = involved
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let name = event_name(involved.name.as_deref().unwrap_or_default(), at);
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: involved,
        reason: Some(reason.to_string()),
        message: Some(message),
        first_timestamp: Some(Time(at)),
        last_timestamp: Some(Time(at)),
        count: Some(1),
        type_: Some(event_type.as_str().to_string()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: Some(node_name.to_string()),
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(node_name.to_string()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_the_object_name_and_the_time_in_hex_nanoseconds() {
        let at = Timestamp::new(1_700_000_000, 123_456_789).unwrap();
        // 1_700_000_000_123_456_789 ns.
        assert_eq!(event_name("web-0", at), "web-0.17979cfe3d85cd15");
    }

    #[test]
    fn a_node_event_is_written_to_the_default_namespace() {
        let at = Timestamp::new(1_700_000_000, 0).unwrap();
        let event = make_event(
            node_reference("n1"),
            "n1",
            EventType::Normal,
            "Starting",
            "Starting kubelet.".to_string(),
            at,
        );
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(event.involved_object.uid.as_deref(), Some("n1"));
        assert_eq!(event.involved_object.namespace, None);
        assert_eq!(event.type_.as_deref(), Some("Normal"));
    }
}
