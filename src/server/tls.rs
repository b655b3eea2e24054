//! TLS for the main (10250) server: the serving certificate (from files, or a self-signed one
//! kept in the cert dir as upstream does, or with serverTLSBootstrap the pair the certificate
//! manager keeps there, re-read when it is renewed), protocol versions and cipher suites from
//! the configuration, and client certificates requested but left optional.
//!
//! A client certificate is not checked during the handshake: as with upstream's
//! `tls.RequestClientCert`, a certificate from another CA must still reach the HTTP layer,
//! where authentication turns it into a 401 (or lets a bearer token win).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedCipherSuite,
};
use std::sync::Mutex;
use tracing::{debug, info, warn};

use crate::certificates::store::{Store, SERVING_PREFIX};
use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {}: {reason}", path.display())]
    Parse {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("writing the self-signed serving certificate to {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("generating the self-signed serving certificate: {0}")]
    Generate(String),
    #[error("TLS settings: {0}")]
    Settings(String),
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Certificates of a PEM file, in order.
pub(crate) fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Parse {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Parse {
            what,
            path: path.to_path_buf(),
            reason: "no PEM certificate in it".into(),
        });
    }
    Ok(certs)
}

pub(crate) fn read_key(
    what: &'static str,
    path: &Path,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Parse {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The serving certificate chain and key: the configured files, else `<cert-dir>/kubelet.crt`
/// and `kubelet.key`, generated (self-signed) when they are not both there. As upstream, a
/// generated pair is reused on every later start.
pub(crate) fn serving_cert(
    config: &Config,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let (cert, key) = match (&config.tls_cert_file, &config.tls_private_key_file) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => {
            let cert = config.cert_dir.join("kubelet.crt");
            let key = config.cert_dir.join("kubelet.key");
            if !(cert.is_file() && key.is_file()) {
                write_self_signed(&config.node_name, &config.cert_dir, &cert, &key)?;
                info!(cert = %cert.display(), "generated a self-signed serving certificate");
            }
            (cert, key)
        }
    };
    Ok((
        read_certs("serving certificate", &cert)?,
        read_key("serving key", &key)?,
    ))
}

/// Like upstream's `GenerateSelfSignedCertKey(host)`: a CA named `<host>-ca@<unix time>` and a
/// serving certificate `<host>@<unix time>` signed by it, valid for a year, with the host as
/// its one SAN (an IP SAN when the host is an address). The file holds the leaf then the CA.
/// The key is ECDSA P-256 (upstream uses RSA 2048; the ring backend cannot generate RSA).
fn write_self_signed(host: &str, dir: &Path, cert: &Path, key: &Path) -> Result<(), TlsError> {
    let (cert_pem, key_pem) = self_signed_pem(host)?;
    // Each file is written to a new file beside it (made with its mode, so the key is never
    // readable by others, not even for a moment) and renamed over the old one: opening an
    // existing file keeps that file's mode, which could be wider than 0600.
    let write = |path: &Path, text: &str, mode: u32| -> Result<(), TlsError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| TlsError::Write {
            path: path.to_path_buf(),
            source,
        };
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
            _ => {}
        }
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(mode)
            .open(&tmp)
            .map_err(err)?;
        let written = f
            .write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(err)
    };
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write(key, &key_pem, 0o600)?;
    write(cert, &cert_pem, 0o644)
}

pub(crate) fn self_signed_pem(host: &str) -> Result<(String, String), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let gen = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let now = chrono::Utc::now();
    let stamp = now.timestamp();
    // Valid from today for a year (upstream: now + 1 year); day 29+ is clamped so the
    // next year's date exists.
    let (y, m, d) = {
        use chrono::Datelike;
        (now.year(), now.month() as u8, (now.day() as u8).min(28))
    };
    let not_before = rcgen::date_time_ymd(y, m, d);
    let not_after = rcgen::date_time_ymd(y + 1, m, d);

    let ca_key = KeyPair::generate().map_err(gen)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
    ca.distinguished_name
        .push(DnType::CommonName, format!("{host}-ca@{stamp}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca.self_signed(&ca_key).map_err(gen)?;

    let key = KeyPair::generate().map_err(gen)?;
    let mut leaf = CertificateParams::new(vec![host.to_string()]).map_err(gen)?;
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{host}@{stamp}"));
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let leaf_cert = leaf.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
    Ok((
        format!("{}{}", leaf_cert.pem(), ca_cert.pem()),
        key.serialize_pem(),
    ))
}

/// Go's tlsCipherSuites names mapped to the ring provider's suites.
pub(crate) fn cipher_suite(name: &str) -> Option<SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite as cs;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_AES_128_GCM_SHA256" => cs::TLS13_AES_128_GCM_SHA256,
        "TLS_AES_256_GCM_SHA384" => cs::TLS13_AES_256_GCM_SHA384,
        "TLS_CHACHA20_POLY1305_SHA256" => cs::TLS13_CHACHA20_POLY1305_SHA256,
        _ => return None,
    })
}

