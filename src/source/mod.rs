//! Pod sources: static pods from a manifest folder (`file`) and a URL (`http`), and the pods
//! the API server binds to this node (`apiserver`). Each source runs as its own task and sends
//! the FULL current set of its pods (SET semantics) on a channel: once when its first read
//! finished, then whenever that set changes.

pub mod api_defaults;
pub mod apiserver;
mod decode;
pub mod file;
pub mod http;
pub mod static_pod;
pub mod validation;

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

pub use apiserver::spawn_api_source;
pub use file::spawn_file_source;
pub use http::spawn_http_source;
pub use validation::{validate_pod, FieldError, FieldErrorKind, ValidationErrors};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    File,
    Http,
    /// The API server (cluster mode).
    Api,
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceKind::File => "file",
            SourceKind::Http => "http",
            SourceKind::Api => "api",
        })
    }
}

/// A pod ready to run (named, defaulted, validated) and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedPod {
    pub pod: Pod,
    /// The manifest's file path or the URL; "api" for the API server's pods.
    pub origin: String,
}

/// The full current set of one source's pods.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceUpdate {
    pub source: SourceKind,
    pub pods: Vec<SourcedPod>,
}

/// Why one manifest (a file, or a URL's body or one item of it) gave no pod.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{origin}: cannot read: {source}")]
    Read {
        origin: String,
        source: std::io::Error,
    },
    #[error("{origin}: cannot parse: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: cannot parse: {source}")]
    Decode {
        origin: String,
        #[source]
        source: decode::DecodeError,
    },
    /// `pod` is the manifest's own metadata.name (empty when it has none).
    #[error("{origin}: invalid pod {pod:?}: {errors}")]
    Invalid {
        origin: String,
        pod: String,
        errors: ValidationErrors,
    },
}

/// Drops pods whose namespace/name repeats an earlier one in the set, as upstream refuses a
/// duplicate static pod name; the error names both origins.
fn drop_duplicate_names(source: SourceKind, pods: Vec<SourcedPod>) -> Vec<SourcedPod> {
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut firsts: Vec<(String, String, String)> = Vec::new();
    let mut kept = Vec::with_capacity(pods.len());
    for sourced in pods {
        let meta = &sourced.pod.metadata;
        let key = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        if seen.insert(key.clone()) {
            firsts.push((key.0, key.1, sourced.origin.clone()));
            kept.push(sourced);
        } else {
            let first = firsts
                .iter()
                .find(|(ns, name, _)| *ns == key.0 && *name == key.1)
                .map(|(_, _, origin)| origin.as_str())
                .unwrap_or_default();
            tracing::error!(
                source = %source,
                pod = %format!("{}/{}", key.0, key.1),
                origin = %sourced.origin,
                "{}: pod {}/{} is already defined by {first}; ignoring this one",
                sourced.origin,
                key.0,
                key.1
            );
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sourced(ns: &str, name: &str, origin: &str) -> SourcedPod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(ns.into());
        pod.metadata.name = Some(name.into());
        SourcedPod {
            pod,
            origin: origin.into(),
        }
    }

    #[test]
    fn source_kind_displays_as_upstream_names_it() {
        assert_eq!(SourceKind::File.to_string(), "file");
        assert_eq!(SourceKind::Http.to_string(), "http");
        assert_eq!(SourceKind::Api.to_string(), "api");
    }

    #[test]
    fn duplicate_names_keep_the_first() {
        let pods = vec![
            sourced("default", "a-n", "/m/1.yaml"),
            sourced("default", "a-n", "/m/2.yaml"),
            sourced("other", "a-n", "/m/3.yaml"),
        ];
        let kept = drop_duplicate_names(SourceKind::File, pods);
        let origins: Vec<&str> = kept.iter().map(|p| p.origin.as_str()).collect();
        assert_eq!(origins, vec!["/m/1.yaml", "/m/3.yaml"]);
    }
}
