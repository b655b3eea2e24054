//! The main server end to end in process: TLS, client certificates, the switches that close
//! parts of it, and the start-up warning.

use std::time::Duration;

use super::connections::ConnectionLimits;
use super::test_harness::{Ca, MainUnderTest};
use super::*;

/// Far longer than any step needs, even on a loaded machine; only an upper bound.
const PATIENCE: Duration = Duration::from_secs(60);

/// A rotated client CA file is picked up while the server runs: certificates of the new CA
/// are accepted and those of the old one refused from then on, without a restart. Before,
/// the CA was read once at start.
#[tokio::test]
async fn a_rotated_client_ca_is_used_without_a_restart() {
    let (old, new) = (Ca::new("old-ca"), Ca::new("new-ca"));
    let server = MainUnderTest::start(&old, ConnectionLimits::serving_for(1 << 16), |_| {}).await;
    let (old_user, new_user) = (old.client("alice"), new.client("bob"));
    assert_eq!(server.request("GET", "/pods", Some(&old_user)).await.0, 200);
    assert_eq!(server.request("GET", "/pods", Some(&new_user)).await.0, 401);
    // Replaced as tools replace it: a new file renamed over the old.
    let staged = server.ca_path.with_extension("new");
    std::fs::write(&staged, new.pem()).unwrap();
    std::fs::rename(&staged, &server.ca_path).unwrap();
    let picked_up = async {
        while server.request("GET", "/pods", Some(&new_user)).await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(PATIENCE, picked_up)
        .await
        .expect("the new client CA was not picked up");
    assert_eq!(server.request("GET", "/pods", Some(&old_user)).await.0, 401);
}

/// enableDebuggingHandlers=false answers upstream's debugging paths with its 405 (after
/// authentication), removes /configz, and leaves the rest served. Before, only the
/// streaming routes looked at the switch: container logs, runningpods and configz were
/// served with it off.
#[tokio::test]
async fn debugging_handlers_off_closes_exactly_upstreams_debugging_paths() {
    let ca = Ca::new("ca");
    let server = MainUnderTest::start(&ca, ConnectionLimits::serving_for(1 << 16), |c| {
        c.enable_debugging_handlers = false;
    })
    .await;
    let user = ca.client("admin");
    for (method, path) in [
        ("GET", "/containerLogs/ns/pod/c"),
        ("GET", "/containerLogs/ns/pod/c?tailLines=1"),
        ("GET", "/runningpods/"),
        ("GET", "/exec/ns/pod/c?command=ls&output=1"),
        ("POST", "/attach/ns/pod/c"),
        ("GET", "/portForward/ns/pod"),
        ("POST", "/run/ns/pod/c?cmd=ls"),
        ("GET", "/debug/pprof/"),
        ("GET", "/logs/"),
    ] {
        assert_eq!(
            server.request(method, path, Some(&user)).await,
            (405, "Debug endpoints are disabled.\n".to_string()),
            "{method} {path}"
        );
        // Authentication still comes first.
        assert_eq!(server.request(method, path, None).await.0, 401, "{path}");
    }
    assert_eq!(server.request("GET", "/configz", Some(&user)).await.0, 404);
    assert_eq!(server.request("GET", "/pods", Some(&user)).await.0, 200);
    assert_eq!(server.request("GET", "/healthz", Some(&user)).await.0, 200);

    // With the switch on (the default) the same paths reach their handlers.
    let open = MainUnderTest::start(&ca, ConnectionLimits::serving_for(1 << 16), |_| {}).await;
    assert_eq!(open.request("GET", "/configz", Some(&user)).await.0, 200);
    assert_eq!(
        open.request("GET", "/runningpods/", Some(&user)).await.0,
        200
    );
    assert_eq!(
        open.request("GET", "/containerLogs/ns/pod/c", Some(&user))
            .await,
        (404, "pod \"pod\" does not exist".to_string())
    );
}

/// The debugging switch cannot be walked around by spelling a path differently: every
/// debugging route, written as `/x`, `//x`, `/./x`, `/a/../x`, with a doubled slash inside, or
/// with `%2F` for its slashes, either gets the 405 (switch off), a 301 to the clean path
/// (which then gets the 405), or a 404 (`%2F` is not a separator: no route); never the
/// handler. With the switch on, the unclean spellings are redirected the same way (Go's
/// ServeMux) and the clean one reaches the handler. Before, `POST //exec/...` reached the
/// exec handler with the switch off, as the gate looked at the path's text.
#[tokio::test]
async fn no_spelling_of_a_debugging_path_passes_the_switch() {
    let ca = Ca::new("ca");
    let user = ca.client("admin");
    let closed = MainUnderTest::start(&ca, ConnectionLimits::serving_for(1 << 16), |c| {
        c.enable_debugging_handlers = false;
    })
    .await;
    let open = MainUnderTest::start(&ca, ConnectionLimits::serving_for(1 << 16), |_| {}).await;
    let disabled = (405, "Debug endpoints are disabled.\n".to_string());
    for (method, clean) in [
        ("POST", "/exec/ns/pod/c?command=sh&input=1&output=1"),
        ("GET", "/exec/ns/pod/c?command=sh&output=1"),
        ("POST", "/run/ns/pod/c?cmd=sh"),
        ("POST", "/attach/ns/pod/c?output=1"),
        ("GET", "/portForward/ns/pod?port=80"),
        ("GET", "/containerLogs/ns/pod/c"),
        ("GET", "/runningpods/"),
        ("GET", "/logs/"),
        ("GET", "/debug/pprof/"),
    ] {
        let (path, query) = clean.split_once('?').unwrap_or((clean, ""));
        let with_query = |p: &str| {
            if query.is_empty() {
                p.to_string()
            } else {
                format!("{p}?{query}")
            }
        };
        let rest = &path[1..];
        let first = rest.split('/').next().unwrap();
        let unclean = [
            format!("//{rest}"),
            format!("/./{rest}"),
            format!("/a/../{rest}"),
            format!("/{first}//{}", rest[first.len()..].trim_start_matches('/')),
        ];
        // The switch off: the clean path is refused, after authentication.
        assert_eq!(
            closed.request(method, clean, Some(&user)).await,
            disabled,
            "{method} {clean}"
        );
        for spelled in &unclean {
            let target = with_query(spelled);
            for server in [&closed, &open] {
                let (code, head, _) = server.request_with_head(method, &target, Some(&user)).await;
                assert_eq!(code, 301, "{method} {target}: {head}");
                let location = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("location").then(|| value.trim())
                    })
                    .unwrap_or_else(|| panic!("{method} {target}: no location in {head}"));
                assert_eq!(location, clean, "{method} {target}");
                // Before authentication, as Go's ServeMux answers it.
                assert_eq!(server.request(method, &target, None).await.0, 301);
            }
        }
        // %2F for the slashes after the first: one segment, no route, not found; never the
        // handler, with the switch on or off.
        let escaped = with_query(&format!("/{}", rest.replace('/', "%2F")));
        if rest.contains('/') && !rest.ends_with('/') {
            for server in [&closed, &open] {
                let (code, body) = server.request(method, &escaped, Some(&user)).await;
                assert!(
                    code == 404 || code == 405,
                    "{method} {escaped}: {code} {body}"
                );
                if code == 405 {
                    assert_eq!((code, body), disabled, "{method} {escaped}");
                }
            }
        }
    }
    // The switch on: the clean path reaches its handler (here: no such pod).
    assert_eq!(
        open.request("GET", "/containerLogs/ns/pod/c", Some(&user))
            .await,
        (404, "pod \"pod\" does not exist".to_string())
    );
}

