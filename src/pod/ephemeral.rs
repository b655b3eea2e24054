//! Ephemeral containers: the debugging containers `kubectl debug` adds to a running pod
//! through its `ephemeralcontainers` subresource. The agent runs them as containers of kind
//! `Ephemeral`: each is started once (before the init containers, as upstream's SyncPod,
//! so a pod whose init containers fail can still be debugged), never restarted, never
//! probed, and reported in `status.ephemeralContainerStatuses`, never ready.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

/// The pod's ephemeral containers as containers, in spec order, each with the container
/// whose process namespace it joins (`targetContainerName`), if any.
pub(crate) fn containers(pod: &Pod) -> Vec<(Container, Option<String>)> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .map(|ec| (as_container(ec), ec.target_container_name.clone()))
        .collect()
}

/// The container the agent starts for `ec`. The API refuses ports, probes, lifecycle
/// hooks and resources on an ephemeral container, so none are carried over.
fn as_container(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env: ec.env.clone(),
        env_from: ec.env_from.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_containers_keep_what_they_may_have_and_their_target() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u"},
            "spec": {
                "containers": [{"name": "app", "image": "busybox"}],
                "ephemeralContainers": [
                    {"name": "debugger", "image": "busybox", "command": ["sh"],
                     "stdin": true, "tty": true, "targetContainerName": "app",
                     "env": [{"name": "A", "value": "1"}],
                     "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                     "terminationMessagePolicy": "File"},
                    {"name": "second", "image": "agnhost"}
                ]
            }
        }))
        .unwrap();
        let got = containers(&pod);
        let names: Vec<_> = got
            .iter()
            .map(|(c, t)| (c.name.as_str(), t.as_deref()))
            .collect();
        assert_eq!(names, [("debugger", Some("app")), ("second", None)]);
        let (debugger, _) = &got[0];
        assert_eq!(debugger.image.as_deref(), Some("busybox"));
        assert_eq!(debugger.command.as_deref(), Some(&["sh".to_string()][..]));
        assert_eq!((debugger.stdin, debugger.tty), (Some(true), Some(true)));
        assert_eq!(debugger.env.as_ref().map(Vec::len), Some(1));
        assert_eq!(debugger.volume_mounts.as_ref().map(Vec::len), Some(1));
        assert_eq!(debugger.termination_message_policy.as_deref(), Some("File"));
        assert!(containers(&Pod::default()).is_empty());
    }
}
