//! Restartable init containers ("sidecars", upstream's SidecarContainers, GA in 1.33): an
//! init container with `restartPolicy: Always`. It starts in order with the other init
//! containers, the next one waiting until it has started, then keeps running beside the
//! main containers, restarted whatever the pod's restart policy; on termination it stops
//! after the main containers, in reverse order. What the worker and the status code share
//! about them lives here.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

/// The init container is a sidecar (upstream's IsRestartableInitContainer).
pub(crate) fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod has at least one sidecar (upstream's HasRestartableInitContainer).
pub(crate) fn has_sidecars(spec: &PodSpec) -> bool {
    spec.init_containers.iter().flatten().any(is_sidecar)
}

/// The pod's init container of this name is a sidecar.
pub(crate) fn is_sidecar_named(pod: &Pod, name: &str) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .any(|c| c.name == name && is_sidecar(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_init_container_with_restart_policy_always_is_a_sidecar() {
        let c = |policy: Option<&str>| Container {
            name: "c".into(),
            restart_policy: policy.map(str::to_string),
            ..Default::default()
        };
        assert!(is_sidecar(&c(Some("Always"))));
        assert!(!is_sidecar(&c(None)));
        assert!(!is_sidecar(&c(Some("Never"))));
        let spec = PodSpec {
            init_containers: Some(vec![c(None), c(Some("Always"))]),
            ..Default::default()
        };
        assert!(has_sidecars(&spec));
        assert!(!has_sidecars(&PodSpec::default()));
    }
}
