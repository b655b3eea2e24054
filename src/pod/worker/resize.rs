//! In-place pod resize in the pass (upstream's handlePodResourcesResize, computePodResizeAction
//! and doPodResizeAction): the pod the pass works on is the pod as allocated (`allocate`);
//! a resize the API asks for is allocated when it fits, else left pending with upstream's
//! reason; what was allocated is then applied to the running containers without a restart
//! (`actuate`), one resource at a time, memory then cpu: the pod cgroup's value raised
//! before its containers' and lowered after them, the containers that shrink before those
//! that grow. A container whose resizePolicy says RestartContainer for a resource that
//! changed is restarted with its new resources instead (`needs_restart`, in the pass's
//! restart path). What each container's cgroup has is kept on its record
//! (`labels::RESOURCES`), so the status's actual resources and an unfinished resize
//! survive an agent restart.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use tracing::{info, warn};

use super::{blocking, Worker};
use crate::cgroups::{CgroupError, ResourceConfig};
use crate::pod::allocation::{self, Pending, REASON_DEFERRED};
use crate::runtime::containers::ContainerRecord;
use crate::runtime::labels::{self, Kind};
use crate::runtime::RuntimeError;
use crate::vocabulary::quantity::Quantity;

/// Upstream's pod condition types and the in-progress condition's reason for a failure.
pub(crate) const RESIZE_PENDING: &str = "PodResizePending";
pub(crate) const RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
const REASON_ERROR: &str = "Error";

#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    /// A memory limit below what the pod or a container uses now is not set at all (the
    /// kernel would reclaim, then OOM-kill): upstream checks every lowered limit before
    /// it changes anything, and says so in these words.
    #[error("cannot decrease memory limits: {}", aggregate(.0))]
    MemoryBelowUsage(Vec<BelowUsage>),
    #[error("pod cgroup: {0}")]
    Cgroup(#[from] CgroupError),
    #[error("updating container {container}: {source}")]
    Update {
        container: String,
        #[source]
        source: RuntimeError,
    },
}

/// One lowered memory limit that is under the current usage (upstream's words).
#[derive(Debug, thiserror::Error)]
pub enum BelowUsage {
    #[error("attempting to set pod memory limit ({limit}) below current usage ({usage})")]
    Pod { limit: i64, usage: i64 },
    #[error(
        "attempting to set container {container:?} memory limit ({limit}) below current usage ({usage})"
    )]
    Container {
        container: String,
        limit: i64,
        usage: i64,
    },
}

/// Several errors as upstream's aggregate prints them: one alone, more in brackets.
fn aggregate(errors: &[BelowUsage]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The label value of a container's resources: its cpu and memory requests and limits.
pub(crate) fn resources_label(c: &Container) -> String {
    let r = cpu_memory(&c.resources.clone().unwrap_or_default());
    serde_json::to_string(&r).unwrap_or_default()
}

/// Only cpu and memory: the resources a cgroup holds and a resize changes.
fn cpu_memory(r: &ResourceRequirements) -> ResourceRequirements {
    let keep = |m: &Option<BTreeMap<String, ApiQuantity>>| {
        let m: BTreeMap<String, ApiQuantity> = m
            .iter()
            .flatten()
            .filter(|(k, _)| *k == "cpu" || *k == "memory")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        requests: keep(&r.requests),
        limits: keep(&r.limits),
        ..Default::default()
    }
}

/// What the container's cgroup was last given, from its record; `None` for a record made
/// before the label existed (taken as what was allocated: nothing to do).
pub(crate) fn actual(r: &ContainerRecord) -> Option<ResourceRequirements> {
    serde_json::from_str(r.labels.get(labels::RESOURCES)?).ok()
}

fn get(m: &Option<BTreeMap<String, ApiQuantity>>, name: &str) -> Option<Quantity> {
    m.as_ref()?
        .get(name)
        .and_then(|q| Quantity::from_api(q).ok())
}

/// The numbers a cgroup is set from: cpu in millicores, memory in bytes (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Values {
    cpu_request: i64,
    cpu_limit: i64,
    memory_request: i64,
    memory_limit: i64,
}

