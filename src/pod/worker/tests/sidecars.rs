//! Sidecars (init containers with `restartPolicy: Always`) in the worker: started in order,
//! the next init container waiting until the sidecar has started; restarted with back-off
//! whatever the pod's restart policy; probed, their readiness counting in the pod's; stopped
//! after the main containers in reverse order; stopped when a job pod's main containers
//! ended, the pod then ending as its main containers decide; and their statuses as
//! upstream's.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::{harness, phase, pod_status, status_of, waiting_reason, worker, Harness, UID};
use crate::pod::worker::{Cleanup, Worker};
use crate::runtime::fake::Script;

/// A host-network pod with these init and main containers (JSON lists; busybox unless
/// said) and this restart policy; grace period 5 s.
fn pod_with(init: Value, containers: Value, restart_policy: &str) -> Pod {
    let with_image = |list: Value| -> Vec<Value> {
        let mut list = list.as_array().cloned().unwrap_or_default();
        for c in &mut list {
            c.as_object_mut()
                .unwrap()
                .entry("image")
                .or_insert_with(|| "busybox".into());
        }
        list
    };
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {
            "hostNetwork": true,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "initContainers": with_image(init),
            "containers": with_image(containers),
        }
    }))
    .unwrap()
}

/// A sidecar named `name` with these extra fields.
fn sidecar(name: &str, extra: Value) -> Value {
    let mut c = json!({"name": name, "restartPolicy": "Always"});
    c.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    c
}

/// An exec probe of `cmd` every second, failing for good only after a long time.
fn probe(cmd: &str) -> Value {
    json!({"exec": {"command": [cmd]}, "periodSeconds": 1, "failureThreshold": 1000})
}

/// The worker's whole loop on `p`, as the manager runs it.
fn spawn(h: &Harness, p: &Pod) -> (watch::Sender<Option<Arc<Pod>>>, JoinHandle<Cleanup>) {
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let w = Worker::new(h.shared.clone(), super::super::pod_ref(p));
    (tx, tokio::spawn(w.run(rx, Arc::new(Notify::new()))))
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

fn condition(h: &Harness, kind: &str) -> PodCondition {
    pod_status(h)
        .conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no {kind} condition"))
}

/// The kill calls for the pod's containers (not its sandbox), in order.
fn container_kills(h: &Harness) -> Vec<String> {
    h.fake
        .calls_of("kill ")
        .into_iter()
        .filter(|c| !c.starts_with("kill POD"))
        .collect()
}

async fn stop(tx: watch::Sender<Option<Arc<Pod>>>, done: JoinHandle<Cleanup>) {
    tx.send_replace(None);
    tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .expect("the worker finishes")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_next_init_container_waits_until_the_sidecars_startup_probe_succeeded() {
    let h = harness();
    h.fake.exec_exits("proxy", 1);
    h.fake.script("setup", [Script::Exit(0)]);
    let p = pod_with(
        json!([
            sidecar("proxy", json!({"startupProbe": probe("started")})),
            {"name": "setup"},
        ]),
        json!([{"name": "app"}]),
        "Always",
    );
    let (tx, done) = spawn(&h, &p);
    until("the sidecar to run", || running(&h, "proxy")).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        h.fake.calls_of("exec proxy#0 started").len() > 10,
        "its startup probe runs: {:?}",
        h.fake.calls()
    );
    assert!(
        h.fake.calls_of("create_container setup").is_empty(),
        "the next init container started before the sidecar's startup probe succeeded"
    );
    let proxy = status_of(&h, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(false), false));
    assert_eq!(phase(&h), "Pending");
    let init = condition(&h, "Initialized");
    assert_eq!(init.status, "False");
    assert_eq!(
        init.message.as_deref(),
        Some("containers with incomplete status: [proxy setup]")
    );

    h.fake.exec_exits("proxy", 0);
    until("the app to run", || running(&h, "app")).await;
    assert_eq!(
        h.fake.calls_of("start_task"),
        [
            "start_task POD#0",
            "start_task proxy#0",
            "start_task setup#0",
            "start_task app#0"
        ]
    );
    let proxy = status_of(&h, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(true), true));
    assert!(proxy.state.unwrap().running.is_some());
    assert_eq!(condition(&h, "Initialized").status, "True");
    assert_eq!(condition(&h, "Ready").status, "True");
    assert_eq!(phase(&h), "Running");
    stop(tx, done).await;
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_without_a_startup_probe_lets_the_next_one_start_at_once() {
    let h = harness();
    let p = pod_with(
        json!([sidecar("first", json!({})), sidecar("second", json!({}))]),
        json!([{"name": "app"}]),
        "Always",
    );
    let (tx, done) = spawn(&h, &p);
    // No exit or probe wakes the worker for the next one: it looks again by itself, long
    // before a resync.
    tokio::time::timeout(
        Duration::from_secs(5),
        until("the app to run", || running(&h, "app")),
    )
    .await
    .expect("each sidecar's start led to the next at once");
    assert_eq!(
        h.fake.calls_of("start_task"),
        [
            "start_task POD#0",
            "start_task first#0",
            "start_task second#0",
            "start_task app#0"
        ]
    );
    stop(tx, done).await;
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_is_restarted_with_back_off_under_restart_policy_never() {
    let h = harness();
    let p = pod_with(
        json!([sidecar("proxy", json!({}))]),
        json!([{"name": "app"}]),
        "Never",
    );
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    assert!(status_of(&h, "app").state.unwrap().running.is_some());

    h.fake.exit("proxy", 1);
    w.pass(&p).await; // the first restart is immediate
    h.fake.exit("proxy", 1);
    let next = w.pass(&p).await; // now in back-off
    assert_eq!(
        h.fake.calls_of("start_task proxy"),
        ["start_task proxy#0", "start_task proxy#1"]
    );
    let proxy = status_of(&h, "proxy");
    assert_eq!(waiting_reason(&proxy).as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(proxy.restart_count, 1);
    let last = proxy.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 1);
    assert!(!proxy.ready);
    // The pod runs on (its main container was untouched); it is not ready meanwhile.
    assert_eq!(phase(&h), "Running");
    assert_eq!(condition(&h, "Initialized").status, "True");
    assert_eq!(condition(&h, "Ready").status, "False");
    assert!(
        next > Duration::from_secs(9) && next <= Duration::from_secs(11),
        "the back-off is 10 s: {next:?}"
    );

    // Within the back-off nothing starts it (the back-off's clock is the wall clock, so
    // its end is the back-off's own tests' business).
    w.pass(&p).await;
    assert_eq!(h.fake.calls_of("start_task proxy").len(), 2);
    assert_eq!(h.fake.calls_of("start_task app"), ["start_task app#0"]);
}

#[tokio::test(start_paused = true)]
async fn a_sidecars_readiness_counts_in_the_pods_readiness() {
    let h = harness();
    h.fake.exec_exits("proxy", 1);
    let p = pod_with(
        json!([sidecar("proxy", json!({"readinessProbe": probe("ready")}))]),
        json!([{"name": "app"}]),
        "Always",
    );
    let (tx, done) = spawn(&h, &p);
    // Readiness does not hold the main containers back (only a startup probe would).
    until("the app to run", || running(&h, "app")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!h.fake.calls_of("exec proxy#0 ready").is_empty());
    let proxy = status_of(&h, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(true), false));
    assert!(status_of(&h, "app").ready);
    for kind in ["Ready", "ContainersReady"] {
        let c = condition(&h, kind);
        assert_eq!(c.status, "False", "{kind}");
        assert_eq!(c.reason.as_deref(), Some("ContainersNotReady"), "{kind}");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with unready status: [proxy]"),
            "{kind}"
        );
    }

    h.fake.exec_exits("proxy", 0);
    until("the pod to be ready", || {
        condition(&h, "Ready").status == "True"
    })
    .await;
    assert!(status_of(&h, "proxy").ready);
    assert_eq!(condition(&h, "ContainersReady").status, "True");
    stop(tx, done).await;
}

