//! Desired pods and their workers. The manager merges the pod sources into one desired
//! set (by UID), starts one worker per pod, tells workers when their pod changes or goes
//! away, and wakes them on runtime events. Pods found in the runtime or the root dir that
//! no source wants any more are stopped and cleaned up once every source has reported.
//! Statuses go to one writer, the `status_manager`, which readers subscribe to.
//!
//! New pods pass admission first, against the node's pressure conditions, the pods already
//! admitted and, in cluster mode, this node's Node object. A pod the API server is deleting gracefully (it carries
//! `metadata.deletionTimestamp`) stays with its worker, which stops it within its grace
//! period and then finishes; the pod is not started again while the API still lists it.

pub mod admission;
pub mod allocation;
pub(crate) mod api_calls;
pub mod backoff;
pub mod dns;
pub(crate) mod ephemeral;
pub mod evictions;
pub mod files;
mod lifecycle;
pub mod mirror;
pub mod qos;
pub(crate) mod sidecar;
pub mod spec;
pub mod status;
pub mod status_manager;
pub mod status_sync;
pub mod sync_health;
pub mod termination_message;
pub mod worker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch, Notify};
use tracing::{error, info, warn};

use crate::events::{EventType, Recorder};
use crate::node::NodeView;
use crate::runtime::labels::PodRef;
use crate::source::{SourceKind, SourceUpdate};
use lifecycle::{PodState, Pods};
use worker::{pod_ref, Cleanup, Shared, Worker};

/// The latest known pods with their statuses, by UID; the HTTP server reads it.
pub type StatusStore = Arc<status_manager::StatusManager>;

/// A worker's end: its pod, and what it left of it.
#[derive(Debug)]
struct WorkerDone {
    pod: PodRef,
    cleanup: Cleanup,
}

struct WorkerHandle {
    desired: watch::Sender<Option<Arc<Pod>>>,
    wake: Arc<Notify>,
    /// Raised before each removal is sent (see `Worker::removals`).
    removals: Arc<AtomicU64>,
    /// Whether its pod is a static one; `None` for a worker started with no pod (found on
    /// the node, wanted by no source), which kubelet_working_pods counts as runtime only.
    static_pod: Option<bool>,
}

pub struct PodManager {
    shared: Arc<Shared>,
    /// Each pod's state, by UID: found on the node, running, refused, finished or ended.
    pods: Pods,
    /// Per source, the pods it wants (SET semantics).
    sources: HashMap<String, Vec<Pod>>,
    expected_sources: HashSet<String>,
    /// This node's Node object (cluster mode), for admission.
    node: Option<NodeView>,
    /// The node's pressure conditions, for admission (none without an eviction manager).
    pressure: Option<crate::eviction::PressureView>,
    events: Recorder,
    /// The sysctls pods may set (safe ones and --allowed-unsafe-sysctls).
    sysctls: admission::SysctlAllowlist,
    done_tx: mpsc::UnboundedSender<WorkerDone>,
    done_rx: mpsc::UnboundedReceiver<WorkerDone>,
}

