//! The API source on scripted watcher events (full sets, settling, mirrors, status-only
//! changes, relists) and on a mocked API server (the list and watch it asks for).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::*;

type Events = mpsc::UnboundedSender<Result<Event<Pod>, watcher::Error>>;

struct Rig {
    events: Events,
    updates: mpsc::Receiver<SourceUpdate>,
    view: ApiPods,
}

fn rig() -> Rig {
    let (events, rx) = mpsc::unbounded_channel();
    let (tx, updates) = mpsc::channel(64);
    let (view_tx, view) = watch::channel(Arc::new(ApiPodsView::default()));
    let mut source = ApiSource::new("node-a".into(), tx, view_tx);
    tokio::spawn(async move { source.run(UnboundedReceiverStream::new(rx)).await });
    Rig {
        events,
        updates,
        view,
    }
}

impl Rig {
    fn send(&self, events: impl IntoIterator<Item = Event<Pod>>) {
        for e in events {
            self.events.send(Ok(e)).expect("the source runs");
        }
    }

    /// Lets the source settle and send what it has.
    async fn settle(&self) {
        tokio::time::sleep(EVENT_SETTLE * 4).await;
    }

    fn uids_sent(update: &SourceUpdate) -> Vec<&str> {
        update
            .pods
            .iter()
            .map(|p| p.pod.metadata.uid.as_deref().unwrap())
            .collect()
    }
}

