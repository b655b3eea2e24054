//! Lifecycle hooks (postStart, preStop): exec, httpGet and sleep handlers, with upstream's
//! failure messages. Unlike probes, an HTTP hook fails only when no response arrives: the
//! status code does not matter.

use std::time::Duration;

use k8s_openapi::api::core::v1::LifecycleHandler;

use super::address::user_agent;
use super::{http, ExecError, ExecRunner, ProbeTarget};
use crate::runtime::exec::exec_to_end;

/// Runs one lifecycle handler within `timeout`; `Err` carries the message upstream would
/// record (naming the hook, the container and the pod).
pub async fn run_handler(
    h: &LifecycleHandler,
    target: &ProbeTarget,
    exec: &dyn ExecRunner,
    timeout: Duration,
) -> Result<(), String> {
    let who = format!("Container {:?} in Pod {:?}", target.container, target.pod);
    if let Some(action) = &h.exec {
        let cmd = action.command.clone().unwrap_or_default();
        let shown = format!("[{}]", cmd.join(" "));
        let joined = cmd.join(" ");
        // On a task of its own: a preStop hook is cut short when the grace period shrinks.
        return match exec_to_end(exec, target.container_id.clone(), cmd, timeout).await {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => {
                let mut output = r.stdout;
                output.extend_from_slice(&r.stderr);
                Err(format!(
                    "Exec lifecycle hook ({shown}) for {who} failed - error: command '{joined}' exited with {}: {}, message: {:?}",
                    r.exit_code,
                    String::from_utf8_lossy(&r.stderr),
                    String::from_utf8_lossy(&output)
                ))
            }
            Err(ExecError::TimedOut(after)) => Err(format!(
                "Exec lifecycle hook ({shown}) for {who} failed - error: command '{joined}' timed out after {}, message: \"\"",
                super::action::go_duration(after)
            )),
            Err(ExecError::Failed(e)) => Err(format!(
                "Exec lifecycle hook ({shown}) for {who} failed - error: {e}, message: \"\""
            )),
        };
    }
    if let Some(action) = &h.http_get {
        let path = action.path.clone().unwrap_or_default();
        let fail =
            |e: String| format!("HTTP lifecycle hook ({path}) for {who} failed - error: {e}");
        let req = http::request_for(action, target).map_err(fail)?;
        return http::get(&req, &user_agent("lifecycle"), timeout)
            .await
            .map(|_| ())
            .map_err(|e| fail(e.to_string()));
    }
    if let Some(action) = &h.sleep {
        let wanted = Duration::from_secs(action.seconds.max(0) as u64);
        if wanted > timeout {
            tokio::time::sleep(timeout).await;
            return Err(format!(
                "Sleep lifecycle hook ({}) for {who} failed - error: container terminated before sleep hook finished",
                action.seconds
            ));
        }
        tokio::time::sleep(wanted).await;
        return Ok(());
    }
    // The API keeps tcpSocket in LifecycleHandler for compatibility only; upstream fails
    // such hooks at run time.
    let what = if h.tcp_socket.is_some() {
        "tcpSocket is not supported as a lifecycle handler"
    } else {
        "no action set"
    };
    Err(format!(
        "Cannot run handler for {who}: invalid handler: {what}"
    ))
}
