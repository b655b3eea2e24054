//! The manager's bookkeeping: admission against the Node, pods being deleted, pods that
//! already ended, and the API source among the sources it waits for. Workers are stood in
//! for by handles the tests hold where a running worker would only get in the way.

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use super::*;
use crate::config::Config;
use crate::runtime::events::OomSeen;
use crate::runtime::fake::FakeRuntime;
use crate::source::SourcedPod;
use crate::vocabulary::pod_source::CONFIG_SOURCE_ANNOTATION;

fn shared(dir: &std::path::Path) -> Arc<Shared> {
    shared_with(dir, |_| {})
}

fn shared_with(dir: &std::path::Path, tune: impl FnOnce(&mut Config)) -> Arc<Shared> {
    let oom_seen = OomSeen::default();
    let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
    worker::tests::test_shared(
        dir,
        fake,
        oom_seen,
        tune,
        crate::events::Recorder::disabled(),
    )
}

fn api_pod(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid,
                     "annotations": {CONFIG_SOURCE_ANNOTATION: "api"}},
        "spec": {"nodeName": "node-a", "hostNetwork": true,
                 "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn deleting(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    pod.metadata.deletion_grace_period_seconds = Some(30);
    pod
}

fn api_update(pods: &[&Pod]) -> SourceUpdate {
    SourceUpdate {
        source: SourceKind::Api,
        pods: pods
            .iter()
            .map(|p| SourcedPod {
                pod: (*p).clone(),
                origin: "api".into(),
            })
            .collect(),
    }
}

/// Stands in for a running worker of `pod`: what the manager sends it stays observable.
fn hold_worker(m: &mut PodManager, pod: &Pod) -> watch::Receiver<Option<Arc<Pod>>> {
    let (tx, rx) = watch::channel(Some(Arc::new(pod.clone())));
    let uid = pod.metadata.uid.clone().unwrap();
    m.pods.set(
        uid,
        PodState::Working(WorkerHandle {
            desired: tx,
            wake: Arc::new(Notify::new()),
            removals: Default::default(),
            static_pod: Some(false),
        }),
    );
    rx
}

/// `pod`'s worker ended, leaving this of it.
fn done(pod: &Pod, cleanup: Cleanup) -> WorkerDone {
    WorkerDone {
        pod: pod_ref(pod),
        cleanup,
    }
}

/// The pod came back while its worker stopped it (so the worker kept its containers for the
/// restart), then went away again before the worker finished: a worker follows that removes
/// what was kept, instead of nothing ever doing so.
#[tokio::test(start_paused = true)]
async fn a_pod_gone_again_after_its_worker_kept_it_gets_a_worker_that_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let pod = api_pod("uid-a");
    let old = hold_worker(&mut m, &pod);
    m.apply(api_update(&[])).await;
    assert!(old.borrow().is_none());

    m.worker_done(done(&pod, Cleanup::Kept));
    assert!(
        old.has_changed().is_err(),
        "the finished worker's handle is dropped"
    );
    let new = m
        .pods
        .worker("uid-a")
        .expect("a worker to remove what was kept");
    assert!(
        new.desired.borrow().is_none(),
        "it removes the pod, it does not start it"
    );

    // A worker that removed everything is not followed by another.
    m.pods.worker("uid-a").unwrap().desired.send_replace(None);
    m.worker_done(done(&pod, Cleanup::Removed));
    assert!(m.pods.worker("uid-a").is_none());
    assert!(m.pods.count(|s| matches!(s, PodState::Finished)) == 0);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_whose_worker_finished_is_not_started_again_while_listed() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let pod = api_pod("uid-a");
    let seen = hold_worker(&mut m, &pod);

    // The API marks the pod deleted: the worker gets the pod with its deletionTimestamp.
    let gone = deleting(pod.clone());
    m.apply(api_update(&[&gone])).await;
    let sent = seen.borrow().clone().expect("the worker still has its pod");
    assert!(sent.metadata.deletion_timestamp.is_some());

    // The worker stopped the pod and finished; the API still lists it until the status sync
    // deletes it, and any update meanwhile (here, the same set again) starts nothing.
    m.worker_done(done(&pod, Cleanup::Removed));
    assert!(m.pods.worker("uid-a").is_none());
    m.apply(api_update(&[&gone])).await;
    assert!(
        m.pods.worker("uid-a").is_none(),
        "no new worker for a finished deleted pod"
    );
    assert!(m.pods.is("uid-a", |s| matches!(s, PodState::Finished)));

    // Once the API drops it, the UID is forgotten.
    m.apply(api_update(&[])).await;
    assert!(m.pods.count(|s| matches!(s, PodState::Finished)) == 0);
}

