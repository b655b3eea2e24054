//! The container runtime boundary: containerd over its native gRPC API.
//!
//! `service` is the seam the rest of the agent uses: the CRI-shaped `Runtime` trait, its
//! containerd implementation, and (in tests) an in-memory fake in `fake`.
//! `client` connects (with back-off) and scopes every call to the agent's namespace and a
//! deadline; `images` resolves image references to unpacked snapshots and their config;
//! `spec` turns a PodSpec container into an OCI runtime spec (with `accounts`, the
//! user it runs as, looked up in the image); `containers` creates, starts,
//! stops and lists containers and tasks; `labels` is the label schema that lets the agent
//! rebuild its state from containerd after a restart; `events` turns containerd's task
//! event stream into wake-ups for pod workers.

pub mod accounts;
pub mod attach;
pub mod client;
pub mod containers;
pub mod events;
pub mod exec;
pub mod exec_stdio;
#[cfg(test)]
pub(crate) mod fake;
pub mod handlers;
pub mod image_store;
pub mod images;
pub mod labels;
pub mod pull;
pub mod service;
pub mod stdio;

pub use client::Containerd;
pub use service::{ContainerdRuntime, Runtime};

/// Errors from the runtime boundary. Each names the object at fault.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot connect to containerd at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("containerd {op} {object}: {status}")]
    Call {
        op: &'static str,
        object: String,
        status: Box<tonic::Status>,
    },
    #[error("containerd {op} {object}: no answer within {secs}s")]
    Timeout {
        op: &'static str,
        object: String,
        secs: u64,
    },
    /// A manifest, index or config in the content store larger than such a document may be
    /// (see `images::MAX_MANIFEST`): refused rather than read into memory.
    #[error("{what} {digest} is larger than {limit} bytes, the most read of one")]
    BlobTooLarge {
        what: &'static str,
        digest: String,
        limit: u64,
    },
    #[error("image {0:?} is not present in containerd")]
    ImageNotFound(String),
    #[error("image {image}: {reason}")]
    BadImage { image: String, reason: String },
    /// The stdio of an exec process or an attached container could not be opened or used.
    #[error("container {container}: {reason}")]
    Stdio { container: String, reason: String },
    /// Exec needs a running container; the text is upstream's.
    #[error("container is in {state} state")]
    NotRunning {
        container: String,
        state: &'static str,
    },
    #[error("container {container}: invalid {field}: {reason}")]
    Spec {
        container: String,
        field: String,
        reason: String,
    },
}

impl RuntimeError {
    /// True when containerd answered NotFound: the object is already gone, which idempotent
    /// clean-up treats as success.
    pub fn is_not_found(&self) -> bool {
        matches!(self, RuntimeError::Call { status, .. } if status.code() == tonic::Code::NotFound)
            || matches!(self, RuntimeError::ImageNotFound(_))
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, RuntimeError::Call { status, .. } if status.code() == tonic::Code::AlreadyExists)
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;
