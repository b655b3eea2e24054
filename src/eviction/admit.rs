//! Admission under node pressure (upstream's eviction manager as a pod admit handler):
//! critical pods always pass; under memory pressure alone, pods that are not BestEffort
//! pass, and BestEffort ones only when they tolerate the memory-pressure taint; any other
//! pressure refuses every other pod.

use k8s_openapi::api::core::v1::{Pod, Taint};

use super::{Pressure, REASON_EVICTED};
use crate::pod::admission::{tolerates_taint, Rejection};
use crate::vocabulary::qos::{qos_class, QosClass};

pub(crate) use crate::pod::qos::is_critical;

/// Refuses `pod` when the node's `pressure` says it must not start here.
pub fn admit(pod: &Pod, pressure: &Pressure) -> Result<(), Rejection> {
    let names = pressure.names();
    if names.is_empty() || is_critical(pod) {
        return Ok(());
    }
    if *pressure
        == (Pressure {
            memory: true,
            ..Pressure::default()
        })
    {
        if qos_class(pod) != QosClass::BestEffort {
            return Ok(());
        }
        let taint = Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        if tolerates_taint(tolerations, &taint) {
            return Ok(());
        }
    }
    // Go's %v of a list of names: space-separated in brackets.
    Err(Rejection::new(
        REASON_EVICTED,
        format!("The node had condition: [{}]. ", names.join(" ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: Option<serde_json::Value>, extra: serde_json::Value) -> Pod {
        let mut spec = serde_json::json!({
            "containers": [{"name": "c", "image": "busybox", "resources": resources}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": spec,
        }))
        .unwrap()
    }

    const MEMORY: Pressure = Pressure {
        memory: true,
        disk: false,
        pid: false,
    };

    #[test]
    fn memory_pressure_refuses_only_best_effort_pods_that_do_not_tolerate_it() {
        let best_effort = pod(None, serde_json::json!({}));
        let refused = admit(&best_effort, &MEMORY).unwrap_err();
        assert_eq!(refused.reason, "Evicted");
        assert_eq!(
            refused.message,
            "The node had condition: [MemoryPressure]. "
        );
        assert_eq!(
            refused.status_message(),
            "Pod was rejected: The node had condition: [MemoryPressure]. "
        );
        assert!(admit(&best_effort, &Pressure::default()).is_ok());
        let burstable = pod(
            Some(serde_json::json!({"requests": {"memory": "10Mi"}})),
            serde_json::json!({}),
        );
        assert!(admit(&burstable, &MEMORY).is_ok());
        let tolerating = pod(
            None,
            serde_json::json!({"tolerations": [
                {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}
            ]}),
        );
        assert!(admit(&tolerating, &MEMORY).is_ok());
    }

    #[test]
    fn disk_or_pid_pressure_refuses_every_pod_but_critical_ones() {
        let burstable = pod(
            Some(serde_json::json!({"requests": {"memory": "10Mi"}})),
            serde_json::json!({}),
        );
        let both = Pressure {
            memory: true,
            disk: true,
            pid: false,
        };
        assert_eq!(
            admit(&burstable, &both).unwrap_err().message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        let pid = Pressure {
            pid: true,
            ..Pressure::default()
        };
        assert!(admit(&burstable, &pid).is_err());
        let critical = pod(None, serde_json::json!({"priority": 2_000_001_000}));
        assert!(admit(&critical, &both).is_ok());
    }
}
