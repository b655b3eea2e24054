//! Whether a pod's node selector and required node affinity match this Node, as upstream's
//! RequiredNodeAffinity (component-helpers): every `spec.nodeSelector` label must be on the
//! Node, and one of the required affinity's terms must match. A term matches when all its
//! `matchExpressions` (on labels) and `matchFields` (only `metadata.name`) hold; an empty
//! term, or a term that does not parse (an unknown operator, values where none belong, a
//! `Gt`/`Lt` value that is not an integer), matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};

/// The one field a `matchFields` requirement may name.
const NODE_NAME_FIELD: &str = "metadata.name";

pub(crate) fn matches(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_holds = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    if !selector_holds {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|r| selector_matches(r, node))
}

/// Whether one of a required node selector's terms matches the Node (also a persistent
/// volume's node affinity, as upstream's CheckNodeAffinity weighs it).
pub(crate) fn selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or_default();
    selector
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, labels, name) == Some(true))
}

/// None when the term is empty or does not parse.
fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> Option<bool> {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return None;
    }
    // Parse every requirement first: one bad requirement spoils the whole term, even when
    // an earlier one already fails to match.
    let mut holds = true;
    for r in expressions {
        holds &= label_requirement(r, labels)?;
    }
    for r in fields {
        holds &= field_requirement(r, name)?;
    }
    Some(holds)
}

/// None when the requirement does not parse.
fn label_requirement(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => None,
        "In" => Some(value.is_some_and(|v| values.contains(v))),
        "NotIn" => Some(value.is_none_or(|v| !values.contains(v))),
        "Exists" | "DoesNotExist" if !values.is_empty() => None,
        "Exists" => Some(value.is_some()),
        "DoesNotExist" => Some(value.is_none()),
        "Gt" | "Lt" => {
            let [bound] = values else { return None };
            let bound: i64 = bound.parse().ok()?;
            // A label that is not an integer does not match (it is not a parse error).
            let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
                return Some(false);
            };
            Some(if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            })
        }
        _ => None,
    }
}

/// None when the requirement does not parse: only `metadata.name`, with `In` or `NotIn`
/// and exactly one value.
fn field_requirement(r: &NodeSelectorRequirement, name: &str) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or_default();
    let [value] = values else { return None };
    if r.key != NODE_NAME_FIELD {
        return None;
    }
    match r.operator.as_str() {
        "In" => Some(name == value),
        "NotIn" => Some(name != value),
        _ => None,
    }
}
