//! A scripted API server for the node's unit tests: kube's client over a mocked tower
//! service, each request checked (method, path, body) and answered in turn.

use hyper::{Request, Response};
use kube::client::Body;
use serde_json::Value;
use tower_test::mock::{self, Handle};

pub(crate) type ApiHandle = Handle<Request<Body>, Response<Body>>;

pub(crate) fn client() -> (kube::Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// One request as the server saw it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub content_type: Option<String>,
    pub body: Value,
}

/// Takes the next request and answers it with `status` and `body`.
pub(crate) async fn answer(handle: &mut ApiHandle, status: u16, body: Value) -> Seen {
    answer_with(handle, status, |_| body).await
}

/// Takes the next request and answers it with `status` and what `reply` makes of the
/// request's body (an API server echoing a created object, say).
pub(crate) async fn answer_with(
    handle: &mut ApiHandle,
    status: u16,
    reply: impl FnOnce(&Value) -> Value,
) -> Seen {
    let (request, respond) = handle.next_request().await.expect("a request to the API");
    let method = request.method().to_string();
    let uri = request
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body_seen = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    let body = reply(&body_seen);
    respond.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    Seen {
        method,
        uri,
        content_type,
        body: body_seen,
    }
}

/// An API Status object for an error answer.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}
