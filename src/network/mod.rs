//! Pod networking, as containerd's CRI plugin does it: a network namespace pinned to a file
//! per pod (`netns`), then CNI ADD/DEL on it (`cni`): the loopback network as `lo`, then the
//! first config of the CNI conf dir as `eth0`. hostNetwork pods skip this module entirely.

pub mod cni;
mod error;
pub mod netns;
pub mod port_forward;

pub use error::NetworkError;
