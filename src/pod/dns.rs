//! The pod's resolver configuration as upstream's DNS configurer builds it
//! (pkg/kubelet/network/dns): the cluster's DNS servers and search path for dnsPolicy
//! ClusterFirst (ClusterFirstWithHostNet on the host network), the node's resolv.conf for
//! Default (and for ClusterFirst on the host network, or without cluster DNS), nothing for
//! None; then the pod's dnsConfig appended, and the result trimmed to the resolver's limits.

use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfigOption};

use crate::config::Config;

/// Upstream's validation limits (MaxDNSNameservers, MaxDNSSearchPaths,
/// MaxDNSSearchListChars).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
/// The options a pod on the cluster's DNS gets (upstream's defaultDNSOptions).
const CLUSTER_OPTIONS: &[&str] = &["ndots:5"];

/// What the node's configuration says about pod DNS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsSettings {
    /// --cluster-dns / clusterDNS.
    pub cluster_dns: Vec<IpAddr>,
    /// --cluster-domain / clusterDomain ("" for none).
    pub cluster_domain: String,
    /// --resolv-conf / resolvConf: the host's resolver file (None: the empty string, no
    /// host DNS).
    pub resolv_conf: Option<PathBuf>,
}

impl DnsSettings {
    pub fn from_config(cfg: &Config) -> DnsSettings {
        DnsSettings {
            cluster_dns: cfg.cluster_dns.clone(),
            cluster_domain: cfg.cluster_domain.clone(),
            resolv_conf: cfg.resolv_conf.clone(),
        }
    }
}

/// A resolver configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDns {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
    /// The pod asked for the cluster's DNS, which the node has none of: it got the host's
    /// (upstream records a MissingClusterDNS event).
    pub missing_cluster_dns: bool,
}

