//! The container manager's cgroup work (upstream's pkg/kubelet/cm, its behaviour not its
//! shape): the pods' cgroup tree — kubepods limited to node allocatable, the Burstable and
//! BestEffort parents weighted as upstream's QoS manager weights them, and one cgroup per
//! pod limited to what its containers may use — on cgroup v1 or v2, named as the cgroupfs
//! or systemd driver names them (`vocabulary::cgroup_names`), written through the cgroups layer's manager
//! (`crate::cgroups::Manager`, cgroupfs v1 or v2).
//!
//! Pod workers call `ensure_pod` before a pod's sandbox exists (and on every pass, which
//! writes only when something changed) and `remove_pod` once everything of the pod is gone;
//! both keep the Burstable parent's shares current. `main` calls `start` once and then
//! `enforce_node_allocatable` until it succeeds, as upstream retries it every minute.
//! Nothing here kills or moves a process: creating a cgroup that exists changes nothing in
//! it, and a memory limit below what a cgroup already uses is left for later.

pub(crate) mod allocatable;
pub(crate) mod pod;
pub(crate) mod qos;
pub mod swap;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use crate::vocabulary::cgroup_names::{CgroupDriver, CgroupName};

use crate::cgroups::{CgroupError, Manager, ResourceConfig, QUOTA_PERIOD};

use crate::config::Config;
use crate::config::{
    ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE, ENFORCE_PODS,
    ENFORCE_SYSTEM_RESERVED, ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
};
use crate::node::resources::Amounts;
use crate::vocabulary::qos::{qos_class, QosClass};
use crate::vocabulary::swap::ContainerSwap;

/// Where pods' cgroups go, from the configuration alone (the pod worker names a pod's
/// cgroup with it whether or not a manager runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub driver: CgroupDriver,
    pub root: CgroupName,
    pub per_qos: bool,
}

impl Layout {
    /// cgroupRoot in upstream's reading: the cgroupfs spelling for either driver.
    pub fn from_config(cfg: &Config) -> Layout {
        Layout {
            driver: cfg.cgroup_driver,
            root: CgroupName::parse_cgroup_root(&cfg.cgroup_root),
            per_qos: cfg.cgroups_per_qos,
        }
    }

    /// The node allocatable cgroup (`kubepods` under cgroupRoot).
    pub fn kubepods(&self) -> CgroupName {
        if self.per_qos {
            self.root.child("kubepods")
        } else {
            self.root.clone()
        }
    }

    fn qos_parent(&self, qos: QosClass) -> CgroupName {
        match qos {
            QosClass::Guaranteed => self.kubepods(),
            QosClass::Burstable => self.kubepods().child("burstable"),
            QosClass::BestEffort => self.kubepods().child("besteffort"),
        }
    }

    /// The pod's cgroup as a path for runc and the cgroup filesystem. Without
    /// cgroupsPerQOS the pod's containers are still grouped under `<cgroupRoot>/pod<uid>`
    /// (never limited): upstream leaves them to the runtime's default place instead.
    pub fn pod_cgroup(&self, uid: &str, qos: QosClass) -> String {
        let pod = format!("pod{uid}");
        let name = if self.per_qos {
            self.qos_parent(qos).child(&pod)
        } else {
            self.root.child(&pod)
        };
        name.to_path(self.driver)
    }

    /// Every place the pod's cgroup can be (its class is not needed to remove it).
    pub fn pod_cgroups(&self, uid: &str) -> Vec<String> {
        let mut all: Vec<String> = [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .into_iter()
        .map(|q| self.pod_cgroup(uid, q))
        .collect();
        all.dedup();
        all
    }
}

/// What the manager knows of an active pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Active {
    qos: QosClass,
    cpu_request_millis: i64,
    applied: ResourceConfig,
}

/// The node's pod cgroups. Every method is blocking (file-system writes): call it from
/// `spawn_blocking`.
#[derive(Debug)]
pub struct ContainerManager {
    cgroups: Arc<dyn Manager>,
    layout: Layout,
    pod_pids_limit: i64,
    kubepods: ResourceConfig,
    /// Reserved cgroups to enforce: (path, settings).
    reserved: Vec<(String, ResourceConfig)>,
    active: Mutex<BTreeMap<String, Active>>,
    /// What containers get for swap (memorySwap.swapBehavior, when swap is controllable).
    container_swap: ContainerSwap,
}

