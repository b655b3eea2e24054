//! Statuses of pods with sidecars, as upstream's generateAPIPodStatus: the sidecar's own
//! status (started, ready from its probes, restarts), the phase (sidecars run beside the
//! main containers and never decide how the pod ends), Initialized (sidecars count once
//! started) and ContainersReady (their readiness counts).

use super::*;

/// Init containers `proxy` (a sidecar) and `setup`, main container `app`.
fn pod_with_sidecar(policy: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "restartPolicy": policy,
            "initContainers": [
                {"name": "proxy", "image": "busybox", "restartPolicy": "Always"},
                {"name": "setup", "image": "busybox"},
            ],
            "containers": [{"name": "app", "image": "busybox"}],
        }
    }))
    .unwrap()
}

fn with_probes(
    p: &Pod,
    records: &[ContainerRecord],
    waiting: &HashMap<String, Waiting>,
    probes: &HashMap<String, Probed>,
) -> PodStatus {
    compute(&StatusInput {
        pod: p,
        records,
        waiting,
        probes,
        sandbox_ready: true,
        pod_ips: &[],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(3),
        previous: None,
        terminal: false,
        failure: None,
    })
}

fn probed(started: bool, ready: bool) -> HashMap<String, Probed> {
    HashMap::from([("proxy".to_string(), Probed { started, ready })])
}

fn init_status<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap()
}

#[test]
fn a_sidecar_not_started_yet_holds_initialization_and_the_phase() {
    let p = pod_with_sidecar("Always");
    let recs = [rec("proxy", Kind::Init, 0, running())];
    let s = with_probes(&p, &recs, &HashMap::new(), &probed(false, false));
    let proxy = init_status(&s, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(false), false));
    assert!(proxy.state.as_ref().unwrap().running.is_some());
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let init = cond(&s, "Initialized");
    assert_eq!(init.status, "False");
    assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
    assert_eq!(
        init.message.as_deref(),
        Some("containers with incomplete status: [proxy setup]")
    );
}

#[test]
fn a_started_sidecar_and_a_completed_init_container_initialize_the_pod() {
    let p = pod_with_sidecar("Always");
    let recs = [
        rec("proxy", Kind::Init, 0, running()),
        rec("setup", Kind::Init, 0, exited(0)),
        rec("app", Kind::App, 0, running()),
    ];
    // Started, not ready: its readiness is the pod's.
    let s = with_probes(&p, &recs, &HashMap::new(), &probed(true, false));
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let proxy = init_status(&s, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(true), false));
    assert!(
        init_status(&s, "setup").ready,
        "a completed init container is ready"
    );
    for kind in ["Ready", "ContainersReady"] {
        let c = cond(&s, kind);
        assert_eq!(c.status, "False", "{kind}");
        assert_eq!(
            c.message.as_deref(),
            Some("containers with unready status: [proxy]"),
            "{kind}"
        );
    }
    // Without probes a running sidecar is started and ready, as a main container is.
    let s = with_probes(&p, &recs, &HashMap::new(), &HashMap::new());
    let proxy = init_status(&s, "proxy");
    assert_eq!((proxy.started, proxy.ready), (Some(true), true));
    assert_eq!(cond(&s, "Ready").status, "True");
}

#[test]
fn a_sidecar_restarting_after_initialization_keeps_the_pod_running_and_initialized() {
    let p = pod_with_sidecar("Never");
    let recs = [
        rec("proxy", Kind::Init, 0, exited(1)),
        rec("proxy", Kind::Init, 1, exited(1)),
        rec("setup", Kind::Init, 0, exited(0)),
        rec("app", Kind::App, 0, running()),
    ];
    let w = HashMap::from([(
        "proxy".to_string(),
        Waiting::new(
            "CrashLoopBackOff",
            "back-off 10s restarting failed container=proxy",
        ),
    )]);
    let s = with_probes(&p, &recs, &w, &HashMap::new());
    let proxy = init_status(&s, "proxy");
    assert_eq!(proxy.restart_count, 1);
    assert!(!proxy.ready);
    assert_eq!(
        proxy
            .last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert_eq!(
        s.phase.as_deref(),
        Some("Running"),
        "its failure is not the pod's"
    );
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(cond(&s, "Ready").status, "False");
}

#[test]
fn sidecars_do_not_decide_how_a_job_pod_ends() {
    for (code, end) in [(0, "Succeeded"), (2, "Failed")] {
        let p = pod_with_sidecar("Never");
        let mut recs = vec![
            rec("proxy", Kind::Init, 0, running()),
            rec("setup", Kind::Init, 0, exited(0)),
            rec("app", Kind::App, 0, exited(code)),
        ];
        // While the sidecar still runs, the pod does.
        let s = with_probes(&p, &recs, &HashMap::new(), &HashMap::new());
        assert_eq!(s.phase.as_deref(), Some("Running"), "exit {code}");
        // Stopped (SIGTERM): its 143 is not a failure of the pod.
        recs[0] = rec("proxy", Kind::Init, 0, exited(143));
        let s = with_probes(&p, &recs, &HashMap::new(), &HashMap::new());
        assert_eq!(s.phase.as_deref(), Some(end), "exit {code}");
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    }
}

#[test]
fn a_sidecar_running_alone_before_the_main_containers_is_pending() {
    // Not started (its startup probe has not succeeded): Pending even though it runs.
    let p = pod_with_sidecar("Always");
    let recs = [
        rec("proxy", Kind::Init, 0, running()),
        rec("setup", Kind::Init, 0, exited(0)),
    ];
    let s = with_probes(&p, &recs, &HashMap::new(), &probed(false, false));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    // Started, the main container not created yet: still Pending (it waits).
    let s = with_probes(&p, &recs, &HashMap::new(), &probed(true, true));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(cond(&s, "Initialized").status, "True");
}
