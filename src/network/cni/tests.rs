//! Chaining, DEL order, caching and error reporting, with shell-script plugins that record
//! their environment and stdin. Runs as any user: no namespace or real plugin is involved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::*;

struct Fake {
    _tmp: tempfile::TempDir,
    bins: Vec<PathBuf>,
    conf: PathBuf,
    calls: PathBuf,
    cache: PathBuf,
}

#[derive(Debug)]
struct Call {
    plugin: String,
    command: String,
    env: BTreeMap<String, String>,
    stdin: Value,
}

enum Behaviour {
    /// Prints this result on ADD, nothing on DEL.
    Result(Value),
    /// Exits 1 with this stdout and stderr.
    Fail(&'static str, &'static str),
    Hang,
}

impl Fake {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (first_bin, second_bin) = (tmp.path().join("bin1"), tmp.path().join("bin2"));
        let (conf, calls) = (tmp.path().join("net.d"), tmp.path().join("calls"));
        for d in [&first_bin, &second_bin, &conf, &calls] {
            std::fs::create_dir_all(d).unwrap();
        }
        let cache = tmp.path().join("cache");
        Self {
            _tmp: tmp,
            bins: vec![first_bin, second_bin],
            conf,
            calls,
            cache,
        }
    }

    fn cni(&self) -> Cni {
        Cni::new(&self.conf, self.bins.clone(), Duration::from_secs(10))
    }

    fn cached_cni(&self) -> Cni {
        self.cni().with_result_cache(&self.cache)
    }

    /// Installs a plugin in the *second* bin dir, so lookup across dirs is exercised.
    fn plugin(&self, name: &str, behaviour: Behaviour) {
        let record = format!(
            r#"#!/bin/sh
in=$(cat)
n=$(ls '{calls}' | wc -l)
f='{calls}'/$(printf %04d "$n")-{name}-"$CNI_COMMAND"
env | grep '^CNI_' > "$f.tmp"
echo '---' >> "$f.tmp"
printf '%s' "$in" >> "$f.tmp"
mv "$f.tmp" "$f"
"#,
            calls = self.calls.display()
        );
        let act = match behaviour {
            Behaviour::Result(v) => {
                format!("if [ \"$CNI_COMMAND\" = ADD ]; then\ncat <<'EOF'\n{v}\nEOF\nfi\n")
            }
            Behaviour::Fail(out, err) => {
                format!("printf '%s' '{out}'\necho '{err}' >&2\nexit 1\n")
            }
            Behaviour::Hang => "exec sleep 30\n".into(),
        };
        let path = self.bins[1].join(name);
        std::fs::write(&path, record + &act).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn conf_file(&self, name: &str, body: Value) {
        std::fs::write(self.conf.join(name), body.to_string()).unwrap();
    }

    fn calls(&self) -> Vec<Call> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.calls)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                let (env_text, stdin) = text.split_once("---\n").unwrap();
                let env = env_text
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let fname = f.file_name().unwrap().to_str().unwrap();
                let mut parts = fname.splitn(2, '-');
                parts.next();
                let (plugin, command) = parts.next().unwrap().rsplit_once('-').unwrap();
                Call {
                    plugin: plugin.into(),
                    command: command.into(),
                    env,
                    stdin: serde_json::from_str(stdin).unwrap(),
                }
            })
            .collect()
    }

    fn clear_calls(&self) {
        for e in std::fs::read_dir(&self.calls).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
    }

    fn sequence(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| format!("{} {} {}", c.command, c.plugin, c.env["CNI_IFNAME"]))
            .collect()
    }
}

fn request(netns: &Path) -> AttachRequest {
    AttachRequest {
        sandbox_id: "sb1".into(),
        netns: netns.to_path_buf(),
        pod_name: "web-0".into(),
        pod_namespace: "default".into(),
        pod_uid: "uid-123".into(),
        port_mappings: vec![
            PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "TCP".into(),
                host_ip: "127.0.0.1".into(),
            },
            // No host port: must not reach the plugins.
            PortMapping {
                host_port: 0,
                container_port: 9090,
                protocol: "UDP".into(),
                host_ip: String::new(),
            },
        ],
    }
}

