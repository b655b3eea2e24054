//! Which ConfigMaps and Secrets a pod references: the set a registered pod keeps watched.
//! It follows upstream's `VisitPodConfigmapNames` and `VisitPodSecretNames`, which are also
//! what the Node authorizer's graph grants a node, so a watch is never opened on an object
//! the node may not read.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Pod, Volume};

use super::ObjectKind;

/// One referenced object. The namespace is always the pod's: a pod cannot reference
/// another namespace's ConfigMap or Secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectRef {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

/// Every ConfigMap and Secret the pod references: volumes (configMap, secret, projected
/// sources, and the secrets of volume plugins that take one), env `valueFrom`, `envFrom` of
/// init, app and ephemeral containers, and imagePullSecrets.
pub(crate) fn references(pod: &Pod) -> BTreeSet<ObjectRef> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut refs = Refs {
        namespace,
        set: BTreeSet::new(),
    };
    let Some(spec) = &pod.spec else {
        return refs.set;
    };
    for s in spec.image_pull_secrets.iter().flatten() {
        refs.secret(&s.name);
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (&c.env, &c.env_from));
    let apps = spec.containers.iter().map(|c| (&c.env, &c.env_from));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (&c.env, &c.env_from));
    for (env, env_from) in containers.chain(apps).chain(ephemeral) {
        refs.env(env.as_deref().unwrap_or_default());
        refs.env_from(env_from.as_deref().unwrap_or_default());
    }
    for v in spec.volumes.iter().flatten() {
        refs.volume(v);
    }
    refs.set
}

struct Refs<'a> {
    namespace: &'a str,
    set: BTreeSet<ObjectRef>,
}

impl Refs<'_> {
    fn add(&mut self, kind: ObjectKind, name: &str) {
        // An empty name is an invalid spec the API refuses; nothing to watch.
        if name.is_empty() {
            return;
        }
        self.set.insert(ObjectRef {
            kind,
            namespace: self.namespace.to_string(),
            name: name.to_string(),
        });
    }

    fn config_map(&mut self, name: &str) {
        self.add(ObjectKind::ConfigMap, name);
    }

    fn secret(&mut self, name: &str) {
        self.add(ObjectKind::Secret, name);
    }

    fn env(&mut self, env: &[EnvVar]) {
        for from in env.iter().filter_map(|e| e.value_from.as_ref()) {
            if let Some(r) = &from.config_map_key_ref {
                self.config_map(&r.name);
            }
            if let Some(r) = &from.secret_key_ref {
                self.secret(&r.name);
            }
        }
    }

    fn env_from(&mut self, env_from: &[EnvFromSource]) {
        for e in env_from {
            if let Some(r) = &e.config_map_ref {
                self.config_map(&r.name);
            }
            if let Some(r) = &e.secret_ref {
                self.secret(&r.name);
            }
        }
    }

    fn volume(&mut self, v: &Volume) {
        if let Some(cm) = &v.config_map {
            self.config_map(&cm.name);
        }
        if let Some(s) = &v.secret {
            self.secret(s.secret_name.as_deref().unwrap_or_default());
        }
        for source in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &source.config_map {
                self.config_map(&cm.name);
            }
            if let Some(s) = &source.secret {
                self.secret(&s.name);
            }
        }
        // Volume plugins that read their credentials from a Secret of the pod's namespace.
        if let Some(a) = &v.azure_file {
            self.secret(&a.secret_name);
        }
        let plugin_refs = [
            v.csi
                .as_ref()
                .and_then(|s| s.node_publish_secret_ref.as_ref()),
            v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.scale_io.as_ref().map(|s| &s.secret_ref),
            v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()),
        ];
        for r in plugin_refs.into_iter().flatten() {
            self.secret(&r.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: ObjectKind, name: &str) -> ObjectRef {
        ObjectRef {
            kind,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn every_kind_of_reference_is_found_in_the_pods_namespace() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{
                    "name": "init",
                    "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "init-env-cm", "key": "k"}}}],
                    "envFrom": [{"secretRef": {"name": "init-envfrom-secret"}}]
                }],
                "containers": [{
                    "name": "app",
                    "env": [
                        {"name": "PLAIN", "value": "x"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "app-env-secret", "key": "k"}}}
                    ],
                    "envFrom": [{"configMapRef": {"name": "app-envfrom-cm"}, "prefix": "P_"}]
                }],
                "ephemeralContainers": [{
                    "name": "debug",
                    "env": [{"name": "C", "valueFrom": {"secretKeyRef": {"name": "debug-secret", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "debug-cm"}}]
                }],
                "volumes": [
                    {"name": "cm", "configMap": {"name": "vol-cm"}},
                    {"name": "s", "secret": {"secretName": "vol-secret"}},
                    {"name": "proj", "projected": {"sources": [
                        {"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-secret"}},
                        {"serviceAccountToken": {"path": "token"}},
                        {"downwardAPI": {"items": []}}
                    ]}},
                    {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}},
                    {"name": "empty", "emptyDir": {}},
                    {"name": "shared", "configMap": {"name": "app-envfrom-cm"}}
                ]
            }
        }))
        .unwrap();
        let got = references(&pod);
        let want: BTreeSet<ObjectRef> = [
            r(ObjectKind::Secret, "pull"),
            r(ObjectKind::ConfigMap, "init-env-cm"),
            r(ObjectKind::Secret, "init-envfrom-secret"),
            r(ObjectKind::Secret, "app-env-secret"),
            r(ObjectKind::ConfigMap, "app-envfrom-cm"),
            r(ObjectKind::Secret, "debug-secret"),
            r(ObjectKind::ConfigMap, "debug-cm"),
            r(ObjectKind::ConfigMap, "vol-cm"),
            r(ObjectKind::Secret, "vol-secret"),
            r(ObjectKind::ConfigMap, "proj-cm"),
            r(ObjectKind::Secret, "proj-secret"),
            r(ObjectKind::Secret, "csi-secret"),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_pod_without_references_has_none() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        assert!(references(&pod).is_empty());
    }
}
