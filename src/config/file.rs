//! The `--config` file: a `kubelet.config.k8s.io/v1beta1` KubeletConfiguration in YAML or JSON.
//!
//! Every field of upstream's v1beta1 type is accepted so a kubeadm-written file loads as it is;
//! the ones the agent acts on are read here with their types checked, the others are checked
//! against `schema`'s table and reported back when set. An unknown field is dropped with a
//! warning, as upstream's lenient v1beta1 decoding does after its strict pass fails.
//! As upstream's defaulting does, a zero value of a non-pointer field ("0s", 0, "") means
//! "use the default": kubeadm writes `fileCheckFrequency: 0s` and means exactly that.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::duration::parse_duration;
use super::error::ConfigError;
use super::node::{self, EvictionThresholds};
use super::schema;
use super::{AuthorizationMode, SwapBehavior};
use crate::vocabulary::quantity::Quantity;
use k8s_openapi::api::core::v1::Taint;

pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub(crate) const KIND: &str = "KubeletConfiguration";

/// What the file sets. `None` means "not set, or set to its zero value": the default applies.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct FileSettings {
    pub static_pod_path: Option<PathBuf>,
    pub static_pod_url: Option<String>,
    pub static_pod_url_header: Option<BTreeMap<String, Vec<String>>>,
    pub file_check_frequency: Option<Duration>,
    pub http_check_frequency: Option<Duration>,
    pub sync_frequency: Option<Duration>,
    pub max_pods: Option<u32>,
    pub read_only_port: Option<u16>,
    pub healthz_port: Option<u16>,
    pub healthz_bind_address: Option<IpAddr>,
    pub container_log_max_size: Option<u64>,
    pub container_log_max_files: Option<u32>,
    pub pod_logs_dir: Option<PathBuf>,
    /// Raw endpoint as written; mod.rs turns it into a socket path.
    pub container_runtime_endpoint: Option<String>,
    pub address: Option<IpAddr>,
    pub port: Option<u16>,
    pub logging_format: Option<String>,
    pub verbosity: Option<u8>,
    /// Known upstream fields (dotted paths) set to a non-default value that the agent does
    /// not act on yet.
    pub unimplemented_fields: Vec<String>,
    /// Their top-level values as written, for /configz.
    pub unimplemented_values: Map<String, Value>,
    /// Fields upstream does not have (dotted paths); dropped, as upstream's lenient decoding.
    pub unknown_fields: Vec<String>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    pub tls_min_version: Option<String>,
    pub tls_cipher_suites: Option<Vec<String>>,
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    pub rotate_certificates: Option<bool>,
    pub server_tls_bootstrap: Option<bool>,
    pub client_ca_file: Option<PathBuf>,
    pub anonymous_auth: Option<bool>,
    pub authentication_token_webhook: Option<bool>,
    pub authentication_token_webhook_cache_ttl: Option<Duration>,
    pub authorization_mode: Option<AuthorizationMode>,
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
    /// Pointers upstream: an explicit 0 is kept. The range is checked with the flags' values.
    pub image_gc_high_threshold_percent: Option<i32>,
    pub image_gc_low_threshold_percent: Option<i32>,
    pub image_minimum_gc_age: Option<Duration>,
    pub image_maximum_gc_age: Option<Duration>,
    /// Pointers upstream: an explicit false (or 0) is kept, and 0 fails validation.
    pub serialize_image_pulls: Option<bool>,
    pub seccomp_default: Option<bool>,
    /// A pointer upstream: an explicit false is kept.
    pub enable_debugging_handlers: Option<bool>,
    pub enable_system_log_handler: Option<bool>,
    pub enable_system_log_query: Option<bool>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub enable_server: Option<bool>,
    pub max_parallel_image_pulls: Option<i32>,
    pub register_with_taints: Option<Vec<Taint>>,
    /// A pointer upstream: an explicit false is kept.
    pub register_node: Option<bool>,
    pub kube_reserved: Option<BTreeMap<String, Quantity>>,
    pub system_reserved: Option<BTreeMap<String, Quantity>>,
    pub eviction_hard: Option<EvictionThresholds>,
    pub eviction_soft: Option<EvictionThresholds>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, Duration>>,
    pub eviction_minimum_reclaim: Option<EvictionThresholds>,
    pub eviction_pressure_transition_period: Option<Duration>,
    pub eviction_max_pod_grace_period: Option<i32>,
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    /// A pointer upstream: an explicit "" is kept (no host resolver).
    pub resolv_conf: Option<String>,
    pub node_status_update_frequency: Option<Duration>,
    pub node_status_report_frequency: Option<Duration>,
    pub node_lease_duration_seconds: Option<i32>,
    /// A pointer upstream: an explicit false is kept.
    pub cgroups_per_qos: Option<bool>,
    /// Checked where it is applied (mod.rs), so the error names the setting.
    pub cgroup_driver: Option<String>,
    pub cgroup_root: Option<String>,
    /// An explicit empty list is kept (nothing enforced), as upstream.
    pub enforce_node_allocatable: Option<Vec<String>>,
    pub pod_pids_limit: Option<i64>,
    pub kube_reserved_cgroup: Option<String>,
    pub system_reserved_cgroup: Option<String>,
    pub fail_swap_on: Option<bool>,
    /// memorySwap.swapBehavior ("" is upstream's NoSwap).
    pub swap_behavior: Option<SwapBehavior>,
    pub local_storage_capacity_isolation: Option<bool>,
    pub volume_stats_agg_period: Option<Duration>,
}

