//! Running one CNI plugin binary: CNI_* environment, config on stdin, result or CNI error
//! JSON on stdout, all under a deadline.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::network::NetworkError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CniCommand {
    Add,
    Del,
}

impl CniCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
        }
    }
}

/// The per-attachment part of a plugin's environment.
#[derive(Debug, Clone)]
pub(crate) struct Invocation<'a> {
    pub command: CniCommand,
    pub container_id: &'a str,
    /// Empty on DEL when the namespace is already gone, which the spec allows.
    pub netns: &'a str,
    pub ifname: &'a str,
    pub cni_args: &'a str,
}

/// Plugin binaries replaced in place (package upgrades) or freshly written ones can be
/// briefly busy for exec; libcni retries these too.
const TEXT_FILE_BUSY_RETRIES: u32 = 5;

pub(crate) struct PluginRunner<'a> {
    pub bin_dirs: &'a [PathBuf],
    pub timeout: Duration,
}

impl PluginRunner<'_> {
    /// Runs `plugin_type` and returns its stdout parsed as JSON (None when empty, which is
    /// normal for DEL).
    pub async fn run(
        &self,
        plugin_type: &str,
        network: &str,
        inv: &Invocation<'_>,
        stdin_config: &Value,
    ) -> Result<Option<Value>, NetworkError> {
        let path = self.find(plugin_type, network)?;
        let stdin_bytes =
            serde_json::to_vec(stdin_config).expect("a serde_json::Value always serializes");
        let command = inv.command.as_str();
        let failed = |message: String, code: Option<u32>| NetworkError::PluginFailed {
            plugin: plugin_type.to_string(),
            network: network.to_string(),
            command,
            sandbox: inv.container_id.to_string(),
            code,
            message,
        };

        let mut child = self.spawn(&path, plugin_type, network, inv).await?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let feed = async move {
            // A plugin may exit without reading its config (e.g. on a usage error); its exit
            // status tells that story better than EPIPE would.
            let _ = stdin.write_all(&stdin_bytes).await;
            drop(stdin);
        };
        let waited = tokio::time::timeout(self.timeout, async {
            let ((), output) = tokio::join!(feed, child.wait_with_output());
            output
        })
        .await;
        // On timeout the child future was dropped, and kill_on_drop has killed the plugin.
        let output = match waited {
            Err(_) => {
                return Err(NetworkError::PluginTimeout {
                    plugin: plugin_type.to_string(),
                    network: network.to_string(),
                    command,
                    sandbox: inv.container_id.to_string(),
                    timeout: self.timeout,
                })
            }
            Ok(Err(source)) => {
                return Err(NetworkError::PluginSpawn {
                    plugin: plugin_type.to_string(),
                    network: network.to_string(),
                    path,
                    source,
                })
            }
            Ok(Ok(output)) => output,
        };

        let stderr = String::from_utf8_lossy(&output.stderr);
        if !stderr.trim().is_empty() {
            tracing::debug!(plugin = plugin_type, network, command, sandbox = inv.container_id, stderr = %stderr.trim(), "CNI plugin stderr");
        }
        let stdout = output.stdout.trim_ascii();
        if !output.status.success() {
            return Err(match serde_json::from_slice::<Value>(stdout) {
                Ok(err_json) if err_json.get("msg").is_some() || err_json.get("code").is_some() => {
                    failed(
                        describe_cni_error(&err_json),
                        err_json
                            .get("code")
                            .and_then(Value::as_u64)
                            .and_then(|c| u32::try_from(c).ok()),
                    )
                }
                _ => {
                    let text = if stderr.trim().is_empty() {
                        String::from_utf8_lossy(stdout).trim().to_string()
                    } else {
                        stderr.trim().to_string()
                    };
                    let status = output.status;
                    failed(
                        if text.is_empty() {
                            format!("exited with {status}")
                        } else {
                            format!("exited with {status}: {text}")
                        },
                        None,
                    )
                }
            });
        }
        if stdout.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(stdout)
            .map(Some)
            .map_err(|e| NetworkError::BadResult {
                plugin: plugin_type.to_string(),
                network: network.to_string(),
                command,
                sandbox: inv.container_id.to_string(),
                reason: format!(
                    "stdout is not JSON ({e}): {}",
                    String::from_utf8_lossy(stdout)
                ),
            })
    }

    fn find(&self, plugin_type: &str, network: &str) -> Result<PathBuf, NetworkError> {
        self.bin_dirs
            .iter()
            .map(|dir| dir.join(plugin_type))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
            .ok_or_else(|| NetworkError::PluginNotFound {
                plugin: plugin_type.to_string(),
                network: network.to_string(),
                dirs: self.cni_path(),
            })
    }

    fn cni_path(&self) -> String {
        let dirs: Vec<_> = self.bin_dirs.iter().map(|d| d.to_string_lossy()).collect();
        dirs.join(":")
    }

    async fn spawn(
        &self,
        path: &Path,
        plugin_type: &str,
        network: &str,
        inv: &Invocation<'_>,
    ) -> Result<tokio::process::Child, NetworkError> {
        let mut attempt = 0;
        loop {
            // The inherited environment stays: plugins such as portmap need PATH for iptables.
            let spawned = Command::new(path)
                .env("CNI_COMMAND", inv.command.as_str())
                .env("CNI_CONTAINERID", inv.container_id)
                .env("CNI_NETNS", inv.netns)
                .env("CNI_IFNAME", inv.ifname)
                .env("CNI_ARGS", inv.cni_args)
                .env("CNI_PATH", self.cni_path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn();
            match spawned {
                Ok(child) => return Ok(child),
                Err(e)
                    if e.raw_os_error() == Some(libc::ETXTBSY)
                        && attempt < TEXT_FILE_BUSY_RETRIES =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
                Err(source) => {
                    return Err(NetworkError::PluginSpawn {
                        plugin: plugin_type.to_string(),
                        network: network.to_string(),
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }
}

/// "msg: details (code N)", from the CNI error object `{cniVersion, code, msg, details}`.
fn describe_cni_error(err: &Value) -> String {
    let msg = err.get("msg").and_then(Value::as_str).unwrap_or("").trim();
    let details = err
        .get("details")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    let mut text = match (msg.is_empty(), details.is_empty()) {
        (false, false) => format!("{msg}: {details}"),
        (false, true) => msg.to_string(),
        (true, false) => details.to_string(),
        (true, true) => "no message".to_string(),
    };
    if let Some(code) = err.get("code").and_then(Value::as_u64) {
        text.push_str(&format!(" (CNI error code {code})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cni_error_text_carries_message_details_and_code() {
        assert_eq!(
            describe_cni_error(
                &json!({"code": 11, "msg": "failed to allocate", "details": "range full"})
            ),
            "failed to allocate: range full (CNI error code 11)"
        );
        assert_eq!(describe_cni_error(&json!({"msg": "boom"})), "boom");
    }
}
