//! The storage objects a pod's claims lead to (its PersistentVolumeClaims, their bound
//! PersistentVolumes) and the node's own object (its labels, for a local volume's node
//! affinity), read by a GET each time a pod's volumes are set up, as upstream's volume
//! manager reads them: a binding changes once, and only pods waiting for one read again.
//! The Node authorizer lets a node get the claims and volumes of its own pods. CSIDrivers and
//! VolumeAttachments (a CSI volume's driver settings and attach state) are read the same way.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::api::Api;

use super::ObjectError;

/// The API's resource names, as its NotFound message spells them.
pub(crate) const CLAIMS: &str = "persistentvolumeclaims";
pub(crate) const VOLUMES: &str = "persistentvolumes";
pub(crate) const NODES: &str = "nodes";
pub(crate) const ATTACHMENTS: &str = "volumeattachments";

fn error(
    resource: &'static str,
    namespace: Option<&str>,
    name: &str,
    e: kube::Error,
) -> ObjectError {
    match e {
        kube::Error::Api(s) if s.code == 404 => ObjectError::Missing {
            resource,
            name: name.to_string(),
        },
        source => ObjectError::Get {
            resource,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            source,
        },
    }
}

pub(crate) async fn claim(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Arc<PersistentVolumeClaim>, ObjectError> {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map(Arc::new)
        .map_err(|e| error(CLAIMS, Some(namespace), name, e))
}

pub(crate) async fn volume(
    client: &kube::Client,
    name: &str,
) -> Result<Arc<PersistentVolume>, ObjectError> {
    Api::<PersistentVolume>::all(client.clone())
        .get(name)
        .await
        .map(Arc::new)
        .map_err(|e| error(VOLUMES, None, name, e))
}

pub(crate) async fn node(client: &kube::Client, name: &str) -> Result<Arc<Node>, ObjectError> {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .map(Arc::new)
        .map_err(|e| error(NODES, None, name, e))
}

/// None when the driver has no CSIDriver object (the API's defaults apply).
pub(crate) async fn csi_driver(
    client: &kube::Client,
    name: &str,
) -> Result<Option<Arc<CSIDriver>>, ObjectError> {
    match Api::<CSIDriver>::all(client.clone()).get(name).await {
        Ok(d) => Ok(Some(Arc::new(d))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(error("csidrivers", None, name, e)),
    }
}

pub(crate) async fn volume_attachment(
    client: &kube::Client,
    name: &str,
) -> Result<Arc<VolumeAttachment>, ObjectError> {
    Api::<VolumeAttachment>::all(client.clone())
        .get(name)
        .await
        .map(Arc::new)
        .map_err(|e| error(ATTACHMENTS, None, name, e))
}
