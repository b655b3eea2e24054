//! Registering the Node (upstream's registerWithAPIServer): create it; when it exists
//! already, adopt it (never a second one) and reconcile its default labels and the
//! attach/detach annotation. Retried with a doubling back-off capped at 7 s while the API
//! server does not answer.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::{info, warn};

use super::status::{reconcile_existing, status_patch};
use super::NodeError;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Upstream's cap on the registration back-off.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(7);

/// One attempt: the Node as the API holds it afterwards.
pub(crate) async fn try_register(
    nodes: &Api<Node>,
    initial: &Node,
    timeout: Duration,
) -> Result<Node, NodeError> {
    let name = initial.metadata.name.clone().unwrap_or_default();
    let created = tokio::time::timeout(timeout, nodes.create(&PostParams::default(), initial))
        .await
        .map_err(|_| NodeError::Timeout {
            node: name.clone(),
            op: "create",
        })?;
    let error = match created {
        Ok(node) => {
            info!(node = %name, "successfully registered node");
            return Ok(node);
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => status,
        Err(source) => {
            return Err(NodeError::Api {
                node: name,
                op: "create",
                source,
            })
        }
    };
    info!(node = %name, reason = %error.reason, "node already exists; adopting it");
    let mut existing = tokio::time::timeout(timeout, nodes.get(&name))
        .await
        .map_err(|_| NodeError::Timeout {
            node: name.clone(),
            op: "get",
        })?
        .map_err(|source| NodeError::Api {
            node: name.clone(),
            op: "get",
            source,
        })?;
    let original = existing.clone();
    if !reconcile_existing(&mut existing, initial) {
        return Ok(existing);
    }
    let mut patch = status_patch(&original, &existing);
    // Only metadata changed here; the status is the update loop's.
    if let Some(p) = patch.as_object_mut() {
        p.remove("status");
    }
    tokio::time::timeout(
        timeout,
        nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)),
    )
    .await
    .map_err(|_| NodeError::Timeout {
        node: name.clone(),
        op: "patch status",
    })?
    .map_err(|source| NodeError::Api {
        node: name,
        op: "patch status",
        source,
    })
}

/// Registers until it succeeds, backing off 100 ms, 200 ms, ... up to 7 s between tries.
pub(crate) async fn register(nodes: &Api<Node>, initial: &Node, timeout: Duration) -> Node {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match try_register(nodes, initial, timeout).await {
            Ok(node) => return node,
            Err(e) => {
                warn!(error = %e, retry_in = ?backoff, "unable to register node with API server");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
