//! The kubelet's HTTP endpoints. Handlers read caches (the pod status store, the stats
//! collector's views) and never call containerd on the request path, except the streaming
//! endpoints (`streaming`: exec, attach, port-forward, run), whose work is the runtime's.
//!
//! - main server (`address:port`, 10250): TLS, authentication and authorization
//!   ([`serve_main`]);
//! - read-only server (10255, off unless configured): the unauthenticated subset
//!   ([`serve_read_only`], [`serve_read_only_with`]);
//! - healthz server (10248 on 127.0.0.1): `/healthz` only ([`serve_healthz`]).
//!
//! Both ports share one router ([`router`]); they differ only in authentication and in which
//! routes exist.

pub mod auth;
pub mod connections;
pub mod container_logs;
pub(crate) mod mux;
pub(crate) mod node_logs;
pub(crate) mod response;
pub mod router;
pub(crate) mod state;
pub mod streaming;
pub mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use connections::{serve_connection, spawn_accept_loop, ConnectionLimits, ConnectionTable};

use crate::api_client::ApiClient;
pub use router::{Auth, Body, Port, ServerState, StatsViews};
pub use tls::TlsError;

use crate::config::{AuthorizationMode, Config};
use crate::pod::StatusStore;

/// Time a client has to complete the TLS handshake on the main port.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} for the {what} server: {source}")]
    Bind {
        addr: SocketAddr,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("main server TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("main server authentication/authorization: {0}")]
    Auth(String),
}

/// The PodList JSON of /pods, as upstream serves it.
pub async fn pod_list_json(store: &StatusStore) -> Vec<u8> {
    let pods = store.pods();
    let items: Vec<&k8s_openapi::api::core::v1::Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    serde_json::to_vec(&list).unwrap_or_default()
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, what, source })?;
    info!(%addr, "{what} server listening");
    Ok(listener)
}

/// The read-only server with only the pod store (stats endpoints answer "not ready").
/// Kept for callers that have no [`ServerState`]; prefer [`serve_read_only_with`].
pub async fn serve_read_only(addr: SocketAddr, store: StatusStore) -> Result<(), ServeError> {
    let mut config = Config::defaults(false);
    config.node_name = String::from("unknown");
    serve_read_only_with(addr, ServerState::new(Arc::new(config), store)).await
}

/// Binds now (so a port conflict is reported at start), then serves in the background.
pub async fn serve_read_only_with(
    addr: SocketAddr,
    state: Arc<ServerState>,
) -> Result<(), ServeError> {
    let listener = bind(addr, "read-only").await?;
    serve_read_only_on(listener, state, ConnectionLimits::serving());
    Ok(())
}

fn serve_read_only_on(listener: TcpListener, state: Arc<ServerState>, limits: ConnectionLimits) {
    let table = state.connections.clone();
    spawn_accept_loop(listener, limits, table, move |stream| {
        let state = state.clone();
        serve_connection(stream, limits, move |req| {
            router::handle(
                state.clone(),
                Port::ReadOnly,
                None,
                Arc::new(Vec::new()),
                req,
            )
        })
    });
}

pub async fn serve_healthz(addr: SocketAddr) -> Result<(), ServeError> {
    let listener = bind(addr, "healthz").await?;
    serve_healthz_on(listener, ConnectionLimits::HEALTHZ);
    Ok(())
}

pub(crate) fn serve_healthz_on(listener: TcpListener, limits: ConnectionLimits) {
    let table = Arc::new(ConnectionTable::default());
    spawn_accept_loop(listener, limits, table, move |stream| {
        serve_connection(stream, limits, |req: Request<Incoming>| async move {
            Ok::<_, Infallible>(match req.uri().path() {
                "/healthz" => response::text(StatusCode::OK, "ok"),
                _ => response::text(StatusCode::NOT_FOUND, "404 page not found\n"),
            })
        })
    });
}

/// The warning for a main server that anyone who reaches it may use for anything: anonymous
/// requests accepted and every request authorized, on an address other hosts can reach.
/// That is upstream's legacy command-line default; the warning names the settings and what
/// they expose. None when the server is closed, loopback only, or either check is on.
pub fn open_main_server_warning(config: &Config) -> Option<String> {
    let open = config.enable_server
        && config.anonymous_auth
        && config.authorization_mode == AuthorizationMode::AlwaysAllow
        && !config.address.to_canonical().is_loopback();
    open.then(|| {
        format!(
            "SECURITY: the main server on {} serves anyone who can reach it, without \
             credentials, everything it has: exec and attach into every container, port-forward, \
             every pod's logs, /configz and /pods. Anonymous requests are accepted \
             (--anonymous-auth=true / authentication.anonymous.enabled: true) and every request \
             is authorized (--authorization-mode=AlwaysAllow / authorization.mode: AlwaysAllow). \
             Use --anonymous-auth=false and --authorization-mode=Webhook with --kubeconfig, or \
             listen on loopback only (--address=127.0.0.1)",
            SocketAddr::new(config.address, config.port)
        )
    })
}

