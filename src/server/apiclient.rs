//! Just enough of an API server client for the auth webhooks: a kubeconfig reader and a JSON
//! POST over HTTPS (hyper's HTTP/1 client on a tokio-rustls stream). One connection per call:
//! answers are cached, so calls are rare and a pool would buy little.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {}: {reason}", path.display())]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("{url}: {reason}")]
    Request { url: String, reason: String },
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Kubeconfig {
    clusters: Vec<NamedCluster>,
    users: Vec<NamedUser>,
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context")]
    current_context: String,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<PathBuf>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify")]
    insecure_skip_tls_verify: bool,
    #[serde(rename = "tls-server-name")]
    tls_server_name: Option<String>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(rename = "client-certificate")]
    client_certificate: Option<PathBuf>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key")]
    client_key: Option<PathBuf>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<String>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Standard base64 (with or without padding), as kubeconfig `*-data` fields hold PEM.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Where and how to reach the API server.
#[derive(Clone)]
pub struct ApiClient {
    host: String,
    port: u16,
    /// Path prefix of the server URL, without a trailing slash.
    prefix: String,
    server_name: ServerName<'static>,
    tls: Arc<ClientConfig>,
    token: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ApiClient(https://{}:{}{})",
            self.host, self.port, self.prefix
        )
    }
}

