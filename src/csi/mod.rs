//! CSI drivers on this node, as upstream's CSI volume plugin and plugin manager see them:
//! - `registration`: the plugin watcher on `<root-dir>/plugins_registry`. A driver's
//!   registrar (node-driver-registrar) puts a socket there; the agent asks it what it is
//!   (`GetInfo`), checks the CSI versions, asks the driver itself for its node ID and
//!   topology (`NodeGetInfo`), records it in the node's `CSINode` and the Node's
//!   `csi.volume.kubernetes.io/nodeid` annotation (`node_info`, cluster mode), and tells the
//!   registrar how it went. A socket that goes away deregisters its driver.
//! - `client`: the calls the node side makes to a driver's Node service over its unix
//!   socket, each with a deadline.
//! - `Drivers`: who is registered now, read by the volume set-up (`volume::csi`).
//! - `stats`: the published volumes' usage (NodeGetVolumeStats), polled for the collector.

pub mod client;
#[cfg(test)]
pub(crate) mod fake;
pub mod node_info;
pub mod registration;
pub mod stats;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// The code generated from `proto/` (CSI v1, plugin registration v1).
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub(crate) mod proto {
    pub(crate) mod csi {
        tonic::include_proto!("csi.v1");
    }
    pub(crate) mod registration {
        tonic::include_proto!("pluginregistration");
    }
}

/// A registered CSI driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driver {
    /// The driver's own socket (its Node service), as its registrar gave it.
    pub endpoint: PathBuf,
    /// The registration socket it came through: its removal deregisters the driver.
    pub registration: PathBuf,
    /// What the driver calls this node (`NodeGetInfo`).
    pub node_id: String,
    /// The highest CSI version both sides speak, e.g. `1.0.0`.
    pub version: String,
}

/// The CSI drivers registered on this node, by name; cheap to clone, shared by the plugin
/// watcher (the only writer) and every pod worker.
#[derive(Debug, Clone, Default)]
pub struct Drivers(Arc<RwLock<BTreeMap<String, Driver>>>);

impl Drivers {
    pub fn get(&self, name: &str) -> Option<Driver> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
    pub fn names(&self) -> Vec<String> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }
    pub(crate) fn insert(&self, name: &str, d: Driver) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), d);
    }
    pub(crate) fn remove(&self, name: &str) -> Option<Driver> {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
    }
}
