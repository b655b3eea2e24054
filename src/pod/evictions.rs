//! The pods as the eviction manager sees them, and its requests: it reads the status
//! manager (the pods admitted here and what they run) and leaves each eviction for the
//! pod's worker, which fails the pod (reason Evicted) and stops it on its next pass, woken at
//! once through the pod manager's wake channel. Under disk pressure it also asks the workers
//! of ended pods to give up their dead containers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, Notify};

use super::status_manager::StatusManager;
use crate::eviction::{Eviction, PodControl};

pub struct PodEvictions {
    statuses: Arc<StatusManager>,
    pending: Mutex<HashMap<String, Eviction>>,
    /// Ended pods asked to give up their containers now (node-level reclaim), until their
    /// worker has done so.
    reclaiming: Mutex<HashSet<String>>,
    reclaimed: Notify,
    /// The pod manager's wake channel (a UID wakes that pod's worker); None in tests,
    /// where the worker's next pass finds the eviction.
    wake: Option<mpsc::Sender<String>>,
}

impl PodEvictions {
    pub fn new(statuses: Arc<StatusManager>, wake: Option<mpsc::Sender<String>>) -> Arc<Self> {
        Arc::new(PodEvictions {
            statuses,
            pending: Mutex::default(),
            reclaiming: Mutex::default(),
            reclaimed: Notify::new(),
            wake,
        })
    }

    fn wake(&self, uid: &str) {
        if let Some(wake) = &self.wake {
            // A full channel only delays the worker to its next resync.
            let _ = wake.try_send(uid.to_string());
        }
    }

    /// Asks the worker of every ended pod that still shows containers to remove them (and
    /// the pod's logs and sandbox) now, rather than when the pod is deleted: upstream's
    /// DeleteAllUnusedContainers under disk pressure. Returns once they all did, or after
    /// `timeout`; the number of pods asked.
    pub async fn reclaim_ended_pods(&self, timeout: Duration) -> usize {
        let ended: Vec<String> = self
            .statuses
            .pods()
            .iter()
            .filter(|p| ended(p) && p.metadata.deletion_timestamp.is_none())
            // A pod refused at admission never had a container (and has no worker).
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| !c.is_empty())
            })
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        if ended.is_empty() {
            return 0;
        }
        self.reclaiming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(ended.iter().cloned());
        for uid in &ended {
            self.wake(uid);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = self
                .reclaiming
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len();
            if left == 0 {
                break;
            }
            tokio::select! {
                _ = self.reclaimed.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(pods = left, "ended pods did not give up their containers in time");
                    break;
                }
            }
        }
        ended.len()
    }

    /// Whether the eviction manager asked this ended pod to give up its containers.
    pub(crate) fn reclaim_requested(&self, uid: &str) -> bool {
        self.reclaiming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// The pod's worker did (or tried).
    pub(crate) fn reclaim_done(&self, uid: &str) {
        self.reclaiming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        // A stored permit if the manager is not waiting yet, so it never misses it.
        self.reclaimed.notify_one();
    }

    /// The eviction asked for the pod, once.
    pub(crate) fn take(&self, uid: &str) -> Option<Eviction> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid)
    }
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn ended(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

impl PodControl for PodEvictions {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.statuses
            .pods()
            .into_iter()
            .filter(|p| !ended(p) && p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    fn evict(&self, uid: &str, eviction: Eviction) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), eviction);
        self.wake(uid);
    }

    fn is_stopped(&self, uid: &str) -> bool {
        let Some(v) = self.statuses.get(uid) else {
            return true;
        };
        let running = v
            .pod
            .status
            .iter()
            .flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
                    .chain(s.ephemeral_container_statuses.iter().flatten())
            })
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        ended(&v.pod) && !running
    }
}
