//! Admission: each reason and message as upstream words it, the fit arithmetic, node
//! selectors and affinity operators, tolerations, and the pods that are exempt.

use serde_json::json;

use super::*;
use crate::vocabulary::pod_source::CONFIG_SOURCE_ANNOTATION;

fn pod(port: serde_json::Value, host_net: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"hostNetwork": host_net, "containers": [{"name": "c", "image": "i", "ports": [port]}]}
    }))
    .unwrap()
}

/// A pod from the API server with the given spec fields merged in.
fn api_pod(spec: serde_json::Value) -> Pod {
    let mut value = json!({
        "metadata": {"name": "p", "namespace": "default",
                     "annotations": {CONFIG_SOURCE_ANNOTATION: "api"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    });
    for (k, v) in spec.as_object().unwrap() {
        value["spec"][k] = v.clone();
    }
    serde_json::from_value(value).unwrap()
}

fn static_pod(spec: serde_json::Value) -> Pod {
    let mut p = api_pod(spec);
    p.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    p
}

fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "node-a", "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "10Gi", "pods": "110"}}
    }))
    .unwrap()
}

fn plain_node() -> Node {
    node(json!({"kubernetes.io/hostname": "node-a"}), json!([]))
}

fn refused(pod: &Pod, node: Option<&Node>) -> Rejection {
    admit(pod, &[], 110, node).expect_err("the pod is refused")
}

#[test]
fn host_port_conflicts() {
    let a = pod(json!({"containerPort": 80, "hostPort": 8080}), false);
    let same = pod(json!({"containerPort": 81, "hostPort": 8080}), false);
    let udp = pod(
        json!({"containerPort": 81, "hostPort": 8080, "protocol": "UDP"}),
        false,
    );
    let other_ip = pod(
        json!({"containerPort": 81, "hostPort": 8080, "hostIP": "127.0.0.2"}),
        false,
    );
    let no_host_port = pod(json!({"containerPort": 8080}), false);
    let hostnet = pod(json!({"containerPort": 8080}), true);
    assert!(admit(&a, &[], 110, None).is_ok());
    let r = admit(&same, &[&a], 110, None).unwrap_err();
    assert_eq!(r.reason, "NodePorts");
    assert_eq!(
        r.message,
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    assert!(admit(&udp, &[&a], 110, None).is_ok());
    // A specific address still clashes with a port taken on every address.
    assert!(admit(&other_ip, &[&a], 110, None).is_err());
    assert!(admit(&no_host_port, &[&a], 110, None).is_ok());
    assert!(admit(&hostnet, &[&a], 110, None).is_err());
}

#[test]
fn max_pods() {
    let a = pod(json!({"containerPort": 80}), false);
    let r = admit(&a, &[&a, &a], 2, None).unwrap_err();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    assert_eq!(
        r.status_message(),
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );
    // maxPods holds for static pods too.
    let s = static_pod(json!({}));
    assert_eq!(
        admit(&s, &[&a, &a], 2, None).unwrap_err().reason,
        "OutOfpods"
    );
}

fn with(containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p"}, "spec": {"containers": containers}
    }))
    .unwrap()
}

fn alloc(cpu: i64, mem: i64) -> Allocatable {
    Allocatable {
        cpu_millis: Some(cpu),
        memory_bytes: Some(mem),
        ephemeral_storage_bytes: None,
    }
}

