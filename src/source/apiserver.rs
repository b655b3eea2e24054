//! Pods from the API server (cluster mode): the pods bound to this node
//! (`spec.nodeName=<node>`). INTERFACE STUB shared by the cluster-mode work in progress; the
//! watcher itself lands with the source.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

/// Every pod the API server has bound to this node as last seen by the watch, mirror pods
/// included, by UID. The status sync diffs against it (an unchanged status is never
/// patched again, also after a restart) and the mirror pod manager finds the mirrors in it.
#[derive(Debug, Clone, Default)]
pub struct ApiPodsView {
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// False until the first full list arrived.
    pub synced: bool,
}

/// The source publishes each new view; readers hold a receiver.
pub type ApiPods = watch::Receiver<Arc<ApiPodsView>>;
