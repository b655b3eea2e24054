use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use hyper::{Request, Response};
use kube::client::Body;
use rcgen::KeyPair;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle};
use x509_parser::prelude::*;

use super::bootstrap::{client_config_valid_until, write_kubeconfig};
use super::csr::{self, Template};
use super::request::{self, Outcome, Submitted};
use super::rotation;
use super::store::{Store, CLIENT_PREFIX, SERVING_PREFIX};
use super::*;

/// A P-256 key made with openssl, and the name Go's crypto (x509.MarshalPKIXPublicKey,
/// sha512.New512_256, base64.RawURLEncoding) gives upstream's digestedName for it with
/// the client template of node-a: the reference the Rust name must match.
const FIXED_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgUwIdaPc0u/1PMsfW
oPQaRsnJtebvPKCHz1qldfkWuu2hRANCAARSFj6fQsjz+i5xIIBJ2v/nWtK0LlO8
qg6OGqm9I/tiqvdj2sGnlqHeyp070l9Q98DFYMIFqLEg08L8x+zTQG4u
-----END PRIVATE KEY-----
";
const FIXED_KEY_NAME: &str = "node-csr-PcyOSGCJw1YjuxtdaImxRKq_qTMqoyddU9S6R6Kdk_4";

fn parse_request(pem: &str) -> ((), Vec<u8>) {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
        .expect("a CERTIFICATE REQUEST block");
    ((), der.as_ref().to_vec())
}

#[test]
fn the_client_request_names_the_node_in_the_nodes_group_with_an_ecdsa_key() {
    let key = csr::new_key().unwrap();
    let template = Template::client("node-a");
    assert_eq!(
        template.signer,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(template.usages, ["digital signature", "client auth"]);
    let (_, der) = parse_request(&template.request_pem(&key).unwrap());
    let (_, req) = X509CertificationRequest::from_der(&der).unwrap();
    let info = &req.certification_request_info;
    let cn: Vec<_> = info
        .subject
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    let o: Vec<_> = info
        .subject
        .iter_organization()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cn, ["system:node:node-a"]);
    assert_eq!(o, ["system:nodes"]);
    assert_eq!(
        info.subject_pki.algorithm.algorithm,
        x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
    );
    assert_eq!(
        info.subject_pki.raw,
        key.public_key_der().as_slice(),
        "the request carries the key's public half"
    );
    // A client request names no host.
    assert!(req
        .requested_extensions()
        .is_none_or(|mut e| !e.any(|x| matches!(x, ParsedExtension::SubjectAlternativeName(_)))));
}