#[test]
fn resources_fit_exactly_as_upstream_sums_them() {
    let node = alloc(2000, 1 << 30);
    let a =
        with(json!([{"name": "a", "resources": {"requests": {"cpu": "0.7", "memory": "512Mi"}}}]));
    let b = with(json!([
        {"name": "a", "resources": {"requests": {"cpu": "650m"}}},
        {"name": "b", "resources": {"limits": {"cpu": "6.5e-1", "memory": "0.5Gi"}}}]));
    // 700m + 1300m is exactly 2 CPUs: it fits; 1m more does not.
    assert!(admit_within(&b, &[&a], 110, &node).is_ok());
    let c = with(json!([{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]));
    let r = admit_within(&c, &[&a, &b], 110, &node).unwrap_err();
    assert_eq!(r.reason, "OutOfcpu");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: cpu, requested: 1, used: 2000, capacity: 2000"
    );
    let m = with(json!([{"name": "m", "resources": {"requests": {"memory": "1"}}}]));
    let r = admit_within(&m, &[&a, &b], 110, &node).unwrap_err();
    assert_eq!(r.reason, "OutOfmemory");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: memory, requested: 1, used: 1073741824, capacity: 1073741824"
    );
    // A pod requesting nothing is not weighed; unknown allocatable is not checked.
    let none = with(json!([{"name": "n"}]));
    assert!(admit_within(&none, &[&a, &b], 110, &node).is_ok());
    assert!(admit_within(&c, &[&a, &b], 110, &Allocatable::default()).is_ok());
    // maxPods comes first.
    assert_eq!(
        admit_within(&c, &[&a, &b], 2, &node).unwrap_err().reason,
        "OutOfpods"
    );
}

#[test]
fn the_nodes_allocatable_is_weighed_for_api_pods_only() {
    let node = plain_node();
    let big = api_pod(json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"ephemeral-storage": "11Gi"}}}]}));
    let r = refused(&big, Some(&node));
    assert_eq!(r.reason, "OutOfephemeral-storage");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240"
    );
    let cpu = api_pod(json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "3"}}}]}));
    assert_eq!(refused(&cpu, Some(&node)).reason, "OutOfcpu");
    // Without a Node nothing is known about allocatable.
    assert!(admit(&cpu, &[], 110, None).is_ok());
    // A static pod is let in: upstream would evict others to make room for it.
    let static_cpu = static_pod(json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "3"}}}]}));
    assert!(admit(&static_cpu, &[], 110, Some(&node)).is_ok());
}

#[test]
fn node_selector_must_match_the_nodes_labels() {
    let node = node(json!({"disk": "ssd", "zone": "a"}), json!([]));
    let fits = api_pod(json!({"nodeSelector": {"disk": "ssd"}}));
    assert!(admit(&fits, &[], 110, Some(&node)).is_ok());
    let other = api_pod(json!({"nodeSelector": {"disk": "ssd", "zone": "b"}}));
    let r = refused(&other, Some(&node));
    assert_eq!(r.reason, "NodeAffinity");
    assert_eq!(
        r.message,
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    assert_eq!(
        r.status_message(),
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    // Without a Node the selector cannot be checked.
    assert!(admit(&other, &[], 110, None).is_ok());
}

fn affinity(terms: serde_json::Value) -> Pod {
    api_pod(json!({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}))
}

fn expr(key: &str, op: &str, values: &[&str]) -> serde_json::Value {
    json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]})
}