fn api_pod(uid: &str, name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "1"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn mirror_pod(uid: &str, name: &str) -> Pod {
    let mut pod = api_pod(uid, name);
    pod.metadata.annotations = Some(BTreeMap::from([
        (CONFIG_MIRROR_ANNOTATION.to_string(), "hash".to_string()),
        (CONFIG_SOURCE_ANNOTATION.to_string(), "file".to_string()),
    ]));
    pod
}

fn listed(pods: &[&Pod]) -> Vec<Event<Pod>> {
    let mut events = vec![Event::Init];
    events.extend(pods.iter().map(|p| Event::InitApply((*p).clone())));
    events.push(Event::InitDone);
    events
}

#[tokio::test(start_paused = true)]
async fn sends_the_full_set_once_listed_without_mirror_pods() {
    let mut rig = rig();
    let web = api_pod("uid-web", "web");
    let mirror = mirror_pod("uid-mirror", "etcd-node-a");
    rig.send([
        Event::Init,
        Event::InitApply(web.clone()),
        Event::InitApply(mirror.clone()),
    ]);
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    assert!(!rig.view.borrow().synced, "not synced before the list ends");

    rig.send([Event::InitDone]);
    let update = rig.updates.recv().await.unwrap();
    assert_eq!(update.source, SourceKind::Api);
    assert_eq!(Rig::uids_sent(&update), vec!["uid-web"]);
    let sent = &update.pods[0];
    assert_eq!(sent.origin, "api");
    let annotations = sent.pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[CONFIG_SOURCE_ANNOTATION], "api");
    assert!(annotations.contains_key(CONFIG_SEEN_ANNOTATION));
    // Otherwise the pod is the API's, unchanged (no static-pod defaulting).
    assert_eq!(sent.pod.spec, web.spec);
    assert_eq!(sent.pod.metadata.name, web.metadata.name);

    let view = rig.view.borrow().clone();
    assert!(view.synced);
    assert_eq!(
        view.pods.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["uid-mirror", "uid-web"]
    );
    assert_eq!(
        *view.pods["uid-mirror"], mirror,
        "the view holds the API's objects"
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_first_list_is_sent_too() {
    let mut rig = rig();
    rig.send(listed(&[]));
    let update = rig.updates.recv().await.unwrap();
    assert!(update.pods.is_empty());
    assert!(rig.view.borrow().synced);
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_events_gives_one_update() {
    let mut rig = rig();
    rig.send(listed(&[]));
    rig.updates.recv().await.unwrap();
    let pods: Vec<Pod> = (0..30)
        .map(|i| api_pod(&format!("uid-{i:02}"), &format!("p{i}")))
        .collect();
    rig.send(pods.iter().cloned().map(Event::Apply));
    rig.settle().await;
    let update = rig.updates.try_recv().expect("one update for the burst");
    assert_eq!(update.pods.len(), 30);
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    assert_eq!(rig.view.borrow().pods.len(), 30);
}

#[tokio::test(start_paused = true)]
async fn status_only_changes_update_the_view_but_not_the_desired_set() {
    let mut rig = rig();
    let web = api_pod("uid-web", "web");
    rig.send(listed(&[&web]));
    let first = rig.updates.recv().await.unwrap();
    let seen =
        first.pods[0].pod.metadata.annotations.as_ref().unwrap()[CONFIG_SEEN_ANNOTATION].clone();

    // The agent's own status patch comes back as a watch event.
    let mut running = web.clone();
    running.metadata.resource_version = Some("2".into());
    running.status.as_mut().unwrap().phase = Some("Running".into());
    rig.send([Event::Apply(running.clone())]);
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    assert_eq!(*rig.view.borrow().pods["uid-web"], running);

    // A mirror pod appearing does not change the desired set either.
    rig.send([Event::Apply(mirror_pod("uid-mirror", "etcd-node-a"))]);
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    assert_eq!(rig.view.borrow().pods.len(), 2);

    // Graceful deletion is a change: the pod is sent again with its deletionTimestamp,
    // keeping its first-seen time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut deleting = running.clone();
    deleting.metadata.resource_version = Some("3".into());
    deleting.metadata.deletion_timestamp =
        Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    rig.send([Event::Apply(deleting)]);
    let update = rig.updates.recv().await.unwrap();
    let sent = &update.pods[0].pod;
    assert!(sent.metadata.deletion_timestamp.is_some());
    assert_eq!(sent.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(
        sent.metadata.annotations.as_ref().unwrap()[CONFIG_SEEN_ANNOTATION],
        seen
    );
}

/// A readiness gate's condition set by someone else is sent on (the worker's Ready
/// condition follows it); other status changes of the same pod are not.
#[tokio::test(start_paused = true)]
async fn a_readiness_gate_condition_change_is_sent_on() {
    let mut rig = rig();
    let mut gated = api_pod("uid-web", "web");
    gated.spec.as_mut().unwrap().readiness_gates = Some(vec![serde_json::from_value(
        serde_json::json!({"conditionType": "k8s.io/gate"}),
    )
    .unwrap()]);
    rig.send(listed(&[&gated]));
    rig.updates.recv().await.unwrap();

    let mut running = gated.clone();
    running.metadata.resource_version = Some("2".into());
    running.status.as_mut().unwrap().phase = Some("Running".into());
    rig.send([Event::Apply(running.clone())]);
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));

    let mut opened = running.clone();
    opened.metadata.resource_version = Some("3".into());
    opened.status.as_mut().unwrap().conditions = Some(vec![serde_json::from_value(
        serde_json::json!({"type": "k8s.io/gate", "status": "True"}),
    )
    .unwrap()]);
    rig.send([Event::Apply(opened)]);
    let update = rig.updates.recv().await.unwrap();
    let sent = update.pods[0].pod.status.as_ref().unwrap();
    assert_eq!(sent.conditions.as_ref().unwrap()[0].status, "True");
}

#[tokio::test(start_paused = true)]
async fn deletes_and_relists_replace_the_set() {
    let mut rig = rig();
    let a = api_pod("uid-a", "a");
    let b = api_pod("uid-b", "b");
    let c = api_pod("uid-c", "c");
    rig.send(listed(&[&a, &b]));
    rig.updates.recv().await.unwrap();

    rig.send([Event::Delete(a.clone())]);
    let update = rig.updates.recv().await.unwrap();
    assert_eq!(Rig::uids_sent(&update), vec!["uid-b"]);

    // A relist after the watch expired: the old set stands until the list is complete,
    // then pods missing from it are gone.
    rig.send([Event::Init, Event::InitApply(c.clone())]);
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    assert!(rig.view.borrow().pods.contains_key("uid-b"));
    rig.send([Event::InitDone]);
    let update = rig.updates.recv().await.unwrap();
    assert_eq!(Rig::uids_sent(&update), vec!["uid-c"]);
    assert!(!rig.view.borrow().pods.contains_key("uid-b"));

    // A relist that finds the same pods sends nothing.
    rig.send(listed(&[&c]));
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
}

#[tokio::test(start_paused = true)]
async fn watch_errors_are_logged_and_the_source_goes_on() {
    let mut rig = rig();
    rig.events
        .send(Err(watcher::Error::NoResourceVersion))
        .unwrap();
    rig.settle().await;
    assert!(matches!(rig.updates.try_recv(), Err(TryRecvError::Empty)));
    rig.send(listed(&[&api_pod("uid-a", "a")]));
    let update = rig.updates.recv().await.unwrap();
    assert_eq!(Rig::uids_sent(&update), vec!["uid-a"]);
}

#[tokio::test(start_paused = true)]
async fn the_source_ends_when_the_manager_is_gone() {
    let (events, rx) = mpsc::unbounded_channel();
    let (tx, updates) = mpsc::channel(1);
    let (view_tx, _view) = watch::channel(Arc::new(ApiPodsView::default()));
    let mut source = ApiSource::new("node-a".into(), tx, view_tx);
    drop(updates);
    for e in listed(&[]) {
        events.send(Ok(e)).unwrap();
    }
    let ended = source.run(UnboundedReceiverStream::new(rx)).await;
    assert_eq!(ended, Ended::ReceiverGone);
}

/// Against a mocked API server: the watcher lists and watches all namespaces' pods with
/// the node's field selector, and the source sends what the list and the watch carried.
#[tokio::test]
async fn lists_and_watches_the_pods_bound_to_the_node() {
    use hyper::{Request, Response};
    use kube::client::Body;

    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut handle = std::pin::pin!(handle);
        let mut uris = Vec::new();
        let (request, send) = handle.next_request().await.expect("a list");
        uris.push(request.uri().to_string());
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "10"},
            "items": [api_pod("uid-a", "a"), mirror_pod("uid-m", "etcd-node-a")]
        });
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list).unwrap(),
        )));
        let (request, send) = handle.next_request().await.expect("a watch");
        uris.push(request.uri().to_string());
        let mut added = api_pod("uid-b", "b");
        added.metadata.resource_version = Some("11".into());
        let event = serde_json::json!({"type": "ADDED", "object": added});
        let mut body = serde_json::to_vec(&event).unwrap();
        body.push(b'\n');
        send.send_response(Response::new(Body::from(body)));
        uris
    });

    let client = kube::Client::new(service, "default");
    let (tx, mut updates) = mpsc::channel(8);
    let (task, view) = spawn_api_source(client, "node-a".into(), tx);
    // The list's set comes first; the watch's pod may arrive within the same settling.
    let first = updates.recv().await.unwrap();
    assert_eq!(Rig::uids_sent(&first)[0], "uid-a");
    let mut last = first;
    while Rig::uids_sent(&last).len() < 2 {
        last = updates.recv().await.unwrap();
    }
    assert_eq!(Rig::uids_sent(&last), vec!["uid-a", "uid-b"]);
    assert_eq!(view.borrow().pods.len(), 3, "the mirror pod is in the view");
    task.abort();

    let uris = server.await.unwrap();
    let selector = "fieldSelector=spec.nodeName%3Dnode-a";
    assert!(uris[0].starts_with("/api/v1/pods?"), "{}", uris[0]);
    assert!(uris[0].contains(selector), "{}", uris[0]);
    assert!(uris[1].starts_with("/api/v1/pods?"), "{}", uris[1]);
    assert!(uris[1].contains("watch=true"), "{}", uris[1]);
    assert!(uris[1].contains(selector), "{}", uris[1]);
    assert!(uris[1].contains("resourceVersion=10"), "{}", uris[1]);
}
