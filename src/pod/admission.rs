//! Admission of a pod to the node, as upstream's admit handlers: a pod that cannot run
//! here (no room left under maxPods, a hostPort another pod holds) is rejected with
//! phase Failed and a reason, without creating anything, and without disturbing the pods
//! already admitted.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::status::ktime;

/// (protocol, host IP, host port); an empty or 0.0.0.0 host IP means every address.
type HostPort = (String, String, i32);

fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let spec = pod.spec.as_ref();
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let mut out = Vec::new();
    for c in spec.into_iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    }) {
        for p in c.ports.iter().flatten() {
            // With hostNetwork the container port is a host port.
            let port = p
                .host_port
                .filter(|h| *h > 0)
                .or(host_net.then_some(p.container_port));
            if let Some(port) = port {
                let ip = p.host_ip.clone().unwrap_or_default();
                let ip = if ip == "0.0.0.0" { String::new() } else { ip };
                out.push((p.protocol.clone().unwrap_or_else(|| "TCP".into()), ip, port));
            }
        }
    }
    out
}

fn conflicts(a: &HostPort, b: &HostPort) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1.is_empty() || b.1.is_empty() || a.1 == b.1)
}

/// Why a pod is rejected: (reason, message), upstream's wording.
pub fn admit(pod: &Pod, admitted: &[&Pod], max_pods: usize) -> Result<(), (String, String)> {
    if admitted.len() >= max_pods {
        return Err((
            "OutOfpods".into(),
            format!(
                "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: {}, capacity: {max_pods}",
                admitted.len()
            ),
        ));
    }
    let taken: HashSet<HostPort> = admitted.iter().flat_map(|p| host_ports(p)).collect();
    let wanted = host_ports(pod);
    if let Some(clash) = wanted
        .iter()
        .find(|w| taken.iter().any(|t| conflicts(w, t)))
    {
        return Err((
            "NodePorts".into(),
            format!(
                "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports ({} {}{})",
                clash.0,
                if clash.1.is_empty() { String::new() } else { format!("{}:", clash.1) },
                clash.2
            ),
        ));
    }
    Ok(())
}

/// The status of a rejected pod.
pub fn rejected_status(reason: &str, message: &str) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        start_time: Some(ktime(chrono::Utc::now())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(port: serde_json::Value, host_net: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"hostNetwork": host_net, "containers": [{"name": "c", "image": "i", "ports": [port]}]}
        }))
        .unwrap()
    }

    #[test]
    fn host_port_conflicts() {
        let a = pod(
            serde_json::json!({"containerPort": 80, "hostPort": 8080}),
            false,
        );
        let same = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080}),
            false,
        );
        let udp = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080, "protocol": "UDP"}),
            false,
        );
        let other_ip = pod(
            serde_json::json!({"containerPort": 81, "hostPort": 8080, "hostIP": "127.0.0.2"}),
            false,
        );
        let no_host_port = pod(serde_json::json!({"containerPort": 8080}), false);
        let hostnet = pod(serde_json::json!({"containerPort": 8080}), true);
        assert!(admit(&a, &[], 110).is_ok());
        let (reason, msg) = admit(&same, &[&a], 110).unwrap_err();
        assert_eq!(reason, "NodePorts");
        assert!(msg.contains("didn't have free ports"), "{msg}");
        assert!(admit(&udp, &[&a], 110).is_ok());
        // A specific address still clashes with a port taken on every address.
        assert!(admit(&other_ip, &[&a], 110).is_err());
        assert!(admit(&no_host_port, &[&a], 110).is_ok());
        assert!(admit(&hostnet, &[&a], 110).is_err());
    }

    #[test]
    fn max_pods() {
        let a = pod(serde_json::json!({"containerPort": 80}), false);
        let (reason, _) = admit(&a, &[&a, &a], 2).unwrap_err();
        assert_eq!(reason, "OutOfpods");
    }
}
