//! [`ClusterObjects`] over the apiserver: ConfigMaps and Secrets read by name, tokens from
//! the TokenRequest API (`serviceaccounts/<name>/token`) bound to the pod, kept while fresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use tracing::debug;

use super::{ClusterObjects, ObjectError, ObjectKind, ServiceAccountToken, TokenSpec};

/// Upstream's token manager renews a token once 80 % of its lifetime has passed, and at the
/// latest a day after it was issued (the apiserver may issue kube-api-access tokens valid
/// for a year, whose bound pod must still see a fresh one daily).
const MAX_TOKEN_AGE: Duration = Duration::hours(24);

pub struct ApiObjects {
    client: kube::Client,
    /// Issued tokens by pod UID and what was asked.
    tokens: Mutex<HashMap<(String, TokenSpec), ServiceAccountToken>>,
}

impl ApiObjects {
    pub fn new(client: kube::Client) -> Self {
        ApiObjects {
            client,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    async fn get<K>(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<K>, ObjectError>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(o)) => Ok(Arc::new(o)),
            Ok(None) => Err(ObjectError::NotFound {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            }),
            Err(source) => Err(ObjectError::Api {
                kind,
                namespace: namespace.into(),
                name: name.into(),
                source,
            }),
        }
    }
}

/// Whether a token issued at `issued` and valid until `expires` should be renewed `now`.
pub(crate) fn needs_refresh(t: &ServiceAccountToken, now: DateTime<Utc>) -> bool {
    let lifetime = t.expires - t.issued;
    now >= t.issued + lifetime * 4 / 5 || now >= t.issued + MAX_TOKEN_AGE
}

#[async_trait]
impl ClusterObjects for ApiObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Arc<ConfigMap>, ObjectError> {
        self.get(ObjectKind::ConfigMap, namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Arc<Secret>, ObjectError> {
        self.get(ObjectKind::Secret, namespace, name).await
    }

    async fn service_account_token(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = (uid.clone(), spec.clone());
        let now = Utc::now();
        if let Some(t) = self.tokens.lock().unwrap().get(&key) {
            if !needs_refresh(t, now) {
                return Ok(t.clone());
            }
        }
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                // None: the apiserver's own audiences, as upstream sends when none is set.
                audiences: if spec.audience.is_empty() {
                    Vec::new()
                } else {
                    vec![spec.audience.clone()]
                },
                expiration_seconds: Some(spec.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: Some(uid),
                }),
            },
            ..Default::default()
        };
        let err = |source| ObjectError::Token {
            namespace: namespace.clone(),
            service_account: spec.service_account.clone(),
            source,
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &namespace);
        let issued: TokenRequest = api
            .create_subresource(
                "token",
                &spec.service_account,
                &PostParams::default(),
                &request,
            )
            .await
            .map_err(err)?;
        let status = issued.status.ok_or_else(|| {
            err(kube::Error::Service(
                "the apiserver answered the token request without a status".into(),
            ))
        })?;
        let ts = status.expiration_timestamp.0;
        let token = ServiceAccountToken {
            token: status.token,
            issued: now,
            expires: DateTime::from_timestamp(ts.as_second(), ts.subsec_nanosecond().max(0) as u32)
                .unwrap_or(now),
        };
        debug!(namespace, service_account = %spec.service_account, expires = %token.expires, "token issued");
        self.tokens.lock().unwrap().insert(key, token.clone());
        Ok(token)
    }

    fn register_pod(&self, _pod: &Pod) {}

    fn unregister_pod(&self, pod_uid: &str) {
        self.tokens
            .lock()
            .unwrap()
            .retain(|(uid, _), _| uid != pod_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(lifetime: Duration) -> ServiceAccountToken {
        let issued = DateTime::from_timestamp(1_000_000, 0).unwrap();
        ServiceAccountToken {
            token: "t".into(),
            issued,
            expires: issued + lifetime,
        }
    }

    #[test]
    fn tokens_renew_at_four_fifths_of_their_life_or_after_a_day() {
        let hour = token(Duration::hours(1));
        assert!(!needs_refresh(&hour, hour.issued + Duration::minutes(47)));
        assert!(needs_refresh(&hour, hour.issued + Duration::minutes(48)));
        let year = token(Duration::days(365));
        assert!(!needs_refresh(&year, year.issued + Duration::hours(23)));
        assert!(needs_refresh(&year, year.issued + Duration::hours(24)));
    }
}
