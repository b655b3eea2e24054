//! Pod QoS class (the cgroup layout is `cm::Layout`) and the containers' oom_score_adj.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::quantity::Quantity;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Only these resources decide the class, as upstream.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

type ResourceMap = BTreeMap<String, ApiQuantity>;

/// Adds a requests or limits map into running totals, counting only positive values of the
/// QoS resources; returns which of them it found. A value that does not parse counts as
/// unset here: the spec refuses it, naming the field.
fn accumulate(
    into: &mut BTreeMap<&'static str, Quantity>,
    from: Option<&ResourceMap>,
) -> Vec<&'static str> {
    let mut found = Vec::new();
    for name in QOS_RESOURCES {
        let Some(q) = from
            .and_then(|m| m.get(name))
            .and_then(|q| Quantity::from_api(q).ok())
        else {
            continue;
        };
        if q > Quantity::ZERO {
            found.push(name);
            let total = into.entry(name).or_default();
            *total = *total + q;
        }
    }
    found
}

/// Requests as the API server defaults them: a resource with a limit and no request
/// requests its limit (static pods get the same defaulting when upstream decodes them).
pub(crate) fn defaulted_requests(r: &ResourceRequirements) -> Option<ResourceMap> {
    let mut requests = r.requests.clone().unwrap_or_default();
    for (name, limit) in r.limits.iter().flatten() {
        requests
            .entry(name.clone())
            .or_insert_with(|| limit.clone());
    }
    (!requests.is_empty()).then_some(requests)
}

/// Upstream's rule (ComputePodQOS): requests and limits of cpu and memory are summed over
/// all containers (or taken from the pod-level resources when the pod sets them);
/// BestEffort when none is positive; Guaranteed when every container (or the pod) limits
/// both and the summed requests equal the summed limits, compared as exact quantities
/// ("0.5" equals "500m"); Burstable otherwise.
pub fn qos_class(pod: &Pod) -> QosClass {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    let mut guaranteed = true;
    let spec = pod.spec.as_ref();
    // A container without resources limits nothing (and so is not Guaranteed).
    let none = ResourceRequirements::default();
    let sets: Vec<&ResourceRequirements> = match spec.and_then(|s| s.resources.as_ref()) {
        Some(pod_level) => vec![pod_level],
        None => spec
            .into_iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .map(|c: &Container| c.resources.as_ref().unwrap_or(&none))
            .collect(),
    };
    for r in sets {
        accumulate(&mut requests, defaulted_requests(r).as_ref());
        let found = accumulate(&mut limits, r.limits.as_ref());
        if !QOS_RESOURCES.iter().all(|n| found.contains(n)) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    let equal =
        requests.len() == limits.len() && requests.iter().all(|(n, r)| limits.get(n) == Some(r));
    if guaranteed && equal {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

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
    crate::source::static_pod::is_static_pod(pod)
        || crate::source::apiserver::is_mirror_pod(pod)
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
        .and_then(|q| crate::quantity::bytes(&q.0));
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

    fn pod(res: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": res}]}
        }))
        .unwrap()
    }

    #[test]
    fn classes() {
        assert_eq!(qos_class(&pod(serde_json::json!({}))), QosClass::BestEffort);
        assert_eq!(
            qos_class(&pod(
                serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}})
            )),
            QosClass::Guaranteed
        );
        assert_eq!(
            qos_class(&pod(serde_json::json!({"requests": {"cpu": "100m"}}))),
            QosClass::Burstable
        );
        assert_eq!(
            qos_class(&pod(serde_json::json!({
                "limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "500m", "memory": "1Gi"}}))),
            QosClass::Burstable
        );
        // Zero requests and limits count as unset; other resources do not count.
        assert_eq!(
            qos_class(&pod(serde_json::json!({
                "limits": {"cpu": "0", "memory": "0"}, "requests": {"ephemeral-storage": "1Gi"}}))),
            QosClass::BestEffort
        );
    }

    fn pod_of(containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": containers}
        }))
        .unwrap()
    }

    /// Requests and limits written in different forms of the same value are equal, as
    /// upstream compares them (exactly, never through floating point).
    #[test]
    fn mixed_forms_compare_exactly() {
        let class = |req_cpu: &str, lim_cpu: &str, req_mem: &str, lim_mem: &str| {
            qos_class(&pod(serde_json::json!({
                "requests": {"cpu": req_cpu, "memory": req_mem},
                "limits": {"cpu": lim_cpu, "memory": lim_mem}})))
        };
        let g = QosClass::Guaranteed;
        assert_eq!(class("0.5", "500m", "1Gi", "1073741824"), g);
        assert_eq!(class("7e-1", "0.7", "1024Mi", "1Gi"), g);
        assert_eq!(class("700m", "0.7", "1G", "1e9"), g);
        assert_eq!(class("2.007", "2007m", "1.5Gi", "1536Mi"), g);
        assert_eq!(class("1", "1000000u", "1k", "1000"), g);
        assert_eq!(class("0.5", "501m", "1Gi", "1Gi"), QosClass::Burstable);
        assert_eq!(class("1", "1", "1G", "1Gi"), QosClass::Burstable);
        // Every milli value, written as a decimal against the same value in millis.
        for m in 1..=4000 {
            let dec = format!("{}.{:03}", m / 1000, m % 1000);
            assert_eq!(class(&dec, &format!("{m}m"), "1Mi", "1Mi"), g, "{dec}");
            assert_eq!(class(&format!("{m}e-3"), &dec, "1Mi", "1Mi"), g, "{m}e-3");
            let more = format!("{}m", m + 1);
            assert_eq!(
                class(&dec, &more, "1Mi", "1Mi"),
                QosClass::Burstable,
                "{dec} vs {more}"
            );
        }
    }

    /// Upstream sums over the containers before comparing, and every container must limit
    /// both cpu and memory.
    #[test]
    fn sums_over_containers_and_pod_level_resources() {
        let both = serde_json::json!({"limits": {"cpu": "250m", "memory": "64Mi"}});
        let p = pod_of(serde_json::json!([
            {"name": "a", "resources": both},
            {"name": "b", "resources": {"limits": {"cpu": "0.25", "memory": "67108864"}}}]));
        assert_eq!(qos_class(&p), QosClass::Guaranteed);
        let p = pod_of(serde_json::json!([
            {"name": "a", "resources": both}, {"name": "b"}]));
        assert_eq!(qos_class(&p), QosClass::Burstable);
        let p = pod_of(serde_json::json!([
            {"name": "a", "resources": both},
            {"name": "b", "resources": {"limits": {"cpu": "1"}}}]));
        assert_eq!(qos_class(&p), QosClass::Burstable);
        let mut p = pod_of(serde_json::json!([{"name": "a"}]));
        p.spec.as_mut().unwrap().resources = Some(
            serde_json::from_value(serde_json::json!({"limits": {"cpu": "0.5", "memory": "1Gi"}}))
                .unwrap(),
        );
        assert_eq!(qos_class(&p), QosClass::Guaranteed);
    }

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
