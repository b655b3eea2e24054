//! Liveness, readiness and startup probes, and lifecycle hook handlers, as the upstream
//! kubelet runs them.
//!
//! `action` runs one probe attempt (exec, httpGet, tcpSocket, grpc) and says how it went;
//! `http` is the small HTTP/1.1 GET client both probes and hooks use; `worker` keeps one
//! task per probe of a container, applies thresholds and publishes the container's
//! started/ready/liveness state; `handler` runs postStart/preStop hooks.
//!
//! Commands run in containers through the `ExecRunner` trait, so tests fake it and the
//! agent plugs in containerd.

mod action;
mod address;
mod handler;
mod http;
mod worker;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::ContainerPort;

pub use crate::runtime::exec::{ExecError, ExecResult, ExecRunner};
pub use handler::run_handler;
pub use worker::{ContainerProbes, LivenessFailure, ProbeEvents, ProbeOptions, ProbeStatus};

/// The Kubernetes minor version this agent implements (k8s-openapi v1_34); upstream puts
/// it in the User-Agent of probe and hook requests.
pub const KUBE_VERSION: &str = "1.34";

/// Bytes of probe output (exec output, HTTP body) kept for messages, as upstream.
pub const MAX_PROBE_OUTPUT: usize = 10 * 1024;

/// Which container of which pod is probed, and where it can be reached.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    /// "namespace/name", for logs and messages.
    pub pod: String,
    pub container: String,
    pub container_id: String,
    /// For the prober_probe_total metric's pod_uid label.
    pub pod_uid: String,
    /// The pod's IP: the default host of httpGet and tcpSocket, the only host of grpc.
    pub pod_ip: Option<IpAddr>,
    /// The container's ports, to resolve ports given by name.
    pub ports: Vec<ContainerPort>,
}
