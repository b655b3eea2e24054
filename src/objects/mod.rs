//! Objects from the apiserver that the node's pods reference: ConfigMaps and Secrets (for
//! volumes, env and imagePullSecrets) and service-account tokens (TokenRequest, for
//! projected `serviceAccountToken` sources). Under the Node authorizer a node may read only
//! what its own pods reference, so everything is asked for by namespace and name, never
//! listed across a namespace.
//!
//! [`ClusterObjects`] is the seam the workers hold (`Shared::objects`): [`ApiObjects`] in
//! cluster mode, [`Standalone`] without an apiserver, and
//! [`fake::FakeObjects`] in unit tests.

mod api;
#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod fake_api;
mod reflected;
mod refs;
mod runtime_classes;
mod services;
mod storage;
#[cfg(test)]
mod tests_api;
mod tokens;
mod watched;

pub use api::ApiObjects;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

/// The kind of a referenced object, in upstream's lower-case spelling for messages
/// (`configmap "cfg" not found`, `secret "s" not found`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// Upstream's wording (the API's NotFound message), which FailedMount events and
    /// CreateContainerConfigError messages carry.
    #[error("{kind} \"{name}\" not found")]
    NotFound {
        kind: ObjectKind,
        namespace: String,
        name: String,
    },
    #[error("cannot get {kind} {namespace}/{name}: {source}")]
    Api {
        kind: ObjectKind,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot request a token for service account {namespace}/{service_account}: {source}")]
    Token {
        namespace: String,
        service_account: String,
        #[source]
        source: kube::Error,
    },
    /// The API's NotFound for a claim, a persistent volume or the node, in its words
    /// (`persistentvolumeclaims "data" not found`).
    #[error("{resource} \"{name}\" not found")]
    Missing {
        resource: &'static str,
        name: String,
    },
    #[error("cannot get {resource} {}{name}: {source}", namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default())]
    Get {
        resource: &'static str,
        namespace: Option<String>,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Upstream's runtimeclass manager returns the API's NotFound, whose text its
    /// FailedCreatePodSandBox event carries.
    #[error("runtimeclass.node.k8s.io \"{name}\" not found")]
    RuntimeClassNotFound { name: String },
    #[error("failed to lookup RuntimeClass {name}: RuntimeClasses have not been listed yet")]
    RuntimeClassesNotSynced { name: String },
    /// The Services' first listing has not come yet (upstream's words).
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced,
    /// Upstream's standalone kubelet has no client for these either.
    #[error("cannot get {what} {namespace}/{name}: the node runs without an API server (no --kubeconfig)")]
    Standalone {
        what: &'static str,
        namespace: String,
        name: String,
    },
}

impl ObjectError {
    /// The object does not exist (as opposed to: it could not be read).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ObjectError::NotFound { .. } | ObjectError::Missing { .. }
        )
    }
}

/// What a projected `serviceAccountToken` source asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenSpec {
    pub service_account: String,
    /// Empty: the apiserver's own audiences (`--api-audiences`), as upstream sends none.
    pub audience: String,
    /// As the source says (the API defaults it to 3600; kube-api-access asks for 3607).
    pub expiration_seconds: i64,
}

/// A token issued for a pod, bound to it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    pub token: String,
    pub issued: DateTime<Utc>,
    pub expires: DateTime<Utc>,
}

impl std::fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens must not reach logs through `{:?}`.
        f.debug_struct("ServiceAccountToken")
            .field("issued", &self.issued)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// The objects a node's pods reference, as the workers read them.
