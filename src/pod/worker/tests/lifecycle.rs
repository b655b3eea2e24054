//! The lifecycle of pods the API drives: graceful deletion (grace period, preStop, final
//! status, clean-up), restarts when a container's spec changes, and activeDeadlineSeconds.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{watch, Notify};

use super::{harness, phase, pod, pod_status, status_of, worker, Harness, UID};
use crate::pod::worker::Worker;
use crate::runtime::fake::Script;
use crate::runtime::labels;

/// `p` as the API shows it once deleted with this grace period.
fn deleting(p: &Pod, grace_seconds: i64) -> Pod {
    let mut d = p.clone();
    d.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    d.metadata.deletion_grace_period_seconds = Some(grace_seconds);
    d
}

/// Sleeps on the paused clock until `done` holds (at most ten minutes of it).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

fn running(h: &Harness, name: &str) -> bool {
    h.shared.statuses.get(UID).is_some()
        && status_of(h, name)
            .state
            .is_some_and(|s| s.running.is_some())
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_stops_within_its_grace_period_reports_and_goes() {
    let h = harness();
    h.fake.script("stubborn", [Script::IgnoreTerm]);
    let mut p = pod(&[], &["stubborn", "polite"], "Always");
    p.spec.as_mut().unwrap().containers[0].lifecycle = Some(
        serde_json::from_value(serde_json::json!({
            "preStop": {"exec": {"command": ["/bin/drain"]}}
        }))
        .unwrap(),
    );
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(&p));
    let done = tokio::spawn(w.run(rx, Arc::new(Notify::new())));
    until("both containers to run", || {
        running(&h, "stubborn") && running(&h, "polite")
    })
    .await;

    // Deleted with 20 s (the spec says 5: the API's value wins).
    let gone = deleting(&p, 20);
    tx.send_replace(Some(Arc::new(gone.clone())));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        h.fake.calls_of("exec stubborn#0"),
        ["exec stubborn#0 /bin/drain"]
    );
    assert_eq!(h.fake.calls_of("kill stubborn#0"), ["kill stubborn#0 15"]);
    assert_eq!(h.fake.calls_of("kill polite#0"), ["kill polite#0 15"]);
    // The API sends the same deleting pod again (its status or metadata moved on): the
    // termination goes on as it was, it does not start over.
    let mut again = gone.clone();
    again.metadata.resource_version = Some("42".into());
    again.status = Some(Default::default());
    tx.send_replace(Some(Arc::new(again)));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(
        h.fake.calls_of("kill stubborn#0 9").is_empty(),
        "SIGKILL before the grace period ended"
    );

    // Hold the clean-up so the final status can be read before the worker drops it.
    h.fake.hang("remove_container");
    until("the clean-up", || {
        !h.fake.calls_of("remove_container").is_empty()
    })
    .await;
    assert_eq!(
        h.fake.calls_of("kill stubborn#0"),
        ["kill stubborn#0 15", "kill stubborn#0 9"]
    );
    assert_eq!(
        h.fake.calls_of("exec stubborn#0").len(),
        1,
        "preStop ran once"
    );
    assert_eq!(h.fake.calls_of("start_task stubborn").len(), 1);
    assert_eq!(phase(&h), "Failed");
    for (name, code) in [("stubborn", 137), ("polite", 143)] {
        let c = status_of(&h, name);
        let t = c.state.unwrap().terminated.unwrap();
        assert_eq!(t.exit_code, code, "{name}");
        assert!(!c.ready, "{name}");
    }
    h.fake.unhang("remove_container");
    tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .expect("the worker finishes")
        .unwrap();
    assert!(
        h.shared.statuses.get(UID).is_none(),
        "status dropped at the end"
    );
    assert!(h.fake.records(UID).is_empty(), "{:?}", h.fake.records(UID));
    assert!(!h.shared.cfg.root_dir.join("pods").join(UID).exists());
    assert_eq!(
        h.fake.calls_of("start_task").len(),
        3,
        "nothing started again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shorter_grace_period_cuts_a_deletion_short() {
    let h = harness();
    h.fake.script("stubborn", [Script::IgnoreTerm]);
    let p = pod(&[], &["stubborn"], "Always");
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(&p));
    let done = tokio::spawn(w.run(rx, Arc::new(Notify::new())));
    until("the container to run", || running(&h, "stubborn")).await;
    tx.send_replace(Some(Arc::new(deleting(&p, 300))));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(h.fake.calls_of("kill stubborn#0 9").is_empty());
    // Deleted again with 1 s (as `kubectl delete --grace-period=1` does).
    tx.send_replace(Some(Arc::new(deleting(&p, 1))));
    tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("the shorter grace period ends the deletion")
        .unwrap();
    assert_eq!(h.fake.calls_of("kill stubborn#0 9").len(), 1);
    assert!(h.fake.records(UID).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_changed_image_restarts_that_container_only() {
    let h = harness();
    h.fake.add_to_registry("busybox:2");
    // Never: a changed definition restarts the container whatever the policy says.
    let mut p = pod(&[], &["app", "sidecar"], "Never");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    p.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    w.pass(&p).await;
    w.pass(&p).await;
    assert_eq!(h.fake.calls_of("kill app#0"), ["kill app#0 15"]);
    assert_eq!(
        h.fake.calls_of("start_task app"),
        ["start_task app#0", "start_task app#1"]
    );
    assert!(h.fake.calls_of("kill sidecar").is_empty());
    assert_eq!(h.fake.calls_of("start_task sidecar").len(), 1);
    let app = status_of(&h, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(app.image, "busybox:2");
    assert!(app.state.unwrap().running.is_some());
    let last = app.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 143);
    assert_eq!(status_of(&h, "sidecar").restart_count, 0);
    assert_eq!(phase(&h), "Running");
}

#[tokio::test(start_paused = true)]
async fn a_record_without_the_hash_label_is_left_running() {
    let h = harness();
    h.fake.add_to_registry("busybox:2");
    let mut p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    // As an agent before the label left it; even a changed image does not restart it.
    h.fake.drop_label("app", labels::CONTAINER_HASH);
    p.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    w.pass(&p).await;
    w.pass(&p).await;
    assert!(
        h.fake.calls_of("kill app").is_empty(),
        "{:?}",
        h.fake.calls()
    );
    assert_eq!(h.fake.calls_of("start_task app").len(), 1);
    assert!(running(&h, "app"));
}

#[tokio::test(start_paused = true)]
async fn a_pod_past_its_active_deadline_fails_and_is_not_restarted() {
    let h = harness();
    let p = pod(&[], &["app", "sidecar"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert!(running(&h, "app"));
    // The deadline is set on the running pod (the API allows adding one), and the pod has
    // been active for a minute already.
    let mut late = p.clone();
    late.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
    let started =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60);
    late.status = Some(k8s_openapi::api::core::v1::PodStatus {
        start_time: Some(Time(started)),
        ..Default::default()
    });
    w.pass(&late).await;
    w.pass(&late).await;
    assert_eq!(h.fake.calls_of("kill app#0"), ["kill app#0 15"]);
    assert_eq!(h.fake.calls_of("kill sidecar#0"), ["kill sidecar#0 15"]);
    assert_eq!(h.fake.calls_of("kill POD#0"), ["kill POD#0 9"]);
    assert_eq!(h.fake.calls_of("start_task app").len(), 1, "not restarted");
    let st = pod_status(&h);
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    let app = status_of(&h, "app");
    assert_eq!(app.state.unwrap().terminated.unwrap().exit_code, 143);
}

#[tokio::test(start_paused = true)]
async fn a_pod_within_its_active_deadline_runs_and_is_looked_at_again_when_it_passes() {
    let h = harness();
    let mut p = pod(&[], &["app"], "Always");
    p.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
    let mut w = worker(&h, &p);
    let next = w.pass(&p).await;
    assert!(running(&h, "app"));
    assert_eq!(phase(&h), "Running");
    assert!(next <= Duration::from_secs(6), "next look at {next:?}");
}

#[tokio::test(start_paused = true)]
async fn a_removed_pod_neither_waits_for_nor_cuts_short_a_probe_exec() {
    let h = harness();
    let mut p = pod(&[], &["app"], "Always");
    p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(
        serde_json::from_value(serde_json::json!({
            "exec": {"command": ["true"]}, "periodSeconds": 1
        }))
        .unwrap(),
    );
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(&p));
    let done = tokio::spawn(w.run(rx, Arc::new(Notify::new())));
    until("the container to run and be probed", || {
        running(&h, "app") && !h.fake.calls_of("exec app#0 true").is_empty()
    })
    .await;
    // The next probe exec does not come back (a busy shim) while the pod goes.
    h.fake.hang("exec");
    let probed = h.fake.calls_of("exec app#0 true").len();
    until("a probe exec in flight", || {
        h.fake.calls_of("exec app#0 true").len() > probed
    })
    .await;
    tx.send_replace(None);
    tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .expect("the worker finishes")
        .unwrap();
    assert_eq!(h.fake.calls_of("kill app#0"), ["kill app#0 15"]);
    assert!(h.fake.records(UID).is_empty(), "{:?}", h.fake.records(UID));
    assert!(
        h.fake.calls_of("exec timed out").is_empty(),
        "the pod's stop waited for its probe exec: {:?}",
        h.fake.calls()
    );
    // The exec was left to end on its own, not dropped half-way.
    until("the probe exec to end", || {
        !h.fake.calls_of("exec timed out").is_empty()
    })
    .await;
    assert!(
        h.fake.calls_of("exec cancelled").is_empty(),
        "{:?}",
        h.fake.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_task_goes_before_its_network_and_the_record_after() {
    let h = harness();
    let r = labels::PodRef {
        uid: UID.into(),
        name: "web".into(),
        namespace: "default".into(),
    };
    let netns = h.shared.cfg.root_dir.join("netns-of-web");
    h.fake.leave_running_sandbox_with(
        &r,
        "sandbox-of-web",
        std::collections::HashMap::from([(labels::NETNS.to_string(), netns.display().to_string())]),
    );
    let mut w = Worker::new(h.shared.clone(), r);
    // The test's CNI folder is empty, so the network teardown fails; a slow one (CNI DELs
    // queue across pods on the plugins' locks) would hold the pod the same way.
    w.terminate(Duration::from_secs(5), &|| false)
        .await
        .expect_err("no CNI configuration to tear the network down with");
    assert_eq!(
        h.fake.calls_of("delete_task POD#0"),
        ["delete_task POD#0"],
        "{:?}",
        h.fake.calls()
    );
    // The record stays: it names the netns the next attempt tears down.
    let left = h.fake.records(UID);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(h.fake.calls_of("remove_container").is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_evicted_pod_fails_with_a_disruption_condition_within_the_eviction_grace_period() {
    use crate::eviction::{Eviction, PodControl};
    let h = harness();
    h.fake.script("stubborn", [Script::IgnoreTerm]);
    let p = pod(&[], &["stubborn"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert!(running(&h, "stubborn"));
    assert_eq!(h.shared.evictions.active_pods().len(), 1);
    assert!(!h.shared.evictions.is_stopped(UID));

    let message = "The node was low on resource: memory. ";
    h.shared.evictions.evict(
        UID,
        Eviction {
            message: message.into(),
            grace_period: Duration::from_secs(1),
            disruption: true,
        },
    );
    let before = tokio::time::Instant::now();
    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("kill stubborn#0"),
        ["kill stubborn#0 15", "kill stubborn#0 9"],
        "SIGKILL once the eviction's 1 s passed (the spec's 5 s do not count)"
    );
    assert!(before.elapsed() < Duration::from_secs(5));
    let st = pod_status(&h);
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert_eq!(st.message.as_deref(), Some(message));
    let disruption = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(disruption.status, "True");
    assert_eq!(disruption.reason.as_deref(), Some("TerminationByKubelet"));
    assert_eq!(disruption.message.as_deref(), Some(message));
    assert!(h.shared.evictions.is_stopped(UID));
    assert!(h.shared.evictions.active_pods().is_empty());

    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("start_task stubborn").len(),
        1,
        "an evicted pod is not started again"
    );
}

#[tokio::test(start_paused = true)]
async fn an_ended_pod_gives_up_its_containers_when_asked_and_keeps_its_status() {
    use crate::eviction::{Eviction, PodControl};
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    h.shared.evictions.evict(
        UID,
        Eviction {
            message: "evicted".into(),
            grace_period: Duration::from_secs(1),
            // As a local-storage limit eviction: no DisruptionTarget condition.
            disruption: false,
        },
    );
    w.pass(&p).await;
    let ended = h.shared.statuses.get(UID).unwrap().pod.status.clone();
    assert_eq!(
        ended.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert_eq!(
        ended.as_ref().and_then(|s| s.reason.as_deref()),
        Some("Evicted")
    );
    assert!(
        !ended
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "DisruptionTarget"),
        "a local-storage eviction sets no DisruptionTarget condition"
    );
    assert_eq!(
        h.fake.records(UID).len(),
        2,
        "the dead app container and sandbox stay"
    );

    let evictions = h.shared.evictions.clone();
    let asked =
        tokio::spawn(async move { evictions.reclaim_ended_pods(Duration::from_secs(30)).await });
    tokio::task::yield_now().await;
    w.pass(&p).await;
    assert_eq!(asked.await.unwrap(), 1);
    assert!(h.fake.records(UID).is_empty(), "{:?}", h.fake.records(UID));
    assert_eq!(
        h.shared.statuses.get(UID).unwrap().pod.status,
        ended,
        "the status it ended with stands"
    );
    // Later passes keep it so, and start nothing.
    w.pass(&p).await;
    assert_eq!(h.shared.statuses.get(UID).unwrap().pod.status, ended);
    assert_eq!(h.fake.calls_of("start_task app").len(), 1);
}

/// A static pod's manifest removed and written again while its pod stops (the same UID):
/// what it had stays once it is stopped, and its next worker restarts it from there, with
/// restart count 1 as upstream (the node e2e MirrorPod "recreate" spec checks it).
#[tokio::test(start_paused = true)]
async fn a_pod_wanted_again_while_it_stops_restarts_from_its_dead_containers() {
    let h = harness();
    h.fake.script("app", [Script::IgnoreTerm]);
    let p = pod(&[], &["app"], "Always");
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(&p));
    let done = tokio::spawn(w.run(rx, Arc::new(Notify::new())));
    until("the container to run", || running(&h, "app")).await;

    tx.send_replace(None);
    until("the stop to begin", || {
        !h.fake.calls_of("kill app#0").is_empty()
    })
    .await;
    tx.send_replace(Some(Arc::new(p.clone())));
    tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("the worker finishes")
        .unwrap();
    let records = h.fake.records(UID);
    assert!(
        records.iter().any(|r| r.name == "app" && !r.is_running()),
        "the dead container stays: {records:?}"
    );
    assert!(records.iter().all(|r| !r.is_running()), "{records:?}");
    assert!(h.shared.statuses.get(UID).is_some(), "its status stays");

    // The manager starts a new worker for it (`worker_done`).
    let mut again = worker(&h, &p);
    // Its first pass replaces the dead sandbox, the next (at once) starts the container.
    again.pass(&p).await;
    again.pass(&p).await;
    let app = status_of(&h, "app");
    assert!(app.state.unwrap().running.is_some());
    assert_eq!(app.restart_count, 1);
    assert_eq!(
        h.fake.calls_of("start_task POD"),
        ["start_task POD#0", "start_task POD#1"]
    );
}

/// The manager removes the pod and gives it back before the worker looks (the channel then
/// holds the pod again): the removal still stops it, kept for its restart, as upstream's pod
/// workers act on every removal.
#[tokio::test(start_paused = true)]
async fn a_removal_the_worker_did_not_see_before_the_pod_came_back_still_stops_it() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(&p));
    let removals = w.removals();
    let done = tokio::spawn(w.run(rx, Arc::new(Notify::new())));
    until("the container to run", || running(&h, "app")).await;

    // As `PodManager::apply` removes a pod, then adds it back, with no await in between.
    removals.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    tx.send_replace(None);
    tx.send_replace(Some(Arc::new(p.clone())));
    let cleanup = tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("the worker finishes")
        .unwrap();
    assert_eq!(cleanup, crate::pod::worker::Cleanup::Kept);
    assert_eq!(h.fake.calls_of("kill app#0"), ["kill app#0 15"]);
    assert!(h.fake.records(UID).iter().any(|r| r.name == "app"));
}
