//! The Node object (cluster mode): registration, status and the Lease heartbeat.
//!
//! `start` is the entry point: it registers the Node (or adopts the one that exists), keeps
//! its status current (`update`), renews its Lease (`lease`) and publishes the Node as the
//! API server last returned it in a `NodeView`. The status is computed from the host
//! (`machine`), the runtime (`runtime`) and the configuration: capacity and allocatable in
//! `resources`, conditions in `conditions`, the object and its patch in `status`.

mod conditions;
#[cfg(test)]
mod fake_api;
mod lease;
pub(crate) mod machine;
mod registration;
pub(crate) mod resources;
mod runtime;
mod status;
mod update;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::events::Recorder;

pub use runtime::NodeRuntime;

/// This node's Node object as last registered or updated (labels, taints, allocatable),
/// `None` until registration succeeded. Admission reads it.
pub type NodeView = watch::Receiver<Option<Arc<Node>>>;

/// Why a call about the Node or its Lease failed; each names the node and the operation.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node {node:?}: {op}: {source}")]
    Api {
        node: String,
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error(
        "node {node:?}: {op} lease {}/{node}: {source}",
        lease::LEASE_NAMESPACE
    )]
    LeaseApi {
        node: String,
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("node {node:?}: {op}: no answer from the API server in time")]
    Timeout { node: String, op: &'static str },
    #[error("node {node:?}: update node status exceeds retry count ({attempts} attempts)")]
    StatusRetries { node: String, attempts: usize },
    #[error("node {node:?}: failed {attempts} attempts to update lease")]
    LeaseRetries { node: String, attempts: usize },
}

impl NodeError {
    /// An update refused because the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            NodeError::Api { source: kube::Error::Api(s), .. }
                | NodeError::LeaseApi { source: kube::Error::Api(s), .. }
                if s.is_conflict()
        )
    }
}

/// The host's address as the node reports it without --node-ip: the IPv4 address of the
/// interface holding the default route, else the first non-loopback IPv4 address.
pub fn host_ip() -> Option<std::net::IpAddr> {
    machine::default_route_ip()
}

/// A watch of this one Node (upstream's node informer) kept in a store the status loop reads
/// first; relist and back-off are kube-runtime's.
fn watch_own_node(nodes: &Api<Node>, name: &str) -> reflector::Store<Node> {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let node = name.to_string();
    let events = reflector(writer, watcher(nodes.clone(), config)).default_backoff();
    tokio::spawn(events.for_each(move |event| {
        if let Err(e) = event {
            warn!(node = %node, error = %e, "the watch of this Node failed; retrying");
        }
        std::future::ready(())
    }));
    reader
}

/// An API call bounded by the heartbeat timeout; a timeout or an API error names the node and
/// the operation (`api_error` picks the variant: the Node's or the Lease's).
async fn timed<T>(
    node: &str,
    timeout: Duration,
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
    api_error: impl FnOnce(kube::Error) -> NodeError,
) -> Result<T, NodeError> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| NodeError::Timeout {
            node: node.to_string(),
            op,
        })?
        .map_err(api_error)
}

/// Upstream's heartbeat client timeout: the status period, at most the lease duration, so
/// a half-open connection cannot hold a heartbeat past the point it matters.
fn heartbeat_timeout(cfg: &Config) -> Duration {
    let lease = Duration::from_secs(cfg.node_lease_duration_seconds.max(1) as u64);
    cfg.node_status_update_frequency.min(lease)
}

/// Starts the node's cluster-mode duties on the current tokio runtime: the Lease
/// heartbeat at once, then registration (when `registerNode`) and the status loop. Returns
/// the view of the Node that admission and others read; it stays `None` until the Node
/// was registered or adopted. The pressure conditions come from the eviction manager. Condition changes are recorded as node events on `recorder`.
pub fn start(
    client: kube::Client,
    cfg: Arc<Config>,
    runtime: Arc<dyn NodeRuntime>,
    recorder: Recorder,
    pressure: crate::eviction::PressureView,
    runtime_handlers: Vec<String>,
    volumes_in_use: crate::volume::csi::VolumesInUse,
) -> NodeView {
    let (publish, view) = watch::channel(None);
    let timeout = heartbeat_timeout(&cfg);
    let keeper = lease::LeaseKeeper::new(
        client.clone(),
        cfg.node_name.clone(),
        cfg.node_lease_duration_seconds,
        timeout,
    );
    tokio::spawn(keeper.run());
    let nodes: Api<Node> = Api::all(client);
    let cache = watch_own_node(&nodes, &cfg.node_name);
    tokio::spawn(async move {
        let mut sizes = runtime::ImageSizes::default();
        if cfg.register_node {
            let observed = update::observe(
                &cfg,
                runtime.as_ref(),
                &mut sizes,
                &pressure,
                &runtime_handlers,
                &volumes_in_use,
            )
            .await;
            let mut initial = status::initial_node(&cfg);
            let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_default();
            let outcome = status::set_node_status(&mut initial, &cfg, &observed, now);
            update::record_events(&recorder, &cfg.node_name, &outcome.events);
            let node = registration::register(&nodes, &initial, timeout).await;
            publish.send_replace(Some(Arc::new(node)));
        }
        info!(node = %cfg.node_name, every = ?cfg.node_status_update_frequency, "node status updates started");
        let mut updater = update::StatusUpdater {
            nodes,
            cfg: cfg.clone(),
            timeout,
            last_report: None,
            publish,
            recorder,
            cache: Some(cache),
        };
        let mut tick = tokio::time::interval(cfg.node_status_update_frequency);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let observed = update::observe(
                &cfg,
                runtime.as_ref(),
                &mut sizes,
                &pressure,
                &runtime_handlers,
                &volumes_in_use,
            )
            .await;
            if let Err(e) = updater.update(&observed).await {
                error!(error = %e, "unable to update node status");
            }
        }
    });
    view
}
