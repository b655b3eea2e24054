//! The vocabulary leaf of issue 37: the words every layer shares and none owns — Kubernetes
//! quantities (`quantity`), a pod's QoS class (`qos`), what a container gets for swap
//! (`swap`), where a pod came from (`pod_source`: the config annotations, static and mirror pods), the version the agent reports (`version`), cgroup names in the two drivers' spellings (`cgroup_names`). It imports nothing from the crate, so the cgroups layer and the container
//! manager can use these words without importing pods, the runtime or the configuration.

pub mod cgroup_names;
pub mod pod_source;
pub mod qos;
pub mod quantity;
pub mod swap;
pub mod version;
