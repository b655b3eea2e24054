//! The label schema on containerd containers. Everything the agent must know after a
//! restart lives here (principle: nothing important lives only in memory): which pod and
//! container a record belongs to, its attempt (restart count), and, once it has died, how.
//! Upstream's names are used where tools look for them.

use std::collections::HashMap;

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

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
pub const NETNS: &str = "kubelet-rs.io/netns";
pub const POD_IPS: &str = "kubelet-rs.io/pod-ips";
pub const HOST_NETWORK: &str = "kubelet-rs.io/host-network";
pub const CGROUP_PARENT: &str = "kubelet-rs.io/cgroup-parent";

/// The container name upstream gives the sandbox.
pub const SANDBOX_NAME: &str = "POD";

/// What a containerd container is to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Sandbox,
    Init,
    App,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandbox",
            Kind::Init => "init",
            Kind::App => "app",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "sandbox" => Some(Kind::Sandbox),
            "init" => Some(Kind::Init),
            "app" => Some(Kind::App),
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
