//! How an exec or attach session ended, in the formats the remotecommand protocols carry on
//! their error stream: `metav1.Status` JSON for v4 and later, the bare failure text before.

use serde_json::{json, Value};

/// The outcome of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStatus {
    Success,
    /// An exec process exited non-zero. `command` is the argv, for upstream's message.
    NonZeroExit {
        command: Vec<String>,
        code: i32,
    },
    /// The runtime failed (container gone, binary not found, I/O error). `message` is
    /// upstream's full text, e.g. `error executing command in container: ...`.
    Internal {
        message: String,
    },
}

impl StreamStatus {
    /// The `metav1.Status` JSON of protocol v4 and v5 (written even on success).
    pub fn v4_json(&self) -> Vec<u8> {
        let v: Value = match self {
            StreamStatus::Success => json!({"metadata": {}, "status": "Success"}),
            StreamStatus::NonZeroExit { command, code } => json!({
                "metadata": {},
                "status": "Failure",
                // Go prints the argv with %v: `[sh -c exit 3]`.
                "message": format!(
                    "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                    command.join(" ")
                ),
                "reason": "NonZeroExitCode",
                // metav1.StatusCause serializes its Type under "reason".
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
            }),
            StreamStatus::Internal { message } => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {message}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": message}]},
                "code": 500,
            }),
        };
        serde_json::to_vec(&v).expect("a json! value always serializes")
    }

    /// The error stream's content in protocols v1 to v3: nothing on success, else the text.
    pub fn legacy_text(&self) -> Vec<u8> {
        match self {
            StreamStatus::Success => Vec::new(),
            StreamStatus::NonZeroExit { command, code } => format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            )
            .into_bytes(),
            StreamStatus::Internal { message } => {
                format!("Internal error occurred: {message}").into_bytes()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_travel_as_upstreams_status_cause() {
        let s = StreamStatus::NonZeroExit {
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
            code: 3,
        };
        let v: Value = serde_json::from_slice(&s.v4_json()).unwrap();
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(v["details"]["causes"][0]["message"], "3");
        assert_eq!(
            v["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
        let ok: Value = serde_json::from_slice(&StreamStatus::Success.v4_json()).unwrap();
        assert_eq!(ok, json!({"metadata": {}, "status": "Success"}));
        assert!(StreamStatus::Success.legacy_text().is_empty());
        let internal = StreamStatus::Internal {
            message: "error executing command in container: not found".into(),
        };
        let v: Value = serde_json::from_slice(&internal.v4_json()).unwrap();
        assert_eq!(v["code"], 500);
        assert_eq!(v["reason"], "InternalError");
    }
}