#[test]
fn required_node_affinity_operators() {
    let node = node(json!({"disk": "ssd", "cores": "8", "name": "x"}), json!([]));
    let fits = |terms: serde_json::Value| admit(&affinity(terms), &[], 110, Some(&node)).is_ok();
    let cases: Vec<(serde_json::Value, bool)> = vec![
        (json!([expr("disk", "In", &["hdd", "ssd"])]), true),
        (json!([expr("disk", "In", &["hdd"])]), false),
        (json!([expr("absent", "In", &["ssd"])]), false),
        (json!([expr("disk", "NotIn", &["hdd"])]), true),
        (json!([expr("disk", "NotIn", &["ssd"])]), false),
        (json!([expr("absent", "NotIn", &["ssd"])]), true),
        (json!([expr("disk", "Exists", &[])]), true),
        (json!([expr("absent", "Exists", &[])]), false),
        (json!([expr("absent", "DoesNotExist", &[])]), true),
        (json!([expr("disk", "DoesNotExist", &[])]), false),
        (json!([expr("cores", "Gt", &["4"])]), true),
        (json!([expr("cores", "Gt", &["8"])]), false),
        (json!([expr("cores", "Lt", &["16"])]), true),
        (json!([expr("cores", "Lt", &["8"])]), false),
        // A label that is not a number never compares; a bound that is not one spoils the term.
        (json!([expr("disk", "Gt", &["1"])]), false),
        (json!([expr("cores", "Gt", &["four"])]), false),
        (json!([expr("cores", "Gt", &["1", "2"])]), false),
        // Values where none belong, none where they must, an unknown operator: no match.
        (json!([expr("disk", "Exists", &["ssd"])]), false),
        (json!([expr("disk", "In", &[])]), false),
        (json!([expr("disk", "Near", &["ssd"])]), false),
        // Terms are ORed; requirements within a term are ANDed.
        (
            json!([expr("disk", "In", &["hdd"]), expr("cores", "Gt", &["2"])]),
            true,
        ),
        (
            json!([{"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]},
                {"key": "cores", "operator": "Lt", "values": ["2"]}]}]),
            false,
        ),
        // An empty term matches nothing.
        (json!([{}]), false),
        (json!([{}, expr("disk", "Exists", &[])]), true),
        // matchFields: metadata.name only, In or NotIn with one value.
        (
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]),
            true,
        ),
        (
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]),
            false,
        ),
        (
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]}]}]),
            true,
        ),
        (
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a", "node-b"]}]}]),
            false,
        ),
        (
            json!([{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["node-a"]}]}]),
            false,
        ),
        (
            json!([{"matchFields": [{"key": "metadata.name", "operator": "Exists", "values": ["node-a"]}]}]),
            false,
        ),
        // Labels and fields in one term must both hold.
        (
            json!([{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]),
            false,
        ),
    ];
    for (terms, want) in cases {
        assert_eq!(fits(terms.clone()), want, "{terms}");
    }
    // A match in the affinity does not excuse a nodeSelector that fails.
    let mut both = affinity(json!([expr("disk", "Exists", &[])]));
    both.spec.as_mut().unwrap().node_selector =
        Some(BTreeMap::from([("disk".into(), "hdd".into())]));
    assert_eq!(refused(&both, Some(&node)).reason, "NodeAffinity");
}

#[test]
fn a_pod_for_another_node_is_refused() {
    let p = api_pod(json!({"nodeName": "node-b"}));
    let r = refused(&p, Some(&plain_node()));
    assert_eq!(r.reason, "NodeName");
    assert_eq!(
        r.message,
        "Predicate NodeName failed: node(s) didn't match the requested node name"
    );
    assert!(admit(
        &api_pod(json!({"nodeName": "node-a"})),
        &[],
        110,
        Some(&plain_node())
    )
    .is_ok());
}

