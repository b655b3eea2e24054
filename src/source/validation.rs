//! Validation of static pod manifests, with upstream's field paths and messages so users see
//! the errors they know from `kubectl apply` (e.g. `spec.containers[0].image: Required value`).

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1123_LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character \
    (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower \
    case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
    character (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
/// Upstream's message for a port number out of range (validation.IsValidPortNum).
const PORT_RANGE_MESSAGE: &str = "must be between 1 and 65535, inclusive";
/// Upstream's messages for numbers that may not be negative or must be positive.
const NON_NEGATIVE_MESSAGE: &str = "must be greater than or equal to 0";
const POSITIVE_MESSAGE: &str = "must be greater than 0";
/// Upstream's bound of activeDeadlineSeconds (1 ..= MaxInt32).
const ACTIVE_DEADLINE_MESSAGE: &str = "must be between 1 and 2147483647, inclusive";
/// Upstream's message for a quantity that does not parse.
const QUANTITY_MESSAGE: &str =
    "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required {
        detail: Option<String>,
    },
    Invalid {
        value: String,
        detail: String,
    },
    /// An invalid number, shown bare as upstream prints integer values (`Invalid value: 70000`).
    InvalidNumber {
        value: i64,
        detail: String,
    },
    Duplicate {
        value: String,
    },
    NotSupported {
        value: String,
        supported: Vec<&'static str>,
    },
}

/// One problem with one field, e.g. `spec.containers[1].name: Duplicate value: "app"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.kind {
            FieldErrorKind::Required { detail: None } => write!(f, "Required value"),
            FieldErrorKind::Required {
                detail: Some(detail),
            } => write!(f, "Required value: {detail}"),
            FieldErrorKind::Invalid { value, detail } => {
                write!(f, "Invalid value: {value:?}: {detail}")
            }
            FieldErrorKind::InvalidNumber { value, detail } => {
                write!(f, "Invalid value: {value}: {detail}")
            }
            FieldErrorKind::Duplicate { value } => write!(f, "Duplicate value: {value:?}"),
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
        }
    }
}

/// All problems found in one pod. Shown as upstream aggregates them: one error alone, several
/// as `[a, b]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        match parts.len() {
            1 => write!(f, "{}", parts[0]),
            _ => write!(f, "[{}]", parts.join(", ")),
        }
    }
}

impl std::error::Error for ValidationErrors {}

impl ValidationErrors {
    fn required(&mut self, field: impl Into<String>, detail: Option<&str>) {
        self.0.push(FieldError {
            field: field.into(),
            kind: FieldErrorKind::Required {
                detail: detail.map(str::to_string),
            },
        });
    }

    fn invalid_number(&mut self, field: String, value: i64, detail: &str) {
        self.0.push(FieldError {
            field,
            kind: FieldErrorKind::InvalidNumber {
                value,
                detail: detail.to_string(),
            },
        });
    }

    fn invalid(&mut self, field: &str, value: &str, detail: impl Into<String>) {
        self.0.push(FieldError {
            field: field.to_string(),
            kind: FieldErrorKind::Invalid {
                value: value.to_string(),
                detail: detail.into(),
            },
        });
    }
}

/// Problems with `value` as a DNS-1123 label, as upstream's messages (empty when valid).
pub fn dns1123_label_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        problems.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_label_shape(value) {
        problems.push(DNS1123_LABEL_MESSAGE.to_string());
    }
    problems
}

