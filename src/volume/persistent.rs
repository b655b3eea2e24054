//! Volumes a pod gets through a PersistentVolumeClaim (a `persistentVolumeClaim` source, or
//! the claim the ephemeral volume controller makes for an `ephemeral` one), as upstream's
//! volume manager resolves and mounts them:
//! - the claim must exist, not be being deleted, and be Bound; an ephemeral volume's claim
//!   must be owned by the pod; the bound PersistentVolume's claimRef must point back at the
//!   claim's UID. Until then the pod waits in ContainerCreating with upstream's words
//!   (`error processing PVC ns/name: PVC is not bound`), trying again every few seconds;
//! - the volume is read-only when the pod's claim source says `readOnly` (upstream's
//!   NewSpecFromPersistentVolume; the PV's access modes do not make it so);
//! - a volume's required node affinity must match this Node (upstream's CheckNodeAffinity,
//!   "no matching NodeSelectorTerms");
//! - in-tree `local` volumes are bind-mounted (read-only when the claim is) at
//!   `<pod>/volumes/kubernetes.io~local-volume/<pv name>`, the pod's fsGroup applied on the
//!   first mount when writable; `hostPath` volumes are used where they are, with the
//!   hostPath type checks. Teardown unmounts the bind without entering it (`teardown`).
//!
//! A PV with `volumeMode: Block` is a raw block volume (`block`): its mode is checked
//! against the containers' use of it, an in-tree `local` one mapped here.
//!
//! CSI volumes are set up by their driver (`csi`, before this blocking pass). Other sources
//! (network storage) are refused naming the source: they are not served by this agent yet.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use tracing::info;

use super::fetch::{claim_name, Fetched};
use super::mounter::Mounter;
use super::source::{SetUp, VolumeSource};
use super::{fs_group, host_path, Blame, HostVolume, VolumeError, VolumeKind};
use crate::objects::ObjectError;

pub const LOCAL_VOLUME_PLUGIN: &str = "kubernetes.io~local-volume";

/// Why a pod's claim cannot be used yet, in upstream's words.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error("failed to fetch PVC from API server: {0}")]
    FetchClaim(#[source] Arc<ObjectError>),
    #[error("the claim was not read before the set-up")]
    ClaimNotRead,
    #[error(
        "PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)"
    )]
    NotOwner {
        namespace: String,
        claim: String,
        pod: String,
    },
    #[error("PVC is being deleted")]
    Deleting,
    #[error("PVC is not bound")]
    NotBound,
    #[error("failed to fetch PV {pv} from API server: {source}")]
    FetchVolume {
        pv: String,
        #[source]
        source: Arc<ObjectError>,
    },
    #[error("PV {0} was not read before the set-up")]
    VolumeNotRead(String),
    #[error("found PV object {0} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim")]
    NoClaimRef(String),
    #[error("found PV object {pv} but its pv.Spec.ClaimRef.UID {have} does not point to claim.UID {want}")]
    OtherClaim {
        pv: String,
        have: String,
        want: String,
    },
}

/// The claim and its volume, or why the claim cannot be used yet.
fn claim_reason(
    pod: &Pod,
    vol: &Volume,
    claim: &str,
    read: Option<Result<Arc<PersistentVolumeClaim>, Arc<ObjectError>>>,
    fetched: &Fetched,
) -> Result<(Arc<PersistentVolumeClaim>, Arc<PersistentVolume>), ClaimError> {
    let pvc = match read {
        Some(Ok(c)) => c,
        Some(Err(e)) => return Err(ClaimError::FetchClaim(e)),
        None => return Err(ClaimError::ClaimNotRead),
    };
    if vol.ephemeral.is_some() {
        let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let owned = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == pod_uid);
        if !owned {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            return Err(ClaimError::NotOwner {
                namespace: ns.to_string(),
                claim: claim.to_string(),
                pod: name.to_string(),
            });
        }
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err(ClaimError::Deleting);
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default();
    if phase != Some("Bound") || pv_name.is_empty() {
        return Err(ClaimError::NotBound);
    }
    let pv = match fetched.persistent_volume(pv_name) {
        Some(Ok(pv)) => pv,
        Some(Err(source)) => {
            return Err(ClaimError::FetchVolume {
                pv: pv_name.to_string(),
                source,
            })
        }
        None => return Err(ClaimError::VolumeNotRead(pv_name.to_string())),
    };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let Some(claim_ref) = claim_ref else {
        return Err(ClaimError::NoClaimRef(pv_name.to_string()));
    };
    let want = pvc.metadata.uid.as_deref().unwrap_or_default();
    let have = claim_ref.uid.as_deref().unwrap_or_default();
    if have != want {
        return Err(ClaimError::OtherClaim {
            pv: pv_name.to_string(),
            have: have.to_string(),
            want: want.to_string(),
        });
    }
    Ok((pvc, pv))
}