fn values(r: &ResourceRequirements) -> Values {
    Values {
        cpu_request: get(&r.requests, "cpu").map_or(0, |q| q.milli_value()),
        cpu_limit: get(&r.limits, "cpu").map_or(0, |q| q.milli_value()),
        memory_request: get(&r.requests, "memory").map_or(0, |q| q.value()),
        memory_limit: get(&r.limits, "memory").map_or(0, |q| q.value()),
    }
}

/// `to` with `name`'s request and limit taken from `from`.
fn with_resource(
    to: &ResourceRequirements,
    from: &ResourceRequirements,
    name: &str,
) -> ResourceRequirements {
    let set = |to: &Option<BTreeMap<String, ApiQuantity>>,
               from: &Option<BTreeMap<String, ApiQuantity>>| {
        let mut m = to.clone().unwrap_or_default();
        match from.as_ref().and_then(|f| f.get(name)) {
            Some(q) => m.insert(name.to_string(), q.clone()),
            None => m.remove(name),
        };
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        requests: set(&to.requests, &from.requests),
        limits: set(&to.limits, &from.limits),
        ..Default::default()
    }
}

fn restart_policy<'a>(c: &'a Container, resource: &str) -> &'a str {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .map_or("NotRequired", |p| p.restart_policy.as_str())
}

/// The running container `r` of `c` must be restarted to get its allocated resources: a
/// request or limit changed whose resource's resizePolicy is RestartContainer (upstream's
/// computePodResizeAction: a memory request alone restarts too, though no cgroup holds it).
pub(super) fn needs_restart(c: &Container, r: &ContainerRecord) -> bool {
    let Some(actual) = actual(r).filter(|_| r.is_running()) else {
        return false;
    };
    let (have, want) = (
        values(&actual),
        values(&c.resources.clone().unwrap_or_default()),
    );
    let cpu = have.cpu_limit != want.cpu_limit || have.cpu_request != want.cpu_request;
    let memory =
        have.memory_limit != want.memory_limit || have.memory_request != want.memory_request;
    (cpu && restart_policy(c, "cpu") == "RestartContainer")
        || (memory && restart_policy(c, "memory") == "RestartContainer")
}

/// A limit as a number to compare: none is the largest.
fn limit(v: Option<i64>) -> i64 {
    v.filter(|v| *v > 0).unwrap_or(i64::MAX)
}

/// One running container to resize in place.
struct Update {
    id: String,
    name: String,
    actual: ResourceRequirements,
    want: ResourceRequirements,
}

impl Worker {
    /// The pod as allocated, after deciding on any resize its spec asks for. A pod seen for
    /// the first time is allocated as it is (it was admitted so).
    pub(super) async fn allocate(&mut self, pod: &Pod) -> Pod {
        let store = self.shared.allocations.clone();
        let uid = self.pod_ref.uid.clone();
        let Some(allocated) = store.allocated_pod(pod) else {
            let (s, p) = (store.clone(), pod.clone());
            if let Err(e) = blocking(move || s.set(&p)).await {
                warn!(pod = %self.pod_ref.display(), error = %e, "cannot checkpoint the pod's allocated resources");
            }
            return pod.clone();
        };
        let unchanged = allocation::resizable(pod).all(|c| {
            store.container(&uid, &c.name).is_none_or(|a| {
                allocation::same_resources(&a, &c.resources.clone().unwrap_or_default())
            })
        });
        if unchanged {
            self.resize_pending = None;
            store.undefer(&uid);
            return allocated;
        }
        let decision = allocation::decide(
            pod,
            crate::vocabulary::pod_source::is_static_pod(pod),
            self.pod_allocatable(),
            store.others_requests(&uid),
        );
        match decision {
            Ok(()) => {
                let (s, p) = (store.clone(), pod.clone());
                match blocking(move || s.set(&p)).await {
                    Ok(()) => {
                        info!(pod = %self.pod_ref.display(), "pod resize allocated");
                        store.undefer(&uid);
                        self.resize_pending = None;
                        // A new resize starts afresh (upstream clears the last error).
                        self.resize_error = None;
                        pod.clone()
                    }
                    Err(e) => {
                        warn!(pod = %self.pod_ref.display(), error = %e, "cannot checkpoint the resize; it stays pending");
                        allocated
                    }
                }
            }
            Err(pending) => {
                if self.resize_pending.as_ref() != Some(&pending) {
                    info!(pod = %self.pod_ref.display(), reason = pending.reason, message = %pending.message, "pod resize pending");
                }
                if pending.reason == REASON_DEFERRED {
                    store.defer(&uid, self.wake.clone());
                } else {
                    store.undefer(&uid);
                }
                self.resize_pending = Some(pending);
                allocated
            }
        }
    }

