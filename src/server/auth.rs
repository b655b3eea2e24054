//! Authentication and authorization of requests to the main (10250) server, in upstream's
//! order and with upstream's answers (pkg/kubelet/server/auth.go and the apiserver's
//! delegating authenticator/authorizer):
//!
//! - authentication: a client certificate verified against the client CA (user = CN, groups
//!   = O), else a bearer token checked with a TokenReview, else anonymous when enabled. A
//!   certificate that does not verify or a token that is refused is an error, and an error is
//!   a 401 even with anonymous access on (upstream's fail-on-error union).
//! - authorization: AlwaysAllow, or SubjectAccessReviews for `nodes/<subresource>` attributes
//!   derived from the path; any allowed attribute admits the request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

pub use crate::api_client::ReviewClient;

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// Why a request is answered 401 (the body is always `Unauthorized`; this is for the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    #[error("client certificate: {0}")]
    Certificate(String),
    #[error("bearer token: {0}")]
    Token(String),
    #[error("no credentials and anonymous access is disabled")]
    NoCredentials,
}

/// Why a bearer token was not accepted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// The TokenReview call itself failed: not an answer, so not cached.
    #[error(transparent)]
    Review(Arc<crate::api_client::ApiError>),
    /// The API server's refusal: its status error, or upstream's wording when it gave none.
    #[error("{0}")]
    Refused(String),
}

/// A SubjectAccessReview that could not be made (an answer, allowed or not, is no error).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReviewFailed(#[from] crate::api_client::ApiError);

/// The time source of the caches; a function so tests can move time forward.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(Instant::now)
}

/// A map whose entries expire, holding at most `max_entries`: once full, the least recently
/// used entry makes room (upstream's webhook caches are bounded LRUs too). A flood of distinct
/// keys, such as bogus bearer tokens, can neither grow it nor wipe the entries in steady use:
/// they only push each other out.
pub(crate) struct TtlCache<V> {
    entries: Mutex<lru::LruCache<String, (Instant, V)>>,
    clock: Clock,
}

impl<V: Clone> TtlCache<V> {
    pub(crate) fn new(clock: Clock, max_entries: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(max_entries).unwrap_or(std::num::NonZeroUsize::MIN);
        TtlCache {
            entries: Mutex::new(lru::LruCache::new(cap)),
            clock,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        let now = (self.clock)();
        let mut entries = self.entries.lock().expect("cache lock");
        match entries.get(key) {
            Some((expires, v)) if *expires > now => Some(v.clone()),
            Some(_) => {
                entries.pop(key);
                None
            }
            None => None,
        }
    }

    pub(crate) fn insert(&self, key: String, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = (self.clock)();
        self.entries
            .lock()
            .expect("cache lock")
            .put(key, (now + ttl, value));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().expect("cache lock").len()
    }
}

/// Tokens whose answers are kept (upstream's token cache has no bound; each entry here is a
/// hash and a user, well under a kilobyte).
pub(crate) const TOKEN_CACHE_ENTRIES: usize = 4096;

/// Token authentication through TokenReview, answers (accepted and refused) cached by token
/// for the same TTL (upstream's `cache.New(tokenAuth, false, cacheTTL, cacheTTL)`).
pub struct TokenReviewer {
    client: Arc<dyn ReviewClient>,
    cache: TtlCache<Result<UserInfo, TokenError>>,
    ttl: Duration,
}

impl TokenReviewer {
    pub fn new(client: Arc<dyn ReviewClient>, ttl: Duration, clock: Clock) -> Self {
        TokenReviewer {
            client,
            cache: TtlCache::new(clock, TOKEN_CACHE_ENTRIES),
            ttl,
        }
    }

