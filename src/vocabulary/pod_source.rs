//! Where a pod came from, in upstream's words (pkg/kubelet/types): the config annotations the
//! sources put on a pod and the tests on them. The sources write them; admission, QoS, the
//! pod workers, mirror pods and the object watches read them, so they sit below all of those.

use k8s_openapi::api::core::v1::Pod;

pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Marks a mirror pod: the API server's copy of a static pod, made by the agent.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(key))
}

/// Whether the pod came from a file or URL rather than the API server (upstream's
/// IsStaticPod): its `kubernetes.io/config.source` is set and is not "api". A pod without
/// the annotation is not static.
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

/// Whether a pod is a mirror pod (`kubernetes.io/config.mirror` set).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(pairs: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        pod
    }

    #[test]
    fn static_means_a_source_other_than_the_api_and_mirror_means_the_annotation_is_there() {
        assert!(is_static_pod(&annotated(&[(
            CONFIG_SOURCE_ANNOTATION,
            "file"
        )])));
        assert!(!is_static_pod(&annotated(&[(
            CONFIG_SOURCE_ANNOTATION,
            "api"
        )])));
        assert!(!is_static_pod(&Pod::default()));
        assert!(is_mirror_pod(&annotated(&[(CONFIG_MIRROR_ANNOTATION, "")])));
        assert!(!is_mirror_pod(&annotated(&[(
            CONFIG_SOURCE_ANNOTATION,
            "file"
        )])));
    }
}
