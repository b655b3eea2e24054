//! The pod worker and manager against the fake runtime: start order, restart policy and
//! back-off, sandbox failures, termination with grace, orphans, pods that go away while
//! they start, OOM kills, vanished containers and calls that time out. Pods use the host
//! network, so no network namespace or CNI plugin is involved; everything else (pod
//! directory, log paths) lives in a temporary directory. Time is tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::{Shared, Worker};
use crate::config::Config;
use crate::network::cni::Cni;
use crate::pod::status_manager::StatusManager;
use crate::pod::sync_health::SyncLoopHealth;
use crate::runtime::events::OomSeen;
use crate::runtime::fake::{FakeRuntime, Script};

mod events;
mod lifecycle;
mod manager;
mod resize;
mod runtime_class;
mod sidecars;

const UID: &str = "0f0f0f0f-uid";

struct Harness {
    fake: FakeRuntime,
    shared: Arc<Shared>,
    _dir: tempfile::TempDir,
}

fn harness() -> Harness {
    harness_with(|_| {})
}

/// A harness whose configuration `tune` adjusts.
fn harness_with(tune: impl FnOnce(&mut Config)) -> Harness {
    harness_recording_into(tune, crate::events::Recorder::disabled())
}

/// A harness whose workers record Events into `recorder`.
fn harness_recording_into(
    tune: impl FnOnce(&mut Config),
    recorder: crate::events::Recorder,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let oom_seen = OomSeen::default();
    let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
    let shared = test_shared(dir.path(), fake.clone(), oom_seen, tune, recorder);
    Harness {
        fake,
        shared,
        _dir: dir,
    }
}

/// The workers' context for tests: node `node-a`, everything under `dir`, the fake runtime,
/// host-network pods only (the CNI folder is empty). The manager's tests use it too.
pub(crate) fn test_shared(
    dir: &std::path::Path,
    fake: FakeRuntime,
    oom_seen: OomSeen,
    tune: impl FnOnce(&mut Config),
    recorder: crate::events::Recorder,
) -> Arc<Shared> {
    let mut cfg = Config::defaults(false);
    cfg.node_name = "node-a".into();
    cfg.root_dir = dir.join("root");
    cfg.pod_logs_dir = dir.join("pods");
    cfg.container_logs_dir = dir.join("containers");
    cfg.pod_infra_container_image = "pause".into();
    tune(&mut cfg);
    let statuses = StatusManager::new();
    Arc::new(Shared {
        rt: Arc::new(fake),
        cni: Cni::new(dir.join("cni"), vec![], Duration::from_secs(5)),
        cfg: Arc::new(cfg),
        evictions: crate::pod::evictions::PodEvictions::new(statuses.clone(), None),
        start_slots: super::start_slots(),
        statuses,
        exe: "/bin/true".into(),
        host_ip: "192.0.2.10".into(),
        memory_capacity: 8 << 30,
        cpu_capacity_millis: 2000,
        stats_pods: Default::default(),
        started: std::time::Instant::now(),
        oom_score_adj_min: -1000,
        cm: None,
        oom_seen,
        sync_loop: Arc::new(SyncLoopHealth::new(Duration::from_secs(60))),
        recorder,
        objects: Arc::new(crate::objects::Standalone),
        handlers: Arc::new(crate::runtime::handlers::RuntimeHandlers::default()),
        allocations: Arc::new(crate::pod::allocation::Allocations::load(&dir.join("root"))),
        csi: Default::default(),
    })
}

/// A host-network pod with these init and app containers (busybox, no command needed by
/// the fake) and this restart policy.
fn pod(init: &[&str], app: &[&str], restart_policy: &str) -> Pod {
    let c = |n: &&str| serde_json::json!({"name": n, "image": "busybox"});
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {
            "hostNetwork": true,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "initContainers": init.iter().map(c).collect::<Vec<_>>(),
            "containers": app.iter().map(c).collect::<Vec<_>>(),
        }
    }))
    .unwrap()
}

fn worker(h: &Harness, pod: &Pod) -> Worker {
    Worker::new(h.shared.clone(), super::pod_ref(pod))
}

fn status_of(h: &Harness, name: &str) -> ContainerStatus {
    let v = h.shared.statuses.get(UID).expect("a published status");
    let st = v.pod.status.clone().unwrap();
    st.container_statuses
        .into_iter()
        .flatten()
        .chain(st.init_container_statuses.into_iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}"))
}

