//! Deciding whether the API's copy of a pod status is stale, and what to send instead, by
//! upstream's rules (pkg/kubelet/status: isPodStatusByKubeletEqual, normalizeStatus,
//! mergePodStatus, TerminatePod).
//!
//! Statuses are compared as JSON: k8s-openapi writes times at whole seconds as the API
//! stores them (upstream's normalizeStatus truncates to match), and fields that are empty or
//! absent are the same field to the API (Go's semantic equality treats nil and empty alike).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus,
};
use serde_json::Value;

/// Conditions the kubelet owns: its own value replaces the API's.
const OWNED_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
    "PodResizePending",
    "PodResizeInProgress",
];

/// Conditions the kubelet shares with controllers: it sends its own only when the pod
/// turns terminal.
const SHARED_CONDITIONS: &[&str] = &["DisruptionTarget"];

/// Upstream's MaxPodTerminationMessageLogLength: the termination messages of all of a pod's
/// containers together.
const MAX_TERMINATION_MESSAGES: usize = 1024 * 12;

fn owned(kind: &str) -> bool {
    OWNED_CONDITIONS.contains(&kind)
}

fn shared(kind: &str) -> bool {
    SHARED_CONDITIONS.contains(&kind)
}

pub(crate) fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn find<'a>(conditions: &'a Option<Vec<PodCondition>>, kind: &str) -> Option<&'a PodCondition> {
    conditions.as_ref()?.iter().find(|c| c.type_ == kind)
}

/// Container statuses sorted by name (init containers keep the spec's order, which is what
/// the kubelet reports) and termination messages cut to each container's share, so the
/// order and truncation of the API's copy do not read as a change.
pub(crate) fn normalize(spec: Option<&PodSpec>, status: &PodStatus) -> PodStatus {
    let mut status = status.clone();
    let containers = spec.map_or(0, |s| {
        s.containers.len()
            + s.init_containers.as_ref().map_or(0, Vec::len)
            + s.ephemeral_containers.as_ref().map_or(0, Vec::len)
    });
    let per_container = MAX_TERMINATION_MESSAGES / containers.max(1);
    let cut = |states: &mut [ContainerStatus]| {
        for s in states {
            for state in [s.state.as_mut(), s.last_state.as_mut()]
                .into_iter()
                .flatten()
            {
                if let Some(t) = state.terminated.as_mut() {
                    if let Some(m) = t.message.as_mut() {
                        truncate_at_char(m, per_container);
                    }
                }
            }
        }
    };
    if let Some(cs) = status.container_statuses.as_mut() {
        cs.sort_by(|a, b| a.name.cmp(&b.name));
        cut(cs);
    }
    if let Some(cs) = status.init_container_statuses.as_mut() {
        cut(cs);
    }
    if let Some(cs) = status.ephemeral_container_statuses.as_mut() {
        cut(cs);
    }
    status
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The status as the API sees it: JSON without nulls, empty strings, empty lists or empty
/// objects.
pub(crate) fn canonical(status: &PodStatus) -> Value {
    fn strip(v: Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::Array(items) => {
                let items: Vec<Value> = items.into_iter().filter_map(strip).collect();
                (!items.is_empty()).then_some(Value::Array(items))
            }
            Value::Object(map) => {
                let map: serde_json::Map<String, Value> = map
                    .into_iter()
                    .filter_map(|(k, v)| strip(v).map(|v| (k, v)))
                    .collect();
                (!map.is_empty()).then_some(Value::Object(map))
            }
            v => Some(v),
        }
    }
    // A PodStatus holds only strings, numbers, lists and maps: it always serializes.
    strip(serde_json::to_value(status).unwrap_or_default()).unwrap_or(Value::Null)
}

/// Upstream's isPodStatusByKubeletEqual: the kubelet's conditions must match the API's in
/// status, reason and message (not in their times), conditions only the API has are
/// ignored, and everything else must be equal.
pub(crate) fn equal_by_kubelet(api: &PodStatus, ours: &PodStatus) -> bool {
    for c in ours.conditions.iter().flatten() {
        if owned(&c.type_) || shared(&c.type_) {
            match find(&api.conditions, &c.type_) {
                Some(a)
                    if a.status == c.status
                        && a.reason.as_deref().unwrap_or_default()
                            == c.reason.as_deref().unwrap_or_default()
                        && a.message.as_deref().unwrap_or_default()
                            == c.message.as_deref().unwrap_or_default() => {}
                _ => return false,
            }
        }
    }
    let mut api = api.clone();
    api.conditions = ours.conditions.clone();
    canonical(&api) == canonical(ours)
}

