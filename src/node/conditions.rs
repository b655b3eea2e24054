//! The node's conditions as upstream's setters keep them: MemoryPressure, DiskPressure and
//! PIDPressure as the eviction manager reports them, and Ready from the runtime's and the
//! network's state. Each pass updates the conditions of the Node as last read, so a
//! condition's lastTransitionTime moves only when its status changes, while
//! lastHeartbeatTime is the time of every pass.

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub(crate) use crate::eviction::Pressure;

/// What a pressure condition says in each state (upstream's reasons and messages).
struct PressureWords {
    kind: &'static str,
    /// The node events recorded on a change to True and to False.
    true_event: &'static str,
    false_event: &'static str,
    true_reason: &'static str,
    true_message: &'static str,
    false_reason: &'static str,
    false_message: &'static str,
}

const MEMORY: PressureWords = PressureWords {
    kind: "MemoryPressure",
    true_event: "NodeHasInsufficientMemory",
    false_event: "NodeHasSufficientMemory",
    true_reason: "KubeletHasInsufficientMemory",
    true_message: "kubelet has insufficient memory available",
    false_reason: "KubeletHasSufficientMemory",
    false_message: "kubelet has sufficient memory available",
};

const DISK: PressureWords = PressureWords {
    kind: "DiskPressure",
    true_event: "NodeHasDiskPressure",
    false_event: "NodeHasNoDiskPressure",
    true_reason: "KubeletHasDiskPressure",
    true_message: "kubelet has disk pressure",
    false_reason: "KubeletHasNoDiskPressure",
    false_message: "kubelet has no disk pressure",
};

const PID: PressureWords = PressureWords {
    kind: "PIDPressure",
    true_event: "NodeHasInsufficientPID",
    false_event: "NodeHasSufficientPID",
    true_reason: "KubeletHasInsufficientPID",
    true_message: "kubelet has insufficient PID available",
    false_reason: "KubeletHasSufficientPID",
    false_message: "kubelet has sufficient PID available",
};

fn time(now: Timestamp) -> Time {
    Time(now)
}

/// Returns the event to record when the condition changed.
fn set_pressure(
    conditions: &mut Vec<NodeCondition>,
    words: &PressureWords,
    under_pressure: bool,
    now: Timestamp,
) -> Option<&'static str> {
    let index = match conditions.iter().position(|c| c.type_ == words.kind) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: words.kind.to_string(),
                status: "Unknown".to_string(),
                ..NodeCondition::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[index];
    c.last_heartbeat_time = Some(time(now));
    let (status, reason, message, event) = if under_pressure {
        (
            "True",
            words.true_reason,
            words.true_message,
            words.true_event,
        )
    } else {
        (
            "False",
            words.false_reason,
            words.false_message,
            words.false_event,
        )
    };
    if c.status == status {
        return None;
    }
    c.status = status.to_string();
    c.reason = Some(reason.to_string());
    c.message = Some(message.to_string());
    c.last_transition_time = Some(time(now));
    Some(event)
}