#[cfg(test)]
pub(crate) fn parse_text(path: &Path, text: &str) -> Result<FileSettings, ConfigError> {
    parse_document(path, &read_document(path, text)?)
}

/// The file's text as a JSON object (YAML or JSON, as upstream's codec reads either), with
/// its apiVersion and kind checked.
pub(crate) fn read_document(path: &Path, text: &str) -> Result<Map<String, Value>, ConfigError> {
    let parse_error = |message: String| ConfigError::ParseFile {
        path: path.to_path_buf(),
        message,
    };
    let value: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?
    } else {
        crate::yaml::from_str(text).map_err(|e| parse_error(e.to_string()))?
    };
    let obj = match value {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => return Err(parse_error(format!("expected a mapping, found {other}"))),
    };
    for (field, expected) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        let value = match obj.get(field) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if value != expected {
            return Err(ConfigError::WrongType {
                path: path.to_path_buf(),
                field,
                value,
                expected,
            });
        }
    }
    Ok(obj)
}

/// Reads a KubeletConfiguration document (`read_document`'s result, or several merged).
pub(crate) fn parse_document(
    path: &Path,
    obj: &Map<String, Value>,
) -> Result<FileSettings, ConfigError> {
    let survey = schema::survey(obj).map_err(|p| ConfigError::InvalidFileField {
        path: path.to_path_buf(),
        field: p.field,
        value: p.value.to_string(),
        reason: p.reason,
    })?;
    let reader = FieldReader {
        path,
        obj,
        prefix: String::new(),
    };

    let mut settings = FileSettings {
        static_pod_path: reader.string("staticPodPath")?.map(PathBuf::from),
        static_pod_url: reader.string("staticPodURL")?,
        static_pod_url_header: reader.header_map("staticPodURLHeader")?,
        file_check_frequency: reader.duration("fileCheckFrequency")?,
        http_check_frequency: reader.duration("httpCheckFrequency")?,
        sync_frequency: reader.duration("syncFrequency")?,
        max_pods: reader
            .int_in("maxPods", 0, i32::MAX as i64)?
            .map(|n| n as u32),
        read_only_port: reader.int_in("readOnlyPort", 0, 65535)?.map(|n| n as u16),
        healthz_port: reader.int_in("healthzPort", 0, 65535)?.map(|n| n as u16),
        healthz_bind_address: reader.ip("healthzBindAddress")?,
        container_log_max_size: reader.quantity("containerLogMaxSize")?,
        container_log_max_files: reader
            .int_in("containerLogMaxFiles", 0, i32::MAX as i64)?
            .map(|n| n as u32),
        pod_logs_dir: reader.string("podLogsDir")?.map(PathBuf::from),
        container_runtime_endpoint: reader.string("containerRuntimeEndpoint")?,
        address: reader.ip("address")?,
        port: reader.int_in("port", 0, 65535)?.map(|n| n as u16),
        logging_format: None,
        verbosity: None,
        unimplemented_fields: survey.unimplemented,
        unimplemented_values: survey.values,
        unknown_fields: survey.unknown,
        tls_cert_file: reader.string("tlsCertFile")?.map(PathBuf::from),
        tls_private_key_file: reader.string("tlsPrivateKeyFile")?.map(PathBuf::from),
        tls_min_version: reader.string("tlsMinVersion")?,
        tls_cipher_suites: reader.string_list("tlsCipherSuites")?,
        allowed_unsafe_sysctls: reader.string_list("allowedUnsafeSysctls")?,
        rotate_certificates: reader.boolean("rotateCertificates")?,
        server_tls_bootstrap: reader.boolean("serverTLSBootstrap")?,
        image_gc_high_threshold_percent: reader.int32("imageGCHighThresholdPercent")?,
        image_gc_low_threshold_percent: reader.int32("imageGCLowThresholdPercent")?,
        image_minimum_gc_age: reader.duration("imageMinimumGCAge")?,
        image_maximum_gc_age: reader.duration("imageMaximumGCAge")?,
        serialize_image_pulls: reader.boolean("serializeImagePulls")?,
        seccomp_default: reader.boolean("seccompDefault")?,
        enable_debugging_handlers: reader.boolean("enableDebuggingHandlers")?,
        enable_system_log_handler: reader.boolean("enableSystemLogHandler")?,
        enable_system_log_query: reader.boolean("enableSystemLogQuery")?,
        feature_gates: reader.bool_map("featureGates")?,
        enable_server: reader.boolean("enableServer")?,
        max_parallel_image_pulls: reader.int32("maxParallelImagePulls")?,
        register_with_taints: reader.taints("registerWithTaints")?,
        register_node: reader.boolean("registerNode")?,
        kube_reserved: reader.resource_list("kubeReserved")?,
        system_reserved: reader.resource_list("systemReserved")?,
        eviction_hard: reader.eviction_thresholds("evictionHard")?,
        eviction_soft: reader.eviction_thresholds("evictionSoft")?,
        eviction_soft_grace_period: reader.grace_periods("evictionSoftGracePeriod")?,
        eviction_minimum_reclaim: reader.eviction_thresholds("evictionMinimumReclaim")?,
        eviction_pressure_transition_period: reader.duration("evictionPressureTransitionPeriod")?,
        // Not a pointer upstream: 0 is the default (no cap from the agent).
        eviction_max_pod_grace_period: reader.int32("evictionMaxPodGracePeriod")?,
        cluster_dns: reader.ip_list("clusterDNS")?,
        cluster_domain: reader.string("clusterDomain")?,
        // A pointer upstream: an explicit "" is kept (no host resolver).
        resolv_conf: match reader.get("resolvConf") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(reader.bad("resolvConf", other, "expected a string")),
        },
        node_status_update_frequency: reader.duration("nodeStatusUpdateFrequency")?,
        node_status_report_frequency: reader.duration("nodeStatusReportFrequency")?,
        // Not a pointer upstream: 0 means the default.
        node_lease_duration_seconds: reader
            .int32("nodeLeaseDurationSeconds")?
            .filter(|n| *n != 0),
        cgroups_per_qos: reader.boolean("cgroupsPerQOS")?,
        cgroup_driver: reader.string("cgroupDriver")?.filter(|s| !s.is_empty()),
        cgroup_root: reader.string("cgroupRoot")?.filter(|s| !s.is_empty()),
        enforce_node_allocatable: match reader.get("enforceNodeAllocatable") {
            None => None,
            Some(v) => Some(
                serde_json::from_value::<Vec<String>>(v.clone()).map_err(|_| {
                    reader.bad("enforceNodeAllocatable", v, "expected a list of strings")
                })?,
            ),
        },
        // A pointer upstream: an explicit 0 is kept (and means no limit).
        pod_pids_limit: reader.int_in("podPidsLimit", i64::MIN, i64::MAX)?,
        kube_reserved_cgroup: reader.string("kubeReservedCgroup")?,
        system_reserved_cgroup: reader.string("systemReservedCgroup")?,
        fail_swap_on: reader.boolean("failSwapOn")?,
        local_storage_capacity_isolation: reader.boolean("localStorageCapacityIsolation")?,
        // Not a pointer upstream: 0 means the default.
        volume_stats_agg_period: reader
            .duration("volumeStatsAggPeriod")?
            .filter(|d| !d.is_zero()),
        ..FileSettings::default()
    };
    if let Some(swap) = reader.block("memorySwap")? {
        if let Some(text) = swap.string("swapBehavior")? {
            settings.swap_behavior = Some(SwapBehavior::parse(&text).ok_or_else(|| {
                swap.bad(
                    "swapBehavior",
                    &Value::String(text.clone()),
                    "expected NoSwap or LimitedSwap",
                )
            })?);
        }
    }
    read_authentication(&reader, &mut settings)?;
    read_authorization(&reader, &mut settings)?;
    // Non-pointer fields upstream: their zero value means "default". healthzPort and
    // containerLogMaxFiles are pointers, so an explicit 0 there is kept (and 0 disables healthz).
    settings.max_pods = settings.max_pods.filter(|n| *n != 0);
    settings.port = settings.port.filter(|n| *n != 0);
    settings.read_only_port = settings.read_only_port.filter(|n| *n != 0);

    if let Some(logging) = reader.block("logging")? {
        settings.logging_format = logging.string("format")?;
        settings.verbosity = logging.int_in("verbosity", 0, 255)?.map(|n| n as u8);
    }
    Ok(settings)
}

