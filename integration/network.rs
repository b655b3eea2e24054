//! The pod network layer against the real thing: nsfs-pinned namespaces and Debian's CNI
//! plugins (bridge, host-local, loopback, portmap). Runs only with KUBELET_RS_INTEGRATION=1,
//! as root. Each test owns a bridge `krstest<N>` and subnet 10.123.<N>.0/24, keeps host-local's
//! state in a temp dir, and removes its bridge, namespaces and iptables rules even when it fails.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kubelet_rs::network::cni::{AttachRequest, Cni, PortMapping};
use kubelet_rs::network::netns::{self, DEFAULT_NETNS_DIR};
use kubelet_rs::network::NetworkError;
use serde_json::json;

const BIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];
const GREETING: &str = "hello from the pod";

/// Panics unless the host may and can run these tests: reached only when the ignored tests
/// were asked for, so a missing piece is a failure, never a skip.
fn require(test: &str) {
    assert!(
        std::env::var("KUBELET_RS_INTEGRATION").as_deref() == Ok("1"),
        "{test}: these tests make bridges, namespaces and iptables rules on this host; set \
         KUBELET_RS_INTEGRATION=1 (as root) or run hack/test.sh"
    );
    assert!(
        nix::unistd::geteuid().is_root(),
        "KUBELET_RS_INTEGRATION=1 but not root: namespaces, bridges and iptables need root"
    );
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        assert!(
            Path::new(BIN_DIRS[0]).join(plugin).is_file(),
            "KUBELET_RS_INTEGRATION=1 but CNI plugin {plugin} is missing from {}: install containernetworking-plugins",
            BIN_DIRS[0]
        );
    }
}

fn sh(cmd: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn ok(cmd: &str, args: &[&str]) -> String {
    let (success, text) = sh(cmd, args);
    assert!(success, "{cmd} {args:?} failed: {text}");
    text
}

struct Fixture {
    idx: u8,
    bridge: String,
    network: String,
    tmp: tempfile::TempDir,
    cni: Cni,
    netns: Mutex<Vec<PathBuf>>,
    attached: Mutex<Vec<AttachRequest>>,
    /// portmap is in the chain and its shared nat chains did not exist before: ours to
    /// remove. Fixtures without portmap never touch them (tests run in parallel).
    owns_hostport_chains: bool,
}

impl Fixture {
    fn new(idx: u8, with_portmap: bool) -> Self {
        let bridge = format!("krstest{idx}");
        // A bridge of ours left by a run that was killed: it is safe to remove.
        let _ = sh("ip", &["link", "del", &bridge]);
        let prefix = format!("10.123.{idx}.");
        let addrs = ok("ip", &["-4", "-o", "addr", "show"]);
        let routes = ok("ip", &["-4", "route", "show", "table", "all"]);
        assert!(
            !addrs.contains(&prefix) && !routes.contains(&prefix),
            "subnet {prefix}0/24 is already used on this host; the test needs it free"
        );

        let tmp = tempfile::tempdir().unwrap();
        let conf_dir = tmp.path().join("net.d");
        std::fs::create_dir(&conf_dir).unwrap();
        let network = format!("krstest-{idx}");
        let mut plugins = vec![json!({
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": format!("{prefix}0/24")}]],
                "dataDir": tmp.path().join("ipam"),
            },
        })];
        if with_portmap {
            plugins.push(
                json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
            );
        }
        let conf = json!({"cniVersion": "1.0.0", "name": network, "plugins": plugins});
        std::fs::write(conf_dir.join("10-krstest.conflist"), conf.to_string()).unwrap();

        let cni = Cni::new(
            conf_dir,
            BIN_DIRS.iter().map(PathBuf::from).collect(),
            Duration::from_secs(20),
        )
        .with_result_cache(tmp.path().join("cache"));
        Self {
            idx,
            bridge,
            network,
            tmp,
            cni,
            netns: Mutex::new(Vec::new()),
            attached: Mutex::new(Vec::new()),
            owns_hostport_chains: with_portmap && !nat_rules().contains("CNI-HOSTPORT-"),
        }
    }

    fn subnet_contains(&self, ip: &IpAddr) -> bool {
        matches!(ip, IpAddr::V4(v4) if v4.octets()[..3] == [10, 123, self.idx])
    }

    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 123, self.idx, 1)
    }

    fn ipam_dir(&self) -> PathBuf {
        self.tmp.path().join("ipam").join(&self.network)
    }

    /// host-local keeps one file per allocated IP, named after it.
    fn allocated_ips(&self) -> Vec<String> {
        match std::fs::read_dir(self.ipam_dir()) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<IpAddr>().is_ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    async fn pin(&self) -> PathBuf {
        let name = netns::new_netns_name();
        let path = netns::pin(Path::new(DEFAULT_NETNS_DIR), &name)
            .await
            .unwrap();
        self.netns.lock().unwrap().push(path.clone());
        path
    }

    fn request(&self, netns: &Path, sandbox: &str, ports: Vec<PortMapping>) -> AttachRequest {
        let req = AttachRequest {
            sandbox_id: format!("krstest{}-{sandbox}", self.idx),
            netns: netns.to_path_buf(),
            pod_name: format!("pod-{sandbox}"),
            pod_namespace: "krstest".into(),
            pod_uid: format!("uid-{sandbox}"),
            port_mappings: ports,
        };
        self.attached.lock().unwrap().push(req.clone());
        req
    }

    async fn cleanup(&self) {
        let attached = std::mem::take(&mut *self.attached.lock().unwrap());
        for req in attached {
            if let Err(e) = self.cni.del(&req).await {
                eprintln!("cleanup: CNI DEL of {}: {e}", req.sandbox_id);
            }
        }
        let pinned = std::mem::take(&mut *self.netns.lock().unwrap());
        for path in pinned {
            if let Err(e) = netns::remove(&path).await {
                eprintln!("cleanup: {e}");
            }
        }
        let _ = sh("ip", &["link", "del", &self.bridge]);
        if self.owns_hostport_chains {
            remove_portmap_base_chains();
        }
        // net.ipv4.ip_forward, which the bridge plugin turns on for a gateway bridge, stays
        // on: other pods on this host may rely on it by now.
    }
}

