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

/// A probe's port: a number, or the name of one of the container's ports (a name that is
/// all digits is taken as a number when no port has that name, as upstream does).
pub(crate) fn resolve_port(port: &IntOrString, target: &ProbeTarget) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => match target
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
        {
            Some(p) => i64::from(p.container_port),
            None => name.parse::<i64>().map_err(|_| {
                format!(
                    "couldn't find port: {name} in container {} of pod {}",
                    target.container, target.pod
                )
            })?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}
