use super::*;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const PERIOD: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Served {
    status: u16,
    body: String,
    /// Values of X-Token of every request seen.
    tokens: Vec<Vec<String>>,
}

/// A one-route server on 127.0.0.1 whose answer the test changes as it goes.
async fn serve(state: Arc<Mutex<Served>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        let mut s = state.lock().unwrap();
                        let tokens = req
                            .headers()
                            .get_all("x-token")
                            .iter()
                            .map(|v| v.to_str().unwrap().to_string())
                            .collect();
                        s.tokens.push(tokens);
                        let response = Response::builder()
                            .status(s.status)
                            .body(Full::new(Bytes::from(s.body.clone())))
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/pods")
}

fn set(state: &Arc<Mutex<Served>>, status: u16, body: &str) {
    let mut s = state.lock().unwrap();
    s.status = status;
    s.body = body.to_string();
}

async fn next_update(rx: &mut mpsc::Receiver<SourceUpdate>) -> SourceUpdate {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an update within 10s")
        .expect("the source is running")
}

async fn assert_quiet(rx: &mut mpsc::Receiver<SourceUpdate>) {
    let extra = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(extra.is_err(), "unexpected update: {extra:?}");
}

fn names(update: &SourceUpdate) -> Vec<String> {
    update
        .pods
        .iter()
        .map(|p| p.pod.metadata.name.clone().unwrap())
        .collect()
}

const POD_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n";
const LIST_JSON: &str = r#"{"apiVersion":"v1","kind":"PodList","items":[
  {"metadata":{"name":"one"},"spec":{"containers":[{"name":"a","image":"busybox:1"}]}},
  {"metadata":{"name":"two","namespace":"kube-system"},"spec":{"containers":[{"name":"a","image":"busybox:1"}]}}
]}"#;

#[tokio::test]
async fn pod_then_pod_list_with_headers() {
    let state = Arc::new(Mutex::new(Served::default()));
    set(&state, 200, POD_YAML);
    let url = serve(state.clone()).await;
    let headers = BTreeMap::from([(
        "X-Token".to_string(),
        vec!["a".to_string(), "b".to_string()],
    )]);
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_http_source(url.clone(), headers, "node1".into(), PERIOD, tx);

    let first = next_update(&mut rx).await;
    assert_eq!(first.source, SourceKind::Http);
    assert_eq!(names(&first), vec!["web-node1"]);
    assert_eq!(first.pods[0].origin, url);
    let annotations = first.pods[0].pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["kubernetes.io/config.source"], "http");
    assert_eq!(
        first.pods[0].pod.metadata.uid.as_deref(),
        Some(annotations["kubernetes.io/config.hash"].as_str())
    );
    assert_eq!(state.lock().unwrap().tokens[0], vec!["a", "b"]);

    // Polling the same body sends nothing.
    assert_quiet(&mut rx).await;

    set(&state, 200, LIST_JSON);
    let list = next_update(&mut rx).await;
    assert_eq!(names(&list), vec!["one-node1", "two-node1"]);
    assert_eq!(
        list.pods[1].pod.metadata.namespace.as_deref(),
        Some("kube-system")
    );
    task.abort();
}

#[tokio::test]
async fn errors_keep_the_last_good_set() {
    let state = Arc::new(Mutex::new(Served::default()));
    set(&state, 200, LIST_JSON);
    let url = serve(state.clone()).await;
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_http_source(url, BTreeMap::new(), "node1".into(), PERIOD, tx);
    let first = next_update(&mut rx).await;
    assert_eq!(first.pods.len(), 2);

    set(&state, 500, "boom");
    assert_quiet(&mut rx).await;
    set(&state, 200, "apiVersion: v1\nkind: Pod\nspec: [\n");
    assert_quiet(&mut rx).await;
    // One invalid item fails the whole body, as upstream.
    set(
        &state,
        200,
        r#"{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"ok"},"spec":{"containers":[{"name":"a","image":"x"}]}},{"metadata":{"name":"Bad"},"spec":{"containers":[{"name":"a","image":"x"}]}}]}"#,
    );
    assert_quiet(&mut rx).await;
    // Back to the same body: the set did not change, so nothing is sent.
    set(&state, 200, LIST_JSON);
    assert_quiet(&mut rx).await;

    // An empty body is an empty set.
    set(&state, 200, "");
    assert!(next_update(&mut rx).await.pods.is_empty());
    task.abort();
}

#[tokio::test]
async fn no_update_before_the_first_good_poll() {
    // Nothing listens on this port once the listener is dropped.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/pods", listener.local_addr().unwrap());
    drop(listener);
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_http_source(url, BTreeMap::new(), "node1".into(), PERIOD, tx);
    assert_quiet(&mut rx).await;
    task.abort();
}

#[tokio::test]
async fn https_is_refused_clearly() {
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_http_source(
        "https://127.0.0.1:1/pods".into(),
        BTreeMap::new(),
        "node1".into(),
        PERIOD,
        tx,
    );
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the task ends")
        .unwrap();
    assert!(
        rx.recv().await.is_none(),
        "no update, and the sender is gone"
    );
    let source = HttpSource::new("https://h/p".into(), BTreeMap::new(), "n".into());
    assert_eq!(
        source.check_request().unwrap_err().to_string(),
        "GET https://h/p: HTTPS is not supported yet; use an http:// URL"
    );
}

#[test]
fn bad_header_names_are_reported() {
    let headers = BTreeMap::from([("bad header".to_string(), vec!["v".to_string()])]);
    let source = HttpSource::new("http://127.0.0.1/p".into(), headers, "n".into());
    let err = source.check_request().unwrap_err().to_string();
    assert!(err.contains("invalid header \"bad header\""), "{err}");
}
