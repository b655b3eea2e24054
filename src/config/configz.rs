//! `/configz`: the effective configuration as upstream's kubelet shows it,
//! `{"kubeletconfig": {...}}` with KubeletConfiguration v1beta1 field names, for the fields
//! this agent has. Empty optional fields are left out, as Go's `omitempty` does.

use serde_json::{json, Map, Value};

use super::{format_duration, Config};

fn quantity(bytes: u64) -> String {
    for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// The configz document for `config`.
pub fn configz_json(config: &Config) -> Value {
    let mut c = Map::new();
    let mut put = |key: &str, value: Value| {
        c.insert(key.to_string(), value);
    };
    put("enableServer", json!(config.enable_server));
    if let Some(p) = &config.static_pod_path {
        put("staticPodPath", json!(p.display().to_string()));
    }
    put(
        "podLogsDir",
        json!(config.pod_logs_dir.display().to_string()),
    );
    put(
        "syncFrequency",
        json!(format_duration(config.sync_frequency)),
    );
    put(
        "fileCheckFrequency",
        json!(format_duration(config.file_check_frequency)),
    );
    put(
        "httpCheckFrequency",
        json!(format_duration(config.http_check_frequency)),
    );
    if let Some(url) = &config.static_pod_url {
        put("staticPodURL", json!(url));
    }
    if !config.static_pod_url_header.is_empty() {
        put("staticPodURLHeader", json!(config.static_pod_url_header));
    }
    put("address", json!(config.address.to_string()));
    put("port", json!(config.port));
    put("readOnlyPort", json!(config.read_only_port));
    // Upstream fills these in with the self-signed pair's paths when none were given.
    let (cert, key) = match (&config.tls_cert_file, &config.tls_private_key_file) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => (
            config.cert_dir.join("kubelet.crt"),
            config.cert_dir.join("kubelet.key"),
        ),
    };
    put("tlsCertFile", json!(cert.display().to_string()));
    put("tlsPrivateKeyFile", json!(key.display().to_string()));
    if !config.allowed_unsafe_sysctls.is_empty() {
        put("allowedUnsafeSysctls", json!(config.allowed_unsafe_sysctls));
    }
    if !config.tls_cipher_suites.is_empty() {
        put("tlsCipherSuites", json!(config.tls_cipher_suites));
    }
    if let Some(v) = &config.tls_min_version {
        put("tlsMinVersion", json!(v));
    }
    // omitempty bools upstream: shown only when on.
    if config.rotate_certificates {
        put("rotateCertificates", json!(true));
    }
    if config.server_tls_bootstrap {
        put("serverTLSBootstrap", json!(true));
    }
    let mut x509 = Map::new();
    if let Some(ca) = &config.client_ca_file {
        x509.insert("clientCAFile".into(), json!(ca.display().to_string()));
    }
    put(
        "authentication",
        json!({
            "x509": x509,
            "webhook": {
                "enabled": config.authentication_token_webhook,
                "cacheTTL": format_duration(config.authentication_token_webhook_cache_ttl),
            },
            "anonymous": {"enabled": config.anonymous_auth},
        }),
    );
    put(
        "authorization",
        json!({
            "mode": config.authorization_mode.as_str(),
            "webhook": {
                "cacheAuthorizedTTL": format_duration(config.authorization_webhook_cache_authorized_ttl),
                "cacheUnauthorizedTTL": format_duration(config.authorization_webhook_cache_unauthorized_ttl),
            },
        }),
    );
    put("healthzPort", json!(config.healthz_port));
    put(
        "healthzBindAddress",
        json!(config.healthz_bind_address.to_string()),
    );
    put("maxPods", json!(config.max_pods));
    put(
        "containerLogMaxSize",
        json!(quantity(config.container_log_max_size)),
    );
    put(
        "containerLogMaxFiles",
        json!(config.container_log_max_files),
    );
    put(
        "containerRuntimeEndpoint",
        json!(format!(
            "unix://{}",
            config.container_runtime_endpoint.display()
        )),
    );
    put(
        "logging",
        json!({"format": config.logging_format, "verbosity": config.verbosity}),
    );
    put(
        "imageMinimumGCAge",
        json!(format_duration(config.image_minimum_gc_age)),
    );
    put(
        "imageMaximumGCAge",
        json!(format_duration(config.image_maximum_gc_age)),
    );
    put(
        "imageGCHighThresholdPercent",
        json!(config.image_gc_high_threshold_percent),
    );
    put(
        "imageGCLowThresholdPercent",
        json!(config.image_gc_low_threshold_percent),
    );
    put("serializeImagePulls", json!(config.serialize_image_pulls));
    put("seccompDefault", json!(config.seccomp_default));
    put(
        "enableDebuggingHandlers",
        json!(config.enable_debugging_handlers),
    );
    put(
        "enableSystemLogHandler",
        json!(config.enable_system_log_handler),
    );
    if config.enable_system_log_query {
        put("enableSystemLogQuery", json!(true));
    }
    if !config.feature_gates.explicit().is_empty() {
        put("featureGates", json!(config.feature_gates.explicit()));
    }
    if let Some(n) = config.max_parallel_image_pulls {
        put("maxParallelImagePulls", json!(n));
    }
    put(
        "nodeStatusUpdateFrequency",
        json!(format_duration(config.node_status_update_frequency)),
    );
    put(
        "nodeStatusReportFrequency",
        json!(format_duration(config.node_status_report_frequency)),
    );
    put(
        "nodeLeaseDurationSeconds",
        json!(config.node_lease_duration_seconds),
    );
    put("registerNode", json!(config.register_node));
    put("failSwapOn", json!(config.fail_swap_on));
    put(
        "memorySwap",
        json!({"swapBehavior": config.swap_behavior.as_str()}),
    );
    put(
        "localStorageCapacityIsolation",
        json!(config.local_storage_capacity_isolation),
    );
    put(
        "volumeStatsAggPeriod",
        json!(format_duration(config.volume_stats_agg_period)),
    );
    if !config.register_with_taints.is_empty() {
        put("registerWithTaints", json!(config.register_with_taints));
    }
    for (key, list) in [
        ("kubeReserved", &config.kube_reserved),
        ("systemReserved", &config.system_reserved),
    ] {
        if !list.is_empty() {
            let map: Map<String, Value> = list
                .iter()
                .map(|(k, q)| (k.clone(), json!(q.to_string())))
                .collect();
            put(key, Value::Object(map));
        }
    }
    let eviction: Map<String, Value> = config
        .eviction_hard
        .iter()
        .map(|(k, v)| (k.clone(), json!(v.to_string())))
        .collect();
    put("evictionHard", Value::Object(eviction));
    for (key, list) in [
        ("evictionSoft", &config.eviction_soft),
        ("evictionMinimumReclaim", &config.eviction_minimum_reclaim),
    ] {
        if !list.is_empty() {
            let map: Map<String, Value> = list
                .iter()
                .map(|(k, v)| (k.clone(), json!(v.to_string())))
                .collect();
            put(key, Value::Object(map));
        }
    }
    if !config.eviction_soft_grace_period.is_empty() {
        let map: Map<String, Value> = config
            .eviction_soft_grace_period
            .iter()
            .map(|(k, d)| (k.clone(), json!(super::format_duration(*d))))
            .collect();
        put("evictionSoftGracePeriod", Value::Object(map));
    }
    put(
        "evictionPressureTransitionPeriod",
        json!(super::format_duration(
            config.eviction_pressure_transition_period
        )),
    );
    put(
        "evictionMaxPodGracePeriod",
        json!(config.eviction_max_pod_grace_period),
    );
    if !config.cluster_dns.is_empty() {
        let servers: Vec<String> = config.cluster_dns.iter().map(|ip| ip.to_string()).collect();
        put("clusterDNS", json!(servers));
    }
    if !config.cluster_domain.is_empty() {
        put("clusterDomain", json!(config.cluster_domain));
    }
    put(
        "resolvConf",
        json!(config
            .resolv_conf
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string())),
    );
    put("cgroupsPerQOS", json!(config.cgroups_per_qos));
    put("cgroupDriver", json!(config.cgroup_driver.as_str()));
    // Shown even as "/": the agent always has a root (upstream's "" means the same), and
    // the node e2e runner sets "/" and reads it back from here.
    if !config.cgroup_root.is_empty() {
        put("cgroupRoot", json!(config.cgroup_root));
    }
    put(
        "enforceNodeAllocatable",
        json!(config.enforce_node_allocatable),
    );
    put("podPidsLimit", json!(config.pod_pids_limit));
    if !config.kube_reserved_cgroup.is_empty() {
        put("kubeReservedCgroup", json!(config.kube_reserved_cgroup));
    }
    if !config.system_reserved_cgroup.is_empty() {
        put("systemReservedCgroup", json!(config.system_reserved_cgroup));
    }
    // The fields the agent does not act on yet: what the files set, else upstream's
    // default, so a client reading them sees what upstream's kubelet would show.
    for (key, value) in super::schema::configz_defaults() {
        c.entry(key).or_insert(value);
    }
    for (key, value) in &config.unimplemented_config_values {
        c.insert(key.clone(), value.clone());
    }
    json!({ "kubeletconfig": c })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_v1beta1_names_and_go_formats() {
        let mut config = Config::defaults(true);
        config.node_name = "n".into();
        config.client_ca_file = Some("/ca.crt".into());
        let v = configz_json(&config);
        let k = &v["kubeletconfig"];
        assert_eq!(k["port"], 10250);
        assert_eq!(k["readOnlyPort"], 0);
        assert_eq!(k["syncFrequency"], "1m0s");
        assert_eq!(k["containerLogMaxSize"], "10Mi");
        assert_eq!(k["authentication"]["x509"]["clientCAFile"], "/ca.crt");
        assert_eq!(k["authentication"]["webhook"]["enabled"], true);
        assert_eq!(k["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(k["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(k["authorization"]["mode"], "Webhook");
        assert_eq!(k["authorization"]["webhook"]["cacheUnauthorizedTTL"], "30s");
        assert_eq!(k["tlsCertFile"], "/var/lib/kubelet-rs/pki/kubelet.crt");
        assert!(k.get("staticPodPath").is_none(), "omitempty");
        assert_eq!(k["imageMinimumGCAge"], "2m0s");
        assert_eq!(k["imageGCHighThresholdPercent"], 85);
        assert_eq!(k["imageGCLowThresholdPercent"], 80);
        assert_eq!(k["serializeImagePulls"], true);
        assert!(k.get("maxParallelImagePulls").is_none(), "nil upstream");
        assert_eq!(k["nodeStatusUpdateFrequency"], "10s");
        assert_eq!(k["nodeStatusReportFrequency"], "5m0s");
        assert_eq!(k["nodeLeaseDurationSeconds"], 40);
        assert_eq!(k["registerNode"], true);
        assert_eq!(k["evictionHard"]["memory.available"], "104857600");
        assert_eq!(k["evictionHard"]["nodefs.available"], "10%");
        assert!(k.get("kubeReserved").is_none(), "omitempty");
        assert_eq!(
            k["containerRuntimeEndpoint"],
            "unix:///run/containerd/containerd.sock"
        );
    }
}
