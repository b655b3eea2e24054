//! The node's certificates from the cluster, as upstream's TLS bootstrap and certificate
//! managers obtain them:
//! - `bootstrap`: with `--bootstrap-kubeconfig` and no usable `--kubeconfig`, a client
//!   certificate for `system:node:<name>` is requested with the bootstrap token, written to
//!   the cert dir and a kubeconfig pointing at it written (upstream's `LoadClientCert`);
//! - `rotation`: the client pair (rotateCertificates) and the serving pair
//!   (serverTLSBootstrap) renewed at a jittered 70-90 % of their lifetime (the serving pair
//!   requested at once when there is none);
//! - `csr` what is asked for, `request` the API calls, `store` the files.

mod bootstrap;
pub mod csr;
mod request;
pub mod rotation;
pub mod store;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

pub use bootstrap::load_client_cert;
pub use rotation::{rotation_deadline, spawn_client_rotation, spawn_serving_certificate};

/// Why a certificate could not be obtained, named in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("generating a private key: {0}")]
    GenerateKey(#[source] rcgen::Error),
    #[error("private key {}: {source}", path.display())]
    ReadKey {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
    #[error("unable to generate certificate request for {subject}: {source}")]
    BuildRequest {
        subject: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {}: {reason}", path.display())]
    Invalid {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("unable to load bootstrap kubeconfig {}: {reason}", path.display())]
    BootstrapKubeconfig { path: PathBuf, reason: String },
    #[error("unable to create certificates signing request client from {}: {source}", path.display())]
    Client {
        path: PathBuf,
        #[source]
        source: Box<crate::api_client::ApiError>,
    },
    #[error("cannot create certificate signing request {name}: {source}")]
    Create {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("retrieved csr {name} is not compatible: {reason}")]
    Incompatible { name: String, reason: String },
    #[error("certificate signing request {name} is denied, reason: {reason}, message: {message}")]
    Denied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} was deleted before it was issued")]
    Gone { name: String },
    #[error("timed out waiting for certificate signing request {name} to be issued ({timeout:?})")]
    Timeout { name: String, timeout: Duration },
    #[error("writing kubeconfig {}: {source}", path.display())]
    WriteKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