#[tokio::test(start_paused = true)]
async fn a_sidecar_failing_its_liveness_probe_is_restarted() {
    let h = harness();
    let p = pod_with(
        json!([sidecar(
            "proxy",
            json!({"livenessProbe": {
            "exec": {"command": ["alive"]}, "periodSeconds": 1, "failureThreshold": 1}})
        )]),
        json!([{"name": "app"}]),
        "Never",
    );
    let (tx, done) = spawn(&h, &p);
    until("the app to run", || running(&h, "app")).await;
    h.fake.exec_exits("proxy", 1);
    until("the sidecar's second start", || {
        h.fake.calls_of("start_task proxy").len() == 2
    })
    .await;
    // (Its next instance fails the same probe soon after: only the first kill is sure.)
    assert_eq!(container_kills(&h)[0], "kill proxy#0 15");
    assert!(h.fake.calls_of("kill app").is_empty());
    assert_eq!(h.fake.calls_of("start_task app").len(), 1);
    assert_eq!(phase(&h), "Running");
    stop(tx, done).await;
}

/// `p` as the API shows it once deleted with this grace period.
fn deleting(p: &Pod, grace_seconds: i64) -> Pod {
    let mut d = p.clone();
    d.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    d.metadata.deletion_grace_period_seconds = Some(grace_seconds);
    d
}

/// Init containers `first` (a sidecar with a preStop hook), `setup`, `second` (a sidecar),
/// main containers `app` and `web`.
fn two_sidecars() -> Pod {
    pod_with(
        json!([
            sidecar("first", json!({"lifecycle": {"preStop": {"exec": {"command": ["/bin/drain"]}}}})),
            {"name": "setup"},
            sidecar("second", json!({})),
        ]),
        json!([{"name": "app"}, {"name": "web"}]),
        "Always",
    )
}

