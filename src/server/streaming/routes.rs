//! The handlers of `/exec`, `/attach`, `/portForward` and `/run`: the query read as
//! upstream reads it, the pod and container found, the connection upgraded to the protocol
//! the client offers (SPDY/3.1 or a WebSocket channel protocol), and the session run.
//!
//! Errors before the upgrade are HTTP answers with upstream's texts (404 for a pod or
//! container that is not there); errors after it travel in the session's status, as
//! upstream's do, because the client already switched protocols.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use std::future::Future;

use hyper::body::Incoming;
use hyper::upgrade::Upgraded;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::net::TcpStream;
use tracing::{debug, info_span, Instrument};

use super::session::{self, SessionKind};
use super::{spdy, websocket, DialError, PortDialer, RemoteStreams, StreamStatus};
use crate::network::port_forward;
use crate::runtime::labels::{self, Kind};
use crate::runtime::stdio::StdioRequest;
use crate::runtime::Runtime;
use crate::server::container_logs::parse_query;
use crate::server::response::{text, Body};
use crate::server::state::ServerState;

/// How long `/run` lets its command run: upstream passes no timeout to the runtime; this
/// bound only keeps a hung command from holding the request forever.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// Which streaming endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Exec,
    Attach,
    PortForward,
    Run,
}

/// A streaming request's path: `/<endpoint>/<ns>/<pod>[/<uid>][/<container>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub endpoint: Endpoint,
    pub namespace: String,
    pub pod: String,
    pub uid: Option<String>,
    /// None for portForward.
    pub container: Option<String>,
}

impl Target {
    /// Reads the path's segments after the endpoint; None when the shape does not match.
    pub(crate) fn parse(endpoint: Endpoint, rest: &[&str]) -> Option<Target> {
        let owned = |s: &&str| s.to_string();
        let (namespace, pod, uid, container) = match (endpoint, rest) {
            (Endpoint::PortForward, [ns, pod]) => (ns, pod, None, None),
            (Endpoint::PortForward, [ns, pod, uid]) => (ns, pod, Some(uid), None),
            (_, [ns, pod, c]) if endpoint != Endpoint::PortForward => (ns, pod, None, Some(c)),
            (_, [ns, pod, uid, c]) if endpoint != Endpoint::PortForward => {
                (ns, pod, Some(uid), Some(c))
            }
            _ => return None,
        };
        Some(Target {
            endpoint,
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            uid: uid.map(owned),
            container: container.map(owned),
        })
    }
}

/// A refusal before any upgrade: the status and upstream's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(StatusCode, String);

impl Refusal {
    fn response(self) -> Response<Body> {
        text(self.0, self.1)
    }
}

fn refusal(code: StatusCode, body: impl Into<String>) -> Refusal {
    Refusal(code, body.into())
}

fn refuse(code: StatusCode, body: impl Into<String>) -> Response<Body> {
    refusal(code, body).response()
}

/// The stdio a request asks for (`input`, `output`, `error`, `tty`: true only when exactly
/// `1`, as upstream's `req.FormValue(x) == "1"`). A tty merges stderr into stdout.
pub(crate) fn stdio_request(query: &str) -> Result<StdioRequest, Refusal> {
    let q = parse_query(query);
    let flag = |k: &str| q.get(k).and_then(|v| v.first()).is_some_and(|v| v == "1");
    let tty = flag("tty");
    let io = StdioRequest {
        stdin: flag("input"),
        stdout: flag("output"),
        stderr: flag("error") && !tty,
        tty,
    };
    if !io.stdin && !io.stdout && !io.stderr {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(io)
}

/// What a streaming request found: the pod's UID and, for exec and attach, the container.
struct Found {
    pod_uid: String,
    container_id: Option<String>,
}

/// Serves one streaming request (already authenticated and authorized).
pub(crate) async fn serve(
    state: &ServerState,
    target: Target,
    query: &str,
    mut req: Request<Incoming>,
) -> Response<Body> {
    // The router answers these paths itself while debugging handlers are off; this stays
    // as a second lock on the door that matters most.
    if !state.config.enable_debugging_handlers {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.\n",
        );
    }
    let Some(pod) = state.statuses.find(&target.namespace, &target.pod) else {
        return refuse(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let Some(runtime) = state.runtime() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the container runtime is not connected yet",
        );
    };
    let found = match find(&pod, &runtime, &target).await {
        Ok(f) => f,
        Err(r) => return r.response(),
    };
    let span = info_span!(
        "stream",
        pod = %format!("{}/{}", target.namespace, target.pod),
        container = target.container.as_deref().unwrap_or(""),
        endpoint = ?target.endpoint,
    );
    match target.endpoint {
        Endpoint::Run => run(&runtime, &found, query).instrument(span).await,
        Endpoint::Exec | Endpoint::Attach => {
            let io = match stdio_request(query) {
                Ok(io) => io,
                Err(r) => return r.response(),
            };
            let kind = match target.endpoint {
                Endpoint::Exec => SessionKind::Exec {
                    command: parse_query(query).remove("command").unwrap_or_default(),
                },
                _ => SessionKind::Attach,
            };
            let container_id = found
                .container_id
                .expect("exec and attach name a container");
            remote_command(runtime, container_id, kind, io, &mut req, span)
        }
        Endpoint::PortForward => {
            let dialer = match pod_dialer(&runtime, &found.pod_uid).await {
                Ok(d) => Arc::new(d),
                Err(r) => return r.response(),
            };
            port_forward(dialer, query, &mut req, span)
        }
    }
}