impl PodDns {
    /// The file's text, in the order containerd's CRI plugin writes it.
    pub fn resolv_conf(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for n in &self.nameservers {
            out.push_str(&format!("nameserver {n}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

/// The host resolver file's nameservers, search path and options (upstream's
/// parseResolvConf: the last `search` line wins, trailing dots dropped).
fn parse_host(text: &str) -> PodDns {
    let mut dns = PodDns::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => dns.nameservers.extend(fields.next().map(str::to_string)),
            Some("search") => {
                dns.searches = fields
                    .map(|s| {
                        if s == "." {
                            s.to_string()
                        } else {
                            s.trim_end_matches('.').to_string()
                        }
                    })
                    .collect()
            }
            Some("options") => dns.options.extend(fields.map(str::to_string)),
            _ => {}
        }
    }
    dns
}

fn push_unique(into: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for item in items {
        if !into.contains(&item) {
            into.push(item);
        }
    }
}

/// The pod's options over the base ones, by name (upstream's mergeDNSOptions).
fn merge_options(base: &[String], pod: &[PodDNSConfigOption]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for o in base {
        let (name, value) = o.split_once(':').unwrap_or((o, ""));
        set(name, value);
    }
    for o in pod {
        if let Some(name) = o.name.as_deref() {
            set(name, o.value.as_deref().unwrap_or_default());
        }
    }
    merged
        .into_iter()
        .map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") })
        .collect()
}

/// The search path cut to the resolver's limits: at most 32 domains and 2048 characters
/// (upstream's formDNSSearchFitsLimits).
fn fit_searches(searches: &mut Vec<String>) {
    searches.truncate(MAX_SEARCHES);
    while !searches.is_empty() && searches.join(" ").len() > MAX_SEARCH_CHARS {
        searches.pop();
    }
}

/// The pod's resolver configuration; `host` is the text of the host's resolver file (as
/// `settings.resolv_conf` names it).
pub fn pod_dns(pod: &Pod, settings: &DnsSettings, host: &str) -> PodDns {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let mut cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let mut missing_cluster_dns = false;
    if cluster && settings.cluster_dns.is_empty() {
        cluster = false;
        missing_cluster_dns = true;
    }
    let host_dns = || match settings.resolv_conf {
        Some(_) => parse_host(host),
        None => PodDns::default(),
    };
    let mut dns = if policy == "None" {
        PodDns::default()
    } else if cluster {
        let host = host_dns();
        let mut searches = Vec::new();
        if !settings.cluster_domain.is_empty() {
            let domain = &settings.cluster_domain;
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            searches = vec![
                format!("{namespace}.svc.{domain}"),
                format!("svc.{domain}"),
                domain.clone(),
            ];
        }
        push_unique(&mut searches, host.searches);
        PodDns {
            nameservers: settings
                .cluster_dns
                .iter()
                .map(|ip| ip.to_string())
                .collect(),
            searches,
            options: CLUSTER_OPTIONS.iter().map(|s| s.to_string()).collect(),
            missing_cluster_dns: false,
        }
    } else if settings.resolv_conf.is_none() {
        // No host resolver: upstream points the pod at the local machine's (which is
        // what a resolver does without nameservers) and searches nothing.
        PodDns {
            nameservers: vec!["127.0.0.1".to_string()],
            searches: vec![".".to_string()],
            ..PodDns::default()
        }
    } else {
        host_dns()
    };
    dns.missing_cluster_dns = missing_cluster_dns;
    if let Some(cfg) = spec.and_then(|s| s.dns_config.as_ref()) {
        let mut nameservers = std::mem::take(&mut dns.nameservers);
        push_unique(
            &mut nameservers,
            cfg.nameservers.clone().unwrap_or_default(),
        );
        dns.nameservers = nameservers;
        let mut searches = std::mem::take(&mut dns.searches);
        push_unique(&mut searches, cfg.searches.clone().unwrap_or_default());
        dns.searches = searches;
        dns.options = merge_options(&dns.options, cfg.options.as_deref().unwrap_or_default());
    }
    dns.nameservers.truncate(MAX_NAMESERVERS);
    fit_searches(&mut dns.searches);
    dns
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "# generated\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n\
                        search example.com. corp.example.com\noptions timeout:2 rotate\n";

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "team"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn cluster() -> DnsSettings {
        DnsSettings {
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: Some("/etc/resolv.conf".into()),
        }
    }

    #[test]
    fn cluster_first_searches_the_namespace_then_the_host() {
        let dns = pod_dns(&pod(serde_json::json!({})), &cluster(), HOST);
        assert_eq!(
            dns.resolv_conf(),
            "search team.svc.cluster.local svc.cluster.local cluster.local example.com corp.example.com\n\
             nameserver 10.96.0.10\noptions ndots:5\n"
        );
        assert!(!dns.missing_cluster_dns);
    }

    #[test]
    fn the_host_network_and_default_take_the_hosts_resolver() {
        let host_net = pod(serde_json::json!({"hostNetwork": true}));
        let default = pod(serde_json::json!({"dnsPolicy": "Default"}));
        for p in [&host_net, &default] {
            assert_eq!(
                pod_dns(p, &cluster(), HOST).resolv_conf(),
                "search example.com corp.example.com\nnameserver 192.0.2.53\n\
                 nameserver 192.0.2.54\noptions timeout:2 rotate\n"
            );
        }
        let with_host_net = pod(serde_json::json!(
            {"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}
        ));
        assert_eq!(
            pod_dns(&with_host_net, &cluster(), HOST).nameservers,
            ["10.96.0.10"]
        );
    }

    #[test]
    fn cluster_first_without_cluster_dns_falls_back_to_the_host_and_says_so() {
        let settings = DnsSettings {
            cluster_dns: vec![],
            ..cluster()
        };
        let dns = pod_dns(&pod(serde_json::json!({})), &settings, HOST);
        assert!(dns.missing_cluster_dns);
        assert_eq!(dns.nameservers, ["192.0.2.53", "192.0.2.54"]);
    }

    #[test]
    fn dns_config_is_appended_and_its_options_win_by_name() {
        let p = pod(serde_json::json!({"dnsConfig": {
            "nameservers": ["10.96.0.10", "1.1.1.1", "8.8.8.8"],
            "searches": ["extra.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        }}));
        let dns = pod_dns(&p, &cluster(), HOST);
        assert_eq!(dns.nameservers, ["10.96.0.10", "1.1.1.1", "8.8.8.8"]);
        assert_eq!(
            dns.searches.last().map(String::as_str),
            Some("extra.example")
        );
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
        let none = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.2.3.4"], "searches": ["a.b"], "options": [{"name": "ndots", "value": "2"}]}}));
        assert_eq!(
            pod_dns(&none, &cluster(), HOST).resolv_conf(),
            "search a.b\nnameserver 1.2.3.4\noptions ndots:2\n"
        );
    }

    #[test]
    fn no_host_resolver_means_the_local_one() {
        let settings = DnsSettings {
            resolv_conf: None,
            ..cluster()
        };
        let dns = pod_dns(
            &pod(serde_json::json!({"dnsPolicy": "Default"})),
            &settings,
            HOST,
        );
        assert_eq!(dns.resolv_conf(), "search .\nnameserver 127.0.0.1\n");
    }

    #[test]
    fn the_search_path_is_cut_to_the_resolvers_limits() {
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {"searches": many}}));
        assert_eq!(pod_dns(&p, &cluster(), HOST).searches.len(), 32);
        let long: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(250))).collect();
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {"searches": long}}));
        let s = pod_dns(&p, &cluster(), HOST).searches;
        assert!(s.join(" ").len() <= 2048 && s.len() == 8, "{}", s.len());
    }
}
