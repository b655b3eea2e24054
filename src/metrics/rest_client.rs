//! client-go's rest_client_* families for every request the agent's API client makes, taken
//! by a tower layer around kube's service stack (`api_client` adds it) instead of at
//! each call site:
//! - `rest_client_requests_total{code,host,method}` for each response (the status code) or
//!   failure without one (`<error>`), watches included, as client-go counts them;
//! - `rest_client_request_duration_seconds{host,verb}` and
//!   `rest_client_response_size_bytes{host,verb}` once the response body is read (or
//!   dropped), and `rest_client_request_size_bytes{host,verb}` for a body of known length;
//!   none of the three for watches, which client-go's Watch does not observe either.
//!
//! `host` is the API server's host:port, `method` and `verb` the HTTP method. The layer sits
//! outside kube's retry layer, so a request retried on 429/503/504 counts once, with its
//! last answer (client-go counts every attempt).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use hyper::body::{Body, Frame, SizeHint};
use hyper::http;

use super::{kubelet, Counter, Histogram, Registry, Scalar, Stability};

/// The families, registered with the main registry.
pub struct Families {
    pub requests: Arc<Counter>,
    pub duration: Arc<Histogram>,
    pub request_size: Arc<Histogram>,
    pub response_size: Arc<Histogram>,
}

const SIZE_BUCKETS: [f64; 11] = [
    64.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0,
];

impl Families {
    pub(super) fn register(r: &Registry) -> Families {
        Families {
            requests: r.register(Arc::new(Scalar::counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                Stability::Alpha,
                &["code", "method", "host"],
            ))),
            duration: r.register(Arc::new(Histogram::new(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
                Stability::Alpha,
                &["verb", "host"],
                vec![
                    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
                ],
            ))),
            request_size: r.register(Arc::new(Histogram::new(
                "rest_client_request_size_bytes",
                "Request size in bytes. Broken down by verb and host.",
                Stability::Alpha,
                &["verb", "host"],
                SIZE_BUCKETS.to_vec(),
            ))),
            response_size: r.register(Arc::new(Histogram::new(
                "rest_client_response_size_bytes",
                "Response size in bytes. Broken down by verb and host.",
                Stability::Alpha,
                &["verb", "host"],
                SIZE_BUCKETS.to_vec(),
            ))),
        }
    }
}

/// The layer: `host` is what the series name the API server by (its URL's host:port).
#[derive(Clone, Debug)]
pub struct RestClientMetricsLayer {
    host: Arc<str>,
}

impl RestClientMetricsLayer {
    pub fn new(host: impl Into<Arc<str>>) -> RestClientMetricsLayer {
        RestClientMetricsLayer { host: host.into() }
    }
}

impl<S> tower::Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetrics<S>;

    fn layer(&self, inner: S) -> RestClientMetrics<S> {
        RestClientMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RestClientMetrics<S> {
    inner: S,
    host: Arc<str>,
}

/// A watch request (`?watch=true`, `watch=1`): counted, never timed.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

impl<S, ReqB, ResB> tower::Service<http::Request<ReqB>> for RestClientMetrics<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
    ReqB: Body,
    ResB: Body<Data = Bytes> + Unpin,
{
    type Response = http::Response<MeasuredBody<ResB>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqB>) -> Self::Future {
        let method: Arc<str> = request.method().as_str().into();
        let host = self.host.clone();
        let watch = is_watch(request.uri());
        if !watch {
            if let Some(size) = request.body().size_hint().exact() {
                kubelet()
                    .rest_client
                    .request_size
                    .observe(&[&method, &host], size as f64);
            }
        }
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            match response.await {
                Ok(response) => {
                    let code = response.status().as_u16().to_string();
                    kubelet().rest_client.requests.inc(&[&code, &method, &host]);
                    let pending = (!watch).then_some(Pending {
                        method,
                        host,
                        started,
                    });
                    Ok(response.map(|inner| MeasuredBody {
                        inner,
                        bytes: 0,
                        pending,
                    }))
                }
                Err(e) => {
                    let m = &kubelet().rest_client;
                    m.requests.inc(&["<error>", &method, &host]);
                    if !watch {
                        m.duration
                            .observe(&[&method, &host], started.elapsed().as_secs_f64());
                    }
                    Err(e)
                }
            }
        })
    }
}

/// What is observed once the body is done.
struct Pending {
    method: Arc<str>,
    host: Arc<str>,
    started: Instant,
}