/// The pod by namespace and name (and UID when the path has one), and the running
/// container the request names.
async fn find(pod: &Pod, runtime: &Arc<dyn Runtime>, target: &Target) -> Result<Found, Refusal> {
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    if target.uid.as_ref().is_some_and(|u| *u != pod_uid) {
        return Err(refusal(StatusCode::NOT_FOUND, "pod not found"));
    }
    let Some(name) = &target.container else {
        return Ok(Found {
            pod_uid,
            container_id: None,
        });
    };
    let records = runtime.pod_containers(&pod_uid).await.map_err(|e| {
        refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("listing the containers of pod {}: {e}", target.pod),
        )
    })?;
    // The newest instance of the named container; exec and attach need it running.
    let newest = records
        .iter()
        .filter(|r| r.kind != Kind::Sandbox && r.name == *name)
        .max_by_key(|r| r.attempt);
    match newest {
        Some(r) if r.is_running() => Ok(Found {
            pod_uid,
            container_id: Some(r.id.clone()),
        }),
        // containerd's CRI plugin words it so (its exec refuses a container not running).
        Some(r) => Err(refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container is in {} state", state_name(r)),
        )),
        None => Err(refusal(
            StatusCode::NOT_FOUND,
            format!("container not found ({name:?})"),
        )),
    }
}

/// CRI's name of a container state, as upstream's runtime error reports it.
fn state_name(r: &crate::runtime::containers::ContainerRecord) -> &'static str {
    use crate::runtime::containers::State;
    match r.state {
        State::Running { .. } => "CONTAINER_RUNNING",
        State::Exited { .. } => "CONTAINER_EXITED",
        _ => "CONTAINER_CREATED",
    }
}

/// Answers the upgrade of an exec or attach request and runs the session behind it.
fn remote_command(
    runtime: Arc<dyn Runtime>,
    container_id: String,
    kind: SessionKind,
    io: StdioRequest,
    req: &mut Request<Incoming>,
    span: tracing::Span,
) -> Response<Body> {
    let headers = req.headers();
    if spdy::is_spdy_upgrade(headers) {
        let protocol = match spdy::negotiate(headers, spdy::REMOTECOMMAND_PROTOCOLS) {
            Ok(p) => p,
            Err(r) => return r,
        };
        on_upgrade(req, span, move |upgraded| async move {
            match spdy::remote_command(upgraded, protocol, io).await {
                Ok(remote) => open_and_run(runtime, container_id, kind, io, remote).await,
                Err(e) => debug!(error = %e, "SPDY session setup failed"),
            }
        });
        spdy::switching_protocols(protocol)
    } else if websocket::is_websocket_upgrade(headers) {
        let (response, protocol) =
            match websocket::accept(headers, websocket::REMOTECOMMAND_PROTOCOLS) {
                Ok(r) => r,
                Err(r) => return r,
            };
        on_upgrade(req, span, move |upgraded| async move {
            match websocket::remote_command(upgraded, protocol, io).await {
                Ok(remote) => open_and_run(runtime, container_id, kind, io, remote).await,
                Err(e) => debug!(error = %e, "WebSocket session setup failed"),
            }
        });
        response
    } else {
        not_an_upgrade(headers)
    }
}

/// Runs `serve` on the connection once hyper has switched its protocol, in the request's
/// span (pod and container in every log line of the session).
fn on_upgrade<F, Fut>(req: &mut Request<Incoming>, span: tracing::Span, serve: F)
where
    F: FnOnce(TokioIo<Upgraded>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(
        async move {
            match upgrade.await {
                Ok(u) => serve(TokioIo::new(u)).await,
                Err(e) => debug!(error = %e, "upgrade failed"),
            }
        }
        .instrument(span),
    );
}

