//! A pod's cgroup values, as upstream's ResourceConfigForPod computes them: cpu shares from
//! the pod's requests, a CFS quota and a memory limit from the sum of its containers'
//! limits when every container declares one (always for Guaranteed pods), pids from
//! podPidsLimit, and the pod's overhead on top. BestEffort pods get the minimum shares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use crate::cgroups::{milli_cpu_to_quota, milli_cpu_to_shares, ResourceConfig, MIN_SHARES};
use crate::vocabulary::qos::{defaulted_requests, qos_class, QosClass};
use crate::vocabulary::quantity::Quantity;

/// cpu and memory totals: cpu in millicores, memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub cpu_millis: i64,
    pub memory: i64,
}

impl Totals {
    fn of(list: Option<&BTreeMap<String, ApiQuantity>>) -> Totals {
        let get = |name: &str| {
            list.and_then(|l| l.get(name))
                .and_then(|q| Quantity::from_api(q).ok())
        };
        Totals {
            cpu_millis: get("cpu").map_or(0, |q| q.milli_value()),
            memory: get("memory").map_or(0, |q| q.value()),
        }
    }

    fn add(&mut self, other: Totals) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory = self.memory.saturating_add(other.memory);
    }

    fn max(&mut self, other: Totals) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory = self.memory.max(other.memory);
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream's aggregation over containers (the sidecar KEP's rule): app containers and
/// restartable init containers (sidecars) add up; each other init container needs itself
/// plus the sidecars started before it; the pod needs the larger of the two.
fn aggregate(pod: &Pod, of: impl Fn(&Container) -> Totals) -> Totals {
    let Some(spec) = pod.spec.as_ref() else {
        return Totals::default();
    };
    let mut total = Totals::default();
    for c in &spec.containers {
        total.add(of(c));
    }
    let mut sidecars = Totals::default();
    let mut init_peak = Totals::default();
    for c in spec.init_containers.iter().flatten() {
        let own = of(c);
        if is_sidecar(c) {
            total.add(own);
            sidecars.add(own);
            init_peak.max(sidecars);
        } else {
            let mut during = own;
            during.add(sidecars);
            init_peak.max(during);
        }
    }
    total.max(init_peak);
    total
}

fn resources(c: &Container) -> ResourceRequirements {
    c.resources.clone().unwrap_or_default()
}

/// The pod's requests: containers' requests as the API defaults them (a limit with no
/// request requests the limit), pod-level requests where set, plus the overhead.
pub(crate) fn pod_requests(pod: &Pod) -> Totals {
    let spec = pod.spec.as_ref();
    let mut reqs = aggregate(pod, |c| {
        Totals::of(defaulted_requests(&resources(c)).as_ref())
    });
    if let Some(pod_level) = spec.and_then(|s| s.resources.as_ref()) {
        let level = Totals::of(defaulted_requests(pod_level).as_ref());
        if level.cpu_millis > 0 {
            reqs.cpu_millis = level.cpu_millis;
        }
        if level.memory > 0 {
            reqs.memory = level.memory;
        }
    }
    reqs.add(Totals::of(spec.and_then(|s| s.overhead.as_ref())));
    reqs
}

/// The pod's limits, whether every container declares a cpu and a memory limit, with the
/// overhead added to the limits that are set.
fn pod_limits(pod: &Pod) -> (Totals, bool, bool) {
    let spec = pod.spec.as_ref();
    let all = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    let (mut cpu_declared, mut memory_declared) = (true, true);
    for c in all {
        let l = Totals::of(resources(c).limits.as_ref());
        cpu_declared &= l.cpu_millis > 0;
        memory_declared &= l.memory > 0;
    }
    let mut limits = aggregate(pod, |c| Totals::of(resources(c).limits.as_ref()));
    if let Some(pod_level) = spec.and_then(|s| s.resources.as_ref()) {
        let level = Totals::of(pod_level.limits.as_ref());
        if level.cpu_millis > 0 {
            limits.cpu_millis = level.cpu_millis;
            cpu_declared = true;
        }
        if level.memory > 0 {
            limits.memory = level.memory;
            memory_declared = true;
        }
    }
    let overhead = Totals::of(spec.and_then(|s| s.overhead.as_ref()));
    if limits.cpu_millis > 0 {
        limits.cpu_millis = limits.cpu_millis.saturating_add(overhead.cpu_millis);
    }
    if limits.memory > 0 {
        limits.memory = limits.memory.saturating_add(overhead.memory);
    }
    (limits, cpu_declared, memory_declared)
}

