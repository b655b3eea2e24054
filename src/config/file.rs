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
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::duration::parse_duration;
use super::error::ConfigError;
use super::node::{self, EvictionThresholds};
use super::schema;
use super::settings::DeclaredFile;
use crate::vocabulary::quantity::Quantity;
use k8s_openapi::api::core::v1::Taint;

pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub(crate) const KIND: &str = "KubeletConfiguration";

/// What the file sets. `None` means "not set, or set to its zero value": the default applies.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct FileSettings {
    /// The settings declared in `settings.rs`, each read by its declaration.
    pub declared: DeclaredFile,
    pub static_pod_url_header: Option<BTreeMap<String, Vec<String>>>,
    /// Raw endpoint as written; mod.rs turns it into a socket path.
    pub container_runtime_endpoint: Option<String>,
    pub verbosity: Option<u8>,
    /// Known upstream fields (dotted paths) set to a non-default value that the agent does
    /// not act on yet.
    pub unimplemented_fields: Vec<String>,
    /// Their top-level values as written, for /configz.
    pub unimplemented_values: Map<String, Value>,
    /// Fields upstream does not have (dotted paths); dropped, as upstream's lenient decoding.
    pub unknown_fields: Vec<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// Pointers upstream: an explicit false (or 0) is kept, and 0 fails validation.
    pub serialize_image_pulls: Option<bool>,
    pub max_parallel_image_pulls: Option<i32>,
    pub kube_reserved: Option<BTreeMap<String, Quantity>>,
    pub system_reserved: Option<BTreeMap<String, Quantity>>,
    pub eviction_hard: Option<EvictionThresholds>,
    pub eviction_soft: Option<EvictionThresholds>,
    pub eviction_soft_grace_period: Option<BTreeMap<String, Duration>>,
    pub eviction_minimum_reclaim: Option<EvictionThresholds>,
    pub cluster_dns: Option<Vec<IpAddr>>,
    /// Checked where it is applied (mod.rs), so the error names the setting.
    pub cgroup_driver: Option<String>,
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
        declared: DeclaredFile::read(&reader)?,
        static_pod_url_header: reader.header_map("staticPodURLHeader")?,
        container_runtime_endpoint: reader.string("containerRuntimeEndpoint")?,
        verbosity: None,
        unimplemented_fields: survey.unimplemented,
        unimplemented_values: survey.values,
        unknown_fields: survey.unknown,
        feature_gates: reader.bool_map("featureGates")?,
        serialize_image_pulls: reader.boolean("serializeImagePulls")?,
        max_parallel_image_pulls: reader.int32("maxParallelImagePulls")?,
        kube_reserved: reader.resource_list("kubeReserved")?,
        system_reserved: reader.resource_list("systemReserved")?,
        eviction_hard: reader.eviction_thresholds("evictionHard")?,
        eviction_soft: reader.eviction_thresholds("evictionSoft")?,
        eviction_soft_grace_period: reader.grace_periods("evictionSoftGracePeriod")?,
        eviction_minimum_reclaim: reader.eviction_thresholds("evictionMinimumReclaim")?,
        cluster_dns: reader.ip_list("clusterDNS")?,
        cgroup_driver: reader.string("cgroupDriver")?.filter(|s| !s.is_empty()),
    };
    if let Some(logging) = reader.block("logging")? {
        settings.verbosity = logging.int_in("verbosity", 0, 255)?.map(|n| n as u8);
    }
    Ok(settings)
}

#[derive(Clone)]
pub(crate) struct FieldReader<'a> {
    path: &'a Path,
    obj: &'a Map<String, Value>,
    /// Dotted path of this block for messages ("authentication.webhook."), empty at the top.
    prefix: String,
}

impl<'a> FieldReader<'a> {
    /// Reads the field at a dotted path (`authentication.webhook.cacheTTL`) with `read`; a
    /// missing block on the way is a missing field.
    pub(crate) fn read_at<T>(
        &self,
        path: &str,
        read: impl Fn(&FieldReader<'a>, &str) -> Result<Option<T>, ConfigError>,
    ) -> Result<Option<T>, ConfigError> {
        let mut blocks: Vec<&str> = path.split('.').collect();
        let field = blocks.pop().unwrap_or(path);
        let mut current = self.clone();
        for block in blocks {
            match current.block(block)? {
                Some(inner) => current = inner,
                None => return Ok(None),
            }
        }
        read(&current, field)
    }

    pub(crate) fn bad(&self, field: &str, value: &Value, reason: impl ToString) -> ConfigError {
        ConfigError::InvalidFileField {
            path: self.path.to_path_buf(),
            field: format!("{}{field}", self.prefix),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    /// A nested mapping; keys it does not know were reported by `schema::survey`.
    pub(crate) fn block(&self, field: &str) -> Result<Option<FieldReader<'a>>, ConfigError> {
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

    pub(crate) fn boolean(&self, field: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(field, other, "expected true or false")),
        }
    }

    pub(crate) fn string_list(&self, field: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        serde_json::from_value::<Vec<String>>(value.clone())
            .map(|v| Some(v).filter(|v| !v.is_empty()))
            .map_err(|_| self.bad(field, value, "expected a list of strings"))
    }

    pub(crate) fn get(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    /// A string field; an empty string counts as unset, as upstream's defaulting treats it.
    pub(crate) fn string(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.bad(field, other, "expected a string")),
        }
    }

