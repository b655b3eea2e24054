//! A docker registry on loopback for pull tests (Debian's docker-registry, filled with
//! skopeo): open, with basic auth (user `test`, password `test`), or with the bearer-token
//! flow through a token server of the test's own. Shared by the puller's tests
//! (integration/pull.rs) and the cluster's imagePullSecrets tests (integration/cluster_env.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, require_integration};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// bcrypt (cost 4, to keep per-request checks cheap) of the password `test`, user `test`.
pub const HTPASSWD: &str = "test:$2b$04$DYD1EmHU5N0RT013oGRHZOUZ0hdPpOqJDWUMeJpAbBbpaJZWQrRy2";

/// The pull tests' prerequisites on top of the harness's: a missing one fails the test.
pub fn require(test: &str) {
    require_integration(test);
    assert!(
        Path::new(REGISTRY_BIN).is_file(),
        "KUBELET_RS_INTEGRATION=1 but {REGISTRY_BIN} is missing: apt-get install docker-registry"
    );
    assert!(
        Command::new("skopeo").arg("--version").output().is_ok(),
        "KUBELET_RS_INTEGRATION=1 but skopeo is missing: apt-get install skopeo"
    );
    assert!(
        busybox_tar().is_file(),
        "test image {} is missing: run hack/build-images.sh",
        busybox_tar().display()
    );
}

pub fn busybox_tar() -> PathBuf {
    PathBuf::from(
        std::env::var("KUBELET_RS_CACHE").unwrap_or_else(|_| "/var/cache/kubelet-rs".into()),
    )
    .join("images/busybox.oci.tar")
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd} {args:?} failed: {text}");
    text
}

/// How a test registry admits clients.
pub enum Auth<'a> {
    Open,
    /// HTTP basic auth against HTPASSWD.
    Htpasswd,
    /// The bearer-token flow: tokens issued by this server and signed with its certificate.
    Token(&'a TokenServer),
}

/// A docker-registry on 127.0.0.1:<port>, killed and its storage removed on drop.
pub struct Registry {
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub child: Child,
}

impl Registry {
    pub fn start(auth: Auth) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: test\n",
            dir.path().join("data").display()
        );
        match auth {
            Auth::Open => {}
            Auth::Htpasswd => {
                let h = dir.path().join("htpasswd");
                std::fs::write(&h, format!("{HTPASSWD}\n")).unwrap();
                config.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: kubelet-rs-test\n    path: {}\n",
                    h.display()
                ));
            }
            Auth::Token(tokens) => {
                let bundle = dir.path().join("token-ca.pem");
                std::fs::write(&bundle, &tokens.cert_pem).unwrap();
                config.push_str(&format!(
                    "auth:\n  token:\n    realm: http://127.0.0.1:{}/token\n    service: {TOKEN_SERVICE}\n    issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
                    tokens.port,
                    bundle.display()
                ));
            }
        }
        let cfg = dir.path().join("config.yml");
        std::fs::write(&cfg, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        let r = Registry { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "registry did not listen: {}",
                std::fs::read_to_string(r.dir.path().join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// skopeo copy of the busybox test image to `repo:tag` here.
    pub fn push_busybox(&self, repo_tag: &str, creds: Option<&str>) {
        let src = format!("oci-archive:{}", busybox_tar().display());
        let dest = format!("docker://{}/{repo_tag}", self.host());
        let mut args = vec!["copy", "--quiet", "--dest-tls-verify=false"];
        if let Some(c) = creds {
            args.extend(["--dest-creds", c]);
        }
        args.extend([src.as_str(), dest.as_str()]);
        run("skopeo", &args);
    }

    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const TOKEN_SERVICE: &str = "kubelet-rs-test";
pub const TOKEN_ISSUER: &str = "kubelet-rs-test-issuer";

/// One request the token server answered.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub service: Option<String>,
    pub scopes: Vec<String>,
    pub authorization: Option<String>,
    pub granted: bool,
}

/// A registry token server on 127.0.0.1:<port>: GET /token issues an ES256 JWT granting
/// whatever scopes were asked for, to user `test` with password `test` only. The signing
/// certificate is self-signed; the registry trusts it as its root bundle.
pub struct TokenServer {
    pub port: u16,
    pub cert_pem: String,
    pub requests: std::sync::Arc<std::sync::Mutex<Vec<TokenRequest>>>,
}

impl TokenServer {
    pub fn start() -> TokenServer {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubelet-rs test token signer");
        let cert = params.self_signed(&key).unwrap();
        let rng = ring::rand::SystemRandom::new();
        let signer = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &rng,
        )
        .unwrap();
        let x5c = b64(cert.der(), false);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = requests.clone();
        // Never joined: the listener lives as long as the test process, which is short.
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = serve_token(conn, &signer, &rng, &x5c, &log);
            }
        });
        TokenServer {
            port,
            cert_pem: cert.pem(),
            requests,
        }
    }

    /// The requests so far, forgetting them.
    pub fn take_requests(&self) -> Vec<TokenRequest> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