/// The pod cgroup's settings. `pod_pids_limit` is podPidsLimit (-1 or 0: none);
/// `cpu_period` the CFS period (upstream's default 100 ms).
pub(crate) fn resource_config(pod: &Pod, pod_pids_limit: i64, cpu_period: u64) -> ResourceConfig {
    let reqs = pod_requests(pod);
    let (limits, cpu_declared, memory_declared) = pod_limits(pod);
    let shares = milli_cpu_to_shares(reqs.cpu_millis);
    let quota = milli_cpu_to_quota(limits.cpu_millis, cpu_period);
    let mut config = ResourceConfig {
        pids: (pod_pids_limit > 0).then_some(pod_pids_limit),
        ..ResourceConfig::default()
    };
    match qos_class(pod) {
        QosClass::Guaranteed => {
            config.cpu_shares = Some(shares);
            config.cpu_quota = Some(quota);
            config.cpu_period = Some(cpu_period);
            config.memory = Some(limits.memory);
        }
        QosClass::Burstable => {
            config.cpu_shares = Some(shares);
            if cpu_declared {
                config.cpu_quota = Some(quota);
                config.cpu_period = Some(cpu_period);
            }
            if memory_declared {
                config.memory = Some(limits.memory);
            }
        }
        QosClass::BestEffort => config.cpu_shares = Some(MIN_SHARES),
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::QUOTA_PERIOD;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}),
        )
        .unwrap()
    }

    fn one(resources: serde_json::Value) -> Pod {
        pod(serde_json::json!({"containers": [{"name": "c", "resources": resources}]}))
    }

    fn config(p: &Pod) -> ResourceConfig {
        resource_config(p, -1, QUOTA_PERIOD)
    }

    #[test]
    fn guaranteed_gets_shares_quota_and_memory() {
        let p = one(serde_json::json!({"limits": {"cpu": "1", "memory": "128Mi"}}));
        assert_eq!(
            config(&p),
            ResourceConfig {
                cpu_shares: Some(1024),
                cpu_quota: Some(100_000),
                cpu_period: Some(QUOTA_PERIOD),
                memory: Some(128 << 20),
                pids: None,
            }
        );
    }

    #[test]
    fn burstable_limits_only_what_every_container_declares() {
        // Requests only: shares, nothing limited.
        let p = one(serde_json::json!({"requests": {"cpu": "250m", "memory": "64Mi"}}));
        assert_eq!(
            config(&p),
            ResourceConfig {
                cpu_shares: Some(256),
                ..ResourceConfig::default()
            }
        );
        // A cpu limit on the only container: quota too; memory has none.
        let p = one(serde_json::json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "500m"}}));
        let c = config(&p);
        assert_eq!(
            (c.cpu_shares, c.cpu_quota, c.memory),
            (Some(102), Some(50_000), None)
        );
        // Two containers, one without limits: no quota and no memory limit for the pod.
        let p = pod(serde_json::json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "200m"}}}]}));
        let c = config(&p);
        assert_eq!(c.cpu_shares, Some(milli_cpu_to_shares(1200)));
        assert_eq!((c.cpu_quota, c.cpu_period, c.memory), (None, None, None));
        // Both declare both: the sums.
        let p = pod(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}}}]}));
        let c = config(&p);
        assert_eq!(c.cpu_shares, Some(milli_cpu_to_shares(600)));
        assert_eq!(c.cpu_quota, Some(150_000));
        assert_eq!(c.memory, Some(1536 << 20));
    }

    #[test]
    fn besteffort_gets_two_shares_and_pids_come_from_the_node() {
        let p = one(serde_json::json!({}));
        assert_eq!(
            resource_config(&p, 1024, QUOTA_PERIOD),
            ResourceConfig {
                cpu_shares: Some(2),
                pids: Some(1024),
                ..ResourceConfig::default()
            }
        );
        assert_eq!(resource_config(&p, 0, QUOTA_PERIOD).pids, None);
    }

    #[test]
    fn overhead_adds_to_requests_and_to_set_limits() {
        let mut p = one(serde_json::json!({"limits": {"cpu": "1", "memory": "100Mi"}}));
        p.spec.as_mut().unwrap().overhead = Some(BTreeMap::from([
            ("cpu".to_string(), ApiQuantity("250m".into())),
            ("memory".to_string(), ApiQuantity("20Mi".into())),
        ]));
        let c = config(&p);
        assert_eq!(c.cpu_shares, Some(milli_cpu_to_shares(1250)));
        assert_eq!(c.cpu_quota, Some(125_000));
        assert_eq!(c.memory, Some(120 << 20));
        // A Burstable pod with no memory limit gets no limit from the overhead alone.
        let mut p = one(serde_json::json!({"requests": {"cpu": "100m"}}));
        p.spec.as_mut().unwrap().overhead = Some(BTreeMap::from([(
            "memory".to_string(),
            ApiQuantity("20Mi".into()),
        )]));
        assert_eq!(config(&p).memory, None);
    }

    #[test]
    fn init_containers_and_sidecars_follow_the_kep() {
        // Init 2 cpu alone beats the app's 1 cpu; the sidecar adds to both.
        let p = pod(serde_json::json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"cpu": "100m", "memory": "10Mi"}}},
                {"name": "init", "resources": {"limits": {"cpu": "2", "memory": "10Mi"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "100Mi"}}}]}));
        let c = config(&p);
        assert_eq!(c.cpu_quota, Some(210_000), "init 2 + sidecar 0.1");
        assert_eq!(c.memory, Some(110 << 20), "app 100Mi + sidecar 10Mi");
        assert_eq!(c.cpu_shares, Some(milli_cpu_to_shares(2100)));
    }

    #[test]
    fn pod_level_resources_win() {
        let mut p = one(serde_json::json!({}));
        p.spec.as_mut().unwrap().resources = Some(
            serde_json::from_value(serde_json::json!({"limits": {"cpu": "2", "memory": "1Gi"}}))
                .unwrap(),
        );
        let c = config(&p);
        assert_eq!(c.cpu_shares, Some(2048));
        assert_eq!(c.cpu_quota, Some(200_000));
        assert_eq!(c.memory, Some(1 << 30));
    }
}
