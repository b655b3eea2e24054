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
mod handler;
mod http;
mod worker;

#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ContainerPort;

pub use crate::runtime::exec::ExecResult;
pub use handler::run_handler;
pub use worker::{ContainerProbes, LivenessFailure, ProbeOptions, ProbeStatus};

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

/// Why a command could not be run to completion in a container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The command ran longer than its timeout and was killed. Upstream counts this as a
    /// probe failure.
    #[error("command timed out after {0:?}")]
    TimedOut(Duration),
    /// The command could not be run (container gone, binary missing, runtime error).
    /// Upstream discards such probe attempts instead of counting them.
    #[error("{0}")]
    Failed(String),
}

/// Runs a command in a container and waits for it (the CRI's ExecSync).
pub trait ExecRunner: Send + Sync + 'static {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecResult, ExecError>>;
}

impl ExecRunner for crate::runtime::Containerd {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecResult, ExecError>> {
        let containerd = self.clone();
        async move {
            containerd
                .exec_sync(&container_id, cmd, timeout)
                .await
                .map_err(|e| {
                    if e.is_exec_timeout() {
                        ExecError::TimedOut(timeout)
                    } else {
                        ExecError::Failed(e.to_string())
                    }
                })
        }
        .boxed()
    }
}