#[tokio::test(start_paused = true)]
async fn a_deleted_pod_stops_its_main_containers_then_its_sidecars_in_reverse_order() {
    let h = harness();
    h.fake.script("setup", [Script::Exit(0)]);
    let p = two_sidecars();
    let (tx, done) = spawn(&h, &p);
    until("the main containers to run", || {
        running(&h, "app") && running(&h, "web")
    })
    .await;
    tx.send_replace(Some(Arc::new(deleting(&p, 10))));
    tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .expect("the worker finishes")
        .unwrap();
    // (The pod's records list the sidecars first: without an order they stop first.)
    assert_eq!(
        container_kills(&h),
        [
            "kill app#0 15",
            "kill web#0 15",
            "kill second#0 15",
            "kill first#0 15"
        ]
    );
    // A sidecar's preStop hook runs when the pod's stop begins, before its turn.
    let calls = h.fake.calls();
    let at = |line: &str| calls.iter().position(|c| c == line).unwrap();
    assert!(
        at("exec first#0 /bin/drain") < at("kill second#0 15"),
        "{calls:?}"
    );
    assert!(h.fake.records(UID).is_empty());
    assert_eq!(
        h.fake.calls_of("start_task second").len(),
        1,
        "nothing restarted"
    );
}

#[tokio::test(start_paused = true)]
async fn sidecars_wait_for_a_slow_main_container_within_the_grace_period() {
    let h = harness();
    h.fake.script("setup", [Script::Exit(0)]);
    h.fake.script("app", [Script::IgnoreTerm]);
    let p = two_sidecars();
    let (tx, done) = spawn(&h, &p);
    until("the main containers to run", || {
        running(&h, "app") && running(&h, "web")
    })
    .await;
    let begun = tokio::time::Instant::now();
    tx.send_replace(Some(Arc::new(deleting(&p, 10))));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(
        container_kills(&h),
        ["kill app#0 15", "kill web#0 15"],
        "the sidecars wait while app runs"
    );
    until("every container to stop", || container_kills(&h).len() == 5).await;
    // app is killed when the grace period ends; the sidecars' turn ends then too, so all
    // of it is over within the grace period (and the sidecars' minimum stop window).
    let waited = begun.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(12),
        "{waited:?}"
    );
    let mut last = container_kills(&h)[2..].to_vec();
    last.sort();
    assert_eq!(
        last,
        ["kill app#0 9", "kill first#0 15", "kill second#0 15"]
    );
    tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .expect("the worker finishes")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_job_pods_sidecars_stop_when_its_main_containers_end_and_do_not_decide_its_phase() {
    for (policy, code, end) in [
        ("Never", 0, "Succeeded"),
        ("Never", 3, "Failed"),
        ("OnFailure", 0, "Succeeded"),
    ] {
        let h = harness();
        h.fake.script("job", [Script::Exit(code)]);
        let p = pod_with(
            json!([sidecar("first", json!({})), sidecar("second", json!({}))]),
            json!([{"name": "job"}]),
            policy,
        );
        let mut w = worker(&h, &p);
        for _ in 0..6 {
            w.pass(&p).await;
        }
        let case = format!("{policy}, exit {code}");
        assert_eq!(phase(&h), end, "{case}");
        assert_eq!(
            container_kills(&h),
            ["kill second#0 15", "kill first#0 15"],
            "{case}"
        );
        for name in ["first", "second"] {
            let s = status_of(&h, name);
            let t = s
                .state
                .unwrap()
                .terminated
                .unwrap_or_else(|| panic!("{case}: {name}"));
            assert_eq!(t.exit_code, 143, "{case}: {name}");
            assert!(!s.ready, "{case}: {name}");
            assert_eq!(
                h.fake.calls_of(&format!("start_task {name}")).len(),
                1,
                "{case}"
            );
        }
        let job = status_of(&h, "job").state.unwrap().terminated.unwrap();
        assert_eq!(job.exit_code, code, "{case}");
        assert_eq!(h.fake.calls_of("kill POD#0"), ["kill POD#0 9"], "{case}");
        let ready = condition(&h, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted")),
            "{case}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_pod_under_on_failure_restarts_its_failed_main_container_beside_its_sidecar() {
    let h = harness();
    h.fake.script("job", [Script::Exit(1)]);
    let p = pod_with(
        json!([sidecar("proxy", json!({}))]),
        json!([{"name": "job"}]),
        "OnFailure",
    );
    let mut w = worker(&h, &p);
    for _ in 0..4 {
        w.pass(&p).await;
    }
    assert_eq!(h.fake.calls_of("start_task job").len(), 2);
    assert!(container_kills(&h).is_empty(), "{:?}", h.fake.calls());
    assert!(status_of(&h, "proxy").state.unwrap().running.is_some());
    assert_eq!(phase(&h), "Running");
}
