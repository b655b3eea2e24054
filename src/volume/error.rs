//! What can go wrong with a pod's volumes, each error naming the pod, the volume (or the
//! container and its volumeMount) and the field at fault, so the message alone tells a user
//! what to fix.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::objects::ObjectError;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The volume's spec is wrong (a bad path, a missing field): fixing the pod fixes it.
    #[error("pod {pod}: volume {volume:?}: {field}: {reason}")]
    Invalid {
        pod: String,
        volume: String,
        field: String,
        reason: String,
    },

    /// A kind this agent cannot serve (cluster-only sources, remote storage).
    #[error("pod {pod}: volume {volume:?}: volume kind {kind} is not supported by this node agent{hint}")]
    Unsupported {
        pod: String,
        volume: String,
        kind: String,
        /// Extra words for a user, e.g. that the kind needs the apiserver.
        hint: String,
    },

    /// Setting the volume up failed on the node (upstream's "MountVolume.SetUp failed").
    #[error("pod {pod}: MountVolume.SetUp failed for volume {volume:?} : {reason}")]
    SetUp {
        pod: String,
        volume: String,
        reason: String,
    },

    /// An object the volume needs could not be read (or does not exist and is not optional):
    /// the pod waits in ContainerCreating until it can be.
    #[error("pod {pod}: MountVolume.SetUp failed for volume {volume:?} : {source}")]
    Object {
        pod: String,
        volume: String,
        #[source]
        source: Arc<ObjectError>,
    },

    /// A claim-backed volume whose claim cannot be used (yet): not bound, being deleted,
    /// not the pod's, or its volume not bound back to it. The pod waits in
    /// ContainerCreating.
    #[error("pod {pod}: volume {volume:?}: error processing PVC {claim}: {reason}")]
    Claim {
        pod: String,
        volume: String,
        /// `namespace/name`.
        claim: String,
        reason: String,
        /// The claim could not be read (as opposed to: it said no).
        transient: bool,
    },

    /// A persistent volume whose node affinity does not match this node.
    #[error("pod {pod}: MountVolume.NodeAffinity check failed for volume {volume:?} : {reason}")]
    NodeAffinity {
        pod: String,
        /// The PersistentVolume's name, as upstream's event names it.
        volume: String,
        reason: String,
    },

    /// A CSI driver's step failed or cannot happen yet (no driver registered, not attached,
    /// NodeStage or NodePublish refused); `message` is the event's text, in upstream's words
    /// (`MountVolume.SetUp failed for volume "pv" : rpc error: code = Internal desc = ...`).
    #[error("pod {pod}: volume {volume:?}: {message}")]
    Csi {
        pod: String,
        volume: String,
        message: String,
        /// Worth trying again soon (a driver that may register, an attach under way).
        transient: bool,
    },

    /// A claim's volume mode disagrees with how a container uses it (upstream's populator:
    /// a Block volume in volumeMounts, a Filesystem one in volumeDevices).
    #[error("pod {pod}: container {container:?}: volume {volume:?}: volume {volume} has volumeMode {mode}, but is specified in {field}")]
    VolumeMode {
        pod: String,
        /// The first container naming the volume in `field`.
        container: String,
        volume: String,
        mode: String,
        field: &'static str,
    },

    /// Mapping a raw block volume failed (upstream's "MapVolume.<op> failed").
    #[error("pod {pod}: MapVolume.{op} failed for volume {volume:?} : {reason}")]
    Map {
        pod: String,
        volume: String,
        op: &'static str,
        reason: String,
    },

    /// A container's volumeDevice cannot be given to it (upstream's makeBlockVolumes).
    #[error("pod {pod}: container {container:?}: volumeDevices[{index}] (volume {volume:?}): {field}: {reason}")]
    Device {
        pod: String,
        container: String,
        index: usize,
        volume: String,
        field: &'static str,
        reason: String,
    },

    /// A container's volumeMount cannot be turned into a mount.
    #[error("pod {pod}: container {container:?}: volumeMounts[{index}] (volume {volume:?}): {field}: {reason}")]
    Mount {
        pod: String,
        container: String,
        index: usize,
        volume: String,
        field: &'static str,
        reason: String,
    },

    /// A volumeMount's subPath (or subPathExpr) cannot be opened inside its volume or bound
    /// for the container: it leads outside, was swapped for a symlink meanwhile, or the
    /// node failed.
    #[error("pod {pod}: container {container:?}: volumeMounts[{index}] (volume {volume:?}): {field}: {source}")]
    SubPath {
        pod: String,
        container: String,
        index: usize,
        volume: String,
        /// `subPath` or `subPathExpr`.
        field: &'static str,
        /// Boxed: it names two paths, and every volume result carries this enum.
        #[source]
        source: Box<super::subpath::SubPathError>,
    },

    /// Tearing a pod's volumes down failed; the caller retries.
    #[error("tearing down volumes: {op} {path}: {source}")]
    TearDown {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The blocking worker thread was lost (panic or runtime shutdown).
    #[error("volume worker thread failed: {0}")]
    Worker(String),
}

