//! Static pod naming and defaults, as upstream's pod config does for file and http pods
//! (pkg/kubelet/config/common.go): a content-derived UID, the node-suffixed name, the default
//! namespace, the node binding and the config annotations.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use md5::{Digest, Md5};

use super::api_defaults::apply_api_defaults;
use super::validation::{
    dns1123_subdomain_problems, validate_pod, FieldError, FieldErrorKind, ValidationErrors,
};
use super::{SourceKind, SourcedPod};
use crate::vocabulary::pod_source::{
    CONFIG_HASH_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
};

/// `<name>-<node>`: unique among nodes, as upstream names static pods.
pub fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// Hex MD5 of the pod's canonical JSON (k8s-openapi writes fields in a fixed order and maps
/// sorted), followed by where it came from: "host:<node>" and "file:<path>" for a file,
/// "url:<url>" for a URL (as upstream). Unchanged bytes on the same node and path give the same
/// UID across agent restarts; any edit gives a new pod.
pub fn static_pod_uid(pod: &Pod, source: SourceKind, origin: &str, node_name: &str) -> String {
    let mut hasher = Md5::new();
    // Serializing a k8s-openapi Pod cannot fail: it holds only strings, numbers and maps.
    hasher.update(serde_json::to_vec(pod).expect("a Pod serializes to JSON"));
    match source {
        SourceKind::File => {
            hasher.update(format!("host:{node_name}"));
            hasher.update(format!("file:{origin}"));
        }
        SourceKind::Http => hasher.update(format!("url:{origin}")),
        // The API server's pods carry their own UID and are never prepared here; hashing
        // the origin keeps the function total.
        SourceKind::Api => hasher.update(format!("api:{origin}")),
    }
    hex::encode(hasher.finalize())
}

/// Applies API defaults, validates, and turns a manifest's pod into the pod this node runs.
/// `kubernetes.io/config.seen` is not set here: it is a time, and it is added after hashing by
/// [`SeenTimes`], so that re-reading an unchanged manifest yields an identical pod.
pub fn prepare_static_pod(
    mut pod: Pod,
    source: SourceKind,
    origin: &str,
    node_name: &str,
) -> Result<Pod, ValidationErrors> {
    apply_api_defaults(&mut pod);
    validate_pod(&pod)?;
    let uid = match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => static_pod_uid(&pod, source, origin, node_name),
    };
    let name = static_pod_name(pod.metadata.name.as_deref().unwrap_or_default(), node_name);
    if let Some(problem) = dns1123_subdomain_problems(&name).into_iter().next() {
        return Err(ValidationErrors(vec![FieldError {
            field: "metadata.name".into(),
            kind: FieldErrorKind::Invalid {
                value: name,
                detail: format!("{problem} (after adding the node name)"),
            },
        }]));
    }
    pod.metadata.uid = Some(uid.clone());
    pod.metadata.name = Some(name);
    if pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    if source == SourceKind::File {
        // Static pods from files tolerate every NoExecute taint so node trouble never evicts
        // them, as upstream adds.
        let toleration = Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        };
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        if !tolerations.contains(&toleration) {
            tolerations.push(toleration);
        }
    }
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), source.to_string());
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
    Ok(pod)
}

/// First-seen times per pod UID, so `kubernetes.io/config.seen` stays the same while a pod
/// stays in its source's set.
#[derive(Debug, Default)]
pub struct SeenTimes {
    by_uid: HashMap<String, String>,
}

impl SeenTimes {
    /// Sets the seen annotation on each pod (now, for a UID not seen before) and forgets UIDs
    /// that left the set.
    pub fn stamp(&mut self, pods: &mut [SourcedPod]) {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let mut current = HashMap::new();
        for sourced in pods.iter_mut() {
            let uid = sourced.pod.metadata.uid.clone().unwrap_or_default();
            let seen = self
                .by_uid
                .get(&uid)
                .cloned()
                .unwrap_or_else(|| now.clone());
            sourced
                .pod
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_SEEN_ANNOTATION.into(), seen.clone());
            current.insert(uid, seen);
        }
        self.by_uid = current;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::decode::{decode_manifest, Manifest};

