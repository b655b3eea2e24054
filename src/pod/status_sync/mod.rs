//! Pod statuses to the API server (cluster mode), as upstream's status manager syncs them
//! (pkg/kubelet/status/status_manager.go).
//!
//! One task subscribes to the [`StatusManager`] and patches `pods/<name>/status` for each pod
//! whose status differs from the API's copy (the [`ApiPods`] view the pod watch keeps), in
//! version order, latest wins. Nothing is written before the view has its first full list,
//! so a restarted agent compares with what the API already holds instead of rewriting it.
//! A static pod's status goes to its mirror pod (same name, the mirror's UID). A failed
//! patch is retried with a back-off, and every [`SYNC_PERIOD`] every pod is compared with
//! the API again, which repairs anything missed. A pod the API no longer has (404) or has
//! under another UID (the UID precondition fails) is dropped, not retried. When a static
//! pod's mirror is recreated, its status goes to the new mirror as soon as the watch shows it.
//!
//! When a pod the API shows with a `deletionTimestamp` leaves the status manager (its worker
//! stopped everything), its final status (terminal phase, every container terminated) is
//! patched and then the pod is deleted with grace period 0 and its UID as a precondition,
//! which removes it from the API (upstream's canBeDeleted path).

mod compare;
mod patch;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::api_calls::{delete_now, error_chain, full_name, pods_api};
use super::mirror;
use super::status_manager::{StatusChange, StatusManager, StatusSubscription};
use crate::source::apiserver::{ApiPods, ApiPodsView};

