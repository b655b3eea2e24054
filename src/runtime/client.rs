//! The connection to containerd: one tonic channel, every request in the agent's namespace
//! and under a deadline, so a hung containerd call is that caller's error, never a hang.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use containerd_client::Client;
use tracing::{info, warn};

use super::{Result, RuntimeError};

/// Deadline for ordinary calls (get, list, create). Long operations pass their own.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A handle on containerd, cheap to clone (tonic channels are shared).
#[derive(Clone)]
pub struct Containerd {
    client: std::sync::Arc<Client>,
    namespace: String,
    socket: PathBuf,
    /// Per image top snapshot (chain id): see `image_accounts`.
    accounts: AccountsCache,
    /// Each container's OCI process, as execs start from it: see `exec_process_spec`.
    pub(super) exec_processes: ExecProcesses,
}

/// Container id -> the `process` object of its OCI spec. A container's spec never changes
/// once created, so probes that exec every second read it (a record of several KiB, parsed
/// as JSON) once per container instead of once per exec.
pub(super) type ExecProcesses = std::sync::Arc<
    std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<serde_json::Value>>>,
>;

type AccountsCache = std::sync::Arc<super::accounts::AccountsCache>;

impl Containerd {
    /// Connects once; fails fast when the socket is absent.
    pub async fn connect(socket: &Path, namespace: &str) -> Result<Self> {
        let channel =
            containerd_client::connect(socket)
                .await
                .map_err(|source| RuntimeError::Connect {
                    path: socket.display().to_string(),
                    source,
                })?;
        let me = Containerd {
            client: std::sync::Arc::new(Client::from(channel)),
            namespace: namespace.to_string(),
            socket: socket.to_path_buf(),
            accounts: AccountsCache::default(),
            exec_processes: ExecProcesses::default(),
        };
        me.version().await?;
        Ok(me)
    }

    /// Connects, retrying with back-off (0.5 s doubling to 10 s) until containerd answers.
    /// The agent starts before containerd on many nodes; it waits rather than exits.
    pub async fn connect_with_backoff(socket: &Path, namespace: &str) -> Self {
        let mut delay = Duration::from_millis(500);
        loop {
            match Self::connect(socket, namespace).await {
                Ok(c) => {
                    info!(socket = %socket.display(), namespace, "connected to containerd");
                    return c;
                }
                Err(e) => {
                    warn!(error = %e, retry_in = ?delay, "containerd not reachable");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The image accounts read so far (see `image_accounts`); image GC prunes it.
    pub fn accounts_cache(&self) -> &super::accounts::AccountsCache {
        &self.accounts
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Wraps a message with the namespace header.
    pub fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut().insert(
            "containerd-namespace",
            self.namespace
                .parse()
                .expect("namespace is a valid header value"),
        );
        r
    }

    /// Same as `req`, with a lease so containerd's GC cannot collect what the call writes.
    pub fn req_leased<T>(&self, msg: T, lease: &str) -> tonic::Request<T> {
        let mut r = self.req(msg);
        if let Ok(v) = lease.parse() {
            r.metadata_mut().insert("containerd-lease", v);
        }
        r
    }

    pub async fn version(&self) -> Result<String> {
        let v = call(
            "version",
            "daemon",
            CALL_TIMEOUT,
            self.client.version().version(()),
        )
        .await?;
        Ok(v.version)
    }
}

/// Runs one gRPC call under a deadline and maps its errors to `RuntimeError`.
pub async fn call<T, F>(
    op: &'static str,
    object: impl Into<String>,
    timeout: Duration,
    fut: F,
) -> Result<T>
where
    F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(timeout, fut).await;
    let failed = !matches!(result, Ok(Ok(_)));
    crate::metrics::runtime_op(&op.replace(' ', "_"), started.elapsed(), failed);
    match result {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(RuntimeError::Call {
            op,
            object: object.into(),
            status: Box::new(status),
        }),
        Err(_) => Err(RuntimeError::Timeout {
            op,
            object: object.into(),
            secs: timeout.as_secs(),
        }),
    }
}
