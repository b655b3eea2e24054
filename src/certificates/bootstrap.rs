//! TLS bootstrap (upstream's `bootstrap.LoadClientCert`): a node that starts with only a
//! bootstrap kubeconfig (a bootstrap token) asks the certificates API for its client
//! certificate and writes the kubeconfig it then runs with.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine;
use kube::config::{Cluster, Kubeconfig};
use rcgen::KeyPair;
use tracing::{info, warn};

use super::csr::{self, Template};
use super::store::{Store, CLIENT_PREFIX};
use super::{request, CertificateError};

/// How long the bootstrap waits for its request to be approved and signed (upstream: an hour).
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

/// The key of a bootstrap request still waiting, kept so a restart asks again with the same
/// key, and so under the same digested name, instead of adding a request.
const PENDING_KEY: &str = "kubelet-client.key.tmp";

/// Makes sure `kubeconfig` holds usable credentials: an existing one whose client
/// certificate has not expired is used as it is; otherwise a client certificate for
/// `system:node:<node>` is requested with `bootstrap`'s credentials, stored in `cert_dir`
/// (`kubelet-client-current.pem`) and `kubeconfig` written to use it.
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node: &str,
) -> Result<(), CertificateError> {
    if let Some(expiry) = client_config_valid_until(kubeconfig, SystemTime::now()) {
        info!(kubeconfig = %kubeconfig.display(), not_after = %chrono::DateTime::<chrono::Utc>::from(expiry), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(());
    }
    info!(kubeconfig = %kubeconfig.display(), bootstrap_kubeconfig = %bootstrap.display(), "using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file");
    let cluster = bootstrap_cluster(bootstrap)?;
    let client = crate::api_client::ApiClient::from_kubeconfig(bootstrap)
        .await
        .map_err(|source| CertificateError::Client {
            path: bootstrap.to_path_buf(),
            source: Box::new(source),
        })?;
    let store = Store::new(cert_dir, CLIENT_PREFIX);
    // The current pair's key when there is one (its certificate expired), else the pending
    // request's, else a new one.
    let pending = cert_dir.join(PENDING_KEY);
    let key_pem = match store.current().ok().flatten() {
        Some(pair) if !pair.key_pem.is_empty() => pair.key_pem,
        _ => load_or_generate_key(&pending)?,
    };
    let key = KeyPair::from_pem(&key_pem).map_err(|source| CertificateError::ReadKey {
        path: pending.clone(),
        source,
    })?;
    let template = Template::client(node);
    let request_pem = template.request_pem(&key)?;
    let name = template.digested_name(&key);
    let submitted = request::create(client.client(), &template, &request_pem, Some(&name)).await?;
    info!(csr = %submitted.name, "waiting for client certificate to be issued");
    let cert_pem = request::wait(client.client(), &submitted, BOOTSTRAP_WAIT).await?;
    let file = store.update(&cert_pem, &key_pem, chrono::Utc::now())?;
    if let Err(e) = std::fs::remove_file(&pending) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!(path = %pending.display(), error = %e, "failed cleaning up private key file");
        }
    }
    write_kubeconfig(kubeconfig, &cluster, &store.current_path())?;
    info!(csr = %submitted.name, cert = %file.display(), kubeconfig = %kubeconfig.display(), "client certificate issued; kubeconfig written");
    Ok(())
}

