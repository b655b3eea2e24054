//! The recorder and its sink against a mocked API server (a tower_test service standing in
//! for the apiserver's events endpoints), on tokio's paused clock.

use std::collections::HashMap;

use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::{self, SendResponse};

use super::correlator::{SPAM_BURST, SPAM_REFILL};
use super::sink::MAX_TRIES;
use super::{EventType, Recorder, QUEUE_LEN};

type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// One request the sink made.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

/// The events endpoints over the mock: keeps what was created so patches can be answered
/// (or refused with 404 when the Event is not there) as the apiserver would.
struct FakeApi {
    handle: Handle,
    store: HashMap<String, Value>,
    resource_version: u64,
}

impl FakeApi {
    fn new() -> (kube::Client, FakeApi) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let api = FakeApi {
            handle,
            store: HashMap::new(),
            resource_version: 0,
        };
        (kube::Client::new(service, "default"), api)
    }

    async fn request(&mut self) -> (Seen, SendResponse<Response<Body>>) {
        let (request, send) = self
            .handle
            .next_request()
            .await
            .expect("the sink made no further request");
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.expect("request body").to_bytes();
        let seen = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            content_type: parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        (seen, send)
    }

    /// Answers as the apiserver: a create stores the Event, a patch merges into a stored one.
    fn answer(&mut self, seen: &Seen, send: SendResponse<Response<Body>>) {
        self.resource_version += 1;
        let rv = self.resource_version.to_string();
        match seen.method.as_str() {
            "POST" => {
                let mut stored = seen.body.clone();
                stored["metadata"]["resourceVersion"] = json!(rv);
                let key = format!(
                    "{}/{}",
                    seen.path,
                    stored["metadata"]["name"].as_str().unwrap()
                );
                self.store.insert(key, stored.clone());
                send.send_response(reply(StatusCode::CREATED, &stored));
            }
            "PATCH" => {
                let (collection, _) = seen.path.rsplit_once('/').unwrap();
                let name = seen.path.rsplit('/').next().unwrap();
                match self.store.get_mut(&format!("{collection}/{name}")) {
                    Some(stored) => {
                        for (field, value) in seen.body.as_object().unwrap() {
                            stored[field] = value.clone();
                        }
                        stored["metadata"]["resourceVersion"] = json!(rv);
                        send.send_response(reply(StatusCode::OK, stored));
                    }
                    None => send.send_response(status(404, "NotFound", None)),
                }
            }
            other => panic!("unexpected {other} {}", seen.path),
        }
    }

    /// Takes the next request and answers it as the apiserver would.
    async fn serve(&mut self) -> Seen {
        let (seen, send) = self.request().await;
        self.answer(&seen, send);
        seen
    }

    fn forget_all(&mut self) {
        self.store.clear();
    }
}

fn reply(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn status(code: u16, reason: &str, cause: Option<&str>) -> Response<Body> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": format!("refused: {reason}"),
        "reason": reason,
        "code": code,
    });
    if let Some(cause) = cause {
        body["details"] =
            json!({ "causes": [{ "reason": cause, "message": "namespace is terminating" }] });
    }
    reply(StatusCode::from_u16(code).unwrap(), &body)
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "web",
            "namespace": "team",
            "uid": "7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b",
            "resourceVersion": "812",
        },
        "spec": { "containers": [{ "name": "app", "image": "nginx" }] },
    }))
    .unwrap()
}

fn start(node: &str) -> (Recorder, FakeApi) {
    let (client, api) = FakeApi::new();
    let (recorder, sink) = Recorder::new(client, node);
    tokio::spawn(sink);
    (recorder, api)
}

