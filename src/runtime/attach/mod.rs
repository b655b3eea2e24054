//! `kubectl attach`: the container's own stdio, for containers with `stdin` or `tty`.
//!
//! Such containers get FIFO stdio instead of the `binary://` logger (containerd 1.6's shim
//! drops stdin with binary IO). A detached io relay ([`relay`], the agent's executable in
//! relay mode) owns the FIFOs for the container's whole life: it writes the CRI log as the
//! logger does, holds stdin open, and serves attach sessions on a unix socket in the
//! container's directory ([`protocol`]). The agent starts it before the task ([`spawn`])
//! and connects to it for each `kubectl attach` ([`client`]).
//!
//! Containers without stdin or tty keep the logger; attaching to them streams nothing and
//! ends when the container stops (containerd's CRI plugin streams their output, but from
//! the log file that would be a second follower next to `kubectl logs -f`; not built).

pub mod client;
pub mod protocol;
pub mod relay;
pub mod spawn;

use std::path::{Path, PathBuf};

pub use relay::{is_relay_invocation, run_relay, RelayConfig};

/// Where the relays' per-container directories live (FIFOs and socket; tmpfs, like the
/// exec FIFOs next to it). A socket path must stay under 108 bytes: this base, a 64-hex
/// container id and `/attach.sock` make 99.
pub const RELAY_BASE_DIR: &str = "/run/kubelet-rs/attach";

/// The relay directory of one container.
pub fn relay_dir(base: &Path, container_id: &str) -> PathBuf {
    base.join(container_id)
}

/// Whether a container needs the relay: upstream gives a container FIFO stdio when it has
/// stdin or a terminal.
pub fn needs_relay(c: &k8s_openapi::api::core::v1::Container) -> bool {
    c.stdin == Some(true) || c.tty == Some(true)
}
