//! The Node object (cluster mode): registration, status and the Lease heartbeat.
//! INTERFACE STUB shared by the cluster-mode work in progress.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;

/// This node's Node object as last registered or updated (labels, taints, allocatable),
/// `None` until registration succeeded. Admission reads it.
pub type NodeView = watch::Receiver<Option<Arc<Node>>>;