/// A claim-backed volume of the pod followed to its PersistentVolume, with whether the pod
/// asks for it read-only; the errors in upstream's words.
pub(super) fn resolve(
    pod: &Pod,
    vol: &Volume,
    fetched: &Fetched,
    blame: &Blame<'_>,
) -> Result<(Arc<PersistentVolume>, bool), VolumeError> {
    let claim = claim_name(pod, vol).unwrap_or_default();
    if claim.is_empty() {
        return Err(blame.invalid("persistentVolumeClaim.claimName", "is required".into()));
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let read = fetched.claim(&claim);
    let transient = read
        .as_ref()
        .is_some_and(|r| r.as_ref().is_err_and(|e| !e.is_not_found()));
    let (_, pv) =
        claim_reason(pod, vol, &claim, read, fetched).map_err(|e| VolumeError::Claim {
            pod: blame.pod.to_string(),
            volume: blame.volume.to_string(),
            claim: format!("{namespace}/{claim}"),
            reason: e.to_string(),
            transient,
        })?;
    let read_only = vol
        .persistent_volume_claim
        .as_ref()
        .and_then(|c| c.read_only)
        .unwrap_or(false);
    Ok((pv, read_only))
}

/// Sets up a claim-backed volume of the pod (see the module documentation).
pub(super) fn setup(
    pod: &Pod,
    vol: &Volume,
    pod_dir: &Path,
    fetched: &Fetched,
    blame: &Blame<'_>,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    let (pv, read_only) = resolve(pod, vol, fetched, blame)?;
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    // Errors past this point name the volume as upstream's do: by the PV's name.
    let pv_blame = Blame {
        pod: blame.pod,
        volume: &pv_name,
    };
    let spec = pv.spec.clone().unwrap_or_default();
    // Upstream's populator: the pod's volume, by its own name, against the PV's mode.
    let mode = super::block::volume_mode(&pv);
    super::block::uses(pod).check(blame.pod, &vol.name, mode)?;
    if let Some(required) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
    {
        let node = match fetched.node() {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(pv_blame.object(e)),
            None => return Err(pv_blame.failed("the node was not read before the set-up".into())),
        };
        if !crate::pod::admission::node_affinity::selector_matches(required, &node) {
            return Err(VolumeError::NodeAffinity {
                pod: blame.pod.to_string(),
                volume: pv_name.clone(),
                reason: "no matching NodeSelectorTerms".into(),
            });
        }
    }
    if spec.csi.is_some() {
        // Set up (mounted or mapped) by the driver before this blocking pass (`volume::csi`).
        return fetched.csi_outcome(&vol.name).unwrap_or_else(|| {
            Err(pv_blame.failed("the CSI volume was not set up before this pass".into()))
        });
    }
    if mode == super::block::BLOCK {
        return setup_block(
            pod, &spec, &pv_name, read_only, pod_dir, fetched, &pv_blame, m,
        );
    }
    if let Some(local) = &spec.local {
        return setup_local(pod, &pv_name, &local.path, read_only, pod_dir, &pv_blame, m);
    }
    if let Some(hp) = &spec.host_path {
        host_path::check_path(&hp.path)
            .map_err(|r| pv_blame.invalid("persistentVolume hostPath.path", r.to_string()))?;
        let path = PathBuf::from(&hp.path);
        host_path::check_type(&path, hp.type_.as_deref().unwrap_or(""))
            .map_err(|r| pv_blame.failed(r.to_string()))?;
        return Ok(HostVolume {
            path,
            read_only,
            kind: VolumeKind::HostPath,
        });
    }
    let kind = super::set_fields(&spec)
        .into_iter()
        .find(|f| !NOT_SOURCES.contains(&f.as_str()))
        .unwrap_or_else(|| "none".into());
    Err(pv_blame.unsupported(&format!("persistentVolume.{kind}")))
}

/// A PV with volumeMode Block but not CSI (mapped by its driver before this pass): an
/// in-tree `local` device is mapped here; other sources have no block mapper, as upstream's.
#[allow(clippy::too_many_arguments)]
fn setup_block(
    pod: &Pod,
    spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec,
    pv_name: &str,
    read_only: bool,
    pod_dir: &Path,
    fetched: &Fetched,
    blame: &Blame<'_>,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    if let Some(local) = &spec.local {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        return super::block::set_up_local(
            uid,
            pv_name,
            &local.path,
            read_only,
            pod_dir,
            &fetched.root_dir,
            blame,
            m,
        );
    }
    let kind = super::set_fields(spec)
        .into_iter()
        .find(|f| !NOT_SOURCES.contains(&f.as_str()))
        .unwrap_or_else(|| "none".into());
    Err(blame.unsupported(&format!("persistentVolume.{kind} volumeMode Block")))
}

