//! What the handlers read: the configuration, the pod statuses, and the parts plugged in
//! as the agent comes up (the stats collector, the sync loop's health, the runtime for the
//! streaming endpoints), with the connection table 10250 and 10255 share.

use std::sync::{Arc, OnceLock};

use super::node_logs::NodeLogs;
use crate::config::Config;
use crate::pod::sync_health::SyncLoopHealth;
use crate::pod::StatusStore;
use crate::runtime::Runtime;

/// The stats collector's views, served on `/stats/summary`, `/metrics/resource` and
/// `/metrics/cadvisor`. `None` means "nothing collected yet".
pub trait StatsViews: Send + Sync {
    /// The Summary JSON (`only_cpu_and_memory`: node and pod cpu/memory only).
    fn summary_json(&self, only_cpu_and_memory: bool) -> Option<Vec<u8>>;
    /// The `/metrics/resource` text exposition.
    fn resource_metrics(&self) -> Option<String>;
    /// The `/metrics/cadvisor` text exposition.
    fn cadvisor_metrics(&self) -> Option<String>;
}

/// What the handlers read.
pub struct ServerState {
    pub config: Arc<Config>,
    pub statuses: StatusStore,
    pub(super) stats: OnceLock<Arc<dyn StatsViews>>,
    sync_loop: OnceLock<Arc<SyncLoopHealth>>,
    /// The runtime exec, attach and port-forward reach, once containerd is connected.
    runtime: OnceLock<Arc<dyn Runtime>>,
    /// `/logs/`; None with enableSystemLogHandler off.
    pub(super) node_logs: Option<NodeLogs>,
    /// The open connections of 10250 and 10255, counted together against their caps.
    pub(crate) connections: Arc<super::connections::ConnectionTable>,
}

impl ServerState {
    pub fn new(config: Arc<Config>, statuses: StatusStore) -> Arc<ServerState> {
        Arc::new(ServerState {
            node_logs: NodeLogs::from_config(&config),
            config,
            statuses,
            stats: OnceLock::new(),
            sync_loop: OnceLock::new(),
            runtime: OnceLock::new(),
            connections: Arc::default(),
        })
    }

    /// Plugs in the runtime the streaming endpoints use (once).
    pub fn set_runtime(&self, runtime: Arc<dyn Runtime>) {
        let _ = self.runtime.set(runtime);
    }

    pub(crate) fn runtime(&self) -> Option<Arc<dyn Runtime>> {
        self.runtime.get().cloned()
    }

    /// Plugs in the pod manager's loop health for /healthz/syncloop (once).
    pub fn set_sync_loop(&self, health: Arc<SyncLoopHealth>) {
        let _ = self.sync_loop.set(health);
    }

    pub(super) fn sync_loop_check(&self) -> Result<(), &'static str> {
        self.sync_loop.get().map_or(Ok(()), |h| h.check())
    }

    /// Plugs in the stats collector (once; later calls are ignored).
    pub fn set_stats(&self, views: Arc<dyn StatsViews>) {
        let _ = self.stats.set(views);
    }
}
