//! The agent's API server client: one `kube::Client` built from `--kubeconfig`. kube-client
//! reads the kubeconfig (current context, `*-data` fields, files relative to the kubeconfig's
//! folder, tokens, client certificates, exec plugins) and speaks TLS with rustls; this module
//! only names the file at fault and carries the two review calls the auth webhooks need.
//! Cluster mode (pod source, node status, lease) shares the same client. Every request is
//! counted and timed for /metrics by a layer on the client's stack
//! (`metrics::rest_client`: client-go's rest_client_* series).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// How long one review call may take: upstream's webhook clients use 10 s as well, and a
/// request to the kubelet waits on the answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error("kubeconfig {}: user {user:?}: tokenFile {}: {source}", path.display(), file.display())]
    TokenFile {
        path: PathBuf,
        user: String,
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig {}: cannot build a client: {source}", path.display())]
    Client {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
    #[error("{what} at {server}: {source}")]
    Request {
        what: &'static str,
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what} at {server}: no answer within {timeout:?}")]
    Timeout {
        what: &'static str,
        server: String,
        timeout: Duration,
    },
}

/// The API server client, cheap to clone (kube's client is a shared tower service).
#[derive(Clone)]
pub struct ApiClient {
    client: kube::Client,
    /// The server URL, for error messages.
    server: String,
    /// Set when the client's credentials can change under it (a rotated client certificate).
    reloadable: Option<Reloadable>,
}

/// The client behind a reloadable `ApiClient`, rebuilt from the kubeconfig on `reload`.
#[derive(Clone)]
struct Reloadable {
    kubeconfig: PathBuf,
    current: Arc<RwLock<kube::Client>>,
}

/// A tower service that sends each request through the current inner client: everything
/// holding the outer client (watchers, the status loop, the recorder) moves to the new
/// credentials at its next request, while requests already under way finish on the old
/// connections. kube's `send` hands back the inner client's own errors unchanged.
#[derive(Clone)]
struct CurrentClient(Arc<RwLock<kube::Client>>);

impl tower_service::Service<hyper::Request<kube::client::Body>> for CurrentClient {
    type Response = hyper::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<kube::client::Body>) -> Self::Future {
        let client = match self.0.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        Box::pin(async move { client.send(request).await })
    }
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiClient({})", self.server)
    }
}

impl ApiClient {
    /// Builds the client from the kubeconfig's current context. Needs a tokio runtime (the
    /// client's buffer task is spawned on it).
    pub async fn from_kubeconfig(path: &Path) -> Result<ApiClient, ApiError> {
        let (client, server, _) = Self::build(path).await?;
        Ok(ApiClient {
            client,
            server,
            reloadable: None,
        })
    }

    /// As `from_kubeconfig`, for credentials that change: `reload` reads the kubeconfig (and
    /// the files it names, such as `kubelet-client-current.pem`) again and new requests use
    /// what it says.
    pub async fn from_kubeconfig_reloadable(path: &Path) -> Result<ApiClient, ApiError> {
        let (inner, server, namespace) = Self::build(path).await?;
        let current = Arc::new(RwLock::new(inner));
        Ok(ApiClient {
            client: kube::Client::new(CurrentClient(current.clone()), namespace),
            server,
            reloadable: Some(Reloadable {
                kubeconfig: path.to_path_buf(),
                current,
            }),
        })
    }