impl ApiClient {
    /// Reads the current context of a kubeconfig. Relative file paths in it are relative to
    /// the kubeconfig's folder, as client-go resolves them.
    pub fn from_kubeconfig(path: &Path) -> Result<ApiClient, ApiError> {
        let bad = |reason: String| ApiError::Kubeconfig {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let kc: Kubeconfig = serde_yaml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let context = kc
            .contexts
            .iter()
            .find(|c| c.name == kc.current_context)
            .map(|c| &c.context);
        let cluster = match context {
            Some(ctx) => kc.clusters.iter().find(|c| c.name == ctx.cluster),
            None => kc.clusters.first(),
        }
        .ok_or_else(|| bad("no cluster for the current context".into()))?;
        let user = match context {
            Some(ctx) => kc.users.iter().find(|u| u.name == ctx.user),
            None => kc.users.first(),
        }
        .map(|u| &u.user);

        let cluster = &cluster.cluster;
        let (host, port, prefix) = split_https_url(&cluster.server).map_err(bad)?;
        let read_file = |p: &Path| {
            std::fs::read(resolve(p)).map_err(|e| bad(format!("{}: {e}", resolve(p).display())))
        };
        let data = |field: &str, d: &str| {
            base64_decode(d).ok_or_else(|| bad(format!("{field} is not base64")))
        };

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?;
        let builder = if cluster.insecure_skip_tls_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoServerVerification(
                    provider.signature_verification_algorithms,
                )))
        } else {
            let pem = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
                (Some(d), _) => data("certificate-authority-data", d)?,
                (None, Some(p)) => read_file(p)?,
                (None, None) => {
                    return Err(bad(
                        "the cluster has no certificate-authority(-data) and is not insecure-skip-tls-verify; system roots are not used".into(),
                    ))
                }
            };
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(format!("certificate authority: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("certificate authority: {e}")))?;
            }
            builder.with_root_certificates(roots)
        };
        let (mut cert_pem, mut key_pem) = (None, None);
        let mut token = None;
        if let Some(u) = user {
            cert_pem = match (&u.client_certificate_data, &u.client_certificate) {
                (Some(d), _) => Some(data("client-certificate-data", d)?),
                (None, Some(p)) => Some(read_file(p)?),
                _ => None,
            };
            key_pem = match (&u.client_key_data, &u.client_key) {
                (Some(d), _) => Some(data("client-key-data", d)?),
                (None, Some(p)) => Some(read_file(p)?),
                _ => None,
            };
            token = match (&u.token, &u.token_file) {
                (Some(t), _) if !t.is_empty() => Some(t.clone()),
                (_, Some(p)) => Some(String::from_utf8_lossy(&read_file(p)?).trim().to_string()),
                _ => None,
            };
        }
        let mut tls = match (cert_pem, key_pem) {
            (Some(c), Some(k)) => {
                let certs = CertificateDer::pem_slice_iter(&c)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(format!("client certificate: {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(&k)
                    .map_err(|e| bad(format!("client key: {e}")))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| bad(format!("client certificate: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(bad(
                    "client certificate and key must be given together".into()
                ))
            }
        };
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = cluster
            .tls_server_name
            .clone()
            .unwrap_or_else(|| host.clone());
        let server_name = ServerName::try_from(name.clone())
            .map_err(|_| bad(format!("{name:?} is not a valid TLS server name")))?;
        Ok(ApiClient {
            host,
            port,
            prefix,
            server_name,
            tls: Arc::new(tls),
            token,
            timeout: Duration::from_secs(10),
        })
    }

    /// POSTs a JSON object to `path` (e.g. `/apis/authorization.k8s.io/v1/subjectaccessreviews`)
    /// and returns the JSON answer of a 2xx response.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        let url = format!("https://{}:{}{}{path}", self.host, self.port, self.prefix);
        match tokio::time::timeout(self.timeout, self.post_inner(&url, path, body)).await {
            Ok(r) => r,
            Err(_) => Err(ApiError::Request {
                url,
                reason: format!("no answer within {:?}", self.timeout),
            }),
        }
    }

    async fn post_inner(&self, url: &str, path: &str, body: &Value) -> Result<Value, ApiError> {
        let fail = |reason: String| ApiError::Request {
            url: url.to_string(),
            reason,
        };
        let tcp = tokio::net::TcpStream::connect((self.host.trim_matches(['[', ']']), self.port))
            .await
            .map_err(|e| fail(format!("connect: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| fail(format!("TLS: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::post(format!("{}{path}", self.prefix))
            .header("Host", format!("{}:{}", self.host, self.port))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header("User-Agent", "kubelet-rs");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| fail(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        if !(200..300).contains(&status) {
            return Err(ApiError::Status {
                url: url.to_string(),
                status,
                body: String::from_utf8_lossy(&bytes).chars().take(500).collect(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| fail(format!("answer is not JSON: {e}")))
    }
}

/// `https://host[:port][/prefix]` → (host, port, prefix). Only https: the webhooks carry
/// bearer tokens.
fn split_https_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("server {url:?}: expected an https:// URL"))?;
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
        None => (rest, String::new()),
    };
    let (host, port) = if let Some(end) = authority.strip_prefix('[').and_then(|a| a.find(']')) {
        let host = &authority[..end + 2];
        let port = authority[end + 2..].strip_prefix(':');
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("server {url:?}: bad port {p:?}"))?,
        None => 443,
    };
    if host.is_empty() {
        return Err(format!("server {url:?}: no host"));
    }
    Ok((host, port, prefix))
}

/// insecure-skip-tls-verify: any server certificate, signatures still checked. Also used by
/// HTTPS probes and hooks, which upstream runs without verification.
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

    #[test]
    fn decodes_base64() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVs\nbG8h").unwrap(), b"hello!");
        assert!(base64_decode("a$b").is_none());
    }

    #[test]
    fn splits_server_urls() {
        assert_eq!(
            split_https_url("https://10.0.0.1:6443").unwrap(),
            ("10.0.0.1".into(), 6443, String::new())
        );
        assert_eq!(
            split_https_url("https://api.example/k8s/").unwrap(),
            ("api.example".into(), 443, "/k8s".into())
        );
        assert_eq!(
            split_https_url("https://[::1]:8443").unwrap(),
            ("[::1]".into(), 8443, String::new())
        );
        assert!(split_https_url("http://x").is_err());
    }

    #[test]
    fn reads_the_current_context_with_relative_paths() {
        let dir = tempfile::tempdir().unwrap();
        let (ca_pem, _) = crate::server::tls::self_signed_pem("api").unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca_pem).unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
             clusters:\n- name: a\n  cluster: {server: https://wrong:1}\n\
             - name: c\n  cluster: {server: https://127.0.0.1:6443, certificate-authority: ca.crt}\n\
             users:\n- name: u\n  user: {tokenFile: token}\n\
             contexts:\n- name: b\n  context: {cluster: c, user: u}\n",
        )
        .unwrap();
        let client = ApiClient::from_kubeconfig(&path).unwrap();
        assert_eq!(client.host, "127.0.0.1");
        assert_eq!(client.port, 6443);
        assert_eq!(client.token.as_deref(), Some("s3cret"));

        std::fs::write(
            &path,
            "clusters:\n- name: a\n  cluster: {server: https://x:1}\n",
        )
        .unwrap();
        let err = ApiClient::from_kubeconfig(&path).unwrap_err().to_string();
        assert!(err.contains("certificate-authority"), "{err}");
    }
}