#[test]
fn the_serving_request_carries_the_node_names_and_addresses() {
    let key = csr::new_key().unwrap();
    let ip = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
    let template = Template::serving("node-a", vec!["node-a".into()], vec![ip]);
    assert_eq!(template.signer, "kubernetes.io/kubelet-serving");
    assert_eq!(template.usages, ["digital signature", "server auth"]);
    let (_, der) = parse_request(&template.request_pem(&key).unwrap());
    let (_, req) = X509CertificationRequest::from_der(&der).unwrap();
    let cn = req
        .certification_request_info
        .subject
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(cn, "system:node:node-a");
    let sans: Vec<String> = req
        .requested_extensions()
        .unwrap()
        .filter_map(|x| match x {
            ParsedExtension::SubjectAlternativeName(san) => Some(
                san.general_names
                    .iter()
                    .map(|n| match n {
                        GeneralName::DNSName(d) => format!("DNS:{d}"),
                        GeneralName::IPAddress(b) => format!("IP:{b:?}"),
                        other => format!("{other:?}"),
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(sans, ["DNS:node-a", "IP:[10, 1, 2, 3]"]);
}

#[test]
fn the_bootstrap_name_is_upstreams_digest_of_key_subject_and_usages() {
    let key = KeyPair::from_pem(FIXED_KEY).unwrap();
    let template = Template::client("node-a");
    assert_eq!(template.digested_name(&key), FIXED_KEY_NAME);
    // Another node or another key asks under another name.
    assert_ne!(
        Template::client("node-b").digested_name(&key),
        FIXED_KEY_NAME
    );
    let other = csr::new_key().unwrap();
    assert_ne!(template.digested_name(&other), FIXED_KEY_NAME);
}

/// A CA, and certificates it signs for requests, valid for the given span.
struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa { cert, key }
    }

    /// A client certificate of node-a for `key`.
    fn sign(&self, key: &KeyPair, not_before: SystemTime, not_after: SystemTime) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:node-a");
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        params.signed_by(key, &self.cert, &self.key).unwrap().pem()
    }
}

fn issued_pair(not_before: SystemTime, not_after: SystemTime) -> (String, String) {
    let ca = TestCa::new();
    let key = csr::new_key().unwrap();
    (ca.sign(&key, not_before, not_after), key.serialize_pem())
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn the_store_writes_timestamped_pairs_and_switches_the_current_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path(), CLIENT_PREFIX);
    assert!(store.current().unwrap().is_none());
    let now = chrono::Utc::now();
    let (cert, key) = issued_pair(at(1_800_000_000), at(1_800_003_600));
    let first = store
        .update(&cert, &key, "2026-12-03T22:00:01Z".parse().unwrap())
        .unwrap();
    assert_eq!(
        first,
        dir.path().join("kubelet-client-2026-12-03-22-00-01.pem")
    );
    let mode = std::fs::metadata(&first).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the file holds the private key");
    let current = dir.path().join("kubelet-client-current.pem");
    assert_eq!(store.current_path(), current);
    assert_eq!(std::fs::read_link(&current).unwrap(), first);
    let pair = store.current().unwrap().unwrap();
    assert_eq!(
        (pair.not_before, pair.not_after),
        (at(1_800_000_000), at(1_800_003_600))
    );
    assert_eq!(pair.key_pem, key);

    let (cert2, key2) = issued_pair(at(1_800_002_000), at(1_800_009_000));
    let second = store.update(&cert2, &key2, now).unwrap();
    assert_ne!(second, first);
    assert_eq!(std::fs::read_link(&current).unwrap(), second);
    assert!(first.exists(), "earlier pairs stay, as upstream's");
    assert_eq!(
        store.current().unwrap().unwrap().not_after,
        at(1_800_009_000)
    );
    assert!(!dir.path().join("kubelet-client-current.pem.tmp").exists());
}

#[test]
fn the_store_refuses_a_pair_that_would_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path(), SERVING_PREFIX);
    let (cert, _) = issued_pair(at(1_800_000_000), at(1_800_003_600));
    let err = store
        .update(&cert, "not a key", chrono::Utc::now())
        .unwrap_err();
    assert!(matches!(err, CertificateError::Invalid { .. }), "{err}");
    // A certificate issued for another key.
    let (_, other_key) = issued_pair(at(1_800_000_000), at(1_800_003_600));
    let err = store
        .update(&cert, &other_key, chrono::Utc::now())
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("private key does not match public key"),
        "{err}"
    );
    assert!(store.current().unwrap().is_none());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn rotation_falls_between_70_and_90_percent_of_the_lifetime() {
    let (nb, na) = (at(1_000_000), at(1_000_000 + 10_000));
    assert_eq!(rotation_deadline(nb, na, 0.0), at(1_000_000 + 7_000));
    assert_eq!(rotation_deadline(nb, na, 0.5), at(1_000_000 + 8_000));
    let top = rotation_deadline(nb, na, 0.999_999);
    assert!(top < at(1_000_000 + 9_000) && top > at(1_000_000 + 8_999));
    use rand::Rng;
    for _ in 0..1000 {
        let d = rotation_deadline(nb, na, rand::rng().random::<f64>());
        assert!(d >= at(1_007_000) && d < at(1_009_000), "{d:?}");
    }
    // A certificate whose notAfter precedes its notBefore is renewed at once.
    assert_eq!(rotation_deadline(na, nb, 0.3), na);
}