#[tokio::test(start_paused = true)]
async fn a_container_event_posts_the_kubelets_event_to_the_pods_namespace() {
    let (recorder, mut api) = start("n1");
    recorder.pod(
        &pod(),
        Some("spec.containers{app}"),
        EventType::Normal,
        "Pulling",
        "Pulling image \"nginx\"",
    );
    let seen = api.serve().await;

    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/api/v1/namespaces/team/events");
    let mut body = seen.body;
    // The name and times come from the wall clock: their shape is checked, then they are
    // taken out so the rest compares whole.
    let name = body["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("name")
        .unwrap();
    let suffix = name.as_str().unwrap().strip_prefix("web.").unwrap();
    assert!(
        !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_hexdigit()),
        "{name}"
    );
    let first = body
        .as_object_mut()
        .unwrap()
        .remove("firstTimestamp")
        .unwrap();
    let last = body
        .as_object_mut()
        .unwrap()
        .remove("lastTimestamp")
        .unwrap();
    assert_eq!(first, last);
    assert!(first.as_str().unwrap().ends_with('Z'), "{first}");
    assert_eq!(
        body,
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "namespace": "team" },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": "team",
                "name": "web",
                "uid": "7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b",
                "resourceVersion": "812",
                "fieldPath": "spec.containers{app}",
            },
            "reason": "Pulling",
            "message": "Pulling image \"nginx\"",
            "count": 1,
            "type": "Normal",
            "source": { "component": "kubelet", "host": "n1" },
            "reportingComponent": "kubelet",
            "reportingInstance": "n1",
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_event_goes_to_the_default_namespace_about_the_node() {
    let (recorder, mut api) = start("n1");
    recorder.node(
        EventType::Warning,
        "InvalidDiskCapacity",
        "invalid capacity 0 on image filesystem",
    );
    let seen = api.serve().await;
    assert_eq!(seen.path, "/api/v1/namespaces/default/events");
    assert_eq!(
        seen.body["involvedObject"],
        json!({ "kind": "Node", "name": "n1", "uid": "n1" })
    );
    assert_eq!(seen.body["type"], "Warning");
    assert_eq!(seen.body["metadata"]["namespace"], "default");
}

#[tokio::test(start_paused = true)]
async fn a_repeat_patches_count_and_last_time_of_the_first_event() {
    let (recorder, mut api) = start("n1");
    let back_off = || {
        recorder.pod(
            &pod(),
            Some("spec.containers{app}"),
            EventType::Warning,
            "BackOff",
            "Back-off restarting failed container app in pod web_team(7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b)",
        )
    };
    back_off();
    let created = api.serve().await;
    back_off();
    let patched = api.serve().await;

    let name = created.body["metadata"]["name"].as_str().unwrap();
    assert_eq!(patched.method, "PATCH");
    assert_eq!(
        patched.path,
        format!("/api/v1/namespaces/team/events/{name}")
    );
    assert_eq!(
        patched.content_type,
        "application/strategic-merge-patch+json"
    );
    let mut fields: Vec<&String> = patched.body.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(fields, ["count", "lastTimestamp", "message"]);
    assert_eq!(patched.body["count"], 2);
    assert_eq!(patched.body["message"], created.body["message"]);

    back_off();
    let again = api.serve().await;
    assert_eq!(again.path, patched.path);
    assert_eq!(again.body["count"], 3);
}

#[tokio::test(start_paused = true)]
async fn a_repeat_of_an_expired_event_creates_it_again_with_its_count() {
    let (recorder, mut api) = start("n1");
    recorder.node(
        EventType::Normal,
        "NodeReady",
        "Node n1 status is now: NodeReady",
    );
    let created = api.serve().await;
    // The apiserver's TTL removed it.
    api.forget_all();
    recorder.node(
        EventType::Normal,
        "NodeReady",
        "Node n1 status is now: NodeReady",
    );
    let patch = api.serve().await;
    assert_eq!(patch.method, "PATCH");
    let recreated = api.serve().await;
    assert_eq!(recreated.method, "POST");
    assert_eq!(recreated.path, "/api/v1/namespaces/default/events");
    assert_eq!(
        recreated.body["metadata"]["name"],
        created.body["metadata"]["name"]
    );
    assert_eq!(recreated.body["count"], 2);
    assert_eq!(recreated.body["metadata"].get("resourceVersion"), None);
    assert_eq!(
        recreated.body["firstTimestamp"],
        created.body["firstTimestamp"]
    );
}

#[tokio::test(start_paused = true)]
async fn eleven_similar_events_are_combined() {
    let (recorder, mut api) = start("n1");
    let failed = |i: usize| {
        recorder.pod(
            &pod(),
            Some("spec.containers{app}"),
            EventType::Warning,
            "Failed",
            format!("Error: failure {i}"),
        )
    };
    for i in 0..9 {
        failed(i);
        let seen = api.serve().await;
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.body["message"], format!("Error: failure {i}"));
    }
    failed(9);
    let combined = api.serve().await;
    assert_eq!(combined.method, "POST");
    assert_eq!(
        combined.body["message"],
        "(combined from similar events): Error: failure 9"
    );
    assert_eq!(combined.body["reason"], "Failed");
    assert_eq!(combined.body["count"], 1);

    failed(10);
    let counted = api.serve().await;
    assert_eq!(counted.method, "PATCH");
    let name = combined.body["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        counted.path,
        format!("/api/v1/namespaces/team/events/{name}")
    );
    assert_eq!(counted.body["count"], 2);
    assert_eq!(
        counted.body["message"],
        "(combined from similar events): Error: failure 10"
    );
}

