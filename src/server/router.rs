//! One router for both ports: the read-only port serves the unauthenticated set, the main
//! port everything, behind authentication and authorization. Answers follow upstream's
//! go-restful server: `404 page not found` for unknown paths (no auth), `405: Method Not
//! Allowed` with `Allow`, `404: Page Not Found` inside a known prefix.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use rustls::pki_types::CertificateDer;
use tokio_stream::wrappers::ReceiverStream;
use tracing::debug;

use super::auth::{self, Authenticator, Authorizer, Decision};
use super::container_logs;
use super::mux;
use super::node_logs;
use super::streaming;
use super::streaming::routes::{Endpoint, Target};
use crate::config::configz_json;
use crate::metrics::text::CONTENT_TYPE as METRICS_CONTENT_TYPE;
use crate::pod::StatusStore;

pub use super::response::Body;
use super::response::{full, text};
pub use super::state::{ServerState, StatsViews};

/// Which server a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// 10255: no authentication, the auth-not-required set only.
    ReadOnly,
    /// 10250: everything, authenticated and authorized.
    Main,
}

/// The main port's authentication and authorization.
pub struct Auth {
    pub authenticator: Authenticator,
    pub authorizer: Authorizer,
}

/// What a request asks for, decided before authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// `single`: one named check (`/healthz/<check>`), else all of them.
    Healthz {
        verbose: bool,
        single: Option<&'static str>,
    },
    Pods,
    Summary,
    Metrics,
    ResourceMetrics,
    CadvisorMetrics,
    ProbeMetrics,
    Configz,
    RunningPods,
    ContainerLogs {
        namespace: String,
        pod: String,
        container: String,
    },
    /// exec, attach, portForward, run.
    Stream(Target),
    /// `/logs/...`: the node's log folder and the node log query (any method: the handler
    /// answers for each).
    NodeLogs,
    MethodNotAllowed(&'static str),
    /// A debugging path while enableDebuggingHandlers is off (upstream's 405).
    DebuggingDisabled,
    /// Inside a known prefix but no route (go-restful's 404).
    NoRoute,
    /// Unknown path (Go's ServeMux 404; no authentication).
    NotFound,
    BadRequest(&'static str),
}

/// (action, metrics bucket).
pub(crate) fn resolve(
    port: Port,
    method: &Method,
    path: &str,
    query: &str,
) -> (Action, &'static str) {
    let only = |allowed: &'static str, ok: bool, action: Action| {
        if ok {
            action
        } else {
            Action::MethodNotAllowed(allowed)
        }
    };
    let get = method == Method::GET;
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let public = match path {
        "/healthz" | "/healthz/ping" | "/healthz/log" | "/healthz/syncloop" => Some((
            Action::Healthz {
                verbose: path == "/healthz"
                    && container_logs::parse_query(query).contains_key("verbose"),
                single: match path {
                    "/healthz/ping" => Some("ping"),
                    "/healthz/log" => Some("log"),
                    "/healthz/syncloop" => Some("syncloop"),
                    _ => None,
                },
            },
            "healthz",
        )),
        "/pods" | "/pods/" => Some((only("GET", get, Action::Pods), "pods")),
        "/stats/summary" => Some((
            only("GET, POST", get || method == Method::POST, Action::Summary),
            "stats",
        )),
        "/metrics" => Some((Action::Metrics, "metrics")),
        "/metrics/resource" => Some((Action::ResourceMetrics, "metrics/resource")),
        // Upstream installs it with the auth-not-required set: the read-only port serves it.
        "/metrics/cadvisor" => Some((Action::CadvisorMetrics, "metrics/cadvisor")),
        "/metrics/probes" => Some((Action::ProbeMetrics, "metrics/probes")),
        _ if path.starts_with("/stats/") => Some((Action::NoRoute, "stats")),
        _ if path.starts_with("/pods/") => Some((Action::NoRoute, "pods")),
        _ => None,
    };
    if let Some(found) = public {
        return found;
    }
    if port == Port::ReadOnly {
        return (Action::NotFound, "other");
    }
    let get_or_post = get || method == Method::POST;
    match segments[0] {
        "configz" if segments.len() == 1 => (Action::Configz, "configz"),
        "runningpods" if path == "/runningpods/" => {
            (only("GET", get, Action::RunningPods), "runningpods")
        }
        "containerLogs" => {
            let action = match segments[1..] {
                [ns, pod, container] => {
                    if pod.is_empty() {
                        Action::BadRequest(r#"{"message": "Missing podID."}"#)
                    } else if container.is_empty() {
                        Action::BadRequest(r#"{"message": "Missing container name."}"#)
                    } else if ns.is_empty() {
                        Action::BadRequest(r#"{"message": "Missing podNamespace."}"#)
                    } else {
                        only(
                            "GET",
                            get,
                            Action::ContainerLogs {
                                namespace: ns.to_string(),
                                pod: pod.to_string(),
                                container: container.to_string(),
                            },
                        )
                    }
                }
                _ => Action::NoRoute,
            };
            (action, "containerLogs")
        }
        "logs" if path.starts_with(node_logs::PREFIX) => (Action::NodeLogs, "logs"),
        kind @ ("exec" | "attach" | "portForward" | "run") => {
            let (endpoint, bucket) = match kind {
                "exec" => (Endpoint::Exec, "exec"),
                "attach" => (Endpoint::Attach, "attach"),
                "portForward" => (Endpoint::PortForward, "portForward"),
                _ => (Endpoint::Run, "run"),
            };
            let action = match Target::parse(endpoint, &segments[1..]) {
                Some(target) if endpoint == Endpoint::Run => {
                    only("POST", method == Method::POST, Action::Stream(target))
                }
                Some(target) => only("GET, POST", get_or_post, Action::Stream(target)),
                None => Action::NoRoute,
            };
            (action, bucket)
        }
        _ => (Action::NotFound, "other"),
    }
}

fn json(body: impl Into<Bytes>) -> Response<Body> {
    full(StatusCode::OK, "application/json", body)
}

fn method_bucket(method: &Method) -> &'static str {
    match method.as_str() {
        "OPTIONS" => "OPTIONS",
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "TRACE" => "TRACE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// The paths upstream answers with "Debug endpoints are disabled." when
/// enableDebuggingHandlers is off (InstallDebuggingDisabledHandlers: Go ServeMux subtree
/// patterns, so each prefix and everything under it).
const DEBUGGING_PATHS: &[&str] = &[
    "/run/",
    "/exec/",
    "/attach/",
    "/portForward/",
    "/containerLogs/",
    "/runningpods/",
    "/debug/pprof/",
    "/logs/",
];

/// Whether `action` is one of the debugging handlers (what enableDebuggingHandlers installs).
fn is_debugging(action: &Action) -> bool {
    matches!(
        action,
        Action::Stream(_) | Action::ContainerLogs { .. } | Action::RunningPods | Action::NodeLogs
    )
}

/// What the main port does with `action` when enableDebuggingHandlers is off: upstream then
/// installs none of the debugging handlers (configz among them, so /configz is not found)
/// and answers its debugging paths with 405 after authentication. The read-only port never
/// had them. The route decides, whatever the path's spelling; the path prefixes only add the
/// debugging paths no route serves (pprof, a method a route refuses), and `path` is clean
/// here (mux::redirect answered any other).
pub(crate) fn gate_debugging(port: Port, enabled: bool, path: &str, action: Action) -> Action {
    if enabled || port != Port::Main {
        return action;
    }
    if is_debugging(&action) || DEBUGGING_PATHS.iter().any(|p| path.starts_with(p)) {
        return Action::DebuggingDisabled;
    }
    match action {
        Action::Configz => Action::NotFound,
        other => other,
    }
}

/// Serves one request.
pub async fn handle(
    state: Arc<ServerState>,
    port: Port,
    auth: Option<Arc<Auth>>,
    peer_chain: Arc<Vec<CertificateDer<'static>>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    // Go's ServeMux redirects these before any handler, so before authentication: from here
    // on the path is clean.
    let subtrees = match port {
        Port::Main => mux::main_subtrees(state.config.enable_debugging_handlers),
        Port::ReadOnly => mux::READ_ONLY_SUBTREES,
    };
    if let Some(redirect) = mux::redirect(&method, &path, &query, subtrees) {
        return Ok(redirect);
    }
    let (action, bucket) = resolve(port, &method, &path, &query);
    let action = gate_debugging(port, state.config.enable_debugging_handlers, &path, action);
    let long_running = matches!(
        &action,
        Action::Stream(t) if t.endpoint != Endpoint::Run
    ) || (matches!(action, Action::ContainerLogs { .. })
        && container_logs::parse_log_options(&query).is_ok_and(|o| o.follow));
    let server_type = if port == Port::Main {
        "readwrite"
    } else {
        "readonly"
    };
    crate::metrics::http_request(method_bucket(&method), bucket, server_type, long_running);
    debug!(%method, path, port = server_type, "request");

    if action == Action::NotFound {
        return Ok(text(StatusCode::NOT_FOUND, "404 page not found\n"));
    }
    if let (Port::Main, Some(auth)) = (port, &auth) {
        let authorization = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let user = match auth
            .authenticator
            .authenticate(&peer_chain, authorization)
            .await
        {
            Ok(u) => u,
            Err(e) => {
                auth::log_authn_failure(&e);
                return Ok(text(StatusCode::UNAUTHORIZED, "Unauthorized"));
            }
        };
        let attrs = auth::request_attributes(&user, &state.config.node_name, &method, &path);
        match auth.authorizer.authorize(&attrs).await {
            Decision::Allow => {}
            Decision::Deny => {
                debug!(user = %user.name, path, "forbidden");
                return Ok(text(StatusCode::FORBIDDEN, auth::forbidden_body(&attrs)));
            }
            Decision::Error(e) => {
                tracing::error!(user = %user.name, path, error = %e, "authorization error");
                return Ok(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    auth::authorization_error_body(&attrs),
                ));
            }
        }
    }
    if let Action::Stream(target) = action {
        return Ok(streaming::routes::serve(&state, target, &query, req).await);
    }
    if action == Action::NodeLogs {
        return Ok(node_logs::serve(
            state.node_logs.as_ref(),
            &method,
            &path,
            &query,
            req.headers(),
        )
        .await);
    }
    Ok(serve(&state, action, &method, &query).await)
}

/// Upstream's healthz answers: ping and log always pass; a failing syncloop gives 500, with
/// the reason for its own path and withheld in the list of all checks.
fn healthz(
    syncloop: Result<(), &'static str>,
    verbose: bool,
    single: Option<&'static str>,
) -> Response<Body> {
    match (single, syncloop) {
        (Some("syncloop"), Err(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {e}\n"),
        ),
        (Some(_), _) => text(StatusCode::OK, "ok"),
        (None, Ok(())) if !verbose => text(StatusCode::OK, "ok"),
        (None, Ok(())) => text(
            StatusCode::OK,
            "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n",
        ),
        (None, Err(_)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n",
        ),
    }
}

async fn serve(
    state: &ServerState,
    action: Action,
    method: &Method,
    query: &str,
) -> Response<Body> {
    match action {
        Action::Healthz { verbose, single } => healthz(state.sync_loop_check(), verbose, single),
        Action::Pods => json(super::pod_list_json(&state.statuses).await),
        Action::RunningPods => json(running_pods_json(&state.statuses).await),
        Action::Summary => {
            let only = only_cpu_and_memory(query);
            match state.stats.get().and_then(|s| s.summary_json(only)) {
                Some(body) => json(body),
                None => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Internal Error: no stats collected yet",
                ),
            }
        }
        Action::Metrics => full(
            StatusCode::OK,
            METRICS_CONTENT_TYPE,
            crate::metrics::registry().gather(),
        ),
        Action::ProbeMetrics => full(
            StatusCode::OK,
            METRICS_CONTENT_TYPE,
            crate::metrics::probes_registry().gather(),
        ),
        Action::ResourceMetrics => {
            // Upstream never fails this endpoint: a failed scrape is reported in-band.
            let body = state
                .stats
                .get()
                .and_then(|s| s.resource_metrics())
                .unwrap_or_else(|| crate::stats::render_resource_metrics(None, true));
            full(StatusCode::OK, METRICS_CONTENT_TYPE, body)
        }
        Action::CadvisorMetrics => {
            // As upstream, a failed collection is reported in-band (container_scrape_error).
            let body = state
                .stats
                .get()
                .and_then(|s| s.cadvisor_metrics())
                .unwrap_or_else(|| crate::stats::cadvisor::render_cadvisor_metrics(None));
            full(StatusCode::OK, METRICS_CONTENT_TYPE, body)
        }
        Action::Configz => json(configz_json(&state.config).to_string()),
        Action::ContainerLogs {
            namespace,
            pod,
            container,
        } => container_logs_response(state, &namespace, &pod, &container, query).await,
        // Served by `handle`, which owns the request an upgrade needs (and its headers).
        Action::Stream(_) | Action::NodeLogs => {
            text(StatusCode::INTERNAL_SERVER_ERROR, "served by handle")
        }
        Action::MethodNotAllowed(allow) => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
            r.headers_mut()
                .insert("Allow", allow.parse().expect("static header"));
            let _ = method;
            r
        }
        Action::DebuggingDisabled => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "Debug endpoints are disabled.\n",
        ),
        Action::NoRoute | Action::NotFound => text(StatusCode::NOT_FOUND, "404: Page Not Found"),
        Action::BadRequest(body) => text(StatusCode::BAD_REQUEST, body),
    }
}

/// `only_cpu_and_memory` holds only when given once, spelled exactly `true`: upstream
/// compares the string instead of parsing a bool, so `1` or `True` keep the full summary.
fn only_cpu_and_memory(query: &str) -> bool {
    container_logs::parse_query(query)
        .get("only_cpu_and_memory")
        .is_some_and(|v| v.len() == 1 && v[0] == "true")
}

async fn container_logs_response(
    state: &ServerState,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
) -> Response<Body> {
    let fail = |e: container_logs::LogError| {
        text(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST),
            e.body,
        )
    };
    let opts = match container_logs::parse_log_options(query) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let target = match container_logs::locate(
        &state.statuses,
        &state.config.pod_logs_dir,
        namespace,
        pod,
        container,
        &opts,
    )
    .await
    {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    // A stat can block on a slow or hung disk: off the async workers.
    let is_file = tokio::fs::metadata(&target.path)
        .await
        .is_ok_and(|m| m.is_file());
    if !is_file {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "log file {} of container {container:?} in pod {pod:?} does not exist",
                target.path.display()
            ),
        );
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(container_logs::stream(
        state.statuses.clone(),
        container.to_string(),
        target,
        opts,
        tx,
    ));
    // The end of the body goes out in a write of its own, after the last bytes are flushed
    // (one pending poll makes hyper flush). The apiserver's WebSocket log reader (wsstream's
    // messageCopy) drops the bytes of a read that also reports the end, and Go's HTTP client
    // reports both at once when the last chunk and the end share a TLS record: `kubectl logs`
    // over WebSockets then shows nothing. The upstream kubelet flushes every write, so its
    // end always comes apart.
    let flush_first = futures::stream::once(tokio::task::yield_now())
        .filter_map(|()| std::future::ready(None::<Result<Frame<Bytes>, Infallible>>));
    let body = StreamBody::new(
        ReceiverStream::new(rx)
            .map(|b| Ok::<_, Infallible>(Frame::data(b)))
            .chain(flush_first),
    );
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "text/plain")
        .body(BodyExt::boxed(body))
        .expect("static response")
}

