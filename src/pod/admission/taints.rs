//! The kubelet's taint check: a pod is refused when the Node carries a `NoExecute` taint the
//! pod does not tolerate (the scheduler weighs `NoSchedule`; a pod already bound past it is
//! the kubelet's to run, but a `NoExecute` taint would evict it at once).

use k8s_openapi::api::core::v1::{Taint, Toleration};

const NO_EXECUTE: &str = "NoExecute";

/// The first `NoExecute` taint none of the tolerations tolerates.
pub(crate) fn untolerated_no_execute<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == NO_EXECUTE)
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Upstream's ToleratesTaint: an empty effect or key matches any; `Exists` ignores the
/// value, `Equal` (the default) compares it; any other operator tolerates nothing.
pub(super) fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}
