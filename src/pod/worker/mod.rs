//! One worker per pod: a level-triggered loop that compares the pod's spec with what the
//! runtime holds and acts until they match, then hands the pod's status to the status
//! manager. Every action is idempotent, so a crash at any point is repaired by the next
//! pass; a slow or failing pod only delays itself.
//!
//! A pass lists the pod's containers once (`reconcile`) and keeps that view current as it
//! acts, so starting, stopping and publishing read what the pass itself did instead of
//! asking the runtime again. The files split the pass by concern:
//! - `reconcile`: the pass (what to start, restart or leave, in init-then-app order);
//! - `init`: which init containers a pass starts (regular ones to completion, sidecars
//!   kept running);
//! - `sandbox`: the pod sandbox and its network;
//! - `start` / `stop`: one container's start (image, spec, hooks) and stop (grace, preStop),
//!   and the pod's termination; `termination_order`: sidecars stop after the main
//!   containers, in reverse order;
//! - `exits`: recording how containers ended, and container GC;
//! - `probes`: the probe workers of running containers;
//! - `publish`: the status for the status manager and what the stats collector samples.

mod events;
mod exits;
mod init;
mod probes;
mod publish;
mod reconcile;
pub(crate) mod resize;
mod sandbox;
mod start;
mod stop;
mod termination_order;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use super::backoff::Backoff;
use super::files::PodDir;
use super::status::{PodFailure, Waiting};
use super::status_manager::StatusManager;
use crate::config::Config;
use crate::network::cni::Cni;
use crate::prober::ContainerProbes;
use crate::runtime::containers::ContainerRecord;
use crate::runtime::events::OomSeen;
use crate::runtime::labels::PodRef;
use crate::runtime::Runtime;
use crate::volume::PodVolumes;

pub use sandbox::SandboxError;
pub use stop::Cleanup;

/// How much later than syncFrequency a settled pod may be re-checked, as a fraction of it
/// (upstream's workerResyncIntervalJitterFactor): spreads the relists of pods started
/// together.
const RESYNC_JITTER: f64 = 0.5;
/// How long a postStart hook may take before it counts as failed.
const POST_START_TIMEOUT: Duration = Duration::from_secs(120);
/// Retry delay after a failed sync step (runtime error, network not ready).
const RETRY: Duration = Duration::from_secs(2);

/// What every worker shares.
pub struct Shared {
    pub rt: Arc<dyn Runtime>,
    pub cni: Cni,
    pub cfg: Arc<Config>,
    pub statuses: Arc<StatusManager>,
    /// The agent's own executable: containerd's shim runs it as each container's logger.
    pub exe: PathBuf,
    pub host_ip: String,
    pub memory_capacity: i64,
    pub cpu_capacity_millis: i64,
    /// What the stats collector samples, by pod UID; workers keep their pod's entry current.
    pub stats_pods: StatsPods,
    /// When the agent started (probes of containers found running start without a burst).
    pub started: std::time::Instant,
    /// See `PodContext::oom_score_adj_min`.
    pub oom_score_adj_min: i64,
    /// The pods' cgroups (kubepods, QoS parents, pod level); None with cgroupsPerQOS off
    /// and in unit tests, where pods get no cgroup of their own.
    pub cm: Option<Arc<crate::cm::ContainerManager>>,
    /// Containers containerd reported an OOM for, until their exit is recorded.
    pub oom_seen: OomSeen,
    /// Stamped by the manager's loop; read by /healthz/syncloop.
    pub sync_loop: Arc<super::sync_health::SyncLoopHealth>,
    /// Where the workers' pod and container Events go (`Recorder::disabled()` without an
    /// API server).
    pub recorder: crate::events::Recorder,
    /// The ConfigMaps, Secrets and tokens pods reference (`objects::Standalone` without an
    /// API server).
    pub objects: Arc<dyn crate::objects::ClusterObjects>,
    /// The RuntimeClass handlers this node serves and their containerd runtimes (read from
    /// containerd's config at start).
    pub handlers: Arc<crate::runtime::handlers::RuntimeHandlers>,
    /// The evictions the eviction manager asked for, taken up by each pod's worker.
    pub evictions: Arc<super::evictions::PodEvictions>,
    /// Start slots: see [`start_slots`].
    pub start_slots: Arc<Semaphore>,
    /// The resources allocated to each pod's containers (in-place resize), checkpointed.
    pub allocations: Arc<super::allocation::Allocations>,
    /// The registered CSI drivers and the volumes in use, for CSI volumes.
    pub csi: crate::volume::csi::CsiHost,
}

