//! What ADD ran and returned, per sandbox and interface, so that DEL runs the same plugins
//! with the same prevResult even if the conf dir changed in between (libcni keeps the same
//! under /var/lib/cni/results; ours lives in a dir the agent owns).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::network::NetworkError;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CachedAttachment {
    /// The network as a conflist, exactly as ADD used it.
    pub network: Value,
    /// The final result of the chain.
    pub result: Value,
}

pub(crate) fn entry_path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(format!("{container_id}-{ifname}.json"))
}

pub(crate) async fn save(path: &Path, entry: &CachedAttachment) -> Result<(), NetworkError> {
    let err = |source| NetworkError::Cache {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(err)?;
    }
    let bytes = serde_json::to_vec(entry).expect("cache entries always serialize");
    // Write-then-rename: a crash never leaves a half-written entry for DEL to trip over.
    let tmp = path.with_extension("json.tmp");
    tokio::fs::write(&tmp, bytes).await.map_err(err)?;
    tokio::fs::rename(&tmp, path).await.map_err(err)
}

/// A missing entry is normal (ADD never finished, or no cache before); an unreadable one is
/// logged and ignored, because DEL must still be able to run from the current config.
pub(crate) async fn load(path: &Path) -> Option<CachedAttachment> {
    let bytes = match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable CNI result cache entry; using the current config");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(entry) => Some(entry),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "corrupt CNI result cache entry; using the current config");
            None
        }
    }
}

pub(crate) async fn remove(path: &Path) -> Result<(), NetworkError> {
    match tokio::fs::remove_file(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(NetworkError::Cache {
            path: path.to_path_buf(),
            source,
        }),
    }
}