/// Upstream's mergePodStatus: the API keeps the conditions other controllers own, the
/// kubelet's replace its own, a shared condition goes only with the turn to a terminal
/// phase, and a terminal pod is never reported ready. A kubelet condition whose status the
/// API already shows keeps the API's transition time (upstream seeds its cache from the API
/// copy for the same reason: a restarted agent must not move transition times).
pub(crate) fn merge(api: &PodStatus, ours: &PodStatus) -> PodStatus {
    let mut merged = ours.clone();
    let mut conditions: Vec<PodCondition> = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !owned(&c.type_))
        .cloned()
        .collect();
    let turning_terminal = !is_terminal(api.phase.as_deref()) && is_terminal(ours.phase.as_deref());
    for c in ours.conditions.iter().flatten() {
        let mut c = c.clone();
        if let Some(a) = find(&api.conditions, &c.type_) {
            if a.status == c.status {
                c.last_transition_time = a.last_transition_time.clone();
            }
        }
        if owned(&c.type_) {
            conditions.push(c);
        } else if shared(&c.type_) && turning_terminal {
            match conditions.iter_mut().find(|k| k.type_ == c.type_) {
                Some(k) => *k = c,
                None => conditions.push(c),
            }
        }
    }
    merged.conditions = (!conditions.is_empty()).then_some(conditions);
    if let Some(reason) = match merged.phase.as_deref() {
        Some("Failed") => Some("PodFailed"),
        Some("Succeeded") => Some("PodCompleted"),
        _ => None,
    } {
        for kind in ["ContainersReady", "Ready"] {
            if let Some(c) = merged
                .conditions
                .iter_mut()
                .flatten()
                .find(|c| c.type_ == kind && c.status == "True")
            {
                c.status = "False".into();
                c.reason = Some(reason.into());
                c.message = None;
                c.last_transition_time = Some(now());
            }
        }
    }
    merged
}

fn now() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    crate::pod::status::ktime(chrono::Utc::now())
}

/// Upstream's TerminatePod, for the status an API pod ends with once its worker finished:
/// a container the runtime no longer shows is reported failed (so the pod is never shown
/// successful by mistake) and the phase is terminal, which the API side needs before the
/// pod may be deleted. Static pods keep their phase, as upstream's.
pub(crate) fn terminated(pod: &Pod, is_static: bool) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let unknown = || ContainerState {
        terminated: Some(ContainerStateTerminated {
            reason: Some("ContainerStatusUnknown".into()),
            message: Some("The container could not be located when the pod was terminated".into()),
            exit_code: 137,
            ..Default::default()
        }),
        ..Default::default()
    };
    let is_terminated =
        |s: &ContainerStatus| s.state.as_ref().is_some_and(|s| s.terminated.is_some());
    if initialized(pod) {
        for s in status.container_statuses.iter_mut().flatten() {
            if !is_terminated(s) {
                s.state = Some(unknown());
            }
        }
    }
    if let Some(init) = status.init_container_statuses.as_mut() {
        let started = started_prefix(init);
        for s in &mut init[..started] {
            if !is_terminated(s) {
                s.state = Some(unknown());
            }
        }
    }
    if !is_static && !is_terminal(status.phase.as_deref()) {
        status.phase = Some("Failed".into());
    }
    status
}

fn waiting(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_none_or(|s| s.waiting.is_some())
}

fn ended(state: &Option<ContainerState>, zero_only: bool) -> bool {
    state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| !zero_only || t.exit_code == 0)
}

/// Upstream's hasPodInitialized: no init containers, or evidence that an app container or
/// the last init container got past its start.
fn initialized(pod: &Pod) -> bool {
    let has_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| !c.is_empty());
    if !has_init {
        return true;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    if status
        .container_statuses
        .iter()
        .flatten()
        .any(|s| ended(&s.last_state, false) || !waiting(s))
    {
        return true;
    }
    status
        .init_container_statuses
        .as_ref()
        .and_then(|c| c.last())
        .is_some_and(|s| ended(&s.last_state, true) || ended(&s.state, true))
}

