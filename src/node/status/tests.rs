use super::*;
use crate::node::machine::{Machine, Readings, SystemInfo};
use k8s_openapi::api::core::v1::NodeCondition;

pub(crate) fn config() -> Config {
    let mut cfg = Config::defaults(true);
    cfg.node_name = "krs-node".into();
    cfg
}

pub(crate) fn observed() -> Observed {
    Observed {
        host: HostFacts {
            machine: Machine {
                cpu_cores: 2,
                memory_bytes: 4 << 30,
                ephemeral_storage_bytes: Some(100 << 30),
                hugepages: vec![],
            },
            readings: Readings {
                max_pid: Some(32768),
            },
            system: SystemInfo {
                machine_id: "m1".into(),
                system_uuid: "u1".into(),
                boot_id: "b1".into(),
                kernel_version: "6.1.0".into(),
                os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            },
            default_ip: Some("10.0.0.7".parse().unwrap()),
            interface_ips: vec!["10.0.0.7".parse().unwrap(), "10.0.1.1".parse().unwrap()],
        },
        runtime: Ok("v1.7.24".into()),
        network: Ok(()),
        images: Some(vec![ContainerImage {
            names: Some(vec!["registry.k8s.io/pause:3.10".into()]),
            size_bytes: Some(320_000),
        }]),
        pressure: Default::default(),
        runtime_handlers: vec!["".into(), "runc".into()],
        volumes_in_use: vec![],
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn condition<'a>(node: &'a Node, kind: &str) -> &'a NodeCondition {
    node.status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap()
}

#[test]
fn initial_node_has_upstreams_labels_taints_and_annotation() {
    let mut cfg = config();
    cfg.node_labels = BTreeMap::from([
        ("role".to_string(), "db".to_string()),
        (LABEL_HOSTNAME.to_string(), "override".to_string()),
    ]);
    cfg.register_with_taints = crate::config::node::parse_taints("gpu=yes:NoSchedule").unwrap();
    let node = initial_node(&cfg);
    let labels = node.metadata.labels.as_ref().unwrap();
    assert_eq!(node.metadata.name.as_deref(), Some("krs-node"));
    assert_eq!(labels[LABEL_OS], "linux");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert_eq!(labels[LABEL_ARCH], go_arch());
    assert_eq!(labels["beta.kubernetes.io/arch"], go_arch());
    assert_eq!(labels["role"], "db");
    assert_eq!(
        labels[LABEL_HOSTNAME], "override",
        "--node-labels win, as upstream"
    );
    assert_eq!(
        node.metadata.annotations.as_ref().unwrap()[ANNOTATION_CMAD],
        "true"
    );
    let taints = node.spec.as_ref().unwrap().taints.as_ref().unwrap();
    assert_eq!(taints[0].key, "gpu");
    assert_eq!(taints[0].effect, "NoSchedule");
    assert!(initial_node(&config()).spec.unwrap().taints.is_none());
}

#[test]
fn adoption_reconciles_default_labels_and_annotation_only() {
    let initial = initial_node(&config());
    let mut existing = initial.clone();
    assert!(!reconcile_existing(&mut existing, &initial));

    let labels = existing.metadata.labels.as_mut().unwrap();
    labels.insert(LABEL_OS.into(), "windows".into());
    labels.remove(LABEL_HOSTNAME);
    labels.insert("custom".into(), "kept".into());
    existing.metadata.annotations = None;
    let original = existing.clone();
    assert!(reconcile_existing(&mut existing, &initial));
    let labels = existing.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_OS], "linux");
    assert_eq!(labels[LABEL_HOSTNAME], "krs-node");
    assert_eq!(labels["custom"], "kept");
    assert_eq!(
        existing.metadata.annotations.as_ref().unwrap()[ANNOTATION_CMAD],
        "true"
    );
    let patch = status_patch(&original, &existing);
    assert_eq!(patch["metadata"]["labels"][LABEL_OS], "linux");
    assert_eq!(patch["metadata"]["labels"][LABEL_HOSTNAME], "krs-node");
    assert!(patch["metadata"]["labels"].get("custom").is_none());
    assert_eq!(patch["metadata"]["annotations"][ANNOTATION_CMAD], "true");
}