    pub(crate) fn int_in(
        &self,
        field: &str,
        min: i64,
        max: i64,
    ) -> Result<Option<i64>, ConfigError> {
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

    pub(crate) fn int32(&self, field: &str) -> Result<Option<i32>, ConfigError> {
        Ok(self
            .int_in(field, i32::MIN as i64, i32::MAX as i64)?
            .map(|n| n as i32))
    }

    pub(crate) fn duration(&self, field: &str) -> Result<Option<Duration>, ConfigError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        let d = parse_duration(&text)
            .map_err(|reason| self.bad(field, &Value::String(text.clone()), reason))?;
        Ok(Some(d).filter(|d| !d.is_zero()))
    }

    pub(crate) fn quantity(&self, field: &str) -> Result<Option<u64>, ConfigError> {
        let Some(text) = self.string(field)? else {
            return Ok(None);
        };
        crate::vocabulary::quantity::size_bytes(&text)
            .map(Some)
            .map_err(|e| self.bad(field, &Value::String(text.clone()), e.to_string()))
    }

    pub(crate) fn ip(&self, field: &str) -> Result<Option<IpAddr>, ConfigError> {
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
    pub(crate) fn taints(&self, field: &str) -> Result<Option<Vec<Taint>>, ConfigError> {
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
    use crate::config::AuthorizationMode;
    use std::path::PathBuf;

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
            s.declared.static_pod_path,
            Some(Some(PathBuf::from("/etc/kubernetes/manifests")))
        );
        assert_eq!(
            s.declared.static_pod_url,
            Some(Some("http://127.0.0.1/pods".to_string()))
        );
        assert_eq!(
            s.static_pod_url_header.unwrap()["X-A"],
            vec!["one".to_string(), "two".to_string()]
        );
        assert_eq!(
            s.declared.file_check_frequency,
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            s.declared.http_check_frequency,
            Some(Duration::from_secs(90))
        );
        assert_eq!(s.declared.sync_frequency, Some(Duration::from_secs(120)));
        assert_eq!(s.declared.max_pods, Some(30));
        assert_eq!(s.declared.read_only_port, Some(10255));
        assert_eq!(s.declared.healthz_port, Some(0));
        assert_eq!(
            s.declared.healthz_bind_address,
            Some("0.0.0.0".parse().unwrap())
        );
        assert_eq!(s.declared.container_log_max_size, Some(20 << 20));
        assert_eq!(s.declared.container_log_max_files, Some(3));
        assert_eq!(s.declared.pod_logs_dir, Some(PathBuf::from("/logs")));
        assert_eq!(
            s.container_runtime_endpoint.as_deref(),
            Some("unix:///run/c.sock")
        );
        assert_eq!(s.declared.address, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(s.declared.port, Some(11250));
        assert_eq!(s.declared.logging_format.as_deref(), Some("json"));
        assert_eq!(s.verbosity, Some(4));
        assert!(s.unimplemented_fields.is_empty());
        assert!(s.unknown_fields.is_empty());
    }

    #[test]
    fn reads_json() {
        let s = parse(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":7}"#)
            .unwrap();
        assert_eq!(s.declared.max_pods, Some(7));
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
        assert_eq!(s.declared.max_pods, Some(4));
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
            s.declared.static_pod_path,
            Some(Some(PathBuf::from("/etc/kubernetes/manifests")))
        );
        assert_eq!(s.declared.healthz_port, Some(10248));
        assert_eq!(s.declared.file_check_frequency, None);
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
            s.declared.client_ca_file,
            Some(Some(PathBuf::from("/etc/kubernetes/pki/ca.crt")))
        );
        assert_eq!(s.declared.anonymous_auth, Some(false));
        assert_eq!(s.declared.authentication_token_webhook, Some(true));
        assert_eq!(
            s.declared.authentication_token_webhook_cache_ttl, None,
            "0s = default"
        );
        assert_eq!(
            s.declared.authorization_mode,
            Some(AuthorizationMode::Webhook)
        );
        assert_eq!(s.declared.authorization_webhook_cache_authorized_ttl, None);
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
