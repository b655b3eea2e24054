//! upstream's AppArmor admit handler: a pending pod that asks for an AppArmor profile (other
//! than unconfined: a container's or the pod's securityContext.appArmorProfile, or the
//! deprecated `container.apparmor.security.beta.kubernetes.io/<container>` annotation) is
//! refused with reason "AppArmor" when the profile cannot be enforced. On a host without
//! AppArmor that is upstream's refusal. On a host with it, this agent refuses too: it does
//! not load or apply profiles yet, and running the pod unconfined would drop the isolation
//! it asked for without a word.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use super::Rejection;

const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Whether the kernel enforces AppArmor (runc's test: the securityfs directory, and the
/// module parameter saying Y). Read once, as upstream reads it at start.
pub(super) fn host_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::path::Path::new("/sys/kernel/security/apparmor").exists()
            && std::fs::read("/sys/module/apparmor/parameters/enabled")
                .is_ok_and(|b| b.starts_with(b"Y"))
    })
}

/// Refuses a pending pod whose containers ask for a profile, see the module doc.
pub(super) fn check(pod: &Pod, host_enabled: bool) -> Result<(), Rejection> {
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    if !pending || !requires_profile(pod) {
        return Ok(());
    }
    let why = if host_enabled {
        "kubelet-rs does not apply AppArmor profiles yet"
    } else {
        "AppArmor is not enabled on the host"
    };
    Err(Rejection::new(
        "AppArmor",
        format!("Cannot enforce AppArmor: {why}"),
    ))
}

fn requires_profile(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|e| &e.name);
    containers
        .map(|c| &c.name)
        .chain(ephemeral)
        .any(|name| profile_of(pod, name).is_some_and(|p| p != "Unconfined"))
}

/// The profile type a container runs with (upstream's GetProfile): the container's field,
/// else the pod's, else the annotation.
fn profile_of(pod: &Pod, container: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let field = |p: Option<&AppArmorProfile>| p.map(|p| p.type_.clone());
    let own = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c: &&Container| c.name == container)
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| field(s.app_armor_profile.as_ref()));
    let ephemeral = || {
        spec.ephemeral_containers
            .iter()
            .flatten()
            .find(|c| c.name == container)
            .and_then(|c| c.security_context.as_ref())
            .and_then(|s| field(s.app_armor_profile.as_ref()))
    };
    let pod_level = || {
        spec.security_context
            .as_ref()
            .and_then(|s| field(s.app_armor_profile.as_ref()))
    };
    let annotation = || {
        let value = pod
            .metadata
            .annotations
            .as_ref()?
            .get(&format!("{ANNOTATION_PREFIX}{container}"))?;
        Some(match value.as_str() {
            "unconfined" => "Unconfined".to_string(),
            "runtime/default" => "RuntimeDefault".to_string(),
            _ => "Localhost".to_string(),
        })
    };
    own.or_else(ephemeral)
        .or_else(pod_level)
        .or_else(annotation)
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
        // Refused on an AppArmor host too: profiles are not applied yet.
        assert!(check(&field, true)
            .unwrap_err()
            .message
            .contains("does not apply AppArmor profiles"));
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
