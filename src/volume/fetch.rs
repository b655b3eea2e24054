//! What a pod's volumes reference in the cluster (ConfigMaps, Secrets, service-account
//! tokens), read through the `ClusterObjects` seam before the set-up, which then runs on a
//! blocking thread with everything in hand. A failed read is kept as the result of that
//! reference: whether it stops the volume (and with which words) is the set-up's decision,
//! since an optional reference to a missing object is an empty volume.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    ServiceAccountTokenProjection,
};

use crate::objects::{ClusterObjects, ObjectError, ServiceAccountToken, TokenSpec};

/// The API's default lifetime of a projected token (`expirationSeconds`).
pub(super) const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// One reference's read.
pub type Read<T> = Result<T, Arc<ObjectError>>;

/// The reads of one pass, by name (the pod's namespace is implied). No `Debug`: it holds
/// Secrets and tokens.
#[derive(Default)]
pub struct Fetched {
    config_maps: BTreeMap<String, Read<Arc<ConfigMap>>>,
    secrets: BTreeMap<String, Read<Arc<Secret>>>,
    tokens: HashMap<TokenSpec, Read<ServiceAccountToken>>,
    /// The pod's claims by name, and the volumes bound to them by name.
    claims: BTreeMap<String, Read<Arc<PersistentVolumeClaim>>>,
    volumes: BTreeMap<String, Read<Arc<PersistentVolume>>>,
    /// This node, read when a bound volume has a node affinity to check.
    node: Option<Read<Arc<Node>>>,
    /// The CSI volumes as their drivers left them this pass (`volume::csi`), by pod volume
    /// name.
    pub(super) csi: BTreeMap<String, super::csi::Outcome>,
    /// The agent's root dir: raw block volumes are mapped under its `plugins` folder.
    pub(super) root_dir: std::path::PathBuf,
}

/// What an optional or required reference resolves to: the object, nothing (missing but
/// optional), or the error that stops the volume.
fn resolve<T: Clone>(read: Option<&Read<T>>, optional: bool) -> Option<Read<Option<T>>> {
    Some(match read? {
        Ok(o) => Ok(Some(o.clone())),
        Err(e) if optional && e.is_not_found() => Ok(None),
        Err(e) => Err(e.clone()),
    })
}

impl Fetched {
    /// None when the pass never asked for it (a bug: fetch and set-up walk the same spec).
    pub fn config_map(&self, name: &str, optional: bool) -> Option<Read<Option<Arc<ConfigMap>>>> {
        resolve(self.config_maps.get(name), optional)
    }
    pub fn secret(&self, name: &str, optional: bool) -> Option<Read<Option<Arc<Secret>>>> {
        resolve(self.secrets.get(name), optional)
    }
    pub fn token(&self, spec: &TokenSpec) -> Option<Read<ServiceAccountToken>> {
        self.tokens.get(spec).cloned()
    }
    pub fn claim(&self, name: &str) -> Option<Read<Arc<PersistentVolumeClaim>>> {
        self.claims.get(name).cloned()
    }
    pub fn persistent_volume(&self, name: &str) -> Option<Read<Arc<PersistentVolume>>> {
        self.volumes.get(name).cloned()
    }
    pub fn node(&self) -> Option<Read<Arc<Node>>> {
        self.node.clone()
    }
    /// What the CSI pass made of a volume; None when it did not look at it.
    pub(super) fn csi_outcome(
        &self,
        volume: &str,
    ) -> Option<Result<super::HostVolume, super::VolumeError>> {
        self.csi.get(volume).cloned().map(|o| o.into_result())
    }
    /// Why the CSI pass's republish of a published volume failed (it stays as it was).
    pub(super) fn csi_republish_failure(&self, volume: &str) -> Option<super::VolumeError> {
        self.csi.get(volume).and_then(|o| o.republish_failure())
    }
}

/// The claim a pod's volume stands on: a persistentVolumeClaim's `claimName`, or the claim
/// the ephemeral volume controller makes for an `ephemeral` volume (`<pod>-<volume>`).
pub fn claim_name(pod: &Pod, vol: &k8s_openapi::api::core::v1::Volume) -> Option<String> {
    if let Some(c) = &vol.persistent_volume_claim {
        return Some(c.claim_name.clone());
    }
    vol.ephemeral.as_ref().map(|_| {
        format!(
            "{}-{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            vol.name
        )
    })
}

/// The service account a pod's tokens are for (the API sets `default` when the pod names
/// none).
pub(super) fn service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The token a projected `serviceAccountToken` source asks for: the pod's service account
/// (the API sets `default` when the pod names none), the source's audience and lifetime.
pub fn token_spec(pod: &Pod, tp: &ServiceAccountTokenProjection) -> TokenSpec {
    TokenSpec {
        service_account: service_account(pod),
        audience: tp.audience.clone().unwrap_or_default(),
        expiration_seconds: tp.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    }
}

/// Reads everything the pod's volumes reference, each object once.
pub async fn fetch(pod: &Pod, node_name: &str, objects: &dyn ClusterObjects) -> Fetched {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    let mut tokens = HashSet::new();
    for vol in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(cm) = &vol.config_map {
            config_maps.insert(cm.name.clone());
        }
        if let Some(s) = &vol.secret {
            secrets.extend(s.secret_name.clone());
        }
        for src in vol
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
        {
            if let Some(cm) = &src.config_map {
                config_maps.insert(cm.name.clone());
            }
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
            if let Some(tp) = &src.service_account_token {
                tokens.insert(token_spec(pod, tp));
            }
        }
    }
    let claims: BTreeSet<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| claim_name(pod, v))
        .collect();
    let mut out = Fetched::default();
    // An empty name is the set-up's error to report (naming the field), not a request.
    for name in config_maps.into_iter().filter(|n| !n.is_empty()) {
        let read = objects.config_map(namespace, &name).await.map_err(Arc::new);
        out.config_maps.insert(name, read);
    }
    for name in secrets.into_iter().filter(|n| !n.is_empty()) {
        let read = objects.secret(namespace, &name).await.map_err(Arc::new);
        out.secrets.insert(name, read);
    }
    for name in claims.into_iter().filter(|n| !n.is_empty()) {
        let read = objects
            .persistent_volume_claim(namespace, &name)
            .await
            .map_err(Arc::new);
        // The volume only once the claim is bound to one (the set-up says why not).
        let bound = read.as_ref().ok().and_then(|c| {
            let bound = c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            c.spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| bound && !v.is_empty())
        });
        out.claims.insert(name, read);
        if let Some(pv) = bound {
            let read = objects.persistent_volume(&pv).await.map_err(Arc::new);
            out.volumes.insert(pv, read);
        }
    }
    let affinity = out.volumes.values().any(|v| {
        v.as_ref()
            .is_ok_and(|pv| pv.spec.as_ref().is_some_and(|s| s.node_affinity.is_some()))
    });
    if affinity {
        out.node = Some(objects.node(node_name).await.map_err(Arc::new));
    }
    for spec in tokens {
        let read = objects
            .service_account_token(pod, &spec)
            .await
            .map_err(Arc::new);
        out.tokens.insert(spec, read);
    }
    out
}
