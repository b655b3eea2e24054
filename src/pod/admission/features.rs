//! Pod features this agent does not implement yet, refused at admission instead of being
//! ignored: a pod that asks for user namespaces, DRA claims, image volumes or an unmasked
//! /proc would otherwise run without what it asked for (or sit in a state that never
//! ends) and nobody would be told. (RuntimeClasses are served: `runtime::handlers`.)
//!
//! Upstream refuses a pod whose features its node cannot serve in the same place: its
//! declared-features admit handler (reason `PodFeatureUnsupported`, "Pod requires node
//! features that are not available: ...") and, for `supplementalGroupsPolicy: Strict` on a
//! node that does not report the feature (as this one, whose Node has no
//! `status.features`), `SupplementalGroupsPolicyNotSupported`. Each entry here names the
//! upstream feature and the pod field that asks for it, so the event says what to change.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, SecurityContext};

use super::Rejection;

/// Upstream's reason for a pod needing features the node lacks.
const REASON: &str = "PodFeatureUnsupported";

/// One feature a pod asks for: upstream's feature name and the field that asks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    feature: &'static str,
    field: String,
}

/// Refuses a pending pod that asks for a feature this agent does not implement. A pod
/// already past Pending (found running after an agent upgrade) is left alone, as upstream's
/// AppArmor handler leaves it: refusing it now would not undo what it runs.
pub(super) fn check(pod: &Pod) -> Result<(), Rejection> {
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    let Some(spec) = pod.spec.as_ref().filter(|_| pending) else {
        return Ok(());
    };
    let strict_groups = spec
        .security_context
        .as_ref()
        .and_then(|s| s.supplemental_groups_policy.as_deref())
        == Some("Strict");
    if strict_groups {
        return Err(Rejection::new(
            "SupplementalGroupsPolicyNotSupported",
            "SupplementalGroupsPolicy=Strict is not supported in this node",
        ));
    }
    let wanted = wanted(spec);
    if wanted.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = wanted
        .iter()
        .map(|w| format!("{} ({})", w.feature, w.field))
        .collect();
    Err(Rejection::new(
        REASON,
        format!(
            "Pod requires node features that are not available: {} (not implemented by kubelet-rs yet)",
            list.join(", ")
        ),
    ))
}

/// Every unimplemented feature the spec asks for, in field order.
fn wanted(spec: &PodSpec) -> Vec<Wanted> {
    let mut out = Vec::new();
    let mut want = |feature: &'static str, field: String| out.push(Wanted { feature, field });
    if spec.host_users == Some(false) {
        want("UserNamespacesSupport", "spec.hostUsers: false".into());
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        want("DynamicResourceAllocation", "spec.resourceClaims".into());
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if v.image.is_some() {
            want("ImageVolume", format!("spec.volumes[{i}].image"));
        }
    }
    let groups: [(&str, &[Container]); 2] = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers),
    ];
    for (group, containers) in groups {
        for (i, c) in containers.iter().enumerate() {
            let at = format!("spec.{group}[{i}]");
            container_wants(c, &at, &mut want);
        }
    }
    for (i, e) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let at = format!("spec.ephemeralContainers[{i}]");
        unmasked_proc(e.security_context.as_ref(), &at, &mut want);
    }
    out
}

/// procMount Unmasked, in a container's or an ephemeral container's securityContext.
fn unmasked_proc(
    sc: Option<&SecurityContext>,
    at: &str,
    want: &mut impl FnMut(&'static str, String),
) {
    if sc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked") {
        want(
            "ProcMountType",
            format!("{at}.securityContext.procMount: Unmasked"),
        );
    }
}

fn container_wants(c: &Container, at: &str, want: &mut impl FnMut(&'static str, String)) {
    if c.resources
        .as_ref()
        .and_then(|r| r.claims.as_ref())
        .is_some_and(|c| !c.is_empty())
    {
        want(
            "DynamicResourceAllocation",
            format!("{at}.resources.claims"),
        );
    }
    unmasked_proc(c.security_context.as_ref(), at, want);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn plain() -> serde_json::Value {
        json!({"containers": [{"name": "app", "image": "busybox"}]})
    }

    #[test]
    fn a_pod_using_only_implemented_features_is_admitted() {
        let mut spec = plain();
        spec["hostUsers"] = json!(true);
        // RuntimeClasses are served (the sandbox resolves the handler).
        spec["runtimeClassName"] = json!("kata");
        spec["securityContext"] = json!({"supplementalGroupsPolicy": "Merge"});
        // Sidecars (pod::sidecar) run now.
        spec["initContainers"] = json!([
            {"name": "init", "image": "busybox", "restartPolicy": "Never"},
            {"name": "side", "image": "busybox", "restartPolicy": "Always"},
        ]);
        assert_eq!(check(&pod(spec)), Ok(()));
    }

    #[test]
    fn each_unimplemented_feature_is_refused_naming_its_field() {
        let cases = [
            (
                json!({"hostUsers": false}),
                "UserNamespacesSupport (spec.hostUsers: false)",
            ),
            (
                json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}),
                "DynamicResourceAllocation (spec.resourceClaims)",
            ),
            (
                json!({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "img", "image": {"reference": "x"}}]}),
                "ImageVolume (spec.volumes[1].image)",
            ),
        ];
        for (extra, named) in cases {
            let mut spec = plain();
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            let r = check(&pod(spec)).unwrap_err();
            assert_eq!(r.reason, "PodFeatureUnsupported");
            assert_eq!(
                r.message,
                format!("Pod requires node features that are not available: {named} (not implemented by kubelet-rs yet)")
            );
        }
    }

    #[test]
    fn container_fields_are_named_with_their_container_and_all_are_listed() {
        let r = check(&pod(json!({
            "containers": [
                {"name": "a", "image": "b"},
                {"name": "c", "image": "b",
                 "resources": {"claims": [{"name": "gpu"}]},
                 "securityContext": {"procMount": "Unmasked"},
                 "volumeDevices": [{"name": "blk", "devicePath": "/dev/xvda"}]}
            ],
            "ephemeralContainers": [
                {"name": "dbg", "image": "b", "securityContext": {"procMount": "Unmasked"}}
            ]
        })))
        .unwrap_err();
        assert_eq!(
            r.message,
            "Pod requires node features that are not available: \
             DynamicResourceAllocation (spec.containers[1].resources.claims), \
             ProcMountType (spec.containers[1].securityContext.procMount: Unmasked), \
             ProcMountType (spec.ephemeralContainers[0].securityContext.procMount: Unmasked) \
             (not implemented by kubelet-rs yet)"
        );
    }

    #[test]
    fn strict_supplemental_groups_get_upstreams_reason_and_message() {
        let mut spec = plain();
        spec["securityContext"] = json!({"supplementalGroupsPolicy": "Strict"});
        let r = check(&pod(spec)).unwrap_err();
        assert_eq!(r.reason, "SupplementalGroupsPolicyNotSupported");
        assert_eq!(
            r.message,
            "SupplementalGroupsPolicy=Strict is not supported in this node"
        );
    }

    #[test]
    fn a_pod_past_pending_is_not_refused_again() {
        let mut p = pod(json!({"hostUsers": false, "containers": [{"name": "a", "image": "b"}]}));
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert_eq!(check(&p), Ok(()));
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        assert!(check(&p).is_err());
    }
}