#[async_trait]
pub trait ClusterObjects: Send + Sync {
    /// The ConfigMap as last seen (a registered pod's references are kept current by a
    /// watch, so this reads a cache after the first time).
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError>;
    /// The Secret, as `config_map`.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError>;
    /// A token for the pod's service account bound to the pod; the same token again while
    /// it is fresh (upstream's rule: renewed past 80 % of its lifetime or after 24 h).
    async fn service_account_token(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError>;
    /// Called on every worker pass: the ConfigMaps and Secrets the pod references (volumes,
    /// env, envFrom, imagePullSecrets) become the ones kept current for it (cheap when they
    /// did not change).
    fn register_pod(&self, pod: &Pod);
    /// The pod is gone: its references (and tokens) are dropped.
    fn unregister_pod(&self, pod_uid: &str);
    /// The handler of the RuntimeClass `name` (upstream's runtimeclass manager's
    /// LookupRuntimeHandler), or `None` when the node has no RuntimeClasses to read:
    /// upstream's kubelet without an API client has no manager, and its pods run with the
    /// default handler whatever runtimeClassName they name.
    async fn runtime_handler(&self, name: &str) -> Result<Option<String>, ObjectError>;
    /// Every Service of the cluster, for the containers' service environment variables;
    /// none without an API server (upstream's standalone kubelet sets none).
    ///
    /// `wait` is what upstream asks of pods from the API server: their Services must have
    /// been listed once (a short wait, then [`ObjectError::ServicesNotSynced`]). A static
    /// pod passes `ServicesWait::No` and takes what is known now, possibly nothing: the
    /// control plane's own static pods (etcd, the apiserver) start before any Service can be
    /// listed (upstream's makeEnvironmentVariables exempts them the same way).
    async fn services(&self, wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError>;
    /// A PersistentVolumeClaim, read now (a pod waiting for its binding reads it again).
    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, ObjectError>;
    /// A PersistentVolume, read now.
    async fn persistent_volume(&self, name: &str) -> Result<Arc<PersistentVolume>, ObjectError>;
    /// A Node (this node: its labels decide a local volume's node affinity), read now.
    async fn node(&self, name: &str) -> Result<Arc<Node>, ObjectError>;
    /// A CSIDriver, read now; None when there is none (a driver without one gets the API's
    /// defaults: attach required, no pod info, persistent volumes only).
    async fn csi_driver(&self, name: &str) -> Result<Option<Arc<CSIDriver>>, ObjectError>;
    /// A VolumeAttachment, read now (a CSI volume waits for its `attached`).
    async fn volume_attachment(&self, name: &str) -> Result<Arc<VolumeAttachment>, ObjectError>;
}

/// Whether a container start needs the Services' first listing (see
/// [`ClusterObjects::services`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServicesWait {
    /// A pod from the API server: wait for the first listing, fail without it.
    ForFirstList,
    /// A static pod: what is known now.
    No,
}

impl ServicesWait {
    /// Upstream's rule: only a static pod goes without the first listing.
    pub fn for_pod(pod: &Pod) -> ServicesWait {
        if crate::vocabulary::pod_source::is_static_pod(pod) {
            ServicesWait::No
        } else {
            ServicesWait::ForFirstList
        }
    }
}

/// No API server: every reference is an error that says so.
#[derive(Debug, Default, Clone, Copy)]
pub struct Standalone;

#[async_trait]
impl ClusterObjects for Standalone {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "configmap",
            namespace: namespace.into(),
            name: name.into(),
        })
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "secret",
            namespace: namespace.into(),
            name: name.into(),
        })
    }
    async fn service_account_token(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError> {
        Err(ObjectError::Standalone {
            what: "a token for service account",
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: spec.service_account.clone(),
        })
    }
    fn register_pod(&self, _pod: &Pod) {}
    fn unregister_pod(&self, _pod_uid: &str) {}
    async fn runtime_handler(&self, _name: &str) -> Result<Option<String>, ObjectError> {
        Ok(None)
    }
    async fn services(&self, _wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError> {
        Ok(Vec::new())
    }
    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "persistentvolumeclaim",
            namespace: namespace.into(),
            name: name.into(),
        })
    }
    async fn persistent_volume(&self, name: &str) -> Result<Arc<PersistentVolume>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "persistentvolume",
            namespace: String::new(),
            name: name.into(),
        })
    }
    async fn node(&self, name: &str) -> Result<Arc<Node>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "node",
            namespace: String::new(),
            name: name.into(),
        })
    }
    /// Standalone, as upstream's kubelet without a client: no CSIDriver, the defaults.
    async fn csi_driver(&self, _name: &str) -> Result<Option<Arc<CSIDriver>>, ObjectError> {
        Ok(None)
    }
    async fn volume_attachment(&self, name: &str) -> Result<Arc<VolumeAttachment>, ObjectError> {
        Err(ObjectError::Standalone {
            what: "volumeattachment",
            namespace: String::new(),
            name: name.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeObjects;
    use super::*;

    #[tokio::test]
    async fn missing_objects_read_as_upstreams_not_found() {
        let objects = FakeObjects::default();
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.name = Some("cfg".into());
        objects.put_config_map(cm);
        assert!(objects.config_map("ns", "cfg").await.is_ok());
        objects.remove_config_map("ns", "cfg");
        let err = objects.config_map("ns", "cfg").await.unwrap_err();
        assert!(err.is_not_found());
        assert_eq!(err.to_string(), "configmap \"cfg\" not found");
        objects.put_secret(Secret::default());
        let err = objects.secret("ns", "s").await.unwrap_err();
        assert_eq!(err.to_string(), "secret \"s\" not found");
    }

    #[tokio::test]
    async fn standalone_names_what_it_cannot_read() {
        let err = Standalone.secret("ns", "pull").await.unwrap_err();
        assert!(!err.is_not_found());
        assert!(err.to_string().contains("secret ns/pull"), "{err}");
        assert!(err.to_string().contains("--kubeconfig"), "{err}");
    }
}
