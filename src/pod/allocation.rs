//! In-place pod resize's bookkeeping (upstream's pkg/kubelet/allocation): the resources the
//! agent allocated to each pod's resizable containers (app containers and sidecars), kept
//! in a checkpoint under the root dir so an agent restart neither forgets an accepted
//! resize nor takes one it had left pending; and the decision on a resize the API asks for
//! (`decide`): allocated at once when it fits, `Infeasible` when it can never fit this
//! node, `Deferred` when it does not fit beside the other pods now (tried again when a pod
//! leaves or lowers its requests, and every 3 minutes, as upstream).
//!
//! What a container actually has (its cgroup) is not kept here but on its container
//! record (`labels::RESOURCES`), written with each change: containerd is where the agent
//! rebuilds its state from.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tracing::warn;

use crate::cm::pod::{pod_requests, Totals};
use crate::pod::sidecar::is_sidecar;
use crate::vocabulary::quantity::Quantity;

/// The checkpoint's name under the root dir (upstream's allocated_pods_state).
pub const CHECKPOINT_FILE: &str = "allocated_pods_state";
/// How often a deferred resize is tried again with nothing else to wake it (upstream's
/// retryPeriod).
pub const DEFERRED_RETRY: Duration = Duration::from_secs(180);

/// Upstream's pod condition reasons for a resize it cannot take now or ever.
pub const REASON_INFEASIBLE: &str = "Infeasible";
pub const REASON_DEFERRED: &str = "Deferred";

#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error("reading the allocation checkpoint {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the allocation checkpoint {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing the allocation checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Each pod's containers' allocated resources, by pod UID then container name.
type PodAllocations = BTreeMap<String, BTreeMap<String, ResourceRequirements>>;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    pods: PodAllocations,
}

/// The allocations of every pod on the node. Methods that change them write the
/// checkpoint: call them off the async runtime.
#[derive(Debug)]
pub struct Allocations {
    path: PathBuf,
    pods: Mutex<PodAllocations>,
    /// Workers of pods whose resize waits for room (Deferred): woken when room may appear.
    deferred: Mutex<HashMap<String, Arc<Notify>>>,
}

/// Whether a pod's container is one a resize applies to (upstream's isResizableContainer):
/// app containers and sidecars; regular init and ephemeral containers keep what they had.
pub(crate) fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten().filter(|c| is_sidecar(c)))
    })
}

fn quantities_equal(
    a: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    b: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let same = keys.into_iter().all(|k| match (a.get(k), b.get(k)) {
        (Some(x), Some(y)) => match (Quantity::from_api(x), Quantity::from_api(y)) {
            (Ok(x), Ok(y)) => x == y,
            _ => x == y,
        },
        _ => false,
    });
    same
}

/// Upstream's semantic equality of two containers' resources: "1" and "1000m" are equal.
pub(crate) fn same_resources(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    quantities_equal(a.requests.as_ref(), b.requests.as_ref())
        && quantities_equal(a.limits.as_ref(), b.limits.as_ref())
}