/// Problems with `value` as a DNS-1123 subdomain, as upstream's messages (empty when valid).
pub fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        problems.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    if !value.split('.').all(is_label_shape) {
        problems.push(DNS1123_SUBDOMAIN_MESSAGE.to_string());
    }
    problems
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label_shape(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// Checks what the agent relies on: metadata.name (a DNS-1123 subdomain; checked before the
/// node suffix is added), metadata.namespace (a DNS-1123 label, when set), at least one
/// container, container and init container names (DNS-1123 labels, unique across both lists),
/// images, and the restart policy.
pub fn validate_pod(pod: &Pod) -> Result<(), ValidationErrors> {
    let mut errors = ValidationErrors::default();
    match pod.metadata.name.as_deref() {
        None | Some("") => {
            errors.required("metadata.name", Some("name or generateName is required"))
        }
        Some(name) => {
            for problem in dns1123_subdomain_problems(name) {
                errors.invalid("metadata.name", name, problem);
            }
        }
    }
    if let Some(namespace) = pod.metadata.namespace.as_deref().filter(|n| !n.is_empty()) {
        for problem in dns1123_label_problems(namespace) {
            errors.invalid("metadata.namespace", namespace, problem);
        }
    }

    // The UID names the pod's folder on the node (and is removed with it): a manifest's own
    // UID is taken only when it is a plain name. (Upstream takes any string here.)
    if let Some(uid) = pod.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        if let Some(problem) = crate::data_dirs::uid_problem(uid) {
            errors.invalid("metadata.uid", uid, problem);
        }
    }

    let default_spec = Default::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    if let Some(secs) = spec.active_deadline_seconds {
        if !(1..=i64::from(i32::MAX)).contains(&secs) {
            errors.invalid_number(
                "spec.activeDeadlineSeconds".into(),
                secs,
                ACTIVE_DEADLINE_MESSAGE,
            );
        }
    }
    if let Some(secs) = spec.termination_grace_period_seconds.filter(|s| *s < 0) {
        errors.invalid_number(
            "spec.terminationGracePeriodSeconds".into(),
            secs,
            NON_NEGATIVE_MESSAGE,
        );
    }
    let mut volume_names = HashSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}].name");
        if volume.name.is_empty() {
            errors.required(field, None);
            continue;
        }
        for problem in dns1123_label_problems(&volume.name) {
            errors.invalid(&field, &volume.name, problem);
        }
        if !volume_names.insert(volume.name.as_str()) {
            errors.0.push(FieldError {
                field,
                kind: FieldErrorKind::Duplicate {
                    value: volume.name.clone(),
                },
            });
        }
    }
    let mut names = HashSet::new();
    if spec.containers.is_empty() {
        errors.required("spec.containers", None);
    }
    // Regular containers first, then init containers, so a clash between the two lists is
    // reported on the init container, as upstream does.
    validate_containers(&spec.containers, "spec.containers", &mut names, &mut errors);
    if let Some(init) = &spec.init_containers {
        validate_containers(init, "spec.initContainers", &mut names, &mut errors);
    }
    if let Some(policy) = spec.restart_policy.as_deref() {
        if !RESTART_POLICIES.contains(&policy) {
            errors.0.push(FieldError {
                field: "spec.restartPolicy".into(),
                kind: FieldErrorKind::NotSupported {
                    value: policy.to_string(),
                    supported: RESTART_POLICIES.to_vec(),
                },
            });
        }
    }
    if errors.0.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn validate_containers(
    containers: &[Container],
    path: &str,
    names: &mut HashSet<String>,
    errors: &mut ValidationErrors,
) {
    for (i, container) in containers.iter().enumerate() {
        let name_path = format!("{path}[{i}].name");
        if container.name.is_empty() {
            errors.required(name_path, None);
        } else {
            for problem in dns1123_label_problems(&container.name) {
                errors.invalid(&name_path, &container.name, problem);
            }
            if !names.insert(container.name.clone()) {
                errors.0.push(FieldError {
                    field: name_path,
                    kind: FieldErrorKind::Duplicate {
                        value: container.name.clone(),
                    },
                });
            }
        }
        let image_path = format!("{path}[{i}].image");
        match container.image.as_deref() {
            None | Some("") => errors.required(image_path, None),
            Some(image) if image.trim() != image => errors.invalid(
                &image_path,
                image,
                "must not have leading or trailing whitespace",
            ),
            Some(_) => {}
        }
        validate_ports(container, &format!("{path}[{i}].ports"), errors);
        let probes = [
            ("livenessProbe", &container.liveness_probe),
            ("readinessProbe", &container.readiness_probe),
            ("startupProbe", &container.startup_probe),
        ];
        for (field, probe) in probes {
            if let Some(probe) = probe {
                validate_probe(probe, &format!("{path}[{i}].{field}"), errors);
            }
        }
        let lifecycle = container.lifecycle.as_ref();
        let hooks = [
            ("postStart", lifecycle.and_then(|l| l.post_start.as_ref())),
            ("preStop", lifecycle.and_then(|l| l.pre_stop.as_ref())),
        ];
        for (hook, handler) in hooks {
            if let Some(secs) = handler
                .and_then(|h| h.sleep.as_ref())
                .map(|s| s.seconds)
                .filter(|s| *s < 0)
            {
                errors.invalid_number(
                    format!("{path}[{i}].lifecycle.{hook}.sleep.seconds"),
                    secs,
                    NON_NEGATIVE_MESSAGE,
                );
            }
        }
        validate_resources(container, &format!("{path}[{i}].resources"), errors);
    }
}

