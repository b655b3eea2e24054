//! Pod QoS class and the cgroup layout of upstream's cgroupfs driver.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::quantity;

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

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .chain(spec.map(|s| s.containers.iter()).into_iter().flatten())
}

/// Upstream's rule: BestEffort without any cpu/memory request or limit; Guaranteed when
/// every container limits cpu and memory and its requests (defaulted from limits) equal them.
pub fn qos_class(pod: &Pod) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in all_containers(pod) {
        let res = c.resources.as_ref();
        let limits = res.and_then(|r| r.limits.as_ref());
        let requests = res.and_then(|r| r.requests.as_ref());
        for name in ["cpu", "memory"] {
            let parse = |q: &str| {
                if name == "cpu" {
                    quantity::cpu_millis(q)
                } else {
                    quantity::bytes(q)
                }
            };
            let limit = limits.and_then(|l| l.get(name)).and_then(|q| parse(&q.0));
            let request = requests
                .and_then(|r| r.get(name))
                .and_then(|q| parse(&q.0))
                .or(limit);
            if limit.is_some_and(|v| v != 0) || request.is_some_and(|v| v != 0) {
                any = true;
            }
            match (limit, request) {
                (Some(l), Some(r)) if l == r && l != 0 => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The pod's cgroup parent as upstream's cgroupfs driver lays it out.
pub fn pod_cgroup_parent(pod_uid: &str, qos: QosClass) -> String {
    match qos {
        QosClass::Guaranteed => format!("/kubepods/pod{pod_uid}"),
        QosClass::Burstable => format!("/kubepods/burstable/pod{pod_uid}"),
        QosClass::BestEffort => format!("/kubepods/besteffort/pod{pod_uid}"),
    }
}

/// oom_score_adj for a container, as upstream's policy computes it.
pub fn oom_score_adj(qos: QosClass, memory_request: Option<i64>, memory_capacity: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            let req = memory_request.unwrap_or(0).max(0) as i128;
            let cap = memory_capacity.max(1) as i128;
            let adj = 1000 - (1000 * req) / cap;
            adj.clamp(2, 999) as i64
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
    }

    #[test]
    fn cgroup_parents_and_oom() {
        assert_eq!(
            pod_cgroup_parent("u", QosClass::BestEffort),
            "/kubepods/besteffort/podu"
        );
        assert_eq!(
            pod_cgroup_parent("u", QosClass::Guaranteed),
            "/kubepods/podu"
        );
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(0), 100), 999);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(100), 100), 2);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(50), 100), 500);
    }
}