    /// The user the token belongs to, or why it is refused.
    pub async fn review(&self, token: &str) -> Result<UserInfo, TokenError> {
        // Keyed by a hash: the cache should not be a store of live credentials.
        let key = hex::encode(Sha256::digest(token.as_bytes()));
        if let Some(answer) = self.cache.get(&key) {
            return answer;
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        // A failed call is not an answer: it is not cached.
        let status = self
            .client
            .token_review(review)
            .await
            .map_err(|e| TokenError::Review(Arc::new(e)))?
            .status
            .unwrap_or_default();
        let answer = if status.authenticated == Some(true) {
            let user = status.user.unwrap_or_default();
            Ok(UserInfo {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            })
        } else {
            Err(TokenError::Refused(match status.error {
                Some(e) if !e.is_empty() => e,
                _ => "invalid bearer token".to_string(),
            }))
        };
        self.cache.insert(key, answer.clone(), self.ttl);
        answer
    }
}

/// The authentication chain of the main server.
pub struct Authenticator {
    /// Verifies client certificate chains against the client CA (None: x509 off).
    pub client_ca: Option<Arc<super::tls::ClientCa>>,
    /// TokenReview (None: bearer tokens are not looked at).
    pub tokens: Option<TokenReviewer>,
    pub anonymous: bool,
}

impl Authenticator {
    /// `peer_chain`: the client's certificates (leaf first), `authorization`: the
    /// Authorization header.
    pub async fn authenticate(
        &self,
        peer_chain: &[CertificateDer<'static>],
        authorization: Option<&str>,
    ) -> Result<UserInfo, AuthnError> {
        let mut first_error = None;
        if let (Some(verifier), Some((leaf, intermediates))) =
            (&self.client_ca, peer_chain.split_first())
        {
            match verifier
                .verifier()
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .map_err(|e| e.to_string())
                .and_then(|_| certificate_user(leaf))
            {
                Ok(Some(user)) => return Ok(with_authenticated_group(user)),
                Ok(None) => {}
                Err(e) => first_error = Some(AuthnError::Certificate(e)),
            }
        }
        if let (Some(tokens), Some(token)) = (&self.tokens, authorization.and_then(bearer_token)) {
            match tokens.review(token).await {
                Ok(user) => return Ok(with_authenticated_group(user)),
                Err(e) => {
                    first_error.get_or_insert(AuthnError::Token(e.to_string()));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if self.anonymous {
            return Ok(UserInfo {
                name: ANONYMOUS_USER.into(),
                uid: String::new(),
                groups: vec![UNAUTHENTICATED_GROUP.into()],
            });
        }
        Err(AuthnError::NoCredentials)
    }
}

fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        user.groups.push(AUTHENTICATED_GROUP.into());
    }
    user
}

/// `Bearer <token>` (scheme case-insensitive); an empty token counts as none.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// User = subject CN, groups = subject O values; no CN means no user (not an error).
fn certificate_user(der: &CertificateDer<'_>) -> Result<Option<UserInfo>, String> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| format!("unparsable: {e}"))?;
    let subject = cert.subject();
    let Some(cn) = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    Ok(Some(UserInfo {
        name: cn.to_string(),
        uid: String::new(),
        groups: subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(String::from))
            .collect(),
    }))
}

/// The verb upstream derives from the method (HEAD and others get none).
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || (subpath.starts_with(path) && subpath.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The node subresources checked for a path, in order, with the fine-grained mapping
/// (upstream's KubeletFineGrainedAuthz, on by default since it went beta) in front of the
/// coarse one.
pub fn subresources(path: &str) -> Vec<&'static str> {
    let mut out = Vec::with_capacity(2);
    if is_subpath(path, "/pods") || is_subpath(path, "/runningpods/") {
        out.push("pods");
    } else if is_subpath(path, "/healthz") {
        out.push("healthz");
    } else if is_subpath(path, "/configz") {
        out.push("configz");
    } else if is_subpath(path, "/statusz") {
        out.push("statusz");
    }
    out.push(if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/checkpoint/") {
        "checkpoint"
    } else {
        "proxy"
    });
    out
}

/// One SubjectAccessReview's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub user: UserInfo,
    pub verb: &'static str,
    pub node: String,
    pub subresource: &'static str,
    pub path: String,
}

pub fn request_attributes(
    user: &UserInfo,
    node: &str,
    method: &Method,
    path: &str,
) -> Vec<Attributes> {
    subresources(path)
        .into_iter()
        .map(|subresource| Attributes {
            user: user.clone(),
            verb: verb(method),
            node: node.to_string(),
            subresource,
            path: path.to_string(),
        })
        .collect()
}

/// The SubjectAccessReview spec for one set of attributes (empty fields left out, as the
/// Go client's `omitempty` does).
pub fn review_spec(a: &Attributes) -> SubjectAccessReviewSpec {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    SubjectAccessReviewSpec {
        resource_attributes: Some(ResourceAttributes {
            verb: Some(a.verb.to_string()),
            version: Some("v1".into()),
            resource: Some("nodes".into()),
            subresource: Some(a.subresource.to_string()),
            name: Some(a.node.clone()),
            ..Default::default()
        }),
        user: Some(a.user.name.clone()),
        groups: (!a.user.groups.is_empty()).then(|| a.user.groups.clone()),
        uid: non_empty(&a.user.uid),
        ..Default::default()
    }
}

/// How the request fared with the authorizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// The authorizer could not decide (webhook unreachable, bad answer): a 500.
    Error(String),
}