/// Upstream's answer to a streaming request without an upgrade.
fn not_an_upgrade(_headers: &HeaderMap) -> Response<Body> {
    refuse(StatusCode::BAD_REQUEST, "Upgrade request required")
}

/// Opens the process (exec) or the container's stdio (attach) and runs the session; a
/// runtime that cannot is reported in the session's status.
async fn open_and_run(
    runtime: Arc<dyn Runtime>,
    container_id: String,
    kind: SessionKind,
    io: StdioRequest,
    remote: RemoteStreams,
) {
    let opened = match &kind {
        SessionKind::Exec { command } => {
            runtime.exec_stdio(&container_id, command.clone(), io).await
        }
        SessionKind::Attach => runtime.attach_stdio(&container_id, io).await,
    };
    match opened {
        Ok(process) => session::run(kind, remote, process).await,
        Err(e) => {
            debug!(error = %e, "opening the session's process failed");
            remote.status.finish(kind.failure(e)).await
        }
    }
}

/// Dials a pod's ports from inside its network namespace.
struct PodDialer {
    sandbox_id: String,
    pod_uid: String,
    /// None: a hostNetwork pod, dialled from the host.
    netns: Option<PathBuf>,
}

#[async_trait]
impl PortDialer for PodDialer {
    async fn dial(&self, port: u16) -> Result<TcpStream, DialError> {
        port_forward::dial(self.netns.as_deref(), port)
            .await
            .map_err(|e| DialError(e.to_string()))
    }
    fn pod_sandbox_id(&self) -> &str {
        &self.sandbox_id
    }
    fn pod_uid(&self) -> &str {
        &self.pod_uid
    }
}

/// The dialer of a pod's running sandbox.
async fn pod_dialer(runtime: &Arc<dyn Runtime>, pod_uid: &str) -> Result<PodDialer, Refusal> {
    let records = runtime.pod_containers(pod_uid).await.map_err(|e| {
        refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("listing the pod's sandbox: {e}"),
        )
    })?;
    let sandbox = records
        .into_iter()
        .filter(|r| r.kind == Kind::Sandbox && r.is_running())
        .max_by_key(|r| r.attempt)
        .ok_or_else(|| refusal(StatusCode::NOT_FOUND, "pod not found"))?;
    let host_network = sandbox
        .labels
        .get(labels::HOST_NETWORK)
        .is_some_and(|v| v == "true");
    let netns = match (host_network, sandbox.labels.get(labels::NETNS)) {
        (true, _) => None,
        (false, Some(path)) if !path.is_empty() => Some(PathBuf::from(path)),
        (false, _) => {
            return Err(refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pod sandbox {} has no network namespace", sandbox.id),
            ))
        }
    };
    Ok(PodDialer {
        sandbox_id: sandbox.id,
        pod_uid: pod_uid.to_string(),
        netns,
    })
}

/// The ports of a WebSocket port-forward (`port=80,443` or repeated `port`), which upstream
/// requires and checks before the upgrade.
fn websocket_ports(query: &str) -> Result<Vec<u16>, Refusal> {
    let q = parse_query(query);
    let mut ports = Vec::new();
    for value in q.get("port").into_iter().flatten() {
        for p in value.split(',').filter(|p| !p.is_empty()) {
            match p.trim().parse::<u16>() {
                Ok(n) if n > 0 => ports.push(n),
                _ => {
                    return Err(refusal(
                        StatusCode::BAD_REQUEST,
                        format!("unable to parse {p:?} as a port: invalid port"),
                    ))
                }
            }
        }
    }
    if ports.is_empty() {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "query parameter \"port\" is required",
        ));
    }
    Ok(ports)
}

/// Answers the upgrade of a port-forward request and serves it. SPDY carries the ports in
/// each stream's headers; a WebSocket carries them in the query.
fn port_forward(
    dialer: Arc<PodDialer>,
    query: &str,
    req: &mut Request<Incoming>,
    span: tracing::Span,
) -> Response<Body> {
    let headers = req.headers();
    if spdy::is_spdy_upgrade(headers) {
        let protocol = match spdy::negotiate(headers, spdy::PORTFORWARD_PROTOCOLS) {
            Ok(p) => p,
            Err(r) => return r,
        };
        on_upgrade(req, span, move |upgraded| {
            spdy::port_forward(upgraded, dialer)
        });
        spdy::switching_protocols(protocol)
    } else if websocket::is_websocket_upgrade(headers) {
        let ports = match websocket_ports(query) {
            Ok(p) => p,
            Err(r) => return r.response(),
        };
        let (response, protocol) =
            match websocket::accept(headers, websocket::PORTFORWARD_PROTOCOLS) {
                Ok(r) => r,
                Err(r) => return r,
            };
        on_upgrade(req, span, move |upgraded| {
            websocket::port_forward(upgraded, protocol, ports, dialer)
        });
        response
    } else {
        not_an_upgrade(headers)
    }
}