fn open_config(address: &str, anonymous: bool, mode: AuthorizationMode) -> Config {
    let mut c = Config::defaults(false);
    c.address = address.parse().unwrap();
    c.anonymous_auth = anonymous;
    c.authorization_mode = mode;
    c
}

#[test]
fn anonymous_always_allow_on_a_reachable_address_is_warned_about() {
    use AuthorizationMode::{AlwaysAllow, Webhook};
    let warning =
        open_main_server_warning(&open_config("0.0.0.0", true, AlwaysAllow)).expect("a warning");
    for needle in [
        "0.0.0.0:10250",
        "--anonymous-auth",
        "--authorization-mode=AlwaysAllow",
        "exec",
    ] {
        assert!(warning.contains(needle), "{needle} missing: {warning}");
    }
    assert!(open_main_server_warning(&open_config("10.1.2.3", true, AlwaysAllow)).is_some());
    assert!(open_main_server_warning(&open_config("::", true, AlwaysAllow)).is_some());
    // Loopback only, or either check on: no warning.
    for (address, anonymous, mode) in [
        ("127.0.0.1", true, AlwaysAllow),
        ("::1", true, AlwaysAllow),
        ("::ffff:127.0.0.1", true, AlwaysAllow),
        ("0.0.0.0", false, AlwaysAllow),
        ("0.0.0.0", true, Webhook),
    ] {
        assert_eq!(
            open_main_server_warning(&open_config(address, anonymous, mode)),
            None,
            "{address} {anonymous} {mode:?}"
        );
    }
    // The server is not started at all: nothing to warn about.
    let mut closed = open_config("0.0.0.0", true, AlwaysAllow);
    closed.enable_server = false;
    assert_eq!(open_main_server_warning(&closed), None);
}

/// Two distinct free loopback ports: both listeners are held until both ports are known,
/// since a port released at once is the next bind's again.
async fn two_free_ports() -> (u16, u16) {
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// enableServer=false: the main port is never opened, the read-only port still is (as
/// upstream's startKubelet). Before, the field was accepted and ignored: 10250 was served.
#[tokio::test]
async fn enable_server_false_leaves_the_main_port_closed() {
    for enable_server in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults(false);
        config.node_name = "node".into();
        config.cert_dir = dir.path().to_path_buf();
        config.address = "127.0.0.1".parse().unwrap();
        (config.port, config.read_only_port) = two_free_ports().await;
        config.authentication_token_webhook = false;
        config.authorization_mode = AuthorizationMode::AlwaysAllow;
        config.enable_server = enable_server;
        let (port, read_only) = (config.port, config.read_only_port);
        let state = ServerState::new(
            Arc::new(config),
            crate::pod::status_manager::StatusManager::new(),
        );
        serve_configured(state, None).await.unwrap();
        let main = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
        assert_eq!(main.is_ok(), enable_server, "main port open: {main:?}");
        tokio::net::TcpStream::connect(("127.0.0.1", read_only))
            .await
            .expect("the read-only port is served either way");
    }
}
