//! The eviction manager (upstream's pkg/kubelet/eviction, its behaviour rather than its
//! shape). Every 10 s it reads the stats collector's Summary, turns it into signal
//! observations (`signals`), decides which thresholds are crossed and for how long
//! (`thresholds`), publishes the node's pressure conditions (the node status and admission
//! read them), and under pressure first reclaims what the node holds for nobody (the dead
//! containers of ended pods, unused images: disk signals only), then evicts one pod at a time in
//! upstream's order (`rank`), waiting for each to stop before looking again. Critical pods
//! (static, mirror, system priority) are never evicted; admission (`admit`) refuses new pods
//! while the node is under pressure, as upstream's does. With localStorageCapacityIsolation
//! every pass also evicts, pressure or not, each pod past an emptyDir sizeLimit or its
//! ephemeral-storage limits (`local_storage`), before and instead of a threshold's eviction.

mod admit;
mod local_storage;
mod rank;
mod signals;
pub mod sources;
mod thresholds;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::events::{EventType, Recorder};
use crate::stats::Summary;
pub use admit::admit;
use signals::{Condition, Signal};
use thresholds::{Threshold, Tracker};

/// Upstream's evictionMonitoringPeriod.
const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a pass waits for an evicted pod to stop (upstream's podCleanupTimeout), and how
/// often it looks.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const CLEANUP_POLL: Duration = Duration::from_secs(1);
/// The grace period of a hard eviction (upstream's immediateEvictionGracePeriodSeconds).
const HARD_EVICTION_GRACE: Duration = Duration::from_secs(1);
/// The pod status reason and event reason of an eviction.
pub const REASON_EVICTED: &str = "Evicted";

/// The node's pressure conditions as the eviction manager reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl Pressure {
    fn from_conditions(conditions: &BTreeSet<Condition>) -> Pressure {
        Pressure {
            memory: conditions.contains(&Condition::Memory),
            disk: conditions.contains(&Condition::Disk),
            pid: conditions.contains(&Condition::Pid),
        }
    }

    /// The conditions' names, in upstream's order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.memory, Condition::Memory),
            (self.disk, Condition::Disk),
            (self.pid, Condition::Pid),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| c.name())
        .collect()
    }
}

/// The pressure conditions as last published (all false until the first pass).
pub type PressureView = watch::Receiver<Pressure>;

/// What the manager asks of a pod it evicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's status message (and the event's).
    pub message: String,
    /// How long its containers get to stop.
    pub grace_period: Duration,
    /// The pod's status carries a DisruptionTarget condition: evictions under node
    /// pressure; upstream's local-storage limit evictions set none.
    pub disruption: bool,
}

/// The pods as the eviction manager sees and acts on them.
pub trait PodControl: Send + Sync {
    /// Pods admitted to the node that have not ended and are not being deleted.
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Fails the pod with reason Evicted and stops its containers.
    fn evict(&self, uid: &str, eviction: Eviction);
    /// Whether the pod no longer runs anything (or is gone).
    fn is_stopped(&self, uid: &str) -> bool;
}

/// Where the Summary comes from: the collector's last sample, or one taken now.
pub trait SummarySource: Send + Sync {
    fn latest(&self) -> Option<Summary>;
    /// Samples again (after node-level reclaim). Blocking.
    fn fresh(&self) -> Option<Summary>;
}

/// What can be freed on the node without evicting a pod (for disk signals).
#[async_trait::async_trait]
pub trait NodeReclaim: Send + Sync {
    /// The dead containers of pods that have ended (with their writable layers and logs).
    async fn delete_unused_containers(&self);
    /// Every image no container uses (within the image GC's rules).
    async fn delete_unused_images(&self);
}

/// See the module documentation.
pub struct EvictionManager {
    thresholds: Vec<Threshold>,
    transition: Duration,
    max_pod_grace_seconds: i32,
    tracker: Tracker,
    /// localStorageCapacityIsolation: emptyDir sizeLimits and ephemeral-storage limits are
    /// enforced (`local_storage`).
    local_storage_isolation: bool,
    stats: Arc<dyn SummarySource>,
    pods: Arc<dyn PodControl>,
    reclaim: Option<Arc<dyn NodeReclaim>>,
    recorder: Recorder,
    pressure: watch::Sender<Pressure>,
    /// The time of the sample the last eviction acted on: the same sample is never acted
    /// on twice (upstream's thresholdsUpdatedStats).
    last_acted_sample: Option<chrono::DateTime<chrono::Utc>>,
}