/// The response body, counting its bytes; at its end (or when it is dropped unread) the
/// request's duration and the response size are observed, as client-go's are after it
/// read the whole body.
pub struct MeasuredBody<B> {
    inner: B,
    bytes: u64,
    pending: Option<Pending>,
}

impl<B> MeasuredBody<B> {
    fn finish(&mut self) {
        if let Some(p) = self.pending.take() {
            let m = &kubelet().rest_client;
            m.duration
                .observe(&[&p.method, &p.host], p.started.elapsed().as_secs_f64());
            m.response_size
                .observe(&[&p.method, &p.host], self.bytes as f64);
        }
    }
}

impl<B> Drop for MeasuredBody<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for MeasuredBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use tower::{Layer, Service, ServiceExt};

    /// A stand-in API server: answers `status` with `body`, or fails without an answer.
    struct FakeServer {
        status: Option<u16>,
        body: &'static str,
    }

    fn server(status: Option<u16>, body: &'static str) -> FakeServer {
        FakeServer { status, body }
    }

    impl Service<http::Request<Full<Bytes>>> for FakeServer {
        type Response = http::Response<Full<Bytes>>;
        type Error = std::io::Error;
        type Future = BoxFuture<'static, Result<Self::Response, std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Full<Bytes>>) -> Self::Future {
            let (status, body) = (self.status, self.body);
            Box::pin(async move {
                match status {
                    Some(code) => Ok(http::Response::builder()
                        .status(code)
                        .body(Full::new(Bytes::from_static(body.as_bytes())))
                        .unwrap()),
                    None => Err(std::io::Error::other("connection refused")),
                }
            })
        }
    }

    fn get(uri: &str) -> http::Request<Full<Bytes>> {
        http::Request::get(uri)
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    #[tokio::test]
    async fn answers_are_counted_by_code_and_timed_once_read_watches_only_counted() {
        let host = "test-rest-client:6443";
        let m = &kubelet().rest_client;
        let count = |code: &str, method: &str| m.requests.get(&[code, method, host]);

        let mut forbidden = RestClientMetricsLayer::new(host).layer(server(Some(403), "{}"));
        let answer = forbidden
            .ready()
            .await
            .unwrap()
            .call(get("/api/v1/nodes/n"))
            .await
            .unwrap();
        assert_eq!(count("403", "GET"), Some(1.0));
        assert_eq!(m.duration.totals(&["GET", host]), None, "timed once read");
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}");
        assert_eq!(m.duration.totals(&["GET", host]).map(|t| t.0), Some(1));
        assert_eq!(m.response_size.totals(&["GET", host]), Some((1, 2.0)));

        let mut refused = RestClientMetricsLayer::new(host).layer(server(None, ""));
        let post = http::Request::post("/api/v1/namespaces/default/events")
            .body(Full::new(Bytes::from_static(b"{\"kind\":\"Event\"}")))
            .unwrap();
        assert!(refused.ready().await.unwrap().call(post).await.is_err());
        assert_eq!(count("<error>", "POST"), Some(1.0));
        assert_eq!(m.request_size.totals(&["POST", host]), Some((1, 16.0)));

        let mut ok = RestClientMetricsLayer::new(host).layer(server(Some(200), "{}"));
        let watch = ok
            .ready()
            .await
            .unwrap()
            .call(get("/api/v1/pods?fieldSelector=x&watch=true"))
            .await
            .unwrap();
        drop(watch);
        assert_eq!(count("200", "GET"), Some(1.0));
        assert_eq!(
            m.duration.totals(&["GET", host]).map(|t| t.0),
            Some(1),
            "a watch is not timed"
        );

        let text = crate::metrics::registry().gather();
        assert!(text.contains(&format!(
            "rest_client_requests_total{{code=\"403\",host=\"{host}\",method=\"GET\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "rest_client_request_duration_seconds_bucket{{host=\"{host}\",verb=\"GET\",le=\"0.005\"}}"
        )));
        assert!(text.contains("# TYPE rest_client_request_duration_seconds histogram\n"));
        assert!(text.contains(&format!(
            "rest_client_response_size_bytes_bucket{{host=\"{host}\",verb=\"GET\",le=\"64\"}} 1\n"
        )));
        assert!(text.contains(
            "# HELP rest_client_requests_total [ALPHA] Number of HTTP requests, partitioned by status code, method, and host.\n"
        ));
    }
}
