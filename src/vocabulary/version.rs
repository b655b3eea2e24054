//! The version the agent gives itself wherever a kubelet reports one (the Node's
//! nodeInfo, kubernetes_build_info).

/// The version the agent reports as kubeletVersion: the Kubernetes release whose kubelet it
/// stands in for, with its own name and version as semver build metadata (as k3s does,
/// `v1.34.4+k3s1`). Build metadata does not change precedence, so the apiserver's and
/// kubectl's skew checks read it as v1.34.4.
pub const KUBELET_VERSION: &str = concat!("v1.34.4+kubelet-rs.", env!("CARGO_PKG_VERSION"));
