//! Mirror pods against a mocked API server, on tokio's paused clock.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use tokio::sync::watch;

use super::MirrorPods;
use crate::pod::status_manager::StatusManager;
use crate::pod::status_sync::tests::{in_api, mock_client, next_call, pod, status, view, Handle};
use crate::source::apiserver::ApiPodsView;

fn static_pod(hash: &str) -> Pod {
    let mut p = pod(hash, "kube-web-n1", "file", status("Running", true, 100));
    p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    p.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.hash".into(), hash.into());
    p
}

/// The mirror the API would hold for `of`, under `uid`.
fn mirror(of: &Pod, uid: &str) -> Pod {
    let mut m = of.clone();
    m.metadata.uid = Some(uid.into());
    let hash = of.metadata.annotations.as_ref().unwrap()["kubernetes.io/config.hash"].clone();
    m.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.mirror".into(), hash);
    in_api(m, 5)
}

fn node() -> Arc<Node> {
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    n.metadata.uid = Some("node-uid".into());
    Arc::new(n)
}

struct Harness {
    statuses: Arc<StatusManager>,
    api: watch::Sender<Arc<ApiPodsView>>,
    node: watch::Sender<Option<Arc<Node>>>,
    handle: Handle,
}

fn start(api_pods: &[Pod], node: Option<Arc<Node>>) -> Harness {
    let (client, handle) = mock_client();
    let statuses = StatusManager::new();
    let (api, api_rx) = watch::channel(view(api_pods, true));
    let (node, node_rx) = watch::channel(node);
    tokio::spawn(MirrorPods::new(client, statuses.clone(), api_rx, node_rx).run());
    Harness {
        statuses,
        api,
        node,
        handle,
    }
}

/// Expects the creation of a mirror pod for `of`, answers it with the object under `uid`
/// and returns that object.
async fn expect_create(h: &mut Harness, of: &Pod, uid: &str) -> Pod {
    let call = next_call(&mut h.handle)
        .await
        .expect("a mirror pod creation");
    assert_eq!(call.method, "POST");
    assert_eq!(call.path, "/api/v1/namespaces/default/pods?");
    let body = &call.body;
    let hash = &of.metadata.annotations.as_ref().unwrap()["kubernetes.io/config.hash"];
    assert_eq!(body["metadata"]["name"], "kube-web-n1");
    assert_eq!(body["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(
        body["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        hash.as_str()
    );
    assert_eq!(
        body["metadata"]["annotations"]["kubernetes.io/config.source"],
        "file"
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": true}])
    );
    assert_eq!(body["spec"], serde_json::to_value(&of.spec).unwrap());
    assert!(
        body.get("status").is_none(),
        "a mirror is created without status"
    );
    assert!(body["metadata"].get("uid").is_none());
    let created = mirror(of, uid);
    call.respond(201, serde_json::to_value(&created).unwrap());
    created
}

async fn expect_delete(h: &mut Harness, uid: &str) {
    let call = next_call(&mut h.handle)
        .await
        .expect("a mirror pod deletion");
    assert_eq!(call.method, "DELETE");
    assert_eq!(call.path, "/api/v1/namespaces/default/pods/kube-web-n1?");
    assert_eq!(call.body["gracePeriodSeconds"], 0);
    assert_eq!(call.body["preconditions"], json!({"uid": uid}));
    call.respond(
        200,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    );
}

#[tokio::test(start_paused = true)]
async fn a_mirror_is_created_once_the_node_is_registered_and_again_after_deletion() {
    let mut h = start(&[], None);
    let sp = static_pod("hash-1");
    h.statuses.set(sp.clone());
    // No Node yet: its UID is needed for the owner reference.
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
    h.node.send_replace(Some(node()));
    let created = expect_create(&mut h, &sp, "m1").await;
    h.api.send_replace(view(&[created], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
    // Someone deletes the mirror: it comes back.
    h.api.send_replace(view(&[], true));
    let again = expect_create(&mut h, &sp, "m2").await;
    h.api.send_replace(view(&[again], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_mirror_with_another_hash_is_replaced() {
    let old = mirror(&static_pod("hash-1"), "m1");
    let mut h = start(&[old], Some(node()));
    let changed = static_pod("hash-2");
    h.statuses.set(changed.clone());
    expect_delete(&mut h, "m1").await;
    let created = expect_create(&mut h, &changed, "m2").await;
    h.api.send_replace(view(&[created], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

/// The node e2e MirrorPodWithGracePeriod "static pod is updated" spec: the mirror stays the
/// old pod's while the old pod stops (both are in the status manager), and is replaced once
/// it is gone.
#[tokio::test(start_paused = true)]
async fn a_mirror_waits_while_the_static_pod_it_mirrors_stops_for_its_update() {
    let sp = static_pod("hash-1");
    let old = mirror(&sp, "m1");
    let mut h = start(&[old], Some(node()));
    h.statuses.set(sp.clone());
    let updated = static_pod("hash-2");
    h.statuses.set(updated.clone());
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
    h.statuses.remove("hash-1");
    expect_delete(&mut h, "m1").await;
    expect_create(&mut h, &updated, "m2").await;
}

#[tokio::test(start_paused = true)]
async fn a_mirror_being_deleted_is_replaced() {
    let sp = static_pod("hash-1");
    let mut old = mirror(&sp, "m1");
    old.metadata.deletion_timestamp = Some(crate::pod::status::ktime(chrono::Utc::now()));
    let mut h = start(&[old], Some(node()));
    h.statuses.set(sp.clone());
    expect_delete(&mut h, "m1").await;
    expect_create(&mut h, &sp, "m2").await;
}

#[tokio::test(start_paused = true)]
async fn a_mirror_goes_with_its_static_pod() {
    let sp = static_pod("hash-1");
    let m = mirror(&sp, "m1");
    let mut h = start(&[m], Some(node()));
    h.statuses.set(sp.clone());
    h.statuses.remove("hash-1");
    expect_delete(&mut h, "m1").await;
    h.api.send_replace(view(&[], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_creation_is_retried() {
    let mut h = start(&[], Some(node()));
    let sp = static_pod("hash-1");
    h.statuses.set(sp.clone());
    let call = next_call(&mut h.handle)
        .await
        .expect("a mirror pod creation");
    call.respond_status(500, "InternalError");
    expect_create(&mut h, &sp, "m1").await;
}

#[tokio::test(start_paused = true)]
async fn api_pods_get_no_mirror() {
    let mut h = start(&[], Some(node()));
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 100)));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}