/// A pod removed from its source and added back (same UID) while its worker was stopping
/// it: the finished worker is replaced by a new one for the pod, not left as a dead handle
/// that no later update would replace.
#[tokio::test(start_paused = true)]
async fn a_pod_wanted_again_when_its_worker_finishes_gets_a_new_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let pod = api_pod("uid-a");
    let old = hold_worker(&mut m, &pod);
    m.apply(api_update(&[])).await;
    assert!(
        old.borrow().is_none(),
        "the worker was told to stop the pod"
    );
    m.apply(api_update(&[&pod])).await;
    assert!(
        old.borrow().is_some(),
        "and then that the pod is wanted again"
    );

    m.worker_done(done(&pod, Cleanup::Removed));
    assert!(
        old.has_changed().is_err(),
        "the finished worker's handle is dropped"
    );
    let new = m.pods.worker("uid-a").expect("a new worker for the pod");
    assert_eq!(new.desired.borrow().as_deref(), Some(&pod));
    assert!(m.pods.count(|s| matches!(s, PodState::Finished)) == 0);
}

#[tokio::test(start_paused = true)]
async fn admission_refuses_against_the_node_and_reports_the_pod_failed() {
    let dir = tempfile::tempdir().unwrap();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-a", "labels": {"disk": "hdd"}},
        "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}
    }))
    .unwrap();
    let (_node_tx, view) = watch::channel(Some(Arc::new(node)));
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]).with_node(view);
    let mut pod = api_pod("uid-a");
    pod.spec.as_mut().unwrap().node_selector =
        Some(BTreeMap::from([("disk".to_string(), "ssd".to_string())]));
    m.apply(api_update(&[&pod])).await;
    assert!(m.pods.worker("uid-a").is_none());
    let shown = m
        .shared
        .statuses
        .get("uid-a")
        .expect("the refused pod's status");
    let status = shown.pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("NodeAffinity"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
    );

    // It stays refused on later updates, and its status goes when the API drops it.
    m.apply(api_update(&[&pod])).await;
    assert!(m.pods.worker("uid-a").is_none());
    m.apply(api_update(&[])).await;
    assert!(m.shared.statuses.get("uid-a").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_already_ended_is_not_started() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let mut done = api_pod("uid-done");
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    m.apply(api_update(&[&done])).await;
    assert!(m.pods.worker("uid-done").is_none());
    assert!(m.shared.statuses.get("uid-done").is_none());
    m.apply(api_update(&[&done])).await;
    assert!(m.pods.worker("uid-done").is_none());
}

#[tokio::test(start_paused = true)]
async fn orphans_wait_for_the_api_sources_first_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::File, SourceKind::Api]);
    m.pods.set(
        "orphan-uid".into(),
        PodState::Orphan(PodRef {
            uid: "orphan-uid".into(),
            name: "old".into(),
            namespace: "default".into(),
        }),
    );
    m.apply(SourceUpdate {
        source: SourceKind::File,
        pods: vec![],
    })
    .await;
    assert!(
        m.pods.orphan("orphan-uid").is_some(),
        "the API has not reported yet"
    );
    assert!(m.pods.worker("orphan-uid").is_none());
    // The API's first set claims nothing: the orphan is stopped now.
    m.apply(api_update(&[])).await;
    assert!(m.pods.orphans().next().is_none());
    assert!(m.pods.worker("orphan-uid").is_some());
    assert!(m
        .pods
        .worker("orphan-uid")
        .unwrap()
        .desired
        .borrow()
        .is_none());
}