impl Shared {
    /// The Node's allocatable cpu (millicores) and memory, as its status reports them
    /// (capacity less kubeReserved, systemReserved and the hard eviction threshold): what a
    /// resourceFieldRef to a limit the container and the pod leave unset gives, as upstream's
    /// defaultPodLimitsForDownwardAPI reads it from the Node.
    pub(crate) fn node_allocatable(&self) -> (i64, i64) {
        let capacity = std::collections::BTreeMap::from([
            ("cpu".to_string(), self.cpu_capacity_millis),
            ("memory".to_string(), self.memory_capacity),
        ]);
        let reserved = crate::node::resources::reservation(
            &capacity,
            &self.cfg.kube_reserved,
            &self.cfg.system_reserved,
            &self.cfg.eviction_hard,
        );
        let a = crate::node::resources::allocatable(&capacity, &reserved);
        (
            a.get("cpu").copied().unwrap_or(self.cpu_capacity_millis),
            a.get("memory").copied().unwrap_or(self.memory_capacity),
        )
    }
}

/// How many pods may be in a pass of their first start at once. Without a bound, pods
/// written together (a boot, a manifest folder, a DaemonSet rollout onto a fresh node)
/// advance in lockstep through the same containerd, CNI and shim work and all finish near
/// the end; with it they finish in arrival order (tokio's semaphore is fair), so the first
/// pods run early and the last no later. Two per core keeps the machine busy while one
/// pod waits on I/O. A permit is held only during a pass, and never across an image pull or
/// a postStart hook, so a slow pod never holds up the others.
pub fn start_slots() -> Arc<Semaphore> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Arc::new(Semaphore::new((2 * cores).max(2)))
}

pub type StatsPods =
    Arc<std::sync::RwLock<std::collections::BTreeMap<String, crate::stats::PodInfo>>>;

/// A running sandbox, as app containers need it.
struct Sandbox {
    id: String,
    pid: u32,
    ips: Vec<String>,
    volumes: Option<PodVolumes>,
    /// This pass replaced a sandbox that had stopped (and stopped the pod's containers).
    replaced: bool,
    /// The RuntimeClass handler the sandbox was created for; the pod's containers get its
    /// runtime, as containerd's CRI plugin gives them their sandbox's.
    handler: String,
}

pub struct Worker {
    shared: Arc<Shared>,
    pod_ref: PodRef,
    backoff: Backoff,
    waiting: HashMap<String, Waiting>,
    start_time: DateTime<Utc>,
    last_status: Option<PodStatus>,
    sandbox_error: Option<String>,
    volume_error: Option<Waiting>,
    /// Set-ups of the pod's volumes failed in a row (`reconcile::volume_retry`).
    volume_failures: u32,
    /// Probe workers of running containers, by container id.
    probes: HashMap<String, ContainerProbes>,
    /// Wakes this worker; probes notify it when a result changes.
    wake: Arc<Notify>,
    /// The last failed pull of each container's image: when, and the registry's answer.
    image_failures: HashMap<String, (DateTime<Utc>, String)>,
    /// Whether the pod start latency was recorded (only for pods this worker started).
    start_recorded: bool,
    started_any: bool,
    /// Each container's writable layer (overlay upper dir), looked up once per container.
    upper_dirs: HashMap<String, Option<PathBuf>>,
    /// The pod's volumes as the stats collector measures them, from the last set-up.
    stats_volumes: Vec<crate::stats::VolumeInfo>,
    /// The pod's records as this pass listed them, kept current with what the pass did;
    /// `None` when the pass could not list them (then nothing is published).
    view: Option<Vec<ContainerRecord>>,
    /// The pod is being deleted: its containers are stopped for good, and its status says so.
    terminating: bool,
    /// The agent failed the pod as a whole (activeDeadlineSeconds): its containers are killed
    /// and not restarted.
    failure: Option<PodFailure>,
    /// The grace period the eviction manager gave the pod, when it evicted it.
    eviction_grace: Option<Duration>,
    /// The pod ended and its volumes and cgroup were released.
    released: bool,
    /// The event saying the pod's seLinuxOptions are not applied (SELinux off) was sent.
    selinux_not_applied_said: bool,
    /// The ended pod's containers were removed (node-level reclaim): its status stays as
    /// last published.
    frozen: bool,
    /// Every container of the pod has started once (or the pod ended): its passes no longer
    /// take a start slot.
    first_start_done: bool,
    /// The start slot this pass holds, if any.
    start_slot: Option<OwnedSemaphorePermit>,
    /// How many times the manager told this worker its pod is no longer wanted. The pod
    /// channel keeps only the latest value, so a removal followed at once by the pod coming
    /// back (a static pod's manifest removed and written again) would read as no change:
    /// the count keeps the removal, which upstream's pod workers act on.
    removals: Arc<AtomicU64>,
    /// The resize the pod's spec asks for and the agent cannot take now (PodResizePending).
    resize_pending: Option<super::allocation::Pending>,
    /// Why the last attempt to apply an allocated resize failed (PodResizeInProgress Error).
    resize_error: Option<String>,
    /// When this worker last listed its pod (the interval between its relists is a metric).
    last_relist: Option<std::time::Instant>,
}

