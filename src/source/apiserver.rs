//! Pods from the API server (cluster mode): the pods bound to this node
//! (`spec.nodeName=<node>`), watched with kube-runtime's watcher (relist and back-off on
//! errors built in; errors are logged with the node name and the watch never gives up).
//!
//! Like the file and URL sources, the source sends the FULL set of its desired pods after the
//! first complete list and whenever that set changes; watch events that arrive together are
//! settled into one update. Mirror pods (the API's copies of static pods) are not desired
//! pods and are left out of the set, but every pod seen, mirrors included, is published in
//! [`ApiPodsView`] for the status sync and the mirror pod manager.
//!
//! As upstream's config merge, the in-memory copy of each desired pod carries
//! `kubernetes.io/config.source: api` and its first-seen time, and a change that touches
//! only the pod's status (or its resourceVersion and other bookkeeping) is not a change of
//! the desired pod: the set is not sent again for it, so workers are not woken by the
//! status patches this agent makes itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{SourceKind, SourceUpdate, SourcedPod};
use crate::vocabulary::pod_source::{
    is_mirror_pod, CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
};

/// Annotations the agent keeps on its own copy of a pod (upstream's localAnnotations); a
/// difference in them alone is not a change of the pod.
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_SEEN_ANNOTATION,
];

/// How long the source keeps collecting after a watch event before it sends: a Deployment
/// scaled up, or a relist, delivers many events within a few milliseconds, and one update
/// for all of them spares the manager a merge per event.
const EVENT_SETTLE: Duration = Duration::from_millis(50);

/// The origin of every pod from this source.
const ORIGIN: &str = "api";

/// Every pod the API server has bound to this node as last seen by the watch, mirror pods
/// included, by UID. The status sync diffs against it (an unchanged status is never
/// patched again, also after a restart) and the mirror pod manager finds the mirrors in it.
#[derive(Debug, Clone, Default)]
pub struct ApiPodsView {
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// False until the first full list arrived.
    pub synced: bool,
}

/// The source publishes each new view; readers hold a receiver.
pub type ApiPods = watch::Receiver<Arc<ApiPodsView>>;

/// Starts watching the pods bound to `node_name`. Desired pods go to `tx` (source `api`);
/// the returned receiver sees every pod, mirrors included. The task ends only when `tx`'s
/// receiver is dropped.
pub fn spawn_api_source(
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<SourceUpdate>,
) -> (JoinHandle<()>, ApiPods) {
    let (view_tx, view_rx) = watch::channel(Arc::new(ApiPodsView::default()));
    let task = tokio::spawn(async move {
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
        let mut source = ApiSource::new(node_name, tx, view_tx);
        loop {
            let events = watcher(api.clone(), config.clone()).default_backoff();
            match source.run(events).await {
                Ended::ReceiverGone => return,
                // kube's watcher never ends on its own; should it, watch again.
                Ended::StreamEnded => tracing::warn!(
                    node = %source.node,
                    "the watch of the pods bound to node {} ended; watching again",
                    source.node
                ),
            }
        }
    });
    (task, view_rx)
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    ReceiverGone,
    StreamEnded,
}

struct ApiSource {
    node: String,
    tx: mpsc::Sender<SourceUpdate>,
    view: watch::Sender<Arc<ApiPodsView>>,
    /// The pods as the last complete list and the events since left them.
    pods: BTreeMap<String, Arc<Pod>>,
    /// A relist in progress; the previous set stands until it is complete.
    listing: Option<BTreeMap<String, Arc<Pod>>>,
    synced: bool,
    /// The desired pods last sent, by UID, as sent (annotated).
    sent: Option<BTreeMap<String, SourcedPod>>,
}

impl ApiSource {
    fn new(
        node: String,
        tx: mpsc::Sender<SourceUpdate>,
        view: watch::Sender<Arc<ApiPodsView>>,
    ) -> ApiSource {
        ApiSource {
            node,
            tx,
            view,
            pods: BTreeMap::new(),
            listing: None,
            synced: false,
            sent: None,
        }
    }

    /// Consumes watch events until the stream ends or the manager is gone.
    async fn run<S>(&mut self, events: S) -> Ended
    where
        S: Stream<Item = Result<Event<Pod>, watcher::Error>>,
    {
        let mut events = std::pin::pin!(events);
        loop {
            let Some(first) = events.next().await else {
                return Ended::StreamEnded;
            };
            let mut changed = self.apply(first);
            let settle = tokio::time::sleep(EVENT_SETTLE);
            let mut settle = std::pin::pin!(settle);
            let mut ended = false;
            loop {
                tokio::select! {
                    biased;
                    event = events.next() => match event {
                        Some(event) => changed |= self.apply(event),
                        None => {
                            ended = true;
                            break;
                        }
                    },
                    _ = &mut settle => break,
                }
            }
            if changed && !self.publish().await {
                return Ended::ReceiverGone;
            }
            if ended {
                return Ended::StreamEnded;
            }
        }
    }