#[tokio::test(start_paused = true)]
async fn refused_or_ended_pods_that_get_deleted_get_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let shared = shared_with(dir.path(), |cfg| cfg.max_pods = 1);
    let mut m = PodManager::new(shared, &[SourceKind::Api]);
    let first = api_pod("uid-first");
    let _held = hold_worker(&mut m, &first);
    let refused = api_pod("uid-refused");
    let mut ended = api_pod("uid-ended");
    ended.status.as_mut().unwrap().phase = Some("Failed".into());
    m.apply(api_update(&[&first, &refused, &ended])).await;
    assert_eq!(
        m.shared
            .statuses
            .get("uid-refused")
            .and_then(|v| v.pod.status.clone())
            .and_then(|s| s.reason),
        Some("OutOfpods".into())
    );
    assert!(m.pods.worker("uid-refused").is_none());
    assert!(m.pods.worker("uid-ended").is_none());

    // Deleted now: each gets a worker (admission lets deleted pods in) so that its finish
    // reaches the status sync, which removes it from the API server.
    m.apply(api_update(&[&first, &deleting(refused), &deleting(ended)]))
        .await;
    assert!(m.pods.worker("uid-refused").is_some());
    assert!(m.pods.worker("uid-ended").is_some());
}

/// A pod whose UID is not a plain name (it would name a folder the pod's clean-up removes)
/// never gets a worker, whatever source it came from; the other pods of the set do.
#[tokio::test(start_paused = true)]
async fn a_pod_whose_uid_is_not_a_plain_name_gets_no_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let good = api_pod("uid-good");
    let _held = hold_worker(&mut m, &good);
    let escape = api_pod("../../victim");
    let empty = api_pod("");
    m.apply(api_update(&[&good, &escape, &empty])).await;
    assert!(m.pods.worker("uid-good").is_some());
    assert!(m.pods.worker("../../victim").is_none());
    assert!(m.pods.worker("").is_none());
    assert!(m.shared.statuses.get("../../victim").is_none());
}

/// At start, containers whose pod UID label is not a plain name (or missing: an empty UID
/// would name the pods dir itself) are not taken as orphans to clean up; the pods dir's own
/// entries and plain labels are.
#[tokio::test(start_paused = true)]
async fn recovery_takes_no_orphan_whose_uid_is_not_a_plain_name() {
    let dir = tempfile::tempdir().unwrap();
    let oom_seen = OomSeen::default();
    let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
    let pod = |uid: &str| PodRef {
        uid: uid.into(),
        name: "old".into(),
        namespace: "default".into(),
    };
    fake.leave_running_sandbox(&pod("../../victim"), "sb-escape");
    fake.leave_running_sandbox(&pod(""), "sb-empty");
    fake.leave_running_sandbox(&pod("uid-plain"), "sb-plain");
    fake.leave_running_sandbox(
        &PodRef {
            uid: "uid-slash".into(),
            name: "x".into(),
            namespace: "../../victim".into(),
        },
        "sb-slash",
    );
    let shared = worker::tests::test_shared(
        dir.path(),
        fake,
        oom_seen,
        |_| {},
        crate::events::Recorder::disabled(),
    );
    std::fs::create_dir_all(shared.cfg.root_dir.join("pods/uid-on-disk")).unwrap();
    // A pod file whose UID differs from its folder's name: the folder's name is taken.
    let saved = shared.cfg.root_dir.join("pods/uid-saved");
    std::fs::create_dir_all(&saved).unwrap();
    let mut other = api_pod("../../elsewhere");
    other.metadata.namespace = Some("a/b".into());
    std::fs::write(saved.join("pod.json"), serde_json::to_vec(&other).unwrap()).unwrap();
    let mut m = PodManager::new(shared, &[SourceKind::Api]);
    m.recover().await;
    let mut uids: Vec<&str> = m.pods.orphans().map(|(uid, _)| uid).collect();
    uids.sort();
    assert_eq!(uids, vec!["uid-on-disk", "uid-plain", "uid-saved"]);
    assert_eq!(m.pods.orphan("uid-saved").unwrap().uid, "uid-saved");
    assert_eq!(m.pods.orphan("uid-saved").unwrap().namespace, "");
}

