//! The Node object as the agent writes it: the initial object it registers (labels, taints,
//! the attach/detach annotation), the reconciliation of an existing one it adopts, the
//! status it computes on each pass (upstream's setters, in their order), whether that
//! status changed, and the strategic merge patch that carries it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeRuntimeHandler,
    NodeRuntimeHandlerFeatures, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Map, Value};

use super::conditions::{self, NETWORK_NOT_READY};
use super::machine::{go_arch, HostFacts};
use super::resources;
use super::runtime::runtime_version;
use crate::config::Config;
use crate::vocabulary::quantity::Quantity;
use crate::vocabulary::version::KUBELET_VERSION;

pub(crate) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub(crate) const LABEL_OS: &str = "kubernetes.io/os";
pub(crate) const LABEL_ARCH: &str = "kubernetes.io/arch";
const LABEL_BETA_OS: &str = "beta.kubernetes.io/os";
const LABEL_BETA_ARCH: &str = "beta.kubernetes.io/arch";
/// Upstream's defaultLabels kept in step on an adopted Node (the topology and instance-type
/// ones come from a cloud provider, which the agent has not, so they stay absent).
const DEFAULT_LABELS: &[&str] = &[
    LABEL_HOSTNAME,
    LABEL_OS,
    LABEL_ARCH,
    LABEL_BETA_OS,
    LABEL_BETA_ARCH,
];
pub(crate) const ANNOTATION_CMAD: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// One pass's observations of the runtime and the network (the host's are in `HostFacts`).
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub host: HostFacts,
    /// The runtime's version, or why it did not answer.
    pub runtime: Result<String, String>,
    /// Why the pod network is not ready, if it is not.
    pub network: Result<(), String>,
    /// None when the runtime could not list them: the previous list stays.
    pub images: Option<Vec<ContainerImage>>,
    /// The pressure conditions as the eviction manager last reported them.
    pub pressure: conditions::Pressure,
    /// The RuntimeClass handlers the node serves (`runtime::handlers`), the default `""`
    /// first.
    pub runtime_handlers: Vec<String>,
    /// The attachable volumes mounted or being mounted here (`volume::csi::VolumesInUse`).
    pub volumes_in_use: Vec<String>,
}

/// The Node the agent registers (upstream's initialNode), before its status is set.
pub(crate) fn initial_node(cfg: &Config) -> Node {
    let mut labels = BTreeMap::from([
        (LABEL_HOSTNAME.to_string(), cfg.node_name.clone()),
        (LABEL_OS.to_string(), "linux".to_string()),
        (LABEL_ARCH.to_string(), go_arch().to_string()),
        (LABEL_BETA_OS.to_string(), "linux".to_string()),
        (LABEL_BETA_ARCH.to_string(), go_arch().to_string()),
    ]);
    for (k, v) in &cfg.node_labels {
        labels.insert(k.clone(), v.clone());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_CMAD.to_string(),
                "true".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(cfg.register_with_taints.clone()).filter(|t| !t.is_empty()),
            ..Default::default()
        }),
        status: Some(NodeStatus::default()),
    }
}

/// Brings an adopted Node's default labels and attach/detach annotation in line with what
/// the agent would register (upstream's updateDefaultLabels and
/// reconcileCMADAnnotationWithExistingNode); true when something changed.
pub(crate) fn reconcile_existing(existing: &mut Node, initial: &Node) -> bool {
    let mut changed = false;
    let wanted = initial.metadata.labels.clone().unwrap_or_default();
    let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
    for key in DEFAULT_LABELS {
        let Some(value) = wanted.get(*key) else {
            continue;
        };
        if labels.get(*key) != Some(value) {
            labels.insert(key.to_string(), value.clone());
            changed = true;
        }
        if value.is_empty() {
            labels.remove(*key);
        }
    }
    let wanted_cmad = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CMAD));
    let annotations = existing
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    match wanted_cmad {
        Some(v) if annotations.get(ANNOTATION_CMAD) != Some(v) => {
            annotations.insert(ANNOTATION_CMAD.to_string(), v.clone());
            changed = true;
        }
        None if annotations.remove(ANNOTATION_CMAD).is_some() => changed = true,
        _ => {}
    }
    changed
}

