//! Upstream's certificate file store, file for file: each pair the API issues is written as
//! `<cert-dir>/<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (the certificate chain, then the key; mode
//! 0600) and `<prefix>-current.pem` is a symlink to the newest, switched atomically (a new
//! link renamed over the old), so a reader always finds a complete pair. The client pair's
//! prefix is `kubelet-client`, the serving pair's `kubelet-server`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::CertificateError;

pub const CLIENT_PREFIX: &str = "kubelet-client";
pub const SERVING_PREFIX: &str = "kubelet-server";

/// One pair as stored: the chain (leaf first), its key and the leaf's validity.
#[derive(Debug)]
pub struct Pair {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The key as PEM, for reuse in a renewal that failed half-way.
    pub key_pem: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

/// The pairs of one prefix in one directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    prefix: &'static str,
}

impl Store {
    pub fn new(dir: &Path, prefix: &'static str) -> Store {
        Store {
            dir: dir.to_path_buf(),
            prefix,
        }
    }

    /// `<dir>/<prefix>-current.pem`, what kubeconfigs and the server name.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair, or None when there is none yet.
    pub fn current(&self) -> Result<Option<Pair>, CertificateError> {
        let path = self.current_path();
        match std::fs::read(&path) {
            Ok(pem) => parse_pair(&path, &pem).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CertificateError::Io {
                what: "reading the certificate pair",
                path,
                source,
            }),
        }
    }

    /// Writes a new pair under a timestamped name and points `-current` at it; returns the
    /// new file's path.
    pub fn update(
        &self,
        cert_pem: &str,
        key_pem: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<PathBuf, CertificateError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| CertificateError::Io { what, path, source }
        };
        // Refuse a pair that would not load: better the old one than none.
        let mut text = cert_pem.trim_end().to_string();
        text.push('\n');
        text.push_str(key_pem.trim_end());
        text.push('\n');
        let probe = self.dir.join(format!("{}.pem", self.prefix));
        let pair = parse_pair(&probe, text.as_bytes())?;
        // As Go's tls.X509KeyPair: the certificate must be for this key.
        let public = rcgen::KeyPair::from_pem(key_pem)
            .map(|k| k.public_key_der())
            .map_err(|e| CertificateError::Invalid {
                what: "certificate pair",
                path: probe.clone(),
                reason: format!("its key: {e}"),
            })?;
        if leaf_public_key(&pair.chain[0]).as_deref() != Some(public.as_slice()) {
            return Err(CertificateError::Invalid {
                what: "certificate pair",
                path: probe,
                reason: "private key does not match public key".into(),
            });
        }

        std::fs::create_dir_all(&self.dir)
            .map_err(io("creating the certificate directory", &self.dir))?;
        let stamp = now.format("%Y-%m-%d-%H-%M-%S");
        let file = self.dir.join(format!("{}-{stamp}.pem", self.prefix));
        // Written aside and renamed: a second pair within the same second replaces the first
        // whole, never a half-written file under the current link.
        let tmp = self.dir.join(format!("{}-{stamp}.pem.tmp", self.prefix));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("writing the certificate pair", &tmp))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(io("writing the certificate pair", &tmp))?;
        std::fs::rename(&tmp, &file).map_err(io("writing the certificate pair", &file))?;

        let current = self.current_path();
        let link = self.dir.join(format!("{}-current.pem.tmp", self.prefix));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).map_err(io("linking the current pair", &link))?;
        std::fs::rename(&link, &current).map_err(io("linking the current pair", &current))?;
        Ok(file)
    }
}

/// Certificates, then the key, from one PEM file.
pub(crate) fn parse_pair(path: &Path, pem: &[u8]) -> Result<Pair, CertificateError> {
    let invalid = |reason: String| CertificateError::Invalid {
        what: "certificate pair",
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid("no certificate in it".into()));
    };
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| invalid(format!("its key: {e}")))?;
    let (not_before, not_after) = validity(leaf).map_err(|e| invalid(e.to_string()))?;
    let key_pem = key_pem_of(pem);
    Ok(Pair {
        chain,
        key,
        key_pem,
        not_before,
        not_after,
    })
}

/// The PEM block of the private key in a pair file (as written, whatever its type).
fn key_pem_of(pem: &[u8]) -> String {
    let text = String::from_utf8_lossy(pem);
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("-----BEGIN ") && line.contains("PRIVATE KEY") {
            inside = true;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
            if line.starts_with("-----END ") {
                break;
            }
        }
    }
    out
}

/// The DER of the certificate's subjectPublicKeyInfo.
fn leaf_public_key(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.public_key().raw.to_vec())
}

/// A certificate x509-parser could not read; shown as the parser's own message, which the
/// pair's and the bootstrap kubeconfig's errors quote.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct UnparsableCertificate(
    #[from] x509_parser::nom::Err<x509_parser::error::X509Error>,
);

/// The leaf's notBefore and notAfter.
pub(crate) fn validity(
    cert: &CertificateDer<'_>,
) -> Result<(SystemTime, SystemTime), UnparsableCertificate> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert)?;
    let at = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
        } else {
            SystemTime::UNIX_EPOCH
        }
    };
    let v = parsed.validity();
    Ok((at(v.not_before), at(v.not_after)))
}
