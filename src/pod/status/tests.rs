use super::*;
use crate::runtime::labels::PodRef;
use chrono::TimeZone;

fn pod(policy: &str, init: bool) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"restartPolicy": policy, "containers": [{"name": "app", "image": "busybox"}]}
    });
    if init {
        v["spec"]["initContainers"] = serde_json::json!([{"name": "init", "image": "busybox"}]);
    }
    serde_json::from_value(v).unwrap()
}

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

fn rec(name: &str, kind: Kind, attempt: u32, state: State) -> ContainerRecord {
    ContainerRecord {
        id: format!("{name}-{attempt}"),
        pod: PodRef {
            uid: "u".into(),
            name: "p".into(),
            namespace: "default".into(),
        },
        kind,
        name: name.into(),
        attempt,
        image: "busybox".into(),
        image_ref: "docker.io/library/busybox@sha256:x".into(),
        created_at: None,
        labels: Default::default(),
        state,
    }
}

fn running() -> State {
    State::Running {
        pid: 1,
        started_at: Some(t(1)),
    }
}

fn exited(code: i32) -> State {
    State::Exited {
        info: ExitInfo {
            exit_code: code,
            started_at: Some(t(1)),
            finished_at: Some(t(2)),
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: String::new(),
        },
        finalized: true,
    }
}

fn status(p: &Pod, records: &[ContainerRecord], waiting: &HashMap<String, Waiting>) -> PodStatus {
    compute(&StatusInput {
        pod: p,
        records,
        waiting,
        probes: &HashMap::new(),
        sandbox_ready: true,
        pod_ips: &["10.88.0.2".to_string()],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(3),
        previous: None,
        terminal: false,
        failure: None,
    })
}

fn cond<'a>(s: &'a PodStatus, kind: &str) -> &'a PodCondition {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap()
}

#[test]
fn running_pod_is_ready() {
    let p = pod("Always", false);
    let s = status(&p, &[rec("app", Kind::App, 0, running())], &HashMap::new());
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(cond(&s, "PodScheduled").status, "True");
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert!(c.ready);
    assert_eq!(c.container_id.as_deref(), Some("containerd://app-0"));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.2"));
}

#[test]
fn readiness_probe_gates_ready() {
    let p = pod("Always", false);
    let recs = [rec("app", Kind::App, 0, running())];
    let probes = HashMap::from([(
        "app".to_string(),
        Probed {
            started: true,
            ready: false,
        },
    )]);
    let s = compute(&StatusInput {
        pod: &p,
        records: &recs,
        waiting: &HashMap::new(),
        probes: &probes,
        sandbox_ready: true,
        pod_ips: &[],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(3),
        previous: None,
        terminal: false,
        failure: None,
    });
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert!(!c.ready);
    assert_eq!(c.started, Some(true));
    assert_eq!(cond(&s, "Ready").status, "False");
    assert_eq!(cond(&s, "ContainersReady").status, "False");
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn nothing_yet_is_pending_container_creating() {
    let p = pod("Always", false);
    let s = status(&p, &[], &HashMap::new());
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        c.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ContainerCreating")
    );
    let r = cond(&s, "Ready");
    assert_eq!(r.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        r.message.as_deref(),
        Some("containers with unready status: [app]")
    );
}