fn nat_rules() -> String {
    ok("iptables", &["-w", "-t", "nat", "-S"])
}

/// portmap leaves its shared chains and their jumps from the built-in chains in place after
/// DEL (they serve every pod); a test host that had none gets none back. Jumps are deleted by
/// line number because their quoted comments do not survive a split on whitespace.
fn remove_portmap_base_chains() {
    for builtin in ["PREROUTING", "OUTPUT", "POSTROUTING"] {
        let listing = ok(
            "iptables",
            &["-w", "-t", "nat", "-L", builtin, "-n", "--line-numbers"],
        );
        let mut numbers: Vec<u32> = listing
            .lines()
            .filter_map(|l| {
                let mut cols = l.split_whitespace();
                let num = cols.next()?.parse().ok()?;
                cols.next()
                    .filter(|target| target.starts_with("CNI-HOSTPORT-"))
                    .map(|_| num)
            })
            .collect();
        numbers.sort_unstable_by(|a, b| b.cmp(a));
        for n in numbers {
            let _ = sh(
                "iptables",
                &["-w", "-t", "nat", "-D", builtin, &n.to_string()],
            );
        }
    }
    for chain in [
        "CNI-HOSTPORT-DNAT",
        "CNI-HOSTPORT-SETMARK",
        "CNI-HOSTPORT-MASQ",
    ] {
        let _ = sh("iptables", &["-w", "-t", "nat", "-F", chain]);
        let _ = sh("iptables", &["-w", "-t", "nat", "-X", chain]);
    }
}