fn lo_result() -> Value {
    json!({"cniVersion": "0.3.1", "interfaces": [{"name": "lo", "sandbox": "/x"}],
           "ips": [{"version": "4", "interface": 0, "address": "127.0.0.1/8"}]})
}

fn r1() -> Value {
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": "br0"}, {"name": "eth0", "sandbox": "/x"}],
           "ips": [{"interface": 1, "address": "fd00::7/64"}, {"interface": 1, "address": "10.9.0.7/24"}]})
}

fn r2() -> Value {
    let mut r = r1();
    r["dns"] = json!({"nameservers": ["10.9.0.1"]});
    r
}

fn r3() -> Value {
    let mut r = r2();
    r["marker"] = json!("last");
    r
}

/// bridge-ish → portmap-ish (declares portMappings) → bw-ish (declares bandwidth, which
/// nobody passes).
fn chain(fake: &Fake) {
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    fake.plugin("fbridge", Behaviour::Result(r1()));
    fake.plugin("fportmap", Behaviour::Result(r2()));
    fake.plugin("fbw", Behaviour::Result(r3()));
    fake.conf_file(
        "10-test.conflist",
        json!({"cniVersion": "1.0.0", "name": "testnet", "plugins": [
            {"type": "fbridge", "bridge": "br0"},
            {"type": "fportmap", "capabilities": {"portMappings": true}},
            {"type": "fbw", "capabilities": {"bandwidth": true, "portMappings": false}}]}),
    );
}

#[tokio::test]
async fn add_runs_loopback_then_the_chain_passing_prev_result_and_declared_runtime_config() {
    let fake = Fake::new();
    chain(&fake);
    let netns = fake.conf.join("not-a-netns");
    let res = fake.cni().add(&request(&netns)).await.unwrap();

    assert_eq!(
        res.ips,
        vec![
            "10.9.0.7".parse::<IpAddr>().unwrap(),
            "fd00::7".parse().unwrap()
        ]
    );
    assert_eq!(res.interface, "eth0");
    assert_eq!(res.raw, r3());
    assert_eq!(
        fake.sequence(),
        [
            "ADD loopback lo",
            "ADD fbridge eth0",
            "ADD fportmap eth0",
            "ADD fbw eth0"
        ]
    );

    let calls = fake.calls();
    let cni_path = format!("{}:{}", fake.bins[0].display(), fake.bins[1].display());
    for call in &calls {
        assert_eq!(call.env["CNI_COMMAND"], "ADD");
        assert_eq!(call.env["CNI_CONTAINERID"], "sb1");
        assert_eq!(call.env["CNI_NETNS"], netns.to_str().unwrap());
        assert_eq!(call.env["CNI_PATH"], cni_path);
        assert_eq!(
            call.env["CNI_ARGS"],
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=uid-123"
        );
    }
    let (lo, bridge, portmap, bw) = (
        &calls[0].stdin,
        &calls[1].stdin,
        &calls[2].stdin,
        &calls[3].stdin,
    );
    assert_eq!(lo["name"], "cni-loopback");
    assert_eq!(lo["cniVersion"], "0.3.1");
    assert!(lo.get("prevResult").is_none() && lo.get("runtimeConfig").is_none());

    assert_eq!(bridge["name"], "testnet");
    assert_eq!(bridge["cniVersion"], "1.0.0");
    assert_eq!(bridge["bridge"], "br0");
    assert!(bridge.get("prevResult").is_none() && bridge.get("runtimeConfig").is_none());

    assert_eq!(portmap["prevResult"], r1());
    assert_eq!(
        portmap["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"}]})
    );
    assert_eq!(bw["prevResult"], r2());
    assert!(bw.get("runtimeConfig").is_none(), "{bw}");
}

