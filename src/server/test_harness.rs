//! An in-process main server for tests: certificates made on the spot, the server on a
//! loopback port, and a TLS client with or without a client certificate. No root needed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::connections::ConnectionLimits;
use super::{MainServer, ServerState};
use crate::config::{AuthorizationMode, Config};

/// A CA that issues certificates.
pub(crate) struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    pub(crate) fn pem(&self) -> String {
        self.cert.pem()
    }

    /// (certificate PEM, key PEM).
    pub(crate) fn issue(&self, cn: &str, san: &str, usage: ExtendedKeyUsagePurpose) -> Identity {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec![san.to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        Identity {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    pub(crate) fn client(&self, cn: &str) -> Identity {
        self.issue(cn, "client", ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// A certificate and its key, as PEM.
#[derive(Clone)]
pub(crate) struct Identity {
    pub cert: String,
    pub key: String,
}

/// A main server on 127.0.0.1 with x509 authentication against `client_ca` (the file at
/// `ca_path`), anonymous access off, and AlwaysAllow authorization.
pub(crate) struct MainUnderTest {
    pub addr: SocketAddr,
    pub ca_path: PathBuf,
    serving_ca: Ca,
    _dir: tempfile::TempDir,
}

impl MainUnderTest {
    pub(crate) async fn start(
        client_ca: &Ca,
        limits: ConnectionLimits,
        configure: impl FnOnce(&mut Config),
    ) -> MainUnderTest {
        let dir = tempfile::tempdir().unwrap();
        let serving_ca = Ca::new("serving-ca");
        let serving = serving_ca.issue("node", "127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let mut config = Config::defaults(false);
        config.node_name = "node".into();
        config.cert_dir = dir.path().join("pki");
        config.tls_cert_file = Some(write("serving.crt", &serving.cert));
        config.tls_private_key_file = Some(write("serving.key", &serving.key));
        let ca_path = write("client-ca.crt", &client_ca.pem());
        config.client_ca_file = Some(ca_path.clone());
        config.anonymous_auth = false;
        config.authentication_token_webhook = false;
        config.authorization_mode = AuthorizationMode::AlwaysAllow;
        config.pod_logs_dir = dir.path().join("pods");
        configure(&mut config);
        let state = ServerState::new(
            Arc::new(config),
            crate::pod::status_manager::StatusManager::new(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        MainServer::new(state, None)
            .await
            .unwrap()
            .serve_on(listener, limits);
        MainUnderTest {
            addr,
            ca_path,
            serving_ca,
            _dir: dir,
        }
    }

    fn client_config(&self, identity: Option<&Identity>) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.serving_ca.pem().as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        match identity {
            Some(id) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(id.cert.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(id.key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        }
    }

    /// The client side of a TLS handshake on `tcp`.
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        identity: Option<&Identity>,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(self.client_config(identity)));
        let name = ServerName::try_from("127.0.0.1").unwrap();
        connector.connect(name, tcp).await
    }

    /// One request on a new connection: (status, body).
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        identity: Option<&Identity>,
    ) -> (u16, String) {
        let (code, _, body) = self.request_with_head(method, path, identity).await;
        (code, body)
    }

    /// One request on a new connection: (status, response head, body).
    pub(crate) async fn request_with_head(
        &self,
        method: &str,
        path: &str,
        identity: Option<&Identity>,
    ) -> (u16, String, String) {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        let mut tls = self.handshake(tcp, identity).await.unwrap();
        tls.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = Vec::new();
        let _ = tls.read_to_end(&mut buf).await;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (code, head.to_string(), body.to_string())
    }
}