/// `authentication: {x509: {clientCAFile}, webhook: {enabled, cacheTTL}, anonymous: {enabled}}`.
fn read_authentication(
    reader: &FieldReader<'_>,
    settings: &mut FileSettings,
) -> Result<(), ConfigError> {
    let Some(auth) = reader.block("authentication")? else {
        return Ok(());
    };
    if let Some(x509) = auth.block("x509")? {
        settings.client_ca_file = x509.string("clientCAFile")?.map(PathBuf::from);
    }
    if let Some(webhook) = auth.block("webhook")? {
        settings.authentication_token_webhook = webhook.boolean("enabled")?;
        settings.authentication_token_webhook_cache_ttl = webhook.duration("cacheTTL")?;
    }
    if let Some(anonymous) = auth.block("anonymous")? {
        settings.anonymous_auth = anonymous.boolean("enabled")?;
    }
    Ok(())
}

/// `authorization: {mode, webhook: {cacheAuthorizedTTL, cacheUnauthorizedTTL}}`.
fn read_authorization(
    reader: &FieldReader<'_>,
    settings: &mut FileSettings,
) -> Result<(), ConfigError> {
    let Some(authz) = reader.block("authorization")? else {
        return Ok(());
    };
    if let Some(mode) = authz.string("mode")? {
        settings.authorization_mode = Some(
            AuthorizationMode::parse(&mode)
                .map_err(|reason| authz.bad("mode", &Value::String(mode.clone()), reason))?,
        );
    }
    if let Some(webhook) = authz.block("webhook")? {
        settings.authorization_webhook_cache_authorized_ttl =
            webhook.duration("cacheAuthorizedTTL")?;
        settings.authorization_webhook_cache_unauthorized_ttl =
            webhook.duration("cacheUnauthorizedTTL")?;
    }
    Ok(())
}

