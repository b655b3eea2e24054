use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while pinning a network namespace or running CNI plugins.
/// Each variant names the file, plugin, network or sandbox at fault.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("invalid network namespace name {name:?}: {reason}")]
    InvalidNetnsName { name: String, reason: &'static str },

    #[error("network namespace {path}: {action} failed: {source}")]
    Netns {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("network namespace {path}: the helper thread died before answering")]
    NetnsThread { path: PathBuf },

    /// Upstream's NetworkPluginNotReady: pods that need a network wait until a config appears.
    #[error("network not ready: no CNI network config (*.conf, *.conflist, *.json) in {dir}")]
    NoConfig { dir: PathBuf },

    #[error("reading CNI config {path}: {source}")]
    ConfigIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid CNI config {file}: {source}")]
    InvalidConfig {
        file: PathBuf,
        #[source]
        source: Box<super::cni::ConfigError>,
    },

    #[error("CNI plugin {plugin:?} of network {network:?} not found in {dirs}")]
    PluginNotFound {
        plugin: String,
        network: String,
        dirs: String,
    },

    #[error(
        "CNI plugin {plugin:?} of network {network:?} could not be started ({path}): {source}"
    )]
    PluginSpawn {
        plugin: String,
        network: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("CNI plugin {plugin:?} of network {network:?} timed out after {timeout:?} on {command} for sandbox {sandbox}")]
    PluginTimeout {
        plugin: String,
        network: String,
        command: &'static str,
        sandbox: String,
        timeout: Duration,
    },

    /// The plugin exited non-zero; `code` is the CNI error code when it printed a CNI error.
    #[error("CNI plugin {plugin:?} of network {network:?} failed {command} for sandbox {sandbox}: {message}")]
    PluginFailed {
        plugin: String,
        network: String,
        command: &'static str,
        sandbox: String,
        code: Option<u32>,
        message: String,
    },

    #[error("CNI plugin {plugin:?} of network {network:?} returned an unusable result on {command} for sandbox {sandbox}: {reason}")]
    BadResult {
        plugin: String,
        network: String,
        command: &'static str,
        sandbox: String,
        reason: String,
    },

    /// A result whose addresses cannot be read (the same message as [`Self::BadResult`]).
    #[error("CNI plugin {plugin:?} of network {network:?} returned an unusable result on {command} for sandbox {sandbox}: {source}")]
    BadAddresses {
        plugin: String,
        network: String,
        command: &'static str,
        sandbox: String,
        #[source]
        source: Box<super::cni::ResultError>,
    },

    #[error("CNI network {network:?} gave sandbox {sandbox} no IP address on {ifname}")]
    NoAddress {
        network: String,
        sandbox: String,
        ifname: String,
    },

    #[error("invalid network attach request for sandbox {sandbox:?}: {reason}")]
    InvalidRequest { sandbox: String, reason: String },

    #[error("CNI result cache {path}: {source}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
