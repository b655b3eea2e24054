//! Where a probe or hook goes and how it introduces itself: the port a probe names (a
//! number or one of the container's port names), `host:port` as Go joins it, and upstream's
//! User-Agent. A leaf the probe actions, the HTTP client and the hooks share.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{ProbeTarget, KUBE_VERSION};

/// Upstream's User-Agent of a probe (`probe`) or hook (`lifecycle`) request.
pub(crate) fn user_agent(purpose: &str) -> String {
    format!("kube-{purpose}/{KUBE_VERSION}")
}

/// "host:port", with brackets around IPv6 literals.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Why a probe's or hook's port names no port, in upstream's words (they reach pod events).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PortError {
    #[error("couldn't find port: {name} in container {container} of pod {pod}")]
    NoSuchName {
        name: String,
        container: String,
        pod: String,
    },
    #[error("invalid port number: {0}")]
    OutOfRange(i64),
}

/// A probe's port: a number, or the name of one of the container's ports (a name that is
/// all digits is taken as a number when no port has that name, as upstream does).
pub(crate) fn resolve_port(port: &IntOrString, target: &ProbeTarget) -> Result<u16, PortError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => match target
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
        {
            Some(p) => i64::from(p.container_port),
            None => name.parse::<i64>().map_err(|_| PortError::NoSuchName {
                name: name.clone(),
                container: target.container.clone(),
                pod: target.pod.clone(),
            })?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or(PortError::OutOfRange(number))
}
