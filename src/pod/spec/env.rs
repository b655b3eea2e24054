//! A container's environment as upstream's kubelet makes it (`makeEnvironmentVariables`):
//! envFrom first (each ConfigMap's or Secret's keys, with the prefix), then `env` in the
//! order declared, a later variable replacing an earlier one of the same name; the result
//! goes over the image's variables. A `value` expands `$(VAR)` against the variables
//! declared before it, envFrom's included (the image's are not: upstream does not know
//! them); values read from objects and fields are taken as they are.
//!
//! The Services' variables (see `service_env`) come last, each unless the container
//! declares a variable of that name, and `$(VAR)` expands to them too.
//!
//! The ConfigMaps and Secrets are fetched by the worker beforehand ([`EnvObjects`]), so the
//! environment is computed without I/O. Upstream's 1.34 takes envFrom keys as they are:
//! relaxed variable-name validation went GA, so no key is skipped and no
//! InvalidEnvironmentVariableNames event is recorded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Pod, Secret};

use super::{spec_err, PodContext};
use crate::objects::{ObjectError, ObjectKind};
use crate::runtime::images::{split_env, ImageConfig};
use crate::runtime::RuntimeError;
use crate::volume::resource_value;

/// An object as the worker's fetch left it. The error is shared: one missing object may be
/// the answer to several references.
type Fetched<T> = Result<Arc<T>, Arc<ObjectError>>;

/// The ConfigMaps and Secrets (of the pod's namespace) that a container's env and envFrom
/// refer to, fetched before its environment is made.
#[derive(Debug, Default, Clone)]
pub struct EnvObjects {
    config_maps: HashMap<String, Fetched<ConfigMap>>,
    secrets: HashMap<String, Fetched<Secret>>,
    /// The Services' variables the pod sees; `None`: none (not asked for).
    services: Option<Result<BTreeMap<String, String>, Arc<ObjectError>>>,
}

impl EnvObjects {
    /// The Services' variables, or why the Services could not be read.
    pub fn set_service_env(&mut self, env: Result<BTreeMap<String, String>, ObjectError>) {
        self.services = Some(env.map_err(Arc::new));
    }

    pub fn insert_config_map(&mut self, name: &str, got: Result<Arc<ConfigMap>, ObjectError>) {
        self.config_maps
            .insert(name.to_string(), got.map_err(Arc::new));
    }

    pub fn insert_secret(&mut self, name: &str, got: Result<Arc<Secret>, ObjectError>) {
        self.secrets.insert(name.to_string(), got.map_err(Arc::new));
    }

    /// The object, `None` for a missing optional one (upstream skips the reference).
    fn get<'a, T>(
        map: &'a HashMap<String, Fetched<T>>,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<&'a T>, EnvError> {
        match map.get(name) {
            Some(Ok(o)) => Ok(Some(o)),
            Some(Err(e)) if optional && e.is_not_found() => Ok(None),
            Some(Err(e)) => Err(match e.as_ref() {
                ObjectError::Standalone { .. } => EnvError::NoClient {
                    kind: match kind {
                        ObjectKind::ConfigMap => "configMap",
                        ObjectKind::Secret => "secret",
                    },
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
                _ => EnvError::Object(e.clone()),
            }),
            None => Err(EnvError::NotFetched {
                kind,
                name: name.to_string(),
            }),
        }
    }

    fn config_map(
        &self,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<&ConfigMap>, EnvError> {
        Self::get(
            &self.config_maps,
            ObjectKind::ConfigMap,
            namespace,
            name,
            optional,
        )
    }

    fn secret(
        &self,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<&Secret>, EnvError> {
        Self::get(&self.secrets, ObjectKind::Secret, namespace, name, optional)
    }
}

/// The names of the ConfigMaps and Secrets a container's envFrom and env refer to, each
/// once, in the order they are first referred to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnvReferences {
    pub config_maps: Vec<String>,
    pub secrets: Vec<String>,
}

pub fn env_references(c: &Container) -> EnvReferences {
    let mut refs = EnvReferences::default();
    let add = |list: &mut Vec<String>, name: &str| {
        if !list.iter().any(|n| n == name) {
            list.push(name.to_string());
        }
    };
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            add(&mut refs.config_maps, &r.name);
        }
        if let Some(r) = &from.secret_ref {
            add(&mut refs.secrets, &r.name);
        }
    }
    for from in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
        if let Some(r) = &from.config_map_key_ref {
            add(&mut refs.config_maps, &r.name);
        }
        if let Some(r) = &from.secret_key_ref {
            add(&mut refs.secrets, &r.name);
        }
    }
    refs
}

