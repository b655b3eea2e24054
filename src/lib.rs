//! kubelet-rs: a Kubernetes node agent that drives containerd over its native gRPC API.
//! The module map and data flow are described in DESIGN.md (shared with the project).

pub mod api_client;
pub mod certificates;
pub mod cgroups;
pub mod cm;
pub mod config;
pub mod csi;
pub mod data_dirs;
pub mod events;
pub mod eviction;
pub mod gc;
#[cfg(test)]
mod layering;
pub mod logs;
pub mod metrics;
pub mod network;
pub mod node;
pub mod objects;
pub mod open_files;
pub mod pod;
pub mod prober;
pub mod runtime;
pub mod server;
pub mod source;
pub mod stats;
#[cfg(test)]
pub(crate) mod test_support;
pub mod vocabulary;
pub mod volume;
pub(crate) mod yaml;
