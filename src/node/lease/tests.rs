use super::*;
use crate::node::fake_api::{answer, answer_with, client, status, ApiHandle};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(10);

fn keeper() -> (LeaseKeeper, ApiHandle) {
    let (client, api) = client();
    (
        LeaseKeeper::new(client, "krs-node".into(), 40, TIMEOUT),
        api,
    )
}

fn node_json() -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "krs-node", "uid": "node-uid"}})
}

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

#[tokio::test]
async fn renews_every_quarter_of_the_duration() {
    let (k, _api) = keeper();
    assert_eq!(k.renew_interval(), Duration::from_secs(10));
}

#[tokio::test]
async fn creates_a_missing_lease_owned_by_the_node_then_updates_it() {
    let (mut k, mut api) = keeper();
    let task = tokio::spawn(async move {
        k.sync().await;
        k
    });
    let seen = answer(
        &mut api,
        404,
        status(404, "NotFound", "leases \"krs-node\" not found"),
    )
    .await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("GET", &*format!("{LEASE_PATH}/krs-node"))
    );
    let seen = answer(&mut api, 200, node_json()).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("GET", "/api/v1/nodes/krs-node")
    );
    // The API stores the lease and returns it with a resourceVersion.
    let seen = answer_with(&mut api, 201, |body| {
        let mut stored = body.clone();
        stored["metadata"]["resourceVersion"] = json!("1");
        stored
    })
    .await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("POST", &*format!("{LEASE_PATH}?"))
    );
    let created = seen.body;
    assert_eq!(created["spec"]["holderIdentity"], "krs-node");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 40);
    assert!(created["spec"]["renewTime"].is_string());
    assert_eq!(
        created["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "krs-node", "uid": "node-uid"}])
    );
    let mut k = task.await.unwrap();
    assert!(k.latest.is_some());

    // The next renewal is a PUT of the latest lease, without reading it first.
    let task = tokio::spawn(async move {
        k.sync().await;
        k
    });
    let mut renewed = created.clone();
    renewed["metadata"]["resourceVersion"] = json!("2");
    let seen = answer(&mut api, 200, renewed).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("PUT", &*format!("{LEASE_PATH}/krs-node?"))
    );
    assert_eq!(seen.body["metadata"]["resourceVersion"], "1");
    assert_eq!(
        seen.body["metadata"]["ownerReferences"][0]["uid"],
        "node-uid"
    );
    let k = task.await.unwrap();
    assert_eq!(
        k.latest.unwrap().metadata.resource_version.as_deref(),
        Some("2")
    );
}

#[tokio::test(start_paused = true)]
async fn a_conflict_rereads_the_lease_before_updating_again() {
    let (mut k, mut api) = keeper();
    let mut stale: Lease = serde_json::from_value(json!({
        "metadata": {"name": "krs-node", "namespace": "kube-node-lease", "resourceVersion": "5",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "krs-node", "uid": "node-uid"}]},
        "spec": {"holderIdentity": "krs-node", "leaseDurationSeconds": 40}
    }))
    .unwrap();
    k.latest = Some(stale.clone());
    let task = tokio::spawn(async move {
        k.sync().await;
        k
    });
    let conflict = status(409, "Conflict", "the object has been modified");
    // The update from the latest lease conflicts; ensure reads the current one...
    let seen = answer(&mut api, 409, conflict.clone()).await;
    assert_eq!(
        (
            seen.method.as_str(),
            seen.body["metadata"]["resourceVersion"].as_str()
        ),
        ("PUT", Some("5"))
    );
    stale.metadata.resource_version = Some("7".into());
    let seen = answer(&mut api, 200, serde_json::to_value(&stale).unwrap()).await;
    assert_eq!(seen.method, "GET");
    // ...whose update conflicts again, so it is read once more...
    let seen = answer(&mut api, 409, conflict).await;
    assert_eq!(
        (
            seen.method.as_str(),
            seen.body["metadata"]["resourceVersion"].as_str()
        ),
        ("PUT", Some("7"))
    );
    stale.metadata.resource_version = Some("8".into());
    let seen = answer(&mut api, 200, serde_json::to_value(&stale).unwrap()).await;
    assert_eq!(seen.method, "GET");
    // ...and updated from that.
    let seen = answer(&mut api, 200, serde_json::to_value(&stale).unwrap()).await;
    assert_eq!(
        (
            seen.method.as_str(),
            seen.body["metadata"]["resourceVersion"].as_str()
        ),
        ("PUT", Some("8"))
    );
    let k = task.await.unwrap();
    assert!(k.latest.is_some());
}

#[tokio::test(start_paused = true)]
async fn ensure_backs_off_while_the_api_fails() {
    let (mut k, mut api) = keeper();
    let task = tokio::spawn(async move {
        k.sync().await;
        k
    });
    let started = tokio::time::Instant::now();
    for _ in 0..4 {
        let seen = answer(&mut api, 500, status(500, "InternalError", "etcd down")).await;
        assert_eq!(seen.method, "GET");
    }
    let lease = json!({"metadata": {"name": "krs-node", "namespace": "kube-node-lease", "resourceVersion": "3",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "krs-node", "uid": "u"}]},
        "spec": {"holderIdentity": "krs-node"}});
    answer(&mut api, 200, lease.clone()).await;
    let seen = answer(&mut api, 200, lease).await;
    assert_eq!(seen.method, "PUT");
    task.await.unwrap();
    // 200 + 400 + 800 + 1600 ms, doubling toward the 7 s cap.
    assert_eq!(started.elapsed(), Duration::from_millis(3000));
}