impl EvictionManager {
    pub fn new(
        cfg: &Config,
        stats: Arc<dyn SummarySource>,
        pods: Arc<dyn PodControl>,
        reclaim: Option<Arc<dyn NodeReclaim>>,
        recorder: Recorder,
    ) -> (EvictionManager, PressureView) {
        let (pressure, view) = watch::channel(Pressure::default());
        let manager = EvictionManager {
            thresholds: thresholds::from_config(cfg),
            transition: cfg.eviction_pressure_transition_period,
            max_pod_grace_seconds: cfg.eviction_max_pod_grace_period,
            tracker: Tracker::default(),
            local_storage_isolation: cfg.local_storage_capacity_isolation,
            stats,
            pods,
            reclaim,
            recorder,
            pressure,
            last_acted_sample: None,
        };
        (manager, view)
    }

    /// Runs until the task is dropped: a pass every 10 s, or at once after the evicted pods
    /// stopped (or did not within 30 s).
    pub async fn run(mut self) {
        info!(
            thresholds = self.thresholds.len(),
            "eviction manager started"
        );
        let mut fresh = false;
        loop {
            let evicted = self.synchronize(fresh).await;
            if evicted.is_empty() {
                fresh = false;
                tokio::time::sleep(MONITORING_INTERVAL).await;
            } else {
                self.wait_stopped(&evicted).await;
                // The collector's last sample may predate the pods' end: the next pass
                // samples again, or it would evict for usage already freed.
                fresh = true;
            }
        }
    }

