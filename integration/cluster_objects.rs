//! The objects manager against the real control plane (NodeRestriction and the Node
//! authorizer): pods that reference ConfigMaps and Secrets (envFrom, imagePullSecrets) run,
//! and the agent's watches of exactly those objects are allowed. With a control plane
//! started with `hack/cluster/up.sh --audit`, it also reports the API requests the idle
//! node sends per minute (the apiserver's audit log, as hack/bench/cluster.sh counts them);
//! KRS_OBJECTS_IDLE_SECONDS sets that window (60 s unless set).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::ClusterNode;
use serde_json::Value;

const PODS: usize = 10;

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

/// The audit events of `user` at `stage`, from line `from` of the log on.
fn audit_events(log: &str, from: usize, user: &str, stage: &str) -> Vec<Value> {
    log.lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == stage && e["user"]["username"] == user)
        .collect()
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn pods_referencing_objects_run_and_the_node_may_watch_them() {
    let n = ClusterNode::start("cluster-objects", &[]);
    let node = n.name().to_string();
    let mut manifests = String::new();
    for i in 0..PODS {
        manifests.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}-{node}\n  namespace: default\ndata:\n  K{i}: v{i}\n\
             ---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s-{i}-{node}\n  namespace: default\n\
             type: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{{\"auths\":{{}}}}'\n"
        ));
    }
    n.cluster.apply(&manifests);
    let pods: Vec<String> = (0..PODS)
        .map(|i| {
            // envFrom goes into the container (indent 4), imagePullSecrets into the spec.
            let extra = format!(
                "    envFrom:\n    - configMapRef:\n        name: cm-{i}-{node}\n  imagePullSecrets:\n  - name: s-{i}-{node}\n"
            );
            n.create_pod(&format!("objects-{i}"), "sleep 3600", &extra)
        })
        .collect();
    for p in &pods {
        n.wait_api_pod(p, 180, "Running", is_running);
    }

    let audit = n.cluster.dir.join("logs/audit.log");
    if !audit.exists() {
        eprintln!(
            "no audit log at {}: the watches and the idle figure need a control plane started with --audit",
            audit.display()
        );
        return;
    }
    let user = format!("system:node:{node}");
    // Every referenced object is listed and watched by name, and the Node authorizer allows it.
    let wanted: Vec<(String, String)> = (0..PODS)
        .flat_map(|i| {
            [
                ("configmaps".to_string(), format!("cm-{i}-{node}")),
                ("secrets".to_string(), format!("s-{i}-{node}")),
            ]
        })
        .collect();
    n.wait_api(60, "a watch of every referenced object", |_| {
        let log = std::fs::read_to_string(&audit).unwrap_or_default();
        // The policy logs a watch when it arrives and when it ends: a refused one ends at
        // once, with its code (checked below).
        let received = audit_events(&log, 0, &user, "RequestReceived");
        wanted.iter().all(|(resource, name)| {
            let selector = format!("fieldSelector=metadata.name%3D{name}");
            received.iter().any(|e| {
                e["verb"] == "watch"
                    && e["objectRef"]["resource"] == resource.as_str()
                    && e["objectRef"]["namespace"] == "default"
                    && e["requestURI"]
                        .as_str()
                        .is_some_and(|u| u.contains(&selector))
            })
        })
    });
    let log = std::fs::read_to_string(&audit).unwrap();
    let refused: Vec<String> = audit_events(&log, 0, &user, "ResponseComplete")
        .into_iter()
        .filter(|e| {
            matches!(
                e["objectRef"]["resource"].as_str(),
                Some("configmaps" | "secrets")
            ) && e["responseStatus"]["code"] != 200
        })
        .map(|e| {
            format!(
                "{} {} -> {}",
                e["verb"], e["requestURI"], e["responseStatus"]["code"]
            )
        })
        .collect();
    assert!(
        refused.is_empty(),
        "requests for objects refused: {refused:#?}"
    );

    // The idle figure: requests the node sends per minute with its pods Running.
    let idle: u64 = std::env::var("KRS_OBJECTS_IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    std::thread::sleep(Duration::from_secs(30));
    let start = std::fs::read_to_string(&audit).unwrap().lines().count();
    std::thread::sleep(Duration::from_secs(idle));
    let log = std::fs::read_to_string(&audit).unwrap();
    let events = audit_events(&log, start, &user, "RequestReceived");
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        let key = format!(
            "{} {}{}",
            e["verb"].as_str().unwrap_or("?"),
            e["objectRef"]["resource"].as_str().unwrap_or("?"),
            e["objectRef"]["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default()
        );
        *by_kind.entry(key).or_default() += 1;
    }
    eprintln!(
        "idle node with {PODS} pods (each referencing a ConfigMap and a Secret): {} requests in {idle} s = {:.1}/min; by verb and resource: {by_kind:#?}",
        events.len(),
        events.len() as f64 * 60.0 / idle as f64
    );
    let reads = events
        .iter()
        .filter(|e| {
            e["verb"] == "get"
                && matches!(
                    e["objectRef"]["resource"].as_str(),
                    Some("configmaps" | "secrets")
                )
        })
        .count();
    assert_eq!(reads, 0, "an idle node reads no object: {by_kind:#?}");
}