fn waiting_reason(c: &ContainerStatus) -> Option<String> {
    c.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

fn terminated_reason(c: &ContainerStatus) -> Option<String> {
    c.state.as_ref()?.terminated.as_ref()?.reason.clone()
}

/// The pod's status as last published.
fn pod_status(h: &Harness) -> k8s_openapi::api::core::v1::PodStatus {
    let v = h.shared.statuses.get(UID).expect("a published status");
    v.pod.status.clone().expect("a status")
}

fn phase(h: &Harness) -> String {
    pod_status(h).phase.unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn init_containers_run_one_at_a_time_before_the_app_containers() {
    let h = harness();
    h.fake.script("setup", [Script::Exit(0)]);
    h.fake.script("migrate", [Script::Exit(0)]);
    let p = pod(&["setup", "migrate"], &["app", "sidecar"], "Always");
    let mut w = worker(&h, &p);
    for _ in 0..4 {
        w.pass(&p).await;
    }
    assert_eq!(
        h.fake.calls_of("start_task"),
        [
            "start_task POD#0",
            "start_task setup#0",
            "start_task migrate#0",
            "start_task app#0",
            "start_task sidecar#0"
        ]
    );
    assert_eq!(phase(&h), "Running");
    assert!(status_of(&h, "app").ready, "no probes: ready once running");
}

/// `p` with these ephemeral containers (name, target), as the `ephemeralcontainers`
/// subresource adds them to a running pod.
fn with_ephemeral(p: &Pod, added: &[(&str, Option<&str>)]) -> Pod {
    let mut p = p.clone();
    let ecs = added
        .iter()
        .map(|(name, target)| {
            serde_json::from_value(serde_json::json!({
                "name": name, "image": "busybox",
                "targetContainerName": target,
            }))
            .unwrap()
        })
        .collect();
    p.spec.as_mut().unwrap().ephemeral_containers = Some(ecs);
    p
}

fn ephemeral_status(h: &Harness, name: &str) -> ContainerStatus {
    pod_status(h)
        .ephemeral_container_statuses
        .into_iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no ephemeral status for {name}"))
}

#[tokio::test(start_paused = true)]
async fn ephemeral_containers_start_once_in_their_targets_process_namespace_never_ready() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert_eq!(pod_status(&h).ephemeral_container_statuses, None);

    let p = with_ephemeral(&p, &[("debugger", Some("app")), ("lost", Some("gone"))]);
    w.pass(&p).await;
    let debugger = ephemeral_status(&h, "debugger");
    assert!(
        debugger.state.as_ref().unwrap().running.is_some(),
        "{debugger:?}"
    );
    assert!(!debugger.ready, "ephemeral containers are never ready");
    assert_eq!(phase(&h), "Running");
    assert!(
        status_of(&h, "app").ready,
        "the pod's own containers are untouched"
    );
    let records = h.fake.records(UID);
    let pid_of = |name: &str| {
        records
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| match r.state {
                crate::runtime::containers::State::Running { pid, .. } => Some(pid),
                _ => None,
            })
            .unwrap()
    };
    let kind = records.iter().find(|r| r.name == "debugger").unwrap().kind;
    assert_eq!(kind, crate::runtime::labels::Kind::Ephemeral);
    let pid_ns = h
        .fake
        .spec_of("debugger")
        .and_then(|s| s.linux().clone())
        .and_then(|l| l.namespaces().clone())
        .into_iter()
        .flatten()
        .find(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::Pid)
        .and_then(|n| n.path().clone());
    assert_eq!(
        pid_ns.map(|p| p.display().to_string()),
        Some(format!("/proc/{}/ns/pid", pid_of("app")))
    );
    // A target that does not run: not created, and said why.
    let lost = ephemeral_status(&h, "lost");
    assert_eq!(
        waiting_reason(&lost).as_deref(),
        Some("CreateContainerError")
    );
    assert!(h.fake.calls_of("create_container lost").is_empty());

    // Its end is final, whatever the pod's restart policy.
    h.fake.exit("debugger", 0);
    w.pass(&p).await;
    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("start_task debugger"),
        ["start_task debugger#0"]
    );
    let debugger = ephemeral_status(&h, "debugger");
    let t = debugger.state.unwrap().terminated.unwrap();
    assert_eq!((t.exit_code, debugger.restart_count), (0, 0));
    assert_eq!(phase(&h), "Running");
}