fn policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The grace period of a pod being deleted, as upstream's calculateEffectiveGracePeriod:
/// the API's deletionGracePeriodSeconds (the apiserver computed it from the request and the
/// spec), else the spec's terminationGracePeriodSeconds; never below 1 s.
fn deletion_grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .filter(|s| *s > 0)
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(1);
    spec_seconds(secs)
}

/// The longest span taken from a pod's numbers: u32::MAX seconds (136 years, "never" in
/// practice). The API server bounds few of them (a grace period may be any int64), and a
/// clock reading plus a larger span overflows: std's and tokio's `Instant + Duration` panic,
/// as chrono's `Duration::seconds` does past i64::MAX / 1000.
pub(crate) const MAX_SPEC_SECONDS: i64 = u32::MAX as i64;

/// Seconds from a pod (a grace period, a deadline) as a span the agent can add to a clock
/// reading: a negative value is 0, a huge one [`MAX_SPEC_SECONDS`].
pub(crate) fn spec_seconds(secs: i64) -> Duration {
    Duration::from_secs(secs.clamp(0, MAX_SPEC_SECONDS) as u64)
}

fn is_deleted(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    spec_seconds(secs)
}

pub fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    }
}

/// Runs file-system work off the async runtime: a slow disk then delays this pod only,
/// never the tokio workers every other pod and the HTTP servers run on.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

impl Worker {
    pub fn new(shared: Arc<Shared>, pod_ref: PodRef) -> Self {
        Worker {
            shared,
            pod_ref,
            backoff: Backoff::default(),
            waiting: HashMap::new(),
            start_time: Utc::now(),
            last_status: None,
            sandbox_error: None,
            volume_error: None,
            volume_failures: 0,
            probes: HashMap::new(),
            wake: Arc::new(Notify::new()),
            upper_dirs: HashMap::new(),
            stats_volumes: Vec::new(),
            start_recorded: false,
            started_any: false,
            image_failures: HashMap::new(),
            view: None,
            terminating: false,
            failure: None,
            eviction_grace: None,
            released: false,
            selinux_not_applied_said: false,
            frozen: false,
            first_start_done: false,
            start_slot: None,
            removals: Arc::new(AtomicU64::new(0)),
            resize_pending: None,
            resize_error: None,
            last_relist: None,
        }
    }

    /// The count the manager raises each time it tells this worker its pod is no longer
    /// wanted (before it sends the removal).
    pub fn removals(&self) -> Arc<AtomicU64> {
        self.removals.clone()
    }

    fn pod_dir(&self) -> PodDir {
        PodDir::new(&self.shared.cfg.root_dir, &self.pod_ref.uid)
    }

    /// `/var/log/pods/<namespace>_<name>_<uid>`: the pod's log folder.
    fn log_dir(&self) -> PathBuf {
        crate::logs::pod_log_dir(
            &self.shared.cfg.pod_logs_dir,
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            &self.pod_ref.uid,
        )
    }