/// Runs the test body, then the fixture's cleanup whether the body passed or panicked.
async fn with_fixture<F, Fut>(idx: u8, with_portmap: bool, body: F)
where
    F: FnOnce(&'static Fixture) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Leaked so the body may borrow it across awaits; one small struct per test.
    let fx: &'static Fixture = Box::leak(Box::new(Fixture::new(idx, with_portmap)));
    let outcome = AssertUnwindSafe(body(fx)).catch_unwind().await;
    fx.cleanup().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A TCP server on `port` inside the namespace, answering up to `conns` connections until
/// `deadline`. It runs on its own thread because joining a namespace moves the thread.
fn serve_in(
    netns: &Path,
    port: u16,
    conns: usize,
    deadline: Duration,
) -> std::thread::JoinHandle<usize> {
    let netns = netns.to_path_buf();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let file = std::fs::File::open(&netns).unwrap();
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let listener = TcpListener::bind(("0.0.0.0", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        let (end, mut served) = (Instant::now() + deadline, 0);
        while served < conns && Instant::now() < end {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let _ = stream.write_all(GREETING.as_bytes());
                    served += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        served
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the in-pod server did not start");
    handle
}

fn fetch(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text)
}

fn netns_name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: run hack/test.sh"]
async fn pinned_netns_attach_detach_lifecycle() {
    require("pinned_netns_attach_detach_lifecycle");
    with_fixture(1, false, |fx| async move {
        let path = fx.pin().await;
        let name = netns_name(&path);
        assert!(netns::netns_exists(&path));
        let links = ok("ip", &["-n", name, "link"]);
        assert!(links.contains("lo:") && !links.contains("eth0"), "{links}");

        let req = fx.request(&path, "a", vec![]);
        let res = fx.cni.add(&req).await.unwrap();
        assert_eq!(res.interface, "eth0");
        let ip = res.ips[0];
        assert!(fx.subnet_contains(&ip), "{ip} is outside the test subnet");
        let eth0 = ok("ip", &["-n", name, "-4", "addr", "show", "eth0"]);
        assert!(eth0.contains(&format!("{ip}/24")), "{eth0}");
        let lo = ok("ip", &["-n", name, "link", "show", "lo"]);
        assert!(lo.contains(",UP"), "lo is not up: {lo}");
        assert_eq!(fx.allocated_ips(), vec![ip.to_string()]);

        // The host reaches the pod through the bridge.
        let server = serve_in(&path, 8080, 1, Duration::from_secs(5));
        assert_eq!(fetch(SocketAddr::new(ip, 8080)).unwrap(), GREETING);
        assert_eq!(server.join().unwrap(), 1);
        if sh("sh", &["-c", "command -v ping"]).0 {
            ok("ping", &["-c1", "-W2", &ip.to_string()]);
        }

        fx.cni.del(&req).await.unwrap();
        assert!(
            fx.allocated_ips().is_empty(),
            "host-local still holds {:?}",
            fx.allocated_ips()
        );
        let (has_eth0, _) = sh("ip", &["-n", name, "link", "show", "eth0"]);
        assert!(!has_eth0, "eth0 survived DEL");
        fx.cni.del(&req).await.expect("a second DEL succeeds");

        // The released address space is usable again.
        let again = fx.cni.add(&req).await.unwrap();
        assert!(fx.subnet_contains(&again.ips[0]));
        fx.cni.del(&req).await.unwrap();
        assert!(fx.allocated_ips().is_empty());

        netns::remove(&path).await.unwrap();
        assert!(!netns::netns_exists(&path) && !path.exists());
        let (listed, _) = sh("ip", &["-n", name, "link"]);
        assert!(!listed, "the namespace is still reachable by name");
        netns::remove(&path).await.expect("removing twice is fine");

        // ADD again, then lose the namespace before DEL (a reboot, a crash): DEL still frees
        // the address and succeeds.
        let path2 = fx.pin().await;
        let req2 = fx.request(&path2, "b", vec![]);
        fx.cni.add(&req2).await.unwrap();
        assert_eq!(fx.allocated_ips().len(), 1);
        netns::remove(&path2).await.unwrap();
        fx.cni
            .del(&req2)
            .await
            .expect("DEL after the namespace is gone");
        assert!(fx.allocated_ips().is_empty());
    })
    .await;
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: run hack/test.sh"]
async fn missing_plugin_is_named_and_nothing_leaks() {
    require("missing_plugin_is_named_and_nothing_leaks");
    with_fixture(2, false, |fx| async move {
        let conf_dir = fx.tmp.path().join("net.d");
        std::fs::write(
            conf_dir.join("10-krstest.conflist"),
            json!({"cniVersion": "1.0.0", "name": fx.network, "plugins": [{"type": "krstest-no-such-plugin"}]}).to_string(),
        )
        .unwrap();
        let path = fx.pin().await;
        let err = fx.cni.add(&fx.request(&path, "a", vec![])).await.unwrap_err();
        assert!(
            matches!(&err, NetworkError::PluginNotFound { plugin, .. } if plugin == "krstest-no-such-plugin"),
            "{err}"
        );
        assert!(err.to_string().contains("krstest-no-such-plugin"), "{err}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: run hack/test.sh"]
async fn empty_conf_dir_is_network_not_ready() {
    require("empty_conf_dir_is_network_not_ready");
    let empty = tempfile::tempdir().unwrap();
    let cni = Cni::new(
        empty.path(),
        BIN_DIRS.iter().map(PathBuf::from).collect(),
        Duration::from_secs(5),
    );
    let req = AttachRequest {
        sandbox_id: "krstest-noconf".into(),
        netns: PathBuf::from("/var/run/netns/krstest-none"),
        pod_name: "p".into(),
        pod_namespace: "n".into(),
        pod_uid: "u".into(),
        port_mappings: vec![],
    };
    let err = cni.add(&req).await.unwrap_err();
    assert!(
        matches!(&err, NetworkError::NoConfig { dir } if dir == empty.path()),
        "{err}"
    );
    assert!(err.to_string().contains("network not ready"), "{err}");
}

#[tokio::test]
#[ignore = "needs root and the CNI plugins: run hack/test.sh"]
async fn host_port_through_portmap() {
    require("host_port_through_portmap");
    const HOST_PORT: u16 = 18473;
    const UDP_HOST_PORT: u16 = 18474;
    assert!(
        TcpListener::bind(("0.0.0.0", HOST_PORT)).is_ok(),
        "host port {HOST_PORT} is taken; the test needs it"
    );
    with_fixture(3, true, |fx| async move {
        let path = fx.pin().await;
        let ports = vec![
            PortMapping {
                host_port: HOST_PORT,
                container_port: 8080,
                protocol: "TCP".into(),
                host_ip: String::new(),
            },
            PortMapping {
                host_port: UDP_HOST_PORT,
                container_port: 5353,
                protocol: "UDP".into(),
                host_ip: String::new(),
            },
        ];
        let req = fx.request(&path, "a", ports);
        let res = fx.cni.add(&req).await.unwrap();
        let ip = res.ips[0];

        let rules = nat_rules();
        let ours: Vec<&str> = rules
            .lines()
            .filter(|l| l.contains(&req.sandbox_id) || l.contains(&format!("--dport {HOST_PORT}")))
            .collect();
        assert!(
            ours.iter()
                .any(|l| l.contains(&format!("--to-destination {ip}:8080"))),
            "no DNAT to the pod in:\n{rules}"
        );
        // The UDP mapping gets its own DNAT, matched on udp and not on tcp.
        let udp: Vec<&str> = rules
            .lines()
            .filter(|l| l.contains(&format!("--dport {UDP_HOST_PORT}")))
            .filter(|l| l.contains(&format!("--to-destination {ip}:5353")))
            .collect();
        assert!(
            !udp.is_empty()
                && udp
                    .iter()
                    .all(|l| l.contains("-p udp") && !l.contains("-p tcp")),
            "no udp DNAT for {UDP_HOST_PORT} in:\n{rules}"
        );

        // Locally originated traffic to a local address is DNATed in OUTPUT.
        let server = serve_in(&path, 8080, 2, Duration::from_secs(6));
        let via_gateway = fetch(SocketAddr::new(fx.gateway().into(), HOST_PORT));
        assert_eq!(
            via_gateway.unwrap(),
            GREETING,
            "hostPort via the bridge address"
        );
        // 127.0.0.1 works too: portmap (snat on) sets route_localnet on the bridge and
        // masquerades the localhost source.
        let via_localhost = fetch(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), HOST_PORT));
        assert_eq!(via_localhost.unwrap(), GREETING, "hostPort via 127.0.0.1");
        assert_eq!(server.join().unwrap(), 2);

        fx.cni.del(&req).await.unwrap();
        let rules = nat_rules();
        let left: Vec<&str> = rules
            .lines()
            .filter(|l| {
                l.contains(&format!("--dport {HOST_PORT}"))
                    || l.contains(&format!("--dport {UDP_HOST_PORT}"))
                    || l.contains(&ip.to_string())
            })
            .collect();
        assert!(left.is_empty(), "portmap rules left after DEL: {left:#?}");
        fx.cni.del(&req).await.expect("a second DEL succeeds");
    })
    .await;
}