/// The fields of a PersistentVolumeSpec that are not its volume source.
const NOT_SOURCES: [&str; 8] = [
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeMode",
];

fn setup_local(
    pod: &Pod,
    pv_name: &str,
    path: &str,
    read_only: bool,
    pod_dir: &Path,
    blame: &Blame<'_>,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    host_path::check_path(path)
        .map_err(|r| blame.invalid("persistentVolume local.path", r.to_string()))?;
    let source = PathBuf::from(path);
    if std::fs::metadata(&source).is_err() {
        return Err(blame.failed(format!(
            "local volume path {path} does not exist on this node"
        )));
    }
    let volumes_dir = pod_dir.join("volumes");
    let plugin = volumes_dir.join(LOCAL_VOLUME_PLUGIN);
    crate::data_dirs::ensure_private_dir(&volumes_dir)
        .and_then(|()| crate::data_dirs::ensure_private_dir(&plugin))
        .map_err(|e| blame.failed(e.to_string()))?;
    let dir = plugin.join(pv_name);
    super::empty_dir::setup_dir(&dir)
        .map_err(|e| blame.failed(format!("cannot create {}: {e}", dir.display())))?;
    // Read before the bind, so a spec error leaves no mount behind.
    let group = match super::ownership::fs_group(pod)
        .map_err(|r| blame.invalid("securityContext.fsGroup", r.to_string()))?
    {
        Some(g) if !read_only => {
            let policy = fs_group::change_policy(pod)
                .map_err(|e| blame.invalid("securityContext.fsGroupChangePolicy", e.to_string()))?;
            Some((g, policy))
        }
        _ => None,
    };
    let mounted = m
        .mounted_fs(&dir)
        .map_err(|e| blame.failed(format!("cannot check mounts at {}: {e}", dir.display())))?
        .is_some();
    if !mounted {
        m.bind(&source, &dir).map_err(|e| {
            blame.failed(format!(
                "bind mount of {path} at {} failed: {e}",
                dir.display()
            ))
        })?;
        if read_only {
            if let Err(e) = m.remount_read_only(&dir) {
                // Never leave a writable mount of a volume meant to be read-only.
                let _ = m.unmount(&dir);
                return Err(blame.failed(format!(
                    "read-only remount of {} failed: {e}",
                    dir.display()
                )));
            }
        } else if let Some((group, policy)) = group {
            if let Err(e) = fs_group::apply(&dir, group, policy) {
                // As the read-only remount above: no mount left behind that the pod would
                // find on the next pass and take as done, without its group.
                let _ = m.unmount(&dir);
                return Err(blame.failed(format!("applying fsGroup {group} to {path}: {e}")));
            }
        }
        info!(
            pod = blame.pod,
            volume = pv_name,
            path,
            read_only,
            "mounted local volume"
        );
    }
    Ok(HostVolume {
        path: dir,
        read_only,
        kind: VolumeKind::Local,
    })
}

/// persistentVolumeClaim and generic `ephemeral` volumes (the field each serves): followed to
/// their bound PersistentVolume, which names its plugin.
pub(super) struct Claim(pub(super) &'static str);

impl VolumeSource for Claim {
    fn field(&self) -> &'static str {
        self.0
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        setup(cx.pod, vol, cx.pod_dir, cx.fetched, cx.blame, cx.m)
    }
}