#[tokio::test]
async fn del_runs_in_reverse_with_the_cached_result_and_is_idempotent() {
    let fake = Fake::new();
    chain(&fake);
    let cni = fake.cached_cni();
    let req = request(&fake.conf.join("not-a-netns"));
    cni.add(&req).await.unwrap();
    assert!(fake.cache.join("sb1-eth0.json").exists());
    assert!(fake.cache.join("sb1-lo.json").exists());
    fake.clear_calls();

    cni.del(&req).await.unwrap();
    assert_eq!(
        fake.sequence(),
        [
            "DEL fbw eth0",
            "DEL fportmap eth0",
            "DEL fbridge eth0",
            "DEL loopback lo"
        ]
    );
    let calls = fake.calls();
    for call in &calls {
        assert_eq!(call.env["CNI_COMMAND"], "DEL");
        // The path is no namespace, as after a reboot: plugins get an empty CNI_NETNS.
        assert_eq!(call.env["CNI_NETNS"], "");
    }
    for call in &calls[..3] {
        assert_eq!(call.stdin["prevResult"], r3(), "{}", call.plugin);
    }
    // portmap finds its rules through the mappings: DEL gets them too.
    assert_eq!(
        calls[1].stdin["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    // The loopback network is 0.3.1: no prevResult on DEL before CNI 0.4.0.
    assert!(calls[3].stdin.get("prevResult").is_none());
    assert!(!fake.cache.join("sb1-eth0.json").exists());
    assert!(!fake.cache.join("sb1-lo.json").exists());

    fake.clear_calls();
    cni.del(&req).await.unwrap();
    assert_eq!(fake.sequence().len(), 4);
    assert!(fake.calls()[0].stdin.get("prevResult").is_none());
}

#[tokio::test]
async fn del_replays_the_cached_config_when_the_conf_dir_changed() {
    let fake = Fake::new();
    chain(&fake);
    let cni = fake.cached_cni();
    let req = request(&fake.conf.join("ns"));
    cni.add(&req).await.unwrap();

    std::fs::remove_file(fake.conf.join("10-test.conflist")).unwrap();
    fake.plugin("other", Behaviour::Result(r1()));
    fake.conf_file(
        "05-other.conf",
        json!({"cniVersion": "1.0.0", "name": "other", "type": "other"}),
    );
    fake.clear_calls();
    cni.del(&req).await.unwrap();
    assert_eq!(
        fake.sequence(),
        [
            "DEL fbw eth0",
            "DEL fportmap eth0",
            "DEL fbridge eth0",
            "DEL loopback lo"
        ]
    );

    // Nothing cached any more: DEL goes by the current config.
    fake.clear_calls();
    cni.del(&req).await.unwrap();
    assert_eq!(fake.sequence(), ["DEL other eth0", "DEL loopback lo"]);
}

#[tokio::test]
async fn single_conf_is_a_one_plugin_list_without_prev_result_on_del_before_0_4_0() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    fake.plugin(
        "solo",
        Behaviour::Result(json!({"cniVersion": "0.3.1",
            "interfaces": [{"name": "eth0", "sandbox": "/x"}],
            "ips": [{"version": "4", "interface": 0, "address": "10.5.0.9/16"}]})),
    );
    fake.conf_file(
        "solo.json",
        json!({"cniVersion": "0.3.1", "name": "solonet", "type": "solo", "ipam": {"type": "host-local"}}),
    );
    let cni = fake.cached_cni();
    let req = request(&fake.conf.join("ns"));
    let res = cni.add(&req).await.unwrap();
    assert_eq!(res.ips, vec!["10.5.0.9".parse::<IpAddr>().unwrap()]);
    let add = &fake.calls()[1].stdin;
    assert_eq!(add["ipam"], json!({"type": "host-local"}));
    assert_eq!(add["name"], "solonet");
    fake.clear_calls();
    cni.del(&req).await.unwrap();
    assert!(fake.calls()[0].stdin.get("prevResult").is_none());
}

#[tokio::test]
async fn plugin_error_names_plugin_network_and_message_and_undoes_the_add() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    fake.plugin("fbridge", Behaviour::Result(r1()));
    fake.plugin(
        "broken",
        Behaviour::Fail(
            r#"{"cniVersion":"1.0.0","code":11,"msg":"failed to allocate","details":"range is full"}"#,
            "log line",
        ),
    );
    fake.conf_file(
        "10.conflist",
        json!({"cniVersion": "1.0.0", "name": "net1", "plugins": [{"type": "fbridge"}, {"type": "broken"}]}),
    );
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    match &err {
        NetworkError::PluginFailed {
            plugin,
            network,
            command,
            code,
            message,
            ..
        } => {
            assert_eq!(
                (plugin.as_str(), network.as_str(), *command),
                ("broken", "net1", "ADD")
            );
            assert_eq!(*code, Some(11));
            assert!(
                message.contains("failed to allocate: range is full"),
                "{message}"
            );
        }
        other => panic!("unexpected error {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("broken") && text.contains("net1") && text.contains("sb1"),
        "{text}"
    );
    // Teardown ran. The failing plugin fails its DEL too, which stops that chain as in
    // libcni, but the loopback network is still detached.
    assert_eq!(
        fake.sequence(),
        [
            "ADD loopback lo",
            "ADD fbridge eth0",
            "ADD broken eth0",
            "DEL broken eth0",
            "DEL loopback lo"
        ]
    );
}

#[tokio::test]
async fn failure_without_cni_error_json_reports_stderr() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Fail("", "cannot open netns"));
    fake.conf_file(
        "10.conf",
        json!({"cniVersion": "1.0.0", "name": "n", "type": "loopback"}),
    );
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("cannot open netns") && text.contains("exit status: 1"),
        "{text}"
    );
}