/// Updates the three pressure conditions in place; returns the events of those that changed.
pub(crate) fn set_pressure_conditions(
    conditions: &mut Vec<NodeCondition>,
    pressure: Pressure,
    now: Timestamp,
) -> Vec<&'static str> {
    [
        set_pressure(conditions, &MEMORY, pressure.memory, now),
        set_pressure(conditions, &DISK, pressure.disk, now),
        set_pressure(conditions, &PID, pressure.pid, now),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The runtime's network message when no CNI configuration is there yet (containerd's CRI
/// words, which upstream's kubelet passes on).
pub(crate) const NETWORK_NOT_READY: &str = "container runtime network not ready: \
     NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: \
     cni plugin not initialized";

/// What keeps the node from being Ready, in upstream's aggregate form: one error as it is,
/// several as `[a, b]`.
pub(crate) fn not_ready_message(errors: &[String]) -> Option<String> {
    let mut unique: Vec<&String> = Vec::new();
    for e in errors {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    match unique.as_slice() {
        [] => None,
        [one] => Some(one.to_string()),
        many => Some(format!(
            "[{}]",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Replaces the Ready condition: KubeletReady unless `errors` says why not; the transition
/// time is kept while the status stays. Returns NodeReady or NodeNotReady when an existing
/// condition changed status (upstream records no event for the first one).
pub(crate) fn set_ready_condition(
    conditions: &mut Vec<NodeCondition>,
    errors: &[String],
    now: Timestamp,
) -> Option<&'static str> {
    let mut ready = match not_ready_message(errors) {
        None => NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(time(now)),
            last_transition_time: None,
        },
        Some(message) => NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("KubeletNotReady".into()),
            message: Some(message),
            last_heartbeat_time: Some(time(now)),
            last_transition_time: None,
        },
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(existing) => {
            let changed = existing.status != ready.status;
            ready.last_transition_time = if changed {
                Some(time(now))
            } else {
                existing.last_transition_time.clone()
            };
            let event = match ready.status.as_str() {
                "True" => "NodeReady",
                _ => "NodeNotReady",
            };
            *existing = ready;
            changed.then_some(event)
        }
        None => {
            ready.last_transition_time = Some(time(now));
            conditions.push(ready);
            None
        }
    }
}

/// Conditions equal but for their heartbeat times (upstream's nodeConditionsHaveChanged).
pub(crate) fn conditions_changed(old: &[NodeCondition], new: &[NodeCondition]) -> bool {
    let strip = |list: &[NodeCondition]| -> Vec<NodeCondition> {
        let mut v: Vec<NodeCondition> = list
            .iter()
            .cloned()
            .map(|mut c| {
                c.last_heartbeat_time = None;
                c
            })
            .collect();
        v.sort_by(|a, b| a.type_.cmp(&b.type_));
        v
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn pressure_conditions_move_their_transition_time_only_on_change() {
        let mut c = Vec::new();
        assert_eq!(
            set_pressure_conditions(&mut c, Pressure::default(), at(100)),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ]
        );
        let memory = c.iter().find(|c| c.type_ == "MemoryPressure").unwrap();
        assert_eq!(memory.status, "False");
        assert_eq!(memory.reason.as_deref(), Some("KubeletHasSufficientMemory"));
        assert_eq!(
            memory.message.as_deref(),
            Some("kubelet has sufficient memory available")
        );
        assert_eq!(memory.last_transition_time, Some(Time(at(100))));
        assert_eq!(c.len(), 3);

        assert!(set_pressure_conditions(&mut c, Pressure::default(), at(110)).is_empty());
        let disk = c.iter().find(|c| c.type_ == "DiskPressure").unwrap();
        assert_eq!(disk.last_heartbeat_time, Some(Time(at(110))));
        assert_eq!(disk.last_transition_time, Some(Time(at(100))));

        let before = c.clone();
        let events = set_pressure_conditions(
            &mut c,
            Pressure {
                disk: true,
                ..Pressure::default()
            },
            at(120),
        );
        assert_eq!(events, ["NodeHasDiskPressure"]);
        let disk = c.iter().find(|c| c.type_ == "DiskPressure").unwrap();
        assert_eq!(disk.status, "True");
        assert_eq!(disk.reason.as_deref(), Some("KubeletHasDiskPressure"));
        assert_eq!(disk.message.as_deref(), Some("kubelet has disk pressure"));
        assert_eq!(disk.last_transition_time, Some(Time(at(120))));
        assert!(conditions_changed(&before, &c));
        let pid = c.iter().find(|c| c.type_ == "PIDPressure").unwrap();
        assert_eq!(pid.reason.as_deref(), Some("KubeletHasSufficientPID"));
    }

    #[test]
    fn ready_condition_states_and_transitions() {
        let mut c = Vec::new();
        assert_eq!(set_ready_condition(&mut c, &[], at(10)), None);
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            c[0].message.as_deref(),
            Some("kubelet is posting ready status")
        );
        assert_eq!(c[0].last_transition_time, Some(Time(at(10))));

        let before = c.clone();
        assert_eq!(set_ready_condition(&mut c, &[], at(20)), None);
        assert_eq!(c[0].last_transition_time, Some(Time(at(10))));
        assert_eq!(c[0].last_heartbeat_time, Some(Time(at(20))));
        assert!(!conditions_changed(&before, &c), "a heartbeat is no change");

        assert_eq!(
            set_ready_condition(&mut c, &[NETWORK_NOT_READY.to_string()], at(30)),
            Some("NodeNotReady")
        );
        assert_eq!(c[0].status, "False");
        assert_eq!(c[0].reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(c[0].message.as_deref(), Some(NETWORK_NOT_READY));
        assert_eq!(c[0].last_transition_time, Some(Time(at(30))));

        set_ready_condition(
            &mut c,
            &[
                "container runtime is down".to_string(),
                NETWORK_NOT_READY.to_string(),
            ],
            at(40),
        );
        assert_eq!(
            c[0].message.as_deref(),
            Some(format!("[container runtime is down, {NETWORK_NOT_READY}]").as_str())
        );
        assert_eq!(c[0].last_transition_time, Some(Time(at(30))), "still False");

        // A Ready=Unknown left by the node lifecycle controller is a transition.
        c[0].status = "Unknown".into();
        assert_eq!(set_ready_condition(&mut c, &[], at(50)), Some("NodeReady"));
        assert_eq!(c[0].last_transition_time, Some(Time(at(50))));
    }
}