impl ContainerManager {
    /// `capacity`: the node's cpu (millicores), memory (bytes) and pid count.
    pub fn new(cgroups: Arc<dyn Manager>, cfg: &Config, capacity: &Amounts) -> ContainerManager {
        let layout = Layout::from_config(cfg);
        let enforce = |key: &str| cfg.enforce_node_allocatable.iter().any(|e| e == key);
        let kubepods = allocatable::kubepods_config(
            capacity,
            &cfg.kube_reserved,
            &cfg.system_reserved,
            layout.per_qos && enforce(ENFORCE_PODS),
        );
        let mut reserved = Vec::new();
        for (full, compressible, cgroup, amounts) in [
            (
                ENFORCE_SYSTEM_RESERVED,
                ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
                &cfg.system_reserved_cgroup,
                &cfg.system_reserved,
            ),
            (
                ENFORCE_KUBE_RESERVED,
                ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
                &cfg.kube_reserved_cgroup,
                &cfg.kube_reserved,
            ),
        ] {
            let amounts = allocatable::reserved_amounts(amounts);
            let path = CgroupName::parse(layout.driver, cgroup)
                .unwrap_or_default()
                .to_path(layout.driver);
            if enforce(full) {
                reserved.push((path, allocatable::config_for(&amounts, false)));
            } else if enforce(compressible) {
                reserved.push((path, allocatable::config_for(&amounts, true)));
            }
        }
        let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let container_swap = swap::container_swap(
            cgroups.swap_controller_available(&self_cgroup),
            cgroups.version(),
            cfg.swap_behavior,
        );
        ContainerManager {
            container_swap,
            cgroups,
            layout,
            pod_pids_limit: cfg.pod_pids_limit,
            kubepods,
            reserved,
            active: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// What containers get for swap.
    pub fn container_swap(&self) -> ContainerSwap {
        self.container_swap
    }

    /// What kubepods is limited to.
    pub fn kubepods_config(&self) -> &ResourceConfig {
        &self.kubepods
    }

    fn path(&self, name: &CgroupName) -> String {
        name.to_path(self.layout.driver)
    }

    /// The cgroups layer's operations, timed as upstream's cgroup_manager_duration.
    fn create(&self, cgroup: &str) -> Result<(), CgroupError> {
        let _timed = crate::metrics::cgroup_op("create");
        self.cgroups.create(cgroup)
    }

    fn apply(&self, cgroup: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        let _timed = crate::metrics::cgroup_op("update");
        self.cgroups.apply(cgroup, config)
    }

    fn remove(&self, cgroup: &str) -> Vec<PathBuf> {
        let _timed = crate::metrics::cgroup_op("destroy");
        self.cgroups.remove(cgroup)
    }

    /// Creates kubepods and the QoS parents. A kubepods that does not exist yet is made
    /// with its limits at once; an existing one (pods running under it) keeps what it has
    /// until `enforce_node_allocatable` succeeds.
    pub fn start(&self) -> Result<(), CgroupError> {
        if !self.layout.per_qos {
            return Ok(());
        }
        let kubepods = self.path(&self.layout.kubepods());
        if !self.cgroups.exists(&kubepods) {
            self.create(&kubepods)?;
            self.apply(&kubepods, &self.kubepods)?;
        }
        for qos in [QosClass::Burstable, QosClass::BestEffort] {
            self.create(&self.path(&self.layout.qos_parent(qos)))?;
        }
        self.update_qos()
    }

    /// Writes kubepods' limits and the reserved cgroups'. Fails while pods use more memory
    /// than the new limit (the caller tries again later), or when a reserved cgroup does
    /// not exist (upstream requires it to).
    pub fn enforce_node_allocatable(&self) -> Result<(), CgroupError> {
        if self.layout.per_qos {
            let kubepods = self.path(&self.layout.kubepods());
            self.apply(&kubepods, &self.kubepods)?;
        }
        for (cgroup, config) in &self.reserved {
            if !self.cgroups.exists(cgroup) {
                return Err(CgroupError::Create {
                    path: cgroup.into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "the reserved cgroup must exist before it is enforced",
                    ),
                });
            }
            self.apply(cgroup, config)?;
        }
        Ok(())
    }

    /// The Burstable parent's shares from the active Burstable pods; BestEffort's minimum.
    pub fn update_qos(&self) -> Result<(), CgroupError> {
        if !self.layout.per_qos {
            return Ok(());
        }
        let requests: Vec<i64> = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|a| a.qos == QosClass::Burstable)
            .map(|a| a.cpu_request_millis)
            .collect();
        let burstable = self.path(&self.layout.qos_parent(QosClass::Burstable));
        let besteffort = self.path(&self.layout.qos_parent(QosClass::BestEffort));
        self.create(&burstable)?;
        self.create(&besteffort)?;
        self.apply(&burstable, &qos::burstable_config(requests))?;
        self.apply(&besteffort, &qos::besteffort_config())
    }

