//! YAML decoding for manifests and config files, with serde-saphyr (the YAML crate kube-client
//! uses too). Errors are one line and name the field at fault, as a user fixing a manifest
//! needs: `spec.containers[0].ports[0].containerPort: line 9 column 22: invalid i32`.

use std::cell::RefCell;

use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
#[error("{}{}", field_prefix(.path), one_line(.source))]
pub(crate) struct YamlError {
    /// The field at fault, dotted with indices; empty at the top level.
    path: String,
    /// Boxed: the parser's error is large and this travels in every `Result`.
    #[source]
    source: Box<serde_saphyr::Error>,
}

fn field_prefix(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!("{path}: ")
    }
}

fn one_line(e: &serde_saphyr::Error) -> String {
    e.to_string()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decodes one YAML document. A stream of several documents is an error, as it is for the
/// upstream kubelet's decoders, which read one object per file.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let options = serde_saphyr::options! {
        // Snippets are multi-line; the error goes into one log line or pod event.
        with_snippet: false,
    };
    let path = RefCell::new(String::new());
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            *path.borrow_mut() = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|source| YamlError {
        path: path.into_inner(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, serde::Deserialize)]
    struct Port {
        #[serde(rename = "containerPort")]
        _container_port: i32,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Spec {
        _ports: Vec<Port>,
    }

    #[test]
    fn errors_name_the_field_and_fit_on_one_line() {
        let err = from_str::<BTreeMap<String, Spec>>(
            "spec:\n  _ports:\n  - containerPort: 80\n  - containerPort: eighty\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("spec._ports[1].containerPort: "), "{err}");
        assert!(err.contains("line 4"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn one_document_only() {
        let v: BTreeMap<String, i32> = from_str("a: 1\n").unwrap();
        assert_eq!(v["a"], 1);
        let v: BTreeMap<String, i32> = from_str("---\na: 1\n...\n").unwrap();
        assert_eq!(v["a"], 1);
        assert!(from_str::<BTreeMap<String, i32>>("a: 1\n---\nb: 2\n").is_err());
        assert!(from_str::<BTreeMap<String, i32>>("a: [1\n").is_err());
    }
}
