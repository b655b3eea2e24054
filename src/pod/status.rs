//! Pod status as upstream computes it (generateAPIPodStatus, getPhase): container
//! statuses from what containerd holds, the phase, and the pod conditions.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::qos::qos_class;
use crate::runtime::containers::{ContainerRecord, ExitInfo, State};
use crate::runtime::labels::Kind;

/// Why a container is not running, as the worker last found it (image missing, creation
/// failed, back-off): upstream's waiting reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

impl Waiting {
    pub fn new(reason: &str, message: impl Into<String>) -> Self {
        Waiting {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// What the probes say of a running container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    pub started: bool,
    pub ready: bool,
}

pub struct StatusInput<'a> {
    pub pod: &'a Pod,
    pub records: &'a [ContainerRecord],
    pub waiting: &'a HashMap<String, Waiting>,
    /// Probe results by container name; a running container without an entry has no
    /// probes and is started and ready.
    pub probes: &'a HashMap<String, Probed>,
    /// The sandbox runs and its network is set up.
    pub sandbox_ready: bool,
    pub pod_ips: &'a [String],
    pub host_ip: &'a str,
    pub start_time: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// The previous status, whose condition transition times carry over when unchanged.
    pub previous: Option<&'a PodStatus>,
}

pub fn ktime(t: DateTime<Utc>) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).unwrap_or_default())
}

fn terminated(e: &ExitInfo, id: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: e.exit_code,
            reason: Some(e.reason.clone()),
            message: (!e.message.is_empty()).then(|| e.message.clone()),
            started_at: e.started_at.map(ktime),
            finished_at: e.finished_at.map(ktime),
            container_id: Some(format!("containerd://{id}")),
            signal: None,
        }),
        ..Default::default()
    }
}

fn waiting(w: &Waiting) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(w.reason.clone()),
            message: (!w.message.is_empty()).then(|| w.message.clone()),
        }),
        ..Default::default()
    }
}

/// Records of one container, newest attempt first.
pub fn attempts<'r>(
    records: &'r [ContainerRecord],
    name: &str,
    kind: Kind,
) -> Vec<&'r ContainerRecord> {
    let mut v: Vec<&ContainerRecord> = records
        .iter()
        .filter(|r| r.kind == kind && r.name == name)
        .collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.attempt));
    v
}

fn container_status(
    c: &Container,
    kind: Kind,
    records: &[ContainerRecord],
    pending: Option<&Waiting>,
    default_waiting: &str,
    probed: Option<&Probed>,
) -> ContainerStatus {
    let tries = attempts(records, &c.name, kind);
    let latest = tries.first();
    let previous_exit = tries
        .get(1)
        .and_then(|r| r.exit().map(|e| terminated(e, &r.id)));
    let mut s = ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        restart_count: latest.map(|r| r.attempt as i32).unwrap_or(0),
        started: Some(false),
        ..Default::default()
    };
    let fallback = Waiting::new(default_waiting, "");
    match latest {
        None => {
            s.state = Some(waiting(pending.unwrap_or(&fallback)));
        }
        Some(r) => {
            s.container_id = Some(format!("containerd://{}", r.id));
            s.image_id = r.image_ref.clone();
            match &r.state {
                State::Running { started_at, .. } => {
                    s.state = Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: started_at.map(ktime),
                        }),
                        ..Default::default()
                    });
                    s.last_state = previous_exit;
                    let p = probed.copied().unwrap_or(Probed {
                        started: true,
                        ready: true,
                    });
                    s.started = Some(p.started);
                    s.ready = p.started && p.ready;
                }
                State::Exited { info, .. } => match pending {
                    // About to be restarted, or in back-off: waiting, with the death as lastState.
                    Some(w) => {
                        s.state = Some(waiting(w));
                        s.last_state = Some(terminated(info, &r.id));
                    }
                    None => {
                        s.state = Some(terminated(info, &r.id));
                        s.last_state = previous_exit;
                    }
                },
                State::Created => {
                    s.state = Some(waiting(pending.unwrap_or(&fallback)));
                    s.last_state = previous_exit;
                }
            }
        }
    }
    if s.last_state.is_none() {
        s.last_state = Some(ContainerState::default());
    }
    s
}