    /// Makes the pod's cgroup with its limits, or brings them up to date; returns the
    /// cgroup's path. Writes only when the cgroup is missing or its values changed. A memory
    /// limit below the pod's current usage is skipped with a warning (the pod keeps
    /// running; the limit is tried again on the next pass).
    pub fn ensure_pod(&self, pod: &Pod) -> Result<String, CgroupError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let qos = qos_class(pod);
        let path = self.layout.pod_cgroup(&uid, qos);
        if !self.layout.per_qos {
            return Ok(path);
        }
        let config = pod::resource_config(pod, self.pod_pids_limit, QUOTA_PERIOD);
        let entry = Active {
            qos,
            cpu_request_millis: pod::pod_requests(pod).cpu_millis,
            applied: config.clone(),
        };
        let previous = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&uid)
            .cloned();
        // A pod the manager already set up keeps its values here: they change only through
        // a resize (`resize_pod`), in the order that keeps the pod's limits above its
        // containers'.
        if previous.as_ref().is_some_and(|p| p.qos == entry.qos) && self.cgroups.exists(&path) {
            return Ok(path);
        }
        self.create(&path)?;
        match self.apply(&path, &config) {
            Ok(()) => {}
            Err(e @ CgroupError::MemoryBelowUsage { .. }) => {
                warn!(pod_uid = %uid, error = %e, "pod cgroup memory limit not applied yet");
                // Not recorded as applied, so the next pass tries again.
                return Ok(path);
            }
            Err(e) => return Err(e),
        }
        let weight_changed = previous
            .as_ref()
            .is_none_or(|p| p.qos != entry.qos || p.cpu_request_millis != entry.cpu_request_millis);
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid, entry);
        if weight_changed && qos == QosClass::Burstable {
            self.update_qos()?;
        }
        Ok(path)
    }

    /// The pod cgroup's values as last written and the values the (allocated) pod needs;
    /// `None` when pods get no cgroup of their own or this one was not set up yet.
    pub fn pod_values(&self, pod: &Pod) -> Option<(ResourceConfig, ResourceConfig)> {
        if !self.layout.per_qos {
            return None;
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let current = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)?
            .applied
            .clone();
        let target = pod::resource_config(pod, self.pod_pids_limit, QUOTA_PERIOD);
        Some((current, target))
    }

    /// The pod cgroup's memory usage in bytes.
    pub fn pod_memory_usage(&self, pod: &Pod) -> Result<i64, CgroupError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.cgroups
            .memory_usage(&self.layout.pod_cgroup(&uid, qos_class(pod)))
    }

    /// A container cgroup's memory usage in bytes (`cgroup` as its record names it).
    pub fn memory_usage(&self, cgroup: &str) -> Result<i64, CgroupError> {
        self.cgroups.memory_usage(cgroup)
    }

    /// Writes one step of a pod's resize: the values `part` has (the others stay), and
    /// the Burstable parent's shares when the pod's cpu request changed.
    pub fn resize_pod(&self, pod: &Pod, part: &ResourceConfig) -> Result<(), CgroupError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let qos = qos_class(pod);
        let path = self.layout.pod_cgroup(&uid, qos);
        self.apply(&path, part)?;
        let request = pod::pod_requests(pod).cpu_millis;
        let weight_changed = {
            let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
            let Some(entry) = active.get_mut(&uid) else {
                return Ok(());
            };
            let applied = &mut entry.applied;
            applied.cpu_shares = part.cpu_shares.or(applied.cpu_shares);
            applied.cpu_quota = part.cpu_quota.or(applied.cpu_quota);
            applied.cpu_period = part.cpu_period.or(applied.cpu_period);
            applied.memory = part.memory.or(applied.memory);
            let changed = part.cpu_shares.is_some() && entry.cpu_request_millis != request;
            if changed {
                entry.cpu_request_millis = request;
            }
            changed
        };
        if weight_changed && qos == QosClass::Burstable {
            self.update_qos()?;
        }
        Ok(())
    }

    /// Removes the pod's cgroup wherever it is (all its processes are gone by now) and
    /// updates the Burstable parent; returns what could not be removed.
    pub fn remove_pod(&self, uid: &str) -> Vec<std::path::PathBuf> {
        let mut left = Vec::new();
        for cgroup in self.layout.pod_cgroups(uid) {
            left.extend(self.remove(&cgroup));
        }
        let was = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        if was.is_some_and(|a| a.qos == QosClass::Burstable) {
            if let Err(e) = self.update_qos() {
                warn!(error = %e, "updating the burstable QoS cgroup");
            }
        }
        left
    }
}

/// Builds the manager from the host: the cgroup mode from the mount table, capacity from
/// /proc (cpu, memory, pid), or None with cgroupsPerQOS off. Blocking.
pub fn from_host(cfg: &Config) -> Result<Option<ContainerManager>, CgroupError> {
    if !cfg.cgroups_per_qos {
        return Ok(None);
    }
    let cgroups = crate::cgroups::detect()?;
    let host = crate::node::machine::read_host(&cfg.root_dir);
    let mut capacity = crate::node::resources::capacity(&host.machine, cfg.max_pods);
    if let Some(pids) = host.readings.max_pid {
        capacity.insert("pid".into(), pids);
    }
    let cm = ContainerManager::new(cgroups, cfg, &capacity);
    let version = cm.cgroups.version().as_str();
    // Each limit a field of its own: the log carries values, not Debug forms.
    info!(
        version,
        driver = %cm.layout.driver,
        kubepods = %cm.path(&cm.layout.kubepods()),
        cpu_shares = cm.kubepods.cpu_shares,
        memory_bytes = cm.kubepods.memory,
        pids = cm.kubepods.pids,
        "container manager: pod cgroups per QoS class"
    );
    Ok(Some(cm))
}

#[cfg(test)]
mod tests;