#[test]
fn status_carries_capacity_info_addresses_and_ready() {
    let mut cfg = config();
    cfg.port = 10250;
    let mut node = initial_node(&cfg);
    let outcome = set_node_status(&mut node, &cfg, &observed(), at(1000));
    assert!(outcome.problems.is_empty(), "{outcome:?}");
    assert_eq!(
        outcome.events,
        [
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    let status = node.status.as_ref().unwrap();
    let capacity = status.capacity.as_ref().unwrap();
    assert_eq!(capacity["cpu"].0, "2");
    assert_eq!(capacity["memory"].0, "4Gi");
    assert_eq!(capacity["pods"].0, "110");
    assert_eq!(capacity["ephemeral-storage"].0, "100Gi");
    let allocatable = status.allocatable.as_ref().unwrap();
    assert_eq!(
        allocatable["memory"].0, "3996Mi",
        "4Gi - 100Mi hard eviction"
    );
    assert_eq!(allocatable["cpu"].0, "2");
    let info = status.node_info.as_ref().unwrap();
    assert_eq!(info.container_runtime_version, "containerd://1.7.24");
    assert_eq!(info.kubelet_version, KUBELET_VERSION);
    assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(info.boot_id, "b1");
    assert_eq!(info.operating_system, "linux");
    assert_eq!(
        status.addresses.as_ref().unwrap(),
        &vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.7".into()
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "krs-node".into()
            },
        ]
    );
    assert_eq!(
        status
            .daemon_endpoints
            .as_ref()
            .unwrap()
            .kubelet_endpoint
            .as_ref()
            .unwrap()
            .port,
        10250
    );
    assert_eq!(status.images.as_ref().unwrap().len(), 1);
    assert_eq!(status.conditions.as_ref().unwrap().len(), 4);
    assert_eq!(condition(&node, "Ready").status, "True");
    assert_eq!(condition(&node, "MemoryPressure").status, "False");
}