/// Why a container's environment cannot be made; the message is upstream's, which the
/// container's CreateContainerConfigError carries.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The object could not be read: `configmap "x" not found`, or the API's failure.
    #[error(transparent)]
    Object(Arc<ObjectError>),
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        /// `ConfigMap` or `Secret`, as upstream spells them here.
        kind: &'static str,
        key: String,
        namespace: String,
        name: String,
    },
    /// A node without an API server cannot read objects (a static pod's references).
    #[error("couldn't get {kind} {namespace}/{name}, no kubeClient defined")]
    NoClient {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The caller fetched less than `env_references` names.
    #[error("{kind} {name:?} was not fetched before the container's environment was made")]
    NotFetched { kind: ObjectKind, name: String },
    /// A fieldRef or resourceFieldRef that cannot be resolved.
    #[error(transparent)]
    Spec(#[from] RuntimeError),
}

/// Variables in the order first declared; setting one again replaces its value in place.
#[derive(Default)]
struct Vars {
    list: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl Vars {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.list[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.list.len());
                self.list.push((name, value));
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.list[i].1.as_str())
    }
}

/// Secret values are bytes; upstream passes them on as a string, and the runtime's JSON
/// turns bytes that are not UTF-8 into U+FFFD, as this does.
fn secret_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn data_of(cm: &ConfigMap) -> impl Iterator<Item = (&String, &String)> {
    cm.data.iter().flat_map(BTreeMap::iter)
}