/// `POST /run/...?cmd=...`: runs the command (split on single spaces, as upstream) and
/// answers with its combined output; a command that fails gives 500.
async fn run(runtime: &Arc<dyn Runtime>, found: &Found, query: &str) -> Response<Body> {
    let cmd: Vec<String> = parse_query(query)
        .get("cmd")
        .and_then(|v| v.first().cloned())
        .unwrap_or_default()
        .split(' ')
        .map(str::to_string)
        .collect();
    let container_id = found.container_id.clone().expect("run names a container");
    // On a task of its own: a client that leaves must not cut the exec half-way.
    let runner: &dyn crate::runtime::exec::ExecRunner = runtime.as_ref();
    match crate::runtime::exec::exec_to_end(runner, container_id, cmd.clone(), RUN_TIMEOUT).await {
        Ok(result) => {
            let mut output = result.stdout;
            output.extend_from_slice(&result.stderr);
            if result.exit_code == 0 {
                return Response::builder()
                    .status(StatusCode::OK)
                    .header("Content-Type", "application/json")
                    .body(crate::server::response::bytes_body(output))
                    .expect("static response");
            }
            let status = StreamStatus::NonZeroExit {
                command: cmd,
                code: result.exit_code,
            };
            refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                String::from_utf8_lossy(&status.legacy_text()).into_owned(),
            )
        }
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_upstreams_routes() {
        let t = Target::parse(Endpoint::Exec, &["ns", "p", "c"]).unwrap();
        assert_eq!((t.uid, t.container.as_deref()), (None, Some("c")));
        let t = Target::parse(Endpoint::Attach, &["ns", "p", "u", "c"]).unwrap();
        assert_eq!(
            (t.uid.as_deref(), t.container.as_deref()),
            (Some("u"), Some("c"))
        );
        let t = Target::parse(Endpoint::PortForward, &["ns", "p"]).unwrap();
        assert_eq!((t.uid, t.container), (None, None));
        let t = Target::parse(Endpoint::PortForward, &["ns", "p", "u"]).unwrap();
        assert_eq!(t.uid.as_deref(), Some("u"));
        assert!(Target::parse(Endpoint::PortForward, &["ns", "p", "u", "x"]).is_none());
        assert!(Target::parse(Endpoint::Exec, &["ns", "p"]).is_none());
    }

    #[test]
    fn stdio_flags_are_true_only_when_exactly_one() {
        let io = stdio_request("input=1&output=1&error=1").unwrap();
        assert_eq!(
            io,
            StdioRequest {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        let io = stdio_request("output=1&error=1&tty=1").unwrap();
        assert!(io.tty && io.stdout && !io.stderr, "a tty drops stderr");
        assert!(stdio_request("input=true&output=yes").is_err());
        assert_eq!(
            stdio_request("tty=1").unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn websocket_port_forward_needs_valid_ports() {
        assert_eq!(websocket_ports("port=80,443").unwrap(), vec![80, 443]);
        assert_eq!(websocket_ports("port=80&port=81").unwrap(), vec![80, 81]);
        assert!(websocket_ports("").is_err());
        assert!(websocket_ports("port=0").is_err());
        assert!(websocket_ports("port=70000").is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            /// Any query is a stdio request and ports, or upstream's refusal.
            #[test]
            fn any_query_is_a_request_or_a_refusal(q in prop_oneof![
                "((port|input|output|error|tty)=[-+0-9a-z, %]{0,8}&){0,5}",
                ".{0,40}",
            ]) {
                if let Ok(io) = stdio_request(&q) {
                    prop_assert!(io.stdin || io.stdout || io.stderr);
                    prop_assert!(!(io.tty && io.stderr));
                }
                if let Ok(ports) = websocket_ports(&q) {
                    prop_assert!(!ports.is_empty() && !ports.contains(&0));
                }
            }

            /// Ports sent comma-separated and repeated read back in order.
            #[test]
            fn ports_round_trip(groups in prop::collection::vec(prop::collection::vec(1u16.., 1..4), 1..4)) {
                let query: Vec<String> = groups
                    .iter()
                    .map(|g| format!("port={}", g.iter().map(u16::to_string).collect::<Vec<_>>().join(",")))
                    .collect();
                prop_assert_eq!(websocket_ports(&query.join("&")).unwrap(), groups.concat());
            }
        }
    }
}
