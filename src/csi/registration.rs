//! The plugin watcher: `<root-dir>/plugins_registry` and the registration handshake of
//! upstream's plugin manager, for CSI drivers.
//!
//! Level-triggered like the rest of the agent: every pass lists the sockets under the
//! folder (subfolders too, names starting with `.` skipped, as upstream's watcher), then
//! deregisters the drivers whose socket went away (or was replaced by a new one) and
//! registers the sockets not registered yet. inotify wakes the loop; a pass every
//! [`RESCAN`] anyway is the safety net, and a failed registration is tried again with a
//! back-off, as upstream's reconciler retries it.
//!
//! A registration: `GetInfo` on the plugin's socket (what it is, its name, its driver's
//! endpoint and CSI versions), the checks upstream's CSI handler makes, `NodeGetInfo` on the
//! driver, the node's `CSINode` and Node annotation written (`node_info`), then
//! `NotifyRegistrationStatus` tells the registrar how it went: node-driver-registrar exits
//! on a refusal, so the driver's pod shows the error.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inotify::{Inotify, WatchMask};
use tokio::time::Instant;
use tracing::{info, warn};

use super::client::{connect_unix, CsiError, DriverClient};
use super::node_info::CsiNodeWriter;
use super::proto::registration::{
    registration_client::RegistrationClient, InfoRequest, RegistrationStatus,
};
use super::{Driver, Drivers};

/// The plugin type this agent serves (upstream's `CSIPlugin`); device and DRA plugins are
/// told no.
pub const CSI_PLUGIN: &str = "CSIPlugin";
/// The folder under the root dir where registrars put their sockets.
pub const REGISTRY_DIR: &str = "plugins_registry";
/// A pass even when inotify says nothing.
const RESCAN: Duration = Duration::from_secs(30);
/// How long one registration call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Back-off of a failed registration.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(120);
/// How deep below the folder sockets are looked for.
const MAX_DEPTH: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("cannot reach the plugin's registration socket {}: {source}", socket.display())]
    Dial {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("GetInfo on {}: {source}", socket.display())]
    GetInfo {
        socket: PathBuf,
        #[source]
        source: tonic::Status,
    },
    /// The plugin was looked at and refused: this is what its registrar is told.
    #[error("{0}")]
    Refused(String),
}

/// A socket as seen in the folder: a new file at the same path is a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SocketId {
    ino: u64,
    ctime: i64,
}

struct Registered {
    id: SocketId,
    /// The driver it registered (None: not a CSI plugin, told no; kept so it is not asked
    /// again until its socket changes).
    driver: Option<String>,
}

struct Failure {
    id: SocketId,
    delay: Duration,
    next: Instant,
}

/// Runs the watcher until the task is dropped.
pub async fn run(root_dir: PathBuf, drivers: Drivers, node: Arc<dyn CsiNodeWriter>) {
    let dir = root_dir.join(REGISTRY_DIR);
    if let Err(e) = crate::data_dirs::ensure_private_dir(&dir) {
        warn!(dir = %dir.display(), error = %e, "cannot create the plugin registration folder; CSI drivers cannot register");
    }
    // The node's CSINode, once its Node exists (registration may still be under way).
    let init = node.clone();
    tokio::spawn(async move {
        let mut delay = RETRY_FIRST;
        while let Err(e) = init.init().await {
            tracing::debug!(error = %e, "the node's CSINode is not there yet; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(RETRY_MAX);
        }
    });
    let mut watcher = Watcher {
        dir,
        drivers,
        node,
        registered: BTreeMap::new(),
        failures: BTreeMap::new(),
    };
    let mut events = watch(&watcher.dir);
    loop {
        watcher.pass().await;
        let next_retry = watcher.failures.values().map(|f| f.next).min();
        let wake = next_retry.map_or(Instant::now() + RESCAN, |t| t.min(Instant::now() + RESCAN));
        tokio::select! {
            ev = async {
                match events.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            } => {
                if !matches!(ev, Some(Ok(_))) {
                    // The stream ended or failed: the timer alone drives the passes.
                    events = None;
                }
                // Subfolders created later are watched from the next set-up; a burst of
                // events is one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ = tokio::time::sleep_until(wake) => {
                if events.is_none() {
                    events = watch(&watcher.dir);
                }
            }
        }
    }
}

type Events = inotify::EventStream<Vec<u8>>;

fn watch(dir: &Path) -> Option<Events> {
    let mask = WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF;
    let r = (|| -> std::io::Result<Events> {
        let ino = Inotify::init()?;
        ino.watches().add(dir, mask)?;
        for sub in subdirs(dir) {
            let _ = ino.watches().add(&sub, mask);
        }
        ino.into_event_stream(vec![0u8; 4096])
    })();
    match r {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot watch the plugin registration folder; looking every 30 s");
            None
        }
    }
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if !hidden(&p) && e.file_type().is_ok_and(|t| t.is_dir()) && depth < MAX_DEPTH {
                out.push(p.clone());
                todo.push((p, depth + 1));
            }
        }
    }
    out
}