/// `$(VAR)` expansion as upstream: `$$` is a literal `$`, an undefined `$(VAR)` stays as it
/// is, and a `$` not followed by `(` or `$` is kept.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Value of an env var's `fieldRef`, from the pod object and what the agent knows of it.
fn field_ref(pod: &Pod, ctx: &PodContext, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let from_map = |m: &Option<BTreeMap<String, String>>, key: &str| {
        m.as_ref().and_then(|m| m.get(key).cloned())
    };
    let bracket = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(ctx.node_name.clone()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        "status.hostIP" | "status.hostIPs" => Some(ctx.host_ip.clone()),
        "status.podIP" => Some(ctx.pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Some(ctx.pod_ips.join(",")),
        _ => {
            if let Some(k) = bracket("metadata.labels") {
                from_map(&meta.labels, &k)
            } else if let Some(k) = bracket("metadata.annotations") {
                from_map(&meta.annotations, &k)
            } else {
                None
            }
        }
    }
}

/// The container's environment: the image's variables, overridden by the container's own
/// (envFrom, then env) as upstream makes them.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    ctx: &PodContext,
    objects: &EnvObjects,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = ctx.pod_namespace.as_str();
    // As upstream, a pod whose Services cannot be read gets no environment at all.
    let no_services = BTreeMap::new();
    let services = match &objects.services {
        Some(Err(e)) => return Err(EnvError::Object(e.clone())),
        Some(Ok(s)) => s,
        None => &no_services,
    };
    let mut own = Vars::default();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        if let Some(r) = &from.config_map_ref {
            if let Some(cm) = objects.config_map(ns, &r.name, r.optional == Some(true))? {
                for (k, v) in data_of(cm) {
                    own.set(format!("{prefix}{k}"), v.clone());
                }
            }
        } else if let Some(r) = &from.secret_ref {
            if let Some(s) = objects.secret(ns, &r.name, r.optional == Some(true))? {
                for (k, v) in s.data.iter().flatten() {
                    own.set(format!("{prefix}{k}"), secret_text(&v.0));
                }
            }
        }
    }
    for (
        i,
        EnvVar {
            name,
            value,
            value_from,
        },
    ) in c.env.iter().flatten().enumerate()
    {
        let field = format!("env[{i}]");
        let value = value.as_deref().filter(|v| !v.is_empty());
        let v = match (value, value_from) {
            (Some(v), _) => expand(v, &|n| {
                own.get(n)
                    .or_else(|| services.get(n).map(String::as_str))
                    .map(str::to_string)
            }),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    field_ref(pod, ctx, &f.field_path).ok_or_else(|| {
                        spec_err(
                            &c.name,
                            &format!("{field}.valueFrom.fieldRef.fieldPath"),
                            format!("unsupported field path {:?}", f.field_path),
                        )
                    })?
                } else if let Some(r) = &from.resource_field_ref {
                    // An empty containerName means the container being started, as upstream.
                    let target = r
                        .container_name
                        .as_deref()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(&c.name);
                    resource_value(
                        pod,
                        target,
                        &r.resource,
                        r.divisor.as_ref(),
                        &ctx.allocatable(),
                    )
                    .map_err(|(sub, reason)| {
                        spec_err(
                            &c.name,
                            &format!("{field}.valueFrom.resourceFieldRef.{sub}"),
                            reason,
                        )
                    })?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    let Some(cm) = objects.config_map(ns, &r.name, optional)? else {
                        continue;
                    };
                    match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError::MissingKey {
                                kind: "ConfigMap",
                                key: r.key.clone(),
                                namespace: ns.to_string(),
                                name: r.name.clone(),
                            })
                        }
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    let Some(s) = objects.secret(ns, &r.name, optional)? else {
                        continue;
                    };
                    match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => secret_text(&v.0),
                        None if optional => continue,
                        None => {
                            return Err(EnvError::MissingKey {
                                kind: "Secret",
                                key: r.key.clone(),
                                namespace: ns.to_string(),
                                name: r.name.clone(),
                            })
                        }
                    }
                } else {
                    // fileKeyRef sits behind the EnvFiles gate, off in 1.34: upstream then
                    // sets the variable empty, as here.
                    String::new()
                }
            }
            (None, None) => String::new(),
        };
        own.set(name.clone(), v);
    }
    let mut env = Vars::default();
    for (k, v) in split_env(image.env.as_deref().unwrap_or(&[])) {
        env.set(k, v);
    }
    for (k, v) in services {
        if own.get(k).is_none() {
            env.set(k.clone(), v.clone());
        }
    }
    for (k, v) in own.list {
        env.set(k, v);
    }
    Ok(env.list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fake::FakeObjects;
    use crate::objects::{ClusterObjects, Standalone};
    use k8s_openapi::ByteString;
    use serde_json::{json, Value};

    /// The spec tests' context, in namespace `ns` (the messages name it).
    fn ctx() -> PodContext {
        PodContext {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            hostname: "p".into(),
            netns_path: None,
            ..super::super::tests::ctx()
        }
    }

    fn image() -> ImageConfig {
        ImageConfig {
            entrypoint: None,
            cmd: None,
            env: Some(vec!["PATH=/bin".into(), "A=image".into()]),
            working_dir: None,
            user: None,
            stop_signal: None,
        }
    }

    fn container(c: Value) -> (Pod, Container) {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [c]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    fn config_map(name: &str, data: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"}, "data": data
        }))
        .unwrap()
    }

    fn secret(name: &str, data: &[(&str, &[u8])]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        );
        s
    }

    /// What the worker does before `container_env`.
    async fn fetch(objects: &dyn ClusterObjects, c: &Container) -> EnvObjects {
        let refs = env_references(c);
        let mut out = EnvObjects::default();
        for n in &refs.config_maps {
            out.insert_config_map(n, objects.config_map("ns", n).await);
        }
        for n in &refs.secrets {
            out.insert_secret(n, objects.secret("ns", n).await);
        }
        out
    }

    async fn env_of(
        objects: &dyn ClusterObjects,
        c: Value,
    ) -> Result<Vec<(String, String)>, EnvError> {
        let (p, c) = container(c);
        let fetched = fetch(objects, &c).await;
        container_env(&p, &c, &image(), &ctx(), &fetched)
    }

    fn objects() -> FakeObjects {
        let o = FakeObjects::default();
        o.put_config_map(config_map(
            "cfg",
            json!({"A": "cm-a", "B": "cm-b", "REF": "$(B)"}),
        ));
        o.put_secret(secret("sec", &[("S", b"s3cret"), ("A", b"sec-a")]));
        o
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn env_from_comes_first_then_env_and_a_later_name_replaces_an_earlier_one() {
        let env = env_of(
            &objects(),
            json!({"name": "c", "image": "i",
            "envFrom": [
                {"configMapRef": {"name": "cfg"}, "prefix": "CM_"},
                {"secretRef": {"name": "sec"}},
            ],
            "env": [
                {"name": "A", "value": "own"},
                {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}},
                {"name": "P", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "S"}}},
                {"name": "CM_B", "value": "over"},
            ]}),
        )
        .await
        .unwrap();
        assert_eq!(
            env,
            pairs(&[
                // The image's first; the container's A replaces the image's in place.
                ("PATH", "/bin"),
                ("A", "own"),
                ("CM_A", "cm-a"),
                ("CM_B", "over"),
                ("CM_REF", "$(B)"),
                ("S", "s3cret"),
                ("K", "cm-b"),
                ("P", "s3cret"),
            ])
        );
    }

    #[test]
    fn service_variables_come_unless_declared_and_values_expand_them() {
        let (p, c) = container(json!({"name": "c", "image": "i", "env": [
            {"name": "WEB_SERVICE_PORT", "value": "own"},
            {"name": "URL", "value": "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"},
        ]}));
        let mut fetched = EnvObjects::default();
        fetched.set_service_env(Ok(BTreeMap::from([
            ("WEB_SERVICE_HOST".to_string(), "10.0.0.9".to_string()),
            ("WEB_SERVICE_PORT".to_string(), "80".to_string()),
        ])));
        let env = container_env(&p, &c, &image(), &ctx(), &fetched).unwrap();
        assert_eq!(
            env,
            pairs(&[
                ("PATH", "/bin"),
                ("A", "image"),
                ("WEB_SERVICE_HOST", "10.0.0.9"),
                ("WEB_SERVICE_PORT", "own"),
                ("URL", "http://10.0.0.9:own"),
            ])
        );
        // Services that could not be read fail the container, with the reason.
        let mut fetched = EnvObjects::default();
        fetched.set_service_env(Err(ObjectError::ServicesNotSynced));
        let e = container_env(&p, &c, &image(), &ctx(), &fetched).unwrap_err();
        assert_eq!(
            e.to_string(),
            "services have not yet been read at least once, cannot construct envvars"
        );
    }

    #[tokio::test]
    async fn values_expand_earlier_variables_but_values_from_objects_do_not() {
        let env = env_of(
            &objects(),
            json!({"name": "c", "image": "i",
            "envFrom": [{"configMapRef": {"name": "cfg"}}],
            "env": [
                {"name": "X", "value": "$(A)/$(S)/$(LATER)/$(PATH)/$$(A)"},
                {"name": "R", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "REF"}}},
                {"name": "Y", "value": "$(X)|$(R)"},
                {"name": "LATER", "value": "late"},
            ]}),
        )
        .await
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        // envFrom's A is known; the secret is not referenced, LATER comes after, the image's
        // PATH is not the container's: those stay as written. `$$` escapes.
        assert_eq!(get("X"), Some("cm-a/$(S)/$(LATER)/$(PATH)/$(A)"));
        assert_eq!(get("R"), Some("$(B)"));
        assert_eq!(get("Y"), Some("cm-a/$(S)/$(LATER)/$(PATH)/$(A)|$(B)"));
    }

    #[tokio::test]
    async fn optional_references_to_missing_objects_and_keys_are_skipped() {
        let env = env_of(
            &objects(),
            json!({"name": "c", "image": "i",
                "envFrom": [
                    {"configMapRef": {"name": "nope", "optional": true}},
                    {"secretRef": {"name": "nope", "optional": true}, "prefix": "X_"},
                ],
                "env": [
                    {"name": "M1", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": true}}},
                    {"name": "M2", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nokey", "optional": true}}},
                    {"name": "M3", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
                    {"name": "M4", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nokey", "optional": true}}},
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "nokey", "optional": true}}},
                    {"name": "OK", "value": "yes"},
                ]}),
        )
        .await
        .unwrap();
        // A skipped reference sets nothing: the image's A stays.
        assert_eq!(
            env,
            pairs(&[("PATH", "/bin"), ("A", "image"), ("OK", "yes")])
        );
    }

    #[tokio::test]
    async fn missing_objects_and_keys_fail_with_upstreams_messages() {
        let o = objects();
        let err = |c: Value| {
            let o = &o;
            async move { env_of(o, c).await.unwrap_err().to_string() }
        };
        let key_ref = |kind: &str, name: &str, key: &str| {
            json!({"name": "c", "image": "i", "env": [
                {"name": "V", "valueFrom": {kind: {"name": name, "key": key}}}]})
        };
        assert_eq!(
            err(key_ref("configMapKeyRef", "gone", "k")).await,
            "configmap \"gone\" not found"
        );
        assert_eq!(
            err(key_ref("secretKeyRef", "gone", "k")).await,
            "secret \"gone\" not found"
        );
        assert_eq!(
            err(key_ref("configMapKeyRef", "cfg", "nokey")).await,
            "couldn't find key nokey in ConfigMap ns/cfg"
        );
        assert_eq!(
            err(key_ref("secretKeyRef", "sec", "nokey")).await,
            "couldn't find key nokey in Secret ns/sec"
        );
        assert_eq!(
            err(json!({"name": "c", "image": "i",
                "envFrom": [{"secretRef": {"name": "gone"}}]}))
            .await,
            "secret \"gone\" not found"
        );
        // Upstream's order: envFrom before env, so the envFrom failure is the one reported.
        assert_eq!(
            err(json!({"name": "c", "image": "i",
                "envFrom": [{"configMapRef": {"name": "first"}}],
                "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "second", "key": "k"}}}]}))
            .await,
            "configmap \"first\" not found"
        );
        // An optional reference does not excuse a later required one to the same object.
        assert_eq!(
            err(json!({"name": "c", "image": "i", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": true}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]}))
            .await,
            "configmap \"gone\" not found"
        );
    }

    #[tokio::test]
    async fn without_an_api_server_references_fail_as_upstreams_do_without_a_client() {
        let e = env_of(
            &Standalone,
            json!({"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": "cfg"}}]}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get configMap ns/cfg, no kubeClient defined"
        );
        // Optional or not: a node without a client cannot tell whether it exists.
        let e = env_of(
            &Standalone,
            json!({"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "s", "optional": true}}]}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get secret ns/s, no kubeClient defined"
        );
    }

    #[tokio::test]
    async fn secret_bytes_are_used_as_text() {
        let o = FakeObjects::default();
        o.put_secret(secret(
            "bin",
            &[("T", "héllo\n".as_bytes()), ("B", &[0x66, 0xff, 0x6f])],
        ));
        let env = env_of(
            &o,
            json!({"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "bin"}}]}),
        )
        .await
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("T"), Some("héllo\n"));
        assert_eq!(get("B"), Some("f\u{fffd}o"));
    }

    #[test]
    fn references_are_named_once_in_order_of_first_use() {
        let (_, c) = container(json!({"name": "c", "image": "i",
        "envFrom": [{"secretRef": {"name": "s2"}}, {"configMapRef": {"name": "c1"}}],
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c2", "key": "k"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}},
            {"name": "D", "value": "x"},
        ]}));
        assert_eq!(
            env_references(&c),
            EnvReferences {
                config_maps: vec!["c1".into(), "c2".into()],
                secrets: vec!["s2".into(), "s1".into()],
            }
        );
    }

    #[test]
    fn an_object_the_worker_did_not_fetch_is_an_error_not_a_skip() {
        let (p, c) = container(json!({"name": "c", "image": "i",
            "envFrom": [{"configMapRef": {"name": "cfg", "optional": true}}]}));
        let e = container_env(&p, &c, &image(), &ctx(), &EnvObjects::default()).unwrap_err();
        assert!(matches!(e, EnvError::NotFetched { .. }), "{e}");
    }
}
