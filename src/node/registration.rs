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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fake_api::{answer, client, status};
    use crate::node::status::tests::{config, observed};
    use crate::node::status::{initial_node, set_node_status, LABEL_OS};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn initial() -> Node {
        let cfg = config();
        let mut node = initial_node(&cfg);
        set_node_status(&mut node, &cfg, &observed(), Timestamp::UNIX_EPOCH);
        node
    }

    const TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn creates_the_node_with_its_status() {
        let (client, mut api) = client();
        let nodes: Api<Node> = Api::all(client);
        let task = tokio::spawn(async move { try_register(&nodes, &initial(), TIMEOUT).await });
        let mut created = serde_json::to_value(initial()).unwrap();
        created["metadata"]["uid"] = json!("uid-1");
        let seen = answer(&mut api, 201, created).await;
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.uri, "/api/v1/nodes?");
        assert_eq!(seen.body["metadata"]["name"], "krs-node");
        assert_eq!(
            seen.body["metadata"]["labels"]["kubernetes.io/hostname"],
            "krs-node"
        );
        assert_eq!(
            seen.body["status"]["conditions"].as_array().unwrap().len(),
            4
        );
        let node = task.await.unwrap().unwrap();
        assert_eq!(node.metadata.uid.as_deref(), Some("uid-1"));
    }

    #[tokio::test]
    async fn adopts_an_existing_node_and_fixes_its_default_labels() {
        let (client, mut api) = client();
        let nodes: Api<Node> = Api::all(client);
        let task = tokio::spawn(async move { try_register(&nodes, &initial(), TIMEOUT).await });
        let seen = answer(
            &mut api,
            409,
            status(409, "AlreadyExists", "nodes \"krs-node\" already exists"),
        )
        .await;
        assert_eq!(seen.method, "POST");

        let mut existing = serde_json::to_value(initial_node(&config())).unwrap();
        existing["metadata"]["uid"] = json!("uid-old");
        existing["metadata"]["labels"][LABEL_OS] = json!("plan9");
        existing["metadata"]["labels"]["team"] = json!("a");
        let seen = answer(&mut api, 200, existing.clone()).await;
        assert_eq!(
            (seen.method.as_str(), seen.uri.as_str()),
            ("GET", "/api/v1/nodes/krs-node")
        );

        let mut patched = existing;
        patched["metadata"]["labels"][LABEL_OS] = json!("linux");
        let seen = answer(&mut api, 200, patched).await;
        assert_eq!(seen.method, "PATCH");
        assert_eq!(seen.uri, "/api/v1/nodes/krs-node/status?");
        assert_eq!(
            seen.content_type.as_deref(),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(
            seen.body,
            json!({"metadata": {"labels": {LABEL_OS: "linux"}}})
        );
        let node = task.await.unwrap().unwrap();
        assert_eq!(
            node.metadata.uid.as_deref(),
            Some("uid-old"),
            "never a second node"
        );
    }

    #[tokio::test]
    async fn adopts_without_a_patch_when_nothing_differs() {
        let (client, mut api) = client();
        let nodes: Api<Node> = Api::all(client);
        let task = tokio::spawn(async move { try_register(&nodes, &initial(), TIMEOUT).await });
        answer(&mut api, 409, status(409, "AlreadyExists", "exists")).await;
        answer(&mut api, 200, serde_json::to_value(initial()).unwrap()).await;
        task.await.unwrap().unwrap();
        drop(api);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_with_back_off_while_the_api_fails() {
        let (client, mut api) = client();
        let nodes: Api<Node> = Api::all(client);
        let task = tokio::spawn(async move { register(&nodes, &initial(), TIMEOUT).await });
        let started = tokio::time::Instant::now();
        answer(&mut api, 500, status(500, "InternalError", "etcd down")).await;
        answer(&mut api, 503, status(503, "ServiceUnavailable", "starting")).await;
        let seen = answer(&mut api, 201, serde_json::to_value(initial()).unwrap()).await;
        assert_eq!(seen.method, "POST", "every try is a create");
        task.await.unwrap();
        // Two failures: 100 ms then 200 ms of back-off on the paused clock.
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}