/// The crypto provider with the configured suites. As in Go, tlsCipherSuites restricts the
/// TLS 1.2 suites; the TLS 1.3 suites stay enabled unless named explicitly.
pub(crate) fn provider(config: &Config) -> Result<CryptoProvider, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !config.tls_cipher_suites.is_empty() {
        let mut chosen = Vec::new();
        for name in &config.tls_cipher_suites {
            let suite = cipher_suite(name)
                .ok_or_else(|| TlsError::Settings(format!("unsupported cipher suite {name}")))?;
            if !chosen.contains(&suite) {
                chosen.push(suite);
            }
        }
        if !chosen
            .iter()
            .any(|s| s.version() == &rustls::version::TLS13)
        {
            chosen.extend(
                provider
                    .cipher_suites
                    .iter()
                    .filter(|s| s.version() == &rustls::version::TLS13)
                    .copied(),
            );
        }
        provider.cipher_suites = chosen;
    }
    Ok(provider)
}

/// How often the client CA file is looked at again. Upstream's dynamic CA content watches the
/// file and re-reads it at least every minute; a read of a few kilobytes every few seconds
/// picks a rotated CA up sooner for nothing that matters.
pub(crate) const CLIENT_CA_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The client CA (`--client-ca-file`) as it is on disk now: re-read in the background, so a
/// rotated CA verifies the next request without a restart. A file that cannot be read or
/// parsed keeps the last good CA in force (as upstream), with a warning.
pub struct ClientCa {
    path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Vec<u8>, Arc<dyn ClientCertVerifier>)>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("path", &self.path)
            .finish()
    }
}

impl ClientCa {
    /// Reads the file now (an error fails the start, as upstream's) and keeps it fresh for
    /// as long as the returned CA is in use.
    pub(crate) fn load(
        path: &Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<ClientCa>, TlsError> {
        let pem = read("client CA file", path)?;
        let verifier = verifier_from_pem(&pem, path, provider)?;
        let ca = Arc::new(ClientCa {
            path: path.to_path_buf(),
            provider: provider.clone(),
            current: Mutex::new((pem, verifier)),
        });
        let watched = Arc::downgrade(&ca);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(CLIENT_CA_RELOAD_INTERVAL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(ca) = watched.upgrade() else {
                        return;
                    };
                    // The read can block on a slow disk: off the async workers.
                    let _ = tokio::task::spawn_blocking(move || ca.reload()).await;
                }
            });
        }
        Ok(ca)
    }

    /// The verifier of the CA as last read.
    pub(crate) fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.current.lock().expect("client CA lock").1.clone()
    }

    /// Reads the file again; true when a different, valid CA is now in force.
    pub(crate) fn reload(&self) -> bool {
        let pem = match read("client CA file", &self.path) {
            Ok(pem) => pem,
            Err(e) => {
                warn!(error = %e, "keeping the client CA in force");
                return false;
            }
        };
        if self.current.lock().expect("client CA lock").0 == pem {
            return false;
        }
        match verifier_from_pem(&pem, &self.path, &self.provider) {
            Ok(verifier) => {
                *self.current.lock().expect("client CA lock") = (pem, verifier);
                info!(path = %self.path.display(), "client CA file changed: new requests verify against it");
                true
            }
            Err(e) => {
                warn!(error = %e, "keeping the client CA in force");
                false
            }
        }
    }
}

