//! What the cluster learns of a registered driver, as upstream's nodeinfomanager writes it:
//! the node's `CSINode` (one entry per driver: its node ID, topology keys and volume limit;
//! owned by the Node so it goes with it) and the Node's `csi.volume.kubernetes.io/nodeid`
//! annotation (a JSON map of driver to node ID, which the external attacher reads) with the
//! driver's topology as Node labels. Writes go through read-modify-write with the object's
//! resourceVersion, retried on a conflict.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::client::NodeInfo;

/// The Node annotation with each driver's node ID.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation naming the in-tree plugins whose volumes go through CSI drivers.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// How often a write is tried again after a conflict.
const CONFLICT_RETRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum NodeInfoError {
    #[error("{op} {what}: {source}")]
    Api {
        op: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what} kept changing under the update ({CONFLICT_RETRIES} conflicts)")]
    Conflicts { what: String },
}

/// Where registration writes what it learnt; the API in cluster mode, nowhere standalone.
#[async_trait]
pub trait CsiNodeWriter: Send + Sync {
    /// What exists before any driver registers (upstream makes the node's CSINode at start).
    async fn init(&self) -> Result<(), NodeInfoError> {
        Ok(())
    }
    async fn install(&self, driver: &str, info: &NodeInfo) -> Result<(), NodeInfoError>;
    async fn uninstall(&self, driver: &str) -> Result<(), NodeInfoError>;
}

/// A standalone node: drivers register (pods can use them) and nothing is written.
pub struct NoApi;

#[async_trait]
impl CsiNodeWriter for NoApi {
    async fn install(&self, _: &str, _: &NodeInfo) -> Result<(), NodeInfoError> {
        Ok(())
    }
    async fn uninstall(&self, _: &str) -> Result<(), NodeInfoError> {
        Ok(())
    }
}

/// The API's CSINode and Node of this node.
pub struct ApiNodeInfo {
    client: kube::Client,
    node_name: String,
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The CSINode's driver entry for `info`.
pub(crate) fn driver_entry(driver: &str, info: &NodeInfo) -> CSINodeDriver {
    let mut keys: Vec<String> = info.topology.keys().cloned().collect();
    keys.sort();
    CSINodeDriver {
        name: driver.to_string(),
        node_id: info.node_id.clone(),
        topology_keys: (!keys.is_empty()).then_some(keys),
        allocatable: (info.max_volumes > 0).then(|| VolumeNodeResources {
            count: i32::try_from(info.max_volumes).ok(),
        }),
    }
}

/// `drivers` with `entry` in place of any entry of the same name (order kept, new ones last).
pub(crate) fn with_driver(drivers: &[CSINodeDriver], entry: CSINodeDriver) -> Vec<CSINodeDriver> {
    let mut out: Vec<CSINodeDriver> = drivers
        .iter()
        .filter(|d| d.name != entry.name)
        .cloned()
        .collect();
    let at = drivers
        .iter()
        .position(|d| d.name == entry.name)
        .unwrap_or(out.len());
    out.insert(at.min(out.len()), entry);
    out
}

/// The annotation's new value with `driver` set to `node_id` (None) or removed; None when
/// the map ends up empty. A value that is not a JSON map is replaced, as upstream does.
pub(crate) fn annotation_value(
    current: Option<&str>,
    driver: &str,
    node_id: Option<&str>,
) -> Option<String> {
    let mut map: BTreeMap<String, String> = current
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    match node_id {
        Some(id) => {
            map.insert(driver.to_string(), id.to_string());
        }
        None => {
            map.remove(driver);
        }
    }
    (!map.is_empty()).then(|| serde_json::to_string(&map).unwrap_or_default())
}

impl ApiNodeInfo {
    pub fn new(client: kube::Client, node_name: impl Into<String>) -> Self {
        ApiNodeInfo {
            client,
            node_name: node_name.into(),
        }
    }

    fn api_err(&self, op: &'static str, what: &str) -> impl FnOnce(kube::Error) -> NodeInfoError {
        let what = what.to_string();
        move |source| NodeInfoError::Api { op, what, source }
    }

    /// The node's CSINode, made (empty, owned by the Node) when missing, as upstream's
    /// kubelet makes it at start.
    pub async fn ensure_csi_node(&self) -> Result<CSINode, NodeInfoError> {
        let api: Api<CSINode> = Api::all(self.client.clone());
        let what = format!("csinodes/{}", self.node_name);
        match api.get(&self.node_name).await {
            Ok(c) => return Ok(c),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(self.api_err("get", &what)(e)),
        }
        let node = Api::<Node>::all(self.client.clone())
            .get(&self.node_name)
            .await
            .map_err(self.api_err("get", &format!("nodes/{}", self.node_name)))?;
        let fresh = CSINode {
            metadata: kube::api::ObjectMeta {
                name: Some(self.node_name.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node_name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                annotations: Some(BTreeMap::from([(
                    MIGRATED_PLUGINS_ANNOTATION.to_string(),
                    String::new(),
                )])),
                ..Default::default()
            },
            spec: CSINodeSpec { drivers: vec![] },
        };
        match api.create(&PostParams::default(), &fresh).await {
            Ok(c) => Ok(c),
            // Another writer (an earlier start) made it meanwhile.
            Err(kube::Error::Api(s)) if s.code == 409 => api
                .get(&self.node_name)
                .await
                .map_err(self.api_err("get", &what)),
            Err(e) => Err(self.api_err("create", &what)(e)),
        }
    }

    /// Read-modify-write of the CSINode's driver list.
    async fn update_drivers(
        &self,
        change: impl Fn(&[CSINodeDriver]) -> Vec<CSINodeDriver>,
    ) -> Result<(), NodeInfoError> {
        let api: Api<CSINode> = Api::all(self.client.clone());
        let what = format!("csinodes/{}", self.node_name);
        for _ in 0..CONFLICT_RETRIES {
            let mut c = self.ensure_csi_node().await?;
            let drivers = change(&c.spec.drivers);
            if drivers == c.spec.drivers {
                return Ok(());
            }
            c.spec.drivers = drivers;
            match api
                .replace(&self.node_name, &PostParams::default(), &c)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if conflict(&e) => continue,
                Err(e) => return Err(self.api_err("update", &what)(e)),
            }
        }
        Err(NodeInfoError::Conflicts { what })
    }