#[tokio::test]
async fn missing_plugin_is_named() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    fake.conf_file(
        "10.conflist",
        json!({"cniVersion": "1.0.0", "name": "net1", "plugins": [{"type": "nosuchplugin"}]}),
    );
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, NetworkError::PluginNotFound { plugin, network, .. } if plugin == "nosuchplugin" && network == "net1"),
        "{err}"
    );
    assert!(
        err.to_string().contains(fake.bins[0].to_str().unwrap()),
        "{err}"
    );
}

#[tokio::test]
async fn no_config_runs_nothing() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, NetworkError::NoConfig { ref dir } if dir == &fake.conf),
        "{err}"
    );
    assert!(fake.calls().is_empty());
    assert!(fake.cni().network_status().is_err());
}

#[tokio::test]
async fn hung_plugin_times_out() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Hang);
    fake.conf_file(
        "10.conf",
        json!({"cniVersion": "1.0.0", "name": "n", "type": "loopback"}),
    );
    let cni = Cni::new(&fake.conf, fake.bins.clone(), Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = cni.add(&request(&fake.conf.join("ns"))).await.unwrap_err();
    assert!(matches!(err, NetworkError::PluginTimeout { .. }), "{err}");
    // ADD and the teardown DEL each time out once (0.6 s); a hang would be forever. The
    // bound leaves room for a loaded machine's process spawns and kills.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn result_without_an_eth0_address_is_no_address() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    fake.plugin(
        "fbridge",
        Behaviour::Result(json!({"cniVersion": "1.0.0", "interfaces": [], "ips": []})),
    );
    fake.conf_file(
        "10.conf",
        json!({"cniVersion": "1.0.0", "name": "n", "type": "fbridge"}),
    );
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    assert!(matches!(err, NetworkError::NoAddress { .. }), "{err}");
}

#[tokio::test]
async fn add_without_a_result_is_an_error() {
    let fake = Fake::new();
    fake.plugin("loopback", Behaviour::Result(lo_result()));
    // Prints nothing on ADD: a broken chained plugin.
    fake.plugin("silent", Behaviour::Result(json!(null)));
    std::fs::write(fake.bins[1].join("silent"), "#!/bin/sh\ncat >/dev/null\n").unwrap();
    fake.conf_file(
        "10.conf",
        json!({"cniVersion": "1.0.0", "name": "n", "type": "silent"}),
    );
    let err = fake
        .cni()
        .add(&request(&fake.conf.join("ns")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("printed no result"), "{err}");
}

#[test]
fn requests_that_would_corrupt_cni_args_or_paths_are_refused() {
    let ok = request(Path::new("/var/run/netns/x"));
    assert_eq!(validate(&ok).unwrap(), "/var/run/netns/x");
    let mut bad = ok.clone();
    bad.pod_name = "a;b".into();
    assert!(validate(&bad).unwrap_err().to_string().contains("pod name"));
    let mut bad = ok.clone();
    bad.sandbox_id = "../x".into();
    assert!(validate(&bad).is_err());
    let mut bad = ok;
    bad.netns = PathBuf::new();
    assert!(validate(&bad).is_err());
}