#[test]
fn only_untolerated_no_execute_taints_refuse() {
    let node = node(
        json!({}),
        json!([
            {"key": "dedicated", "value": "db", "effect": "NoExecute"},
            {"key": "gpu", "effect": "NoSchedule"},
            {"key": "busy", "effect": "PreferNoSchedule"}]),
    );
    let fits = |tolerations: serde_json::Value| {
        admit(
            &api_pod(json!({"tolerations": tolerations})),
            &[],
            110,
            Some(&node),
        )
    };
    let r = fits(json!([])).unwrap_err();
    assert_eq!(r.reason, "TaintToleration");
    assert_eq!(
        r.message,
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
    );
    let tolerated = [
        json!([{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}]),
        json!([{"key": "dedicated", "value": "db"}]),
        json!([{"key": "dedicated", "operator": "Exists"}]),
        json!([{"operator": "Exists"}]),
        json!([{"operator": "Exists", "effect": "NoExecute"}]),
    ];
    for t in tolerated {
        assert!(fits(t.clone()).is_ok(), "{t}");
    }
    let untolerated = [
        json!([{"key": "dedicated", "value": "web", "effect": "NoExecute"}]),
        json!([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
        json!([{"key": "other", "operator": "Exists"}]),
        json!([{"key": "dedicated", "operator": "Gt", "value": "db"}]),
    ];
    for t in untolerated {
        assert_eq!(
            fits(t.clone()).unwrap_err().reason,
            "TaintToleration",
            "{t}"
        );
    }
    // Static pods are not checked against taints, as upstream.
    assert!(admit(&static_pod(json!({})), &[], 110, Some(&node)).is_ok());
}

#[test]
fn os_checks_come_first() {
    let mut labelled = api_pod(json!({"nodeName": "node-b"}));
    labelled.metadata.labels = Some(BTreeMap::from([(OS_LABEL.into(), "windows".into())]));
    let r = refused(&labelled, Some(&plain_node()));
    assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
    assert_eq!(
        r.message,
        "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
    );
    let os = api_pod(json!({"os": {"name": "windows"}}));
    let r = refused(&os, None);
    assert_eq!(r.reason, "PodOSNotSupported");
    assert_eq!(
        r.message,
        "Failed to admit pod as the OS field doesn't match node OS"
    );
    let mut linux = api_pod(json!({"os": {"name": "linux"}}));
    linux.metadata.labels = Some(BTreeMap::from([(OS_LABEL.into(), "linux".into())]));
    assert!(admit(&linux, &[], 110, Some(&plain_node())).is_ok());
}

/// Unimplemented features are refused for static and API pods alike, right after the OS
/// checks and before the resource fit (upstream's order), with or without a Node.
#[test]
fn unimplemented_features_are_refused_after_the_os_checks() {
    for p in [
        static_pod(json!({"hostUsers": false})),
        api_pod(json!({"hostUsers": false})),
    ] {
        assert_eq!(refused(&p, None).reason, "PodFeatureUnsupported");
        assert_eq!(
            refused(&p, Some(&plain_node())).reason,
            "PodFeatureUnsupported"
        );
    }
    let both = api_pod(json!({"hostUsers": false, "os": {"name": "windows"}}));
    assert_eq!(refused(&both, None).reason, "PodOSNotSupported");
    let greedy = api_pod(json!({"hostUsers": false,
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "3"}}}]}));
    assert_eq!(
        refused(&greedy, Some(&plain_node())).reason,
        "PodFeatureUnsupported"
    );
}

#[test]
fn a_pod_being_deleted_is_never_refused() {
    let mut p = api_pod(json!({"nodeSelector": {"disk": "none"}, "os": {"name": "windows"}}));
    p.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    let full = pod(json!({"containerPort": 80}), false);
    assert!(admit(&p, &[&full], 1, Some(&plain_node())).is_ok());
}

#[test]
fn the_first_failure_in_upstreams_order_is_the_reason() {
    // Out of cpu, wrong selector, wrong node name and an untolerated taint at once.
    let node = node(json!({}), json!([{"key": "k", "effect": "NoExecute"}]));
    let p = api_pod(json!({"nodeName": "node-b", "nodeSelector": {"a": "b"},
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "3"}}}]}));
    assert_eq!(refused(&p, Some(&node)).reason, "OutOfcpu");
    let p = api_pod(json!({"nodeName": "node-b", "nodeSelector": {"a": "b"}}));
    assert_eq!(refused(&p, Some(&node)).reason, "NodeAffinity");
    let p = api_pod(json!({"nodeName": "node-b"}));
    assert_eq!(refused(&p, Some(&node)).reason, "NodeName");
}

#[test]
fn rejected_status_keeps_the_qos_class() {
    let p = api_pod(json!({}));
    let st = rejected_status(&p, &Rejection::new("OutOfcpu", "m"));
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(st.message.as_deref(), Some("Pod was rejected: m"));
    assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
}