    const MANIFEST: &[u8] = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n";

    fn parse(bytes: &[u8]) -> Pod {
        match decode_manifest(bytes).unwrap() {
            Manifest::Pod(p) => *p,
            Manifest::List(_) => panic!("expected a pod"),
        }
    }

    fn prepared(bytes: &[u8], source: SourceKind, origin: &str, node: &str) -> Pod {
        prepare_static_pod(parse(bytes), source, origin, node).unwrap()
    }

    fn uid(pod: &Pod) -> String {
        pod.metadata.uid.clone().unwrap()
    }

    #[test]
    fn uid_is_stable_for_the_same_bytes_and_changes_with_content_node_or_origin() {
        let a = prepared(MANIFEST, SourceKind::File, "/m/web.yaml", "node1");
        let b = prepared(MANIFEST, SourceKind::File, "/m/web.yaml", "node1");
        assert_eq!(uid(&a), uid(&b));
        assert_eq!(uid(&a).len(), 32);
        assert!(uid(&a).bytes().all(|c| c.is_ascii_hexdigit()));

        let edited = String::from_utf8(MANIFEST.to_vec())
            .unwrap()
            .replace("nginx:1.27", "nginx:1.28");
        let c = prepared(edited.as_bytes(), SourceKind::File, "/m/web.yaml", "node1");
        assert_ne!(uid(&a), uid(&c), "an edit makes a new pod");
        let d = prepared(MANIFEST, SourceKind::File, "/m/web.yaml", "node2");
        assert_ne!(uid(&a), uid(&d), "another node");
        let e = prepared(MANIFEST, SourceKind::File, "/m/other.yaml", "node1");
        assert_ne!(uid(&a), uid(&e), "another file");
        let f = prepared(MANIFEST, SourceKind::Http, "http://h/pods", "node1");
        assert_ne!(uid(&a), uid(&f), "another source");

        // Formatting that does not change the pod does not change the UID.
        let reformatted = b"kind: Pod\napiVersion: v1\nspec:\n  containers:\n  - image: nginx:1.27\n    name: app\nmetadata: {name: web}\n";
        let g = prepared(reformatted, SourceKind::File, "/m/web.yaml", "node1");
        assert_eq!(uid(&a), uid(&g));
    }

    #[test]
    fn a_given_uid_is_kept() {
        let with_uid = String::from_utf8(MANIFEST.to_vec())
            .unwrap()
            .replace("  name: web\n", "  name: web\n  uid: fixed-uid\n");
        let pod = prepared(
            with_uid.as_bytes(),
            SourceKind::File,
            "/m/web.yaml",
            "node1",
        );
        assert_eq!(uid(&pod), "fixed-uid");
        assert_eq!(
            pod.metadata.annotations.unwrap()[CONFIG_HASH_ANNOTATION],
            "fixed-uid"
        );
    }

