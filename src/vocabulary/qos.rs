//! A pod's QoS class, as upstream computes it (ComputePodQOS): the word cgroups, eviction,
//! admission and the status share.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::quantity::Quantity;

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
}
