//! Service environment variables, as upstream's kubelet makes them (`getServiceEnvVarMap`
//! and `envvars.FromServices`): for every Service with a cluster IP that the pod sees, the
//! `<NAME>_SERVICE_HOST`/`_SERVICE_PORT` variables and the Docker-link ones
//! (`<NAME>_PORT`, `<NAME>_PORT_<port>_<PROTO>` and its `_PROTO`, `_PORT`, `_ADDR`).
//!
//! The pod sees the master service (`kubernetes` in `default`) always, and the Services of
//! its own namespace when `enableServiceLinks` is true or unset (the API's default).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};

/// The namespace and name of the master service, whose variables every pod gets.
const MASTER_NAMESPACE: &str = "default";
const MASTER_SERVICE: &str = "kubernetes";

/// The pod's `enableServiceLinks` (true when unset, as the API defaults it).
pub fn service_links_enabled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true)
}

/// A Service's cluster IP, when it has one (not headless, not an ExternalName).
fn cluster_ip(s: &Service) -> Option<&str> {
    s.spec
        .as_ref()?
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None")
}

/// The variables of the Services a pod in `namespace` sees, by name.
pub fn service_env(
    services: &[Arc<Service>],
    namespace: &str,
    enable_links: bool,
) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<&str, &Service> = BTreeMap::new();
    for s in services {
        if cluster_ip(s).is_none() {
            continue;
        }
        let name = s.metadata.name.as_deref().unwrap_or_default();
        let ns = s.metadata.namespace.as_deref().unwrap_or_default();
        if ns == MASTER_NAMESPACE && name == MASTER_SERVICE {
            seen.entry(name).or_insert(s);
        } else if ns == namespace && enable_links {
            seen.insert(name, s);
        }
    }
    let mut env = BTreeMap::new();
    for s in seen.values() {
        add_service(&mut env, s);
    }
    env
}

/// Upstream's makeEnvVariableName: upper case, `-` as `_`.
fn var_name(s: &str) -> String {
    s.to_uppercase().replace('-', "_")
}

