//! The pod's Events, with upstream's reasons (pkg/kubelet/events) and message formats. Each
//! site calls once per occurrence, as upstream's does; the recorder aggregates repeats.

use k8s_openapi::api::core::v1::Pod;

use super::Worker;
use crate::events::EventType;
use crate::runtime::labels::Kind;

pub(super) const PULLING: &str = "Pulling";
pub(super) const PULLED: &str = "Pulled";
/// Failed pulls, and every container that could not be created or started ("Error: ...").
pub(super) const FAILED: &str = "Failed";
/// A restart or a pull waiting out its back-off.
pub(super) const BACK_OFF: &str = "BackOff";
pub(super) const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub(super) const CREATED: &str = "Created";
pub(super) const STARTED: &str = "Started";
pub(super) const KILLING: &str = "Killing";
pub(super) const UNHEALTHY: &str = "Unhealthy";
pub(super) const FAILED_MOUNT: &str = "FailedMount";
pub(super) const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub(super) const SANDBOX_CHANGED: &str = "SandboxChanged";
pub(super) const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub(super) const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
/// seLinuxOptions asked for on a node without SELinux (the agent's own; upstream's kubelet
/// and containerd say nothing).
pub(super) const SELINUX_OPTIONS_NOT_APPLIED: &str = "SELinuxOptionsNotApplied";
/// activeDeadlineSeconds passed (upstream's active_deadline.go reason).
pub(super) const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";

/// Upstream's field path of a container in its pod (`spec.containers{name}`); sandboxes
/// have none.
pub(super) fn field_path(kind: Kind, name: &str) -> Option<String> {
    match kind {
        Kind::App => Some(format!("spec.containers{{{name}}}")),
        Kind::Init => Some(format!("spec.initContainers{{{name}}}")),
        Kind::Ephemeral => Some(format!("spec.ephemeralContainers{{{name}}}")),
        Kind::Sandbox => None,
    }
}

impl Worker {
    /// An event about the pod itself.
    pub(super) fn pod_event(&self, pod: &Pod, t: EventType, reason: &str, msg: String) {
        self.shared.recorder.pod(pod, None, t, reason, msg);
    }

    /// An event about one of the pod's containers.
    pub(super) fn container_event(
        &self,
        pod: &Pod,
        kind: Kind,
        name: &str,
        t: EventType,
        reason: &str,
        msg: String,
    ) {
        let path = field_path(kind, name);
        self.shared
            .recorder
            .pod(pod, path.as_deref(), t, reason, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_as_upstream() {
        assert_eq!(
            field_path(Kind::App, "web").as_deref(),
            Some("spec.containers{web}")
        );
        assert_eq!(
            field_path(Kind::Init, "setup").as_deref(),
            Some("spec.initContainers{setup}")
        );
        assert_eq!(field_path(Kind::Sandbox, "POD"), None);
    }
}
