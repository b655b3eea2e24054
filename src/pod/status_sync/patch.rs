//! The status patch as upstream sends it (pkg/util/pod PatchPodStatus): a two-way strategic
//! merge patch from the API's status to the new one, carrying the pod's UID as
//! `metadata.uid` so the API refuses it for another pod of the same name. Lists the API
//! merges by key (conditions by type, pod and host IPs by ip, resource claims by name) are
//! patched item by item, so a condition another controller adds meanwhile survives; every
//! other list is replaced whole.

use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{json, Map, Value};

/// The merge key of each list the API merges under `status`.
fn merge_key(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" => Some("type"),
        "status.podIPs" | "status.hostIPs" => Some("ip"),
        "status.resourceClaimStatuses" => Some("name"),
        _ => None,
    }
}

/// The patch turning `old` into `new`, or `None` when they are the same.
pub(crate) fn status_patch(uid: &str, old: &PodStatus, new: &PodStatus) -> Option<Value> {
    // PodStatus holds only strings, numbers, lists and maps: it always serializes.
    let old = serde_json::to_value(old).unwrap_or_default();
    let new = serde_json::to_value(new).unwrap_or_default();
    let empty = Map::new();
    let diff = diff_object(
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
        "status",
    )?;
    Some(json!({ "metadata": { "uid": uid }, "status": diff }))
}

fn diff_object(old: &Map<String, Value>, new: &Map<String, Value>, path: &str) -> Option<Value> {
    let mut out = Map::new();
    for (k, n) in new {
        let at = format!("{path}.{k}");
        match (old.get(k), n) {
            (Some(o), n) if o == n => {}
            (None, Value::Null) => {}
            (Some(Value::Object(o)), Value::Object(n)) => {
                if let Some(d) = diff_object(o, n, &at) {
                    out.insert(k.clone(), d);
                }
            }
            (Some(Value::Array(o)), Value::Array(n)) => match merge_key(&at) {
                Some(key) => diff_keyed_list(o, n, key, k, &mut out),
                None => {
                    out.insert(k.clone(), Value::Array(n.clone()));
                }
            },
            (_, n) => {
                out.insert(k.clone(), n.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// A merged list: changed and new items (changed ones as their own diff plus the key),
/// removed items as `$patch: delete`, and the new order as `$setElementOrder/<list>`.
fn diff_keyed_list(
    old: &[Value],
    new: &[Value],
    key: &str,
    field: &str,
    out: &mut Map<String, Value>,
) {
    let key_of = |v: &Value| v.get(key).cloned().unwrap_or(Value::Null);
    let mut items = Vec::new();
    for n in new {
        let k = key_of(n);
        match old.iter().find(|o| key_of(o) == k) {
            None => items.push(n.clone()),
            Some(o) if o == n => {}
            Some(o) => {
                let empty = Map::new();
                let d = diff_object(
                    o.as_object().unwrap_or(&empty),
                    n.as_object().unwrap_or(&empty),
                    "",
                );
                if let Some(Value::Object(mut d)) = d {
                    d.insert(key.to_string(), k);
                    items.push(Value::Object(d));
                }
            }
        }
    }
    let new_keys: Vec<Value> = new.iter().map(key_of).collect();
    for o in old {
        let k = key_of(o);
        if !new_keys.contains(&k) {
            items.push(json!({ key: k, "$patch": "delete" }));
        }
    }
    let old_keys: Vec<Value> = old.iter().map(key_of).collect();
    if items.is_empty() && old_keys == new_keys {
        return;
    }
    if !items.is_empty() {
        out.insert(field.to_string(), Value::Array(items));
    }
    out.insert(
        format!("$setElementOrder/{field}"),
        Value::Array(new_keys.into_iter().map(|k| json!({ key: k })).collect()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_unchanged_status_gives_no_patch() {
        let s = status(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(status_patch("u1", &s, &s), None);
    }

    #[test]
    fn conditions_are_patched_by_type_and_other_lists_whole() {
        let old = status(json!({
            "phase": "Pending",
            "message": "waiting",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "Initialized", "status": "True"},
                {"type": "Gone", "status": "True"}
            ],
            "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0},
                {"name": "b", "image": "i", "imageID": "", "ready": false, "restartCount": 0}
            ]
        }));
        let new = status(json!({
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"}
            ],
            "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0},
                {"name": "b", "image": "i", "imageID": "", "ready": false, "restartCount": 0}
            ]
        }));
        let patch = status_patch("u1", &old, &new).unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"uid": "u1"},
                "status": {
                    "phase": "Running",
                    "message": null,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": null},
                        {"type": "Gone", "$patch": "delete"}
                    ],
                    "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
                    "containerStatuses": new.container_statuses
                }
            })
        );
    }
}