/// The sockets under `dir`, with their identities.
fn scan(dir: &Path) -> BTreeMap<PathBuf, SocketId> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if hidden(&p) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.file_type().is_socket() {
                out.insert(
                    p,
                    SocketId {
                        ino: meta.ino(),
                        ctime: meta.ctime(),
                    },
                );
            } else if meta.is_dir() && depth < MAX_DEPTH {
                todo.push((p, depth + 1));
            }
        }
    }
    out
}

struct Watcher {
    dir: PathBuf,
    drivers: Drivers,
    node: Arc<dyn CsiNodeWriter>,
    registered: BTreeMap<PathBuf, Registered>,
    failures: BTreeMap<PathBuf, Failure>,
}

impl Watcher {
    async fn pass(&mut self) {
        let dir = self.dir.clone();
        let sockets = tokio::task::spawn_blocking(move || scan(&dir))
            .await
            .unwrap_or_default();
        let gone: Vec<PathBuf> = self
            .registered
            .iter()
            .filter(|(p, r)| sockets.get(*p) != Some(&r.id))
            .map(|(p, _)| p.clone())
            .collect();
        for socket in gone {
            if let Some(r) = self.registered.remove(&socket) {
                if let Some(name) = r.driver {
                    self.deregister(&socket, &name).await;
                }
            }
        }
        self.failures.retain(|p, f| sockets.get(p) == Some(&f.id));
        let now = Instant::now();
        for (socket, id) in sockets {
            if self.registered.contains_key(&socket) {
                continue;
            }
            if self.failures.get(&socket).is_some_and(|f| f.next > now) {
                continue;
            }
            match register(&socket, &self.drivers, self.node.as_ref()).await {
                Ok(driver) => {
                    self.failures.remove(&socket);
                    self.registered.insert(socket, Registered { id, driver });
                }
                Err(e) => {
                    let delay = self
                        .failures
                        .get(&socket)
                        .map_or(RETRY_FIRST, |f| (f.delay * 2).min(RETRY_MAX));
                    warn!(socket = %socket.display(), error = %e, retry_in = ?delay, "plugin registration failed");
                    self.failures.insert(
                        socket,
                        Failure {
                            id,
                            delay,
                            next: now + delay,
                        },
                    );
                }
            }
        }
    }

    async fn deregister(&self, socket: &Path, name: &str) {
        // Only the driver this socket registered: a newer socket may have taken the name.
        let ours = self
            .drivers
            .get(name)
            .is_some_and(|d| d.registration == socket);
        if !ours {
            return;
        }
        self.drivers.remove(name);
        info!(driver = name, socket = %socket.display(), "CSI driver deregistered: its registration socket is gone");
        if let Err(e) = self.node.uninstall(name).await {
            warn!(driver = name, error = %e, "cannot remove the driver from the node's CSINode");
        }
    }
}