/// Until when `kubeconfig`'s client certificate is valid; None when the file is missing,
/// unreadable, has no client certificate or one of its certificates has expired (upstream's
/// `isClientConfigStillValid`: any of these sends the node through the bootstrap).
pub(crate) fn client_config_valid_until(kubeconfig: &Path, now: SystemTime) -> Option<SystemTime> {
    if !kubeconfig.exists() {
        return None;
    }
    let why_not = |reason: String| {
        warn!(kubeconfig = %kubeconfig.display(), reason, "existing kubeconfig is not usable; bootstrapping");
        None
    };
    let file = match Kubeconfig::read_from(kubeconfig) {
        Ok(f) => f,
        Err(e) => return why_not(e.to_string()),
    };
    let user = current_context(&file)
        .and_then(|c| c.user.clone())
        .and_then(|u| file.auth_infos.iter().find(|a| a.name == u))
        .and_then(|a| a.auth_info.clone());
    let Some(user) = user else {
        return why_not("no user in its current context".into());
    };
    let pem = if let Some(data) = &user.client_certificate_data {
        match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
            Ok(pem) => pem,
            Err(e) => return why_not(format!("client-certificate-data: {e}")),
        }
    } else if let Some(path) = &user.client_certificate {
        match std::fs::read(path) {
            Ok(pem) => pem,
            Err(e) => return why_not(format!("client-certificate {path}: {e}")),
        }
    } else {
        return why_not("no client certificate".into());
    };
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return why_not("no certificate in its client certificate".into());
    }
    let mut until = None::<SystemTime>;
    for cert in &certs {
        let (_, not_after) = match super::store::validity(cert) {
            Ok(v) => v,
            Err(e) => return why_not(e.to_string()),
        };
        if now > not_after {
            return why_not(format!(
                "part of the existing bootstrap client certificate is expired: {}",
                chrono::DateTime::<chrono::Utc>::from(not_after)
            ));
        }
        until = Some(until.map_or(not_after, |u| u.min(not_after)));
    }
    until
}

fn current_context(file: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = file.current_context.as_ref()?;
    file.contexts
        .iter()
        .find(|c| &c.name == name)
        .and_then(|c| c.context.as_ref())
}

/// The cluster of the bootstrap kubeconfig's current context (server, CA), which the written
/// kubeconfig keeps.
fn bootstrap_cluster(path: &Path) -> Result<Cluster, CertificateError> {
    let bad = |reason: String| CertificateError::BootstrapKubeconfig {
        path: path.to_path_buf(),
        reason,
    };
    let file = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let context = current_context(&file).ok_or_else(|| bad("no current context".into()))?;
    let cluster = file
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| bad(format!("no cluster {:?}", context.cluster)))?;
    if cluster.server.as_deref().unwrap_or_default().is_empty() {
        return Err(bad(format!("cluster {:?} has no server", context.cluster)));
    }
    Ok(cluster)
}

/// Upstream's `writeKubeconfigFromBootstrapping`: the bootstrap's cluster, user
/// `default-auth` with the certificate and key both in the current pair file, context
/// `default-context` in namespace `default`.
pub(crate) fn write_kubeconfig(
    path: &Path,
    cluster: &Cluster,
    pair: &Path,
) -> Result<(), CertificateError> {
    // JSON strings are YAML scalars: no quoting rules of our own.
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let mut text = String::from(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n",
    );
    text.push_str(&format!(
        "    server: {}\n",
        q(cluster.server.as_deref().unwrap_or_default())
    ));
    if let Some(ca) = &cluster.certificate_authority {
        text.push_str(&format!("    certificate-authority: {}\n", q(ca)));
    } else if let Some(data) = &cluster.certificate_authority_data {
        text.push_str(&format!("    certificate-authority-data: {}\n", q(data)));
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        text.push_str("    insecure-skip-tls-verify: true\n");
    }
    let pair = q(&pair.display().to_string());
    text.push_str(&format!(
        "users:\n- name: default-auth\n  user:\n    client-certificate: {pair}\n    client-key: {pair}\n\
         contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n\
         current-context: default-context\n"
    ));
    let err = |source| CertificateError::WriteKubeconfig {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // Whole or not at all: a crash mid-write must not leave a kubeconfig that parses wrong.
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    write_private(&tmp, &text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

/// client-go's `LoadOrGenerateKeyFile`: the key in `path`, or a new one written there.
fn load_or_generate_key(path: &Path) -> Result<String, CertificateError> {
    if let Ok(pem) = std::fs::read_to_string(path) {
        if KeyPair::from_pem(&pem).is_ok() {
            return Ok(pem);
        }
        warn!(path = %path.display(), "unusable private key file; generating a new key");
    }
    let pem = csr::new_key()?.serialize_pem();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| CertificateError::Io {
            what: "creating the certificate directory",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    write_private(path, &pem).map_err(|source| CertificateError::Io {
        what: "writing the private key",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(pem)
}
