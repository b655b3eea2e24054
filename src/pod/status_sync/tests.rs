//! The status sync against a mocked API server (kube over a `tower_test` service), on
//! tokio's paused clock: an idle test jumps straight to the next timer, so "no request
//! within a minute" covers several resync periods without waiting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Request, Response};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use kube::client::Body;
use serde_json::{json, Value};
use tokio::sync::watch;
use tower_test::mock;

use super::StatusSync;
use crate::pod::status::ktime;
use crate::pod::status_manager::StatusManager;
use crate::source::apiserver::ApiPodsView;

pub(crate) type Handle = mock::Handle<Request<Body>, Response<Body>>;

pub(crate) fn mock_client() -> (kube::Client, Handle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), handle)
}

/// One request as the API server saw it.
#[derive(Debug)]
pub(crate) struct Call {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub content_type: String,
    pub body: Value,
    reply: mock::SendResponse<Response<Body>>,
}

impl Call {
    pub fn respond(self, code: u16, body: Value) {
        let bytes = serde_json::to_vec(&body).unwrap();
        self.reply.send_response(
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(bytes))
                .unwrap(),
        );
    }

    pub fn respond_status(self, code: u16, reason: &str) {
        self.respond(
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "code": code, "reason": reason, "message": reason}),
        );
    }
}

/// The next request, or `None` when none comes within a (virtual) minute.
pub(crate) async fn next_call(handle: &mut Handle) -> Option<Call> {
    let (req, reply) = tokio::time::timeout(Duration::from_secs(60), handle.next_request())
        .await
        .ok()??;
    let (parts, body) = req.into_parts();
    let bytes = body.collect_bytes().await.unwrap();
    Some(Call {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        content_type: parts
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default(),
        body: if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        },
        reply,
    })
}

pub(crate) fn condition(kind: &str, status: &str, since: i64) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: status.into(),
        last_transition_time: Some(ktime(chrono::DateTime::from_timestamp(since, 0).unwrap())),
        ..Default::default()
    }
}

fn running(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: "busybox".into(),
        image_id: String::new(),
        ready: true,
        restart_count: 0,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(ktime(chrono::DateTime::from_timestamp(1000, 0).unwrap())),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn status(phase: &str, ready: bool, since: i64) -> PodStatus {
    let r = if ready { "True" } else { "False" };
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(vec![
            condition("Ready", r, since),
            condition("PodScheduled", "True", since),
        ]),
        container_statuses: Some(vec![running("app")]),
        ..Default::default()
    }
}