/// Upstream's check on every status update: the stable os and arch labels must be there
/// and right; true when they were fixed.
pub(crate) fn ensure_required_labels(node: &mut Node) -> bool {
    let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (key, value) in [(LABEL_OS, "linux"), (LABEL_ARCH, go_arch())] {
        if labels.get(key).map(String::as_str) != Some(value) {
            labels.insert(key.to_string(), value.to_string());
            changed = true;
        }
    }
    changed
}

/// The node's addresses: InternalIP (--node-ip, checked against the host's interfaces as
/// upstream does, else the default route's address) and Hostname.
fn addresses(cfg: &Config, host: &HostFacts) -> Result<Vec<NodeAddress>, String> {
    let ip = match cfg.node_ip {
        Some(ip) if !host.interface_ips.contains(&ip) => {
            return Err(format!(
                "failed to validate nodeIP: node IP: \"{ip}\" not found in the host's network interfaces"
            ))
        }
        Some(ip) => Some(ip),
        None => host.default_ip,
    };
    let mut out = Vec::new();
    if let Some(ip) = ip {
        out.push(NodeAddress {
            type_: "InternalIP".into(),
            address: ip.to_string(),
        });
    }
    out.push(NodeAddress {
        type_: "Hostname".into(),
        address: cfg.node_name.clone(),
    });
    Ok(out)
}

/// What setting the status led to besides the status itself.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SetOutcome {
    /// Problems a setter met (logged by the caller; the other setters still ran).
    pub problems: Vec<String>,
    /// Node events for conditions that changed (NodeHasDiskPressure, NodeReady, ...).
    pub events: Vec<&'static str>,
}

/// Sets the node's status from one pass's observations (upstream's setNodeStatus).
pub(crate) fn set_node_status(
    node: &mut Node,
    cfg: &Config,
    observed: &Observed,
    now: Timestamp,
) -> SetOutcome {
    let mut problems = Vec::new();
    let status = node.status.get_or_insert_with(NodeStatus::default);
    match addresses(cfg, &observed.host) {
        Ok(a) => status.addresses = Some(a),
        Err(e) => problems.push(e),
    }
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(cfg.port),
        }),
    });

    let mut capacity = resources::capacity(&observed.host.machine, cfg.max_pods);
    // Upstream reports (and requires) ephemeral storage only with local storage isolation.
    if !cfg.local_storage_capacity_isolation {
        capacity.remove("ephemeral-storage");
    }
    let reserved = resources::reservation(
        &capacity,
        &cfg.kube_reserved,
        &cfg.system_reserved,
        &cfg.eviction_hard,
    );
    let allocatable = resources::allocatable(&capacity, &reserved);
    status.capacity = Some(resources::to_api(&capacity));
    status.allocatable = Some(resources::to_api(&allocatable));

    let system = &observed.host.system;
    status.node_info = Some(NodeSystemInfo {
        machine_id: system.machine_id.clone(),
        system_uuid: system.system_uuid.clone(),
        boot_id: system.boot_id.clone(),
        kernel_version: system.kernel_version.clone(),
        os_image: system.os_image.clone(),
        container_runtime_version: observed
            .runtime
            .as_ref()
            .map(|v| runtime_version(v))
            .unwrap_or_else(|_| {
                status
                    .node_info
                    .as_ref()
                    .map(|i| i.container_runtime_version.clone())
                    .unwrap_or_default()
            }),
        kubelet_version: KUBELET_VERSION.to_string(),
        operating_system: "linux".into(),
        architecture: go_arch().into(),
        ..status.node_info.clone().unwrap_or_default()
    });
    if let Some(images) = &observed.images {
        status.images = Some(images.clone());
    }
    status.runtime_handlers = Some(runtime_handlers(&observed.runtime_handlers));
    status.volumes_in_use =
        (!observed.volumes_in_use.is_empty()).then(|| observed.volumes_in_use.clone());

    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut events = conditions::set_pressure_conditions(conditions, observed.pressure, now);
    let mut errors = Vec::new();
    if observed.runtime.is_err() {
        errors.push("container runtime is down".to_string());
    }
    if observed.network.is_err() {
        errors.push(NETWORK_NOT_READY.to_string());
    }
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|r| *r != "ephemeral-storage" || cfg.local_storage_capacity_isolation)
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    events.extend(conditions::set_ready_condition(conditions, &errors, now));
    SetOutcome { problems, events }
}