/// upstream getPhase.
pub fn phase(pod: &Pod, init: &[ContainerStatus], app: &[ContainerStatus]) -> &'static str {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let mut pending_init = 0;
    let mut failed_init = 0;
    for s in init {
        let st = s.state.as_ref();
        if st.and_then(|x| x.running.as_ref()).is_some() {
            pending_init += 1;
        } else if let Some(t) = st.and_then(|x| x.terminated.as_ref()) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if st.and_then(|x| x.waiting.as_ref()).is_some() {
            match s.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting_n, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for s in app {
        let st = s.state.as_ref();
        if st.and_then(|x| x.running.as_ref()).is_some() {
            running += 1;
        } else if let Some(t) = st.and_then(|x| x.terminated.as_ref()) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.and_then(|x| x.waiting.as_ref()).is_some() {
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting_n += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_init > 0 || failed_init > 0 {
        return "Pending";
    }
    if waiting_n > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    input: &StatusInput,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let prev = input
        .previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    let since = match prev {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(ktime(input.now)),
    };
    PodCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: since,
        last_probe_time: None,
        observed_generation: None,
    }
}

pub fn compute(input: &StatusInput) -> PodStatus {
    let pod = input.pod;
    let spec = pod.spec.as_ref();
    let init_specs: &[Container] = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let app_specs: &[Container] = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);

    let init: Vec<ContainerStatus> = init_specs
        .iter()
        .map(|c| {
            container_status(
                c,
                Kind::Init,
                input.records,
                input.waiting.get(&c.name),
                "PodInitializing",
                None,
            )
        })
        .collect();
    let initialized = init.iter().all(|s| {
        s.state
            .as_ref()
            .and_then(|x| x.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    });
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let app: Vec<ContainerStatus> = app_specs
        .iter()
        .map(|c| {
            container_status(
                c,
                Kind::App,
                input.records,
                input.waiting.get(&c.name),
                app_default,
                input.probes.get(&c.name),
            )
        })
        .collect();
    let phase = phase(pod, &init, &app);
    let terminal = phase == "Succeeded" || phase == "Failed";

    let unready: Vec<&str> = app
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let incomplete: Vec<&str> = init
        .iter()
        .filter(|s| {
            s.state
                .as_ref()
                .and_then(|x| x.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|s| s.name.as_str())
        .collect();
    let containers_ready = unready.is_empty();
    let (ready_reason, ready_msg) = if terminal {
        (Some("PodCompleted"), None)
    } else if containers_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            input.sandbox_ready,
            None,
            None,
            input,
        ),
        condition(
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            (!initialized).then(|| {
                format!(
                    "containers with incomplete status: [{}]",
                    incomplete.join(" ")
                )
            }),
            input,
        ),
        condition(
            "Ready",
            containers_ready && !terminal,
            ready_reason,
            ready_msg.clone(),
            input,
        ),
        condition(
            "ContainersReady",
            containers_ready && !terminal,
            ready_reason,
            ready_msg,
            input,
        ),
        condition("PodScheduled", true, None, None, input),
    ];
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(app),
        init_container_statuses: (!init_specs.is_empty()).then_some(init),
        pod_ip: input.pod_ips.first().cloned(),
        pod_ips: (!input.pod_ips.is_empty()).then(|| {
            input
                .pod_ips
                .iter()
                .map(|ip| PodIP { ip: ip.clone() })
                .collect()
        }),
        host_ip: Some(input.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: input.host_ip.to_string(),
        }]),
        start_time: Some(ktime(input.start_time)),
        qos_class: Some(qos_class(pod).as_str().to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
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

    fn status(
        p: &Pod,
        records: &[ContainerRecord],
        waiting: &HashMap<String, Waiting>,
    ) -> PodStatus {
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
        let never = pod("Never", true);
        let s = status(
            &never,
            &[rec("init", Kind::Init, 0, exited(1))],
            &HashMap::new(),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
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
        });
        assert_eq!(
            cond(&second, "Ready").last_transition_time,
            cond(&first, "Ready").last_transition_time
        );
    }
}
