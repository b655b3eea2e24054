//! [`ClusterObjects`] over the apiserver, as upstream's kubelet with its default
//! `configMapAndSecretChangeDetectionStrategy: Watch`: registering a pod opens (or shares) a
//! watch per ConfigMap and Secret it references, reads come from those watches' caches, and
//! tokens come from the TokenRequest API.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use chrono::Utc;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use tokio::sync::mpsc;

use super::refs::{references, ObjectRef};
use super::runtime_classes::RuntimeClasses;
use super::services::Services;
use super::tokens::{Clock, Tokens};
use super::watched::{Changed, Watched};
use super::{
    ClusterObjects, ObjectError, ObjectKind, ServiceAccountToken, ServicesWait, TokenSpec,
};

pub struct ApiObjects {
    config_maps: Watched<ConfigMap>,
    secrets: Watched<Secret>,
    tokens: Tokens,
    /// What each registered pod references, by UID: a re-registration is diffed with it.
    pods: Arc<Mutex<HashMap<String, BTreeSet<ObjectRef>>>>,
    /// Where the UIDs of pods that reference a changed object go (the pod manager's wake
    /// channel), once set.
    wake: Arc<OnceLock<mpsc::Sender<String>>>,
    /// Every Service, once `watch_services` started it.
    services: Option<Services>,
    /// Every RuntimeClass, once `watch_runtime_classes` started it.
    runtime_classes: Option<RuntimeClasses>,
    /// For the storage objects, read by GET (`storage`).
    client: kube::Client,
}

type Pods = Arc<Mutex<HashMap<String, BTreeSet<ObjectRef>>>>;

/// Wakes the registered pods that reference the changed object of this kind, so a new
/// ConfigMap or Secret reaches their volumes without waiting for the pods' resync
/// (syncFrequency).
fn wake_referencing(
    kind: ObjectKind,
    pods: Pods,
    wake: Arc<OnceLock<mpsc::Sender<String>>>,
) -> Changed {
    Arc::new(move |namespace: &str, name: &str| {
        let Some(tx) = wake.get() else { return };
        let changed = ObjectRef {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        for (uid, refs) in pods.lock().unwrap().iter() {
            if refs.contains(&changed) {
                // A full channel already holds wake-ups that lead to a pass.
                let _ = tx.try_send(uid.clone());
            }
        }
    })
}

impl ApiObjects {
    /// Must be built inside a tokio runtime: registering pods starts watch tasks.
    pub fn new(client: kube::Client) -> Self {
        Self::with_clock(client, Arc::new(Utc::now))
    }

    pub(crate) fn with_clock(client: kube::Client, clock: Clock) -> Self {
        let pods: Pods = Arc::default();
        let wake = Arc::new(OnceLock::new());
        ApiObjects {
            config_maps: Watched::new(
                client.clone(),
                wake_referencing(ObjectKind::ConfigMap, pods.clone(), wake.clone()),
            ),
            secrets: Watched::new(
                client.clone(),
                wake_referencing(ObjectKind::Secret, pods.clone(), wake.clone()),
            ),
            tokens: Tokens::new(client.clone(), clock),
            client,
            pods,
            wake,
            services: None,
            runtime_classes: None,
        }
    }

    /// Keeps every Service of the cluster, for the containers' service environment
    /// variables (a watch of all Services, as upstream's kubelet holds).
    pub fn watch_services(mut self, client: kube::Client) -> Self {
        self.services = Some(Services::watch(client));
        self
    }

    /// Keeps every RuntimeClass, for the handlers of pods that name one (upstream's
    /// runtimeclass manager, started whenever the kubelet has an API client).
    pub fn watch_runtime_classes(mut self, client: kube::Client) -> Self {
        self.runtime_classes = Some(RuntimeClasses::watch(client));
        self
    }

    /// Sends the UID of every registered pod that references a ConfigMap or Secret whose
    /// watch saw it change (the pod manager's wake channel).
    pub fn wake_pods_through(self, tx: mpsc::Sender<String>) -> Self {
        let _ = self.wake.set(tx);
        self
    }

    fn add_ref(&self, r: &ObjectRef) {
        match r.kind {
            ObjectKind::ConfigMap => self.config_maps.add_ref(&r.namespace, &r.name),
            ObjectKind::Secret => self.secrets.add_ref(&r.namespace, &r.name),
        }
    }

    fn release(&self, r: &ObjectRef) {
        match r.kind {
            ObjectKind::ConfigMap => self.config_maps.release(&r.namespace, &r.name),
            ObjectKind::Secret => self.secrets.release(&r.namespace, &r.name),
        }
    }
}

#[async_trait]
impl ClusterObjects for ApiObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        self.config_maps.get(namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError> {
        self.secrets.get(namespace, name).await
    }

    async fn service_account_token(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError> {
        self.tokens.get(pod, spec).await
    }

    fn register_pod(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let now = references(pod);
        let mut pods = self.pods.lock().unwrap();
        let before = pods.get(&uid);
        if before == Some(&now) {
            return;
        }
        // New references first, so an object the pod keeps referencing never loses its watch.
        let empty = BTreeSet::new();
        let before = before.unwrap_or(&empty);
        for r in now.difference(before) {
            self.add_ref(r);
        }
        for r in before.difference(&now) {
            self.release(r);
        }
        pods.insert(uid, now);
    }

    async fn services(&self, wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError> {
        match &self.services {
            Some(s) => s.list(wait).await,
            None => Ok(Vec::new()),
        }
    }

    async fn runtime_handler(&self, name: &str) -> Result<Option<String>, ObjectError> {
        match &self.runtime_classes {
            Some(rc) => rc.handler(name).await.map(Some),
            None => Ok(None),
        }
    }

    async fn persistent_volume_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, ObjectError> {
        super::storage::claim(&self.client, namespace, name).await
    }

    async fn persistent_volume(&self, name: &str) -> Result<Arc<PersistentVolume>, ObjectError> {
        super::storage::volume(&self.client, name).await
    }

    async fn node(&self, name: &str) -> Result<Arc<Node>, ObjectError> {
        super::storage::node(&self.client, name).await
    }

    async fn csi_driver(&self, name: &str) -> Result<Option<Arc<CSIDriver>>, ObjectError> {
        super::storage::csi_driver(&self.client, name).await
    }

    async fn volume_attachment(&self, name: &str) -> Result<Arc<VolumeAttachment>, ObjectError> {
        super::storage::volume_attachment(&self.client, name).await
    }

    fn unregister_pod(&self, pod_uid: &str) {
        if let Some(refs) = self.pods.lock().unwrap().remove(pod_uid) {
            for r in &refs {
                self.release(r);
            }
        }
        self.tokens.forget_pod(pod_uid);
    }
}

#[cfg(test)]
impl ApiObjects {
    /// The ConfigMaps and Secrets currently watched, as (namespace, name).
    pub(crate) fn watched(&self, kind: ObjectKind) -> Vec<(String, String)> {
        match kind {
            ObjectKind::ConfigMap => self.config_maps.watched(),
            ObjectKind::Secret => self.secrets.watched(),
        }
    }

    /// Whether reads of the object come from its watch's cache.
    pub(crate) fn synced(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool {
        match kind {
            ObjectKind::ConfigMap => self.config_maps.synced(namespace, name),
            ObjectKind::Secret => self.secrets.synced(namespace, name),
        }
    }
}
