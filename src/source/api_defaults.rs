//! The API server's defaulting of a v1 Pod (upstream pkg/apis/core/v1/defaults.go), for the
//! fields the agent reads. Static pods never pass through an API server, so the agent applies
//! these itself; they are applied before hashing, as upstream's decoder does.

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, Lifecycle, Pod, PodSecurityContext, PodSpec, Probe, Volume,
};

pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Files created from configMap, secret, downwardAPI and projected volumes: 0644.
pub const DEFAULT_VOLUME_FILE_MODE: i32 = 0o644;

/// Fills in every unset field that the API server would default.
pub fn apply_api_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_spec(spec);
}

fn default_spec(spec: &mut PodSpec) {
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS);
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network.unwrap_or(false);
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(container, host_network);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
}

fn default_container(container: &mut Container, host_network: bool) {
    if container.image_pull_policy.is_none() {
        let policy = pull_policy_for(container.image.as_deref().unwrap_or(""));
        container.image_pull_policy = Some(policy.into());
    }
    container
        .termination_message_path
        .get_or_insert_with(|| DEFAULT_TERMINATION_MESSAGE_PATH.into());
    container
        .termination_message_policy
        .get_or_insert_with(|| "File".into());
    for port in container.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
        // With the host's network the container port is the host port.
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    for probe in [
        &mut container.liveness_probe,
        &mut container.readiness_probe,
        &mut container.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(Lifecycle {
        post_start,
        pre_stop,
        ..
    }) = &mut container.lifecycle
    {
        for handler in [post_start, pre_stop].into_iter().flatten() {
            if let Some(get) = &mut handler.http_get {
                default_http_get(get);
            }
        }
    }
    // Requests default to limits for each resource that has a limit but no request.
    if let Some(resources) = &mut container.resources {
        if let Some(limits) = &resources.limits {
            let requests = resources.requests.get_or_insert_with(Default::default);
            for (name, limit) in limits {
                requests
                    .entry(name.clone())
                    .or_insert_with(|| limit.clone());
            }
        }
    }
    for env in container.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            field_ref.api_version.get_or_insert_with(|| "v1".into());
        }
    }
}

fn default_probe(probe: &mut Probe) {
    probe.timeout_seconds.get_or_insert(1);
    probe.period_seconds.get_or_insert(10);
    probe.success_threshold.get_or_insert(1);
    probe.failure_threshold.get_or_insert(3);
    if let Some(get) = &mut probe.http_get {
        default_http_get(get);
    }
}

fn default_http_get(get: &mut HTTPGetAction) {
    get.path.get_or_insert_with(|| "/".into());
    get.scheme.get_or_insert_with(|| "HTTP".into());
}

fn default_volume(volume: &mut Volume) {
    let bare = Volume {
        name: volume.name.clone(),
        ..Default::default()
    };
    if *volume == bare {
        volume.empty_dir = Some(Default::default());
    }
    if let Some(host_path) = &mut volume.host_path {
        host_path.type_.get_or_insert_with(String::new);
    }
    if let Some(config_map) = &mut volume.config_map {
        config_map
            .default_mode
            .get_or_insert(DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(secret) = &mut volume.secret {
        secret.default_mode.get_or_insert(DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(downward) = &mut volume.downward_api {
        downward
            .default_mode
            .get_or_insert(DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(projected) = &mut volume.projected {
        projected
            .default_mode
            .get_or_insert(DEFAULT_VOLUME_FILE_MODE);
    }
}

/// `Always` for an image with tag `latest` or with neither tag nor digest, else `IfNotPresent`.
pub fn pull_policy_for(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    // A tag follows the last ':' after the last '/', so "host:5000/app" has none.
    let last_component = name.rsplit('/').next().unwrap_or(name);
    let tag = last_component.split_once(':').map(|(_, tag)| tag);
    match (tag, digest) {
        (Some("latest"), _) => "Always",
        (None, None) => "Always",
        _ => "IfNotPresent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(pull_policy_for("nginx"), "Always");
        assert_eq!(pull_policy_for("nginx:latest"), "Always");
        assert_eq!(pull_policy_for("nginx:1.27"), "IfNotPresent");
        assert_eq!(pull_policy_for("localhost:5000/nginx"), "Always");
        assert_eq!(pull_policy_for("localhost:5000/nginx:1"), "IfNotPresent");
        assert_eq!(pull_policy_for("nginx@sha256:abc"), "IfNotPresent");
        assert_eq!(pull_policy_for("nginx:latest@sha256:abc"), "Always");
    }

    #[test]
    fn fills_pod_and_container_defaults() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("nginx:1.27".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]),
                    liveness_probe: Some(Probe {
                        http_get: Some(HTTPGetAction {
                            port: IntOrString::Int(80),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    resources: Some(ResourceRequirements {
                        limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }]),
                volumes: Some(vec![Volume {
                    name: "scratch".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply_api_defaults(&mut pod);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        let app = &spec.containers[0];
        assert_eq!(app.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            app.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(app.termination_message_policy.as_deref(), Some("File"));
        let port = &app.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, None);
        let probe = app.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (
                probe.period_seconds,
                probe.timeout_seconds,
                probe.success_threshold,
                probe.failure_threshold
            ),
            (Some(10), Some(1), Some(1), Some(3))
        );
        let get = probe.http_get.as_ref().unwrap();
        assert_eq!(
            (get.path.as_deref(), get.scheme.as_deref()),
            (Some("/"), Some("HTTP"))
        );
        assert!(app.readiness_probe.is_none(), "absent probes stay absent");
        assert_eq!(
            app.resources.as_ref().unwrap().requests.as_ref().unwrap()["memory"],
            Quantity("64Mi".into())
        );
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image_pull_policy.as_deref(), Some("Always"));
        assert!(spec.volumes.as_ref().unwrap()[0].empty_dir.is_some());
    }

    #[test]
    fn keeps_values_that_are_set_and_is_idempotent() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                termination_grace_period_seconds: Some(5),
                host_network: Some(true),
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("nginx".into()),
                    image_pull_policy: Some("Never".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 8080,
                        protocol: Some("UDP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        apply_api_defaults(&mut pod);
        let once = pod.clone();
        apply_api_defaults(&mut pod);
        assert_eq!(pod, once);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(5));
        let container = &spec.containers[0];
        assert_eq!(container.image_pull_policy.as_deref(), Some("Never"));
        let port = &container.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("UDP"));
        assert_eq!(port.host_port, Some(8080));
    }
}
