//! Pod status as upstream computes it (generateAPIPodStatus, getPhase): container
//! statuses from what containerd holds, the phase, and the pod conditions.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::sidecar::is_sidecar;
use crate::runtime::containers::{ContainerRecord, ExitInfo, State};
use crate::runtime::labels::Kind;
use crate::vocabulary::qos::qos_class;

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

/// Why the agent failed the pod as a whole (upstream's pod sync handlers' eviction result,
/// e.g. activeDeadlineSeconds): the pod's phase is Failed with this reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    pub reason: String,
    pub message: String,
    /// The agent ends the pod to relieve the node (eviction): the status carries a
    /// DisruptionTarget condition.
    pub disruption: bool,
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
    /// The previous status, whose condition transition times carry over when unchanged,
    /// and whose terminal phase stays.
    pub previous: Option<&'a PodStatus>,
    /// The pod is terminating or terminated on this node (deleted, or failed as a whole):
    /// its containers will not be restarted whatever the restart policy says.
    pub terminal: bool,
    /// The agent failed the pod as a whole.
    pub failure: Option<&'a PodFailure>,
}

/// upstream's terminated reason for a container no record shows when its pod terminated.
pub const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

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
    // A regular init container is ready once it has succeeded, never while it runs
    // (upstream's prober manager); the e2e specs check both. A sidecar is started and
    // ready as an app container is, from its probes.
    if kind == Kind::Init && !is_sidecar(c) {
        s.ready = s
            .state
            .as_ref()
            .and_then(|x| x.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0);
    }
    s
}

/// Each of the pod's readiness gates with the status of its condition in the pod's status
/// (as the API has it; None when it is missing).
pub(crate) fn readiness_gate_conditions(pod: &Pod) -> Vec<(&str, Option<&str>)> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref());
    gates
        .into_iter()
        .flatten()
        .map(|g| {
            let kind = g.condition_type.as_str();
            let status = conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == kind)
                .map(|c| c.status.as_str());
            (kind, status)
        })
        .collect()
}

/// What keeps each of the pod's readiness gates closed: its condition missing, or not
/// "True"; upstream's wording.
fn unready_gates(pod: &Pod) -> Vec<String> {
    readiness_gate_conditions(pod)
        .into_iter()
        .filter_map(|(kind, status)| match status {
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{kind}\" does not exist."
            )),
            Some(s) if s != "True" => Some(format!(
                "the status of pod readiness gate \"{kind}\" is not \"True\", but {s}"
            )),
            Some(_) => None,
        })
        .collect()
}

