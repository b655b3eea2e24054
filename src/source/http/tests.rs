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
    serve_with(state, None).await
}

/// `serve`, over TLS when `tls` is given (then the URL is https://).
async fn serve_with(state: Arc<Mutex<Served>>, tls: Option<tokio_rustls::TlsAcceptor>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = state.clone();
            let tls = tls.clone();
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
                match tls {
                    None => {
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    Some(tls) => {
                        // A client that refuses the certificate ends the handshake here.
                        let Ok(stream) = tls.accept(stream).await else {
                            return;
                        };
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
    format!("{scheme}://{addr}/pods")
}

/// A CA made for the test and a server certificate for 127.0.0.1 it signed: the acceptor
/// serving it, and the CA's certificate for a client's trust store.
fn test_tls() -> (
    tokio_rustls::TlsAcceptor,
    rustls::pki_types::CertificateDer<'static>,
) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "manifest-test-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_cert.der().clone(),
    )
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

/// An https:// URL whose server holds a certificate from a CA the agent does not trust is
/// refused with an error that says so (and no pods are taken); with the CA trusted the same
/// server's pods are taken, with the configured headers.
#[tokio::test]
async fn https_is_fetched_only_from_a_verified_server() {
    let state = Arc::new(Mutex::new(Served::default()));
    set(&state, 200, POD_YAML);
    let (acceptor, ca) = test_tls();
    let url = serve_with(state.clone(), Some(acceptor)).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let headers = BTreeMap::from([("X-Token".to_string(), vec!["t".to_string()])]);

    // The system's store (whatever this machine holds) cannot know the test's CA.
    let mut untrusted = HttpSource::with_roots(
        url.clone(),
        headers.clone(),
        "node1".into(),
        super::system_roots(),
    )
    .unwrap();
    let err = untrusted.poll().await.unwrap_err();
    assert!(matches!(err, FetchError::Certificate { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "GET {url}: the server's certificate is not trusted: UnknownIssuer"
        )),
        "{text}"
    );
    assert!(
        state.lock().unwrap().tokens.is_empty(),
        "no request went out"
    );

    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let mut trusted = HttpSource::with_roots(url, headers, "node1".into(), roots).unwrap();
    let pods = trusted.poll().await.unwrap().expect("a first set");
    let names: Vec<_> = pods
        .iter()
        .map(|p| p.pod.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, vec!["web-node1"]);
    assert_eq!(state.lock().unwrap().tokens, vec![vec!["t".to_string()]]);
}

/// An https:// URL no longer stops the source at start: it polls (and, with nothing there,
/// sends nothing).
#[tokio::test]
async fn https_url_starts_the_source() {
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_http_source(
        "https://127.0.0.1:1/pods".into(),
        BTreeMap::new(),
        "node1".into(),
        PERIOD,
        tx,
    );
    assert_quiet(&mut rx).await;
    assert!(!task.is_finished(), "the source keeps polling");
    task.abort();
}

fn plain(url: &str, headers: BTreeMap<String, Vec<String>>) -> HttpSource {
    HttpSource::with_roots(url.into(), headers, "n".into(), RootCertStore::empty()).unwrap()
}

#[test]
fn bad_header_names_are_reported() {
    let headers = BTreeMap::from([("bad header".to_string(), vec!["v".to_string()])]);
    let source = plain("http://127.0.0.1/p", headers);
    let err = source.check_request().unwrap_err().to_string();
    assert!(err.contains("invalid header \"bad header\""), "{err}");
}
