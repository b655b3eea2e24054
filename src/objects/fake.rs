//! An in-memory [`ClusterObjects`] for unit tests: objects put in by the test, tokens
//! numbered in the order they are issued, every call counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

use super::{
    ClusterObjects, ObjectError, ObjectKind, ServiceAccountToken, ServicesWait, TokenSpec,
};

#[derive(Default)]
pub(crate) struct FakeObjects {
    config_maps: Mutex<HashMap<(String, String), Arc<ConfigMap>>>,
    secrets: Mutex<HashMap<(String, String), Arc<Secret>>>,
    /// Tokens issued so far, with the spec each was asked with.
    pub tokens: Mutex<Vec<TokenSpec>>,
    /// Pod UIDs currently registered.
    pub registered: Mutex<Vec<String>>,
    /// The cluster's Services.
    pub services: Mutex<Vec<Arc<Service>>>,
    /// RuntimeClass name → handler; `None`: the node has no RuntimeClasses (standalone).
    pub runtime_classes: Mutex<Option<HashMap<String, String>>>,
    /// The Services' first listing has not come (yet): API pods fail as upstream's do.
    pub services_unsynced: std::sync::atomic::AtomicBool,
    /// Claims by (namespace, name), persistent volumes and nodes by name.
    pub claims: Mutex<HashMap<(String, String), Arc<PersistentVolumeClaim>>>,
    pub volumes: Mutex<HashMap<String, Arc<PersistentVolume>>>,
    pub nodes: Mutex<HashMap<String, Arc<Node>>>,
    /// CSIDrivers and VolumeAttachments by name.
    pub csi_drivers: Mutex<HashMap<String, Arc<CSIDriver>>>,
    pub attachments: Mutex<HashMap<String, Arc<VolumeAttachment>>>,
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

impl FakeObjects {
    pub(crate) fn put_config_map(&self, cm: ConfigMap) {
        let k = key_of(&cm.metadata);
        self.config_maps.lock().unwrap().insert(k, Arc::new(cm));
    }
    pub(crate) fn put_secret(&self, s: Secret) {
        let k = key_of(&s.metadata);
        self.secrets.lock().unwrap().insert(k, Arc::new(s));
    }
    pub(crate) fn remove_config_map(&self, namespace: &str, name: &str) {
        self.config_maps
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

fn not_found(kind: ObjectKind, namespace: &str, name: &str) -> ObjectError {
    ObjectError::NotFound {
        kind,
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn missing(resource: &'static str, name: &str) -> ObjectError {
    ObjectError::Missing {
        resource,
        name: name.into(),
    }
}

#[async_trait]
impl ClusterObjects for FakeObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        self.config_maps
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::ConfigMap, namespace, name))
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError> {
        self.secrets
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Secret, namespace, name))
    }
    async fn service_account_token(
        &self,
        _pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError> {
        let mut tokens = self.tokens.lock().unwrap();
        tokens.push(spec.clone());
        let issued = Utc::now();
        Ok(ServiceAccountToken {
            token: format!("token-{}-{}", spec.service_account, tokens.len()),
            issued,
            expires: issued + chrono::Duration::seconds(spec.expiration_seconds),
        })
    }
    fn register_pod(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut r = self.registered.lock().unwrap();
        if !r.contains(&uid) {
            r.push(uid);
        }
    }
    fn unregister_pod(&self, pod_uid: &str) {
        self.registered.lock().unwrap().retain(|u| u != pod_uid);
    }
    async fn runtime_handler(&self, name: &str) -> Result<Option<String>, ObjectError> {
        match &*self.runtime_classes.lock().unwrap() {
            None => Ok(None),
            Some(classes) => classes
                .get(name)
                .cloned()
                .map(Some)
                .ok_or_else(|| ObjectError::RuntimeClassNotFound { name: name.into() }),
        }
    }
    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, ObjectError> {
        let key = (namespace.to_string(), name.to_string());
        let found = self.claims.lock().unwrap().get(&key).cloned();
        found.ok_or_else(|| missing(super::storage::CLAIMS, name))
    }
    async fn persistent_volume(&self, name: &str) -> Result<Arc<PersistentVolume>, ObjectError> {
        let found = self.volumes.lock().unwrap().get(name).cloned();
        found.ok_or_else(|| missing(super::storage::VOLUMES, name))
    }
    async fn node(&self, name: &str) -> Result<Arc<Node>, ObjectError> {
        let found = self.nodes.lock().unwrap().get(name).cloned();
        found.ok_or_else(|| missing(super::storage::NODES, name))
    }
    async fn csi_driver(&self, name: &str) -> Result<Option<Arc<CSIDriver>>, ObjectError> {
        Ok(self.csi_drivers.lock().unwrap().get(name).cloned())
    }
    async fn volume_attachment(&self, name: &str) -> Result<Arc<VolumeAttachment>, ObjectError> {
        let found = self.attachments.lock().unwrap().get(name).cloned();
        found.ok_or_else(|| missing(super::storage::ATTACHMENTS, name))
    }
    async fn services(&self, wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError> {
        let unsynced = self
            .services_unsynced
            .load(std::sync::atomic::Ordering::SeqCst);
        if unsynced && wait == ServicesWait::ForFirstList {
            return Err(ObjectError::ServicesNotSynced);
        }
        Ok(self.services.lock().unwrap().clone())
    }
}
