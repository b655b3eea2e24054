//! Calls to a CSI driver over its unix socket. One connection per operation, as upstream's
//! CSI client makes them: a driver restarted between two calls (a DaemonSet rollout) is
//! simply dialled again, and no connection is held for drivers that are idle.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::proto::csi::{self as pb, node_client::NodeClient, node_service_capability};

/// Upstream's csiTimeout for node operations (stage, publish and their undoing).
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(120);
/// What NodeGetInfo and NodeGetCapabilities may take.
pub(crate) const INFO_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("cannot connect to the CSI driver at {}: {source}", endpoint.display())]
    Connect {
        endpoint: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    /// The driver answered with an error: shown as upstream shows gRPC errors
    /// (`rpc error: code = Internal desc = ...`).
    #[error("rpc error: code = {} desc = {}", code_name(.0.code()), .0.message())]
    Rpc(tonic::Status),
}

impl CsiError {
    /// The gRPC code of a driver's answer (None when it could not be reached).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CsiError::Rpc(s) => Some(s.code()),
            CsiError::Connect { .. } => None,
        }
    }
}

/// gRPC code names as Go's grpc prints them (`codes.Code.String()`), which is what users see
/// in upstream's events.
fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// A channel to a unix socket; the URI is a placeholder tonic needs and never dials.
pub(crate) async fn connect_unix(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = socket.to_path_buf();
    Endpoint::from_static("http://[::]:0")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(unix_stream(&path).await?))
            }
        }))
        .await
}

/// What a unix socket address holds of a path (sun_path, less its NUL).
const MAX_SUN_PATH: usize = 107;

/// Connects to the socket at `path`; one longer than a socket address holds (a deep
/// `--root-dir` makes the registration sockets' paths long) is reached through
/// `/proc/self/fd/<its folder>/<name>`, which is short whatever the folder, as the
/// registrars that bind there do.
async fn unix_stream(path: &Path) -> std::io::Result<tokio::net::UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    if path.as_os_str().as_bytes().len() <= MAX_SUN_PATH {
        return tokio::net::UnixStream::connect(path).await;
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return tokio::net::UnixStream::connect(path).await;
    };
    // Held open until the connection is made.
    let folder = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd")
        .join(folder.as_raw_fd().to_string())
        .join(name);
    tokio::net::UnixStream::connect(short).await
}

/// What a driver's Node service says it can do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    pub stage_unstage: bool,
    pub volume_stats: bool,
    pub volume_condition: bool,
    pub single_node_multi_writer: bool,
    pub volume_mount_group: bool,
}

/// The node's identity as the driver reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: String,
    pub max_volumes: i64,
    pub topology: HashMap<String, String>,
}

/// One driver, by its socket.
pub(crate) struct DriverClient {
    endpoint: PathBuf,
}

fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}

impl DriverClient {
    pub(crate) fn new(endpoint: impl Into<PathBuf>) -> Self {
        DriverClient {
            endpoint: endpoint.into(),
        }
    }

    async fn node(&self) -> Result<NodeClient<Channel>, CsiError> {
        let ch = connect_unix(&self.endpoint)
            .await
            .map_err(|source| CsiError::Connect {
                endpoint: self.endpoint.clone(),
                source,
            })?;
        Ok(NodeClient::new(ch))
    }

    pub(crate) async fn node_get_info(&self) -> Result<NodeInfo, CsiError> {
        let r = self
            .node()
            .await?
            .node_get_info(request(pb::NodeGetInfoRequest {}, INFO_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?
            .into_inner();
        Ok(NodeInfo {
            node_id: r.node_id,
            max_volumes: r.max_volumes_per_node,
            topology: r
                .accessible_topology
                .map(|t| t.segments)
                .unwrap_or_default(),
        })
    }

    pub(crate) async fn node_capabilities(&self) -> Result<NodeCapabilities, CsiError> {
        let r = self
            .node()
            .await?
            .node_get_capabilities(request(pb::NodeGetCapabilitiesRequest {}, INFO_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?
            .into_inner();
        use node_service_capability::rpc::Type;
        let mut caps = NodeCapabilities::default();
        for c in r.capabilities {
            let Some(node_service_capability::Type::Rpc(rpc)) = c.r#type else {
                continue;
            };
            match Type::try_from(rpc.r#type) {
                Ok(Type::StageUnstageVolume) => caps.stage_unstage = true,
                Ok(Type::GetVolumeStats) => caps.volume_stats = true,
                Ok(Type::VolumeCondition) => caps.volume_condition = true,
                Ok(Type::SingleNodeMultiWriter) => caps.single_node_multi_writer = true,
                Ok(Type::VolumeMountGroup) => caps.volume_mount_group = true,
                _ => {}
            }
        }
        Ok(caps)
    }

    pub(crate) async fn stage(&self, req: pb::NodeStageVolumeRequest) -> Result<(), CsiError> {
        self.node()
            .await?
            .node_stage_volume(request(req, OPERATION_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?;
        Ok(())
    }

    pub(crate) async fn unstage(&self, volume_id: &str, staging: &Path) -> Result<(), CsiError> {
        let req = pb::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_string(),
            staging_target_path: staging.to_string_lossy().into_owned(),
        };
        self.node()
            .await?
            .node_unstage_volume(request(req, OPERATION_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?;
        Ok(())
    }

    pub(crate) async fn publish(&self, req: pb::NodePublishVolumeRequest) -> Result<(), CsiError> {
        self.node()
            .await?
            .node_publish_volume(request(req, OPERATION_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?;
        Ok(())
    }

    /// The volume's usage (upstream sends the volume ID and the pod's target path only).
    pub(crate) async fn volume_stats(
        &self,
        volume_id: &str,
        target: &Path,
    ) -> Result<pb::NodeGetVolumeStatsResponse, CsiError> {
        let req = pb::NodeGetVolumeStatsRequest {
            volume_id: volume_id.to_string(),
            volume_path: target.to_string_lossy().into_owned(),
            staging_target_path: String::new(),
        };
        Ok(self
            .node()
            .await?
            .node_get_volume_stats(request(req, INFO_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?
            .into_inner())
    }

    pub(crate) async fn unpublish(&self, volume_id: &str, target: &Path) -> Result<(), CsiError> {
        let req = pb::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_string(),
            target_path: target.to_string_lossy().into_owned(),
        };
        self.node()
            .await?
            .node_unpublish_volume(request(req, OPERATION_TIMEOUT))
            .await
            .map_err(CsiError::Rpc)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_deeper_than_a_socket_address_holds_is_still_reached() {
        use std::os::unix::io::AsRawFd;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a".repeat(60)).join("b".repeat(60));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("driver-reg.sock");
        assert!(socket.as_os_str().len() > MAX_SUN_PATH);
        // Bound the way registrars bind such a path.
        let folder = std::fs::File::open(&dir).unwrap();
        let short = format!("/proc/self/fd/{}/driver-reg.sock", folder.as_raw_fd());
        let listener = tokio::net::UnixListener::bind(&short).unwrap();
        assert!(
            tokio::net::UnixStream::connect(&socket).await.is_err(),
            "too long for a plain connect"
        );
        let (accepted, connected) = tokio::join!(listener.accept(), unix_stream(&socket));
        accepted.unwrap();
        connected.unwrap();
    }
}
