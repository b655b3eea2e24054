//! Turning manifest bytes (YAML or JSON) into pods, choosing Pod or PodList by `kind`.

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

pub(crate) enum Manifest {
    Pod(Box<Pod>),
    List(Vec<Pod>),
}

#[derive(Deserialize)]
struct TypeMeta {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
}

#[derive(Deserialize)]
struct PodListBody {
    #[serde(default)]
    items: Option<Vec<Pod>>,
}

/// Why bytes are no Pod or PodList. Every message is one line: it goes into one log line or
/// pod event.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not UTF-8 text: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    #[error("the manifest is empty")]
    Empty,
    #[error("apiVersion is {0:?}, expected \"v1\"")]
    ApiVersion(String),
    #[error("apiVersion: Required value (expected \"v1\")")]
    NoApiVersion,
    #[error("kind is {0:?}, expected \"Pod\" or \"PodList\"")]
    Kind(String),
    #[error("kind: Required value (expected \"Pod\" or \"PodList\")")]
    NoKind,
    /// serde_json may quote a multi-line value; its lines are joined.
    #[error("{}", .0.to_string().replace('\n', " "))]
    Json(#[source] serde_json::Error),
    #[error(transparent)]
    Yaml(#[from] YamlFailure),
}

/// The YAML parser's error: already one line (no snippets), with the path of the field at
/// fault. A wrapper, as the crate's YAML error type is not public.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct YamlFailure(#[from] crate::yaml::YamlError);

/// Decodes one Pod or one PodList. The error is one line; the YAML parser's messages carry the
/// path of the field at fault (e.g. `spec.containers[0].ports[0].containerPort: invalid type`).
pub(crate) fn decode_manifest(bytes: &[u8]) -> Result<Manifest, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(DecodeError::Utf8)?;
    if text.trim().is_empty() {
        return Err(DecodeError::Empty);
    }
    let meta: TypeMeta = from_text(text)?;
    match meta.api_version.as_deref() {
        Some("v1") => {}
        Some(other) => return Err(DecodeError::ApiVersion(other.to_string())),
        None => return Err(DecodeError::NoApiVersion),
    }
    match meta.kind.as_deref() {
        Some("Pod") => Ok(Manifest::Pod(Box::new(from_text(text)?))),
        Some("PodList") => {
            let list: PodListBody = from_text(text)?;
            Ok(Manifest::List(list.items.unwrap_or_default()))
        }
        Some(other) => Err(DecodeError::Kind(other.to_string())),
        None => Err(DecodeError::NoKind),
    }
}

fn from_text<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, DecodeError> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(DecodeError::Json)
    } else {
        crate::yaml::from_str(text).map_err(|e| DecodeError::Yaml(e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_yaml_and_json_pods() {
        let yaml = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
        let Manifest::Pod(pod) = decode_manifest(yaml).unwrap() else {
            panic!("expected a pod")
        };
        assert_eq!(pod.metadata.name.as_deref(), Some("web"));
        let json = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"a","image":"b"}]}}"#;
        assert!(
            matches!(decode_manifest(json).unwrap(), Manifest::Pod(p) if p.metadata.name.as_deref() == Some("j"))
        );
    }

    #[test]
    fn decodes_pod_lists() {
        let yaml = b"apiVersion: v1\nkind: PodList\nitems:\n- metadata:\n    name: a\n- metadata:\n    name: b\n";
        let Manifest::List(pods) = decode_manifest(yaml).unwrap() else {
            panic!("expected a list")
        };
        assert_eq!(pods.len(), 2);
        assert!(matches!(
            decode_manifest(b"apiVersion: v1\nkind: PodList\n").unwrap(),
            Manifest::List(p) if p.is_empty()
        ));
    }

    #[test]
    fn errors_are_one_line_and_name_the_problem() {
        assert_eq!(
            decode_manifest(b"apiVersion: v1\nkind: Deployment\n")
                .err()
                .unwrap()
                .to_string(),
            "kind is \"Deployment\", expected \"Pod\" or \"PodList\""
        );
        assert!(decode_manifest(b"kind: Pod\n")
            .err()
            .unwrap()
            .to_string()
            .starts_with("apiVersion"));
        assert!(decode_manifest(b"   \n").is_err());
        let err = decode_manifest(
            b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: a\n    ports:\n    - containerPort: eighty\n",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("spec.containers[0].ports[0].containerPort"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn several_documents_in_one_file_are_an_error() {
        let two = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n";
        let err = decode_manifest(two).err().unwrap().to_string();
        assert!(err.contains("document"), "{err}");
        // A leading document marker alone is one document.
        let one = b"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n";
        assert!(matches!(decode_manifest(one).unwrap(), Manifest::Pod(_)));
    }
}
