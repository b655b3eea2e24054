//! The kubelet's HTTP endpoints. Handlers read caches (the pod status store) and never
//! call containerd on the request path.
//!
//! Served so far: the read-only port (10255, off unless configured) with `/pods` and
//! `/healthz`, and the healthz port (10248 on 127.0.0.1). The authenticated TLS port
//! 10250 comes with the stats and server work.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use crate::pod::StatusStore;

/// Errors starting a server (a port already in use, say).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for the {what} server: {source}")]
pub struct ServeError {
    pub addr: SocketAddr,
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

type Body = Full<Bytes>;

fn text(code: StatusCode, body: &str) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("static response")
}

/// The PodList JSON of /pods, as upstream serves it.
pub async fn pod_list_json(store: &StatusStore) -> Vec<u8> {
    let pods = store.read().await;
    let items: Vec<&k8s_openapi::api::core::v1::Pod> = pods.values().collect();
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    serde_json::to_vec(&list).unwrap_or_default()
}

async fn read_only(
    req: Request<Incoming>,
    store: StatusStore,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path();
    debug!(method = %req.method(), path, "request");
    let resp = match path {
        "/healthz" | "/healthz/ping" | "/healthz/syncloop" | "/healthz/log" => {
            text(StatusCode::OK, "ok")
        }
        "/pods" | "/pods/" => {
            if req.method() != Method::GET {
                let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
                r.headers_mut()
                    .insert("Allow", "GET".parse().expect("static"));
                r
            } else {
                Response::builder()
                    .status(StatusCode::OK)
                    .header("Content-Type", "application/json")
                    .body(Full::new(Bytes::from(pod_list_json(&store).await)))
                    .expect("static response")
            }
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    };
    Ok(resp)
}

async fn healthz_only(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    Ok(match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok"),
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    })
}

/// Binds now (so a port conflict is reported at start), then serves in the background.
pub async fn serve_read_only(addr: SocketAddr, store: StatusStore) -> Result<(), ServeError> {
    let listener = TcpListener::bind(addr).await.map_err(|source| ServeError {
        addr,
        what: "read-only",
        source,
    })?;
    info!(%addr, "read-only server listening");
    tokio::spawn(accept_loop(listener, move |req| {
        read_only(req, store.clone())
    }));
    Ok(())
}

pub async fn serve_healthz(addr: SocketAddr) -> Result<(), ServeError> {
    let listener = TcpListener::bind(addr).await.map_err(|source| ServeError {
        addr,
        what: "healthz",
        source,
    })?;
    info!(%addr, "healthz server listening");
    tokio::spawn(accept_loop(listener, healthz_only));
    Ok(())
}

async fn accept_loop<F, Fut>(listener: TcpListener, handler: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let h = handler.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(&h);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
