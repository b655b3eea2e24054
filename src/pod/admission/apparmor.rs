//! upstream's AppArmor admit handler: a pending pod that asks for an AppArmor profile (other
//! than unconfined: a container's or the pod's securityContext.appArmorProfile, or the
//! deprecated `container.apparmor.security.beta.kubernetes.io/<container>` annotation) is
//! refused with reason "AppArmor" when the host cannot enforce it. On a host with AppArmor
//! the profiles are applied (`pod::spec::apparmor`).

use k8s_openapi::api::core::v1::Pod;

use super::Rejection;

/// Whether the kernel enforces AppArmor, read once.
pub(super) fn host_enabled() -> bool {
    crate::pod::spec::apparmor::host_enabled()
}

/// Refuses a pending pod whose containers ask for a profile, see the module doc.
pub(super) fn check(pod: &Pod, host_enabled: bool) -> Result<(), Rejection> {
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    if !pending || host_enabled || !requires_profile(pod) {
        return Ok(());
    }
    Err(Rejection::new(
        "AppArmor",
        "Cannot enforce AppArmor: AppArmor is not enabled on the host".to_string(),
    ))
}

fn requires_profile(pod: &Pod) -> bool {
    use crate::pod::spec::apparmor::{requested, Requested};
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| &c.name);
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|e| &e.name);
    // A malformed request asks for something that cannot be unconfined either.
    containers
        .chain(ephemeral)
        .any(|name| !matches!(requested(pod, name), Ok(None | Some(Requested::Unconfined))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_profile_is_refused_without_apparmor_and_unconfined_is_not() {
        let annotated = pod(json!({
            "metadata": {"name": "p", "annotations": {
                "container.apparmor.security.beta.kubernetes.io/test": "runtime/default"}},
            "spec": {"containers": [{"name": "test"}]},
            "status": {"phase": "Pending"}
        }));
        let r = check(&annotated, false).unwrap_err();
        assert_eq!(r.reason, "AppArmor");
        assert_eq!(
            r.message,
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
        let field = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "test",
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]}
        }));
        assert!(check(&field, false).is_err());
        // Admitted on an AppArmor host, which applies it.
        assert!(check(&field, true).is_ok());
        // The container's own unconfined wins over the pod's profile.
        let unconfined = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "test",
                "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}
        }));
        assert!(check(&unconfined, false).is_ok());
        let none = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "t"}]}}));
        assert!(check(&none, false).is_ok());
        // A pod already running is not checked again.
        let mut running = annotated.clone();
        running.status.as_mut().unwrap().phase = Some("Running".into());
        assert!(check(&running, false).is_ok());
    }
}
