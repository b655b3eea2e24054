//! Mirror pods (cluster mode), as upstream's kubelet keeps them (pkg/kubelet/pod
//! mirror_client.go and the mirror handling of syncPod and HandlePodCleanups).
//!
//! A static pod (from a manifest file or URL) exists only on its node; its mirror pod makes
//! it visible in the API: same name, namespace, labels, annotations and spec, plus
//! `kubernetes.io/config.mirror` set to the static pod's `kubernetes.io/config.hash`, and a
//! controller owner reference to the Node (NodeRestriction admits nothing else from a node).
//! The status sync writes the static pod's status onto it.
//!
//! One task keeps them: for every static pod in the status manager a mirror must exist; a
//! mirror that is missing (never made, or deleted by someone) is created, one whose hash no
//! longer matches (the manifest changed) or that is being deleted is deleted with its UID as
//! a precondition and created again, and a mirror on this node whose static pod is gone is
//! deleted. Creating needs the Node's UID, so nothing is created before the Node is
//! registered. Mirrors without a static pod are left alone until one [`SYNC_PERIOD`] after
//! start: the static sources and their workers need that long to fill the status manager
//! after an agent restart (upstream waits for its sources to be ready), and deleting a
//! mirror too early would only give it a new UID.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::api_calls::{delete_now, error_chain, full_name, pods_api, SYNC_PERIOD};
use super::status_manager::{StatusManager, StatusSubscription};
use crate::node::NodeView;
use crate::source::apiserver::{ApiPods, ApiPodsView};
use crate::vocabulary::pod_source::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The config source of pods from the API server.
const API_SOURCE: &str = "api";

const RETRY_INITIAL: std::time::Duration = std::time::Duration::from_millis(500);

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// A pod from a manifest file or URL (upstream's IsStaticPod: a config source other than
/// the API server).
pub fn is_static(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != API_SOURCE)
}

/// The API's stand-in for a static pod.
pub fn is_mirror(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

type Key = (String, String);

fn key(pod: &Pod) -> Key {
    (
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// Upstream's IsMirrorPodOf: the mirror carries the static pod's name and hash.
fn is_mirror_of(mirror: &Pod, pod: &Pod) -> bool {
    key(mirror) == key(pod)
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION).is_some()
        && annotation(mirror, CONFIG_MIRROR_ANNOTATION) == annotation(pod, CONFIG_HASH_ANNOTATION)
}

/// The mirror pod that stands for this static pod now: its own hash, not being deleted.
pub(crate) fn current_mirror<'a>(view: &'a ApiPodsView, pod: &Pod) -> Option<&'a Arc<Pod>> {
    view.pods
        .values()
        .find(|m| is_mirror_of(m, pod) && m.metadata.deletion_timestamp.is_none())
}