/// A probe's numbers as upstream checks them: none negative, its own grace period above 0,
/// and numeric ports in range.
fn validate_probe(probe: &Probe, path: &str, errors: &mut ValidationErrors) {
    let numbers = [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ];
    for (field, value) in numbers {
        if let Some(n) = value.filter(|n| *n < 0) {
            errors.invalid_number(format!("{path}.{field}"), n.into(), NON_NEGATIVE_MESSAGE);
        }
    }
    if let Some(secs) = probe.termination_grace_period_seconds.filter(|s| *s <= 0) {
        errors.invalid_number(
            format!("{path}.terminationGracePeriodSeconds"),
            secs,
            POSITIVE_MESSAGE,
        );
    }
    let is_port = |n: i32| (1..=65535).contains(&n);
    let ports = [
        ("httpGet.port", probe.http_get.as_ref().map(|h| &h.port)),
        ("tcpSocket.port", probe.tcp_socket.as_ref().map(|t| &t.port)),
    ];
    for (field, port) in ports {
        if let Some(&IntOrString::Int(n)) = port {
            if !is_port(n) {
                errors.invalid_number(format!("{path}.{field}"), n.into(), PORT_RANGE_MESSAGE);
            }
        }
    }
    if let Some(n) = probe.grpc.as_ref().map(|g| g.port).filter(|n| !is_port(*n)) {
        errors.invalid_number(format!("{path}.grpc.port"), n.into(), PORT_RANGE_MESSAGE);
    }
}

/// Requests and limits must be quantities, and none negative, as upstream checks them: the
/// agent turns them into cgroup limits and admission sums.
fn validate_resources(container: &Container, path: &str, errors: &mut ValidationErrors) {
    let Some(resources) = &container.resources else {
        return;
    };
    let lists = [
        ("limits", resources.limits.as_ref()),
        ("requests", resources.requests.as_ref()),
    ];
    for (list, values) in lists {
        for (name, value) in values.into_iter().flatten() {
            let field = format!("{path}.{list}[{name}]");
            match crate::vocabulary::quantity::Quantity::parse(&value.0) {
                Err(_) => errors.invalid(&field, &value.0, QUANTITY_MESSAGE),
                Ok(q) if q.is_negative() => errors.invalid(&field, &value.0, NON_NEGATIVE_MESSAGE),
                Ok(_) => {}
            }
        }
    }
}

