//! Service-account tokens from the TokenRequest API (`serviceaccounts/<name>/token`), bound
//! to the pod, cached per pod and request as upstream's token manager: the same token while
//! it is fresh, a new one past 80 % of its lifetime or a day after it was issued, the old
//! one (with a warning) while a renewal fails and it is still valid.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use super::{ObjectError, ServiceAccountToken, TokenSpec};

/// Upstream renews at the latest a day after issue: the apiserver may issue kube-api-access
/// tokens valid for a year, whose bound pod must still see a fresh one daily.
const MAX_TOKEN_AGE: Duration = Duration::hours(24);

/// The wall clock, replaceable in tests (token lifetimes are wall-clock times from the API
/// server, so tokio's paused clock does not move them).
pub(crate) type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

pub(crate) struct Tokens {
    client: kube::Client,
    clock: Clock,
    /// Issued tokens by pod UID and what was asked.
    issued: Mutex<HashMap<(String, TokenSpec), ServiceAccountToken>>,
}

/// Whether a token issued at `issued` and valid until `expires` should be renewed `now`.
pub(crate) fn needs_refresh(t: &ServiceAccountToken, now: DateTime<Utc>) -> bool {
    let lifetime = t.expires - t.issued;
    now >= t.issued + lifetime * 4 / 5 || now >= t.issued + MAX_TOKEN_AGE
}

impl Tokens {
    pub(crate) fn new(client: kube::Client, clock: Clock) -> Self {
        Tokens {
            client,
            clock,
            issued: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) async fn get(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
    ) -> Result<ServiceAccountToken, ObjectError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = (uid, spec.clone());
        let now = (self.clock)();
        let cached = self.issued.lock().unwrap().get(&key).cloned();
        if let Some(t) = &cached {
            if !needs_refresh(t, now) {
                return Ok(t.clone());
            }
        }
        match self.request(pod, spec, now).await {
            Ok(token) => {
                let mut issued = self.issued.lock().unwrap();
                // Expired tokens of pods that stopped asking go with the next issue.
                issued.retain(|_, t| t.expires > now);
                issued.insert(key, token.clone());
                Ok(token)
            }
            Err(e) => match cached {
                Some(old) if now < old.expires => {
                    warn!(
                        pod = %pod_name(pod),
                        service_account = %spec.service_account,
                        expires = %old.expires,
                        error = %e,
                        "couldn't update token; using the old one until it expires"
                    );
                    Ok(old)
                }
                _ => Err(e),
            },
        }
    }

    /// The pod is gone: its tokens are not renewed any more.
    pub(crate) fn forget_pod(&self, pod_uid: &str) {
        self.issued
            .lock()
            .unwrap()
            .retain(|(uid, _), _| uid != pod_uid);
    }

    async fn request(
        &self,
        pod: &Pod,
        spec: &TokenSpec,
        now: DateTime<Utc>,
    ) -> Result<ServiceAccountToken, ObjectError> {
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
                    uid: pod.metadata.uid.clone(),
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
        let answer: TokenRequest = api
            .create_subresource(
                "token",
                &spec.service_account,
                &PostParams::default(),
                &request,
            )
            .await
            .map_err(err)?;
        let status = answer.status.ok_or_else(|| {
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
        debug!(pod = %pod_name(pod), service_account = %spec.service_account, expires = %token.expires, "token issued");
        Ok(token)
    }
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
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