    /// Takes one watch event in; true when the visible set of pods changed.
    fn apply(&mut self, event: Result<Event<Pod>, watcher::Error>) -> bool {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(
                    node = %self.node,
                    error = %err,
                    "cannot list or watch the pods bound to node {}: {err}; retrying",
                    self.node
                );
                return false;
            }
        };
        match event {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                false
            }
            Event::InitApply(pod) => {
                if let Some(uid) = self.uid_of(&pod) {
                    self.listing
                        .get_or_insert_with(BTreeMap::new)
                        .insert(uid, Arc::new(pod));
                }
                false
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let changed = !self.synced || listed != self.pods;
                if !self.synced {
                    tracing::info!(node = %self.node, pods = listed.len(), "listed the pods bound to node {}", self.node);
                }
                self.pods = listed;
                self.synced = true;
                changed
            }
            Event::Apply(pod) => {
                let Some(uid) = self.uid_of(&pod) else {
                    return false;
                };
                let pod = Arc::new(pod);
                if self.pods.get(&uid) == Some(&pod) {
                    return false;
                }
                self.pods.insert(uid, pod);
                true
            }
            Event::Delete(pod) => self
                .uid_of(&pod)
                .is_some_and(|uid| self.pods.remove(&uid).is_some()),
        }
    }

    fn uid_of(&self, pod: &Pod) -> Option<String> {
        let uid = pod.metadata.uid.clone().filter(|u| !u.is_empty());
        if uid.is_none() {
            tracing::warn!(
                node = %self.node,
                pod = %format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref().unwrap_or_default()),
                "ignoring a pod without metadata.uid from the API server"
            );
        }
        uid
    }

    /// Publishes the view and, once synced, sends the desired set if it changed; false when
    /// the manager is gone.
    async fn publish(&mut self) -> bool {
        self.view.send_replace(Arc::new(ApiPodsView {
            pods: self.pods.clone(),
            synced: self.synced,
        }));
        if !self.synced {
            return true;
        }
        let desired = self.desired();
        if self.sent.as_ref() == Some(&desired) {
            return true;
        }
        let update = SourceUpdate {
            source: SourceKind::Api,
            pods: desired.values().cloned().collect(),
        };
        tracing::debug!(node = %self.node, pods = update.pods.len(), "sending the desired pods from the API server");
        if self.tx.send(update).await.is_err() {
            return false;
        }
        self.sent = Some(desired);
        true
    }

    /// The desired pods: every pod but mirrors, annotated; a pod that changed only in what
    /// the agent does not act on keeps the copy sent before.
    fn desired(&self) -> BTreeMap<String, SourcedPod> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let mut out = BTreeMap::new();
        for (uid, pod) in &self.pods {
            if is_mirror_pod(pod) {
                continue;
            }
            let before = self.sent.as_ref().and_then(|s| s.get(uid));
            let sourced = match before {
                Some(before) if !pods_differ_semantically(&before.pod, pod) => before.clone(),
                _ => {
                    let seen = before
                        .and_then(|b| annotation(&b.pod, CONFIG_SEEN_ANNOTATION))
                        .unwrap_or(&now);
                    SourcedPod {
                        pod: annotated(pod, seen),
                        origin: ORIGIN.into(),
                    }
                }
            };
            out.insert(uid.clone(), sourced);
        }
        out
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(key))
}

/// The agent's in-memory copy of an API pod: `kubernetes.io/config.source: api` (so every
/// part can tell an API pod from a static one) and the first-seen time.
fn annotated(pod: &Pod, seen: &str) -> Pod {
    let mut pod = pod.clone();
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), SourceKind::Api.to_string());
    annotations.insert(CONFIG_SEEN_ANNOTATION.into(), seen.into());
    pod
}

/// Upstream's podsDifferSemantically: spec, labels, deletion timestamp and grace period, and
/// annotations other than the agent's own. Status and bookkeeping (resourceVersion,
/// managedFields) are not compared: the agent owns the status and acts on none of the rest.
fn pods_differ_semantically(a: &Pod, b: &Pod) -> bool {
    use crate::pod::status::readiness_gate_conditions;
    let foreign = |p: &Pod| -> BTreeMap<String, String> {
        p.metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let labels = |p: &Pod| p.metadata.labels.clone().unwrap_or_default();
    a.spec != b.spec
        // Others set the readiness gates' conditions in the status, and the agent's Ready
        // condition follows them: upstream reconciles a pod whose status changed, so a
        // change of one of these is sent on as a change of the pod.
        || readiness_gate_conditions(a) != readiness_gate_conditions(b)
        || labels(a) != labels(b)
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
        || a.metadata.deletion_grace_period_seconds != b.metadata.deletion_grace_period_seconds
        || foreign(a) != foreign(b)
}

#[cfg(test)]
mod tests;
