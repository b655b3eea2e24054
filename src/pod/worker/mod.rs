//! One worker per pod: a level-triggered loop that compares the pod's spec with what the
//! runtime holds and acts until they match, then hands the pod's status to the status
//! manager. Every action is idempotent, so a crash at any point is repaired by the next
//! pass; a slow or failing pod only delays itself.
//!
//! A pass lists the pod's containers once (`reconcile`) and keeps that view current as it
//! acts, so starting, stopping and publishing read what the pass itself did instead of
//! asking the runtime again. The files split the pass by concern:
//! - `reconcile`: the pass (what to start, restart or leave, in init-then-app order);
//! - `sandbox`: the pod sandbox and its network;
//! - `start` / `stop`: one container's start (image, spec, hooks) and stop (grace, preStop),
//!   and the pod's termination;
//! - `exits`: recording how containers ended, and container GC;
//! - `probes`: the probe workers of running containers;
//! - `publish`: the status for the status manager and what the stats collector samples.

mod exits;
mod probes;
mod publish;
mod reconcile;
mod sandbox;
mod start;
mod stop;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use super::backoff::Backoff;
use super::files::PodDir;
use super::status::Waiting;
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

/// How often a settled pod is re-checked even with no event (the events are the fast path);
/// a shorter syncFrequency shortens it (see `resync_interval`).
const RESYNC: Duration = Duration::from_secs(10);
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
    /// Containers containerd reported an OOM for, until their exit is recorded.
    pub oom_seen: OomSeen,
    /// Stamped by the manager's loop; read by /healthz/syncloop.
    pub sync_loop: Arc<super::sync_health::SyncLoopHealth>,
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
    /// The pod's records as this pass listed them, kept current with what the pass did;
    /// `None` when the pass could not list them (then nothing is published).
    view: Option<Vec<ContainerRecord>>,
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

fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
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
            probes: HashMap::new(),
            wake: Arc::new(Notify::new()),
            upper_dirs: HashMap::new(),
            start_recorded: false,
            started_any: false,
            image_failures: HashMap::new(),
            view: None,
        }
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

    /// The worker loop: sync while the pod is desired, terminate and clean up once it is not.
    pub async fn run(mut self, mut desired: watch::Receiver<Option<Arc<Pod>>>, wake: Arc<Notify>) {
        let uid = self.pod_ref.uid.clone();
        self.wake = wake.clone();
        loop {
            let current = desired.borrow_and_update().clone();
            let Some(pod) = current else { break };
            let next = self.pass(&pod).await;
            tokio::select! {
                _ = wake.notified() => {}
                r = desired.changed() => if r.is_err() { break },
                _ = tokio::time::sleep(next) => {}
            }
        }
        // Removed: stop everything, retrying until clean-up is complete. Probes stop first so
        // a dying container is not probed.
        self.probes.clear();
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
        let mut delay = RETRY;
        loop {
            match self.terminate(grace).await {
                Ok(()) => break,
                Err(e) => {
                    warn!(pod = %self.pod_ref.display(), error = %e, "pod clean-up failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        self.shared.statuses.remove(&uid);
        crate::metrics::forget_pod_probe_series(&uid);
        if let Ok(mut m) = self.shared.stats_pods.write() {
            m.remove(&uid);
        }
        info!(pod = %self.pod_ref.display(), "pod removed");
    }

    /// One pass: reconcile, then publish what the pass saw and did. Returns when to look
    /// again.
    pub(crate) async fn pass(&mut self, pod: &Pod) -> Duration {
        let next = match self.sync(pod).await {
            Ok(next) => next,
            Err(e) => {
                warn!(pod = %self.pod_ref.display(), error = %e, "pod sync failed");
                RETRY
            }
        };
        self.publish(pod).await;
        next
    }
}

/// The period of a settled pod's re-check: the relist safety net, never longer than the
/// configured syncFrequency (upstream's bound on how long a pod may go unsynced).
fn resync_interval(sync_frequency: Duration) -> Duration {
    RESYNC.min(sync_frequency).max(Duration::from_secs(1))
}

#[cfg(test)]
mod resync_tests {
    use super::*;

    #[test]
    fn sync_frequency_bounds_the_resync() {
        assert_eq!(resync_interval(Duration::from_secs(60)), RESYNC);
        assert_eq!(
            resync_interval(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
        assert_eq!(resync_interval(Duration::ZERO), Duration::from_secs(1));
    }
}