    /// The worker loop: sync while the pod is desired, terminate and clean up once it is not
    /// or once the API deletes it (then with the deletion's grace period and a final status).
    pub async fn run(
        mut self,
        mut desired: watch::Receiver<Option<Arc<Pod>>>,
        wake: Arc<Notify>,
    ) -> Cleanup {
        self.wake = wake.clone();
        let removals = self.removals.load(Ordering::Acquire);
        // Why the next pass runs, as upstream's pod worker durations are labelled.
        let mut why = crate::metrics::WorkerPass::Create;
        let deleted = loop {
            let current = desired.borrow_and_update().clone();
            if self.removals.load(Ordering::Acquire) != removals {
                // Removed, whatever came after: `finish_removed` sees whether it is back.
                break None;
            }
            let Some(pod) = current else { break None };
            if is_deleted(&pod) {
                break Some(pod);
            }
            // Before the pass reads them: the objects this copy of the pod references are
            // the ones kept watched for it (nothing happens when they did not change).
            self.shared.objects.register_pod(&pod);
            let started = std::time::Instant::now();
            let next = self.pass(&pod).await;
            crate::metrics::pod_worker_pass(why, started.elapsed());
            why = crate::metrics::WorkerPass::Sync;
            tokio::select! {
                _ = wake.notified() => {}
                r = desired.changed() => {
                    if r.is_err() { break None }
                    why = crate::metrics::WorkerPass::Update;
                }
                _ = tokio::time::sleep(next) => {}
            }
        };
        // Probes stop first so a dying container is not probed.
        self.probes.clear();
        let cleanup = match deleted {
            Some(pod) => {
                self.finish_deleted(pod, desired).await;
                Cleanup::Removed
            }
            None => self.finish_removed(desired).await,
        };
        self.shared.objects.unregister_pod(&self.pod_ref.uid);
        if cleanup == Cleanup::Removed {
            info!(pod = %self.pod_ref.display(), "pod removed");
        }
        cleanup
    }

    /// The pod left every source: stop everything, retrying until clean-up is complete.
    ///
    /// A pod its source gives back while it stops (a static pod's manifest removed and
    /// written again: the same UID) keeps what it has on the node once it is stopped: its
    /// dead containers, logs, volumes and status stay, and the manager's next worker for it
    /// starts it again from them, each container's restart count going on (as upstream,
    /// whose pod workers restart such a pod while its dead containers await container GC).
    async fn finish_removed(&mut self, desired: watch::Receiver<Option<Arc<Pod>>>) -> Cleanup {
        let pod = desired.borrow().clone();
        let grace = match pod.as_deref() {
            Some(p) => grace_period(p),
            None => {
                let dir = self.pod_dir();
                blocking(move || dir.load_pod())
                    .await
                    .as_ref()
                    .map_or(Duration::from_secs(30), grace_period)
            }
        };
        let wanted_again = || desired.borrow().as_deref().is_some_and(|p| !is_deleted(p));
        if self.clean_up(grace, wanted_again).await == Cleanup::Kept {
            info!(pod = %self.pod_ref.display(), "pod wanted again while it stopped; keeping its containers for its restart");
            return Cleanup::Kept;
        }
        self.forget();
        Cleanup::Removed
    }