pub enum Authorizer {
    AlwaysAllow,
    Webhook(SubjectAccessReviewer),
}

impl Authorizer {
    pub async fn authorize(&self, attrs: &[Attributes]) -> Decision {
        match self {
            Authorizer::AlwaysAllow => Decision::Allow,
            Authorizer::Webhook(sar) => {
                for a in attrs {
                    match sar.review(a).await {
                        Ok(true) => return Decision::Allow,
                        Ok(false) => {}
                        Err(e) => return Decision::Error(e.to_string()),
                    }
                }
                Decision::Deny
            }
        }
    }
}

/// SubjectAccessReviews with upstream's cache: allowed answers for one TTL, denied ones for
/// another, keyed by the review spec.
pub struct SubjectAccessReviewer {
    client: Arc<dyn ReviewClient>,
    cache: TtlCache<bool>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
}

impl SubjectAccessReviewer {
    pub fn new(
        client: Arc<dyn ReviewClient>,
        allowed_ttl: Duration,
        denied_ttl: Duration,
        clock: Clock,
    ) -> Self {
        SubjectAccessReviewer {
            client,
            cache: TtlCache::new(clock, 8192),
            allowed_ttl,
            denied_ttl,
        }
    }

    pub async fn review(&self, a: &Attributes) -> Result<bool, ReviewFailed> {
        let spec = review_spec(a);
        // The whole spec is the key: two requests with the same attributes share an answer.
        let key = format!("{spec:?}");
        if let Some(allowed) = self.cache.get(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let status = self
            .client
            .subject_access_review(review)
            .await?
            .status
            .unwrap_or_default();
        if let Some(e) = status.evaluation_error.as_deref().filter(|e| !e.is_empty()) {
            debug!(error = e, "SubjectAccessReview evaluation error");
        }
        let allowed = status.allowed;
        let ttl = if allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        self.cache.insert(key, allowed, ttl);
        if !allowed {
            debug!(user = %a.user.name, verb = a.verb, subresource = a.subresource,
                reason = status.reason.as_deref().unwrap_or_default(), "SubjectAccessReview denied");
        }
        Ok(allowed)
    }
}

/// The 403 body, as upstream writes it.
pub fn forbidden_body(attrs: &[Attributes]) -> String {
    let (user, verb) = attrs
        .first()
        .map(|a| (a.user.name.as_str(), a.verb))
        .unwrap_or_default();
    format!(
        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)={})\n",
        go_list(attrs)
    )
}

/// The 500 body when the authorizer failed.
pub fn authorization_error_body(attrs: &[Attributes]) -> String {
    let (user, verb) = attrs
        .first()
        .map(|a| (a.user.name.as_str(), a.verb))
        .unwrap_or_default();
    format!(
        "Authorization error (user={user}, verb={verb}, resource=nodes, subresource(s)={})",
        go_list(attrs)
    )
}

/// Go's `%v` of a string slice: `[a b]`.
fn go_list(attrs: &[Attributes]) -> String {
    let names: Vec<&str> = attrs.iter().map(|a| a.subresource).collect();
    format!("[{}]", names.join(" "))
}