    /// The Node's annotation (and, on install, its topology labels), patched with the
    /// resourceVersion read so a concurrent change to the annotation is not lost.
    async fn update_node(
        &self,
        driver: &str,
        info: Option<&NodeInfo>,
    ) -> Result<(), NodeInfoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let what = format!("nodes/{}", self.node_name);
        for _ in 0..CONFLICT_RETRIES {
            let node = api
                .get(&self.node_name)
                .await
                .map_err(self.api_err("get", &what))?;
            let annotations = node.metadata.annotations.clone().unwrap_or_default();
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let current = annotations.get(NODE_ID_ANNOTATION).map(String::as_str);
            let value = annotation_value(current, driver, info.map(|i| i.node_id.as_str()));
            let new_labels: BTreeMap<&String, &String> = info
                .map(|i| {
                    i.topology
                        .iter()
                        .filter(|(k, v)| labels.get(*k) != Some(*v))
                        .collect()
                })
                .unwrap_or_default();
            if value.as_deref() == current && new_labels.is_empty() {
                return Ok(());
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": { NODE_ID_ANNOTATION: value },
                    "labels": new_labels,
                }
            });
            match api
                .patch(
                    &self.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if conflict(&e) => continue,
                Err(e) => return Err(self.api_err("patch", &what)(e)),
            }
        }
        Err(NodeInfoError::Conflicts { what })
    }
}

#[async_trait]
impl CsiNodeWriter for ApiNodeInfo {
    async fn init(&self) -> Result<(), NodeInfoError> {
        self.ensure_csi_node().await.map(|_| ())
    }

    async fn install(&self, driver: &str, info: &NodeInfo) -> Result<(), NodeInfoError> {
        // The Node first, as upstream: the attacher reads the node ID from its annotation.
        self.update_node(driver, Some(info)).await?;
        let entry = driver_entry(driver, info);
        self.update_drivers(|d| with_driver(d, entry.clone())).await
    }

    async fn uninstall(&self, driver: &str) -> Result<(), NodeInfoError> {
        self.update_drivers(|d| d.iter().filter(|x| x.name != driver).cloned().collect())
            .await?;
        self.update_node(driver, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_id_annotation_is_a_json_map_kept_in_step_with_the_drivers() {
        let one = annotation_value(None, "a.csi", Some("n1")).unwrap();
        assert_eq!(one, r#"{"a.csi":"n1"}"#);
        let two = annotation_value(Some(&one), "b.csi", Some("n2")).unwrap();
        assert_eq!(two, r#"{"a.csi":"n1","b.csi":"n2"}"#);
        assert_eq!(
            annotation_value(Some(&two), "a.csi", None).as_deref(),
            Some(r#"{"b.csi":"n2"}"#)
        );
        // The last driver's going removes the annotation; garbage is replaced.
        assert_eq!(
            annotation_value(Some(r#"{"b.csi":"n2"}"#), "b.csi", None),
            None
        );
        assert_eq!(
            annotation_value(Some("not json"), "a.csi", Some("n1")).as_deref(),
            Some(r#"{"a.csi":"n1"}"#)
        );
    }

    #[test]
    fn a_drivers_entry_replaces_its_old_one_in_place_with_sorted_topology_keys() {
        let info = NodeInfo {
            node_id: "n1".into(),
            max_volumes: 0,
            topology: [
                ("z".to_string(), "1".to_string()),
                ("a".to_string(), "2".to_string()),
            ]
            .into(),
        };
        let e = driver_entry("x.csi", &info);
        assert_eq!(
            e.topology_keys,
            Some(vec!["a".to_string(), "z".to_string()])
        );
        assert_eq!(e.allocatable, None, "no limit reported, none written");
        let other = CSINodeDriver {
            name: "other".into(),
            node_id: "o".into(),
            ..CSINodeDriver::default()
        };
        let old = CSINodeDriver {
            name: "x.csi".into(),
            node_id: "old".into(),
            ..CSINodeDriver::default()
        };
        let list = with_driver(&[old, other.clone()], e.clone());
        assert_eq!(list, vec![e.clone(), other.clone()]);
        let limited = driver_entry(
            "x.csi",
            &NodeInfo {
                max_volumes: 7,
                ..info
            },
        );
        assert_eq!(limited.allocatable.and_then(|a| a.count), Some(7));
        assert_eq!(
            with_driver(std::slice::from_ref(&other), e.clone()),
            vec![other, e]
        );
    }
}