#[test]
fn pod_requests_follow_init_sidecar_and_overhead_rules() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "overhead": {"cpu": "100m"},
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                {"name": "big", "resources": {"requests": {"cpu": "3", "memory": "1Mi"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Mi"}}}]}
    }))
    .unwrap();
    let r = pod_requests(&p);
    // max(app 500m + sidecar 200m, init 3 + sidecar 200m) + overhead 100m.
    assert_eq!(r["cpu"], Quantity::from_milli(3300));
    assert_eq!(r["memory"], Quantity::from_value(2 << 20));
}

mod selector_properties {
    use super::node_affinity::selector_matches;
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["disk", "zone", "cores", "metadata.name", ""])
            .prop_map(str::to_string)
    }

    /// Label values and bounds: names, integers and numbers past i64.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec!["ssd", "a", "node-a", ""]).prop_map(str::to_string),
            any::<i64>().prop_map(|n| n.to_string()),
            "[+-]?[0-9]{19,21}",
            ".{0,4}",
        ]
    }

    fn operator() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "Gt",
            "Lt",
            "in",
            "",
        ])
        .prop_map(str::to_string)
    }

    fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
        (
            key(),
            operator(),
            proptest::option::of(prop::collection::vec(value(), 0..3)),
        )
            .prop_map(|(key, operator, values)| NodeSelectorRequirement {
                key,
                operator,
                values,
            })
    }

    fn labelled_node() -> impl Strategy<Value = Node> {
        (
            prop::collection::btree_map(key(), value(), 0..4),
            "[a-z-]{0,8}",
        )
            .prop_map(|(labels, name)| {
                let mut n = node(json!(labels), json!([]));
                n.metadata.name = Some(name);
                n
            })
    }

    fn one(
        expressions: Vec<NodeSelectorRequirement>,
        fields: Vec<NodeSelectorRequirement>,
    ) -> NodeSelector {
        NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(expressions),
                match_fields: Some(fields),
            }],
        }
    }

    fn with_operator(r: &NodeSelectorRequirement, operator: &str) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            operator: operator.to_string(),
            ..r.clone()
        }
    }

    proptest! {
        #![proptest_config(crate::test_support::proptest_config(512))]

        /// Any selector is decided without panicking, and a term that parses under one
        /// operator decides as its opposite's complement (In/NotIn, Exists/DoesNotExist);
        /// Gt and Lt never both hold.
        #[test]
        fn selectors_decide_and_opposites_complement(
            terms in prop::collection::vec(
                (prop::collection::vec(requirement(), 0..3), prop::collection::vec(requirement(), 0..2)),
                0..3,
            ),
            r in requirement(),
            node in labelled_node(),
        ) {
            let selector = NodeSelector {
                node_selector_terms: terms
                    .into_iter()
                    .map(|(e, f)| NodeSelectorTerm { match_expressions: Some(e), match_fields: Some(f) })
                    .collect(),
            };
            let _ = selector_matches(&selector, &node);
            let decide = |op: &str| selector_matches(&one(vec![with_operator(&r, op)], vec![]), &node);
            let values = r.values.as_deref().unwrap_or_default();
            if !values.is_empty() {
                prop_assert_ne!(decide("In"), decide("NotIn"));
            } else {
                prop_assert_ne!(decide("Exists"), decide("DoesNotExist"));
            }
            prop_assert!(!(decide("Gt") && decide("Lt")));
            let field = |op: &str| selector_matches(&one(vec![], vec![with_operator(&r, op)]), &node);
            if r.key == "metadata.name" && values.len() == 1 {
                prop_assert_ne!(field("In"), field("NotIn"));
                prop_assert_eq!(field("In"), node.metadata.name.as_deref() == Some(values[0].as_str()));
            } else {
                prop_assert!(!field("In") && !field("NotIn"));
            }
        }
    }
}