fn allocation_of(pod: &Pod) -> BTreeMap<String, ResourceRequirements> {
    resizable(pod)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

impl Allocations {
    /// The allocations the checkpoint under `root_dir` holds. A missing checkpoint is an
    /// empty one; an unreadable or corrupt one is reported and the pods are allocated
    /// again from their specs, as upstream starts afresh. Blocking.
    pub fn load(root_dir: &Path) -> Allocations {
        let path = root_dir.join(CHECKPOINT_FILE);
        let pods = match read_checkpoint(&path) {
            Ok(c) => c.pods,
            Err(e) => {
                warn!(error = %e, "allocated resources start empty");
                PodAllocations::new()
            }
        };
        Allocations {
            path,
            pods: Mutex::new(pods),
            deferred: Mutex::new(HashMap::new()),
        }
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, PodAllocations> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pod as allocated (upstream's UpdatePodFromAllocation): its resizable containers'
    /// resources replaced by what was allocated to them. `None` when the pod has no
    /// allocation yet.
    pub fn allocated_pod(&self, pod: &Pod) -> Option<Pod> {
        let uid = pod.metadata.uid.as_deref()?;
        let pods = self.pods();
        let allocated = pods.get(uid)?;
        let mut out = pod.clone();
        if let Some(spec) = out.spec.as_mut() {
            let all = spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten());
            for c in all {
                if let Some(r) = allocated.get(&c.name) {
                    c.resources = Some(r.clone());
                }
            }
        }
        Some(out)
    }

    /// What was allocated to one container.
    pub fn container(&self, uid: &str, name: &str) -> Option<ResourceRequirements> {
        self.pods().get(uid)?.get(name).cloned()
    }

    /// Allocates the pod's spec as it is and writes the checkpoint; on a failed write the
    /// previous allocation stays. Wakes the deferred resizes when the pod's requests went
    /// down (room may have appeared). Blocking.
    pub fn set(&self, pod: &Pod) -> Result<(), AllocationError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let before = self.allocated_pod(pod).map(|p| pod_requests(&p));
        let mut pods = self.pods();
        let previous = pods.insert(uid.clone(), allocation_of(pod));
        if let Err(e) = write_checkpoint(&self.path, &pods) {
            match previous {
                Some(p) => pods.insert(uid, p),
                None => pods.remove(&uid),
            };
            return Err(e);
        }
        drop(pods);
        let after = pod_requests(pod);
        if before.is_some_and(|b| after.cpu_millis < b.cpu_millis || after.memory < b.memory) {
            self.wake_deferred();
        }
        Ok(())
    }

    /// Forgets a pod that left the node, and wakes the deferred resizes. Blocking.
    pub fn remove(&self, uid: &str) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        let mut pods = self.pods();
        if pods.remove(uid).is_none() {
            return;
        }
        if let Err(e) = write_checkpoint(&self.path, &pods) {
            // The entry comes back as an orphan at most; a pod with the same UID never does.
            warn!(pod_uid = %uid, error = %e, "the removed pod's allocation stays in the checkpoint");
        }
        drop(pods);
        self.wake_deferred();
    }

    /// The requests allocated to every pod but `uid` (the room a resize competes for):
    /// their app containers' and sidecars' requests, as the API defaults them.
    pub(crate) fn others_requests(&self, uid: &str) -> Totals {
        let pods = self.pods();
        let mut total = Totals::default();
        for (_, containers) in pods.iter().filter(|(u, _)| u.as_str() != uid) {
            let pod = Pod {
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    containers: containers
                        .iter()
                        .map(|(name, r)| Container {
                            name: name.clone(),
                            resources: Some(r.clone()),
                            ..Container::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
                ..Pod::default()
            };
            let r = pod_requests(&pod);
            total.cpu_millis = total.cpu_millis.saturating_add(r.cpu_millis);
            total.memory = total.memory.saturating_add(r.memory);
        }
        total
    }

    /// The pod's resize waits for room: `wake` is notified when room may appear.
    pub fn defer(&self, uid: &str, wake: Arc<Notify>) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string(), wake);
    }

    /// The pod's resize no longer waits for room.
    pub fn undefer(&self, uid: &str) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    fn wake_deferred(&self) {
        for wake in self
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            wake.notify_one();
        }
    }
}