/// The highest CSI version of `versions` this agent speaks (1.x), as upstream's handler
/// picks it.
fn highest_supported(versions: &[String]) -> Option<String> {
    versions
        .iter()
        .filter_map(|v| {
            let v = v.trim_start_matches('v');
            let mut parts = v.split('.').map(|p| p.parse::<u64>());
            let major = parts.next()?.ok()?;
            let minor = parts.next().unwrap_or(Ok(0)).ok()?;
            let patch = parts.next().unwrap_or(Ok(0)).ok()?;
            (major == 1).then_some((major, minor, patch))
        })
        .max()
        .map(|(a, b, c)| format!("{a}.{b}.{c}"))
}

/// One socket's registration; Ok(None) when it is not a CSI plugin (it was told so).
async fn register(
    socket: &Path,
    drivers: &Drivers,
    node: &dyn CsiNodeWriter,
) -> Result<Option<String>, RegistrationError> {
    let ch = connect_unix(socket)
        .await
        .map_err(|source| RegistrationError::Dial {
            socket: socket.to_path_buf(),
            source,
        })?;
    let mut client = RegistrationClient::new(ch);
    let mut req = tonic::Request::new(InfoRequest {});
    req.set_timeout(CALL_TIMEOUT);
    let info = client
        .get_info(req)
        .await
        .map_err(|source| RegistrationError::GetInfo {
            socket: socket.to_path_buf(),
            source,
        })?
        .into_inner();
    let outcome = if info.r#type != CSI_PLUGIN {
        Err(format!(
            "no handler registered for plugin type: {} at socket {}",
            info.r#type,
            socket.display()
        ))
    } else {
        install(
            socket,
            &info.name,
            &info.endpoint,
            &info.supported_versions,
            drivers,
            node,
        )
        .await
    };
    let status = RegistrationStatus {
        plugin_registered: outcome.is_ok(),
        error: outcome.as_ref().err().cloned().unwrap_or_default(),
    };
    let mut req = tonic::Request::new(status);
    req.set_timeout(CALL_TIMEOUT);
    if let Err(e) = client.notify_registration_status(req).await {
        // The registrar went away meanwhile; its socket's removal deregisters the driver.
        warn!(socket = %socket.display(), error = %e, "cannot tell the plugin how its registration went");
    }
    match outcome {
        Ok(()) if info.r#type == CSI_PLUGIN => {
            info!(driver = %info.name, endpoint = %info.endpoint, socket = %socket.display(), "CSI driver registered");
            Ok(Some(info.name))
        }
        Ok(()) => Ok(None),
        Err(e) if info.r#type != CSI_PLUGIN => {
            warn!(socket = %socket.display(), plugin = %info.name, error = %e, "plugin refused");
            Ok(None)
        }
        Err(e) => Err(RegistrationError::Refused(e)),
    }
}

/// Upstream's CSI handler: ValidatePlugin, then RegisterPlugin.
async fn install(
    socket: &Path,
    name: &str,
    endpoint: &str,
    versions: &[String],
    drivers: &Drivers,
    node: &dyn CsiNodeWriter,
) -> Result<(), String> {
    if name.is_empty() {
        return Err("the plugin gave no driver name".into());
    }
    let Some(version) = highest_supported(versions) else {
        return Err(format!(
            "none of the CSI versions reported by this driver are supported: {versions:?}"
        ));
    };
    let endpoint = if endpoint.is_empty() {
        socket.to_path_buf()
    } else {
        PathBuf::from(endpoint)
    };
    let client = DriverClient::new(&endpoint);
    let info = client.node_get_info().await.map_err(|e: CsiError| {
        format!("error during CSI driver {name} registration: NodeGetInfo failed: {e}")
    })?;
    if info.node_id.is_empty() {
        return Err(format!(
            "error during CSI driver {name} registration: the driver reported an empty node ID"
        ));
    }
    drivers.insert(
        name,
        Driver {
            endpoint: endpoint.clone(),
            registration: socket.to_path_buf(),
            node_id: info.node_id.clone(),
            version,
        },
    );
    if let Err(e) = node.install(name, &info).await {
        drivers.remove(name);
        return Err(format!(
            "error updating CSINode object with CSI driver node info: {e}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