    /// What the node gives pods, as upstream's resize admission reads it
    /// (GetNodeAllocatableAbsolute): capacity less kubeReserved and systemReserved.
    fn pod_allocatable(&self) -> crate::cm::pod::Totals {
        let capacity = BTreeMap::from([
            ("cpu".to_string(), self.shared.cpu_capacity_millis),
            ("memory".to_string(), self.shared.memory_capacity),
        ]);
        let a = crate::node::resources::enforced_allocatable(
            &capacity,
            &self.shared.cfg.kube_reserved,
            &self.shared.cfg.system_reserved,
        );
        crate::cm::pod::Totals {
            cpu_millis: a.get("cpu").copied().unwrap_or(0),
            memory: a.get("memory").copied().unwrap_or(0),
        }
    }

    /// The resize still waits for room: look again within upstream's retry period.
    pub(super) fn deferred(&self) -> bool {
        self.resize_pending
            .as_ref()
            .is_some_and(|p| p.reason == REASON_DEFERRED)
    }

    /// Applies the allocated resources to the running containers that do not have them
    /// and to the pod cgroup, in upstream's order. A failure stops the resize where it is;
    /// the next pass goes on from there (every step checks what is already done).
    pub(super) async fn actuate_resize(&mut self, pod: &Pod) -> Result<(), ResizeError> {
        let mut updates = Vec::new();
        for c in allocation::resizable(pod) {
            let kind = if pod
                .spec
                .iter()
                .any(|s| s.containers.iter().any(|a| a.name == c.name))
            {
                Kind::App
            } else {
                Kind::Init
            };
            let Some(r) = self
                .records()
                .iter()
                .rev()
                .find(|r| r.kind == kind && r.name == c.name && r.is_running())
            else {
                continue;
            };
            let Some(have) = actual(r) else { continue };
            let want = cpu_memory(&c.resources.clone().unwrap_or_default());
            if allocation::same_resources(&have, &want) || needs_restart(c, r) {
                continue;
            }
            updates.push(Update {
                id: r.id.clone(),
                name: c.name.clone(),
                actual: have,
                want,
            });
        }
        let cm = self.shared.cm.clone();
        let pod_values = cm.as_ref().and_then(|cm| cm.pod_values(pod));
        let pod_differs = pod_values
            .as_ref()
            .is_some_and(|(now, target)| now != target);
        if updates.is_empty() && !pod_differs {
            return Ok(());
        }
        info!(pod = %self.pod_ref.display(), containers = updates.len(), "resizing pod in place");
        let (now, target) = pod_values.unwrap_or_default();
        self.check_memory_usage(pod, &updates, now.memory, target.memory)
            .await?;

        // Memory first.
        let memory_moves = updates
            .iter()
            .any(|u| values(&u.actual).memory_limit != values(&u.want).memory_limit);
        if memory_moves || now.memory != target.memory {
            let part = ResourceConfig {
                memory: Some(target.memory.unwrap_or(-1)),
                ..ResourceConfig::default()
            };
            let grows = limit(target.memory) > limit(now.memory);
            if grows {
                self.resize_pod_cgroup(pod, part.clone()).await?;
            }
            self.update_containers(&mut updates, "memory", |v| v.memory_limit)
                .await?;
            if !grows && now.memory != target.memory {
                self.resize_pod_cgroup(pod, part).await?;
            }
        }

        // Then cpu: the quota (limits) and the shares (requests) each in their order.
        let quota = ResourceConfig {
            cpu_quota: target.cpu_quota,
            cpu_period: target.cpu_period,
            ..ResourceConfig::default()
        };
        let shares = ResourceConfig {
            cpu_shares: target.cpu_shares,
            ..ResourceConfig::default()
        };
        let quota_grows = limit(target.cpu_quota) > limit(now.cpu_quota);
        let shares_grow = target.cpu_shares.unwrap_or(0) > now.cpu_shares.unwrap_or(0);
        if quota_grows {
            self.resize_pod_cgroup(pod, quota.clone()).await?;
        }
        if shares_grow {
            self.resize_pod_cgroup(pod, shares.clone()).await?;
        }
        self.update_containers(&mut updates, "cpu", |v| {
            // Limits order the cpu updates; a request alone orders by itself.
            if v.cpu_limit > 0 {
                v.cpu_limit
            } else {
                v.cpu_request
            }
        })
        .await?;
        if !quota_grows && now.cpu_quota != target.cpu_quota {
            self.resize_pod_cgroup(pod, quota).await?;
        }
        if !shares_grow && now.cpu_shares != target.cpu_shares {
            self.resize_pod_cgroup(pod, shares).await?;
        }

        // A memory request is held by no cgroup: only the record learns it.
        for u in &updates {
            if !allocation::same_resources(&u.actual, &u.want) {
                let set = std::collections::HashMap::from([(
                    labels::RESOURCES.to_string(),
                    serde_json::to_string(&u.want).unwrap_or_default(),
                )]);
                self.shared
                    .rt
                    .set_labels(&u.id, set.clone())
                    .await
                    .map_err(|source| ResizeError::Update {
                        container: u.name.clone(),
                        source,
                    })?;
                self.note_labels(&u.id, set);
            }
        }
        info!(pod = %self.pod_ref.display(), "pod resized in place");
        Ok(())
    }