/// A pod found on the node after a restart whose spec asks for a resize the node can never
/// take (left Infeasible) is admitted with what it was allocated: the running pod is not
/// rejected for a resize the agent never took, and the pods after it are weighed against
/// its allocation.
#[tokio::test(start_paused = true)]
async fn a_found_pod_is_admitted_with_its_allocation_not_a_pending_resize() {
    let dir = tempfile::tempdir().unwrap();
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-a"},
        "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "110"}}
    }))
    .unwrap();
    let (_node_tx, view) = watch::channel(Some(Arc::new(node)));
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]).with_node(view);
    let with_cpu = |uid: &str, cpu: &str| {
        let mut p = api_pod(uid);
        p.spec.as_mut().unwrap().containers[0].resources = Some(
            serde_json::from_value(json!({"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}))
                .unwrap(),
        );
        p
    };
    m.shared
        .allocations
        .set(&with_cpu("uid-running", "1500m"))
        .unwrap();
    let asked = with_cpu("uid-running", "1000");
    m.pods
        .set("uid-running".into(), PodState::Orphan(pod_ref(&asked)));
    let newcomer = with_cpu("uid-new", "1");
    m.apply(api_update(&[&asked, &newcomer])).await;
    assert!(
        m.pods.worker("uid-running").is_some(),
        "status: {:?}",
        m.shared
            .statuses
            .get("uid-running")
            .map(|s| s.pod.status.clone())
    );
    let refused = m
        .shared
        .statuses
        .get("uid-new")
        .and_then(|v| v.pod.status.clone())
        .expect("the newcomer is weighed against the allocation and refused");
    assert_eq!(refused.reason.as_deref(), Some("OutOfcpu"));
    assert!(m.pods.worker("uid-new").is_none());
}

/// kubelet_desired_pods, kubelet_active_pods and kubelet_working_pods as the manager counts
/// them: a running API pod, a static one, a deleted one whose worker finished, and the
/// restart of a pod wanted again with its UID.
#[tokio::test(start_paused = true)]
async fn the_pod_counts_follow_the_workers_and_the_sources() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let pod = api_pod("uid-count-a");
    let gone = deleting(api_pod("uid-count-b"));
    let mut stat = api_pod("uid-count-s");
    stat.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    hold_worker(&mut m, &pod);
    hold_worker(&mut m, &gone);
    let (tx, _rx) = watch::channel(Some(Arc::new(stat.clone())));
    m.pods.set(
        "uid-count-s".into(),
        PodState::Working(WorkerHandle {
            desired: tx,
            wake: Arc::new(Notify::new()),
            removals: Default::default(),
            static_pod: Some(true),
        }),
    );
    m.sources.insert(
        SourceKind::Api.to_string(),
        vec![pod.clone(), gone.clone(), stat.clone()],
    );
    let working = |m: &PodManager| {
        let mut w = m.pod_counts().working;
        w.sort();
        w
    };
    let c = m.pod_counts();
    assert_eq!((c.desired, c.active), ([2, 1], [2, 1]));
    assert_eq!(
        working(&m),
        [
            (("sync", "desired", ""), 1),
            (("sync", "desired", "true"), 1),
            (("terminating", "desired", ""), 1),
        ]
    );

    // The deleted pod's worker finishes while the API still lists it: terminated, not active.
    m.worker_done(done(&gone, Cleanup::Removed));
    let c = m.pod_counts();
    assert_eq!((c.desired, c.active), ([2, 1], [1, 1]));
    assert!(working(&m).contains(&(("terminated", "desired", ""), 1)));

    // A worker with no pod (found on the node, wanted by no source) is runtime only.
    let (tx, _rx2) = watch::channel(None);
    m.pods.set(
        "uid-count-orphan".into(),
        PodState::Working(WorkerHandle {
            desired: tx,
            wake: Arc::new(Notify::new()),
            removals: Default::default(),
            static_pod: None,
        }),
    );
    assert!(working(&m).contains(&(("terminating", "runtime_only", "unknown"), 1)));

    // A pod wanted again once its worker stopped is restarted, and counted so.
    let restarts = || {
        crate::metrics::kubelet()
            .restarted_pods
            .get(&[""])
            .unwrap_or(0.0)
    };
    let before = restarts();
    m.worker_done(done(&pod, Cleanup::Removed));
    assert!(restarts() >= before + 1.0);
}

/// The states a pod goes through, one at a time: refused, then reported Failed by the API
/// (the refusal it shows is withdrawn with it once its source drops it), and a pod found on
/// the node that a source claims is worked on, not an orphan too.
#[tokio::test(start_paused = true)]
async fn a_refused_pod_the_api_reports_failed_keeps_its_refusal_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let shared = shared_with(dir.path(), |cfg| cfg.max_pods = 1);
    let mut m = PodManager::new(shared, &[SourceKind::Api]);
    let first = api_pod("uid-first");
    let _held = hold_worker(&mut m, &first);
    let refused = api_pod("uid-refused");
    m.apply(api_update(&[&first, &refused])).await;
    assert!(m
        .pods
        .is("uid-refused", |s| matches!(s, PodState::Rejected)));

    // The status sync wrote the refusal: the API now lists the pod as Failed.
    let mut failed = refused.clone();
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    m.apply(api_update(&[&first, &failed])).await;
    assert!(m.pods.is("uid-refused", |s| matches!(
        s,
        PodState::Ended { refused: true }
    )));
    assert_eq!(m.pod_counts().active, [1, 0]);
    assert!(m.shared.statuses.get("uid-refused").is_some());

    m.apply(api_update(&[&first])).await;
    assert!(m.pods.get("uid-refused").is_none());
    assert!(m.shared.statuses.get("uid-refused").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_found_pod_its_source_claims_is_worked_on_and_no_longer_an_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = PodManager::new(shared(dir.path()), &[SourceKind::Api]);
    let pod = api_pod("uid-found");
    m.pods
        .set("uid-found".into(), PodState::Orphan(pod_ref(&pod)));
    m.apply(api_update(&[&pod])).await;
    assert!(m.pods.orphan("uid-found").is_none());
    let w = m.pods.worker("uid-found").expect("its worker");
    assert!(w.desired.borrow().is_some());

    // Its worker finishes once it is deleted: finished while listed, forgotten when not.
    let gone = deleting(pod.clone());
    m.apply(api_update(&[&gone])).await;
    m.worker_done(done(&gone, Cleanup::Removed));
    assert!(m.pods.is("uid-found", |s| matches!(s, PodState::Finished)));
    m.apply(api_update(&[&gone])).await;
    assert!(m.pods.worker("uid-found").is_none());
    m.apply(api_update(&[])).await;
    assert!(m.pods.get("uid-found").is_none());
}

#[test]
fn only_refused_finished_and_ended_pods_are_held_back() {
    let (tx, _rx) = watch::channel(None);
    let working = PodState::Working(WorkerHandle {
        desired: tx,
        wake: Arc::new(Notify::new()),
        removals: Default::default(),
        static_pod: None,
    });
    let orphan = PodState::Orphan(PodRef {
        uid: "u".into(),
        name: String::new(),
        namespace: String::new(),
    });
    let cases = [
        (working, false, None),
        (orphan, false, None),
        (PodState::Rejected, true, Some(true)),
        (PodState::Finished, true, Some(false)),
        (PodState::Ended { refused: false }, true, Some(false)),
        (PodState::Ended { refused: true }, true, Some(true)),
    ];
    for (state, held, unlisted) in cases {
        assert_eq!(state.held_back(), held);
        assert_eq!(state.forgotten_when_unlisted(), unlisted);
    }
}
