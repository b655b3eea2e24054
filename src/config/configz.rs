//! `/configz`: the effective configuration as upstream's kubelet shows it,
//! `{"kubeletconfig": {...}}` with KubeletConfiguration v1beta1 field names, for the fields
//! this agent has. Empty optional fields are left out, as Go's `omitempty` does.

use serde_json::{json, Map, Value};

use super::Config;

/// The configz document for `config`.
pub fn configz_json(config: &Config) -> Value {
    let mut c = Map::new();
    config.declared_configz(&mut c);
    let mut put = |key: &str, value: Value| {
        c.insert(key.to_string(), value);
    };
    if !config.static_pod_url_header.is_empty() {
        put("staticPodURLHeader", json!(config.static_pod_url_header));
    }
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
    put(
        "containerRuntimeEndpoint",
        json!(format!(
            "unix://{}",
            config.container_runtime_endpoint.display()
        )),
    );
    put("serializeImagePulls", json!(config.serialize_image_pulls));
    if !config.feature_gates.explicit().is_empty() {
        put("featureGates", json!(config.feature_gates.explicit()));
    }
    if let Some(n) = config.max_parallel_image_pulls {
        put("maxParallelImagePulls", json!(n));
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
    if !config.cluster_dns.is_empty() {
        let servers: Vec<String> = config.cluster_dns.iter().map(|ip| ip.to_string()).collect();
        put("clusterDNS", json!(servers));
    }
    put("cgroupDriver", json!(config.cgroup_driver.as_str()));
    // The x509 block is there even empty, as upstream shows it; the verbosity sits next to
    // the declared logging.format.
    if let Some(Value::Object(authentication)) = c.get_mut("authentication") {
        authentication.entry("x509").or_insert_with(|| json!({}));
    }
    super::declare::insert_at(&mut c, "logging.verbosity", json!(config.verbosity));
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