fn verifier_from_pem(
    pem: &[u8],
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let parse = |reason: String| TlsError::Parse {
        what: "client CA file",
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| parse(e.to_string()))?;
    if certs.is_empty() {
        return Err(parse("no PEM certificate in it".into()));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| parse(e.to_string()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| parse(e.to_string()))
}

/// Asks for a client certificate and takes whatever comes (its signature over the handshake
/// is still checked, so the client holds the key); authentication verifies the chain.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The main server's TLS configuration. `client_ca` is the verifier from
/// [`ClientCa::load`]; without one no client certificate is asked for (as upstream).
pub(crate) fn server_config(
    config: &Config,
    provider: Arc<CryptoProvider>,
    client_ca: Option<&Arc<ClientCa>>,
) -> Result<ServerConfig, TlsError> {
    let versions: &[&'static rustls::SupportedProtocolVersion] =
        match config.tls_min_version.as_deref() {
            Some("VersionTLS13") => &[&rustls::version::TLS13],
            Some(v @ ("VersionTLS10" | "VersionTLS11")) => {
                warn!(
                    tls_min_version = v,
                    "TLS 1.0 and 1.1 are not implemented; the lowest version served is TLS 1.2"
                );
                &[&rustls::version::TLS12, &rustls::version::TLS13]
            }
            _ => &[&rustls::version::TLS12, &rustls::version::TLS13],
        };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::Settings(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(Arc::new(RequestClientCert {
            // The hints of the CA at start: they only help a client holding several
            // certificates choose one; whichever it sends is verified against the CA in force.
            hints: ca.verifier().root_hint_subjects().to_vec(),
            algorithms: provider.signature_verification_algorithms,
        })),
        None => builder.with_no_client_auth(),
    };
    let mut tls = if config.server_tls_bootstrap {
        // serverTLSBootstrap wins over tlsCertFile, as upstream: the pair comes from the
        // certificates API, and until it is there the server has no certificate to offer.
        let path = Store::new(&config.cert_dir, SERVING_PREFIX).current_path();
        builder.with_cert_resolver(Arc::new(ServingFromStore::new(path, provider.clone())))
    } else {
        let (chain, key) = serving_cert(config)?;
        builder
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Settings(format!("serving certificate and key: {e}")))?
    };
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// The serving pair the certificate manager keeps in the cert dir
/// (`kubelet-server-current.pem`), read again whenever the file behind the link changes, so a
/// renewed certificate is served from the next handshake on without a restart. Without a
/// pair the handshake fails, as upstream's "no serving certificate available for the
/// kubelet".
#[derive(Debug)]
pub(crate) struct ServingFromStore {
    path: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<Option<(FileId, Arc<CertifiedKey>)>>,
}

/// What tells one file from its replacement: the store writes each pair to a new file.
type FileId = (u64, u64, i64, i64);

impl ServingFromStore {
    pub(crate) fn new(path: PathBuf, provider: Arc<CryptoProvider>) -> ServingFromStore {
        ServingFromStore {
            path,
            provider,
            loaded: Mutex::new(None),
        }
    }

    fn load(&self) -> Option<Arc<CertifiedKey>> {
        use std::os::unix::fs::MetadataExt;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(_) => {
                // Keep serving the last pair if the link is being switched right now.
                return loaded.as_ref().map(|(_, k)| k.clone());
            }
        };
        let id = (meta.dev(), meta.ino(), meta.mtime(), meta.mtime_nsec());
        if let Some((seen, key)) = loaded.as_ref() {
            if *seen == id {
                return Some(key.clone());
            }
        }
        let pem = std::fs::read(&self.path).ok()?;
        let pair = match crate::certificates::store::parse_pair(&self.path, &pem) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "the serving certificate pair does not load; keeping the previous one");
                return loaded.as_ref().map(|(_, k)| k.clone());
            }
        };
        let signing = match self.provider.key_provider.load_private_key(pair.key) {
            Ok(k) => k,
            Err(e) => {
                warn!(path = %self.path.display(), error = %e, "the serving key does not load; keeping the previous pair");
                return loaded.as_ref().map(|(_, k)| k.clone());
            }
        };
        let key = Arc::new(CertifiedKey::new(pair.chain, signing));
        info!(path = %self.path.display(), "serving certificate loaded");
        *loaded = Some((id, key.clone()));
        Some(key)
    }
}