/// Port numbers as upstream checks them: containerPort is required and must be a port,
/// hostPort 0 means unset and any other value must be a port. Later stages keep ports in
/// 16 bits, so an unchecked 70000 would silently become another port.
fn validate_ports(container: &Container, path: &str, errors: &mut ValidationErrors) {
    let is_port = |n: i32| (1..=65535).contains(&n);
    for (j, port) in container.ports.iter().flatten().enumerate() {
        let container_port = format!("{path}[{j}].containerPort");
        match port.container_port {
            0 => errors.required(container_port, None),
            n if !is_port(n) => errors.invalid_number(container_port, n.into(), PORT_RANGE_MESSAGE),
            _ => {}
        }
        match port.host_port {
            Some(n) if n != 0 && !is_port(n) => errors.invalid_number(
                format!("{path}[{j}].hostPort"),
                n.into(),
                PORT_RANGE_MESSAGE,
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn container(name: &str, image: Option<&str>) -> Container {
        Container {
            name: name.to_string(),
            image: image.map(str::to_string),
            ..Default::default()
        }
    }

    fn pod(name: &str, containers: Vec<Container>) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn messages(pod: &Pod) -> Vec<String> {
        validate_pod(pod)
            .unwrap_err()
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_good_pod_passes() {
        let mut p = pod("web.example", vec![container("app", Some("nginx:1.27"))]);
        p.metadata.namespace = Some("kube-system".into());
        p.spec.as_mut().unwrap().init_containers = Some(vec![container("init", Some("busybox"))]);
        p.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
        assert_eq!(validate_pod(&p), Ok(()));
    }

    #[test]
    fn containers_are_required() {
        assert_eq!(
            messages(&pod("a", vec![])),
            vec!["spec.containers: Required value"]
        );
        let mut no_spec = pod("a", vec![]);
        no_spec.spec = None;
        assert_eq!(messages(&no_spec), vec!["spec.containers: Required value"]);
    }

    #[test]
    fn names_must_be_valid_and_unique() {
        let p = pod(
            "Foo_",
            vec![
                container("app", Some("a")),
                container("app", Some("b")),
                container("Bad", Some("c")),
                container("", Some("d")),
            ],
        );
        assert_eq!(
            messages(&p),
            vec![
                format!("metadata.name: Invalid value: \"Foo_\": {DNS1123_SUBDOMAIN_MESSAGE}"),
                "spec.containers[1].name: Duplicate value: \"app\"".to_string(),
                format!("spec.containers[2].name: Invalid value: \"Bad\": {DNS1123_LABEL_MESSAGE}"),
                "spec.containers[3].name: Required value".to_string(),
            ]
        );
        assert!(DNS1123_SUBDOMAIN_MESSAGE.starts_with(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }

    #[test]
    fn init_container_clashing_with_container_is_reported_on_the_init_container() {
        let mut p = pod("a", vec![container("app", Some("x"))]);
        p.spec.as_mut().unwrap().init_containers = Some(vec![container("app", Some("y"))]);
        assert_eq!(
            messages(&p),
            vec!["spec.initContainers[0].name: Duplicate value: \"app\""]
        );
    }

    #[test]
    fn image_is_required() {
        let mut p = pod(
            "a",
            vec![container("app", None), container("b", Some(" x"))],
        );
        p.spec.as_mut().unwrap().init_containers = Some(vec![container("i", Some(""))]);
        assert_eq!(
            messages(&p),
            vec![
                "spec.containers[0].image: Required value",
                "spec.containers[1].image: Invalid value: \" x\": must not have leading or trailing whitespace",
                "spec.initContainers[0].image: Required value",
            ]
        );
    }

    #[test]
    fn metadata_checks() {
        let mut p = pod("", vec![container("app", Some("x"))]);
        p.metadata.namespace = Some("Kube.System".into());
        assert_eq!(
            messages(&p),
            vec![
                "metadata.name: Required value: name or generateName is required".to_string(),
                format!(
                    "metadata.namespace: Invalid value: \"Kube.System\": {DNS1123_LABEL_MESSAGE}"
                ),
            ]
        );
        let long = "a".repeat(254);
        let p = pod(&long, vec![container("app", Some("x"))]);
        assert_eq!(
            messages(&p),
            vec![format!(
                "metadata.name: Invalid value: \"{long}\": must be no more than 253 characters"
            )]
        );
    }

    #[test]
    fn ports_must_be_in_range() {
        use k8s_openapi::api::core::v1::ContainerPort;
        let port = |container_port: i32, host_port: Option<i32>| ContainerPort {
            container_port,
            host_port,
            ..Default::default()
        };
        let mut app = container("app", Some("x"));
        app.ports = Some(vec![
            port(80, Some(0)),
            port(70000, None),
            port(8080, Some(65536)),
            port(0, Some(-1)),
            port(65535, Some(1)),
        ]);
        let mut init = container("init", Some("x"));
        init.ports = Some(vec![port(-5, None)]);
        let mut p = pod("a", vec![app]);
        p.spec.as_mut().unwrap().init_containers = Some(vec![init]);
        assert_eq!(
            messages(&p),
            vec![
                "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[2].hostPort: Invalid value: 65536: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[3].containerPort: Required value",
                "spec.containers[0].ports[3].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                "spec.initContainers[0].ports[0].containerPort: Invalid value: -5: must be between 1 and 65535, inclusive",
            ]
        );
    }

    #[test]
    fn restart_policy_must_be_known() {
        let mut p = pod("a", vec![container("app", Some("x"))]);
        p.spec.as_mut().unwrap().restart_policy = Some("Sometimes".into());
        assert_eq!(
            messages(&p),
            vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""]
        );
    }

    #[test]
    fn several_errors_display_as_a_list() {
        let p = pod(
            "a",
            vec![container("app", None), container("app", Some("x"))],
        );
        assert_eq!(
            validate_pod(&p).unwrap_err().to_string(),
            "[spec.containers[0].image: Required value, spec.containers[1].name: Duplicate value: \"app\"]"
        );
    }

    #[test]
    fn dns_helpers() {
        assert!(dns1123_label_problems("a-1").is_empty());
        assert!(!dns1123_label_problems("-a").is_empty());
        assert!(!dns1123_label_problems("a.b").is_empty());
        assert_eq!(dns1123_label_problems(&"a".repeat(64)).len(), 1);
        assert!(dns1123_subdomain_problems("a.b-c.d").is_empty());
        assert!(!dns1123_subdomain_problems("a..b").is_empty());
        assert!(!dns1123_subdomain_problems("").is_empty());
    }

    #[test]
    fn a_uid_that_is_not_a_plain_name_is_refused() {
        for uid in ["../../etc", "a/b", "..", "x\0y"] {
            let mut p = pod("a", vec![container("app", Some("x"))]);
            p.metadata.uid = Some(uid.into());
            let got = messages(&p);
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(
                got[0].starts_with(&format!(
                    "metadata.uid: Invalid value: {uid:?}: must consist of"
                )),
                "{got:?}"
            );
        }
        let mut p = pod("a", vec![container("app", Some("x"))]);
        p.metadata.uid = Some("9d1f4c0e-2b1a-4c1e-8f00-0123456789ab".into());
        assert_eq!(validate_pod(&p), Ok(()));
    }

    #[test]
    fn out_of_range_durations_are_refused() {
        let mut p = pod("a", vec![container("app", Some("x"))]);
        let spec = p.spec.as_mut().unwrap();
        spec.active_deadline_seconds = Some(i64::MAX);
        spec.termination_grace_period_seconds = Some(-1);
        assert_eq!(
            messages(&p),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 9223372036854775807: must be between 1 and 2147483647, inclusive",
                "spec.terminationGracePeriodSeconds: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(0);
        p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(0);
        assert_eq!(
            messages(&p),
            vec!["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"]
        );
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(i64::from(i32::MAX));
        assert_eq!(validate_pod(&p), Ok(()));
    }

    #[test]
    fn probes_hooks_and_resources_are_checked() {
        let app: Container = serde_json::from_value(serde_json::json!({
            "name": "app", "image": "x",
            "livenessProbe": {"periodSeconds": -5, "terminationGracePeriodSeconds": 0,
                              "httpGet": {"port": 70000}},
            "readinessProbe": {"failureThreshold": -1, "tcpSocket": {"port": "http"}},
            "startupProbe": {"grpc": {"port": 0}},
            "lifecycle": {"preStop": {"sleep": {"seconds": -3}}},
            "resources": {"limits": {"memory": "lots"}, "requests": {"cpu": "-1"}}
        }))
        .unwrap();
        let p = pod("a", vec![app]);
        assert_eq!(
            messages(&p),
            vec![
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -5: must be greater than or equal to 0",
                "spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
                "spec.containers[0].livenessProbe.httpGet.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].readinessProbe.failureThreshold: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].startupProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: -3: must be greater than or equal to 0",
                &format!("spec.containers[0].resources.limits[memory]: Invalid value: \"lots\": {QUANTITY_MESSAGE}"),
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            ]
        );
    }

    #[test]
    fn volume_names_must_be_labels_and_unique() {
        let mut p = pod("a", vec![container("app", Some("x"))]);
        p.spec.as_mut().unwrap().volumes = Some(
            serde_json::from_value(serde_json::json!([
                {"name": "data"}, {"name": "data"}, {"name": "../x"}, {"name": ""}
            ]))
            .unwrap(),
        );
        assert_eq!(
            messages(&p),
            vec![
                "spec.volumes[1].name: Duplicate value: \"data\"".to_string(),
                format!("spec.volumes[2].name: Invalid value: \"../x\": {DNS1123_LABEL_MESSAGE}"),
                "spec.volumes[3].name: Required value".to_string(),
            ]
        );
    }
}
