//! Admission of a pod to the node, as upstream's admit handlers: a pod that cannot run
//! here (no room left under maxPods, more cpu, memory or ephemeral storage requested than
//! the node's allocatable leaves, a hostPort another pod holds) is rejected with phase
//! Failed and a reason, without creating anything, and without disturbing the pods
//! already admitted.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::status::ktime;
use crate::quantity::Quantity;
use crate::volume::Allocatable;

/// The resources the fit check weighs, in upstream's order.
const FIT_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// Per-resource totals, exact.
type Totals = BTreeMap<&'static str, Quantity>;

/// A container's requests as the API server defaults them (a limit without a request
/// requests the limit); a value that does not parse counts as none (the container's spec
/// refuses it, naming the field).
fn requests_of(r: Option<&ResourceRequirements>) -> Totals {
    let get = |m: Option<&BTreeMap<String, ApiQuantity>>, name: &str| {
        m.and_then(|m| m.get(name))
            .and_then(|q| Quantity::from_api(q).ok())
    };
    let mut out = Totals::new();
    for name in FIT_RESOURCES {
        let q = get(r.and_then(|r| r.requests.as_ref()), name)
            .or_else(|| get(r.and_then(|r| r.limits.as_ref()), name));
        if let Some(q) = q {
            out.insert(name, q);
        }
    }
    out
}

fn add(into: &mut Totals, from: &Totals) {
    for (k, v) in from {
        let t = into.entry(k).or_default();
        *t = *t + *v;
    }
}

fn max(into: &mut Totals, from: &Totals) {
    for (k, v) in from {
        let t = into.entry(k).or_default();
        *t = (*t).max(*v);
    }
}

/// What a pod requests, as upstream's PodRequests: the app containers and sidecars
/// together, or the largest init container with the sidecars started before it, whichever
/// is more; pod-level cpu and memory requests replace the containers' when set; plus the
/// pod overhead.
pub fn pod_requests(pod: &Pod) -> Totals {
    let Some(spec) = pod.spec.as_ref() else {
        return Totals::new();
    };
    let req = |c: &Container| requests_of(c.resources.as_ref());
    let mut total = Totals::new();
    for c in &spec.containers {
        add(&mut total, &req(c));
    }
    let mut sidecars = Totals::new();
    let mut init_peak = Totals::new();
    for c in spec.init_containers.iter().flatten() {
        let own = req(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            max(&mut init_peak, &sidecars);
        } else {
            let mut with_sidecars = own;
            add(&mut with_sidecars, &sidecars);
            max(&mut init_peak, &with_sidecars);
        }
    }
    max(&mut total, &init_peak);
    let pod_level = requests_of(spec.resources.as_ref());
    for name in ["cpu", "memory"] {
        if let Some(q) = pod_level.get(name) {
            total.insert(name, *q);
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        let o: Totals = FIT_RESOURCES
            .iter()
            .filter_map(|n| {
                overhead
                    .get(*n)
                    .and_then(|q| Quantity::from_api(q).ok())
                    .map(|q| (*n, q))
            })
            .collect();
        add(&mut total, &o);
    }
    total
}

/// A resource in the unit upstream reports it: millicores for cpu, bytes otherwise.
fn amount(name: &str, q: Option<&Quantity>) -> i64 {
    match (name, q) {
        (_, None) => 0,
        ("cpu", Some(q)) => q.milli_value(),
        (_, Some(q)) => q.value(),
    }
}

fn insufficient(name: &str, requested: i64, used: i64, capacity: i64) -> (String, String) {
    (
        format!("OutOf{name}"),
        format!(
            "Pod was rejected: Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    )
}

/// (protocol, host IP, host port); an empty or 0.0.0.0 host IP means every address.
type HostPort = (String, String, i32);

fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let spec = pod.spec.as_ref();
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let mut out = Vec::new();
    for c in spec.into_iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    }) {
        for p in c.ports.iter().flatten() {
            // With hostNetwork the container port is a host port.
            let port = p
                .host_port
                .filter(|h| *h > 0)
                .or(host_net.then_some(p.container_port));
            if let Some(port) = port {
                let ip = p.host_ip.clone().unwrap_or_default();
                let ip = if ip == "0.0.0.0" { String::new() } else { ip };
                out.push((p.protocol.clone().unwrap_or_else(|| "TCP".into()), ip, port));
            }
        }
    }
    out
}

fn conflicts(a: &HostPort, b: &HostPort) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1.is_empty() || b.1.is_empty() || a.1 == b.1)
}

/// Why a pod is rejected: (reason, message), upstream's wording. Checks maxPods and host
/// ports only; see [`admit_within`] for the resource fit.
pub fn admit(pod: &Pod, admitted: &[&Pod], max_pods: usize) -> Result<(), (String, String)> {
    admit_within(pod, admitted, max_pods, &Allocatable::default())
}