    async fn resize_pod_cgroup(&self, pod: &Pod, part: ResourceConfig) -> Result<(), ResizeError> {
        let Some(cm) = self.shared.cm.clone() else {
            return Ok(());
        };
        let p = pod.clone();
        blocking(move || cm.resize_pod(&p, &part)).await?;
        Ok(())
    }

    /// Updates `resource` of every container whose value of it (`key`) changes: those that
    /// shrink first, then those that grow (upstream's order), each keeping its other
    /// resource as it is now.
    async fn update_containers(
        &mut self,
        updates: &mut [Update],
        resource: &str,
        key: impl Fn(&Values) -> i64,
    ) -> Result<(), ResizeError> {
        let mut order: Vec<usize> = (0..updates.len())
            .filter(|&i| {
                let (a, w) = (values(&updates[i].actual), values(&updates[i].want));
                match resource {
                    "memory" => a.memory_limit != w.memory_limit,
                    _ => a.cpu_limit != w.cpu_limit || a.cpu_request != w.cpu_request,
                }
            })
            .collect();
        order.sort_by_key(|&i| {
            let (a, w) = (values(&updates[i].actual), values(&updates[i].want));
            key(&w) > key(&a)
        });
        for i in order {
            let u = &mut updates[i];
            let next = with_resource(&u.actual, &u.want, resource);
            let container = Container {
                name: u.name.clone(),
                resources: Some(next.clone()),
                ..Container::default()
            };
            // The same swap rule as at creation: on cgroup v1 memory+swap follows the memory
            // limit, or raising the limit past the old memory+swap cap is refused.
            let swap = self
                .shared
                .cm
                .as_ref()
                .map(|cm| cm.container_swap())
                .unwrap_or_default();
            let mut res = crate::pod::spec::container_resources(&container, false, swap).map_err(
                |source| ResizeError::Update {
                    container: u.name.clone(),
                    source,
                },
            )?;
            // Devices are not the resize's: the container keeps the ones it was made with.
            res.set_devices(None);
            let label = std::collections::HashMap::from([(
                labels::RESOURCES.to_string(),
                serde_json::to_string(&next).unwrap_or_default(),
            )]);
            info!(pod = %self.pod_ref.display(), container = %u.name, container_id = %u.id, resource, "updating container resources");
            self.shared
                .rt
                .update_resources(&u.id, &res, label.clone())
                .await
                .map_err(|source| ResizeError::Update {
                    container: u.name.clone(),
                    source,
                })?;
            self.note_labels(&u.id, label);
            u.actual = next;
        }
        Ok(())
    }