impl PodManager {
    pub fn new(shared: Arc<Shared>, expected_sources: &[SourceKind]) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        // The configuration was validated with the same list: an error here cannot happen,
        // and would leave only the safe sysctls allowed.
        let sysctls = admission::SysctlAllowlist::new(
            &shared.cfg.allowed_unsafe_sysctls,
            admission::kernel_version(),
        )
        .unwrap_or_else(|e| {
            warn!(error = %e, "allowedUnsafeSysctls refused; only the safe sysctls are allowed");
            admission::SysctlAllowlist::new(&[], admission::kernel_version()).unwrap_or_default()
        });
        PodManager {
            shared,
            pods: Pods::default(),
            sources: HashMap::new(),
            expected_sources: expected_sources.iter().map(|s| s.to_string()).collect(),
            node: None,
            pressure: None,
            events: Recorder::disabled(),
            sysctls,
            done_tx,
            done_rx,
        }
    }

    /// Admits pods against this Node's labels, taints and allocatable (cluster mode); without
    /// it, or until the Node is registered, only the checks that need no Node run.
    pub fn with_node(mut self, node: NodeView) -> Self {
        self.node = Some(node);
        self
    }

    /// Refuses new pods under node pressure as the eviction manager reports it.
    pub fn with_pressure(mut self, pressure: crate::eviction::PressureView) -> Self {
        self.pressure = Some(pressure);
        self
    }

    /// Where admission's refusals are reported as Events (cluster mode).
    pub fn with_events(mut self, events: Recorder) -> Self {
        self.events = events;
        self
    }

    /// Rebuilds what the node holds from containerd's labels and the root dir.
    pub async fn recover(&mut self) {
        match self.shared.rt.all_containers().await {
            Ok(records) => {
                for r in records {
                    // Labels that are not plain names never become paths to clean up.
                    if let Some(problem) = path_problem(&r.pod) {
                        warn!(container_id = %r.id, uid = %r.pod.uid, "container left alone: its pod's labels: {problem}");
                        continue;
                    }
                    if self.pods.get(&r.pod.uid).is_none() {
                        self.pods.set(r.pod.uid.clone(), PodState::Orphan(r.pod));
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot list containers to recover state"),
        }
        let root_dir = self.shared.cfg.root_dir.clone();
        let known: HashSet<String> = self.pods.iter().map(|(uid, _)| uid.to_string()).collect();
        // Reading pod directories is file-system work: off the async runtime.
        let found = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            let Ok(entries) = std::fs::read_dir(root_dir.join("pods")) else {
                return found;
            };
            for e in entries.flatten() {
                let uid = e.file_name().to_string_lossy().into_owned();
                if known.contains(&uid) {
                    continue;
                }
                let dir = files::PodDir::new(&root_dir, &uid);
                // The folder's own name is the UID cleaned up: never one read from a file in
                // it. Names that cannot be part of a file name are dropped.
                let mut r = dir.load_pod().map(|p| pod_ref(&p)).unwrap_or(PodRef {
                    uid: String::new(),
                    name: String::new(),
                    namespace: String::new(),
                });
                r.uid = uid.clone();
                if [&r.name, &r.namespace]
                    .iter()
                    .any(|p| crate::data_dirs::breaks_a_file_name(p))
                {
                    r.name.clear();
                    r.namespace.clear();
                }
                found.push((uid, r));
            }
            found
        })
        .await
        .unwrap_or_default();
        for (uid, r) in found {
            self.pods.set(uid, PodState::Orphan(r));
        }
        let orphans = self.pods.orphans().count();
        if orphans > 0 {
            info!(pods = orphans, "found pods from an earlier run");
        }
    }

    /// Runs until the update channel closes.
    pub async fn run(
        mut self,
        mut updates: mpsc::Receiver<SourceUpdate>,
        mut events: mpsc::Receiver<String>,
    ) {
        let mut tick = tokio::time::interval(sync_health::STAMP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.shared.sync_loop.stamp();
            tokio::select! {
                _ = tick.tick() => {}
                u = updates.recv() => match u {
                    Some(u) => self.apply(u).await,
                    None => break,
                },
                Some(uid) = events.recv() => {
                    match self.pods.worker(&uid) {
                        Some(w) => w.wake.notify_one(),
                        None if uid.is_empty() => self.pods.workers().for_each(|(_, w)| w.wake.notify_one()),
                        None => {}
                    }
                }
                Some(done) = self.done_rx.recv() => self.worker_done(done),
            }
        }
    }

    /// A worker finished. One whose pod is gone or being deleted is dropped; a deleted pod is
    /// remembered so that it is not started again while the API server still lists it (the
    /// status sync removes it there). A pod that came back while its worker was stopping it
    /// (a static pod's manifest removed and written again: same UID) is started again by a
    /// new worker, as upstream's pod workers restart a pod whose start was requested while
    /// it terminated; no later update would, since the sources' set does not change. One
    /// that kept the pod's containers for such a restart, and whose pod went away again
    /// meanwhile, is followed by a worker that removes them.
    fn worker_done(&mut self, done: WorkerDone) {
        let uid = done.pod.uid.clone();
        let Some(w) = self.pods.worker(&uid) else {
            return;
        };
        let desired = w.desired.borrow().clone();
        let deleting = match desired {
            None if done.cleanup == Cleanup::Kept => {
                info!(pod = %done.pod.display(), "pod no longer wanted after all; removing what it kept");
                self.spawn(done.pod, None);
                return;
            }
            None => false,
            Some(p) if p.metadata.deletion_timestamp.is_some() => true,
            Some(p) => {
                info!(pod = %pod_ref(&p).display(), "pod wanted again after it stopped; starting it again");
                crate::metrics::pod_restarted(crate::vocabulary::pod_source::is_static_pod(&p));
                self.spawn(pod_ref(&p), Some(p));
                return;
            }
        };
        if deleting {
            self.pods.set(uid, PodState::Finished);
        } else {
            self.pods.forget(&uid);
        }
        self.record_counts();
    }

    /// kubelet_desired_pods, kubelet_active_pods and kubelet_working_pods from what the
    /// manager holds now. Active: desired and neither refused, ended nor finished. Working:
    /// each worker by whether its pod is still wanted (sync), being deleted or no longer
    /// wanted (terminating, orphan when it had a pod, runtime only when it never had one),
    /// and the deleted pods whose worker is done while the API still lists them
    /// (terminated; they are API pods).
    fn record_counts(&self) {
        crate::metrics::record_pod_counts(&self.pod_counts());
    }

    fn pod_counts(&self) -> crate::metrics::PodCounts {
        use crate::vocabulary::pod_source::is_static_pod;
        let static_label = |s: bool| if s { "true" } else { "" };
        let mut counts = crate::metrics::PodCounts::default();
        let mut seen = HashSet::new();
        for p in self.sources.values().flatten() {
            let Some(uid) = p.metadata.uid.as_deref() else {
                continue;
            };
            if !seen.insert(uid) {
                continue;
            }
            let i = usize::from(is_static_pod(p));
            counts.desired[i] += 1;
            if !self.pods.is(uid, PodState::held_back) {
                counts.active[i] += 1;
            }
        }
        for (_, w) in self.pods.workers() {
            let desired = w.desired.borrow();
            let key = match (desired.as_deref(), w.static_pod) {
                (Some(p), _) => (
                    if p.metadata.deletion_timestamp.is_some() {
                        "terminating"
                    } else {
                        "sync"
                    },
                    "desired",
                    static_label(is_static_pod(p)),
                ),
                (None, Some(s)) => ("terminating", "orphan", static_label(s)),
                (None, None) => ("terminating", "runtime_only", "unknown"),
            };
            counts.working.push((key, 1));
        }
        for _ in 0..self.pods.count(|s| matches!(s, PodState::Finished)) {
            counts.working.push((("terminated", "desired", ""), 1));
        }
        counts
    }

    async fn apply(&mut self, update: SourceUpdate) {
        let source = update.source.to_string();
        self.sources
            .insert(source, update.pods.into_iter().map(|p| p.pod).collect());
        let mut desired: BTreeMap<String, Pod> = BTreeMap::new();
        for pods in self.sources.values() {
            for p in pods {
                if let Some(uid) = &p.metadata.uid {
                    // The UID, name and namespace name the pod's folders, which go with the
                    // pod: a pod whose are not plain names never gets a worker (static pods
                    // are refused earlier, with the file named; the API server's always pass).
                    if let Some(problem) = path_problem(&pod_ref(p)) {
                        error!(pod = %pod_ref(p).display(), uid = %uid, "pod refused: {problem}");
                        continue;
                    }
                    desired.insert(uid.clone(), p.clone());
                }
            }
        }
        // Pods already running keep their place (also those found on the node at start);
        // new ones are admitted against them.
        // (A refused pod's status goes at the end of the pass, with the refused ones.)
        self.pods.retain(|uid, s| {
            s.forgotten_when_unlisted() != Some(false) || desired.contains_key(uid)
        });
        let on_node: HashSet<String> = self.pods.orphans().map(|(u, _)| u.to_string()).collect();
        let mut admitted: Vec<Pod> = Vec::new();
        for (uid, pod) in &desired {
            if pod.metadata.deletion_timestamp.is_some() {
                // A refused or ended pod being deleted gets a worker after all: its finish
                // is what tells the status sync to remove it from the API server.
                if self.pods.is(uid, |s| {
                    matches!(s, PodState::Rejected | PodState::Ended { .. })
                }) {
                    self.pods.forget(uid);
                }
            }
            if self.pods.is(uid, |s| {
                matches!(s, PodState::Finished | PodState::Ended { .. })
            }) {
                continue;
            }
            if has_ended(pod) && self.pods.worker(uid).is_none() && !on_node.contains(uid) {
                // Refused or ended under an earlier run, with nothing left on the node:
                // starting it would undo the end the API server already shows. (One found on
                // the node gets its worker, which keeps its dead containers for their logs.)
                info!(pod = %pod_ref(pod).display(), "pod has already ended; not starting it");
                let refused = self.pods.is(uid, |s| matches!(s, PodState::Rejected));
                self.pods.set(uid.clone(), PodState::Ended { refused });
                continue;
            }
            if self.pods.orphan(uid).is_some() {
                self.pods.forget(uid);
            }
            if let Some(w) = self.pods.worker(uid) {
                admitted.push(self.as_allocated(pod));
                if w.desired.borrow().as_deref() != Some(pod) {
                    w.desired.send_replace(Some(Arc::new(pod.clone())));
                }
            }
        }
        let max = self.shared.cfg.max_pods as usize;
        let node = self.node.as_ref().and_then(|n| n.borrow().clone());
        let pressure = self
            .pressure
            .as_ref()
            .map(|p| *p.borrow())
            .unwrap_or_default();
        let (found, new): (Vec<_>, Vec<_>) =
            desired.iter().partition(|(u, _)| on_node.contains(*u));
        for (uid, pod) in found.into_iter().chain(new) {
            if self.pods.is(uid, |s| !matches!(s, PodState::Orphan(_))) {
                continue;
            }
            let refs: Vec<&Pod> = admitted.iter().collect();
            // A pod found on the node is weighed with what it was allocated, not with a
            // resize the API asks for and the agent has not taken (upstream admits the pod
            // as UpdatePodFromAllocation leaves it): an Infeasible resize pending across a
            // restart must not get the running pod rejected.
            let weighed = self.as_allocated(pod);
            // The eviction manager's check first, as upstream orders its admit handlers;
            // a pod being deleted is never refused.
            let verdict = if pod.metadata.deletion_timestamp.is_some() {
                Ok(())
            } else {
                crate::eviction::admit(&weighed, &pressure)
            };
            let verdict = verdict
                .and_then(|()| admission::admit(&weighed, &refs, max, node.as_deref()))
                .and_then(|()| self.sysctls.check(pod));
            match verdict {
                Ok(()) => {
                    admitted.push(weighed);
                    self.spawn(pod_ref(pod), Some(Arc::new(pod.clone())));
                }
                Err(rejection) => {
                    warn!(pod = %pod_ref(pod).display(), reason = %rejection.reason, message = %rejection.message, "pod rejected");
                    self.events.pod(
                        pod,
                        None,
                        EventType::Warning,
                        &rejection.reason,
                        rejection.message.clone(),
                    );
                    self.pods.set(uid.clone(), PodState::Rejected);
                    let mut shown = pod.clone();
                    shown.status = Some(admission::rejected_status(pod, &rejection));
                    self.shared.statuses.set(shown);
                }
            }
        }
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(u, s)| s.forgotten_when_unlisted() == Some(true) && !desired.contains_key(*u))
            .map(|(u, _)| u.to_string())
            .collect();
        for uid in gone {
            self.pods.forget(&uid);
            self.shared.statuses.remove(&uid);
        }
        for (uid, w) in self.pods.workers() {
            if !desired.contains_key(uid) && w.desired.borrow().is_some() {
                w.removals.fetch_add(1, Ordering::AcqRel);
                w.desired.send_replace(None);
            }
        }
        let all_reported = self
            .expected_sources
            .iter()
            .all(|s| self.sources.contains_key(s));
        if all_reported {
            for r in self.pods.take_orphans() {
                info!(pod = %r.display(), "pod is no longer wanted by any source; removing it");
                self.spawn(r, None);
            }
        }
        self.record_counts();
    }

    /// The pod with the resources allocated to it, where it has an allocation.
    fn as_allocated(&self, pod: &Pod) -> Pod {
        self.shared
            .allocations
            .allocated_pod(pod)
            .unwrap_or_else(|| pod.clone())
    }

    fn spawn(&mut self, r: PodRef, pod: Option<Arc<Pod>>) {
        let uid = r.uid.clone();
        let static_pod = pod
            .as_deref()
            .map(crate::vocabulary::pod_source::is_static_pod);
        let (tx, rx) = watch::channel(pod);
        let wake = Arc::new(Notify::new());
        let pod = r.clone();
        let worker = Worker::new(self.shared.clone(), r);
        let removals = worker.removals();
        let done = self.done_tx.clone();
        let w = wake.clone();
        tokio::spawn(async move {
            let cleanup = worker.run(rx, w).await;
            let _ = done.send(WorkerDone { pod, cleanup });
        });
        self.pods.set(
            uid,
            PodState::Working(WorkerHandle {
                desired: tx,
                wake,
                removals,
                static_pod,
            }),
        );
    }
}

/// Whether the API server already reports the pod as ended (phase Succeeded or Failed) and
/// it is not being deleted (a deleted pod still needs its worker to finish it). Static pods
/// always arrive Pending.
fn has_ended(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// Why a pod's identity cannot name its folders (`pods/<uid>`, the log folder
/// `<namespace>_<name>_<uid>`, its log links), which are removed with it; `None` when it can.
fn path_problem(r: &PodRef) -> Option<String> {
    if let Some(problem) = crate::data_dirs::uid_problem(&r.uid) {
        return Some(format!("metadata.uid {problem}"));
    }
    if [&r.name, &r.namespace]
        .iter()
        .any(|p| crate::data_dirs::breaks_a_file_name(p))
    {
        return Some("its name or namespace holds a '/' or a NUL".into());
    }
    None
}

#[cfg(test)]
mod tests;