    /// Rebuilds the client from its kubeconfig (a reloadable client; others have nothing to
    /// reload). On an error the old client stays.
    pub async fn reload(&self) -> Result<(), ApiError> {
        let Some(r) = &self.reloadable else {
            return Ok(());
        };
        let (fresh, _, _) = Self::build(&r.kubeconfig).await?;
        match r.current.write() {
            Ok(mut c) => *c = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(())
    }

    /// The client, its server URL and default namespace.
    async fn build(path: &Path) -> Result<(kube::Client, String, String), ApiError> {
        let kubeconfig = |source| ApiError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        };
        let mut file = Kubeconfig::read_from(path).map_err(kubeconfig)?;
        for user in file.auth_infos.iter_mut() {
            if let Some(info) = user.auth_info.as_mut() {
                trim_token_file(path, &user.name, info)?;
            }
        }
        let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
            .await
            .map_err(kubeconfig)?;
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        let server = config.cluster_url.to_string();
        let namespace = config.default_namespace.clone();
        // client-go's rest_client_* series name the server by its host:port.
        let host = config
            .cluster_url
            .authority()
            .map_or_else(|| "none".to_string(), |a| a.to_string());
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|source| ApiError::Client {
                path: path.to_path_buf(),
                source,
            })?
            // Outermost, so every call of every holder of the client is counted once.
            .with_layer(&crate::metrics::rest_client::RestClientMetricsLayer::new(
                host,
            ))
            .build();
        Ok((client, server, namespace))
    }

    /// The shared client, for the parts of cluster mode that watch and write objects.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Creates a review object (TokenReview, SubjectAccessReview: they are never stored, the
    /// answer is the object with its status filled in) within the request deadline.
    async fn create<K>(&self, what: &'static str, review: &K) -> Result<K, ApiError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), review))
            .await
        {
            Ok(answer) => answer.map_err(|source| ApiError::Request {
                what,
                server: self.server.clone(),
                source,
            }),
            Err(_) => Err(ApiError::Timeout {
                what,
                server: self.server.clone(),
                timeout: REQUEST_TIMEOUT,
            }),
        }
    }
}

/// client-go trims the whitespace around a `tokenFile`'s token; kube-client sends the file
/// as it is, and a token file written with a trailing newline (by `echo` or a shell
/// redirect) then makes every request fail with "invalid bearer token". Such a token is read
/// here, trimmed and put inline. The price: kube-client re-reads a token file every minute,
/// an inline token never, so a rotated token file needs a restart when it ends in whitespace;
/// files without it are left to kube-client and keep rotating.
fn trim_token_file(
    kubeconfig: &Path,
    user: &str,
    info: &mut kube::config::AuthInfo,
) -> Result<(), ApiError> {
    use secrecy::ExposeSecret;
    if info
        .token
        .as_ref()
        .is_some_and(|t| !t.expose_secret().is_empty())
    {
        // An inline token wins over the file, in client-go and kube-client alike.
        return Ok(());
    }
    let Some(file) = &info.token_file else {
        return Ok(());
    };
    let text = std::fs::read_to_string(file).map_err(|source| ApiError::TokenFile {
        path: kubeconfig.to_path_buf(),
        user: user.to_string(),
        file: PathBuf::from(file),
        source,
    })?;
    let trimmed = text.trim();
    if trimmed.len() != text.len() {
        info.token = Some(secrecy::SecretString::from(trimmed.to_string()));
        info.token_file = None;
    }
    Ok(())
}

/// The two reviews the main server's webhooks ask the API server for; a trait so the auth
/// logic is tested against scripted answers.
pub trait ReviewClient: Send + Sync {
    fn token_review(&self, review: TokenReview) -> BoxFuture<'_, Result<TokenReview, ApiError>>;
    fn subject_access_review(
        &self,
        review: SubjectAccessReview,
    ) -> BoxFuture<'_, Result<SubjectAccessReview, ApiError>>;
}

impl ReviewClient for ApiClient {
    fn token_review(&self, review: TokenReview) -> BoxFuture<'_, Result<TokenReview, ApiError>> {
        Box::pin(async move { self.create("TokenReview", &review).await })
    }

    fn subject_access_review(
        &self,
        review: SubjectAccessReview,
    ) -> BoxFuture<'_, Result<SubjectAccessReview, ApiError>> {
        Box::pin(async move { self.create("SubjectAccessReview", &review).await })
    }
}