/// A pod as a source gives it, with `source` as its config source.
pub(crate) fn pod(uid: &str, name: &str, source: &str, status: PodStatus) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.annotations = Some(BTreeMap::from([(
        "kubernetes.io/config.source".to_string(),
        source.to_string(),
    )]));
    p.spec = Some(PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "app".into(),
            image: Some("busybox".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    p.status = Some(status);
    p
}

/// The API's copy of a pod: what the source gave plus a resource version.
pub(crate) fn in_api(mut p: Pod, rv: u64) -> Pod {
    p.metadata.resource_version = Some(rv.to_string());
    p
}

pub(crate) fn view(pods: &[Pod], synced: bool) -> Arc<ApiPodsView> {
    Arc::new(ApiPodsView {
        pods: pods
            .iter()
            .map(|p| (p.metadata.uid.clone().unwrap(), Arc::new(p.clone())))
            .collect(),
        synced,
    })
}

struct Harness {
    statuses: Arc<StatusManager>,
    api: watch::Sender<Arc<ApiPodsView>>,
    handle: Handle,
}

fn start(api_pods: &[Pod], synced: bool) -> Harness {
    let (client, handle) = mock_client();
    let statuses = StatusManager::new();
    let (api, rx) = watch::channel(view(api_pods, synced));
    tokio::spawn(StatusSync::new(client, statuses.clone(), rx).run());
    Harness {
        statuses,
        api,
        handle,
    }
}

fn phase_of(body: &Value) -> Option<&str> {
    body["status"]["phase"].as_str()
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_status_is_not_patched_after_a_restart() {
    // The API holds the status from before the restart; the restarted worker computes the
    // same status with new condition times.
    let before = pod("u1", "web", "api", status("Running", true, 100));
    let mut h = start(&[in_api(before, 7)], false);
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 5000)));
    // Nothing is written before the first full list either.
    h.api.send_modify(|v| Arc::make_mut(v).synced = true);
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_start_time_derived_anew_after_a_restart_does_not_move_the_apis() {
    let at = |secs| Some(ktime(chrono::DateTime::from_timestamp(secs, 0).unwrap()));
    let mut before = status("Running", true, 100);
    before.start_time = at(1000);
    let mut h = start(&[in_api(pod("u1", "web", "api", before), 7)], true);
    // The restarted worker finds the pod's records a second later than it first saw the pod.
    let mut again = status("Running", true, 100);
    again.start_time = at(1001);
    h.statuses.set(pod("u1", "web", "api", again));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "the start time was rewritten: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn nothing_is_written_before_the_view_is_synced() {
    let mut h = start(&[], false);
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 100)));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_changed_status_is_patched_once_with_the_latest() {
    let api_pod = in_api(pod("u1", "web", "api", status("Pending", false, 100)), 7);
    let mut h = start(std::slice::from_ref(&api_pod), true);
    // Two changes before the sync runs: only the latest goes out.
    h.statuses
        .set(pod("u1", "web", "api", status("Running", false, 200)));
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 300)));
    let call = next_call(&mut h.handle).await.expect("a status patch");
    assert_eq!(call.method, "PATCH");
    assert_eq!(call.path, "/api/v1/namespaces/default/pods/web/status?");
    assert_eq!(call.content_type, "application/strategic-merge-patch+json");
    assert_eq!(call.body["metadata"], json!({"uid": "u1"}));
    assert_eq!(phase_of(&call.body), Some("Running"));
    assert_eq!(
        call.body["status"]["conditions"],
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:05:00Z"}])
    );
    let mut updated = api_pod.clone();
    updated.status = Some(status("Running", true, 300));
    updated.metadata.resource_version = Some("8".into());
    call.respond(200, serde_json::to_value(&updated).unwrap());
    // The watch then shows the patched pod; nothing more is sent, resyncs included.
    h.api.send_replace(view(&[updated], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_patch_is_retried_and_a_missing_pod_is_not() {
    let api_pod = in_api(pod("u1", "web", "api", status("Pending", false, 100)), 7);
    let mut h = start(&[api_pod], true);
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 200)));
    let first = next_call(&mut h.handle).await.expect("a status patch");
    let body = first.body.clone();
    first.respond_status(500, "InternalError");
    let second = next_call(&mut h.handle).await.expect("the patch again");
    assert_eq!((second.method.as_str(), &second.body), ("PATCH", &body));
    second.respond_status(404, "NotFound");
    // Gone: not retried, not at the resyncs either (the watch still shows the pod).
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_uid_mismatch_drops_the_status() {
    let api_pod = in_api(pod("u1", "web", "api", status("Pending", false, 100)), 7);
    let mut h = start(&[api_pod], true);
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 200)));
    let call = next_call(&mut h.handle).await.expect("a status patch");
    // What kube-apiserver 1.34 answers when the pod of that name has another UID.
    call.respond(
        422,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
               "reason": "Invalid",
               "message": "Pod \"web\" is invalid: metadata.uid: Invalid value: \"u1\": field is immutable",
               "details": {"name": "web", "kind": "Pod", "causes": [
                   {"reason": "FieldValueInvalid", "message": "Invalid value: \"u1\": field is immutable",
                    "field": "metadata.uid"}]}}),
    );
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_terminated_pod_gets_its_final_status_then_is_deleted() {
    let mut deleting = in_api(pod("u1", "web", "api", status("Running", true, 100)), 7);
    deleting.metadata.deletion_timestamp = Some(ktime(chrono::Utc::now()));
    let mut h = start(&[deleting.clone()], true);
    let mut desired = deleting.clone();
    desired.metadata.resource_version = None;
    // The worker's last status still shows the container running (it was stopped without
    // a final look); it finishes and goes away before the sync saw that status.
    h.statuses.set(desired);
    h.statuses.remove("u1");
    let patch = next_call(&mut h.handle).await.expect("the final status");
    assert_eq!(patch.method, "PATCH");
    assert_eq!(patch.path, "/api/v1/namespaces/default/pods/web/status?");
    assert_eq!(phase_of(&patch.body), Some("Failed"));
    let state = &patch.body["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(state["reason"], "ContainerStatusUnknown");
    assert_eq!(state["exitCode"], 137);
    let mut done = deleting.clone();
    done.status = Some(PodStatus {
        phase: Some("Failed".into()),
        ..Default::default()
    });
    done.metadata.resource_version = Some("8".into());
    patch.respond(200, serde_json::to_value(&done).unwrap());
    let delete = next_call(&mut h.handle).await.expect("the deletion");
    assert_eq!(delete.method, "DELETE");
    assert_eq!(delete.path, "/api/v1/namespaces/default/pods/web?");
    assert_eq!(delete.body["gracePeriodSeconds"], 0);
    assert_eq!(delete.body["preconditions"], json!({"uid": "u1"}));
    delete.respond(200, serde_json::to_value(&done).unwrap());
    h.api.send_replace(view(&[], true));
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_not_being_deleted_is_not_deleted_when_it_leaves() {
    let api_pod = in_api(pod("u1", "web", "api", status("Succeeded", false, 100)), 7);
    let mut h = start(&[api_pod], true);
    h.statuses
        .set(pod("u1", "web", "api", status("Succeeded", false, 100)));
    h.statuses.remove("u1");
    let call = next_call(&mut h.handle).await;
    assert!(call.is_none(), "unexpected request: {call:?}");
}

fn static_and_mirror() -> (Pod, Pod) {
    let mut static_pod = pod(
        "static-1",
        "kube-web-n1",
        "file",
        status("Running", true, 100),
    );
    static_pod
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.hash".into(), "static-1".into());
    let mut mirror = static_pod.clone();
    mirror.metadata.uid = Some("mirror-1".into());
    mirror
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/config.mirror".into(), "static-1".into());
    mirror.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
    (static_pod, in_api(mirror, 3))
}

#[tokio::test(start_paused = true)]
async fn a_recreated_mirror_gets_the_status_again() {
    let (static_pod, mirror) = static_and_mirror();
    let mut h = start(std::slice::from_ref(&mirror), true);
    h.statuses.set(static_pod);
    let call = next_call(&mut h.handle).await.expect("a status patch");
    let mut patched = mirror.clone();
    patched.status = Some(status("Running", true, 100));
    patched.metadata.resource_version = Some("4".into());
    call.respond(200, serde_json::to_value(&patched).unwrap());
    h.api.send_replace(view(&[patched], true));
    // The mirror is deleted and made again (by the mirror task): a new UID, no status.
    let mut again = mirror.clone();
    again.metadata.uid = Some("mirror-2".into());
    again.metadata.resource_version = Some("9".into());
    h.api.send_replace(view(&[again], true));
    let call = next_call(&mut h.handle).await.expect("a status patch");
    assert_eq!(
        call.path,
        "/api/v1/namespaces/default/pods/kube-web-n1/status?"
    );
    assert_eq!(call.body["metadata"], json!({"uid": "mirror-2"}));
    assert_eq!(phase_of(&call.body), Some("Running"));
}

#[tokio::test(start_paused = true)]
async fn a_static_pods_status_lands_on_its_mirror() {
    let (static_pod, mirror) = static_and_mirror();
    let mut h = start(&[mirror], true);
    h.statuses.set(static_pod);
    let call = next_call(&mut h.handle).await.expect("a status patch");
    assert_eq!(call.method, "PATCH");
    assert_eq!(
        call.path,
        "/api/v1/namespaces/default/pods/kube-web-n1/status?"
    );
    assert_eq!(call.body["metadata"], json!({"uid": "mirror-1"}));
    assert_eq!(phase_of(&call.body), Some("Running"));
}

#[tokio::test(start_paused = true)]
async fn a_condition_another_controller_added_is_kept() {
    let mut api_status = status("Running", false, 100);
    api_status
        .conditions
        .as_mut()
        .unwrap()
        .push(condition("example.com/Gate", "True", 50));
    let api_pod = in_api(pod("u1", "web", "api", api_status), 7);
    let mut h = start(&[api_pod], true);
    h.statuses
        .set(pod("u1", "web", "api", status("Running", true, 200)));
    let call = next_call(&mut h.handle).await.expect("a status patch");
    assert_eq!(
        call.body["status"]["conditions"],
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:03:20Z"}])
    );
    assert_eq!(
        call.body["status"]["$setElementOrder/conditions"],
        json!([{"type": "example.com/Gate"}, {"type": "Ready"}, {"type": "PodScheduled"}])
    );
}