impl VolumeError {
    /// Worth trying again soon: an object that could not be read (the apiserver unreachable,
    /// or the Node authorizer not yet aware of the pod's new binding), as opposed to one that
    /// does not exist, a node without an apiserver, or a spec that is wrong, which wait for
    /// someone to act.
    pub fn is_transient(&self) -> bool {
        match self {
            VolumeError::Object { source, .. } => matches!(
                **source,
                ObjectError::Api { .. } | ObjectError::Token { .. }
            ),
            VolumeError::Worker(_) => true,
            // A claim is bound a moment after the pod is scheduled (WaitForFirstConsumer
            // binds it then): waiting claims are looked at again soon, as upstream's
            // populator does.
            VolumeError::Claim { .. } => true,
            VolumeError::Csi { transient, .. } => *transient,
            _ => false,
        }
    }

    /// The FailedMount event's message, in upstream's words
    /// (`MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found`): the event
    /// already names the pod.
    pub fn event_message(&self) -> String {
        match self {
            VolumeError::SetUp { volume, reason, .. } => {
                format!("MountVolume.SetUp failed for volume {volume:?} : {reason}")
            }
            VolumeError::Object { volume, source, .. } => {
                format!("MountVolume.SetUp failed for volume {volume:?} : {source}")
            }
            // Upstream's WaitForAttachAndMount gives up on a volume its populator could
            // not process and its FailedMount event lists it.
            VolumeError::Claim {
                volume,
                claim,
                reason,
                ..
            } => format!(
                "Unable to attach or mount volumes: unmounted volumes=[{volume}], unattached volumes=[{volume}], failed to process volumes=[{volume}]: error processing PVC {claim}: {reason}"
            ),
            VolumeError::Csi { message, .. } => message.clone(),
            VolumeError::VolumeMode {
                volume, mode, field, ..
            } => format!(
                "Unable to attach or mount volumes: unmounted volumes=[{volume}], unattached volumes=[{volume}], failed to process volumes=[{volume}]: volume {volume} has volumeMode {mode}, but is specified in {field}"
            ),
            VolumeError::Map {
                volume, op, reason, ..
            } => format!("MapVolume.{op} failed for volume {volume:?} : {reason}"),
            VolumeError::NodeAffinity { volume, reason, .. } => {
                format!("MountVolume.NodeAffinity check failed for volume {volume:?} : {reason}")
            }
            other => other.to_string(),
        }
    }

    /// The waiting reason upstream shows for a container held back by this error: volume
    /// set-up keeps the pod in ContainerCreating (with a FailedMount event), while a bad
    /// volumeMount is the container's own CreateContainerConfigError.
    pub fn waiting_reason(&self) -> &'static str {
        match self {
            // Upstream's makeMounts fails the container's config for a subPath too.
            VolumeError::Mount { .. }
            | VolumeError::SubPath { .. }
            | VolumeError::Device { .. } => "CreateContainerConfigError",
            _ => "ContainerCreating",
        }
    }
}