pub use super::api_calls::SYNC_PERIOD;
/// The first wait after a failed call; it doubles per failure up to [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between retries: half the sync period, so statuses that changed while
/// the apiserver was away reach it within a few seconds of its return, not up to a whole
/// period later.
const RETRY_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StatusSyncError {
    #[error("failed to update status for pod {pod}")]
    Patch {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to delete pod {pod} after its termination")]
    Delete {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

impl StatusSyncError {
    fn pod_is_gone(&self) -> bool {
        let (StatusSyncError::Patch { source, .. } | StatusSyncError::Delete { source, .. }) = self;
        api_object_is_gone(source)
    }
}

/// The API has no such pod (404), or has one of that name under another UID: a delete's UID
/// precondition fails with 409, and a status patch whose `metadata.uid` differs is refused
/// as 422 Invalid on `metadata.uid` ("field is immutable", as kube-apiserver 1.34 answers).
pub(crate) fn api_object_is_gone(err: &kube::Error) -> bool {
    let kube::Error::Api(s) = err else {
        return false;
    };
    match s.code {
        404 | 409 => true,
        422 => s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        _ => false,
    }
}

/// A pod as the sync knows it, by the UID its source gave it.
struct Entry {
    /// The pod with its status as last handed to the status manager.
    pod: Arc<Pod>,
    version: u64,
    /// The version the API is known to hold: patched, or found equal.
    synced: u64,
    /// Its worker finished and the manager dropped it.
    removed: bool,
    /// Compare with the API's copy on the next pass even when synced (the periodic resync).
    recheck: bool,
    /// The API's answer to the last patch: newer than the view until the watch catches up,
    /// so the next patch is computed against what the API really holds.
    patched: Option<Arc<Pod>>,
    failures: u32,
    retry_at: Option<Instant>,
    /// The UID of an API object the API answered 404 or 409 for: gone (or replaced), so
    /// this status is not sent to it again; a new status or another object (a recreated
    /// mirror) is tried again.
    gone: Option<String>,
    /// The UID of the API object the status was last synced to; a static pod's mirror can
    /// be replaced by another.
    synced_to: Option<String>,
    /// When the first change not yet in the API came (kubelet_pod_status_sync_duration_seconds
    /// runs from there to the patch that carries it, however many changes came between).
    changed_at: Option<Instant>,
}

impl Entry {
    fn pending(&self) -> bool {
        self.version > self.synced || self.removed || self.recheck
    }
}

/// What one pass did for one pod.
enum Outcome {
    /// The API holds this status (patched now, with the API's answer, or found equal).
    Synced {
        patched: Option<Box<Pod>>,
        /// The UID of the API object that holds it.
        target: String,
    },
    /// The pod is finished with on the API side: deleted, gone, or removed here.
    Forget,
    /// The API has no object for the status yet (a mirror pod not created yet); the next
    /// change of the view tries again.
    Waiting,
    /// The API object with this UID is gone; this version is not sent to it again.
    Gone(String),
    Failed(StatusSyncError),
}

/// The status sync task; see the module documentation.
pub struct StatusSync {
    client: kube::Client,
    /// Taken at construction, so no removal before `run` starts is missed.
    changes: StatusSubscription,
    api: ApiPods,
    pods: HashMap<String, Entry>,
}

impl StatusSync {
    pub fn new(client: kube::Client, statuses: Arc<StatusManager>, api: ApiPods) -> Self {
        StatusSync {
            client,
            changes: statuses.subscribe(),
            api,
            pods: HashMap::new(),
        }
    }

    /// Runs until the status manager is gone.
    pub async fn run(mut self) {
        info!("Starting to sync pod status with apiserver");
        let mut resync = tokio::time::interval_at(Instant::now() + SYNC_PERIOD, SYNC_PERIOD);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut view_open = true;
        loop {
            self.pass().await;
            let retry = self.pods.values().filter_map(|e| e.retry_at).min();
            tokio::select! {
                c = self.changes.changes() => match c {
                    Some(c) => self.apply(c),
                    None => return,
                },
                r = self.api.changed(), if view_open => {
                    // Without a watch the last view stays; the resync still runs on it.
                    view_open = r.is_ok();
                    self.retarget();
                }
                _ = sleep_until(retry), if retry.is_some() => {}
                _ = resync.tick() => {
                    for e in self.pods.values_mut() {
                        e.recheck = true;
                        // By now the watch has caught up with our own patches.
                        e.patched = None;
                    }
                }
            }
        }
    }

    /// A static pod whose mirror was replaced (deleted and created again) syncs again: the new
    /// mirror starts without the status.
    fn retarget(&mut self) {
        let view = self.api.borrow().clone();
        for e in self.pods.values_mut() {
            if !mirror::is_static(&e.pod) {
                continue;
            }
            let now = mirror::current_mirror(&view, &e.pod).and_then(|m| m.metadata.uid.clone());
            if now.is_some() && now != e.synced_to {
                e.recheck = true;
            }
        }
    }

    fn apply(&mut self, changes: Vec<StatusChange>) {
        for change in changes {
            let (uid, pod, version, removed) = match change {
                StatusChange::Set(v) => match v.pod.metadata.uid.clone() {
                    Some(uid) => (uid, v.pod, v.version, false),
                    None => continue,
                },
                StatusChange::Removed { uid, version, last } => (uid, last, version, true),
            };
            let e = self.pods.entry(uid).or_insert_with(|| Entry {
                pod: pod.clone(),
                version,
                synced: 0,
                removed,
                recheck: false,
                patched: None,
                failures: 0,
                retry_at: None,
                gone: None,
                synced_to: None,
                changed_at: None,
            });
            if e.version != version {
                e.gone = None;
            }
            e.pod = pod;
            e.version = version;
            e.removed = removed;
            if e.version > e.synced && e.changed_at.is_none() {
                e.changed_at = Some(Instant::now());
            }
        }
    }

    /// Syncs every pending pod whose back-off has passed, oldest change first.
    async fn pass(&mut self) {
        let view = self.api.borrow().clone();
        if !view.synced {
            return;
        }
        let now = Instant::now();
        let mut due: Vec<(u64, String)> = self
            .pods
            .iter()
            .filter(|(_, e)| e.pending() && e.retry_at.is_none_or(|t| t <= now))
            .map(|(uid, e)| (e.version, uid.clone()))
            .collect();
        due.sort();
        for (_, uid) in due {
            let outcome = self.sync_one(&view, &uid).await;
            self.record(&uid, outcome);
        }
    }

    fn record(&mut self, uid: &str, outcome: Outcome) {
        let Some(e) = self.pods.get_mut(uid) else {
            return;
        };
        match outcome {
            Outcome::Synced { patched, target } => {
                if let (Some(_), Some(at)) = (&patched, e.changed_at) {
                    crate::metrics::pod_status_synced(at.elapsed());
                }
                e.changed_at = None;
                e.synced = e.version;
                e.synced_to = Some(target);
                e.recheck = false;
                e.failures = 0;
                e.retry_at = None;
                if let Some(p) = patched {
                    e.patched = Some(Arc::new(*p));
                }
                if e.removed {
                    // Its status is in the API and nothing else is to be done there.
                    self.pods.remove(uid);
                }
            }
            Outcome::Forget => {
                self.pods.remove(uid);
            }
            Outcome::Gone(_) if e.removed => {
                self.pods.remove(uid);
            }
            Outcome::Gone(target) => {
                e.synced = e.version;
                e.recheck = false;
                e.failures = 0;
                e.retry_at = None;
                e.patched = None;
                e.gone = Some(target);
            }
            Outcome::Waiting => e.recheck = false,
            Outcome::Failed(err) => {
                e.failures += 1;
                let wait = RETRY_INITIAL
                    .saturating_mul(1 << (e.failures - 1).min(16))
                    .min(RETRY_MAX);
                e.retry_at = Some(Instant::now() + wait);
                let p = &e.pod.metadata;
                warn!(
                    pod = %format!("{}/{}", p.namespace.as_deref().unwrap_or_default(), p.name.as_deref().unwrap_or_default()),
                    uid,
                    error = %err,
                    cause = %error_chain(&err),
                    retry_in = ?wait,
                    "pod status sync failed"
                );
            }
        }
    }

    async fn sync_one(&self, view: &ApiPodsView, uid: &str) -> Outcome {
        let Some(e) = self.pods.get(uid) else {
            return Outcome::Forget;
        };
        let pod = &e.pod;
        let is_static = mirror::is_static(pod);
        // Static pods are tracked in the API through their mirror pod.
        let target = if is_static {
            mirror::current_mirror(view, pod).cloned()
        } else {
            view.pods.get(uid).cloned()
        };
        let Some(target) = target else {
            if e.removed {
                return Outcome::Forget;
            }
            debug!(pod = %full_name(pod), uid, "pod has no object in the API yet; status waits");
            return Outcome::Waiting;
        };
        let target_uid = target.metadata.uid.clone().unwrap_or_default();
        if e.gone.as_deref() == Some(target_uid.as_str()) {
            // The watch still shows what the API said is gone.
            return if e.removed {
                Outcome::Forget
            } else {
                Outcome::Waiting
            };
        }
        let base = match &e.patched {
            Some(p) if p.metadata.uid == target.metadata.uid && newer(p, &target) => p.clone(),
            _ => target.clone(),
        };
        let deleting = e.removed && !is_static && target.metadata.deletion_timestamp.is_some();
        let mut ours = if deleting {
            compare::terminated(pod, false)
        } else {
            pod.status.clone().unwrap_or_default()
        };
        let api_status = base.status.clone().unwrap_or_default();
        // A pod's start time never moves once the API holds one (upstream's status manager
        // keeps the old status's): a restarted agent, or a static pod whose mirror is the
        // only record of when it started, would otherwise re-derive it a second off.
        if api_status.start_time.is_some() {
            ours.start_time = api_status.start_time.clone();
        }
        let spec = pod.spec.as_ref();
        let mut phase = api_status.phase.clone();
        let mut patched = None;
        if !compare::equal_by_kubelet(
            &compare::normalize(spec, &api_status),
            &compare::normalize(spec, &ours),
        ) {
            let merged = compare::merge(&api_status, &ours);
            if let Some(body) = patch::status_patch(&target_uid, &api_status, &merged) {
                match self.patch_status(&target, body).await {
                    Ok(p) => {
                        debug!(pod = %full_name(&target), uid, version = e.version, "status for pod updated");
                        phase = merged.phase.clone();
                        patched = Some(Box::new(p));
                    }
                    Err(err) if err.pod_is_gone() => {
                        info!(pod = %full_name(&target), uid, "pod does not exist on the server or was recreated; skipping its status");
                        return Outcome::Gone(target_uid);
                    }
                    Err(err) => return Outcome::Failed(err),
                }
            }
        }
        if deleting {
            // Upstream's canBeDeleted: the API must show a terminal phase first.
            if !compare::is_terminal(phase.as_deref()) {
                return Outcome::Waiting;
            }
            return match self.delete(&target).await {
                Ok(()) => {
                    info!(pod = %full_name(&target), uid, "pod fully terminated and removed from the API");
                    Outcome::Forget
                }
                Err(err) if err.pod_is_gone() => Outcome::Forget,
                Err(err) => Outcome::Failed(err),
            };
        }
        Outcome::Synced {
            patched,
            target: target_uid,
        }
    }

    async fn patch_status(
        &self,
        target: &Pod,
        body: serde_json::Value,
    ) -> Result<Pod, StatusSyncError> {
        let api = pods_api(&self.client, target);
        let name = target.metadata.name.as_deref().unwrap_or_default();
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
            .await
            .map_err(|source| StatusSyncError::Patch {
                pod: full_name(target),
                source,
            })
    }

    async fn delete(&self, target: &Pod) -> Result<(), StatusSyncError> {
        let api = pods_api(&self.client, target);
        let name = target.metadata.name.as_deref().unwrap_or_default();
        api.delete(name, &delete_now(target))
            .await
            .map(|_| ())
            .map_err(|source| StatusSyncError::Delete {
                pod: full_name(target),
                source,
            })
    }
}

/// Whether the API's answer `a` is newer than `b`. Resource versions are opaque to clients,
/// but the API server's are etcd revisions; when either is not a number, `b` (the watch's
/// copy) counts as current.
fn newer(a: &Pod, b: &Pod) -> bool {
    let rv = |p: &Pod| p.metadata.resource_version.as_deref()?.parse::<u64>().ok();
    matches!((rv(a), rv(b)), (Some(a), Some(b)) if a > b)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