    /// The API deletes the pod (graceful deletion): stop its containers within the
    /// deletion's grace period, publish the final status (every container terminated, the
    /// phase terminal), remove what the pod holds on the node, then drop its status, which
    /// lets the status sync delete the pod object. Later copies of the same deleting pod
    /// only matter when they shorten the grace period, as upstream (a grace period only
    /// ever decreases).
    async fn finish_deleted(
        &mut self,
        pod: Arc<Pod>,
        mut desired: watch::Receiver<Option<Arc<Pod>>>,
    ) {
        self.terminating = true;
        self.failure = None;
        self.waiting.clear();
        let mut grace = deletion_grace_period(&pod);
        info!(pod = %self.pod_ref.display(), grace_seconds = grace.as_secs(), "pod is being deleted; stopping it");
        let mut delay = RETRY;
        loop {
            let stopped = tokio::select! {
                r = self.stop_pod(&pod, grace) => r,
                shorter = shorter_grace(&mut desired, grace) => {
                    info!(pod = %self.pod_ref.display(), grace_seconds = shorter.as_secs(), "deletion grace period shortened");
                    grace = shorter;
                    continue;
                }
            };
            match stopped {
                Ok(()) => break,
                Err(e) => {
                    warn!(pod = %self.pod_ref.display(), error = %e, "cannot stop the pod; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        // The latest copy of the pod carries the status (its metadata may have moved on).
        let latest = desired
            .borrow()
            .clone()
            .filter(|p| is_deleted(p))
            .unwrap_or(pod);
        self.publish(&latest).await;
        self.clean_up(grace, || false).await;
        self.forget();
    }

    /// Removes everything of the pod, retrying until clean-up is complete, unless
    /// `keep` says so once everything is stopped (see `terminate`).
    async fn clean_up(&mut self, grace: Duration, keep: impl Fn() -> bool + Sync) -> Cleanup {
        let mut delay = RETRY;
        loop {
            match self.terminate(grace, &keep).await {
                Ok(done) => return done,
                Err(e) => {
                    warn!(pod = %self.pod_ref.display(), error = %e, "pod clean-up failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// The pod is gone from the node: its status, probe series and stats entry go too.
    fn forget(&self) {
        let uid = &self.pod_ref.uid;
        self.shared.statuses.remove(uid);
        crate::metrics::forget_pod_probe_series(uid);
        crate::metrics::forget_pod_runtime_state(uid);
        crate::metrics::storage::forget_pod(uid);
        if let Ok(mut m) = self.shared.stats_pods.write() {
            m.remove(uid);
        }
        // Off the async runtime: it rewrites the checkpoint.
        let (allocations, uid) = (self.shared.allocations.clone(), uid.clone());
        tokio::task::spawn_blocking(move || allocations.remove(&uid));
    }

    /// One pass: reconcile, then publish what the pass saw and did. Returns when to look
    /// again.
    pub(crate) async fn pass(&mut self, pod: &Pod) -> Duration {
        if !self.first_start_done {
            // Closed only when the agent shuts down; then the pass goes on without one.
            self.start_slot = self.shared.start_slots.clone().acquire_owned().await.ok();
        }
        let next = match self.sync(pod).await {
            Ok(next) => next,
            Err(e) => {
                warn!(pod = %self.pod_ref.display(), error = %e, "pod sync failed");
                RETRY
            }
        };
        self.publish(pod).await;
        if let Some(view) = &self.view {
            crate::metrics::pod_runtime_state(&self.pod_ref.uid, runtime_state(view));
        }
        self.start_slot = None;
        next
    }

    /// Gives up the pass's start slot before a wait that may be long (an image pull, a
    /// postStart hook), so other pods start meanwhile.
    fn yield_start_slot(&mut self) {
        self.start_slot = None;
    }
}

/// Resolves when a later copy of the deleting pod shortens its grace period below `current`
/// (never, when the pod is gone from the sources or no copy shortens it).
async fn shorter_grace(
    desired: &mut watch::Receiver<Option<Arc<Pod>>>,
    current: Duration,
) -> Duration {
    loop {
        if desired.changed().await.is_err() {
            return std::future::pending().await;
        }
        let shorter = desired
            .borrow_and_update()
            .as_deref()
            .filter(|p| is_deleted(p))
            .map(deletion_grace_period)
            .filter(|g| *g < current);
        if let Some(g) = shorter {
            return g;
        }
    }
}

/// The period of a settled pod's re-check with no event: syncFrequency, jittered by up to
/// half of it, as upstream's pod workers. Everything that changes a settled pod wakes its
/// worker at once (containerd's task exits and OOMs, probe results, the pod's sources, the
/// ConfigMaps and Secrets it references, the eviction manager), so this is only the safety
/// net; a shorter period costs a containerd listing and a shim call per container each
/// time, for every pod on the node.
/// The pod's records as kubelet_running_pods and kubelet_running_containers count them:
/// whether its newest sandbox runs, and its containers by upstream's `container_state`.
fn runtime_state(records: &[ContainerRecord]) -> crate::metrics::RuntimeState {
    use crate::runtime::containers::State;
    let mut counts = [("running", 0), ("exited", 0), ("created", 0)];
    for r in records
        .iter()
        .filter(|r| r.kind != crate::runtime::labels::Kind::Sandbox)
    {
        let i = match r.state {
            State::Running { .. } => 0,
            State::Exited { .. } => 1,
            State::Created => 2,
        };
        counts[i].1 += 1;
    }
    crate::metrics::RuntimeState {
        sandbox_running: sandbox::latest_sandbox(records).is_some_and(|s| s.is_running()),
        containers: counts.into_iter().filter(|(_, n)| *n > 0).collect(),
    }
}

fn resync_interval(sync_frequency: Duration) -> Duration {
    let base = sync_frequency.max(Duration::from_secs(1));
    base.mul_f64(1.0 + RESYNC_JITTER * rand::random::<f64>())
}

#[cfg(test)]
mod resync_tests {
    use super::*;

    #[test]
    fn the_resync_is_sync_frequency_jittered_by_up_to_half() {
        for _ in 0..100 {
            let r = resync_interval(Duration::from_secs(60));
            assert!(
                r >= Duration::from_secs(60) && r <= Duration::from_secs(90),
                "{r:?}"
            );
        }
        let r = resync_interval(Duration::ZERO);
        assert!(r >= Duration::from_secs(1) && r <= Duration::from_millis(1500));
    }
}