/// upstream getPhase (1.34, with sidecars); `terminal`: the pod's containers will not be
/// restarted (its podIsTerminal).
pub fn phase(
    pod: &Pod,
    init: &[ContainerStatus],
    app: &[ContainerStatus],
    terminal: bool,
) -> &'static str {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let init_specs = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let sidecar =
        |s: &ContainerStatus| init_specs.iter().any(|c| c.name == s.name && is_sidecar(c));
    let ended = |s: &ContainerStatus| {
        s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some()
    };
    let mut pending_init = 0;
    let mut failed_init = 0;
    for s in init.iter().filter(|s| !sidecar(s)) {
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
    // Sidecars count as running containers while they run; how one ended never counts
    // (the main containers decide how the pod ends).
    let mut pending_sidecars = 0;
    for s in init.iter().filter(|s| sidecar(s)) {
        let st = s.state.as_ref();
        if st.and_then(|x| x.running.as_ref()).is_some() {
            if s.started != Some(true) {
                pending_sidecars += 1;
            }
            running += 1;
        } else if st.and_then(|x| x.terminated.as_ref()).is_some() {
        } else if st.and_then(|x| x.waiting.as_ref()).is_some() {
            if !ended(s) {
                pending_sidecars += 1;
                waiting_n += 1;
            }
        } else {
            pending_sidecars += 1;
            unknown += 1;
        }
    }
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
            if ended(s) {
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
    // Sidecars restarting once a main container ran do not make the pod Pending again.
    if pending_init > 0 || (pending_sidecars > 0 && !any_main_started(app)) {
        return "Pending";
    }
    if failed_init > 0 {
        return "Pending";
    }
    if waiting_n > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        // Nothing will restart the containers, whatever the policy says.
        if terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
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

/// A main container runs or ran (upstream's HasAnyRegularContainerStarted): the pod was
/// initialized once.
fn any_main_started(app: &[ContainerStatus]) -> bool {
    app.iter().any(|s| {
        s.state
            .as_ref()
            .is_some_and(|x| x.running.is_some() || x.terminated.is_some())
    })
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

    let mut init: Vec<ContainerStatus> = init_specs
        .iter()
        .map(|c| {
            container_status(
                c,
                Kind::Init,
                input.records,
                input.waiting.get(&c.name),
                "PodInitializing",
                // Sidecars are probed; other init containers have no probes.
                input.probes.get(&c.name).filter(|_| is_sidecar(c)),
            )
        })
        .collect();
    // upstream's GeneratePodInitializedCondition: every regular init container completed
    // and every sidecar started; or a main container ran already (sidecars restarting
    // later do not undo it).
    let incomplete: Vec<&str> = init_specs
        .iter()
        .zip(&init)
        .filter(|(c, s)| !init_done(c, s))
        .map(|(c, _)| c.name.as_str())
        .collect();
    // As its status will show it: running, or terminated (not waiting for a restart).
    let app_ran = app_specs.iter().any(|c| {
        attempts(input.records, &c.name, Kind::App)
            .first()
            .is_some_and(|r| match r.state {
                State::Running { .. } => true,
                State::Exited { .. } => !input.waiting.contains_key(&c.name),
                State::Created => false,
            })
    });
    let initialized = incomplete.is_empty() || app_ran;
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let mut app: Vec<ContainerStatus> = app_specs
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
    // Never ready (upstream's prober manager sets readiness for the others only), and not
    // part of the phase or the pod's readiness.
    let ephemeral: Vec<ContainerStatus> = crate::pod::ephemeral::containers(pod)
        .iter()
        .map(|(c, _)| ContainerStatus {
            ready: false,
            ..container_status(
                c,
                Kind::Ephemeral,
                input.records,
                input.waiting.get(&c.name),
                "ContainerCreating",
                None,
            )
        })
        .collect();
    let mut phase = phase(pod, &init, &app, input.terminal);
    if input.terminal {
        phase = settle_terminated(&mut init, &mut app, phase);
    }
    if input.failure.is_some() {
        phase = "Failed";
    }
    // A terminal phase is final (upstream's merge with the status manager's and the API's).
    let earlier = input
        .previous
        .and_then(|p| p.phase.as_deref())
        .or_else(|| pod.status.as_ref().and_then(|s| s.phase.as_deref()));
    match earlier {
        Some("Succeeded") if !is_terminal(phase) => phase = "Succeeded",
        Some("Failed") if !is_terminal(phase) => phase = "Failed",
        _ => {}
    }
    let terminal = is_terminal(phase);

    // Sidecars' readiness counts with the main containers' (upstream's
    // GenerateContainersReadyCondition), sidecars first.
    let sidecars = init_specs
        .iter()
        .zip(&init)
        .filter(|(c, _)| is_sidecar(c))
        .map(|(_, s)| s);
    let unready: Vec<&str> = sidecars
        .chain(&app)
        .filter(|s| !s.ready)
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
    // Ready also waits for the readiness gates' conditions, which others set in the API
    // (upstream's GeneratePodReadyCondition), once the containers are ready.
    let gates = unready_gates(pod);
    let (ready, pod_ready_reason, pod_ready_msg) =
        if containers_ready && !terminal && !gates.is_empty() {
            (
                false,
                Some("ReadinessGatesNotReady"),
                Some(gates.join(", ")),
            )
        } else {
            (
                containers_ready && !terminal,
                ready_reason,
                ready_msg.clone(),
            )
        };
    let mut conditions = vec![
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
        condition("Ready", ready, pod_ready_reason, pod_ready_msg, input),
        condition(
            "ContainersReady",
            containers_ready && !terminal,
            ready_reason,
            ready_msg,
            input,
        ),
        condition("PodScheduled", true, None, None, input),
    ];
    // A pod the agent stops to relieve the node says so (upstream's DisruptionTarget,
    // which disruption budgets and Job pod-failure policies read).
    if let Some(f) = input.failure.filter(|f| f.disruption) {
        conditions.push(condition(
            "DisruptionTarget",
            true,
            Some("TerminationByKubelet"),
            Some(f.message.clone()),
            input,
        ));
    }
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(app),
        init_container_statuses: (!init_specs.is_empty()).then_some(init),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
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
        reason: input.failure.map(|f| f.reason.clone()),
        message: input.failure.map(|f| f.message.clone()),
        ..Default::default()
    }
}

/// An init container counts as done for the Initialized condition (upstream's
/// isInitContainerInitialized): a sidecar once it has started, another once it succeeded.
fn init_done(c: &Container, s: &ContainerStatus) -> bool {
    if is_sidecar(c) {
        return s.started == Some(true);
    }
    s.state
        .as_ref()
        .and_then(|x| x.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

fn is_terminal(phase: &str) -> bool {
    phase == "Succeeded" || phase == "Failed"
}

/// A terminated pod's container statuses and phase as upstream's status manager settles
/// them (TerminatePod): an app container no record shows as terminated is reported
/// terminated with an error, since whether it ran is unknown; init containers before the
/// last one that started likewise, later ones never ran and stay waiting; a phase that is
/// still Pending or Running becomes Failed.
fn settle_terminated(
    init: &mut [ContainerStatus],
    app: &mut [ContainerStatus],
    phase: &'static str,
) -> &'static str {
    let unknown = || ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_string()),
            message: Some(
                "The container could not be located when the pod was terminated".to_string(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let ran = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .is_some_and(|x| x.terminated.is_some() || x.running.is_some())
    };
    for s in app.iter_mut() {
        if s.state
            .as_ref()
            .and_then(|x| x.terminated.as_ref())
            .is_none()
        {
            s.state = Some(unknown());
            s.ready = false;
            s.started = Some(false);
        }
    }
    let last_started = init.iter().rposition(ran);
    if let Some(last) = last_started {
        for s in init[..last].iter_mut().filter(|s| !ran(s)) {
            s.state = Some(unknown());
        }
    }
    match phase {
        "Pending" | "Running" => "Failed",
        p => p,
    }
}

#[cfg(test)]
mod tests;