/// Builds the main server's authentication and authorization from the configuration. The
/// webhook modes need the API client of `--kubeconfig` (as upstream, which refuses to start
/// without one); it is the agent's one client, shared with cluster mode.
pub async fn build_auth(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
    api: Option<Arc<ApiClient>>,
) -> Result<Auth, ServeError> {
    let client_ca = match &config.client_ca_file {
        Some(path) => Some(tls::ClientCa::load(path, provider)?),
        None => None,
    };
    let needs_client = config.authentication_token_webhook
        || config.authorization_mode == AuthorizationMode::Webhook;
    let client: Option<Arc<dyn auth::ReviewClient>> = if needs_client {
        let api = api.ok_or_else(|| {
            ServeError::Auth(
                "authentication.webhook.enabled or authorization.mode=Webhook needs an API server: \
                 give --kubeconfig, or use --authentication-token-webhook=false and \
                 --authorization-mode=AlwaysAllow"
                    .into(),
            )
        })?;
        Some(api)
    } else {
        None
    };
    let clock = auth::system_clock();
    let tokens = match (&client, config.authentication_token_webhook) {
        (Some(c), true) => Some(auth::TokenReviewer::new(
            c.clone(),
            config.authentication_token_webhook_cache_ttl,
            clock.clone(),
        )),
        _ => None,
    };
    let authorizer = match (&client, config.authorization_mode) {
        (Some(c), AuthorizationMode::Webhook) => {
            auth::Authorizer::Webhook(auth::SubjectAccessReviewer::new(
                c.clone(),
                config.authorization_webhook_cache_authorized_ttl,
                config.authorization_webhook_cache_unauthorized_ttl,
                clock,
            ))
        }
        _ => auth::Authorizer::AlwaysAllow,
    };
    Ok(Auth {
        authenticator: auth::Authenticator {
            client_ca,
            tokens,
            anonymous: config.anonymous_auth,
        },
        authorizer,
    })
}

/// Starts the servers the configuration asks for, as upstream's startKubelet: the main server
/// unless enableServer is false (with a warning when it is open to anyone), the read-only
/// server when readOnlyPort is set. (The healthz server starts earlier, on its own.)
pub async fn serve_configured(
    state: Arc<ServerState>,
    api: Option<Arc<ApiClient>>,
) -> Result<(), ServeError> {
    let config = state.config.clone();
    if config.enable_server {
        if let Some(warning) = open_main_server_warning(&config) {
            warn!("{warning}");
        }
        serve_main(state.clone(), api).await?;
    } else {
        info!("enableServer is false: the main server is not started");
    }
    if config.read_only_port != 0 {
        serve_read_only_with(
            SocketAddr::new(config.address, config.read_only_port),
            state,
        )
        .await?;
    }
    Ok(())
}

/// The main server on `config.address:config.port` over TLS. Binds and loads certificates
/// now (errors are returned), then serves in the background. `api` is the agent's API client
/// (`--kubeconfig`), which the webhook authentication and authorization modes need.
pub async fn serve_main(
    state: Arc<ServerState>,
    api: Option<Arc<ApiClient>>,
) -> Result<(), ServeError> {
    let config = state.config.clone();
    let main = MainServer::new(state, api).await?;
    let listener = bind(SocketAddr::new(config.address, config.port), "main (TLS)").await?;
    main.serve_on(listener, ConnectionLimits::serving());
    Ok(())
}

/// The main server, ready to serve: its TLS and its authentication and authorization.
pub(crate) struct MainServer {
    state: Arc<ServerState>,
    auth: Arc<Auth>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl MainServer {
    pub(crate) async fn new(
        state: Arc<ServerState>,
        api: Option<Arc<ApiClient>>,
    ) -> Result<MainServer, ServeError> {
        let config = state.config.clone();
        let provider = Arc::new(tls::provider(&config)?);
        let auth = Arc::new(build_auth(&config, &provider, api).await?);
        let tls_config =
            tls::server_config(&config, provider, auth.authenticator.client_ca.as_ref())?;
        Ok(MainServer {
            state,
            auth,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls_config)),
        })
    }

    /// Serves on `listener` in the background.
    pub(crate) fn serve_on(self, listener: TcpListener, limits: ConnectionLimits) {
        let MainServer {
            state,
            auth,
            acceptor,
        } = self;
        let table = state.connections.clone();
        spawn_accept_loop(listener, limits, table, move |stream| {
            let (acceptor, state, auth) = (acceptor.clone(), state.clone(), auth.clone());
            async move {
                let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                    .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        debug!("TLS handshake timed out");
                        return;
                    }
                };
                let peer: Arc<Vec<CertificateDer<'static>>> = Arc::new(
                    tls.get_ref()
                        .1
                        .peer_certificates()
                        .map(|c| c.to_vec())
                        .unwrap_or_default(),
                );
                serve_connection(tls, limits, move |req| {
                    router::handle(
                        state.clone(),
                        Port::Main,
                        Some(auth.clone()),
                        peer.clone(),
                        req,
                    )
                })
                .await;
            }
        });
    }
}

#[cfg(test)]
pub(crate) mod test_harness;
#[cfg(test)]
mod tests;