impl ResolvesServerCert for ServingFromStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let key = self.load();
        if key.is_none() {
            debug!(path = %self.path.display(), "no serving certificate available for the kubelet");
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client CA file that turns unreadable or invalid keeps the last good CA in force;
    /// a valid new one replaces it.
    #[test]
    fn client_ca_reload_keeps_the_last_good_ca() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        let ca = |name: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, name);
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            p.self_signed(&key).unwrap().pem()
        };
        std::fs::write(&path, ca("first")).unwrap();
        let loaded = ClientCa::load(&path, &provider).unwrap();
        let hints = |c: &ClientCa| -> Vec<Vec<u8>> {
            c.verifier()
                .root_hint_subjects()
                .iter()
                .map(|d| d.as_ref().to_vec())
                .collect()
        };
        let first = hints(&loaded);
        assert!(!loaded.reload(), "unchanged file");
        for broken in [
            "",
            "junk",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            std::fs::write(&path, broken).unwrap();
            assert!(!loaded.reload(), "{broken:?}");
            assert_eq!(hints(&loaded), first);
        }
        std::fs::remove_file(&path).unwrap();
        assert!(!loaded.reload());
        assert_eq!(hints(&loaded), first);
        std::fs::write(&path, ca("second")).unwrap();
        assert!(loaded.reload());
        assert_ne!(hints(&loaded), first);
    }

    #[test]
    fn every_configurable_suite_maps_to_a_rustls_suite() {
        for name in crate::config::TLS_CIPHER_SUITES {
            assert!(cipher_suite(name).is_some(), "{name}");
        }
        assert!(cipher_suite("TLS_RSA_WITH_AES_128_CBC_SHA").is_none());
    }

    #[test]
    fn named_tls12_suites_restrict_tls12_and_keep_tls13() {
        let mut config = Config::defaults(false);
        config.tls_cipher_suites = vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()];
        let p = provider(&config).unwrap();
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .collect();
        assert_eq!(tls12.len(), 1);
        assert!(p
            .cipher_suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS13));
    }

    #[test]
    fn self_signed_pair_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults(false);
        config.node_name = "node-a".into();
        config.cert_dir = dir.path().join("pki");
        let (chain, _) = serving_cert(&config).unwrap();
        assert_eq!(chain.len(), 2, "leaf and its CA");
        let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).unwrap();
        let cn = leaf.subject().iter_common_name().next().unwrap();
        assert!(cn.as_str().unwrap().starts_with("node-a@"));
        let san = leaf.subject_alternative_name().unwrap().unwrap();
        assert_eq!(
            format!("{:?}", san.value.general_names),
            r#"[DNSName("node-a")]"#
        );
        let mode = std::fs::metadata(config.cert_dir.join("kubelet.key"))
            .unwrap()
            .permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
        let (again, _) = serving_cert(&config).unwrap();
        assert_eq!(chain, again);
        server_config(&config, Arc::new(provider(&config).unwrap()), None).unwrap();
    }

    /// A key file left with a wide mode (a half pair from an earlier run, or a file someone
    /// made) is replaced by a new 0600 file, not written into: before, the new key went into
    /// the old file and kept its 0644.
    #[test]
    fn the_generated_key_is_a_new_file_of_its_own_mode() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults(false);
        config.node_name = "node-b".into();
        config.cert_dir = dir.path().to_path_buf();
        let key = dir.path().join("kubelet.key");
        std::fs::write(&key, "old\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let old_inode = std::fs::metadata(&key).unwrap().ino();
        serving_cert(&config).unwrap();
        let meta = std::fs::metadata(&key).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_ne!(meta.ino(), old_inode, "a new file, renamed into place");
        assert!(std::fs::read_to_string(&key)
            .unwrap()
            .contains("PRIVATE KEY"));
        // 0644 as far as the umask lets it: never more.
        let cert = std::fs::metadata(dir.path().join("kubelet.crt")).unwrap();
        assert_eq!(cert.permissions().mode() & 0o777 & !0o644, 0);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A pair as the certificate manager stores it: a leaf for `host` and its key.
    fn store_pair(store: &Store, host: &str, when: &str) {
        let (chain, key) = self_signed_pem(host).unwrap();
        store.update(&chain, &key, when.parse().unwrap()).unwrap();
    }

    #[test]
    fn the_bootstrapped_serving_pair_is_served_from_the_store_and_renewals_are_picked_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults(false);
        config.cert_dir = dir.path().to_path_buf();
        config.server_tls_bootstrap = true;
        // No files to read at start: the configuration builds without a pair.
        let provider = Arc::new(provider(&config).unwrap());
        server_config(&config, provider.clone(), None).unwrap();
        assert!(
            !dir.path().join("kubelet.crt").exists(),
            "nothing self-signed"
        );

        let store = Store::new(dir.path(), SERVING_PREFIX);
        let serving = ServingFromStore::new(store.current_path(), provider);
        assert!(serving.load().is_none(), "no pair yet: nothing to serve");

        store_pair(&store, "node-a", "2026-12-03T10:00:00Z");
        let first = serving.load().expect("the pair once written");
        let again = serving.load().unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged pair is not re-read"
        );

        store_pair(&store, "node-a", "2026-12-03T11:00:00Z");
        let renewed = serving.load().unwrap();
        assert!(!Arc::ptr_eq(&first, &renewed));
        assert_ne!(
            first.cert[0], renewed.cert[0],
            "the renewed certificate is served"
        );

        // A broken pair behind the link keeps the last good one.
        let broken = dir.path().join("broken.pem");
        std::fs::write(&broken, "junk").unwrap();
        let link = store.current_path();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&broken, &link).unwrap();
        assert_eq!(serving.load().unwrap().cert[0], renewed.cert[0]);
    }
}