pub(crate) fn log_authn_failure(err: &AuthnError) {
    match err {
        AuthnError::NoCredentials => debug!("unauthorized request: {err}"),
        _ => warn!("unable to authenticate the request: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_client::ApiError;
    use futures::future::BoxFuture;
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: vec!["g".into()],
        }
    }

    #[test]
    fn paths_map_to_subresources_as_upstream() {
        let cases: &[(&str, &[&str])] = &[
            ("/stats/summary", &["stats"]),
            ("/stats", &["stats"]),
            ("/statsx", &["proxy"]),
            ("/metrics", &["metrics"]),
            ("/metrics/resource", &["metrics"]),
            ("/metrics/cadvisor", &["metrics"]),
            ("/logs/syslog", &["log"]),
            ("/checkpoint/ns/p/c", &["checkpoint"]),
            ("/pods", &["pods", "proxy"]),
            ("/pods/", &["pods", "proxy"]),
            ("/runningpods/", &["pods", "proxy"]),
            ("/healthz", &["healthz", "proxy"]),
            ("/healthz/ping", &["healthz", "proxy"]),
            ("/configz", &["configz", "proxy"]),
            ("/containerLogs/ns/p/c", &["proxy"]),
            ("/exec/ns/p/c", &["proxy"]),
            ("/portForward/ns/p", &["proxy"]),
            ("/", &["proxy"]),
        ];
        for (path, want) in cases {
            assert_eq!(subresources(path), *want, "{path}");
        }
    }

    #[test]
    fn attributes_carry_verb_node_and_path() {
        let attrs = request_attributes(&user("alice"), "node-1", &Method::POST, "/pods");
        assert_eq!(attrs.len(), 2);
        assert_eq!(attrs[0].verb, "create");
        assert_eq!(attrs[1].subresource, "proxy");
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::PUT), "update");
        assert_eq!(verb(&Method::PATCH), "patch");
        assert_eq!(verb(&Method::DELETE), "delete");
        assert_eq!(verb(&Method::HEAD), "");
        let spec = serde_json::to_value(review_spec(&attrs[0])).unwrap();
        assert_eq!(
            spec,
            json!({
                "resourceAttributes": {"verb": "create", "version": "v1", "resource": "nodes",
                                        "subresource": "pods", "name": "node-1"},
                "user": "alice",
                "groups": ["g"],
            })
        );
    }

    #[test]
    fn bodies_match_upstream() {
        let attrs = request_attributes(&user("bob"), "n", &Method::GET, "/configz");
        assert_eq!(
            forbidden_body(&attrs),
            "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[configz proxy])\n"
        );
        let attrs = request_attributes(&user("bob"), "n", &Method::GET, "/stats/summary");
        assert_eq!(
            authorization_error_body(&attrs),
            "Authorization error (user=bob, verb=get, resource=nodes, subresource(s)=[stats])"
        );
    }

    #[test]
    fn bearer_tokens_are_parsed_like_upstream() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Basic abc"), None);
    }

    type Answer = Box<dyn Fn(&Value) -> Result<Value, ()> + Send + Sync>;

    /// Answers reviews from a closure (the review as JSON in, `{"status": ...}` out, as the
    /// API server answers) and counts calls.
    struct Scripted {
        calls: AtomicUsize,
        answer: Answer,
    }

    impl Scripted {
        fn answer<K: serde::Serialize + serde::de::DeserializeOwned>(
            &self,
            what: &'static str,
            review: K,
        ) -> Result<K, ApiError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut body = serde_json::to_value(review).unwrap();
            match (self.answer)(&body) {
                Ok(answer) => {
                    body["status"] = answer["status"].clone();
                    Ok(serde_json::from_value(body).unwrap())
                }
                Err(()) => Err(ApiError::Timeout {
                    what,
                    server: "https://scripted".into(),
                    timeout: Duration::from_secs(10),
                }),
            }
        }
    }

    impl ReviewClient for Scripted {
        fn token_review(
            &self,
            review: TokenReview,
        ) -> BoxFuture<'_, Result<TokenReview, ApiError>> {
            let r = self.answer("TokenReview", review);
            Box::pin(async move { r })
        }

        fn subject_access_review(
            &self,
            review: SubjectAccessReview,
        ) -> BoxFuture<'_, Result<SubjectAccessReview, ApiError>> {
            let r = self.answer("SubjectAccessReview", review);
            Box::pin(async move { r })
        }
    }

    fn fake_clock() -> (Clock, Arc<Mutex<Instant>>) {
        let now = Arc::new(Mutex::new(Instant::now()));
        let n = now.clone();
        (Arc::new(move || *n.lock().unwrap()), now)
    }

    #[tokio::test]
    async fn sar_answers_are_cached_by_attributes_with_separate_ttls() {
        let client = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            answer: Box::new(|body| {
                let sub = body["spec"]["resourceAttributes"]["subresource"]
                    .as_str()
                    .unwrap();
                Ok(json!({"status": {"allowed": sub == "stats"}}))
            }),
        });
        let (clock, now) = fake_clock();
        let sar = SubjectAccessReviewer::new(
            client.clone(),
            Duration::from_secs(300),
            Duration::from_secs(30),
            clock,
        );
        let authz = Authorizer::Webhook(sar);
        let stats = request_attributes(&user("a"), "n", &Method::GET, "/stats/summary");
        let pods = request_attributes(&user("a"), "n", &Method::GET, "/pods");
        assert_eq!(authz.authorize(&stats).await, Decision::Allow);
        assert_eq!(authz.authorize(&stats).await, Decision::Allow);
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            1,
            "second answer from the cache"
        );
        assert_eq!(authz.authorize(&pods).await, Decision::Deny);
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            3,
            "pods then proxy asked"
        );
        assert_eq!(authz.authorize(&pods).await, Decision::Deny);
        assert_eq!(client.calls.load(Ordering::SeqCst), 3);

        *now.lock().unwrap() += Duration::from_secs(31);
        assert_eq!(authz.authorize(&pods).await, Decision::Deny);
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            5,
            "denials expire after 30s"
        );
        assert_eq!(authz.authorize(&stats).await, Decision::Allow);
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            5,
            "allowed still cached"
        );
        *now.lock().unwrap() += Duration::from_secs(300);
        assert_eq!(authz.authorize(&stats).await, Decision::Allow);
        assert_eq!(client.calls.load(Ordering::SeqCst), 6);
    }

    #[tokio::test]
    async fn sar_failures_are_errors_and_not_cached() {
        let client = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            answer: Box::new(|_| Err(())),
        });
        let (clock, _) = fake_clock();
        let authz = Authorizer::Webhook(SubjectAccessReviewer::new(
            client.clone(),
            Duration::from_secs(300),
            Duration::from_secs(30),
            clock,
        ));
        let attrs = request_attributes(&user("a"), "n", &Method::GET, "/pods");
        assert!(matches!(authz.authorize(&attrs).await, Decision::Error(_)));
        assert!(matches!(authz.authorize(&attrs).await, Decision::Error(_)));
        assert_eq!(client.calls.load(Ordering::SeqCst), 2);
    }

    /// Many distinct bogus tokens (each refused, each cached as upstream caches refusals)
    /// keep the cache at its bound, and a token in steady use stays cached through the flood:
    /// it is never asked about again. Before, a full cache was emptied, so every few thousand
    /// bogus tokens sent the real users' tokens back to the API server.
    #[tokio::test]
    async fn a_flood_of_bogus_tokens_stays_bounded_and_keeps_tokens_in_use() {
        let client = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            answer: Box::new(|body| {
                Ok(if body["spec"]["token"] == "good" {
                    json!({"status": {"authenticated": true, "user": {"username": "sa"}}})
                } else {
                    json!({"status": {"authenticated": false}})
                })
            }),
        });
        let (clock, _now) = fake_clock();
        let reviewer = TokenReviewer::new(client.clone(), Duration::from_secs(120), clock);
        assert_eq!(reviewer.review("good").await.unwrap().name, "sa");
        let bound = TOKEN_CACHE_ENTRIES;
        for i in 0..3 * bound {
            assert!(reviewer.review(&format!("bogus-{i}")).await.is_err());
            if i % 100 == 0 {
                assert_eq!(reviewer.review("good").await.unwrap().name, "sa");
            }
            assert!(reviewer.cache.len() <= bound, "cache grew past {bound}");
        }
        assert_eq!(reviewer.cache.len(), bound);
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            1 + 3 * bound,
            "the good token was reviewed again during the flood"
        );
    }

    #[tokio::test]
    async fn token_reviews_are_cached_and_refusals_are_401_even_with_anonymous() {
        let client = Arc::new(Scripted {
            calls: AtomicUsize::new(0),
            answer: Box::new(|body| {
                Ok(if body["spec"]["token"] == "good" {
                    json!({"status": {"authenticated": true,
                        "user": {"username": "sa", "uid": "u1", "groups": ["system:serviceaccounts"]}}})
                } else {
                    json!({"status": {"authenticated": false}})
                })
            }),
        });
        let (clock, now) = fake_clock();
        let authn = Authenticator {
            client_ca: None,
            tokens: Some(TokenReviewer::new(
                client.clone(),
                Duration::from_secs(120),
                clock,
            )),
            anonymous: true,
        };
        let u = authn.authenticate(&[], Some("Bearer good")).await.unwrap();
        assert_eq!(u.name, "sa");
        assert_eq!(u.groups, ["system:serviceaccounts", AUTHENTICATED_GROUP]);
        authn.authenticate(&[], Some("Bearer good")).await.unwrap();
        assert_eq!(client.calls.load(Ordering::SeqCst), 1);
        let err = authn
            .authenticate(&[], Some("Bearer bad"))
            .await
            .unwrap_err();
        assert!(matches!(err, AuthnError::Token(_)));
        authn
            .authenticate(&[], Some("Bearer bad"))
            .await
            .unwrap_err();
        assert_eq!(
            client.calls.load(Ordering::SeqCst),
            2,
            "refusals are cached too"
        );
        *now.lock().unwrap() += Duration::from_secs(121);
        authn.authenticate(&[], Some("Bearer good")).await.unwrap();
        assert_eq!(client.calls.load(Ordering::SeqCst), 3);
        let anon = authn.authenticate(&[], None).await.unwrap();
        assert_eq!(anon.name, ANONYMOUS_USER);
        assert_eq!(anon.groups, [UNAUTHENTICATED_GROUP]);

        let closed = Authenticator {
            client_ca: None,
            tokens: None,
            anonymous: false,
        };
        assert_eq!(
            closed.authenticate(&[], Some("Bearer good")).await,
            Err(AuthnError::NoCredentials),
            "tokens are ignored without the webhook"
        );
    }

    /// A CA file and a client certificate it signed for `cn` with organizations `orgs`.
    fn client_cert(
        dir: &std::path::Path,
        cn: Option<&str>,
        orgs: &[&str],
    ) -> (std::path::PathBuf, CertificateDer<'static>) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "client-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        // rcgen puts a default CN in; the subject is built from scratch here.
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            leaf.distinguished_name.push(DnType::CommonName, cn);
        }
        // rcgen keeps one value per attribute type; the organizationName OID spelled out as a
        // custom type is a second key, so the subject gets a second O attribute.
        let o_types = [
            DnType::OrganizationName,
            DnType::CustomDnType(vec![2, 5, 4, 10]),
        ];
        assert!(orgs.len() <= o_types.len());
        for (ty, o) in o_types.into_iter().zip(orgs) {
            leaf.distinguished_name.push(ty, *o);
        }
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        (ca_file, cert.der().clone())
    }

    #[tokio::test]
    async fn client_certificate_cn_is_the_user_and_organizations_are_groups() {
        let dir = tempfile::tempdir().unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (ca_file, cert) = client_cert(dir.path(), Some("alice"), &["admins", "devs"]);
        let authn = Authenticator {
            client_ca: Some(super::super::tls::ClientCa::load(&ca_file, &provider).unwrap()),
            tokens: None,
            anonymous: true,
        };
        let u = authn.authenticate(&[cert], None).await.unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["admins", "devs", AUTHENTICATED_GROUP]);

        // Without a CN the certificate names nobody: anonymous, as upstream's x509 authenticator
        // leaves such a request to the next one.
        let (ca_file, cert) = client_cert(dir.path(), None, &["admins"]);
        let authn = Authenticator {
            client_ca: Some(super::super::tls::ClientCa::load(&ca_file, &provider).unwrap()),
            tokens: None,
            anonymous: true,
        };
        let u = authn.authenticate(&[cert], None).await.unwrap();
        assert_eq!(u.name, ANONYMOUS_USER);
    }

    #[test]
    fn ttl_cache_expires_and_stays_bounded() {
        let (clock, now) = fake_clock();
        let cache = TtlCache::new(clock, 2);
        cache.insert("a".into(), 1, Duration::from_secs(1));
        cache.insert("zero".into(), 9, Duration::ZERO);
        assert_eq!(cache.get("a"), Some(1));
        assert_eq!(cache.get("zero"), None);
        cache.insert("b".into(), 2, Duration::from_secs(10));
        cache.insert("c".into(), 3, Duration::from_secs(10));
        assert!(cache.len() <= 2);
        *now.lock().unwrap() += Duration::from_secs(11);
        assert_eq!(cache.get("c"), None);
    }
}