/// Upstream's RuntimeHandlers setter over what the runtime reports: one entry per handler,
/// the default as `""`, as containerd 2's CRI lists them (1.7's lists none, so an upstream
/// kubelet on it shows an empty list). The features say what this agent does for a pod on
/// that handler: user namespaces are refused (`pod::admission::features`), and recursive
/// read-only mounts are passed to runc but not probed for (a kernel before 5.12 or a runc
/// without `rro` fails them), so neither is claimed; a pod relying on either is then
/// treated as upstream treats a handler without it.
fn runtime_handlers(names: &[String]) -> Vec<NodeRuntimeHandler> {
    names
        .iter()
        .map(|name| NodeRuntimeHandler {
            name: Some(name.clone()),
            features: Some(NodeRuntimeHandlerFeatures {
                recursive_read_only_mounts: Some(false),
                user_namespaces: Some(false),
            }),
        })
        .collect()
}

/// Resource lists compared by value: the API returns its canonical spelling, which may
/// differ from the one sent ("94580335k" for "94580335000").
fn same_resources(
    a: &Option<BTreeMap<String, ApiQuantity>>,
    b: &Option<BTreeMap<String, ApiQuantity>>,
) -> bool {
    let parse = |m: &Option<BTreeMap<String, ApiQuantity>>| -> BTreeMap<String, Option<Quantity>> {
        m.iter()
            .flatten()
            .map(|(k, q)| (k.clone(), Quantity::from_api(q).ok()))
            .collect()
    };
    parse(a) == parse(b)
}

/// Upstream's nodeStatusHasChanged: conditions compared without heartbeats, the rest as is.
pub(crate) fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    if conditions::conditions_changed(
        old.conditions.as_deref().unwrap_or_default(),
        new.conditions.as_deref().unwrap_or_default(),
    ) {
        return true;
    }
    if !same_resources(&old.capacity, &new.capacity)
        || !same_resources(&old.allocatable, &new.allocatable)
    {
        return true;
    }
    let rest = |s: &NodeStatus| NodeStatus {
        conditions: None,
        capacity: None,
        allocatable: None,
        ..s.clone()
    };
    rest(old) != rest(new)
}

/// A map's strategic-merge patch: changed keys with their values, removed ones as null.
fn map_patch<V: serde::Serialize + PartialEq>(
    old: Option<&BTreeMap<String, V>>,
    new: Option<&BTreeMap<String, V>>,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut patch = Map::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            patch.insert(k.clone(), json!(v));
        }
    }
    for k in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(k.clone(), Value::Null);
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// The strategic merge patch of nodes/<name>/status from `original` to `updated`: the
/// labels and annotations that changed, and every status field the agent owns (conditions
/// and addresses merge by type; images replace the list).
pub(crate) fn status_patch(original: &Node, updated: &Node) -> Value {
    let mut metadata = Map::new();
    if let Some(p) = map_patch(
        original.metadata.labels.as_ref(),
        updated.metadata.labels.as_ref(),
    ) {
        metadata.insert("labels".into(), p);
    }
    if let Some(p) = map_patch(
        original.metadata.annotations.as_ref(),
        updated.metadata.annotations.as_ref(),
    ) {
        metadata.insert("annotations".into(), p);
    }
    let default = NodeStatus::default();
    let old = original.status.as_ref().unwrap_or(&default);
    let new = updated.status.as_ref().unwrap_or(&default);
    let mut status = Map::new();
    let mut put = |key: &str, value: Value| {
        if !value.is_null() {
            status.insert(key.to_string(), value);
        }
    };
    put("conditions", json!(new.conditions));
    put("addresses", json!(new.addresses));
    put("daemonEndpoints", json!(new.daemon_endpoints));
    put("nodeInfo", json!(new.node_info));
    put("images", json!(new.images));
    // A list the API replaces whole (listType atomic).
    put("runtimeHandlers", json!(new.runtime_handlers));
    // Replaced whole too; an empty list is sent, so the last volume's going clears it.
    put(
        "volumesInUse",
        json!(new.volumes_in_use.clone().unwrap_or_default()),
    );
    if let Some(p) = map_patch(old.capacity.as_ref(), new.capacity.as_ref()) {
        status.insert("capacity".into(), p);
    }
    if let Some(p) = map_patch(old.allocatable.as_ref(), new.allocatable.as_ref()) {
        status.insert("allocatable".into(), p);
    }
    let mut patch = Map::new();
    if !metadata.is_empty() {
        patch.insert("metadata".into(), Value::Object(metadata));
    }
    patch.insert("status".into(), Value::Object(status));
    Value::Object(patch)
}

#[cfg(test)]
pub(crate) mod tests;