#[tokio::test(start_paused = true)]
async fn a_pass_lists_the_pods_containers_once() {
    let h = harness();
    let p = pod(&[], &["app", "sidecar"], "Always");
    let mut w = worker(&h, &p);
    // The pass that creates the sandbox and starts both containers, then a settled one.
    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("pod_containers").len(),
        1,
        "{:?}",
        h.fake.calls()
    );
    // What the pass started shows as running without a second listing.
    assert!(status_of(&h, "app").state.unwrap().running.is_some());
    h.fake.clear_calls();
    w.pass(&p).await;
    assert_eq!(h.fake.calls(), [format!("pod_containers {UID}")]);
}

#[tokio::test(start_paused = true)]
async fn a_failing_init_container_restarts_under_back_off_and_holds_the_app_back() {
    let h = harness();
    h.fake.script("setup", [Script::Exit(1), Script::Exit(1)]);
    let p = pod(&["setup"], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await; // sandbox, setup#0 (fails)
    w.pass(&p).await; // the first restart is immediate: setup#1 (fails)
    let next = w.pass(&p).await; // now in back-off
    assert_eq!(
        h.fake.calls_of("start_task"),
        [
            "start_task POD#0",
            "start_task setup#0",
            "start_task setup#1"
        ]
    );
    assert_eq!(
        waiting_reason(&status_of(&h, "setup")).as_deref(),
        Some("CrashLoopBackOff")
    );
    assert_eq!(status_of(&h, "setup").restart_count, 1);
    assert!(
        next > Duration::from_secs(9),
        "the back-off is 10 s: {next:?}"
    );
    assert!(h.fake.calls_of("create_container app").is_empty());
    assert_eq!(phase(&h), "Pending");
}

#[tokio::test(start_paused = true)]
async fn restart_policy_decides_which_exits_restart() {
    for (policy, code, restarted, final_phase) in [
        ("Always", 0, true, "Running"),
        ("OnFailure", 0, false, "Succeeded"),
        ("OnFailure", 3, true, "Running"),
        ("Never", 3, false, "Failed"),
    ] {
        let h = harness();
        h.fake.script("app", [Script::Exit(code)]);
        let p = pod(&[], &["app"], policy);
        let mut w = worker(&h, &p);
        w.pass(&p).await;
        w.pass(&p).await;
        let starts = h.fake.calls_of("start_task app").len();
        assert_eq!(
            starts,
            if restarted { 2 } else { 1 },
            "{policy} exit {code}"
        );
        assert_eq!(phase(&h), final_phase, "{policy} exit {code}");
        if !restarted {
            let c = status_of(&h, "app");
            let t = c.state.unwrap().terminated.unwrap();
            assert_eq!(t.exit_code, code);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_terminal_pod_has_its_sandbox_stopped() {
    let h = harness();
    h.fake.script("app", [Script::Exit(0)]);
    let p = pod(&[], &["app"], "Never");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    assert_eq!(phase(&h), "Succeeded");
    assert_eq!(h.fake.calls_of("kill POD#0"), ["kill POD#0 9"]);
    let sandbox = h
        .fake
        .records(UID)
        .into_iter()
        .find(|r| r.name == "POD")
        .unwrap();
    assert!(!sandbox.is_running());
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_that_fails_to_start_is_removed_and_retried() {
    let h = harness();
    h.fake.script(
        "POD",
        [Script::FailStart("pause: exec format error".into())],
    );
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    let next = w.pass(&p).await;
    assert_eq!(next, super::RETRY);
    assert!(
        h.fake.records(UID).is_empty(),
        "a failed sandbox leaves no record"
    );
    assert!(h.fake.calls_of("create_container app").is_empty());
    assert_eq!(
        waiting_reason(&status_of(&h, "app")).as_deref(),
        Some("ContainerCreating")
    );
    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("start_task"),
        ["start_task POD#0", "start_task POD#0", "start_task app#0"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_that_died_is_replaced_with_its_containers() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    h.fake.exit("POD", 137);
    w.pass(&p).await; // stops app, replaces the sandbox
    w.pass(&p).await; // starts app again in the new sandbox
    assert_eq!(h.fake.calls_of("kill app#0"), ["kill app#0 15"]);
    assert_eq!(
        h.fake.calls_of("start_task"),
        [
            "start_task POD#0",
            "start_task app#0",
            "start_task POD#1",
            "start_task app#1"
        ]
    );
}

/// After a failed pull the worker looks again within seconds, not at the next resync, so
/// the status moves on to ImagePullBackOff while the back-off runs: for an init container
/// (whose pass ends there) as for an app container.
#[tokio::test(start_paused = true)]
async fn a_failed_pull_is_looked_at_again_soon_to_show_the_back_off() {
    let h = harness();
    let mut p = pod(&["init"], &["app"], "Never");
    p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].image =
        Some("registry.test/ghost:1".into());
    let mut w = worker(&h, &p);
    let next = w.pass(&p).await;
    assert_eq!(
        waiting_reason(&status_of(&h, "init")).as_deref(),
        Some("ErrImagePull")
    );
    assert!(
        next <= Duration::from_secs(2),
        "looked at again in {next:?}"
    );
    let next = w.pass(&p).await;
    assert_eq!(
        waiting_reason(&status_of(&h, "init")).as_deref(),
        Some("ImagePullBackOff")
    );
    assert!(
        next <= Duration::from_secs(10),
        "looked at again in {next:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_image_is_pulled_and_a_failed_pull_backs_off() {
    let h = harness();
    h.fake.add_to_registry("registry.test/tool:1");
    let mut p = pod(&[], &["tool", "ghost"], "Always");
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].image = Some("registry.test/tool:1".into());
    spec.containers[1].image = Some("registry.test/ghost:1".into());
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert!(status_of(&h, "tool").state.unwrap().running.is_some());
    assert_eq!(
        waiting_reason(&status_of(&h, "ghost")).as_deref(),
        Some("ErrImagePull")
    );
    w.pass(&p).await;
    assert_eq!(
        waiting_reason(&status_of(&h, "ghost")).as_deref(),
        Some("ImagePullBackOff")
    );
    assert_eq!(
        h.fake.calls_of("pull_image"),
        [
            "pull_image registry.test/tool:1",
            "pull_image registry.test/ghost:1"
        ],
        "no second pull inside the back-off"
    );
}

/// A container is asked to stop with its image's STOPSIGNAL (here SIGQUIT), kept on its
/// record from creation; SIGKILL still ends the grace period.
#[tokio::test(start_paused = true)]
async fn a_container_is_stopped_with_its_images_stop_signal() {
    let h = harness();
    h.fake.set_stop_signal("busybox", "quit");
    h.fake.script("app", [Script::IgnoreTerm]);
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.terminate(Duration::from_secs(5), &|| false)
        .await
        .unwrap();
    assert_eq!(
        h.fake.calls_of("kill app"),
        ["kill app#0 3", "kill app#0 9"]
    );
}

#[tokio::test(start_paused = true)]
async fn termination_waits_the_grace_period_then_kills() {
    let h = harness();
    h.fake.script("stubborn", [Script::IgnoreTerm]);
    let p = pod(&[], &["stubborn", "polite"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let begun = tokio::time::Instant::now();
    w.terminate(Duration::from_secs(5), &|| false)
        .await
        .unwrap();
    assert!(
        begun.elapsed() >= Duration::from_secs(5),
        "SIGKILL came before the grace period ended"
    );
    assert_eq!(
        h.fake.calls_of("kill stubborn"),
        ["kill stubborn#0 15", "kill stubborn#0 9"]
    );
    assert_eq!(h.fake.calls_of("kill polite"), ["kill polite#0 15"]);
    assert!(h.fake.records(UID).is_empty());
    assert!(!h.shared.cfg.root_dir.join("pods").join(UID).exists());
}

#[tokio::test(start_paused = true)]
async fn an_oom_kill_shows_as_oomkilled_and_restarts() {
    let h = harness();
    h.fake.script("app", [Script::OomKill]);
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    let c = status_of(&h, "app");
    let last = c.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.reason.as_deref(), Some("OOMKilled"));
    assert_eq!(last.exit_code, 137);
    assert_eq!(c.restart_count, 1);
    assert!(
        !h.shared.oom_seen.contains("anything"),
        "reports are forgotten once recorded"
    );
}

#[tokio::test(start_paused = true)]
async fn a_container_that_fails_to_start_is_a_start_error() {
    let h = harness();
    h.fake.script(
        "app",
        [Script::FailStart("exec: \"nope\": not found".into())],
    );
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let c = status_of(&h, "app");
    assert_eq!(waiting_reason(&c).as_deref(), Some("RunContainerError"));
    assert_eq!(terminated_reason(&c), None);
    let last = c.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.reason.as_deref(), Some("StartError"));
    assert_eq!(last.exit_code, 128);
}

#[tokio::test(start_paused = true)]
async fn a_vanished_container_is_started_again() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    h.fake.vanish("app");
    w.pass(&p).await;
    assert_eq!(h.fake.calls_of("start_task app").len(), 2);
    assert!(status_of(&h, "app").state.unwrap().running.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_listing_that_times_out_is_retried_and_keeps_the_last_status() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let before = h.shared.statuses.get(UID).unwrap().version;
    h.fake.hang("pod_containers");
    assert_eq!(w.pass(&p).await, super::RETRY);
    assert_eq!(h.shared.statuses.get(UID).unwrap().version, before);
    h.fake.unhang("pod_containers");
    w.pass(&p).await;
    assert_eq!(
        h.fake.calls_of("start_task app").len(),
        1,
        "nothing restarted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_settled_pod_keeps_its_status_version() {
    let h = harness();
    let p = pod(&[], &["app"], "Always");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    w.pass(&p).await;
    let v = h.shared.statuses.get(UID).unwrap().version;
    w.pass(&p).await;
    w.pass(&p).await;
    assert_eq!(h.shared.statuses.get(UID).unwrap().version, v);
}

/// A pod whose log folder is on a hung disk waits in its own pass; another pod's pass on the
/// same single-threaded runtime (the worst case: any thread a disk holds is lost to every
/// task) still completes. Before, the worker's file calls ran on the async thread itself.
#[test]
#[ignore = "needs root and /dev/fuse: run hack/test.sh"]
fn a_hung_disk_holds_only_the_pod_that_touches_it() {
    let mut hung = crate::test_support::HungFs::mount();
    let hung_logs = hung.dir.path().join("pods");
    let stuck = harness_with(|cfg| cfg.pod_logs_dir = hung_logs);
    let fine = harness();
    let (answered, answer) = std::sync::mpsc::channel();
    let runtime = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let p = pod(&[], &["app"], "Always");
            let stuck_pass = {
                let (p, shared) = (p.clone(), stuck.shared.clone());
                tokio::spawn(async move {
                    let mut w = Worker::new(shared, super::pod_ref(&p));
                    w.pass(&p).await;
                })
            };
            // The stuck pod's next step after its image is its log folder.
            while stuck.fake.calls_of("resolve_image busybox").is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut w = worker(&fine, &p);
            w.pass(&p).await;
            let running = status_of(&fine, "app").state.unwrap().running.is_some();
            // Both at once: the other pod ran while this one still waited on its disk.
            let _ = answered.send((running, stuck_pass.is_finished()));
            stuck_pass.await.unwrap();
        });
    });
    let got = answer.recv_timeout(Duration::from_secs(120));
    hung.release();
    runtime.join().unwrap();
    assert_eq!(
        got,
        Ok((true, false)),
        "the other pod's pass must complete while the stuck one waits on its disk"
    );
}

/// `pod` under another UID and name, with its app containers' image.
fn other_pod(uid: &str, image: &str) -> Pod {
    let mut p = pod(&[], &["app"], "Always");
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(format!("pod-{uid}"));
    p.spec.as_mut().unwrap().containers[0].image = Some(image.into());
    p
}

#[tokio::test(start_paused = true)]
async fn start_slots_bound_first_starts_but_not_image_pulls_or_started_pods() {
    let mut h = harness();
    let slots = Arc::new(tokio::sync::Semaphore::new(1));
    Arc::get_mut(&mut h.shared).unwrap().start_slots = slots.clone();
    h.fake.add_to_registry("slow-image");
    // Pulls take a call's whole time-out.
    h.fake.hang("pull_image");
    let slow = other_pod("slow", "slow-image");
    let fast = other_pod("fast", "busybox");
    let mut slow_w = worker(&h, &slow);
    let mut fast_w = worker(&h, &fast);

    let pulling = tokio::spawn(async move {
        slow_w.pass(&slow).await;
        (slow_w, slow)
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.fake.calls_of("pull_image"), ["pull_image slow-image"]);
    // The only slot is free again while the image is pulled: the other pod starts at once.
    let started = tokio::time::timeout(Duration::from_secs(5), fast_w.pass(&fast)).await;
    assert!(
        started.is_ok(),
        "the fast pod waited for the slow pod's pull"
    );
    assert!(h
        .fake
        .calls_of("start_task")
        .contains(&"start_task app#0".to_string()));
    let (mut slow_w, slow) = pulling.await.unwrap();
    assert_eq!(
        h.fake.calls_of("start_task").len(),
        4,
        "{:?}",
        h.fake.calls()
    );

    // A pod in its first start waits for a slot.
    let held = slots.clone().acquire_owned().await.unwrap();
    let mut third_w = worker(&h, &other_pod("third", "busybox"));
    let third = other_pod("third", "busybox");
    let waited = tokio::time::timeout(Duration::from_secs(60), third_w.pass(&third)).await;
    assert!(waited.is_err(), "a first start went ahead without a slot");
    // Pods that have started once take none.
    let settled = tokio::time::timeout(Duration::from_secs(5), async {
        fast_w.pass(&fast).await;
        slow_w.pass(&slow).await;
    })
    .await;
    assert!(settled.is_ok(), "a started pod waited for a start slot");
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_limit_left_unset_is_the_nodes_allocatable_in_the_downward_api() {
    // Upstream's defaultPodLimitsForDownwardAPI reads the Node's allocatable: capacity less
    // the reservations and the hard eviction threshold, not the machine's capacity.
    let h = harness_with(|cfg| {
        cfg.eviction_hard = crate::config::node::parse_eviction_thresholds(
            &[("memory.available".to_string(), "100Mi".to_string())].into(),
        )
        .unwrap();
        cfg.system_reserved = [("cpu".to_string(), "500m".parse().unwrap())].into();
    });
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {
            "hostNetwork": true,
            "containers": [{"name": "app", "image": "busybox", "env": [
                {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
            ]}]
        }
    }))
    .unwrap();
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let env = h
        .fake
        .spec_of("app")
        .and_then(|s| s.process().clone())
        .and_then(|p| p.env().clone())
        .unwrap_or_default();
    let memory = (8i64 << 30) - (100 << 20);
    assert!(env.contains(&format!("MEMORY_LIMIT={memory}")), "{env:?}");
    // 2000m less 500m reserved, rounded up to whole cores as the downward API does.
    assert!(env.contains(&"CPU_LIMIT=2".to_string()), "{env:?}");
}

/// A pod start through the worker loop counts its sandbox, its init and app containers and
/// its passes (create first, update once the pod changes), and the pod's listing feeds the
/// running counts until it leaves the node. The counters are global and shared with the
/// other tests: lower bounds on deltas, and this pod's own UID for its runtime state.
#[tokio::test(start_paused = true)]
async fn a_pod_start_is_counted_on_metrics() {
    use tokio::sync::{watch, Notify};
    const METRICS_UID: &str = "uid-worker-metrics";
    let m = crate::metrics::kubelet();
    let count = |c: &crate::metrics::Counter, labels: &[&str]| c.get(labels).unwrap_or(0.0);
    let passes = |kind: &str| m.pod_worker_duration.totals(&[kind]).map_or(0, |t| t.0);
    let pods0 = count(&m.started_pods, &[]);
    let init0 = count(&m.started_containers, &["init_container"]);
    let app0 = count(&m.started_containers, &["container"]);
    let (create0, update0) = (passes("create"), passes("update"));

    let h = harness();
    h.fake.script("setup", [Script::Exit(0)]);
    let mut p = pod(&["setup"], &["app"], "Always");
    p.metadata.uid = Some(METRICS_UID.into());
    let (tx, rx) = watch::channel(Some(Arc::new(p.clone())));
    let wake = Arc::new(Notify::new());
    let task = tokio::spawn(worker(&h, &p).run(rx, wake.clone()));
    let mut running = false;
    for _ in 0..600 {
        let state = crate::metrics::pods::runtime_state_of(METRICS_UID);
        // The init container done, the app running.
        running = state.is_some_and(|s| {
            s.sandbox_running
                && s.containers.contains(&("running", 1))
                && s.containers.contains(&("exited", 1))
        });
        if running {
            break;
        }
        // What the runtime's exit events do: the worker looks again.
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        running,
        "the pod's listing shows its sandbox and app running: {:?}",
        crate::metrics::pods::runtime_state_of(METRICS_UID)
    );
    assert!(count(&m.started_pods, &[]) >= pods0 + 1.0);
    assert!(count(&m.started_containers, &["init_container"]) >= init0 + 1.0);
    assert!(count(&m.started_containers, &["container"]) >= app0 + 1.0);
    assert!(passes("create") > create0);

    let mut changed = p.clone();
    changed.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    tx.send_replace(Some(Arc::new(changed)));
    for _ in 0..600 {
        if passes("update") > update0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        passes("update") > update0,
        "a changed pod's pass is an update"
    );

    tx.send_replace(None);
    tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .expect("the worker finishes")
        .unwrap();
    assert_eq!(crate::metrics::pods::runtime_state_of(METRICS_UID), None);
}
