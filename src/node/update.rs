//! The status update loop (upstream's syncNodeStatus / tryUpdateNodeStatus): every
//! nodeStatusUpdateFrequency the host, runtime and network are observed and the status is
//! computed on top of the Node as the API server holds it; it is patched only when it
//! changed, or when nodeStatusReportFrequency went by since the last report. Up to five
//! tries a pass; the first reads the API server's cache, the retries read etcd.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, GetParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::machine::read_host;
use super::runtime::{ImageSizes, NodeRuntime};
use super::status::{
    ensure_required_labels, set_node_status, status_changed, status_patch, Observed,
};
use super::NodeError;
use crate::config::Config;
use crate::events::{EventType, Recorder};
use crate::network::cni::Cni;

/// Upstream's nodeStatusUpdateRetry.
const UPDATE_RETRIES: usize = 5;

pub(crate) struct StatusUpdater {
    pub(crate) nodes: Api<Node>,
    pub(crate) cfg: Arc<Config>,
    pub(crate) timeout: Duration,
    pub(crate) last_report: Option<Instant>,
    pub(crate) publish: watch::Sender<Option<Arc<Node>>>,
    pub(crate) recorder: Recorder,
    /// This Node as a watch of it last showed it (upstream's node lister): the first try of
    /// each pass reads it instead of asking the API server, so an idle node's status loop
    /// costs no request unless something changed. `None` (or not synced yet): a GET.
    pub(crate) cache: Option<reflector::Store<Node>>,
}

/// Upstream's recordNodeStatusEvent wording.
pub(crate) fn record_events(recorder: &Recorder, node: &str, events: &[&'static str]) {
    for event in events {
        info!(node = %node, event = %event, "recording node status event");
        recorder.node(
            EventType::Normal,
            event,
            format!("Node {node} status is now: {event}"),
        );
    }
}

/// One observation of the host, the runtime and the CNI configuration.
pub(crate) async fn observe(
    cfg: &Config,
    rt: &dyn NodeRuntime,
    sizes: &mut ImageSizes,
    pressure: &crate::eviction::PressureView,
    runtime_handlers: &[String],
    volumes_in_use: &crate::volume::csi::VolumesInUse,
) -> Observed {
    let (root, cni_dir) = (cfg.root_dir.clone(), cfg.cni_conf_dir.clone());
    let host = tokio::task::spawn_blocking(move || {
        let host = read_host(&root);
        let network = Cni::new(cni_dir, Vec::new(), Duration::ZERO)
            .network_status()
            .map(|_| ())
            .map_err(|e| e.to_string());
        (host, network)
    })
    .await;
    let (host, network) = host.unwrap_or_else(|e| {
        warn!(error = %e, "reading the host's facts failed");
        (Default::default(), Err("host facts unavailable".into()))
    });
    let runtime = rt.version().await.map_err(|e| e.to_string());
    let images = match &runtime {
        Ok(_) => match sizes.node_images(rt).await {
            Ok(images) => Some(images),
            Err(e) => {
                warn!(node = %cfg.node_name, error = %e, "cannot list images for the node status");
                None
            }
        },
        Err(_) => None,
    };
    Observed {
        host,
        runtime,
        network,
        images,
        pressure: *pressure.borrow(),
        runtime_handlers: runtime_handlers.to_vec(),
        volumes_in_use: volumes_in_use.names(),
    }
}

impl StatusUpdater {
    async fn timed<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, NodeError> {
        let node = &self.cfg.node_name;
        super::timed(node, self.timeout, op, f, |source| NodeError::Api {
            node: node.clone(),
            op,
            source,
        })
        .await
    }

    /// One pass: up to five tries.
    pub(crate) async fn update(&mut self, observed: &Observed) -> Result<(), NodeError> {
        for attempt in 0..UPDATE_RETRIES {
            match self.try_update(observed, attempt).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    warn!(node = %self.cfg.node_name, attempt, error = %e, "error updating node status, will retry")
                }
            }
        }
        Err(NodeError::StatusRetries {
            node: self.cfg.node_name.clone(),
            attempts: UPDATE_RETRIES,
        })
    }

    async fn try_update(&mut self, observed: &Observed, attempt: usize) -> Result<(), NodeError> {
        let name = &self.cfg.node_name;
        let cached = match (&self.cache, attempt) {
            (Some(cache), 0) => cache.get(&ObjectRef::new(name)),
            _ => None,
        };
        let original = match cached {
            Some(node) => Node::clone(&node),
            None => {
                // Without the watch's copy the first try reads the API server's cache, cheap
                // on a large cluster; after a failure the truth is read from etcd.
                let params = if attempt == 0 {
                    GetParams::any()
                } else {
                    GetParams::default()
                };
                self.timed("get", self.nodes.get_with(name, &params))
                    .await?
            }
        };
        let mut node = original.clone();
        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_default();
        let outcome = set_node_status(&mut node, &self.cfg, observed, now);
        for problem in outcome.problems {
            warn!(node = %name, error = %problem, "node status setter failed");
        }
        record_events(&self.recorder, name, &outcome.events);
        let labels_fixed = ensure_required_labels(&mut node);
        let default = Default::default();
        let changed = status_changed(
            original.status.as_ref().unwrap_or(&default),
            node.status.as_ref().unwrap_or(&default),
        );
        let report_due = self
            .last_report
            .is_none_or(|at| at.elapsed() >= self.cfg.node_status_report_frequency);
        if !changed && !labels_fixed && !report_due {
            debug!(node = %name, "node status unchanged; not reported");
            self.publish_node(original);
            return Ok(());
        }
        let patch = status_patch(&original, &node);
        let patched = self
            .timed(
                "patch status",
                self.nodes
                    .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await?;
        self.last_report = Some(Instant::now());
        self.publish_node(patched);
        Ok(())
    }

    /// Readers are woken only when the object is a new version of the Node.
    fn publish_node(&self, node: Node) {
        self.publish.send_if_modified(|current| {
            let same = current.as_ref().is_some_and(|c| {
                c.metadata.uid == node.metadata.uid
                    && c.metadata.resource_version.is_some()
                    && c.metadata.resource_version == node.metadata.resource_version
            });
            if !same {
                *current = Some(Arc::new(node));
            }
            !same
        });
    }
}

#[cfg(test)]
mod tests;