pub fn serve_token(
    mut conn: std::net::TcpStream,
    signer: &ring::signature::EcdsaKeyPair,
    rng: &ring::rand::SystemRandom,
    x5c: &str,
    log: &std::sync::Mutex<Vec<TokenRequest>>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let target = lines
        .next()
        .and_then(|l| l.strip_prefix("GET "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("")
        .to_string();
    let authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_string());
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut req = TokenRequest {
        service: None,
        scopes: Vec::new(),
        authorization,
        granted: false,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "service" => req.service = Some(url_decode(v)),
            // Clients may ask for several scopes in one scope parameter or in repeated ones.
            "scope" => req
                .scopes
                .extend(url_decode(v).split(' ').map(str::to_string)),
            _ => {}
        }
    }
    let expected_auth = format!("Basic {}", b64(b"test:test", false));
    let (status, extra, body) = if path != "/token" {
        ("404 Not Found", "", String::new())
    } else if req.authorization.as_deref() != Some(expected_auth.as_str()) {
        (
            "401 Unauthorized",
            "WWW-Authenticate: Basic realm=\"kubelet-rs-test-token\"\r\n",
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"token server: user test with its password only"}]}"#.to_string(),
        )
    } else {
        req.granted = true;
        let token = sign_token(signer, rng, x5c, req.service.as_deref(), &req.scopes);
        let body = serde_json::json!({
            "token": token,
            "access_token": token,
            "expires_in": 300,
            "issued_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        ("200 OK", "", body.to_string())
    };
    log.lock().unwrap().push(req);
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

/// A JWT as distribution's token auth verifies it: signed by the x5c leaf, which must chain
/// to the root bundle; issuer and audience must match its config; `access` must hold the
/// action each request needs.
pub fn sign_token(
    signer: &ring::signature::EcdsaKeyPair,
    rng: &ring::rand::SystemRandom,
    x5c: &str,
    service: Option<&str>,
    scopes: &[String],
) -> String {
    let access: Vec<serde_json::Value> = scopes
        .iter()
        .filter_map(|s| {
            // type:name:actions, where only the name could hold a colon.
            let (kind, rest) = s.split_once(':')?;
            let (name, actions) = rest.rsplit_once(':')?;
            Some(serde_json::json!({
                "type": kind,
                "name": name,
                "actions": actions.split(',').collect::<Vec<_>>(),
            }))
        })
        .collect();
    let now = chrono::Utc::now().timestamp();
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [x5c]});
    let claims = serde_json::json!({
        "iss": TOKEN_ISSUER,
        "sub": "test",
        "aud": service.unwrap_or(""),
        "exp": now + 300,
        "nbf": now,
        "iat": now,
        "jti": format!("{:016x}", rand::random::<u64>()),
        "access": access,
    });
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes(), true),
        b64(claims.to_string().as_bytes(), true)
    );
    // FIXED signing yields r||s, the JWS encoding; ASN.1 DER would not verify.
    let sig = signer.sign(rng, signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64(sig.as_ref(), true))
}

/// Base64: standard alphabet with padding, or (url) the JWS url-safe one without.
pub fn b64(data: &[u8], url: bool) -> String {
    let alphabet: &[u8; 64] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk.len();
        let v = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= n {
                out.push(alphabet[(v >> (18 - 6 * i) & 63) as usize] as char);
            } else if !url {
                out.push('=');
            }
        }
    }
    out
}

pub fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