#[test]
fn crash_loop_shows_waiting_with_last_state_and_count() {
    let p = pod("Always", false);
    let w = HashMap::from([(
        "app".to_string(),
        Waiting::new(
            "CrashLoopBackOff",
            "back-off 10s restarting failed container=app",
        ),
    )]);
    let s = status(
        &p,
        &[
            rec("app", Kind::App, 0, exited(1)),
            rec("app", Kind::App, 1, exited(1)),
        ],
        &w,
    );
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.restart_count, 1);
    assert_eq!(
        c.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("CrashLoopBackOff")
    );
    assert_eq!(
        c.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn phases_for_policies() {
    let done = [rec("app", Kind::App, 0, exited(0))];
    let failed = [rec("app", Kind::App, 0, exited(3))];
    let none = HashMap::new();
    assert_eq!(
        status(&pod("Never", false), &done, &none).phase.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(
        status(&pod("Never", false), &failed, &none)
            .phase
            .as_deref(),
        Some("Failed")
    );
    assert_eq!(
        status(&pod("OnFailure", false), &done, &none)
            .phase
            .as_deref(),
        Some("Succeeded")
    );
    let s = status(&pod("Never", false), &done, &none);
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
}

#[test]
fn init_containers_gate_the_pod() {
    let p = pod("Always", true);
    let s = status(
        &p,
        &[rec("init", Kind::Init, 0, running())],
        &HashMap::new(),
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(cond(&s, "Initialized").status, "False");
    let init = |s: &PodStatus| s.init_container_statuses.as_ref().unwrap()[0].clone();
    assert!(!init(&s).ready, "a running init container is not ready");
    assert_eq!(init(&s).started, Some(true));
    assert_eq!(
        cond(&s, "Initialized").message.as_deref(),
        Some("containers with incomplete status: [init]")
    );
    let app = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("PodInitializing")
    );
    let s = status(
        &p,
        &[
            rec("init", Kind::Init, 0, exited(0)),
            rec("app", Kind::App, 0, running()),
        ],
        &HashMap::new(),
    );
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert!(init(&s).ready, "a succeeded init container is ready");
    let never = pod("Never", true);
    let s = status(
        &never,
        &[rec("init", Kind::Init, 0, exited(1))],
        &HashMap::new(),
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert!(!init(&s).ready, "a failed init container is not ready");
}

/// Ready waits for every readiness gate's condition to be True in the pod's (API) status,
/// once the containers are ready; ContainersReady does not.
#[test]
fn readiness_gates_hold_ready_until_their_conditions_are_true() {
    let mut p = pod("Always", false);
    p.spec.as_mut().unwrap().readiness_gates = Some(vec![
        serde_json::from_value(serde_json::json!({"conditionType": "k8s.io/gate1"})).unwrap(),
        serde_json::from_value(serde_json::json!({"conditionType": "k8s.io/gate2"})).unwrap(),
    ]);
    let records = [rec("app", Kind::App, 0, running())];
    let s = status(&p, &records, &HashMap::new());
    assert_eq!(cond(&s, "ContainersReady").status, "True");
    let ready = cond(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("corresponding condition of pod readiness gate \"k8s.io/gate1\" does not exist., corresponding condition of pod readiness gate \"k8s.io/gate2\" does not exist.")
    );
    let gate = |kind: &str, status: &str| -> PodCondition {
        serde_json::from_value(serde_json::json!({"type": kind, "status": status})).unwrap()
    };
    p.status = Some(PodStatus {
        conditions: Some(vec![
            gate("k8s.io/gate1", "True"),
            gate("k8s.io/gate2", "False"),
        ]),
        ..Default::default()
    });
    let s = status(&p, &records, &HashMap::new());
    assert_eq!(
        cond(&s, "Ready").message.as_deref(),
        Some("the status of pod readiness gate \"k8s.io/gate2\" is not \"True\", but False")
    );
    p.status = Some(PodStatus {
        conditions: Some(vec![
            gate("k8s.io/gate1", "True"),
            gate("k8s.io/gate2", "True"),
        ]),
        ..Default::default()
    });
    let s = status(&p, &records, &HashMap::new());
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(cond(&s, "Ready").reason, None);
}

#[test]
fn transition_times_carry_over() {
    let p = pod("Always", false);
    let recs = [rec("app", Kind::App, 0, running())];
    let none = HashMap::new();
    let first = status(&p, &recs, &none);
    let second = compute(&StatusInput {
        pod: &p,
        records: &recs,
        waiting: &none,
        probes: &HashMap::new(),
        sandbox_ready: true,
        pod_ips: &[],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(100),
        previous: Some(&first),
        terminal: false,
        failure: None,
    });
    assert_eq!(
        cond(&second, "Ready").last_transition_time,
        cond(&first, "Ready").last_transition_time
    );
}

/// The status of a pod the worker terminated (`terminal`) or failed (`failure`).
fn terminal_status(
    p: &Pod,
    records: &[ContainerRecord],
    failure: Option<&PodFailure>,
) -> PodStatus {
    compute(&StatusInput {
        pod: p,
        records,
        waiting: &HashMap::new(),
        probes: &HashMap::new(),
        sandbox_ready: false,
        pod_ips: &[],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(3),
        previous: None,
        terminal: true,
        failure,
    })
}

#[test]
fn a_deleted_pod_whose_containers_were_killed_failed_whatever_its_policy() {
    let p = pod("Always", false);
    let killed = terminal_status(&p, &[rec("app", Kind::App, 0, exited(143))], None);
    assert_eq!(killed.phase.as_deref(), Some("Failed"));
    assert_eq!(
        cond(&killed, "Ready").reason.as_deref(),
        Some("PodCompleted")
    );
    let clean = terminal_status(&p, &[rec("app", Kind::App, 0, exited(0))], None);
    assert_eq!(clean.phase.as_deref(), Some("Succeeded"));
}

#[test]
fn a_terminated_pods_container_that_never_ran_is_status_unknown() {
    let p = pod("Always", false);
    let s = terminal_status(&p, &[], None);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let c = &s.container_statuses.as_ref().unwrap()[0];
    let t = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.reason.as_deref(), Some(CONTAINER_STATUS_UNKNOWN));
    assert_eq!(t.exit_code, 137);
}

#[test]
fn a_failed_pod_carries_its_reason_and_message() {
    let p = pod("Always", false);
    let f = PodFailure {
        reason: "DeadlineExceeded".into(),
        message: "Pod was active on the node longer than the specified deadline".into(),
        disruption: false,
    };
    let s = terminal_status(&p, &[rec("app", Kind::App, 0, exited(137))], Some(&f));
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(s.message, Some(f.message.clone()));
}

#[test]
fn a_terminal_phase_stays() {
    let p = pod("Always", false);
    let recs = [rec("app", Kind::App, 0, exited(1))];
    let failed = terminal_status(&p, &recs, None);
    // The same records, no longer marked terminal (a later pass): still Failed.
    let later = compute(&StatusInput {
        pod: &p,
        records: &recs,
        waiting: &HashMap::new(),
        probes: &HashMap::new(),
        sandbox_ready: false,
        pod_ips: &[],
        host_ip: "192.0.2.1",
        start_time: t(0),
        now: t(4),
        previous: Some(&failed),
        terminal: false,
        failure: None,
    });
    assert_eq!(later.phase.as_deref(), Some("Failed"));
    assert_eq!(
        status(&p, &recs, &HashMap::new()).phase.as_deref(),
        Some("Running")
    );
}

mod sidecars;