#[test]
fn a_kubeconfig_is_usable_until_its_client_certificate_expires() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    let now = SystemTime::now();
    assert_eq!(client_config_valid_until(&kubeconfig, now), None, "missing");

    let store = Store::new(dir.path(), CLIENT_PREFIX);
    let not_after = now + Duration::from_secs(3600);
    let (cert, key) = issued_pair(now - Duration::from_secs(60), not_after);
    store.update(&cert, &key, chrono::Utc::now()).unwrap();
    let cluster = kube::config::Cluster {
        server: Some("https://127.0.0.1:6443".into()),
        certificate_authority: Some("/etc/ca.crt".into()),
        ..Default::default()
    };
    write_kubeconfig(&kubeconfig, &cluster, &store.current_path()).unwrap();
    let valid = client_config_valid_until(&kubeconfig, now).unwrap();
    assert!(valid.duration_since(not_after).unwrap_or_default() < Duration::from_secs(1));
    assert_eq!(
        client_config_valid_until(&kubeconfig, not_after + Duration::from_secs(1)),
        None,
        "expired"
    );
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    assert_eq!(client_config_valid_until(&kubeconfig, now), None, "no user");
}

#[test]
fn the_written_kubeconfig_is_upstreams_and_points_at_the_current_pair() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/kubelet.conf");
    let pair = dir.path().join("pki/kubelet-client-current.pem");
    let cluster = kube::config::Cluster {
        server: Some("https://127.0.0.1:6443".into()),
        certificate_authority_data: Some("Q0EK".into()),
        ..Default::default()
    };
    write_kubeconfig(&path, &cluster, &pair).unwrap();
    let file = kube::config::Kubeconfig::read_from(&path).unwrap();
    assert_eq!(file.current_context.as_deref(), Some("default-context"));
    let context = file.contexts[0].context.as_ref().unwrap();
    assert_eq!(
        (
            context.cluster.as_str(),
            context.user.as_deref(),
            context.namespace.as_deref()
        ),
        ("default-cluster", Some("default-auth"), Some("default"))
    );
    let c = file.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(c.server.as_deref(), Some("https://127.0.0.1:6443"));
    assert_eq!(c.certificate_authority_data.as_deref(), Some("Q0EK"));
    let user = file.auth_infos[0].auth_info.as_ref().unwrap();
    let pair = pair.display().to_string();
    assert_eq!(user.client_certificate.as_deref(), Some(pair.as_str()));
    assert_eq!(user.client_key.as_deref(), Some(pair.as_str()));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

// --- the API calls, over a mocked API server ---

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn api() -> (kube::Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(service, "default"), handle)
}

/// Takes the next request, checks its method and path (the query left out), answers it.
async fn answer(
    handle: &mut ApiHandle,
    method: &str,
    path: &str,
    status: u16,
    body: Value,
) -> (String, Value) {
    answer_with(handle, method, path, status, |_| body).await
}

/// As `answer`, the reply made from the request's body (an API server echoing a created
/// object).
async fn answer_with(
    handle: &mut ApiHandle,
    method: &str,
    path: &str,
    status: u16,
    reply: impl FnOnce(&Value) -> Value,
) -> (String, Value) {
    let (request, respond) = handle.next_request().await.expect("a request");
    assert_eq!(request.method().as_str(), method, "{}", request.uri());
    assert_eq!(request.uri().path(), path);
    let query = request.uri().query().unwrap_or_default().to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let seen = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    let body = reply(&seen);
    respond.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    (query, seen)
}

/// Answers a watch with these events, newline-delimited.
async fn answer_watch(handle: &mut ApiHandle, events: &[Value]) -> String {
    let (request, respond) = handle.next_request().await.expect("a watch");
    let query = request.uri().query().unwrap_or_default().to_string();
    assert!(query.contains("watch=true"), "{query}");
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    respond.send_response(
        Response::builder()
            .body(Body::from(body.into_bytes()))
            .unwrap(),
    );
    query
}

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