fn read_checkpoint(path: &Path) -> Result<Checkpoint, AllocationError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Checkpoint::default()),
        Err(source) => {
            return Err(AllocationError::Read {
                path: path.into(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes).map_err(|source| AllocationError::Parse {
        path: path.into(),
        source,
    })
}

/// Written to a temporary file and renamed over the checkpoint, so a crash leaves the old
/// or the new one, never half of either.
fn write_checkpoint(path: &Path, pods: &PodAllocations) -> Result<(), AllocationError> {
    let err = |source| AllocationError::Write {
        path: path.into(),
        source,
    };
    let body = serde_json::to_vec(&Checkpoint { pods: pods.clone() })
        .map_err(|e| err(io::Error::other(e)))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// A resize the agent cannot take now: upstream's PodResizePending reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub reason: &'static str,
    pub message: String,
}

/// Whether the resize to `desired` can be allocated (upstream's handlePodResourcesResize
/// and canResizePod): never for a static pod; `Infeasible` when the pod's requests exceed
/// what the node gives pods at all (`allocatable`, memory checked first as upstream);
/// `Deferred` when they do not fit beside `others` (cpu first, as the resource fit
/// predicate checks), in the predicate's words.
pub(crate) fn decide(
    desired: &Pod,
    is_static: bool,
    allocatable: Totals,
    others: Totals,
) -> Result<(), Pending> {
    if is_static {
        return Err(Pending {
            reason: REASON_INFEASIBLE,
            message: "In-place resize of static-pods is not supported".into(),
        });
    }
    let requests = pod_requests(desired);
    if requests.memory > allocatable.memory || requests.cpu_millis > allocatable.cpu_millis {
        let what = if requests.memory > allocatable.memory {
            format!(
                "memory, requested: {}, capacity: {}",
                requests.memory, allocatable.memory
            )
        } else {
            format!(
                "cpu, requested: {}, capacity: {}",
                requests.cpu_millis, allocatable.cpu_millis
            )
        };
        return Err(Pending {
            reason: REASON_INFEASIBLE,
            message: format!("Node didn't have enough capacity: {what}"),
        });
    }
    for (name, requested, used, capacity) in [
        (
            "cpu",
            requests.cpu_millis,
            others.cpu_millis,
            allocatable.cpu_millis,
        ),
        ("memory", requests.memory, others.memory, allocatable.memory),
    ] {
        if requested > 0 && requested.saturating_add(used) > capacity {
            return Err(Pending {
                reason: REASON_DEFERRED,
                message: format!(
                    "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, cpu: &str, memory: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": memory},
                              "limits": {"cpu": cpu, "memory": memory}}}]}
        }))
        .unwrap()
    }

    const NODE: Totals = Totals {
        cpu_millis: 2000,
        memory: 4 << 30,
    };

    #[test]
    fn a_resize_is_infeasible_beyond_the_node_and_deferred_beside_other_pods() {
        assert_eq!(
            decide(&pod("a", "1", "1Gi"), false, NODE, Totals::default()),
            Ok(())
        );
        assert_eq!(
            decide(&pod("a", "3", "8Gi"), false, NODE, Totals::default()),
            Err(Pending {
                reason: REASON_INFEASIBLE,
                message: format!(
                    "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                    8i64 << 30,
                    4i64 << 30
                ),
            })
        );
        assert_eq!(
            decide(&pod("a", "3", "1Gi"), false, NODE, Totals::default())
                .unwrap_err()
                .message,
            "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
        );
        let others = Totals {
            cpu_millis: 1500,
            memory: 1 << 30,
        };
        assert_eq!(
            decide(&pod("a", "1", "1Gi"), false, NODE, others),
            Err(Pending {
                reason: REASON_DEFERRED,
                message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000".into(),
            })
        );
        assert_eq!(
            decide(&pod("a", "1", "1Gi"), true, NODE, Totals::default()),
            Err(Pending {
                reason: REASON_INFEASIBLE,
                message: "In-place resize of static-pods is not supported".into(),
            })
        );
    }

    #[test]
    fn allocations_survive_a_reload_and_replace_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let a = Allocations::load(dir.path());
        assert!(a.allocated_pod(&pod("u1", "500m", "128Mi")).is_none());
        a.set(&pod("u1", "500m", "128Mi")).unwrap();
        a.set(&pod("u2", "1", "1Gi")).unwrap();
        let again = Allocations::load(dir.path());
        let got = again.allocated_pod(&pod("u1", "1", "256Mi")).unwrap();
        let r = got.spec.unwrap().containers[0].resources.clone().unwrap();
        assert_eq!(r.requests.unwrap()["cpu"].0, "500m");
        assert_eq!(
            again.others_requests("u1"),
            Totals {
                cpu_millis: 1000,
                memory: 1 << 30
            }
        );
        again.remove("u2");
        assert_eq!(
            Allocations::load(dir.path()).others_requests("u1"),
            Totals::default()
        );
    }

    #[test]
    fn equal_quantities_in_other_spellings_are_the_same_resources() {
        let r = |cpu: &str| ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
            )])),
            ..Default::default()
        };
        assert!(same_resources(&r("1"), &r("1000m")));
        assert!(!same_resources(&r("1"), &r("999m")));
        assert!(!same_resources(&r("1"), &ResourceRequirements::default()));
    }
}
