//! `/logs/`: the node's log folder (`nodes/log`), a debugging handler as upstream's.
//!
//! With enableSystemLogHandler (the default) the folder is a file server (`files`). With
//! enableSystemLogQuery and the NodeLogQuery gate too, `?query=` and its options are the
//! node log query (`query`): services are read from the journal or their log file
//! (`journal`), a single file through the file server. Upstream's order and answers:
//! a parameter that does not parse is a 400, a query that does not validate (or a path
//! beside it) a 406, everything else a 200 with problems told in the body.

pub(crate) mod files;
mod journal;
mod query;

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderMap;
use hyper::{Method, Response, StatusCode};
use tokio_stream::wrappers::ReceiverStream;

use crate::config::{Config, Gate};
use crate::server::response::{bytes_body, Body};

/// The prefix upstream serves the folder under.
pub(crate) const PREFIX: &str = "/logs/";

/// Where `/logs/` reads and what it may do, from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct NodeLogs {
    sources: journal::Sources,
    /// enableSystemLogQuery with the NodeLogQuery gate.
    query: bool,
}

impl NodeLogs {
    /// None when enableSystemLogHandler is off.
    pub fn from_config(config: &Config) -> Option<NodeLogs> {
        config.enable_system_log_handler.then(|| NodeLogs {
            sources: journal::Sources {
                root: config.node_log_dir.clone(),
                journalctl: config.journalctl.clone(),
            },
            query: config.enable_system_log_query
                && config.feature_gates.enabled(Gate::NodeLogQuery),
        })
    }
}

/// `http.Error`: the text and a newline, as plain text that must not be sniffed.
pub(crate) fn go_error(code: StatusCode, message: &str) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("Content-Type", "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(bytes_body(format!("{message}\n")))
        .expect("static response")
}

/// A body fed by `rx`.
pub(crate) fn receiver_body(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    BodyExt::boxed(StreamBody::new(
        ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))),
    ))
}

/// A body written by `produce` on a blocking thread.
pub(crate) fn stream_body(
    produce: impl FnOnce(tokio::sync::mpsc::Sender<Bytes>) + Send + 'static,
) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::task::spawn_blocking(move || produce(tx));
    receiver_body(rx)
}

/// Answers a request under `/logs/` (authenticated and authorized already). `None` for the
/// node logs is enableSystemLogHandler off.
pub(crate) async fn serve(
    logs: Option<&NodeLogs>,
    method: &Method,
    path: &str,
    raw_query: &str,
    headers: &HeaderMap,
) -> Response<Body> {
    let Some(logs) = logs else {
        return go_error(StatusCode::METHOD_NOT_ALLOWED, "logs endpoint is disabled.");
    };
    if method != Method::GET {
        // go-restful's answer for a route with GET only.
        return Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header("Allow", "GET")
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(bytes_body("405: Method Not Allowed"))
            .expect("static response");
    }
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return go_error(StatusCode::NOT_FOUND, "404 page not found");
    };
    // Go hands the decoded path to the file server.
    let mut rest = percent_encoding::percent_decode_str(rest)
        .decode_utf8_lossy()
        .into_owned();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if logs.query {
        let params = crate::server::container_logs::parse_query(raw_query);
        match query::parse(&params) {
            Err(errors) => {
                return go_error(StatusCode::BAD_REQUEST, &query::aggregate(&errors));
            }
            Ok(Some(q)) => {
                if !(rest.is_empty() || rest == "/") {
                    return go_error(StatusCode::NOT_ACCEPTABLE, "path not allowed in query mode");
                }
                let root = logs.sources.root.clone();
                let q2 = q.clone();
                let errors = tokio::task::spawn_blocking(move || q2.validate(&root))
                    .await
                    .unwrap_or_default();
                if !errors.is_empty() {
                    return go_error(StatusCode::NOT_ACCEPTABLE, &query::aggregate(&errors));
                }
                if !q.services.is_empty() {
                    let gzip = header("Accept-Encoding").as_deref() == Some("gzip");
                    return journal::serve(q, logs.sources.clone(), gzip);
                }
                if let [file] = q.files.as_slice() {
                    // Windows clients may send backslashes; Go's ToSlash is a no-op here.
                    rest = file.clone();
                }
            }
            Ok(None) => {}
        }
    }
    files::serve(
        logs.sources.root.clone(),
        rest,
        raw_query.to_string(),
        header("If-Modified-Since"),
    )
    .await
}

#[cfg(test)]
mod tests;