#[tokio::test(start_paused = true)]
async fn the_26th_event_about_an_object_is_dropped_and_one_more_passes_after_five_minutes() {
    let (recorder, mut api) = start("n1");
    let event = |reason: String| {
        recorder.pod(&pod(), None, EventType::Normal, &reason, "m");
    };
    for i in 0..SPAM_BURST {
        event(format!("Reason{i}"));
        let seen = api.serve().await;
        assert_eq!(seen.body["reason"], format!("Reason{i}"));
    }
    event("Dropped".to_string());
    // The sink works in order: the node event's request coming next shows the pod's was
    // never sent (another object has its own bucket).
    recorder.node(EventType::Normal, "Marker", "m");
    let next = api.serve().await;
    assert_eq!(next.body["reason"], "Marker");

    tokio::time::advance(SPAM_REFILL).await;
    event("Refilled".to_string());
    event("DroppedAgain".to_string());
    recorder.node(EventType::Normal, "Marker2", "m");
    assert_eq!(api.serve().await.body["reason"], "Refilled");
    assert_eq!(api.serve().await.body["reason"], "Marker2");
}

#[tokio::test(start_paused = true)]
async fn a_transport_failure_is_tried_again_up_to_the_limit() {
    let (recorder, mut api) = start("n1");
    recorder.node(EventType::Normal, "Starting", "Starting kubelet.");
    for _ in 0..MAX_TRIES {
        let (seen, send) = api.request().await;
        assert_eq!(seen.body["reason"], "Starting");
        send.send_error(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
    }
    // Given up after the last try: the next request is the next event.
    recorder.node(
        EventType::Normal,
        "NodeReady",
        "Node n1 status is now: NodeReady",
    );
    assert_eq!(api.serve().await.body["reason"], "NodeReady");

    // A try that succeeds ends the retries, and the event counts as written.
    recorder.node(EventType::Normal, "Rebooted", "Node n1 has been rebooted");
    let (_, send) = api.request().await;
    send.send_error(std::io::Error::other("connection reset"));
    let written = api.serve().await;
    assert_eq!(written.body["reason"], "Rebooted");
    recorder.node(EventType::Normal, "Rebooted", "Node n1 has been rebooted");
    let repeat = api.serve().await;
    assert_eq!(repeat.method, "PATCH");
    assert_eq!(repeat.body["count"], 2);
}

#[tokio::test(start_paused = true)]
async fn an_event_in_a_terminating_namespace_is_not_tried_again() {
    let (recorder, mut api) = start("n1");
    recorder.pod(
        &pod(),
        None,
        EventType::Normal,
        "Killing",
        "Stopping container app",
    );
    let (_, send) = api.request().await;
    send.send_response(status(403, "Forbidden", Some("NamespaceTerminating")));
    recorder.node(EventType::Normal, "Marker", "m");
    assert_eq!(api.serve().await.body["reason"], "Marker");
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_new_events_without_waiting() {
    let (client, mut api) = FakeApi::new();
    let (recorder, sink) = Recorder::new(client, "n1");
    tokio::spawn(sink);
    recorder.node(EventType::Normal, "Held", "the sink waits on this one");
    // The sink holds the first event in its unanswered request; the queue behind it fills.
    let (held, send) = api.request().await;
    assert_eq!(held.body["reason"], "Held");
    for i in 0..=QUEUE_LEN {
        // Distinct objects, so the spam filter lets every queued one through.
        let mut p = pod();
        p.metadata.name = Some(format!("p{i}"));
        recorder.pod(&p, None, EventType::Normal, "Queued", "m");
    }
    api.answer(&held, send);
    for i in 0..QUEUE_LEN {
        let seen = api.serve().await;
        assert_eq!(seen.body["involvedObject"]["name"], format!("p{i}"));
    }
    // The one past the queue's length was dropped: the next request is a later event.
    recorder.node(EventType::Normal, "Marker", "m");
    assert_eq!(api.serve().await.body["reason"], "Marker");
}

#[tokio::test]
async fn the_capturing_recorder_hands_over_events_as_recorded() {
    let (recorder, mut events) = Recorder::capturing();
    recorder.clone().pod(
        &pod(),
        Some("spec.initContainers{init}"),
        EventType::Warning,
        "Failed",
        "Error: ErrImagePull",
    );
    let event = events.recv().await.unwrap();
    assert_eq!(
        event.involved_object.field_path.as_deref(),
        Some("spec.initContainers{init}")
    );
    assert_eq!(event.reason.as_deref(), Some("Failed"));
    assert_eq!(event.source.unwrap().host.as_deref(), Some("test-node"));
}