fn add_service(env: &mut BTreeMap<String, String>, s: &Service) {
    let Some(ip) = cluster_ip(s) else { return };
    let ports = s
        .spec
        .as_ref()
        .and_then(|sp| sp.ports.as_deref())
        .unwrap_or_default();
    // The API requires a port for a Service with a cluster IP; one without is left out
    // rather than given half its variables.
    let Some(first) = ports.first() else { return };
    let prefix = var_name(s.metadata.name.as_deref().unwrap_or_default());
    env.insert(format!("{prefix}_SERVICE_HOST"), ip.to_string());
    env.insert(format!("{prefix}_SERVICE_PORT"), first.port.to_string());
    for p in ports {
        if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
            env.insert(
                format!("{prefix}_SERVICE_PORT_{}", var_name(n)),
                p.port.to_string(),
            );
        }
    }
    // An IPv6 cluster IP goes in brackets, as Go's net.JoinHostPort writes it.
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    for (i, p) in ports.iter().enumerate() {
        let proto = p
            .protocol
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("TCP");
        let url = format!("{}://{host}:{}", proto.to_lowercase(), p.port);
        if i == 0 {
            env.insert(format!("{prefix}_PORT"), url.clone());
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
        env.insert(format!("{port_prefix}_PROTO"), proto.to_lowercase());
        env.insert(format!("{port_prefix}_PORT"), p.port.to_string());
        env.insert(format!("{port_prefix}_ADDR"), ip.to_string());
        env.insert(port_prefix, url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(namespace: &str, name: &str, ip: &str, ports: serde_json::Value) -> Arc<Service> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": namespace, "name": name},
                "spec": {"clusterIP": ip, "ports": ports}
            }))
            .unwrap(),
        )
    }

    fn pairs(env: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn a_service_gives_upstreams_variables() {
        let s = service(
            "ns",
            "my-db",
            "10.0.0.7",
            json!([{"name": "sql", "port": 5432},
                   {"name": "admin-ui", "port": 8080, "protocol": "UDP"}]),
        );
        let env = service_env(&[s], "ns", true);
        assert_eq!(
            pairs(&env),
            [
                ("MY_DB_PORT", "tcp://10.0.0.7:5432"),
                ("MY_DB_PORT_5432_TCP", "tcp://10.0.0.7:5432"),
                ("MY_DB_PORT_5432_TCP_ADDR", "10.0.0.7"),
                ("MY_DB_PORT_5432_TCP_PORT", "5432"),
                ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
                ("MY_DB_PORT_8080_UDP", "udp://10.0.0.7:8080"),
                ("MY_DB_PORT_8080_UDP_ADDR", "10.0.0.7"),
                ("MY_DB_PORT_8080_UDP_PORT", "8080"),
                ("MY_DB_PORT_8080_UDP_PROTO", "udp"),
                ("MY_DB_SERVICE_HOST", "10.0.0.7"),
                ("MY_DB_SERVICE_PORT", "5432"),
                ("MY_DB_SERVICE_PORT_ADMIN_UI", "8080"),
                ("MY_DB_SERVICE_PORT_SQL", "5432"),
            ]
        );
    }

    #[test]
    fn an_ipv6_cluster_ip_is_bracketed_in_urls_only() {
        let s = service("ns", "v6", "fd00::10", json!([{"port": 80}]));
        let env = service_env(&[s], "ns", true);
        assert_eq!(env["V6_PORT"], "tcp://[fd00::10]:80");
        assert_eq!(env["V6_SERVICE_HOST"], "fd00::10");
        assert_eq!(env["V6_PORT_80_TCP_ADDR"], "fd00::10");
    }

    #[test]
    fn the_master_service_always_and_the_namespaces_services_only_with_links() {
        let all = [
            service(
                "default",
                "kubernetes",
                "10.0.0.1",
                json!([{"name": "https", "port": 443}]),
            ),
            service("ns", "web", "10.0.0.9", json!([{"port": 80}])),
            service("other", "elsewhere", "10.0.0.10", json!([{"port": 80}])),
            service("ns", "headless", "None", json!([{"port": 80}])),
            service("ns", "external", "", json!([{"port": 80}])),
        ];
        let with = service_env(&all, "ns", true);
        assert_eq!(with["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(with["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(with["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(with["KUBERNETES_PORT"], "tcp://10.0.0.1:443");
        assert_eq!(with["WEB_SERVICE_HOST"], "10.0.0.9");
        let names: Vec<&String> = with.keys().collect();
        assert!(
            !names.iter().any(|k| k.starts_with("ELSEWHERE_")
                || k.starts_with("HEADLESS_")
                || k.starts_with("EXTERNAL_")),
            "{names:?}"
        );
        let without = service_env(&all, "ns", false);
        assert!(
            without.keys().all(|k| k.starts_with("KUBERNETES_")),
            "{without:?}"
        );
        assert_eq!(without["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        // A pod of the default namespace sees the master service once.
        assert_eq!(
            service_env(&all, "default", false).len(),
            with.iter()
                .filter(|(k, _)| k.starts_with("KUBERNETES_"))
                .count()
        );
    }

    #[test]
    fn the_pods_namespace_may_shadow_the_master_services_name() {
        let all = [
            service("default", "kubernetes", "10.0.0.1", json!([{"port": 443}])),
            service("ns", "kubernetes", "10.0.0.50", json!([{"port": 8443}])),
        ];
        assert_eq!(
            service_env(&all, "ns", true)["KUBERNETES_SERVICE_HOST"],
            "10.0.0.50"
        );
        assert_eq!(
            service_env(&all, "ns", false)["KUBERNETES_SERVICE_HOST"],
            "10.0.0.1"
        );
    }

    #[test]
    fn enable_service_links_defaults_to_true() {
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": []}})).unwrap();
        assert!(service_links_enabled(&pod));
        let pod: Pod = serde_json::from_value(
            json!({"spec": {"containers": [], "enableServiceLinks": false}}),
        )
        .unwrap();
        assert!(!service_links_enabled(&pod));
    }
}
