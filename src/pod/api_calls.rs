//! What the agent's pod writers (the status sync and the mirror pods) share in talking to
//! the API: the pods API of a pod's namespace, an exact deletion, the name they log, an
//! error's causes in one line, and the period of their full comparisons.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};

/// Upstream's syncPeriod: how often every status is compared with the API's copy (and the
/// mirror pods with the static ones).
pub const SYNC_PERIOD: Duration = Duration::from_secs(10);

/// Deletion without a grace period, only of this very pod (not a new one of the same name).
pub(crate) fn delete_now(pod: &Pod) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    }
}

pub(crate) fn pods_api(client: &kube::Client, pod: &Pod) -> Api<Pod> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    Api::namespaced(client.clone(), ns)
}

/// `namespace/name`, as upstream's klog.KObj.
pub(crate) fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// An error's causes, outermost first, joined by ": ".
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push(e.to_string());
        cur = e.source();
    }
    out.join(": ")
}
