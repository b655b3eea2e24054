//! The containers' oom_score_adj and critical pods (the QoS class itself is
//! `vocabulary::qos`; the cgroup layout is `cm::Layout`).

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::vocabulary::qos::{defaulted_requests, qos_class, QosClass};

/// Upstream's guaranteedOOMScoreAdj and besteffortOOMScoreAdj (pkg/kubelet/qos/policy.go).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
pub const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// Upstream's SystemCriticalPriority: pods at or above it are critical whatever their source.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Whether the pod is node-critical as upstream's IsNodeCriticalPod decides: critical
/// (static, mirror, or priority at least SystemCriticalPriority) and in the
/// `system-node-critical` priority class. Such a pod's containers get Guaranteed's
/// oom_score_adj whatever their QoS class, so the OOM killer takes them last.
pub fn is_node_critical(pod: &Pod) -> bool {
    is_critical(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some("system-node-critical")
}

/// Upstream's IsCriticalPod: a static or mirror pod, or one at system-critical priority.
/// Such pods are never evicted and pass admission under node pressure.
pub fn is_critical(pod: &Pod) -> bool {
    crate::vocabulary::pod_source::is_static_pod(pod)
        || crate::vocabulary::pod_source::is_mirror_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// The container's oom_score_adj (upstream's GetContainerOOMScoreAdjust): a node-critical
/// pod's containers as Guaranteed, otherwise by the pod's class and, for Burstable, the
/// container's memory request (its limit when it has no request, as the API server
/// defaults it).
pub fn container_oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    if is_node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    let memory_request = c
        .resources
        .as_ref()
        .and_then(defaulted_requests)
        .and_then(|r| r.get("memory").cloned())
        .and_then(|q| crate::vocabulary::quantity::bytes(&q.0));
    oom_score_adj(qos_class(pod), memory_request, memory_capacity)
}

/// oom_score_adj for a container, as upstream's policy computes it: Burstable from the
/// container's memory request against the node's memory, never below
/// 1000 + guaranteedOOMScoreAdj (3: above any Guaranteed container) and never 1000 (999:
/// below BestEffort). The documentation's table says 2 for the floor; the code says 3.
pub fn oom_score_adj(qos: QosClass, memory_request: Option<i64>, memory_capacity: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BESTEFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let req = memory_request.unwrap_or(0).max(0) as i128;
            let cap = memory_capacity.max(1) as i128;
            let adj = (1000 - (1000 * req) / cap) as i64;
            if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adj == BESTEFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_critical_pods_as_upstream() {
        let pod = |annotations: &[(&str, &str)], class: Option<&str>, priority: Option<i32>| {
            let mut p = Pod::default();
            p.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                priority_class_name: class.map(str::to_string),
                priority,
                ..Default::default()
            });
            p
        };
        let file = [("kubernetes.io/config.source", "file")];
        let api = [("kubernetes.io/config.source", "api")];
        let node = Some("system-node-critical");
        assert!(is_node_critical(&pod(&file, node, None)));
        assert!(!is_node_critical(&pod(
            &file,
            Some("system-cluster-critical"),
            None
        )));
        assert!(!is_node_critical(&pod(&file, None, None)));
        // From the API server: critical only by priority.
        assert!(!is_node_critical(&pod(&api, node, Some(1000))));
        assert!(is_node_critical(&pod(&api, node, Some(2_000_001_000))));
        assert!(is_node_critical(&pod(
            &[("kubernetes.io/config.mirror", "x")],
            node,
            None
        )));
    }

    #[test]
    fn a_node_critical_burstable_container_scores_as_guaranteed() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"annotations": {"kubernetes.io/config.source": "file"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "50"}, "requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        // Burstable: the memory limit stands in for the missing request.
        assert_eq!(container_oom_score_adj(&pod, &c, 100), 500);
        pod.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
        assert_eq!(container_oom_score_adj(&pod, &c, 100), -997);
    }

    #[test]
    fn oom_score_adj_as_upstream() {
        assert_eq!(oom_score_adj(QosClass::Guaranteed, Some(1), 100), -997);
        assert_eq!(oom_score_adj(QosClass::BestEffort, None, 100), 1000);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(0), 100), 999);
        assert_eq!(oom_score_adj(QosClass::Burstable, None, 100), 999);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(100), 100), 3);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(99), 100), 10);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(998), 1000), 3);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(50), 100), 500);
        // Upstream's worked example: a 10 % request gives 900.
        assert_eq!(
            oom_score_adj(QosClass::Burstable, Some(1 << 30), 10 << 30),
            900
        );
        assert_eq!(
            oom_score_adj(QosClass::Burstable, Some(200), 100),
            3,
            "over capacity"
        );
    }
}