    /// Every memory limit the resize lowers (the pod's, its containers') is above what
    /// it holds now, checked before anything changes so a refused resize leaves nothing
    /// half done (upstream's validateMemoryResizeAction).
    async fn check_memory_usage(
        &self,
        pod: &Pod,
        updates: &[Update],
        now: Option<i64>,
        target: Option<i64>,
    ) -> Result<(), ResizeError> {
        let Some(cm) = self.shared.cm.clone() else {
            return Ok(());
        };
        let mut errors = Vec::new();
        if let Some(new) = target.filter(|m| *m > 0 && limit(now) > *m) {
            let (cm, p) = (cm.clone(), pod.clone());
            let usage = blocking(move || cm.pod_memory_usage(&p)).await?;
            if usage >= new {
                errors.push(BelowUsage::Pod { limit: new, usage });
            }
        }
        for u in updates {
            let (old, new) = (values(&u.actual).memory_limit, values(&u.want).memory_limit);
            if new <= 0 || limit(Some(old)) <= new {
                continue;
            }
            let Some(parent) = self
                .records()
                .iter()
                .find(|r| r.id == u.id)
                .and_then(|r| r.labels.get(labels::CGROUP_PARENT).cloned())
            else {
                continue;
            };
            let (cm, cgroup) = (cm.clone(), format!("{parent}/{}", u.id));
            // A container cgroup the agent cannot read (runc's systemd naming) is not
            // checked: the pod's limit, checked above, still holds the line.
            if let Ok(usage) = blocking(move || cm.memory_usage(&cgroup)).await {
                if usage >= new {
                    errors.push(BelowUsage::Container {
                        container: u.name.clone(),
                        limit: new,
                        usage,
                    });
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ResizeError::MemoryBelowUsage(errors))
        }
    }

    /// Keeps the pass's view current with labels the resize wrote.
    fn note_labels(&mut self, id: &str, set: std::collections::HashMap<String, String>) {
        if let Some(r) = self
            .view
            .as_mut()
            .and_then(|v| v.iter_mut().find(|r| r.id == id))
        {
            r.labels.extend(set);
        }
    }

    /// The resize's part of the pod's status: each resizable container's allocated
    /// resources (requests) and actual ones (its record's, else the allocated), and the
    /// PodResizePending and PodResizeInProgress conditions, with upstream's reasons.
    pub(super) fn resize_status(
        &self,
        pod: &Pod,
        records: &[ContainerRecord],
        status: &mut PodStatus,
    ) {
        let store = &self.shared.allocations;
        let uid = &self.pod_ref.uid;
        let mut in_progress = false;
        let sidecars: Vec<&Container> = allocation::resizable(pod).collect();
        for (statuses, kind) in [
            (status.container_statuses.as_mut(), Kind::App),
            (status.init_container_statuses.as_mut(), Kind::Init),
        ] {
            for cs in statuses.into_iter().flatten() {
                let Some(c) = sidecars.iter().find(|c| c.name == cs.name) else {
                    continue;
                };
                let allocated = store
                    .container(uid, &c.name)
                    .unwrap_or_else(|| c.resources.clone().unwrap_or_default());
                cs.allocated_resources = allocated.requests.clone().filter(|r| !r.is_empty());
                let running = records
                    .iter()
                    .rev()
                    .find(|r| r.kind == kind && r.name == c.name && r.is_running());
                let mut shown = allocated.clone();
                if let Some(have) = running.and_then(actual) {
                    if !allocation::same_resources(&have, &cpu_memory(&allocated)) {
                        in_progress = true;
                    }
                    for name in ["cpu", "memory"] {
                        shown = with_resource(&shown, &have, name);
                    }
                }
                cs.resources = Some(shown);
            }
        }
        let now = crate::pod::status::ktime(chrono::Utc::now());
        let previous = |kind: &str| {
            self.last_status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == kind))
                .and_then(|c| c.last_transition_time.clone())
        };
        let condition = |kind: &str, reason: Option<&str>, message: Option<String>| PodCondition {
            type_: kind.to_string(),
            status: "True".into(),
            reason: reason.map(str::to_string),
            message,
            last_probe_time: None,
            last_transition_time: Some(previous(kind).unwrap_or_else(|| now.clone())),
            observed_generation: pod.metadata.generation,
        };
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != RESIZE_PENDING && c.type_ != RESIZE_IN_PROGRESS);
        if let Some(Pending { reason, message }) = &self.resize_pending {
            conditions.push(condition(
                RESIZE_PENDING,
                Some(reason),
                Some(message.clone()),
            ));
        }
        if let Some(error) = &self.resize_error {
            conditions.push(condition(
                RESIZE_IN_PROGRESS,
                Some(REASON_ERROR),
                Some(error.clone()),
            ));
        } else if in_progress {
            conditions.push(condition(RESIZE_IN_PROGRESS, None, None));
        }
    }
}
