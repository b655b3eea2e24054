//! Why the configuration could not be loaded, each as one line naming the flag, file or field.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--help` / `-h`: not a failure; main prints the text to stdout and exits 0.
    #[error("{0}")]
    Help(String),
    #[error("unknown flag: {0} (see --help)")]
    UnknownFlag(String),
    #[error("flag needs an argument: {0}")]
    MissingValue(String),
    #[error("unexpected argument {0:?}: kubelet-rs takes only flags (see --help)")]
    UnexpectedArgument(String),
    #[error("invalid value {value:?} for flag {flag}: {reason}")]
    InvalidFlagValue {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("config file {}: cannot read it: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config dir {}: cannot read it: {source}", path.display())]
    ReadConfigDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: not valid YAML or JSON: {message}", path.display())]
    ParseFile { path: PathBuf, message: String },
    #[error("config file {}: {field} is {value:?}, expected {expected:?}", path.display())]
    WrongType {
        path: PathBuf,
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("config file {}: invalid value {value} for field {field}: {reason}", path.display())]
    InvalidFileField {
        path: PathBuf,
        field: String,
        value: String,
        reason: String,
    },
    /// The merged configuration breaks a rule; `setting` names the file field and its flag.
    #[error("invalid {setting}: {value}: {reason}")]
    Invalid {
        setting: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot determine the node name from the host name (use --hostname-override): {0}")]
    Hostname(String),
}

impl ConfigError {
    /// Process exit code for this outcome: 0 for `--help`, 2 (usage error) for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Help(_) => 0,
            _ => 2,
        }
    }
}