fn csr_object(name: &str, uid: &str, status: Value) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "uid": uid, "resourceVersion": "7"},
        "spec": {"request": "", "signerName": csr::CLIENT_SIGNER},
        "status": status,
    })
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequestList",
           "metadata": {"resourceVersion": "8"}, "items": items})
}

#[tokio::test]
async fn a_request_is_created_as_upstreams_and_the_wait_returns_the_issued_certificate() {
    let (client, mut handle) = api();
    let key = KeyPair::from_pem(FIXED_KEY).unwrap();
    let template = Template::client("node-a");
    let pem = template.request_pem(&key).unwrap();
    let c = client.clone();
    let (t, p) = (template.clone(), pem.clone());
    let created =
        tokio::spawn(async move { request::create(&c, &t, &p, Some(FIXED_KEY_NAME)).await });
    let (_, body) = answer_with(&mut handle, "POST", CSRS, 201, |body| {
        let mut obj = body.clone();
        obj["metadata"]["uid"] = json!("u1");
        obj
    })
    .await;
    assert_eq!(
        created.await.unwrap().unwrap(),
        Submitted {
            name: FIXED_KEY_NAME.into(),
            uid: "u1".into()
        }
    );
    assert_eq!(body["metadata"]["name"], FIXED_KEY_NAME);
    assert_eq!(
        body["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        body["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    assert_eq!(body["spec"]["request"], b64(&pem));
    assert!(body["metadata"].get("generateName").is_none());

    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let waiter = tokio::spawn(async move {
        let submitted = Submitted {
            name: FIXED_KEY_NAME.into(),
            uid: "u1".into(),
        };
        request::wait(&client, &submitted, Duration::from_secs(60)).await
    });
    // The list finds it pending (approved, not yet signed); the watch brings the certificate.
    let approved = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    let (query, _) = answer(
        &mut handle,
        "GET",
        CSRS,
        200,
        list_of(vec![csr_object(FIXED_KEY_NAME, "u1", approved)]),
    )
    .await;
    assert!(
        query.contains(&format!("fieldSelector=metadata.name%3D{FIXED_KEY_NAME}")),
        "{query}"
    );
    let issued =
        json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": b64(cert)});
    answer_watch(
        &mut handle,
        &[json!({"type": "MODIFIED", "object": csr_object(FIXED_KEY_NAME, "u1", issued)})],
    )
    .await;
    assert_eq!(waiter.await.unwrap().unwrap(), cert);
}

#[tokio::test]
async fn renewals_are_named_by_the_api_and_an_existing_compatible_request_is_reused() {
    let (client, mut handle) = api();
    let key = csr::new_key().unwrap();
    let template = Template::client("node-a");
    let pem = template.request_pem(&key).unwrap();
    let (t, p) = (template.clone(), pem.clone());
    let c = client.clone();
    let renewal = tokio::spawn(async move { request::create(&c, &t, &p, None).await });
    // The API names it from generateName.
    let (_, body) = answer_with(&mut handle, "POST", CSRS, 201, |body| {
        let mut obj = body.clone();
        obj["metadata"]["name"] = json!("csr-7x2kq");
        obj["metadata"]["uid"] = json!("u2");
        obj
    })
    .await;
    assert_eq!(renewal.await.unwrap().unwrap().name, "csr-7x2kq");
    assert_eq!(body["metadata"]["generateName"], "csr-");
    assert!(body["metadata"].get("name").is_none());

    // The bootstrap's name taken already (a restart while waiting): the request in the API
    // is the same one, so it is waited for instead of failing.
    let (t, p) = (template.clone(), pem.clone());
    let c = client.clone();
    let again = tokio::spawn(async move { request::create(&c, &t, &p, Some("node-csr-x")).await });
    answer(
        &mut handle,
        "POST",
        CSRS,
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists"}),
    )
    .await;
    let mut existing = csr_object("node-csr-x", "u9", json!(null));
    existing["spec"] = json!({"request": b64(&pem), "signerName": csr::CLIENT_SIGNER, "usages": ["digital signature", "client auth"]});
    answer(
        &mut handle,
        "GET",
        &format!("{CSRS}/node-csr-x"),
        200,
        existing.clone(),
    )
    .await;
    assert_eq!(
        again.await.unwrap().unwrap(),
        Submitted {
            name: "node-csr-x".into(),
            uid: "u9".into()
        }
    );

    // One that asks for something else is not ours.
    let c = client.clone();
    let clash =
        tokio::spawn(async move { request::create(&c, &template, &pem, Some("node-csr-x")).await });
    answer(
        &mut handle,
        "POST",
        CSRS,
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists"}),
    )
    .await;
    existing["spec"]["usages"] = json!(["digital signature", "key encipherment", "client auth"]);
    answer(
        &mut handle,
        "GET",
        &format!("{CSRS}/node-csr-x"),
        200,
        existing,
    )
    .await;
    let err = clash.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "retrieved csr node-csr-x is not compatible: its usages differ"
    );
}

#[tokio::test]
async fn a_denied_request_ends_the_wait_with_upstreams_message() {
    let (client, mut handle) = api();
    let waiter = tokio::spawn(async move {
        let submitted = Submitted {
            name: "csr-abc".into(),
            uid: "u1".into(),
        };
        request::wait(&client, &submitted, Duration::from_secs(60)).await
    });
    answer(
        &mut handle,
        "GET",
        CSRS,
        200,
        list_of(vec![csr_object("csr-abc", "u1", json!(null))]),
    )
    .await;
    let denied = json!({"conditions": [{"type": "Denied", "status": "True", "reason": "NotMine", "message": "who are you"}]});
    answer_watch(
        &mut handle,
        &[json!({"type": "MODIFIED", "object": csr_object("csr-abc", "u1", denied)})],
    )
    .await;
    let err = waiter.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "certificate signing request csr-abc is denied, reason: NotMine, message: who are you"
    );
}