struct FieldReader<'a> {
    path: &'a Path,
    obj: &'a Map<String, Value>,
    /// Dotted path of this block for messages ("authentication.webhook."), empty at the top.
    prefix: String,
}

impl<'a> FieldReader<'a> {
    fn bad(&self, field: &str, value: &Value, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidFileField {
            path: self.path.to_path_buf(),
            field: format!("{}{field}", self.prefix),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// A nested mapping; keys it does not know were reported by `schema::survey`.
    fn block(&self, field: &str) -> Result<Option<FieldReader<'a>>, ConfigError> {
        let Some(value) = self.obj.get(field).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let obj = value
            .as_object()
            .ok_or_else(|| self.bad(field, value, "expected a mapping"))?;
        let prefix = format!("{}{field}.", self.prefix);
        Ok(Some(FieldReader {
            path: self.path,
            obj,
            prefix,
        }))
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(field, other, "expected true or false")),
        }
    }

    fn string_list(&self, field: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<Vec<String>>(value.clone())
            .map(|v| Some(v).filter(|v| !v.is_empty()))
            .map_err(|_| self.bad(field, value, "expected a list of strings"))
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    /// A string field; an empty string counts as unset, as upstream's defaulting treats it.
    fn string(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.bad(field, other, "expected a string")),
        }
    }

    fn int_in(&self, field: &str, min: i64, max: i64) -> Result<Option<i64>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let n = value
            .as_i64()
            .ok_or_else(|| self.bad(field, value, "expected an integer"))?;
        if n < min || n > max {
            return Err(self.bad(field, value, format!("must be between {min} and {max}")));
        }
        Ok(Some(n))
    }

    fn int32(&self, field: &str) -> Result<Option<i32>, ConfigError> {
        Ok(self
            .int_in(field, i32::MIN as i64, i32::MAX as i64)?
            .map(|n| n as i32))
    }

    fn duration(&self, field: &str) -> Result<Option<Duration>, ConfigError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        let d = parse_duration(&text)
            .map_err(|reason| self.bad(field, &Value::String(text.clone()), reason))?;
        Ok(Some(d).filter(|d| !d.is_zero()))
    }

    fn quantity(&self, field: &str) -> Result<Option<u64>, ConfigError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        crate::vocabulary::quantity::size_bytes(&text)
            .map(Some)
            .map_err(|e| self.bad(field, &Value::String(text.clone()), e.to_string()))
    }

    fn ip(&self, field: &str) -> Result<Option<IpAddr>, ConfigError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        text.parse().map(Some).map_err(|_| {
            self.bad(
                field,
                &Value::String(text.clone()),
                "expected an IP address",
            )
        })
    }

    fn bool_map(&self, field: &str) -> Result<Option<BTreeMap<String, bool>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<BTreeMap<String, bool>>(value.clone())
            .map(Some)
            .map_err(|_| self.bad(field, value, "expected a map of names to true or false"))
    }

    fn string_map(&self, field: &str) -> Result<Option<BTreeMap<String, String>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<BTreeMap<String, String>>(value.clone())
            .map(Some)
            .map_err(|_| self.bad(field, value, "expected a map of strings to strings"))
    }

    fn resource_list(
        &self,
        field: &str,
    ) -> Result<Option<BTreeMap<String, Quantity>>, ConfigError> {
        let Some(entries) = self.string_map(field)? else {
            return Ok(None);
        };
        node::parse_resource_list(&entries)
            .map(Some)
            .map_err(|reason| self.bad(field, &serde_json::json!(entries), reason))
    }

    fn eviction_thresholds(&self, field: &str) -> Result<Option<EvictionThresholds>, ConfigError> {
        let Some(entries) = self.string_map(field)? else {
            return Ok(None);
        };
        node::parse_eviction_thresholds(&entries)
            .map(Some)
            .map_err(|reason| self.bad(field, &serde_json::json!(entries), reason))
    }

    fn ip_list(&self, field: &str) -> Result<Option<Vec<IpAddr>>, ConfigError> {
        let Some(list) = self.string_list(field)? else {
            return Ok(None);
        };
        list.iter()
            .map(|text| {
                text.trim().parse().map_err(|_| {
                    self.bad(
                        field,
                        &Value::String(text.clone()),
                        format!("{text:?} is not a valid IP address"),
                    )
                })
            })
            .collect::<Result<Vec<IpAddr>, ConfigError>>()
            .map(Some)
    }

    fn grace_periods(
        &self,
        field: &str,
    ) -> Result<Option<BTreeMap<String, Duration>>, ConfigError> {
        let Some(entries) = self.string_map(field)? else {
            return Ok(None);
        };
        node::parse_grace_periods(&entries)
            .map(Some)
            .map_err(|reason| self.bad(field, &serde_json::json!(entries), reason))
    }

    /// A list of core/v1 Taints, each checked as the flag's are.
    fn taints(&self, field: &str) -> Result<Option<Vec<Taint>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let list = serde_json::from_value::<Vec<Taint>>(value.clone()).map_err(|e| {
            self.bad(
                field,
                value,
                format!("expected a list of taints {{key, value, effect}}: {e}"),
            )
        })?;
        let mut taints: Vec<Taint> = Vec::new();
        for (i, taint) in list.into_iter().enumerate() {
            node::validate_taint(&taint)
                .and_then(|()| node::check_unique_taint(&taints, &taint))
                .map_err(|reason| self.bad(&format!("{field}[{i}]"), value, reason))?;
            taints.push(taint);
        }
        Ok(Some(taints))
    }

    fn header_map(
        &self,
        field: &str,
    ) -> Result<Option<BTreeMap<String, Vec<String>>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<BTreeMap<String, Vec<String>>>(value.clone())
            .map(Some)
            .map_err(|_| {
                self.bad(
                    field,
                    value,
                    "expected a map of header names to lists of values",
                )
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FileSettings, ConfigError> {
        parse_text(Path::new("/etc/kubelet.yaml"), text)
    }

    #[test]
    fn upstream_field_table_is_complete() {
        // types.go at v1.34 has 126 fields besides apiVersion and kind; the table also
        // accepts draManagerReconcilePeriod, from later versions.
        assert_eq!(schema::FIELDS.len(), 127);
        let mut names: Vec<&str> = schema::FIELDS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), schema::FIELDS.len(), "no field twice");
    }

    #[test]
    fn reads_used_fields_from_yaml() {
        let s = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: /etc/kubernetes/manifests\nstaticPodURL: http://127.0.0.1/pods\n\
             staticPodURLHeader:\n  X-A: [one, two]\nfileCheckFrequency: 5s\n\
             httpCheckFrequency: 1m30s\nsyncFrequency: 2m\nmaxPods: 30\nreadOnlyPort: 10255\n\
             healthzPort: 0\nhealthzBindAddress: 0.0.0.0\ncontainerLogMaxSize: 20Mi\n\
             containerLogMaxFiles: 3\npodLogsDir: /logs\n\
             containerRuntimeEndpoint: unix:///run/c.sock\naddress: 127.0.0.1\nport: 11250\n\
             logging:\n  format: json\n  verbosity: 4\n",
        )
        .unwrap();
        assert_eq!(
            s.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(s.static_pod_url.as_deref(), Some("http://127.0.0.1/pods"));
        assert_eq!(
            s.static_pod_url_header.unwrap()["X-A"],
            vec!["one".to_string(), "two".to_string()]
        );
        assert_eq!(s.file_check_frequency, Some(Duration::from_secs(5)));
        assert_eq!(s.http_check_frequency, Some(Duration::from_secs(90)));
        assert_eq!(s.sync_frequency, Some(Duration::from_secs(120)));
        assert_eq!(s.max_pods, Some(30));
        assert_eq!(s.read_only_port, Some(10255));
        assert_eq!(s.healthz_port, Some(0));
        assert_eq!(s.healthz_bind_address, Some("0.0.0.0".parse().unwrap()));
        assert_eq!(s.container_log_max_size, Some(20 << 20));
        assert_eq!(s.container_log_max_files, Some(3));
        assert_eq!(s.pod_logs_dir, Some(PathBuf::from("/logs")));
        assert_eq!(
            s.container_runtime_endpoint.as_deref(),
            Some("unix:///run/c.sock")
        );
        assert_eq!(s.address, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(s.port, Some(11250));
        assert_eq!(s.logging_format.as_deref(), Some("json"));
        assert_eq!(s.verbosity, Some(4));
        assert!(s.unimplemented_fields.is_empty());
        assert!(s.unknown_fields.is_empty());
    }

    #[test]
    fn reads_json() {
        let s = parse(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":7}"#)
            .unwrap();
        assert_eq!(s.max_pods, Some(7));
    }

    #[test]
    fn zero_values_mean_default() {
        let s = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             fileCheckFrequency: 0s\nmaxPods: 0\nport: 0\ncontainerRuntimeEndpoint: \"\"\n",
        )
        .unwrap();
        assert_eq!(s, FileSettings::default());
    }

    #[test]
    fn checks_api_version_and_kind() {
        let err = parse("apiVersion: v1\nkind: KubeletConfiguration\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "config file /etc/kubelet.yaml: apiVersion is \"v1\", expected \"kubelet.config.k8s.io/v1beta1\""
        );
        let err = parse("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n").unwrap_err();
        assert!(err.to_string().contains("kind is \"Pod\""), "{err}");
        assert!(parse("").is_err());
    }

    #[test]
    fn unknown_fields_are_dropped_and_reported_as_upstream_lenient_decoding() {
        let s = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPod: 3\n\
             maxPods: 4\nlogging:\n  colour: red\nauthentication:\n  x509:\n    crl: /x\n\
             memorySwap:\n  swapLimit: 1\n",
        )
        .unwrap();
        assert_eq!(s.max_pods, Some(4));
        assert_eq!(
            s.unknown_fields,
            vec![
                "authentication.x509.crl",
                "logging.colour",
                "maxPod",
                "memorySwap.swapLimit"
            ]
        );
    }

    #[test]
    fn unimplemented_fields_are_checked_and_listed_when_not_default() {
        let s = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             kubeAPIQPS: 50\noomScoreAdj: -500\nprotectKernelDefaults: false\nfeatureGates:\n  A: true\n\
             streamingConnectionIdleTimeout: 4h\nvolumeStatsAggPeriod: 0s\nenableServer: false\n\
             logging:\n  flushFrequency: 5000000000\n  vmodule:\n  - filePattern: x\n    verbosity: 2\n",
        )
        .unwrap();
        assert_eq!(
            s.unimplemented_fields,
            vec!["logging.vmodule", "oomScoreAdj"]
        );
        // Read, for the gates the agent acts on; the rest are warned about by Config.
        assert_eq!(
            s.feature_gates,
            Some(std::collections::BTreeMap::from([("A".to_string(), true)]))
        );
        for (text, field, reason) in [
            (
                "oomScoreAdj: 2000",
                "oomScoreAdj",
                "must be between -1000 and 1000",
            ),
            ("kubeAPIQPS: -1", "kubeAPIQPS", "must be between 0 and"),
            (
                "protectKernelDefaults: maybe",
                "protectKernelDefaults",
                "expected true or false",
            ),
            (
                "hairpinMode: bridge",
                "hairpinMode",
                "expected one of promiscuous-bridge",
            ),
            (
                "clusterDNS: [10.0.0.300]",
                "clusterDNS",
                "not a valid IP address",
            ),
            (
                "cpuCFSQuotaPeriod: 2s",
                "cpuCFSQuotaPeriod",
                "between 1ms and 1s",
            ),
            (
                "evictionSoft:\n  memory.available: lots",
                "evictionSoft",
                "memory.available",
            ),
            (
                "crashLoopBackOff:\n  maxContainerRestartPeriod: 10m",
                "crashLoopBackOff.maxContainerRestartPeriod",
                "between 1s and 5m0s",
            ),
            (
                "userNamespaces:\n  idsPerPod: 1000",
                "userNamespaces.idsPerPod",
                "multiple of 65536",
            ),
            (
                "logging:\n  options:\n    json:\n      infoBufferSize: big",
                "logging.options",
                "",
            ),
            (
                "reservedMemory:\n- numaNode: x",
                "reservedMemory[0].numaNode",
                "expected an integer",
            ),
            (
                "reservedSystemCPUs: 0-x",
                "reservedSystemCPUs",
                "not a CPU number",
            ),
            (
                "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s",
                "shutdownGracePeriodCriticalPods",
                "must be <= shutdownGracePeriod 10s",
            ),
            ("shutdownGracePeriod: 500ms", "shutdownGracePeriod", ">= 1s"),
            (
                "enableSystemLogHandler: false\nenableSystemLogQuery: true",
                "enableSystemLogQuery",
                "needs enableSystemLogHandler",
            ),
        ] {
            let err = parse(&format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{text}\n"
            ))
            .unwrap_err();
            let message = err.to_string();
            assert!(
                message.starts_with("config file /etc/kubelet.yaml: invalid value ")
                    && message.contains(&format!(" for field {field}"))
                    && message.contains(reason),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: lots\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "config file /etc/kubelet.yaml: invalid value \"lots\" for field maxPods: expected an integer"
        );
        let err = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: 10\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("field syncFrequency"), "{err}");
        let err = parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nreadOnlyPort: 70000\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("must be between 0 and 65535"),
            "{err}"
        );
    }

    #[test]
    fn loads_a_kubeadm_written_config() {
        let s = parse(KUBEADM_CONFIG).unwrap();
        assert_eq!(
            s.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(s.healthz_port, Some(10248));
        assert_eq!(s.file_check_frequency, None);
        assert_eq!(s.verbosity, Some(0));
        // What kubeadm sets that the agent does not act on yet; its zero durations ("0s")
        // mean the defaults and are not listed.
        assert!(
            s.unimplemented_fields.is_empty(),
            "{:?}",
            s.unimplemented_fields
        );
        assert!(s.unknown_fields.is_empty());
        assert_eq!(s.cgroup_driver.as_deref(), Some("systemd"));
        assert_eq!(
            s.client_ca_file,
            Some(PathBuf::from("/etc/kubernetes/pki/ca.crt"))
        );
        assert_eq!(s.anonymous_auth, Some(false));
        assert_eq!(s.authentication_token_webhook, Some(true));
        assert_eq!(
            s.authentication_token_webhook_cache_ttl, None,
            "0s = default"
        );
        assert_eq!(s.authorization_mode, Some(AuthorizationMode::Webhook));
        assert_eq!(s.authorization_webhook_cache_authorized_ttl, None);
    }

    /// The shape `kubeadm init` writes to /var/lib/kubelet/config.yaml.
    pub(crate) const KUBEADM_CONFIG: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: \"\"
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
";

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A value for any field: numbers near and past the integer types, durations,
        /// quantities, maps, lists and anything else.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "-?[1-9][0-9]{10,25}",
                "[0-9]{1,40}(\\.[0-9]{0,10})?(ns|us|ms|s|m|h)",
                "[-+0-9.]{1,12}[eEinumkKMGTP]{0,2}[0-9]{0,3}",
                prop::sample::select(vec![
                    "true", "false", "null", "[]", "{}", "[1, a]", "{a: 1}", "\"\"", "~"
                ])
                .prop_map(str::to_string),
                "[a-zA-Z0-9/:._-]{0,20}",
            ]
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            /// Any field with any value is read or refused naming the problem, never a panic.
            #[test]
            fn any_field_values_are_read_or_refused(
                fields in prop::collection::vec((prop::sample::select(schema::FIELDS.to_vec()), value()), 0..6),
                junk in ".{0,30}",
            ) {
                let mut text = String::from("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n");
                for (field, v) in &fields {
                    text.push_str(&format!("{}: {v}\n", field.name));
                }
                if let Err(e) = parse(&text) {
                    prop_assert!(!e.to_string().is_empty());
                }
                let _ = parse(&junk);
                let _ = parse(&format!("{text}{junk}"));
            }
        }
    }
}
