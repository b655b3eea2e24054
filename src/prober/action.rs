//! One probe attempt: run the probe's action and say how it went, with upstream's wording.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EnvVar, Probe};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::address::{join_host_port, resolve_port, user_agent};
use super::{http, ExecError, ExecRunner, ProbeTarget, MAX_PROBE_OUTPUT};
use crate::runtime::exec::exec_to_end;

/// The result of one probe attempt that ran. Upstream counts a warning as a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success(String),
    Warning(String),
    Failure(String),
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        !matches!(self, Outcome::Failure(_))
    }

    pub fn output(&self) -> &str {
        match self {
            Outcome::Success(s) | Outcome::Warning(s) | Outcome::Failure(s) => s,
        }
    }
}

/// `Err` means the probe could not be run at all (bad port, no pod IP, runtime error):
/// upstream throws such attempts away rather than counting them against the container.
pub(crate) type Attempt = Result<Outcome, String>;

/// Runs the probe's action once within `timeout`.
pub(crate) async fn run_probe(
    probe: &Probe,
    target: &ProbeTarget,
    env: &[EnvVar],
    exec: &dyn ExecRunner,
    timeout: Duration,
) -> Attempt {
    if let Some(action) = &probe.exec {
        let cmd = expand_static(action.command.as_deref().unwrap_or_default(), env);
        return exec_probe(target, cmd, exec, timeout).await;
    }
    if let Some(action) = &probe.http_get {
        let req = http::request_for(action, target)?;
        return Ok(match http::get(&req, &user_agent("probe"), timeout).await {
            Err(e) => Outcome::Failure(e.to_string()),
            Ok(r) => {
                let body = String::from_utf8_lossy(&r.body).into_owned();
                match r.status {
                    200..=299 => Outcome::Success(body),
                    300..=399 => Outcome::Warning(format!(
                        "Probe terminated redirects, Response body: {body}"
                    )),
                    // Upstream keeps the body out of this message on purpose (it may carry
                    // secrets and lands in events).
                    code => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
                }
            }
        });
    }
    if let Some(action) = &probe.tcp_socket {
        let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None => pod_ip(target).map_err(|e| e.to_string())?,
        };
        let port = resolve_port(&action.port, target).map_err(|e| e.to_string())?;
        return Ok(tcp_probe(&host, port, timeout).await);
    }
    if let Some(action) = &probe.grpc {
        let ip = target
            .pod_ip
            .ok_or_else(|| format!("pod {} has no IP to probe over gRPC", target.pod))?;
        let port = u16::try_from(action.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid port number: {}", action.port))?;
        let service = action.service.clone().unwrap_or_default();
        return Ok(grpc_probe(SocketAddr::new(ip, port), service, timeout).await);
    }
    Err(format!(
        "missing probe handler for {}:{}",
        target.pod, target.container
    ))
}

/// A TCP probe without a host, for a pod that has no IP yet.
#[derive(Debug, thiserror::Error)]
#[error("pod {pod} has no IP to probe")]
struct NoPodIp {
    pod: String,
}

fn pod_ip(target: &ProbeTarget) -> Result<String, NoPodIp> {
    target
        .pod_ip
        .map(|ip| ip.to_string())
        .ok_or_else(|| NoPodIp {
            pod: target.pod.clone(),
        })
}

async fn exec_probe(
    target: &ProbeTarget,
    cmd: Vec<String>,
    exec: &dyn ExecRunner,
    timeout: Duration,
) -> Attempt {
    let shown = cmd.join(" ");
    // On a task of its own: probes are dropped with their pod, mid-exec too.
    match exec_to_end(exec, target.container_id.clone(), cmd, timeout).await {
        Ok(r) => {
            let mut out = r.stdout;
            out.extend_from_slice(&r.stderr);
            out.truncate(MAX_PROBE_OUTPUT);
            let out = String::from_utf8_lossy(&out).into_owned();
            Ok(if r.exit_code == 0 {
                Outcome::Success(out)
            } else {
                Outcome::Failure(out)
            })
        }
        Err(ExecError::TimedOut(_)) => Ok(Outcome::Failure(format!("command {shown:?} timed out"))),
        Err(ExecError::Failed(e)) => Err(e),
    }
}

async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Outcome {
    let hostport = join_host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Outcome::Success(String::new()),
        Ok(Err(e)) => Outcome::Failure(format!("dial tcp {hostport}: {e}")),
        Err(_) => Outcome::Failure(format!("dial tcp {hostport}: i/o timeout")),
    }
}

async fn grpc_probe(addr: SocketAddr, service: String, timeout: Duration) -> Outcome {
    let shown = addr.to_string();
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(user_agent("probe")))
    {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at {shown:?}: {e}"
            ))
        }
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let channel = match tokio::time::timeout_at(deadline, endpoint.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Outcome::Failure(format!(
                "error: failed to connect service at {shown:?}: {}",
                error_chain(&e)
            ))
        }
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {shown:?} within {}",
                go_duration(timeout)
            ))
        }
    };
    let mut client = HealthClient::new(channel);
    let timed_out = || {
        Outcome::Failure(format!(
            "timeout: health rpc did not complete within {}",
            go_duration(timeout)
        ))
    };
    match tokio::time::timeout_at(deadline, client.check(HealthCheckRequest { service })).await {
        Err(_) => timed_out(),
        Ok(Err(status)) => match status.code() {
            tonic::Code::Unimplemented => Outcome::Failure(format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            )),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => timed_out(),
            _ => Outcome::Failure(format!(
                "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
                status.code(),
                status.message()
            )),
        },
        Ok(Ok(resp)) => {
            let status = ServingStatus::try_from(resp.into_inner().status)
                .unwrap_or(ServingStatus::Unknown);
            if status == ServingStatus::Serving {
                Outcome::Success("service healthy".into())
            } else {
                Outcome::Failure(format!(
                    "service unhealthy (responded with {:?})",
                    status.as_str_name()
                ))
            }
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// A duration as Go prints it in these messages ("1s", "500ms").
pub(crate) fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Expands `$(VAR)` in a probe command from the container's literal env values (not
/// valueFrom ones), as upstream does for exec probes: `$$` is a literal `$`, an unknown
/// `$(VAR)` stays as written.
pub(crate) fn expand_static(cmd: &[String], env: &[EnvVar]) -> Vec<String> {
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|e| e.name == name && e.value_from.is_none())
            .map(|e| e.value.clone().unwrap_or_default())
    };
    cmd.iter().map(|arg| expand_one(arg, &lookup)).collect()
}

fn expand_one(arg: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
pub(crate) fn expand_one_for_tests(arg: &str, env: &[EnvVar]) -> String {
    expand_static(&[arg.to_string()], env).remove(0)
}