    #[test]
    fn names_binds_and_annotates() {
        let pod = prepared(MANIFEST, SourceKind::File, "/m/web.yaml", "Node1");
        assert_eq!(pod.metadata.name.as_deref(), Some("web-node1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node1"));
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Always"),
            "API defaults applied"
        );
        let tolerations = spec.tolerations.as_ref().unwrap();
        assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
        assert_eq!(tolerations[0].effect.as_deref(), Some("NoExecute"));
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[CONFIG_HASH_ANNOTATION], uid(&pod));
        assert_eq!(annotations[CONFIG_SOURCE_ANNOTATION], "file");
        assert!(!annotations.contains_key(CONFIG_SEEN_ANNOTATION));
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));

        let http = prepared(MANIFEST, SourceKind::Http, "http://h/p", "node1");
        assert_eq!(
            http.metadata.annotations.unwrap()[CONFIG_SOURCE_ANNOTATION],
            "http"
        );
        assert!(http.spec.unwrap().tolerations.is_none());
    }

    #[test]
    fn keeps_a_given_namespace() {
        let text = String::from_utf8(MANIFEST.to_vec())
            .unwrap()
            .replace("  name: web\n", "  name: web\n  namespace: kube-system\n");
        let pod = prepared(text.as_bytes(), SourceKind::File, "/m/web.yaml", "n");
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn invalid_pods_are_refused() {
        let bad = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web\nspec:\n  containers:\n  - name: app\n";
        let err = prepare_static_pod(parse(bad), SourceKind::File, "/m/x.yaml", "n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("[metadata.name: Invalid value: \"Web\""),
            "{text}"
        );
        assert!(
            text.contains("spec.containers[0].image: Required value"),
            "{text}"
        );

        let long_node = "n".repeat(250);
        let err = prepare_static_pod(parse(MANIFEST), SourceKind::File, "/m/x.yaml", &long_node)
            .unwrap_err();
        assert!(
            err.to_string().contains("after adding the node name"),
            "{err}"
        );
    }

    #[test]
    fn seen_time_is_set_once_per_uid() {
        let pod = prepared(MANIFEST, SourceKind::File, "/m/web.yaml", "n");
        let mut seen = SeenTimes::default();
        let mut first = vec![SourcedPod {
            pod: pod.clone(),
            origin: "/m/web.yaml".into(),
        }];
        seen.stamp(&mut first);
        let stamp =
            first[0].pod.metadata.annotations.as_ref().unwrap()[CONFIG_SEEN_ANNOTATION].clone();
        assert!(
            chrono::DateTime::parse_from_rfc3339(&stamp).is_ok(),
            "{stamp}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut again = vec![SourcedPod {
            pod,
            origin: "/m/web.yaml".into(),
        }];
        seen.stamp(&mut again);
        assert_eq!(first, again);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// What a file or URL source does with a manifest's bytes: decode, then prepare
        /// each pod; any error is reported, never a panic.
        fn read(bytes: &[u8]) -> Vec<Result<Pod, ValidationErrors>> {
            let pods = match decode_manifest(bytes) {
                Ok(Manifest::Pod(p)) => vec![*p],
                Ok(Manifest::List(pods)) => pods,
                Err(e) => {
                    assert!(!e.to_string().contains('\n'), "{e}");
                    return Vec::new();
                }
            };
            pods.into_iter()
                .map(|p| prepare_static_pod(p, SourceKind::File, "/m/p.yaml", "node-a"))
                .collect()
        }

        /// A YAML double-quoted scalar: quotes and backslashes escaped, and every character
        /// YAML does not let a file hold as it is (its c-printable set) as a \\u escape.
        fn quoted(s: &str) -> String {
            let mut out = String::from('"');
            for c in s.chars() {
                let printable = matches!(c, ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
                match c {
                    '"' | '\\' => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if printable => out.push(c),
                    c if u32::from(c) <= 0xffff => {
                        out.push_str(&format!("\\u{:04x}", u32::from(c)))
                    }
                    c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
                }
            }
            out.push('"');
            out
        }

        /// Values where the manifest's grammar is thin: names near the DNS rules, numbers
        /// past i32 and i64, quantities, and anything else.
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?",
                "[a-zA-Z0-9._ -]{0,70}",
                ".{0,10}"
            ]
        }

        fn number() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i32>().prop_map(|n| n.to_string()),
                any::<i64>().prop_map(|n| n.to_string()),
                // serde-saphyr refuses leading zeros (YAML 1.1 read them as octal).
                "-?[1-9][0-9]{18,29}",
                "-?[0-9]{1,4}\\.[0-9]{1,3}(e[0-9]{1,3})?",
            ]
        }

        fn manifest(
        ) -> impl Strategy<Value = (String, String, String, String, String, String, String)>
        {
            (
                name(),
                name(),
                name(),
                ".{0,20}",
                number(),
                number(),
                "[-+0-9.eEinumkKMGTP]{0,12}",
            )
        }

        proptest! {
            #![proptest_config(crate::test_support::proptest_config(256))]

            #[test]
            fn any_bytes_are_pods_or_errors(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
                let _ = read(&bytes);
            }

            #[test]
            fn any_text_is_pods_or_errors(text in prop_oneof![
                ".{0,200}",
                "(apiVersion: v1\nkind: Pod(List)?\n)?[a-zA-Z:{}\\[\\], \n\"'&*!|>-]{0,200}",
            ]) {
                let _ = read(text.as_bytes());
            }

            /// Nesting as deep as a file can make it is an error or a value, not a stack
            /// overflow.
            #[test]
            fn deep_nesting_is_refused_or_read(depth in 1usize..5000, form in 0usize..4) {
                let (open, close) = [("[", "]"), ("{\"a\":", "}"), ("- ", ""), ("a: {", "}")][form];
                let text = format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {}1{}\n",
                    open.repeat(depth),
                    close.repeat(depth)
                );
                let _ = read(text.as_bytes());
                let json = format!("{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"spec\":{}1{}}}", "[".repeat(depth), "]".repeat(depth));
                let _ = read(json.as_bytes());
            }

            /// A pod written as YAML reads back with what it was written with, reads the same
            /// from its JSON, and validation decides on it without panicking; a pod that
            /// passes keeps its fields and gets the node-suffixed name.
            #[test]
            fn a_written_pod_reads_back(
                (name, namespace, container, image, port, deadline, cpu) in manifest(),
            ) {
                let yaml = format!(
                    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  activeDeadlineSeconds: {deadline}\n  containers:\n  - name: {}\n    image: {}\n    ports:\n    - containerPort: {port}\n    resources:\n      limits:\n        cpu: {}\n",
                    quoted(&name), quoted(&namespace), quoted(&container), quoted(&image), quoted(&cpu),
                );
                let Ok(Manifest::Pod(pod)) = decode_manifest(yaml.as_bytes()) else {
                    // Only the numbers can be out of their types' range.
                    prop_assert!(port.parse::<i32>().is_err() || deadline.parse::<i64>().is_err(), "{}", yaml);
                    return Ok(());
                };
                prop_assert_eq!(pod.metadata.name.as_deref(), Some(name.as_str()));
                prop_assert_eq!(pod.metadata.namespace.as_deref(), Some(namespace.as_str()));
                let spec = pod.spec.as_ref().unwrap();
                prop_assert_eq!(spec.active_deadline_seconds, Some(deadline.parse::<i64>().unwrap()));
                prop_assert_eq!(&spec.containers[0].name, &container);
                prop_assert_eq!(spec.containers[0].image.as_deref(), Some(image.as_str()));
                prop_assert_eq!(spec.containers[0].ports.as_ref().unwrap()[0].container_port, port.parse::<i32>().unwrap());
                let json = serde_json::to_vec(&*pod).unwrap();
                let Ok(Manifest::Pod(again)) = decode_manifest(&json) else {
                    panic!("the pod's JSON does not decode: {}", String::from_utf8_lossy(&json));
                };
                prop_assert_eq!(&again, &pod);
                if let Ok(prepared) = prepare_static_pod(*pod, SourceKind::File, "/m/p.yaml", "node-a") {
                    prop_assert_eq!(prepared.metadata.name, Some(format!("{name}-node-a")));
                    prop_assert!(crate::vocabulary::quantity::Quantity::parse(&cpu).is_ok_and(|q| !q.is_negative()));
                    prop_assert_eq!(prepared.spec.as_ref().unwrap().containers[0].image.as_deref(), Some(image.as_str()));
                }
            }
        }
    }
}