/// Why a pod is rejected: (reason, message), upstream's wording and order (pods, cpu,
/// memory, ephemeral-storage, then host ports). A resource whose allocatable is unknown
/// (None) is not checked; a pod requesting none of them is not weighed, as upstream.
pub fn admit_within(
    pod: &Pod,
    admitted: &[&Pod],
    max_pods: usize,
    allocatable: &Allocatable,
) -> Result<(), (String, String)> {
    if admitted.len() >= max_pods {
        return Err(insufficient(
            "pods",
            1,
            admitted.len() as i64,
            max_pods as i64,
        ));
    }
    let wanted = pod_requests(pod);
    let mut used = Totals::new();
    for p in admitted {
        add(&mut used, &pod_requests(p));
    }
    for (name, capacity) in [
        ("cpu", allocatable.cpu_millis),
        ("memory", allocatable.memory_bytes),
        ("ephemeral-storage", allocatable.ephemeral_storage_bytes),
    ] {
        let Some(capacity) = capacity else { continue };
        let requested = amount(name, wanted.get(name));
        let in_use = amount(name, used.get(name));
        if requested > 0 && requested > capacity - in_use {
            return Err(insufficient(name, requested, in_use, capacity));
        }
    }
    let taken: HashSet<HostPort> = admitted.iter().flat_map(|p| host_ports(p)).collect();
    if let Some(clash) = host_ports(pod)
        .iter()
        .find(|w| taken.iter().any(|t| conflicts(w, t)))
    {
        return Err((
            "NodePorts".into(),
            format!(
                "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports ({} {}{})",
                clash.0,
                if clash.1.is_empty() { String::new() } else { format!("{}:", clash.1) },
                clash.2
            ),
        ));
    }
    Ok(())
}

/// The status of a rejected pod.
pub fn rejected_status(reason: &str, message: &str) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        start_time: Some(ktime(chrono::Utc::now())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(port: serde_json::Value, host_net: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"hostNetwork": host_net, "containers": [{"name": "c", "image": "i", "ports": [port]}]}
        }))
        .unwrap()
    }

    #[test]
    fn host_port_conflicts() {
        let a = pod(
            serde_json::json!({"containerPort": 80, "hostPort": 8080}),
            false,
        );
        let same = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080}),
            false,
        );
        let udp = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080, "protocol": "UDP"}),
            false,
        );
        let other_ip = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080, "hostIP": "127.0.0.2"}),
            false,
        );
        let no_host_port = pod(serde_json::json!({"containerPort": 8080}), false);
        let hostnet = pod(serde_json::json!({"containerPort": 8080}), true);
        assert!(admit(&a, &[], 110).is_ok());
        let (reason, msg) = admit(&same, &[&a], 110).unwrap_err();
        assert_eq!(reason, "NodePorts");
        assert!(msg.contains("didn't have free ports"), "{msg}");
        assert!(admit(&udp, &[&a], 110).is_ok());
        // A specific address still clashes with a port taken on every address.
        assert!(admit(&other_ip, &[&a], 110).is_err());
        assert!(admit(&no_host_port, &[&a], 110).is_ok());
        assert!(admit(&hostnet, &[&a], 110).is_err());
    }

    #[test]
    fn max_pods() {
        let a = pod(serde_json::json!({"containerPort": 80}), false);
        let (reason, _) = admit(&a, &[&a, &a], 2).unwrap_err();
        assert_eq!(reason, "OutOfpods");
    }

    fn with(containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": containers}
        }))
        .unwrap()
    }

    fn alloc(cpu: i64, mem: i64) -> Allocatable {
        Allocatable {
            cpu_millis: Some(cpu),
            memory_bytes: Some(mem),
            ephemeral_storage_bytes: None,
        }
    }

    #[test]
    fn resources_fit_exactly_as_upstream_sums_them() {
        let node = alloc(2000, 1 << 30);
        let a = with(
            serde_json::json!([{"name": "a", "resources": {"requests": {"cpu": "0.7", "memory": "512Mi"}}}]),
        );
        let b = with(serde_json::json!([
            {"name": "a", "resources": {"requests": {"cpu": "650m"}}},
            {"name": "b", "resources": {"limits": {"cpu": "6.5e-1", "memory": "0.5Gi"}}}]));
        // 700m + 1300m is exactly 2 CPUs: it fits; 1m more does not.
        assert!(admit_within(&b, &[&a], 110, &node).is_ok());
        let c = with(serde_json::json!([{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]));
        let (reason, msg) = admit_within(&c, &[&a, &b], 110, &node).unwrap_err();
        assert_eq!(reason, "OutOfcpu");
        assert_eq!(
            msg,
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1, used: 2000, capacity: 2000"
        );
        let m =
            with(serde_json::json!([{"name": "m", "resources": {"requests": {"memory": "1"}}}]));
        let (reason, msg) = admit_within(&m, &[&a, &b], 110, &node).unwrap_err();
        assert_eq!(reason, "OutOfmemory");
        assert!(
            msg.ends_with("memory, requested: 1, used: 1073741824, capacity: 1073741824"),
            "{msg}"
        );
        // A pod requesting nothing is not weighed; unknown allocatable is not checked.
        let none = with(serde_json::json!([{"name": "n"}]));
        assert!(admit_within(&none, &[&a, &b], 110, &node).is_ok());
        assert!(admit_within(&c, &[&a, &b], 110, &Allocatable::default()).is_ok());
        // maxPods comes first.
        assert_eq!(
            admit_within(&c, &[&a, &b], 2, &node).unwrap_err().0,
            "OutOfpods"
        );
    }

    #[test]
    fn pod_requests_follow_init_sidecar_and_overhead_rules() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "overhead": {"cpu": "100m"},
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                    {"name": "big", "resources": {"requests": {"cpu": "3", "memory": "1Mi"}}}],
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Mi"}}}]}
        }))
        .unwrap();
        let r = pod_requests(&p);
        // max(app 500m + sidecar 200m, init 3 + sidecar 200m) + overhead 100m.
        assert_eq!(r["cpu"], Quantity::from_milli(3300));
        assert_eq!(r["memory"], Quantity::from_value(2 << 20));
    }
}