/// `/runningpods/`: the pods with a running container, reduced to what upstream's
/// runtime-built list carries (name, namespace, uid, containers with name and image).
/// Built from the pod status cache: handlers do not call containerd.
async fn running_pods_json(store: &StatusStore) -> Vec<u8> {
    let pods = store.pods();
    let items: Vec<serde_json::Value> = pods
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                })
        })
        .map(|p| {
            let containers: Vec<serde_json::Value> = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                .map(|c| serde_json::json!({"name": c.name, "image": c.image, "resources": {}}))
                .collect();
            serde_json::json!({
                "metadata": {"name": p.metadata.name, "namespace": p.metadata.namespace,
                             "uid": p.metadata.uid, "creationTimestamp": null},
                "spec": {"containers": containers},
                "status": {},
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pod::sync_health::SyncLoopHealth;

    fn r(port: Port, method: Method, path: &str) -> Action {
        resolve(port, &method, path, "").0
    }

    /// Answers with the flag it was asked with, so the response shows what the handler chose.
    struct EchoStats;

    impl StatsViews for EchoStats {
        fn summary_json(&self, only_cpu_and_memory: bool) -> Option<Vec<u8>> {
            Some(if only_cpu_and_memory { "small" } else { "full" }.into())
        }
        fn resource_metrics(&self) -> Option<String> {
            None
        }
        fn cadvisor_metrics(&self) -> Option<String> {
            Some("cadvisor body\n".into())
        }
    }

    #[tokio::test]
    async fn only_cpu_and_memory_takes_the_literal_true_only() {
        let state = ServerState::new(
            Arc::new(Config::defaults(false)),
            crate::pod::status_manager::StatusManager::new(),
        );
        state.set_stats(Arc::new(EchoStats));
        for (query, want) in [
            ("only_cpu_and_memory=true", "small"),
            ("only_cpu_and_memory=%74rue", "small"),
            ("only_cpu_and_memory=1", "full"),
            ("only_cpu_and_memory=True", "full"),
            ("only_cpu_and_memory=yes", "full"),
            ("only_cpu_and_memory", "full"),
            ("only_cpu_and_memory=true&only_cpu_and_memory=true", "full"),
            ("", "full"),
        ] {
            let resp = serve(&state, Action::Summary, &Method::GET, query).await;
            assert_eq!(resp.status(), StatusCode::OK);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, want, "?{query}");
        }
    }

    #[tokio::test]
    async fn cadvisor_metrics_are_served_from_the_collector_and_in_band_before_it() {
        let state = ServerState::new(
            Arc::new(Config::defaults(false)),
            crate::pod::status_manager::StatusManager::new(),
        );
        let (action, bucket) = resolve(Port::Main, &Method::GET, "/metrics/cadvisor", "");
        assert_eq!(bucket, "metrics/cadvisor");
        // No collector yet: 200 with the scrape-error gauges at 1, as upstream's handler.
        let resp = serve(&state, action.clone(), &Method::GET, "").await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["Content-Type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("\ncontainer_scrape_error 1\n"), "{body}");
        state.set_stats(Arc::new(EchoStats));
        let resp = serve(&state, action, &Method::GET, "").await;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "cadvisor body\n");
    }

    #[tokio::test]
    async fn healthz_reports_a_stale_sync_loop_as_upstream() {
        async fn answer(state: &ServerState, path: &str, query: &str) -> (StatusCode, String) {
            let (action, _) = resolve(Port::ReadOnly, &Method::GET, path, query);
            let resp = serve(state, action, &Method::GET, query).await;
            let code = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (code, String::from_utf8_lossy(&body).into_owned())
        }
        let state = ServerState::new(
            Arc::new(Config::defaults(false)),
            crate::pod::status_manager::StatusManager::new(),
        );
        let ok = (StatusCode::OK, "ok".to_string());
        assert_eq!(
            answer(&state, "/healthz/syncloop", "").await,
            ok,
            "no loop yet"
        );
        // A fresh stamp is healthy: the threshold is never under five minutes.
        let health = Arc::new(SyncLoopHealth::new(std::time::Duration::from_secs(1)));
        health.stamp();
        state.set_sync_loop(health.clone());
        assert_eq!(answer(&state, "/healthz/syncloop", "").await, ok);
        let stale = SyncLoopHealth::stale_for_tests();
        let state = ServerState::new(
            Arc::new(Config::defaults(false)),
            crate::pod::status_manager::StatusManager::new(),
        );
        state.set_sync_loop(Arc::new(stale));
        assert_eq!(
            answer(&state, "/healthz/syncloop", "").await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: sync Loop took longer than expected\n".to_string()
            )
        );
        assert_eq!(answer(&state, "/healthz/ping", "").await, ok);
        let failed = (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n"
                .to_string(),
        );
        assert_eq!(answer(&state, "/healthz", "").await, failed);
        assert_eq!(answer(&state, "/healthz", "verbose").await, failed);
    }

    #[test]
    fn read_only_port_serves_only_the_public_set() {
        assert_eq!(r(Port::ReadOnly, Method::GET, "/pods"), Action::Pods);
        assert_eq!(
            r(Port::ReadOnly, Method::GET, "/metrics/resource"),
            Action::ResourceMetrics
        );
        assert_eq!(
            r(Port::ReadOnly, Method::GET, "/metrics/cadvisor"),
            Action::CadvisorMetrics
        );
        assert_eq!(r(Port::ReadOnly, Method::GET, "/configz"), Action::NotFound);
        assert_eq!(
            r(Port::ReadOnly, Method::GET, "/containerLogs/a/b/c"),
            Action::NotFound
        );
        assert_eq!(r(Port::Main, Method::GET, "/configz"), Action::Configz);
    }

    #[test]
    fn method_rules_follow_upstream_routes() {
        assert_eq!(
            r(Port::Main, Method::POST, "/pods"),
            Action::MethodNotAllowed("GET")
        );
        assert_eq!(
            r(Port::Main, Method::POST, "/stats/summary"),
            Action::Summary
        );
        assert_eq!(
            r(Port::Main, Method::PUT, "/stats/summary"),
            Action::MethodNotAllowed("GET, POST")
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/run/ns/p/c"),
            Action::MethodNotAllowed("POST")
        );
        assert_eq!(
            r(Port::Main, Method::POST, "/exec/ns/p/c"),
            Action::Stream(Target::parse(Endpoint::Exec, &["ns", "p", "c"]).unwrap())
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/exec/ns/p/uid/c"),
            Action::Stream(Target::parse(Endpoint::Exec, &["ns", "p", "uid", "c"]).unwrap())
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/portForward/ns/p"),
            Action::Stream(Target::parse(Endpoint::PortForward, &["ns", "p"]).unwrap())
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/portForward/ns/p/uid/extra"),
            Action::NoRoute
        );
        assert_eq!(
            r(Port::Main, Method::POST, "/containerLogs/ns/p/c"),
            Action::MethodNotAllowed("GET")
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/containerLogs/ns/p"),
            Action::NoRoute
        );
        assert_eq!(
            r(Port::Main, Method::GET, "/stats/container"),
            Action::NoRoute
        );
        assert_eq!(r(Port::Main, Method::GET, "/spec/"), Action::NotFound);
        assert_eq!(
            r(Port::Main, Method::GET, "/containerLogs/ns//c"),
            Action::BadRequest(r#"{"message": "Missing podID."}"#)
        );
    }

    /// /containerLogs for a log directory on a hung disk: the request waits, the runtime does
    /// not. Before, the log file's stat ran on the async worker and stopped the whole runtime
    /// (here one thread, as any worker the disk holds is lost to every other task).
    #[test]
    #[ignore = "needs root and /dev/fuse: run hack/test.sh"]
    fn a_hung_log_disk_does_not_stall_the_runtime() {
        let mut hung = crate::test_support::HungFs::mount();
        let mut config = Config::defaults(false);
        config.pod_logs_dir = hung.dir.path().join("pods");
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]},
            "status": {"containerStatuses": [{
                "name": "app", "image": "busybox", "imageID": "", "ready": true,
                "restartCount": 0, "state": {"running": {}}
            }]}
        }))
        .unwrap();
        let store = StatusStore::default();
        store.set(pod);
        let state = ServerState::new(Arc::new(config), store);

        let (ticked, ticks) = std::sync::mpsc::channel();
        let (answered, answer) = std::sync::mpsc::channel();
        let runtime = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let request = tokio::spawn(async move {
                    let resp = container_logs_response(&state, "default", "web", "app", "").await;
                    let _ = answered.send(resp.status());
                });
                // Other work on the same runtime goes on while the request waits.
                for _ in 0..5 {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                let _ = ticked.send(());
                let _ = request.await;
            });
        });
        let stalled = ticks
            .recv_timeout(std::time::Duration::from_secs(30))
            .is_err();
        // Unblock whatever waits on the disk, so the thread can end either way.
        hung.release();
        let status = answer.recv_timeout(std::time::Duration::from_secs(30));
        runtime.join().unwrap();
        assert!(!stalled, "the runtime stalled on the hung disk");
        // Once the disk fails, the request gets its answer: no such log file.
        assert_eq!(status, Ok(StatusCode::BAD_REQUEST));
    }

    proptest::proptest! {
        #![proptest_config(crate::test_support::proptest_config(512))]

        /// Whatever the path's spelling, a request reaches the route of its clean path
        /// (after at most one redirect), and with the debugging handlers off no spelling
        /// reaches a debugging route or configz.
        #[test]
        fn no_spelling_reaches_a_debugging_route_with_the_switch_off(
            p in crate::server::mux::tests::request_path(),
            query in "[a-zA-Z=&%0-9]{0,12}",
            method in proptest::sample::select(vec![Method::GET, Method::POST, Method::PUT, Method::HEAD, Method::OPTIONS]),
            debugging in proptest::prelude::any::<bool>(),
        ) {
            for port in [Port::Main, Port::ReadOnly] {
                let subtrees = match port {
                    Port::Main => mux::main_subtrees(debugging),
                    Port::ReadOnly => mux::READ_ONLY_SUBTREES,
                };
                let served = match mux::redirect(&method, &p, &query, subtrees) {
                    Some(r) => {
                        let location = crate::server::mux::tests::location(&r);
                        location.split_once('?').map_or(location.clone(), |(path, _)| path.to_string())
                    }
                    None => p.clone(),
                };
                proptest::prop_assert!(mux::redirect(&method, &served, &query, subtrees).is_none());
                let (action, _) = resolve(port, &method, &served, &query);
                let gated = gate_debugging(port, debugging, &served, action);
                if !debugging || port == Port::ReadOnly {
                    proptest::prop_assert!(!is_debugging(&gated), "{:?} -> {:?}: {:?}", p, served, gated);
                    proptest::prop_assert_ne!(&gated, &Action::Configz, "{:?}", p);
                }
            }
        }
    }
}
