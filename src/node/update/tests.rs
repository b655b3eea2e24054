use super::*;
use crate::node::fake_api::{answer, client, status, ApiHandle};
use crate::node::status::tests::{config, observed};
use crate::node::status::{initial_node, set_node_status};
use serde_json::Value;

fn updater() -> (StatusUpdater, ApiHandle, watch::Receiver<Option<Arc<Node>>>) {
    let (client, api) = client();
    let (publish, view) = watch::channel(None);
    let updater = StatusUpdater {
        nodes: Api::all(client),
        cfg: Arc::new(config()),
        timeout: Duration::from_secs(10),
        last_report: None,
        publish,
        recorder: Recorder::disabled(),
        cache: None,
    };
    (updater, api, view)
}

/// The Node as the API holds it after a report of `observed`.
fn reported(seen: &Observed) -> Value {
    let cfg = config();
    let mut node = initial_node(&cfg);
    node.metadata.uid = Some("uid-1".into());
    set_node_status(&mut node, &cfg, seen, Timestamp::UNIX_EPOCH);
    serde_json::to_value(node).unwrap()
}

async fn pass(
    mut updater: StatusUpdater,
    seen: Observed,
) -> tokio::task::JoinHandle<(StatusUpdater, Result<(), NodeError>)> {
    tokio::spawn(async move {
        let result = updater.update(&seen).await;
        (updater, result)
    })
}

#[tokio::test(start_paused = true)]
async fn reports_on_change_or_when_the_report_period_went_by() {
    let (updater, mut api, view) = updater();

    // First pass: nothing reported yet, so the status is patched.
    let task = pass(updater, observed()).await;
    let registered = serde_json::to_value(initial_node(&config())).unwrap();
    let seen = answer(&mut api, 200, registered).await;
    assert_eq!(seen.method, "GET");
    assert!(
        seen.uri.starts_with("/api/v1/nodes/krs-node?") && seen.uri.contains("resourceVersion=0"),
        "the first read is from the API server's cache: {}",
        seen.uri
    );
    let seen = answer(&mut api, 200, reported(&observed())).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("PATCH", "/api/v1/nodes/krs-node/status?")
    );
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    let conditions = seen.body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 4);
    assert!(conditions
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True"));
    assert_eq!(seen.body["status"]["capacity"]["cpu"], "2");
    let (updater, result) = task.await.unwrap();
    result.unwrap();
    assert_eq!(
        view.borrow().as_ref().unwrap().metadata.uid.as_deref(),
        Some("uid-1"),
        "the Node as the API returned it is published"
    );

    // Same facts a period later: read, not patched (the pass ends after one request).
    tokio::time::advance(Duration::from_secs(10)).await;
    let task = pass(updater, observed()).await;
    assert_eq!(
        answer(&mut api, 200, reported(&observed())).await.method,
        "GET"
    );
    let (updater, result) = task.await.unwrap();
    result.unwrap();

    // Once nodeStatusReportFrequency went by, the same status is reported again.
    tokio::time::advance(Duration::from_secs(300)).await;
    let task = pass(updater, observed()).await;
    answer(&mut api, 200, reported(&observed())).await;
    let seen = answer(&mut api, 200, reported(&observed())).await;
    assert_eq!(seen.method, "PATCH");
    let (updater, result) = task.await.unwrap();
    result.unwrap();

    // A change is reported at once.
    tokio::time::advance(Duration::from_secs(10)).await;
    let mut pressed = observed();
    pressed.pressure.memory = true;
    let task = pass(updater, pressed.clone()).await;
    answer(&mut api, 200, reported(&observed())).await;
    let seen = answer(&mut api, 200, reported(&pressed)).await;
    assert_eq!(seen.method, "PATCH");
    let memory = seen.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MemoryPressure")
        .unwrap()
        .clone();
    assert_eq!(memory["status"], "True");
    assert_eq!(memory["reason"], "KubeletHasInsufficientMemory");
    task.await.unwrap().1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn retries_read_from_etcd_and_give_up_after_five() {
    let (updater, mut api, view) = updater();
    let task = pass(updater, observed()).await;
    let seen = answer(&mut api, 500, status(500, "InternalError", "boom")).await;
    assert!(seen.uri.contains("resourceVersion=0"));
    for _ in 1..UPDATE_RETRIES {
        let seen = answer(&mut api, 500, status(500, "InternalError", "boom")).await;
        assert_eq!(seen.method, "GET");
        assert!(
            !seen.uri.contains("resourceVersion"),
            "a retry reads etcd: {}",
            seen.uri
        );
    }
    let (_, result) = task.await.unwrap();
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        "node \"krs-node\": update node status exceeds retry count (5 attempts)"
    );
    assert!(view.borrow().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_os_label_removed_by_someone_is_put_back() {
    let (mut updater, mut api, _view) = updater();
    updater.last_report = Some(Instant::now());
    let task = pass(updater, observed()).await;
    let mut node = reported(&observed());
    node["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io/os");
    answer(&mut api, 200, node).await;
    let seen = answer(&mut api, 200, reported(&observed())).await;
    assert_eq!(seen.method, "PATCH");
    assert_eq!(seen.body["metadata"]["labels"]["kubernetes.io/os"], "linux");
    task.await.unwrap().1.unwrap();
}