#[test]
fn ready_is_false_with_upstreams_message_while_runtime_or_network_is_down() {
    let cfg = config();
    let mut node = initial_node(&cfg);
    let mut seen = observed();
    seen.network = Err("no CNI config".into());
    set_node_status(&mut node, &cfg, &seen, at(1000));
    let ready = condition(&node, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some(
            "container runtime network not ready: NetworkReady=false \
             reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
        )
    );

    seen.runtime = Err("down".into());
    seen.images = None;
    assert!(
        set_node_status(&mut node, &cfg, &seen, at(1010))
            .events
            .is_empty(),
        "still not ready: no event"
    );
    let ready = condition(&node, "Ready");
    assert!(ready
        .message
        .as_deref()
        .unwrap()
        .starts_with("[container runtime is down, container runtime network not ready"));
    assert_eq!(ready.last_transition_time, Some(Time(at(1000))));
    assert_eq!(
        node.status.as_ref().unwrap().images.as_ref().unwrap().len(),
        1,
        "images kept while the runtime does not answer"
    );

    let mut seen = observed();
    seen.host.machine.ephemeral_storage_bytes = None;
    set_node_status(&mut node, &cfg, &seen, at(1020));
    assert_eq!(
        condition(&node, "Ready").message.as_deref(),
        Some("missing node capacity for resources: ephemeral-storage")
    );

    // Without local storage isolation upstream neither reports nor requires it.
    let mut cfg = cfg.clone();
    cfg.local_storage_capacity_isolation = false;
    set_node_status(&mut node, &cfg, &observed(), at(1030));
    assert_eq!(condition(&node, "Ready").status, "True");
    let status = node.status.as_ref().unwrap();
    for list in [&status.capacity, &status.allocatable] {
        assert!(!list.as_ref().unwrap().contains_key("ephemeral-storage"));
    }
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[test]
fn node_ip_must_be_on_an_interface() {
    let mut cfg = config();
    cfg.node_ip = Some("10.0.1.1".parse().unwrap());
    let mut node = initial_node(&cfg);
    assert!(set_node_status(&mut node, &cfg, &observed(), at(1))
        .problems
        .is_empty());
    assert_eq!(
        node.status.as_ref().unwrap().addresses.as_ref().unwrap()[0].address,
        "10.0.1.1"
    );
    cfg.node_ip = Some("192.0.2.9".parse().unwrap());
    let outcome = set_node_status(&mut node, &cfg, &observed(), at(2));
    assert_eq!(
        outcome.problems,
        vec![
            "failed to validate nodeIP: node IP: \"192.0.2.9\" not found in the host's network interfaces"
                .to_string()
        ]
    );
}

#[test]
fn a_heartbeat_alone_is_no_change_but_a_new_fact_is() {
    let cfg = config();
    let mut first = initial_node(&cfg);
    set_node_status(&mut first, &cfg, &observed(), at(100));
    let mut second = first.clone();
    set_node_status(&mut second, &cfg, &observed(), at(110));
    let (a, b) = (
        first.status.as_ref().unwrap(),
        second.status.as_ref().unwrap(),
    );
    assert!(!status_changed(a, b));

    // The API's canonical spelling of the same amount is no change either.
    let mut respelled = b.clone();
    respelled
        .capacity
        .as_mut()
        .unwrap()
        .insert("memory".into(), ApiQuantity("4294967296".into()));
    assert!(!status_changed(a, &respelled));

    let mut third = second.clone();
    let mut seen = observed();
    seen.pressure.memory = true;
    set_node_status(&mut third, &cfg, &seen, at(120));
    assert!(status_changed(b, third.status.as_ref().unwrap()));
    assert_eq!(condition(&third, "MemoryPressure").status, "True");

    let mut fourth = second.clone();
    let mut seen = observed();
    seen.images = Some(vec![]);
    set_node_status(&mut fourth, &cfg, &seen, at(120));
    assert!(status_changed(b, fourth.status.as_ref().unwrap()));
}

#[test]
fn the_patch_carries_the_status_and_removes_vanished_resources() {
    let cfg = config();
    let mut original = initial_node(&cfg);
    let mut seen = observed();
    seen.host.machine.hugepages = vec![("hugepages-2Mi".into(), 0)];
    set_node_status(&mut original, &cfg, &seen, at(100));
    let mut updated = original.clone();
    set_node_status(&mut updated, &cfg, &observed(), at(110));
    let patch = status_patch(&original, &updated);
    assert!(patch.get("metadata").is_none(), "no label changed");
    let status = &patch["status"];
    assert_eq!(status["conditions"].as_array().unwrap().len(), 4);
    assert_eq!(status["capacity"]["hugepages-2Mi"], Value::Null);
    assert!(
        status["capacity"].get("cpu").is_none(),
        "unchanged keys left out"
    );
    assert_eq!(status["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
    assert_eq!(status["addresses"][0]["type"], "InternalIP");
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    assert_eq!(status["images"][0]["sizeBytes"], 320_000);
}

#[test]
fn required_labels_are_restored() {
    let mut node = initial_node(&config());
    assert!(!ensure_required_labels(&mut node));
    node.metadata.labels.as_mut().unwrap().remove(LABEL_ARCH);
    assert!(ensure_required_labels(&mut node));
    assert_eq!(
        node.metadata.labels.as_ref().unwrap()[LABEL_ARCH],
        go_arch()
    );
}

#[test]
fn runtime_handlers_are_one_entry_per_handler_with_features_not_claimed() {
    let cfg = config();
    let mut node = initial_node(&cfg);
    let mut seen = observed();
    seen.runtime_handlers = vec!["".into(), "crun".into(), "runc".into()];
    let original = node.clone();
    set_node_status(&mut node, &cfg, &seen, at(1000));
    let handlers = node
        .status
        .as_ref()
        .unwrap()
        .runtime_handlers
        .clone()
        .unwrap();
    let got: Vec<Value> = handlers.iter().map(|h| json!(h)).collect();
    let entry = |name: &str| json!({"name": name, "features": {"recursiveReadOnlyMounts": false, "userNamespaces": false}});
    assert_eq!(got, vec![entry(""), entry("crun"), entry("runc")]);
    // The patch carries the whole list (the API replaces it).
    let patch = status_patch(&original, &node);
    assert_eq!(
        patch["status"]["runtimeHandlers"],
        json!([entry(""), entry("crun"), entry("runc")])
    );
}
