//! A CSI driver and a registrar in memory, served on unix sockets, for unit tests of the
//! registration handshake and the volume calls (the integration tests use a real driver).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tonic::{Request, Response, Status};

use super::proto::csi::{self as pb, node_server, node_service_capability};
use super::proto::registration::{self as reg, registration_server};

/// One call the driver got: the method and what matters of its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub method: &'static str,
    pub volume_id: String,
    pub target: String,
    pub staging: String,
    pub readonly: bool,
    pub publish_context: Vec<(String, String)>,
    pub volume_context: Vec<(String, String)>,
    pub mode: i32,
    pub mount_group: String,
    pub secrets: Vec<(String, String)>,
    /// The capability's access type is Block (a raw block volume).
    pub block: bool,
}

/// The driver: it records every call, marks targets and staging paths as mounted in the
/// `mounted` set (shared with the test's fake mounter), and fails publishes on request.
#[derive(Clone, Default)]
pub(crate) struct FakeDriver {
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub stage: bool,
    pub mount_group: bool,
    /// GET_VOLUME_STATS: NodeGetVolumeStats answers 1 GiB with the target's length used.
    pub volume_stats: bool,
    pub fail_publish: Arc<Mutex<Option<Status>>>,
    pub mounted: Arc<Mutex<std::collections::HashSet<PathBuf>>>,
}

fn sorted(m: &std::collections::HashMap<String, String>) -> Vec<(String, String)> {
    let mut v: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort();
    v
}

impl FakeDriver {
    fn record(&self, c: Call) {
        self.calls.lock().unwrap().push(c);
    }
    pub(crate) fn methods(&self) -> Vec<&'static str> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.method)
            .collect()
    }
    pub(crate) fn call(&self, method: &str) -> Option<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.method == method)
            .cloned()
    }
}

fn blank(method: &'static str) -> Call {
    Call {
        method,
        volume_id: String::new(),
        target: String::new(),
        staging: String::new(),
        readonly: false,
        publish_context: vec![],
        volume_context: vec![],
        mode: 0,
        mount_group: String::new(),
        secrets: vec![],
        block: false,
    }
}

fn is_block(c: &Option<pb::VolumeCapability>) -> bool {
    matches!(
        c.as_ref().and_then(|c| c.access_type.as_ref()),
        Some(pb::volume_capability::AccessType::Block(_))
    )
}

fn mode_and_group(c: &Option<pb::VolumeCapability>) -> (i32, String) {
    let mode = c
        .as_ref()
        .and_then(|c| c.access_mode.as_ref())
        .map_or(0, |a| a.mode);
    let group = match c.as_ref().and_then(|c| c.access_type.as_ref()) {
        Some(pb::volume_capability::AccessType::Mount(m)) => m.volume_mount_group.clone(),
        _ => String::new(),
    };
    (mode, group)
}