/// Any server certificate, signatures still checked: HTTPS probes and hooks run without
/// verification, as upstream's do.
#[derive(Debug)]
pub(crate) struct NoServerVerification(pub(crate) WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use k8s_openapi::api::authentication::v1::TokenReviewSpec;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    use serde_json::{json, Value};

    /// An HTTPS server on loopback that answers every POST the way the API server answers a
    /// review: the posted object echoed with a status. Returns its URL, the PEM of its CA
    /// and the requests it saw (path, Authorization header).
    async fn review_server(
        status: Value,
    ) -> (String, String, Arc<std::sync::Mutex<Vec<(String, String)>>>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, seen, status) = (acceptor.clone(), seen2.clone(), status.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (seen, status) = (seen.clone(), status.clone());
                            async move {
                                let auth = req
                                    .headers()
                                    .get("authorization")
                                    .map(|v| v.to_str().unwrap().to_string())
                                    .unwrap_or_default();
                                seen.lock()
                                    .unwrap()
                                    .push((req.uri().path().to_string(), auth));
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let mut review: Value = serde_json::from_slice(&body).unwrap();
                                review["status"] = status;
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from(review.to_string()),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        (format!("https://{addr}"), cert.pem(), seen)
    }

    #[tokio::test]
    async fn reviews_go_to_the_api_paths_with_the_kubeconfig_credentials() {
        let (url, ca_pem, seen) =
            review_server(json!({"authenticated": true, "user": {"username": "bob"}})).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca_pem).unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let path = dir.path().join("kubeconfig");
        // Relative file paths are relative to the kubeconfig's folder, as in client-go; the
        // current context picks the second cluster.
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
                 clusters:\n- name: a\n  cluster: {{server: https://127.0.0.1:1}}\n\
                 - name: c\n  cluster: {{server: \"{url}\", certificate-authority: ca.crt}}\n\
                 users:\n- name: u\n  user: {{tokenFile: token}}\n\
                 contexts:\n- name: b\n  context: {{cluster: c, user: u}}\n"
            ),
        )
        .unwrap();
        let client = ApiClient::from_kubeconfig(&path).await.unwrap();
        let answer = client
            .token_review(TokenReview {
                spec: TokenReviewSpec {
                    token: Some("t".into()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .await
            .unwrap();
        let status = answer.status.unwrap();
        assert_eq!(status.authenticated, Some(true));
        assert_eq!(status.user.unwrap().username.as_deref(), Some("bob"));
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            [(
                "/apis/authentication.k8s.io/v1/tokenreviews".to_string(),
                "Bearer s3cret".to_string()
            )]
        );
        client
            .subject_access_review(SubjectAccessReview::default())
            .await
            .unwrap();
        assert_eq!(
            seen.lock().unwrap()[1].0,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        );
        // Both calls went through the metrics layer, named by the server's host:port.
        let host = url.trim_start_matches("https://");
        let requests = &crate::metrics::kubelet().rest_client.requests;
        assert_eq!(requests.get(&["200", "POST", host]), Some(2.0));
        assert!(crate::metrics::registry().gather().contains(&format!(
            "rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"POST\"}} 2\n"
        )));
    }

    #[test]
    fn token_files_are_trimmed_inline_and_clean_ones_left_to_rotate() {
        use secrecy::ExposeSecret;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let (clean, padded) = (dir.path().join("clean"), dir.path().join("padded"));
        std::fs::write(&clean, "abc").unwrap();
        std::fs::write(&padded, " abc\n").unwrap();
        let info = |file: &Path| kube::config::AuthInfo {
            token_file: Some(file.to_string_lossy().into_owned()),
            ..Default::default()
        };

        let mut kept = info(&clean);
        trim_token_file(&kubeconfig, "u", &mut kept).unwrap();
        assert!(kept.token.is_none() && kept.token_file.is_some());

        let mut inlined = info(&padded);
        trim_token_file(&kubeconfig, "u", &mut inlined).unwrap();
        assert_eq!(inlined.token.unwrap().expose_secret(), "abc");
        assert!(inlined.token_file.is_none());

        let mut missing = info(&dir.path().join("gone"));
        let err = trim_token_file(&kubeconfig, "u", &mut missing)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("user \"u\": tokenFile") && err.contains("gone"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn errors_name_the_kubeconfig_and_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let err = ApiClient::from_kubeconfig(&path).await.unwrap_err();
        assert!(matches!(err, ApiError::Kubeconfig { .. }), "{err}");
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");

        // A CA file that is not there: named, with the kubeconfig.
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n\
             clusters:\n- name: c\n  cluster: {server: https://127.0.0.1:1, certificate-authority: missing.crt}\n\
             users:\n- name: u\n  user: {}\n\
             contexts:\n- name: t\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let err = ApiClient::from_kubeconfig(&path).await.unwrap_err();
        let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("kubeconfig"), "{text}");
        assert!(text.contains("certificate authority"), "{text}");

        // A server that refuses connections: the call fails with the server named, and the
        // client itself stays usable.
        let (_url, ca_pem, _) = review_server(json!({})).await;
        std::fs::write(dir.path().join("ca.crt"), ca_pem).unwrap();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: t\n\
                 clusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:{closed_port}\", certificate-authority: ca.crt}}\n\
                 users:\n- name: u\n  user: {{}}\n\
                 contexts:\n- name: t\n  context: {{cluster: c, user: u}}\n"
            ),
        )
        .unwrap();
        let client = ApiClient::from_kubeconfig(&path).await.unwrap();
        let err = client
            .subject_access_review(SubjectAccessReview::default())
            .await
            .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "SubjectAccessReview at https://127.0.0.1:{closed_port}"
            )),
            "{err}"
        );
        // No answer: counted as client-go counts it, with no code.
        let requests = &crate::metrics::kubelet().rest_client.requests;
        let host = format!("127.0.0.1:{closed_port}");
        assert!(requests.get(&["<error>", "POST", &host]) >= Some(1.0));
    }

    /// A CA and a certificate it signs for `cn` (a client) or for 127.0.0.1 (a server).
    fn signed(
        ca: &rcgen::Certificate,
        ca_key: &rcgen::KeyPair,
        cn: Option<&str>,
    ) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(match cn {
            Some(_) => vec![],
            None => vec!["127.0.0.1".to_string()],
        })
        .unwrap();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        }
        let cert = params.signed_by(&key, ca, ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// An HTTPS server that requires a client certificate from `ca` and answers each
    /// TokenReview with the CN of the certificate its connection presented.
    async fn whoami_server(ca: &rcgen::Certificate, ca_key: &rcgen::KeyPair) -> String {
        let (cert, key) = signed(ca, ca_key, None);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
                    let (_, parsed) = x509_parser::parse_x509_certificate(&peer).unwrap();
                    let cn = parsed
                        .subject()
                        .iter_common_name()
                        .next()
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string();
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let cn = cn.clone();
                            async move {
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let mut review: Value = serde_json::from_slice(&body).unwrap();
                                review["status"] =
                                    json!({"authenticated": true, "user": {"username": cn}});
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from(review.to_string()),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        format!("https://{addr}")
    }

    async fn who(client: &kube::Client) -> String {
        let api: Api<TokenReview> = Api::all(client.clone());
        let answer = api
            .create(&PostParams::default(), &TokenReview::default())
            .await
            .unwrap();
        answer.status.unwrap().user.unwrap().username.unwrap()
    }

    #[tokio::test]
    async fn a_reloaded_client_presents_the_rotated_certificate_to_every_holder() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let url = whoami_server(&ca, &ca_key).await;

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        // The bootstrap's layout: certificate and key in one pair file the kubeconfig names.
        let pair = dir.path().join("kubelet-client-current.pem");
        let write_pair = |cn: &str| {
            let (cert, key) = signed(&ca, &ca_key, Some(cn));
            std::fs::write(&pair, format!("{cert}{key}")).unwrap();
        };
        write_pair("system:node:old");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: t\n\
                 clusters:\n- name: c\n  cluster: {{server: \"{url}\", certificate-authority: ca.crt}}\n\
                 users:\n- name: u\n  user: {{client-certificate: {p}, client-key: {p}}}\n\
                 contexts:\n- name: t\n  context: {{cluster: c, user: u}}\n",
                p = pair.display()
            ),
        )
        .unwrap();
        let api = ApiClient::from_kubeconfig_reloadable(&path).await.unwrap();
        // What the node's parts hold: clones of the one client, taken before any rotation.
        let held = api.client().clone();
        assert_eq!(who(&held).await, "system:node:old");

        // A new pair on disk changes nothing until the client reloads...
        write_pair("system:node:new");
        assert_eq!(who(&held).await, "system:node:old");
        // ...and then every holder's next request uses it, no restart.
        api.reload().await.unwrap();
        assert_eq!(who(&held).await, "system:node:new");
        assert_eq!(who(api.client()).await, "system:node:new");

        // A pair that does not load keeps the client on the last good one.
        std::fs::write(&pair, "junk").unwrap();
        assert!(api.reload().await.is_err());
        assert_eq!(who(&held).await, "system:node:new");
    }
}