/// The mirror pod to create for a static pod on this node.
pub(crate) fn build_mirror(pod: &Pod, node: &Node) -> Pod {
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(
        CONFIG_MIRROR_ANNOTATION.into(),
        annotation(pod, CONFIG_HASH_ANNOTATION)
            .unwrap_or_default()
            .into(),
    );
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            labels: pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.metadata.name.clone().unwrap_or_default(),
                uid: node.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                // NodeRestriction refuses a mirror pod that blocks its Node's deletion.
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: pod.spec.clone(),
        status: None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("failed creating a mirror pod for static pod {pod}")]
    Create {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed deleting mirror pod {pod}")]
    Delete {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

/// The mirror pod task; see the module documentation.
pub struct MirrorPods {
    client: kube::Client,
    statuses: Arc<StatusManager>,
    /// Wakes the task when pods change (static pods come and go).
    changes: StatusSubscription,
    api: ApiPods,
    node: NodeView,
    /// Mirrors created that the watch has not shown yet, with their hash: not created twice.
    created: HashMap<Key, String>,
    /// Mirrors deleted that the watch still shows, by UID: not deleted twice.
    deleted: HashSet<String>,
    /// Mirrors without a static pod may be deleted (one sync period after start).
    orphans_ready: bool,
    failures: u32,
    retry_at: Option<Instant>,
}

impl MirrorPods {
    pub fn new(
        client: kube::Client,
        statuses: Arc<StatusManager>,
        api: ApiPods,
        node: NodeView,
    ) -> Self {
        MirrorPods {
            client,
            changes: statuses.subscribe(),
            statuses,
            api,
            node,
            created: HashMap::new(),
            deleted: HashSet::new(),
            orphans_ready: false,
            failures: 0,
            retry_at: None,
        }
    }

    /// Runs until the status manager is gone.
    pub async fn run(mut self) {
        let mut resync = tokio::time::interval_at(Instant::now() + SYNC_PERIOD, SYNC_PERIOD);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut view_open, mut node_open) = (true, true);
        loop {
            self.reconcile().await;
            tokio::select! {
                c = self.changes.changes() => if c.is_none() {
                    return;
                },
                r = self.api.changed(), if view_open => view_open = r.is_ok(),
                r = self.node.changed(), if node_open => node_open = r.is_ok(),
                _ = sleep_until(self.retry_at), if self.retry_at.is_some() => {
                    self.retry_at = None;
                }
                _ = resync.tick() => {
                    self.orphans_ready = true;
                    // The watch has caught up with what this task did by now.
                    self.created.clear();
                    self.deleted.clear();
                }
            }
        }
    }

    async fn reconcile(&mut self) {
        let view = self.api.borrow().clone();
        if !view.synced || self.retry_at.is_some_and(|t| t > Instant::now()) {
            return;
        }
        let node = self.node.borrow().clone();
        let mirrors: BTreeMap<Key, Arc<Pod>> = view
            .pods
            .values()
            .filter(|p| is_mirror(p))
            .filter(|p| {
                !self
                    .deleted
                    .contains(p.metadata.uid.as_deref().unwrap_or_default())
            })
            .map(|p| (key(p), p.clone()))
            .collect();
        self.deleted.retain(|uid| view.pods.contains_key(uid));
        self.created.retain(|k, hash| {
            mirrors
                .get(k)
                .and_then(|m| annotation(m, CONFIG_MIRROR_ANNOTATION))
                != Some(hash.as_str())
        });
        // A static pod updated in place is a new pod under the same name while the old one
        // stops within its grace period: its mirror stays the old one's until that is gone
        // (upstream starts the new pod only then), whichever of the two the map kept.
        let mut statics: BTreeMap<Key, Arc<Pod>> = BTreeMap::new();
        let mut replacing: BTreeSet<Key> = BTreeSet::new();
        for p in self.statuses.pods().into_iter().filter(|p| is_static(p)) {
            let k = key(&p);
            if statics.insert(k.clone(), p).is_some() {
                replacing.insert(k);
            }
        }
        let mut failed = false;
        for (k, pod) in &statics {
            if replacing.contains(k) {
                debug!(pod = %full_name(pod), "two static pods of this name while one stops; its mirror waits");
                continue;
            }
            let hash = annotation(pod, CONFIG_HASH_ANNOTATION).unwrap_or_default();
            if let Some(m) = mirrors.get(k) {
                if is_mirror_of(m, pod) && m.metadata.deletion_timestamp.is_none() {
                    continue;
                }
                info!(pod = %full_name(pod), uid = m.metadata.uid.as_deref().unwrap_or_default(), "deleting mirror pod because it is outdated");
                if !self.delete(m).await {
                    failed = true;
                    continue;
                }
            }
            if self.created.get(k).map(String::as_str) == Some(hash) {
                continue;
            }
            let Some(node) = node.as_deref() else {
                debug!(pod = %full_name(pod), "no mirror pod yet: the Node is not registered");
                continue;
            };
            if node.metadata.deletion_timestamp.is_some() {
                debug!(pod = %full_name(pod), node = node.metadata.name.as_deref().unwrap_or_default(), "No need to create a mirror pod, since node has been removed from the cluster");
                continue;
            }
            match self.create(pod, node).await {
                Ok(()) => {
                    self.created.insert(k.clone(), hash.to_string());
                }
                Err(err) => {
                    failed = true;
                    warn!(pod = %full_name(pod), error = %err, cause = %error_chain(&err), "mirror pod not created");
                }
            }
        }
        if self.orphans_ready {
            for (k, m) in &mirrors {
                if !statics.contains_key(k) {
                    info!(pod = %full_name(m), "deleting orphaned mirror pod: its static pod is gone");
                    failed |= !self.delete(m).await;
                }
            }
        }
        if failed {
            self.failures += 1;
            let wait = RETRY_INITIAL
                .saturating_mul(1 << (self.failures - 1).min(16))
                .min(SYNC_PERIOD);
            self.retry_at = Some(Instant::now() + wait);
        } else {
            self.failures = 0;
        }
    }

    async fn create(&self, pod: &Pod, node: &Node) -> Result<(), MirrorError> {
        let mirror = build_mirror(pod, node);
        match pods_api(&self.client, pod)
            .create(&PostParams::default(), &mirror)
            .await
        {
            Ok(created) => {
                info!(pod = %full_name(pod), uid = created.metadata.uid.as_deref().unwrap_or_default(), "created mirror pod");
                Ok(())
            }
            // One exists already (the watch has not shown it yet); a stale one is
            // replaced once the watch shows it.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(source) => Err(MirrorError::Create {
                pod: full_name(pod),
                source,
            }),
        }
    }

    /// Deletes the mirror (this very one: its UID is the precondition); true once it is
    /// gone or was already.
    async fn delete(&mut self, mirror: &Pod) -> bool {
        let result = pods_api(&self.client, mirror)
            .delete(
                mirror.metadata.name.as_deref().unwrap_or_default(),
                &delete_now(mirror),
            )
            .await;
        match result {
            Ok(_) => {}
            // Gone already, or replaced by another pod of that name.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                let err = MirrorError::Delete {
                    pod: full_name(mirror),
                    source,
                };
                warn!(pod = %full_name(mirror), error = %err, cause = %error_chain(&err), "mirror pod not deleted");
                return false;
            }
        }
        if let Some(uid) = &mirror.metadata.uid {
            self.deleted.insert(uid.clone());
        }
        true
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