#[tonic::async_trait]
impl node_server::Node for FakeDriver {
    async fn node_stage_volume(
        &self,
        r: Request<pb::NodeStageVolumeRequest>,
    ) -> Result<Response<pb::NodeStageVolumeResponse>, Status> {
        let r = r.into_inner();
        let (mode, mount_group) = mode_and_group(&r.volume_capability);
        self.mounted
            .lock()
            .unwrap()
            .insert(PathBuf::from(&r.staging_target_path));
        self.record(Call {
            volume_id: r.volume_id,
            staging: r.staging_target_path,
            publish_context: sorted(&r.publish_context),
            volume_context: sorted(&r.volume_context),
            mode,
            mount_group,
            secrets: sorted(&r.secrets),
            block: is_block(&r.volume_capability),
            ..blank("NodeStageVolume")
        });
        Ok(Response::new(pb::NodeStageVolumeResponse {}))
    }
    async fn node_unstage_volume(
        &self,
        r: Request<pb::NodeUnstageVolumeRequest>,
    ) -> Result<Response<pb::NodeUnstageVolumeResponse>, Status> {
        let r = r.into_inner();
        self.mounted
            .lock()
            .unwrap()
            .remove(Path::new(&r.staging_target_path));
        self.record(Call {
            volume_id: r.volume_id,
            staging: r.staging_target_path,
            ..blank("NodeUnstageVolume")
        });
        Ok(Response::new(pb::NodeUnstageVolumeResponse {}))
    }
    async fn node_publish_volume(
        &self,
        r: Request<pb::NodePublishVolumeRequest>,
    ) -> Result<Response<pb::NodePublishVolumeResponse>, Status> {
        let r = r.into_inner();
        let (mode, mount_group) = mode_and_group(&r.volume_capability);
        self.record(Call {
            volume_id: r.volume_id.clone(),
            target: r.target_path.clone(),
            staging: r.staging_target_path.clone(),
            readonly: r.readonly,
            publish_context: sorted(&r.publish_context),
            volume_context: sorted(&r.volume_context),
            mode,
            mount_group,
            secrets: sorted(&r.secrets),
            block: is_block(&r.volume_capability),
            ..blank("NodePublishVolume")
        });
        if let Some(s) = self.fail_publish.lock().unwrap().clone() {
            // A driver that made the target before failing: the agent must clean it up.
            let _ = std::fs::create_dir_all(&r.target_path);
            return Err(s);
        }
        if is_block(&r.volume_capability) {
            // A block volume is published as a file (here an empty one, for a device node).
            std::fs::write(&r.target_path, "")?;
        } else {
            std::fs::create_dir_all(&r.target_path)?;
        }
        self.mounted
            .lock()
            .unwrap()
            .insert(PathBuf::from(&r.target_path));
        Ok(Response::new(pb::NodePublishVolumeResponse {}))
    }
    async fn node_unpublish_volume(
        &self,
        r: Request<pb::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<pb::NodeUnpublishVolumeResponse>, Status> {
        let r = r.into_inner();
        self.mounted
            .lock()
            .unwrap()
            .remove(Path::new(&r.target_path));
        if std::fs::remove_dir(&r.target_path).is_err() {
            let _ = std::fs::remove_file(&r.target_path);
        }
        self.record(Call {
            volume_id: r.volume_id,
            target: r.target_path,
            ..blank("NodeUnpublishVolume")
        });
        Ok(Response::new(pb::NodeUnpublishVolumeResponse {}))
    }
    async fn node_get_volume_stats(
        &self,
        r: Request<pb::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<pb::NodeGetVolumeStatsResponse>, Status> {
        let r = r.into_inner();
        self.record(Call {
            volume_id: r.volume_id.clone(),
            target: r.volume_path.clone(),
            staging: r.staging_target_path,
            ..blank("NodeGetVolumeStats")
        });
        if !self.volume_stats {
            return Err(Status::unimplemented("no stats"));
        }
        use pb::volume_usage::Unit;
        let usage = |unit: Unit, total: i64, used: i64| pb::VolumeUsage {
            available: total - used,
            total,
            used,
            unit: unit as i32,
        };
        Ok(Response::new(pb::NodeGetVolumeStatsResponse {
            usage: vec![
                usage(Unit::Bytes, 1 << 30, r.volume_path.len() as i64),
                usage(Unit::Inodes, 100, 1),
            ],
            volume_condition: None,
        }))
    }
    async fn node_get_capabilities(
        &self,
        _: Request<pb::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<pb::NodeGetCapabilitiesResponse>, Status> {
        use node_service_capability::rpc::Type;
        let mut types = vec![];
        if self.stage {
            types.push(Type::StageUnstageVolume);
        }
        if self.mount_group {
            types.push(Type::VolumeMountGroup);
        }
        if self.volume_stats {
            types.push(Type::GetVolumeStats);
        }
        let capabilities = types
            .into_iter()
            .map(|t| pb::NodeServiceCapability {
                r#type: Some(node_service_capability::Type::Rpc(
                    node_service_capability::Rpc { r#type: t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(pb::NodeGetCapabilitiesResponse {
            capabilities,
        }))
    }
    async fn node_get_info(
        &self,
        _: Request<pb::NodeGetInfoRequest>,
    ) -> Result<Response<pb::NodeGetInfoResponse>, Status> {
        Ok(Response::new(pb::NodeGetInfoResponse {
            node_id: "fake-node-id".into(),
            max_volumes_per_node: 7,
            accessible_topology: Some(pb::Topology {
                segments: [("topology.fake/zone".to_string(), "z1".to_string())].into(),
            }),
        }))
    }
}

/// A registrar: what GetInfo answers, and the statuses it was told.
#[derive(Clone)]
pub(crate) struct FakeRegistrar {
    pub info: reg::PluginInfo,
    pub statuses: Arc<Mutex<Vec<reg::RegistrationStatus>>>,
}

#[tonic::async_trait]
impl registration_server::Registration for FakeRegistrar {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }
    async fn notify_registration_status(
        &self,
        r: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        self.statuses.lock().unwrap().push(r.into_inner());
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Serves `svc` on a new unix socket at `path` until the returned task is aborted.
pub(crate) fn serve<S>(path: &Path, svc: S) -> tokio::task::JoinHandle<()>
where
    S: tower::Service<
            tonic::codegen::http::Request<tonic::body::Body>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let incoming = futures::stream::unfold(listener, |l| async move {
        Some((l.accept().await.map(|(s, _)| s), l))
    });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await;
    })
}