#[tokio::test]
async fn a_request_recreated_under_the_same_name_is_not_waited_for() {
    let (client, mut handle) = api();
    let waiter = tokio::spawn(async move {
        let submitted = Submitted {
            name: "node-csr-x".into(),
            uid: "mine".into(),
        };
        request::wait(&client, &submitted, Duration::from_secs(60)).await
    });
    let cert = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n";
    let issued =
        json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": b64(cert)});
    // Someone else's request of that name, issued: ignored.
    answer(
        &mut handle,
        "GET",
        CSRS,
        200,
        list_of(vec![csr_object("node-csr-x", "theirs", issued.clone())]),
    )
    .await;
    answer_watch(
        &mut handle,
        &[json!({"type": "MODIFIED", "object": csr_object("node-csr-x", "mine", issued)})],
    )
    .await;
    assert_eq!(waiter.await.unwrap().unwrap(), cert);
}

#[tokio::test(start_paused = true)]
async fn the_wait_gives_up_after_its_timeout() {
    let (client, mut handle) = api();
    let waiter = tokio::spawn(async move {
        let submitted = Submitted {
            name: "csr-slow".into(),
            uid: "u1".into(),
        };
        request::wait(&client, &submitted, Duration::from_secs(900)).await
    });
    answer(
        &mut handle,
        "GET",
        CSRS,
        200,
        list_of(vec![csr_object("csr-slow", "u1", json!(null))]),
    )
    .await;
    // The watch stays open with nothing in it: keep the request unanswered.
    let (_watch, _respond) = handle.next_request().await.unwrap();
    let err = waiter.await.unwrap().unwrap_err();
    assert!(matches!(err, CertificateError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("csr-slow"), "{err}");
}

#[test]
fn the_outcome_needs_approval_and_a_certificate() {
    let csr = |status: Value| -> k8s_openapi::api::certificates::v1::CertificateSigningRequest {
        serde_json::from_value(csr_object("c", "u", status)).unwrap()
    };
    assert_eq!(request::outcome(&csr(json!(null))), Outcome::Pending);
    assert_eq!(
        request::outcome(&csr(
            json!({"conditions": [{"type": "Approved", "status": "True"}]})
        )),
        Outcome::Pending,
        "approved, not yet signed"
    );
    assert_eq!(
        request::outcome(&csr(json!({"certificate": b64("x")}))),
        Outcome::Pending,
        "a certificate without approval is not trusted"
    );
    assert_eq!(
        request::outcome(&csr(
            json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": b64("x")})
        )),
        Outcome::Issued("x".into())
    );
    assert_eq!(
        request::outcome(&csr(
            json!({"conditions": [{"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": "bad"}]})
        )),
        Outcome::Failed {
            reason: "SignerValidationFailure".into(),
            message: "bad".into()
        }
    );
}

/// A public key taken from a request, for the test CA to sign (rcgen signs for any key).
struct RequestedKey(Vec<u8>);

impl rcgen::PublicKeyData for RequestedKey {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }
    fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// The public key of a base64 request PEM as the API received it.
fn requested_key(request_b64: &str) -> RequestedKey {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(request_b64)
        .unwrap();
    let (_, der) = parse_request(std::str::from_utf8(&pem).unwrap());
    let (_, req) = X509CertificationRequest::from_der(&der).unwrap();
    RequestedKey(
        req.certification_request_info
            .subject_pki
            .subject_public_key
            .data
            .to_vec(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_pair_is_renewed_at_its_deadline_with_a_new_key_and_the_hook_runs() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path(), CLIENT_PREFIX);
    // 1000 s of life, 10 s gone: the deadline is 690 to 890 s away.
    let now = SystemTime::now();
    let ca = TestCa::new();
    let old_key = csr::new_key().unwrap();
    let old = ca.sign(
        &old_key,
        now - Duration::from_secs(10),
        now + Duration::from_secs(990),
    );
    store
        .update(&old, &old_key.serialize_pem(), chrono::Utc::now())
        .unwrap();

    let (client, mut handle) = api();
    let reloads = Arc::new(AtomicUsize::new(0));
    let counter = reloads.clone();
    let rotation = rotation::Rotation {
        kind: "client",
        store: store.clone(),
        template: Template::client("node-a"),
        client,
        after: Some(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        })),
    };
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(rotation.run());

    let (_, body) = answer_with(&mut handle, "POST", CSRS, 201, |body| {
        let mut obj = body.clone();
        obj["metadata"]["name"] = json!("csr-r1");
        obj["metadata"]["uid"] = json!("u1");
        obj
    })
    .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(680) && waited <= Duration::from_secs(900),
        "renewed after {waited:?}"
    );
    assert_eq!(body["metadata"]["generateName"], "csr-");
    let new_key = requested_key(body["spec"]["request"].as_str().unwrap());
    assert_ne!(
        new_key.0,
        old_key.public_key_raw(),
        "a renewal asks with a new key"
    );
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.not_before = now.into();
    params.not_after = (now + Duration::from_secs(5000)).into();
    let issued = params.signed_by(&new_key, &ca.cert, &ca.key).unwrap().pem();
    let status = json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": b64(&issued)});
    answer(
        &mut handle,
        "GET",
        CSRS,
        200,
        list_of(vec![csr_object("csr-r1", "u1", status)]),
    )
    .await;

    // The new pair lands in the store and the hook runs once; the next deadline is far.
    for _ in 0..100 {
        if reloads.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 1);
    // The client TTL gauge follows the new pair once the manager reads it back: about
    // 5000 s (whole seconds; the wall clock moved a little since).
    let ttl = || {
        crate::metrics::registry()
            .gather()
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_ttl_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
    };
    for _ in 0..100 {
        if ttl().is_some_and(|t| t > 1000.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = ttl().expect("the client TTL gauge is served once a client pair rotates");
    assert!(left > 4900.0 && left <= 5000.0, "client TTL {left}");
    assert!(crate::metrics::registry()
        .gather()
        .contains("# TYPE kubelet_certificate_manager_client_expiration_renew_errors counter\n"));
    let current = store.current().unwrap().unwrap();
    assert_eq!(
        current.not_after,
        at((now + Duration::from_secs(5000))
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs())
    );
    task.abort();
}