/// Upstream's initializedContainers: the init containers up to the last that ever left
/// waiting (at least the first).
fn started_prefix(init: &[ContainerStatus]) -> usize {
    init.iter()
        .rposition(|s| !waiting(s) || ended(&s.last_state, false))
        .map_or(init.len().min(1), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(kind: &str, status: &str, since: i64) -> PodCondition {
        PodCondition {
            type_: kind.into(),
            status: status.into(),
            last_transition_time: Some(crate::pod::status::ktime(
                chrono::DateTime::from_timestamp(since, 0).unwrap(),
            )),
            ..Default::default()
        }
    }

    fn status(phase: &str, conditions: Vec<PodCondition>) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            conditions: Some(conditions),
            ..Default::default()
        }
    }

    #[test]
    fn condition_times_and_foreign_conditions_do_not_make_a_change() {
        let api = status(
            "Running",
            vec![
                cond("Ready", "True", 100),
                cond("example.com/Gate", "True", 5),
            ],
        );
        let ours = status("Running", vec![cond("Ready", "True", 200)]);
        assert!(equal_by_kubelet(&api, &ours));
        let flipped = status("Running", vec![cond("Ready", "False", 200)]);
        assert!(!equal_by_kubelet(&api, &flipped));
        let other_phase = status("Succeeded", vec![cond("Ready", "True", 200)]);
        assert!(!equal_by_kubelet(&api, &other_phase));
    }

    #[test]
    fn an_empty_field_equals_an_absent_one() {
        let api = PodStatus {
            phase: Some("Running".into()),
            message: Some(String::new()),
            init_container_statuses: Some(vec![]),
            ..Default::default()
        };
        let ours = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        assert!(equal_by_kubelet(&api, &ours));
    }

    #[test]
    fn merge_keeps_foreign_conditions_and_the_apis_transition_times() {
        let api = status(
            "Running",
            vec![
                cond("Ready", "True", 100),
                cond("example.com/Gate", "True", 5),
                cond("DisruptionTarget", "True", 7),
            ],
        );
        let ours = status(
            "Running",
            vec![
                cond("Ready", "True", 200),
                cond("DisruptionTarget", "False", 9),
            ],
        );
        let merged = merge(&api, &ours);
        let kinds: Vec<(&str, &str)> = merged
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        // The shared condition stays the API's while the pod is not turning terminal.
        assert_eq!(
            kinds,
            vec![
                ("example.com/Gate", "True"),
                ("DisruptionTarget", "True"),
                ("Ready", "True")
            ]
        );
        assert_eq!(
            find(&merged.conditions, "Ready")
                .unwrap()
                .last_transition_time,
            cond("Ready", "True", 100).last_transition_time
        );
    }

    #[test]
    fn a_terminal_pod_is_never_sent_as_ready() {
        let api = status("Running", vec![cond("Ready", "True", 100)]);
        let ours = status(
            "Succeeded",
            vec![
                cond("Ready", "True", 100),
                cond("ContainersReady", "True", 100),
            ],
        );
        let merged = merge(&api, &ours);
        for kind in ["Ready", "ContainersReady"] {
            let c = find(&merged.conditions, kind).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref()),
                ("False", Some("PodCompleted"))
            );
        }
    }

    #[test]
    fn a_finished_api_pod_ends_failed_with_its_lost_containers_terminated() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Default::default(), Default::default()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let running = ContainerStatus {
            name: "app".into(),
            state: Some(ContainerState {
                running: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let done = ContainerStatus {
            name: "done".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![running, done.clone()]),
            ..Default::default()
        });
        let end = terminated(&pod, false);
        assert_eq!(end.phase.as_deref(), Some("Failed"));
        let states = end.container_statuses.unwrap();
        let t = states[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap();
        assert_eq!(
            (t.reason.as_deref(), t.exit_code),
            (Some("ContainerStatusUnknown"), 137)
        );
        assert_eq!(states[1], done);
        assert_eq!(terminated(&pod, true).phase.as_deref(), Some("Running"));
    }
}