    async fn wait_stopped(&self, uids: &[String]) {
        let deadline = tokio::time::Instant::now() + CLEANUP_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            if uids.iter().all(|uid| self.pods.is_stopped(uid)) {
                info!(pod_uids = ?uids, "eviction manager: the evicted pods have stopped");
                return;
            }
            tokio::time::sleep(CLEANUP_POLL).await;
        }
        warn!(pod_uids = ?uids, "eviction manager: timed out waiting for the evicted pods to stop");
    }

    fn publish(&self, pressure: Pressure) {
        self.pressure.send_if_modified(|p| {
            if *p == pressure {
                return false;
            }
            info!(
                memory_pressure = pressure.memory,
                disk_pressure = pressure.disk,
                pid_pressure = pressure.pid,
                "node pressure conditions changed"
            );
            *p = pressure;
            true
        });
    }

    /// One pass, on the collector's last sample or (`fresh`) one taken now; returns the UIDs
    /// of the pods it evicted.
    pub(crate) async fn synchronize(&mut self, fresh: bool) -> Vec<String> {
        if self.thresholds.is_empty() && !self.local_storage_isolation {
            return Vec::new();
        }
        let stats = self.stats.clone();
        let Some(summary) =
            tokio::task::spawn_blocking(move || if fresh { stats.fresh() } else { stats.latest() })
                .await
                .ok()
                .flatten()
        else {
            return Vec::new();
        };
        self.act_on(summary).await
    }

    /// The pods past their local-storage limits, each evicted at once (upstream's
    /// localStorageEviction, which goes before and instead of the thresholds' eviction).
    fn local_storage_evictions(&self, summary: &Summary) -> Vec<String> {
        if !self.local_storage_isolation {
            return Vec::new();
        }
        let dedicated_image_fs = signals::dedicated_image_fs(summary);
        let mut evicted = Vec::new();
        for pod in self.pods.active_pods() {
            let Some(stats) = summary
                .pods
                .iter()
                .find(|s| Some(&s.pod_ref.uid) == pod.metadata.uid.as_ref())
            else {
                continue;
            };
            let Some(violation) = local_storage::check(&pod, stats, dedicated_image_fs) else {
                continue;
            };
            let shown = crate::pod::worker::pod_ref(&pod).display();
            if admit::is_critical(&pod) {
                warn!(pod = %shown, "eviction manager: cannot evict a critical pod");
                continue;
            }
            warn!(
                pod = %shown,
                signal = violation.signal,
                message = %violation.message,
                "evicting pod past its local storage limit"
            );
            crate::metrics::eviction(violation.signal);
            self.recorder.pod(
                &pod,
                None,
                EventType::Warning,
                REASON_EVICTED,
                violation.message.clone(),
            );
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.pods.evict(
                &uid,
                Eviction {
                    message: violation.message,
                    grace_period: HARD_EVICTION_GRACE,
                    disruption: false,
                },
            );
            evicted.push(uid);
        }
        evicted
    }

    /// A pass on `summary`: the pressure conditions, the local-storage limits, then for
    /// the first threshold to act on node-level reclaim and one pod's eviction.
    async fn act_on(&mut self, summary: Summary) -> Vec<String> {
        let observations = signals::observe(&summary);
        let decision = self.tracker.step(
            &self.thresholds,
            &observations,
            self.transition,
            Instant::now(),
        );
        self.publish(Pressure::from_conditions(&decision.conditions));
        let evicted = self.local_storage_evictions(&summary);
        if !evicted.is_empty() {
            return evicted;
        }
        let Some(index) = thresholds::first_to_act(&self.thresholds, &decision.act_on) else {
            return Vec::new();
        };
        let sample = summary.node.memory.as_ref().map(|m| m.time.0);
        if sample.is_some() && sample == self.last_acted_sample {
            debug!("eviction manager: no new stats since the last eviction");
            return Vec::new();
        }
        let threshold = self.thresholds[index];
        let resource = threshold.signal.resource();
        let observed = observations.get(&threshold.signal).copied();
        info!(
            signal = threshold.signal.name(),
            threshold = %threshold.value,
            available = observed.map_or(-1, |o| o.available),
            "eviction threshold crossed: attempting to reclaim {}",
            resource.name()
        );
        self.recorder.node(
            EventType::Warning,
            "EvictionThresholdMet",
            format!("Attempting to reclaim {}", resource.name()),
        );
        if self.reclaim_node_level(threshold.signal, &summary).await {
            return Vec::new();
        }
        let active = self.pods.active_pods();
        if active.is_empty() {
            warn!(
                signal = threshold.signal.name(),
                "eviction thresholds have been met, but no pods are active to evict"
            );
            return Vec::new();
        }
        let mut candidates: Vec<rank::Candidate<'_>> = active
            .iter()
            .map(|pod| rank::Candidate {
                pod: pod.as_ref(),
                stats: summary
                    .pods
                    .iter()
                    .find(|s| Some(&s.pod_ref.uid) == pod.metadata.uid.as_ref()),
            })
            .collect();
        rank::rank(threshold.signal, &mut candidates);
        for c in &candidates {
            let shown = crate::pod::worker::pod_ref(c.pod).display();
            if admit::is_critical(c.pod) {
                warn!(pod = %shown, "eviction manager: cannot evict a critical pod");
                continue;
            }
            let message = rank::message(
                resource,
                observed.map(|o| (threshold.quantity(o.capacity, false), o.available)),
                c.pod,
                c.stats,
            );
            let grace_period = eviction_grace(&threshold, self.max_pod_grace_seconds, c.pod);
            let uid = c.pod.metadata.uid.clone().unwrap_or_default();
            warn!(
                pod = %shown,
                signal = threshold.signal.name(),
                grace_seconds = grace_period.as_secs(),
                message = %message,
                "evicting pod"
            );
            crate::metrics::eviction(threshold.signal.name());
            self.recorder.pod(
                c.pod,
                None,
                EventType::Warning,
                REASON_EVICTED,
                message.clone(),
            );
            self.pods.evict(
                &uid,
                Eviction {
                    message,
                    grace_period,
                    disruption: true,
                },
            );
            self.last_acted_sample = sample;
            return vec![uid];
        }
        warn!("eviction manager: unable to evict any pods from the node");
        Vec::new()
    }

    /// Node-level reclaim for disk signals (the dead containers of ended pods, then unused
    /// images), as upstream: on one filesystem for images and the node, both help either signal; with
    /// a dedicated image filesystem they help only it. Returns whether that relieved every
    /// threshold (with its minimum reclaim), measured again afterwards.
    async fn reclaim_node_level(&self, signal: Signal, summary: &Summary) -> bool {
        let Some(reclaim) = &self.reclaim else {
            return false;
        };
        let applies = match signal {
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => {
                !signals::dedicated_image_fs(summary)
            }
            Signal::ImageFsAvailable
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsAvailable
            | Signal::ContainerFsInodesFree => true,
            _ => false,
        };
        if !applies {
            return false;
        }
        reclaim.delete_unused_containers().await;
        reclaim.delete_unused_images().await;
        let stats = self.stats.clone();
        let Some(fresh) = tokio::task::spawn_blocking(move || stats.fresh())
            .await
            .ok()
            .flatten()
        else {
            return false;
        };
        let observations = signals::observe(&fresh);
        let still = thresholds::crossed(
            &self.thresholds,
            0..self.thresholds.len(),
            &observations,
            true,
        );
        if still.is_empty() {
            info!(
                signal = signal.name(),
                "eviction manager: able to reduce resource pressure without evicting pods"
            );
            return true;
        }
        false
    }
}

/// The grace period an evicted pod's containers get (upstream's evictPod and its pod
/// worker): 1 s for a hard threshold; for a soft one evictionMaxPodGracePeriod, capped by
/// the pod's terminationGracePeriodSeconds, where 0 means the pod's own; never under 1 s.
fn eviction_grace(threshold: &Threshold, max_pod_grace_seconds: i32, pod: &Pod) -> Duration {
    if threshold.is_hard() {
        return HARD_EVICTION_GRACE;
    }
    let spec_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    let own = spec_grace.unwrap_or(30);
    let mut secs = i64::from(max_pod_grace_seconds);
    if let Some(g) = spec_grace {
        secs = secs.min(g);
    }
    if secs == 0 {
        secs = own;
    }
    Duration::from_secs(secs.max(1) as u64)
}

#[cfg(test)]
mod tests;
