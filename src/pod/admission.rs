//! Admission of a pod to the node, as upstream's predicate admit handler (the scheduler's
//! GeneralPredicates as the kubelet runs them): a pod that cannot run here (an OS it is not
//! for, no room left under maxPods, more cpu, memory or ephemeral storage requested than
//! the Node's allocatable leaves, a node selector or required node affinity the Node does
//! not match, another node's name, a hostPort another pod holds, a `NoExecute` taint it
//! does not tolerate) is rejected with phase Failed and upstream's reason and message,
//! without creating anything and without disturbing the pods already admitted.

mod apparmor;
mod features;
pub(crate) mod node_affinity;
mod sysctls;
mod taints;

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

pub(crate) use sysctls::normalize as normalize_sysctl;
pub use sysctls::{kernel_version, SysctlAllowlist};

use super::status::ktime;
use crate::vocabulary::pod_source::is_static_pod;
use crate::vocabulary::qos::qos_class;
use crate::vocabulary::quantity::Quantity;
use crate::volume::Allocatable;

/// The only OS this agent runs pods for (upstream compares with its runtime.GOOS).
const NODE_OS: &str = "linux";
/// The well-known label naming a node's (or a pod's wanted) OS.
const OS_LABEL: &str = "kubernetes.io/os";

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

/// Why a pod was refused: upstream's reason (`OutOfcpu`, `NodeAffinity`, ...) and message.
/// The event carries the message as is; the pod's status says "Pod was rejected: " first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// Whether any of the tolerations tolerates the taint (upstream's
/// TolerationsTolerateTaint).
pub(crate) fn tolerates_taint(
    tolerations: &[k8s_openapi::api::core::v1::Toleration],
    taint: &k8s_openapi::api::core::v1::Taint,
) -> bool {
    tolerations.iter().any(|t| taints::tolerates(t, taint))
}

impl Rejection {
    pub(crate) fn new(reason: impl Into<String>, message: impl Into<String>) -> Rejection {
        Rejection {
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A failed predicate: the reason is the predicate's name.
    fn predicate(name: &str, description: &str) -> Rejection {
        Rejection::new(name, format!("Predicate {name} failed: {description}"))
    }

    fn insufficient(name: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
        Rejection::new(
            format!("OutOf{name}"),
            format!(
                "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        )
    }

    /// The message of the refused pod's status, as upstream words it.
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
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

/// Why `pod` cannot join the `admitted` pods on this node, in upstream's order: the pod's OS,
/// the features it asks for that this agent lacks (`features`), then resources (pods, cpu,
/// memory, ephemeral-storage), node affinity, node name, host ports, taints; the first
/// failure is the reason. Without a Node (standalone, or not registered yet) only the checks
/// that need none run (OS, features, maxPods, host ports).
///
/// A pod being deleted is never refused: it is on its way out, and its worker must run to
/// stop it. Static pods are exempt from the cpu, memory and ephemeral-storage fit and from
/// the taint check: upstream treats them as critical and evicts other pods to make room for
/// them rather than refusing them (its taint check skips them too); this agent does not
/// preempt, so it lets them in. maxPods still holds for them.
pub fn admit(
    pod: &Pod,
    admitted: &[&Pod],
    max_pods: usize,
    node: Option<&Node>,
) -> Result<(), Rejection> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    check_os(pod)?;
    features::check(pod)?;
    let is_static = is_static_pod(pod);
    let allocatable = match node {
        Some(node) if !is_static => node_allocatable(node),
        _ => Allocatable::default(),
    };
    admit_within(pod, admitted, max_pods, &allocatable)?;
    if let Some(node) = node {
        if !node_affinity::matches(pod, node) {
            return Err(Rejection::predicate(
                "NodeAffinity",
                "node(s) didn't match Pod's node affinity/selector",
            ));
        }
        let wanted = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if wanted.is_some_and(|w| !w.is_empty() && w != name) {
            return Err(Rejection::predicate(
                "NodeName",
                "node(s) didn't match the requested node name",
            ));
        }
    }
    check_host_ports(pod, admitted)?;
    if let Some(node) = node.filter(|_| !is_static) {
        let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        if let Some(taint) = taints::untolerated_no_execute(
            taints.unwrap_or_default(),
            tolerations.unwrap_or_default(),
        ) {
            tracing::debug!(pod = %pod_name(pod), taint = %taint.key, "pod does not tolerate the node's NoExecute taint");
            return Err(Rejection::predicate(
                "TaintToleration",
                "node(s) had taints that the pod didn't tolerate",
            ));
        }
    }
    apparmor::check(pod, apparmor::host_enabled())?;
    Ok(())
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The OS checks upstream runs first: a `kubernetes.io/os` pod label, or `spec.os.name`,
/// naming another OS than this node's. (Upstream compares the label with the Node's label
/// after forcing that to its own OS, so the Node itself is not needed.)
fn check_os(pod: &Pod) -> Result<(), Rejection> {
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    if label.is_some_and(|os| os != NODE_OS) {
        return Err(Rejection::new(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        ));
    }
    let os = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if os.is_some_and(|os| os.name != NODE_OS) {
        return Err(Rejection::new(
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS",
        ));
    }
    Ok(())
}

/// The Node's allocatable cpu (millicores), memory and ephemeral storage (bytes); a resource
/// it does not list, or lists unparsable, is unknown and not checked.
pub fn node_allocatable(node: &Node) -> Allocatable {
    let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let get = |name: &str| {
        list.and_then(|l| l.get(name))
            .and_then(|q| Quantity::from_api(q).ok())
    };
    Allocatable {
        cpu_millis: get("cpu").map(|q| q.milli_value()),
        memory_bytes: get("memory").map(|q| q.value()),
        ephemeral_storage_bytes: get("ephemeral-storage").map(|q| q.value()),
    }
}

/// The resource fit, as upstream's Fits: maxPods, then cpu, memory and ephemeral-storage
/// requests against what the allocatable leaves after the admitted pods' requests. A
/// resource whose allocatable is unknown (None) is not checked; a pod requesting none of
/// them is not weighed, as upstream.
pub fn admit_within(
    pod: &Pod,
    admitted: &[&Pod],
    max_pods: usize,
    allocatable: &Allocatable,
) -> Result<(), Rejection> {
    if admitted.len() >= max_pods {
        return Err(Rejection::insufficient(
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
            return Err(Rejection::insufficient(name, requested, in_use, capacity));
        }
    }
    Ok(())
}

/// Upstream's NodePorts predicate; the clashing port is logged (its message names none).
fn check_host_ports(pod: &Pod, admitted: &[&Pod]) -> Result<(), Rejection> {
    let taken: HashSet<HostPort> = admitted.iter().flat_map(|p| host_ports(p)).collect();
    if let Some(clash) = host_ports(pod)
        .iter()
        .find(|w| taken.iter().any(|t| conflicts(w, t)))
    {
        tracing::debug!(pod = %pod_name(pod), protocol = %clash.0, host_ip = %clash.1, host_port = clash.2, "host port already taken");
        return Err(Rejection::predicate(
            "NodePorts",
            "node(s) didn't have free ports for the requested pod ports",
        ));
    }
    Ok(())
}

/// The status of a rejected pod (its QoS class kept, as upstream).
pub fn rejected_status(pod: &Pod, rejection: &Rejection) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(rejection.reason.clone()),
        message: Some(rejection.status_message()),
        qos_class: Some(qos_class(pod).as_str().into()),
        start_time: Some(ktime(chrono::Utc::now())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
