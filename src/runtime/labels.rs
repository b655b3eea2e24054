//! The label schema on containerd containers. Everything the agent must know after a
//! restart lives here (principle: nothing important lives only in memory): which pod and
//! container a record belongs to, its attempt (restart count), and, once it has died, how.
//! Upstream's names are used where tools look for them.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Container;

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// The hash of the fields of the container's spec that may change while it runs
/// (`container_hash`); a running container whose hash differs from its spec's is restarted.
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";

pub const KIND: &str = "kubelet-rs.io/kind";
pub const ATTEMPT: &str = "kubelet-rs.io/attempt";
pub const IMAGE: &str = "kubelet-rs.io/image";
pub const IMAGE_REF: &str = "kubelet-rs.io/image-ref";
pub const LOG_PATH: &str = "kubelet-rs.io/log-path";
pub const STARTED_AT: &str = "kubelet-rs.io/started-at";
pub const FINISHED_AT: &str = "kubelet-rs.io/finished-at";
pub const EXIT_CODE: &str = "kubelet-rs.io/exit-code";
pub const REASON: &str = "kubelet-rs.io/reason";
pub const MESSAGE: &str = "kubelet-rs.io/message";
/// The host file bind-mounted at the container's terminationMessagePath, and its policy.
pub const TERMINATION_MESSAGE_FILE: &str = "kubelet-rs.io/termination-message-file";
pub const TERMINATION_MESSAGE_POLICY: &str = "kubelet-rs.io/termination-message-policy";
pub const NETNS: &str = "kubelet-rs.io/netns";
pub const POD_IPS: &str = "kubelet-rs.io/pod-ips";
pub const HOST_NETWORK: &str = "kubelet-rs.io/host-network";
pub const CGROUP_PARENT: &str = "kubelet-rs.io/cgroup-parent";
/// On a sandbox: the RuntimeClass handler it was created for (absent: the default, `""`).
pub const RUNTIME_HANDLER: &str = "kubelet-rs.io/runtime-handler";

/// The cpu and memory requests and limits the container's cgroup was last given (JSON of
/// a ResourceRequirements): set at creation, rewritten by each in-place resize; what the
/// pod's status reports as the container's actual resources.
pub const RESOURCES: &str = "kubelet-rs.io/resources";
/// The image's STOPSIGNAL, as its config gave it when the container was created: the
/// signal that stops the container (containerd's CRI plugin keeps it the same way).
pub const STOP_SIGNAL: &str = "kubelet-rs.io/stop-signal";

/// The container name upstream gives the sandbox.
pub const SANDBOX_NAME: &str = "POD";

/// What a containerd container is to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Sandbox,
    Init,
    App,
    /// Added to a running pod through its `ephemeralcontainers` subresource.
    Ephemeral,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandbox",
            Kind::Init => "init",
            Kind::App => "app",
            Kind::Ephemeral => "ephemeral",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "sandbox" => Some(Kind::Sandbox),
            "init" => Some(Kind::Init),
            "app" => Some(Kind::App),
            "ephemeral" => Some(Kind::Ephemeral),
            _ => None,
        }
    }
}

/// The pod identity carried by every record of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

impl PodRef {
    pub fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (POD_UID.to_string(), self.uid.clone()),
            (POD_NAME.to_string(), self.name.clone()),
            (POD_NAMESPACE.to_string(), self.namespace.clone()),
        ])
    }

    pub fn from_labels(l: &HashMap<String, String>) -> Option<PodRef> {
        Some(PodRef {
            uid: l.get(POD_UID)?.clone(),
            name: l.get(POD_NAME)?.clone(),
            namespace: l.get(POD_NAMESPACE)?.clone(),
        })
    }

    /// `<name>_<namespace>(<uid>)`, the form upstream uses in messages.
    pub fn display(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }
}

/// The containerd filter selecting every record of one pod.
pub fn pod_filter(uid: &str) -> String {
    format!("labels.\"{POD_UID}\"=={uid}")
}

/// The containerd filter selecting every record the agent made.
pub fn managed_filter() -> String {
    format!("labels.\"{KIND}\"")
}

/// The container's hash as upstream's `HashContainer` picks its fields: since 1.31 only the
/// name and the image, the only fields of a running pod's container the API lets change
/// (besides resources, which a resize changes in place). Hashing more would restart every
/// container whenever defaulting of any other field changed between agent versions.
/// FNV-1a (32 bits) over the JSON of those fields, in hex as upstream's label value; the
/// value is only ever compared with values this agent wrote, so it need not equal
/// upstream's byte for byte (upstream hashes a spew dump of that JSON).
pub fn container_hash(c: &Container) -> String {
    let picked = BTreeMap::from([
        ("image", c.image.as_deref().unwrap_or_default()),
        ("name", c.name.as_str()),
    ]);
    let json = serde_json::to_vec(&picked).unwrap_or_default();
    let hash = json.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:x}")
}

/// Whether a record runs an older definition of `c` than the spec's: its hash label differs.
/// A record without the label (made before the agent wrote it) counts as current, so an
/// upgrade of the agent restarts nothing.
pub fn spec_changed(record_labels: &HashMap<String, String>, c: &Container) -> bool {
    record_labels
        .get(CONTAINER_HASH)
        .is_some_and(|h| *h != container_hash(c))
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn fnv1a_of_the_picked_fields() {
        // FNV-1a 32 of the empty input is its offset basis; of "a" the published vector.
        let fnv = |s: &[u8]| {
            s.iter().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
            })
        };
        assert_eq!(fnv(b""), 0x811c_9dc5);
        assert_eq!(fnv(b"a"), 0xe40c_292c);
        let c = container("app", "busybox:1");
        assert_eq!(
            container_hash(&c),
            format!("{:x}", fnv(br#"{"image":"busybox:1","name":"app"}"#))
        );
    }

    #[test]
    fn only_name_and_image_count() {
        let c = container("app", "busybox:1");
        let mut other_command = c.clone();
        other_command.command = Some(vec!["sleep".into()]);
        assert_eq!(container_hash(&c), container_hash(&other_command));
        assert_ne!(
            container_hash(&c),
            container_hash(&container("app", "busybox:2"))
        );
        assert_ne!(
            container_hash(&c),
            container_hash(&container("web", "busybox:1"))
        );
    }

    #[test]
    fn a_record_without_the_label_is_current() {
        let c = container("app", "busybox:1");
        assert!(!spec_changed(&HashMap::new(), &c));
        let same = HashMap::from([(CONTAINER_HASH.to_string(), container_hash(&c))]);
        assert!(!spec_changed(&same, &c));
        let old = HashMap::from([(CONTAINER_HASH.to_string(), "0".to_string())]);
        assert!(spec_changed(&old, &c));
    }
}
