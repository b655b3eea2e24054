//! Pods that read the cluster, against the real control plane (hack/cluster/up.sh): env from
//! ConfigMaps and Secrets (valueFrom and envFrom with a prefix), the Services' variables
//! (the master service's always, the namespace's unless enableServiceLinks is false), a pod waiting for a missing
//! ConfigMap with CreateContainerConfigError until it is created, images pulled with
//! imagePullSecrets from registries that want basic auth and a bearer token, and the agent's
//! port 10250 behind TokenReview and SubjectAccessReview with service-account tokens.

mod common;

use std::process::Command;

use common::cluster::{api_busybox_pod, Cluster, ClusterNode};
use common::container_status;
use common::registry::{self, Auth, Registry, TokenServer};
use serde_json::Value;

/// Objects this test made, deleted when it ends (whatever way it ends).
struct Made {
    cluster: Cluster,
    objects: Vec<(String, String, Option<String>)>,
}

impl Made {
    fn new(cluster: &Cluster) -> Made {
        Made {
            cluster: cluster.clone(),
            objects: Vec::new(),
        }
    }

    /// Remembers `kind/name` (in `default` unless cluster-scoped) for deletion.
    fn add(&mut self, kind: &str, name: &str, namespaced: bool) {
        self.objects.push((
            kind.to_string(),
            name.to_string(),
            namespaced.then(|| "default".to_string()),
        ));
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for (kind, name, ns) in self.objects.iter().rev() {
            let mut args = vec!["delete", kind.as_str(), name.as_str(), "--wait=false"];
            if let Some(ns) = ns {
                args.extend(["-n", ns.as_str()]);
            }
            self.cluster.kubectl(&args);
        }
    }
}

fn waiting(p: &Value) -> (String, String) {
    let w = &container_status(p, "main")["state"]["waiting"];
    (
        w["reason"].as_str().unwrap_or_default().to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    )
}

fn is_running(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && container_status(p, "main")["ready"] == true
}

/// The pod's log through the apiserver and the agent.
fn logs(n: &ClusterNode, pod: &str) -> String {
    let (ok, out) = n.cluster.kubectl(&["-n", "default", "logs", pod]);
    if ok {
        out
    } else {
        String::new()
    }
}

/// Waits until the pod's log shows `ENV` lines, then returns them as name=value pairs.
fn printed_env(n: &ClusterNode, pod: &str) -> Vec<(String, String)> {
    let mut text = String::new();
    n.wait_api(60, "the pod printed its environment", |_| {
        text = logs(n, pod);
        text.contains("END-OF-ENV")
    });
    text.lines()
        .take_while(|l| *l != "END-OF-ENV")
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn env_from_config_maps_and_secrets_reaches_the_container() {
    let n = ClusterNode::start("cluster-env", &[]);
    let mut made = Made::new(&n.cluster);
    let (cm, secret) = (
        format!("env-cfg-{}", n.name()),
        format!("env-sec-{}", n.name()),
    );
    n.cluster.ok(&[
        "-n",
        "default",
        "create",
        "configmap",
        &cm,
        "--from-literal=GREETING=hello",
        "--from-literal=REF=$(GREETING)",
        "--from-literal=SHARED=from-configmap",
    ]);
    made.add("configmap", &cm, true);
    n.cluster.ok(&[
        "-n",
        "default",
        "create",
        "secret",
        "generic",
        &secret,
        "--from-literal=PASSWORD=s3cret with spaces",
        "--from-literal=SHARED=from-secret",
    ]);
    made.add("secret", &secret, true);
    let extra = format!(
        "    envFrom:
    - configMapRef: {{name: {cm}}}
      prefix: CFG_
    - secretRef: {{name: {secret}}}
      prefix: SEC_
    - configMapRef: {{name: absent-{cm}, optional: true}}
    env:
    - name: FROM_CM
      valueFrom: {{configMapKeyRef: {{name: {cm}, key: GREETING}}}}
    - name: FROM_SECRET
      valueFrom: {{secretKeyRef: {{name: {secret}, key: PASSWORD}}}}
    - name: NOT_EXPANDED
      valueFrom: {{configMapKeyRef: {{name: {cm}, key: REF}}}}
    - name: EXPANDED
      value: $(CFG_GREETING)-$(FROM_SECRET)
    - name: CFG_SHARED
      value: env-wins
    - name: SKIPPED
      valueFrom: {{configMapKeyRef: {{name: {cm}, key: nokey, optional: true}}}}
"
    );
    let pod = n.create_pod("env", "env | sort; echo END-OF-ENV; sleep 3600", &extra);
    n.wait_api_pod(&pod, 120, "Running", is_running);
    let env = printed_env(&n, &pod);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("FROM_CM"), Some("hello"), "{env:?}");
    assert_eq!(get("FROM_SECRET"), Some("s3cret with spaces"), "{env:?}");
    assert_eq!(get("CFG_GREETING"), Some("hello"), "{env:?}");
    assert_eq!(get("CFG_REF"), Some("$(GREETING)"), "{env:?}");
    assert_eq!(get("SEC_PASSWORD"), Some("s3cret with spaces"), "{env:?}");
    assert_eq!(get("SEC_SHARED"), Some("from-secret"), "{env:?}");
    assert_eq!(get("CFG_SHARED"), Some("env-wins"), "{env:?}");
    assert_eq!(get("NOT_EXPANDED"), Some("$(GREETING)"), "{env:?}");
    assert_eq!(get("EXPANDED"), Some("hello-s3cret with spaces"), "{env:?}");
    assert_eq!(get("SKIPPED"), None, "{env:?}");
    // No prefix-less copies of envFrom's keys.
    assert_eq!(get("GREETING"), None, "{env:?}");
    // containerd's CRI plugin gives every container the pod's hostname (busybox's shell
    // sets no HOSTNAME of its own).
    assert_eq!(get("HOSTNAME"), Some(pod.as_str()), "{env:?}");
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn service_variables_reach_the_container_unless_service_links_are_off() {
    let n = ClusterNode::start("cluster-svc-env", &[]);
    let mut made = Made::new(&n.cluster);
    let svc = format!("env-svc-{}", n.name());
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: Service
metadata:
  name: {svc}
  namespace: default
spec:
  ports:
  - {{name: sql, port: 5432}}
  - {{name: admin-ui, port: 8080, protocol: UDP}}
"
    ));
    made.add("service", &svc, true);
    let ip_of = |ns: &str, name: &str| {
        let (_, out) = n.cluster.kubectl(&[
            "-n",
            ns,
            "get",
            "service",
            name,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ]);
        out.trim().to_string()
    };
    let (ip, master_ip) = (ip_of("default", &svc), ip_of("default", "kubernetes"));
    assert!(
        !ip.is_empty() && !master_ip.is_empty(),
        "{ip:?} {master_ip:?}"
    );
    let var = svc.to_uppercase().replace('-', "_");

    let extra = "    env:
    - name: DB_URL
      value: postgres://$(KUBERNETES_SERVICE_HOST)/x
";
    let pod = n.create_pod(
        "svc-links",
        "env | sort; echo END-OF-ENV; sleep 3600",
        extra,
    );
    n.wait_api_pod(&pod, 120, "Running", is_running);
    let env = printed_env(&n, &pod);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_string());
    let expected = [
        ("KUBERNETES_SERVICE_HOST".to_string(), master_ip.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), "443".into()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), "443".into()),
        ("DB_URL".into(), format!("postgres://{master_ip}/x")),
        (format!("{var}_SERVICE_HOST"), ip.clone()),
        (format!("{var}_SERVICE_PORT"), "5432".into()),
        (format!("{var}_SERVICE_PORT_ADMIN_UI"), "8080".into()),
        (format!("{var}_PORT"), format!("tcp://{ip}:5432")),
        (format!("{var}_PORT_8080_UDP"), format!("udp://{ip}:8080")),
        (format!("{var}_PORT_8080_UDP_PROTO"), "udp".into()),
        (format!("{var}_PORT_5432_TCP_ADDR"), ip.clone()),
    ];
    for (k, v) in expected {
        assert_eq!(get(&k), Some(v), "{k}: {env:?}");
    }

    // With enableServiceLinks false, only the master service's.
    let extra = "  enableServiceLinks: false\n";
    let pod = n.create_pod("no-links", "env | sort; echo END-OF-ENV; sleep 3600", extra);
    n.wait_api_pod(&pod, 120, "Running", is_running);
    let env = printed_env(&n, &pod);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_string());
    assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some(master_ip), "{env:?}");
    assert_eq!(get(&format!("{var}_SERVICE_HOST")), None, "{env:?}");
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn missing_config_map_waits_with_create_container_config_error_then_starts() {
    let n = ClusterNode::start("cluster-env-late", &[]);
    let mut made = Made::new(&n.cluster);
    let cm = format!("late-{}", n.name());
    let extra = format!(
        "    env:
    - name: LATE
      valueFrom: {{configMapKeyRef: {{name: {cm}, key: value}}}}
"
    );
    let pod = n.create_pod(
        "late",
        "echo LATE=$LATE; echo END-OF-ENV; sleep 3600",
        &extra,
    );
    let want = format!("configmap \"{cm}\" not found");
    let p = n.wait_api_pod(&pod, 90, "waiting with CreateContainerConfigError", |p| {
        waiting(p).0 == "CreateContainerConfigError"
    });
    assert_eq!(waiting(&p).1, want, "{p}");
    assert_eq!(p["status"]["phase"], "Pending");
    let selector = format!("involvedObject.name={pod},reason=Failed");
    n.wait_api(60, "upstream's Failed event", |c| {
        c.ok(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            &selector,
        ])
        .contains(&format!("Error: {want}"))
    });

    // The object appears: the next pass starts the container with its value.
    n.cluster.ok(&[
        "-n",
        "default",
        "create",
        "configmap",
        &cm,
        "--from-literal=value=arrived",
    ]);
    made.add("configmap", &cm, true);
    n.wait_api_pod(&pod, 90, "Running once the ConfigMap exists", is_running);
    let env = printed_env(&n, &pod);
    assert!(
        env.contains(&("LATE".to_string(), "arrived".to_string())),
        "{env:?}"
    );
}

/// A busybox pod as `create_pod` makes it, but of `image` and with `extra_spec`.
fn pod_of_image(n: &ClusterNode, name: &str, image: &str, extra_spec: &str) -> String {
    let full = format!("{name}-{}", n.name());
    let manifest =
        api_busybox_pod(&full, n.name(), "sleep 3600", extra_spec).replace(common::BUSYBOX, image);
    n.cluster.apply(&manifest);
    full
}

fn docker_secret(n: &ClusterNode, made: &mut Made, name: &str, server: &str) {
    n.cluster.ok(&[
        "-n",
        "default",
        "create",
        "secret",
        "docker-registry",
        name,
        &format!("--docker-server={server}"),
        "--docker-username=test",
        "--docker-password=test",
    ]);
    made.add("secret", name, true);
}

#[test]
#[ignore = "needs root, containerd, docker-registry, skopeo and the control plane: run hack/test.sh"]
fn image_pull_secrets_open_basic_auth_and_token_registries() {
    registry::require("image_pull_secrets_open_basic_auth_and_token_registries");
    let n = ClusterNode::start("cluster-pull-secrets", &[]);
    let mut made = Made::new(&n.cluster);
    let basic = Registry::start(Auth::Htpasswd);
    basic.push_busybox("private/busybox:1", Some("test:test"));
    let tokens = TokenServer::start();
    let token = Registry::start(Auth::Token(&tokens));
    token.push_busybox("private/busybox:1", Some("test:test"));

    let (basic_secret, token_secret) =
        (format!("basic-{}", n.name()), format!("token-{}", n.name()));
    docker_secret(&n, &mut made, &basic_secret, &basic.host());
    docker_secret(&n, &mut made, &token_secret, &token.host());

    let basic_image = format!("{}/private/busybox:1", basic.host());
    let token_image = format!("{}/private/busybox:1", token.host());
    // A secret that does not exist comes first: a warning, and the pull goes on with the next.
    let with_basic = pod_of_image(
        &n,
        "basic",
        &basic_image,
        &format!(
            "  imagePullSecrets:\n  - name: gone-{0}\n  - name: {basic_secret}\n",
            n.name()
        ),
    );
    let with_token = pod_of_image(
        &n,
        "token",
        &token_image,
        &format!("  imagePullSecrets:\n  - name: {token_secret}\n"),
    );
    // Without a secret, an image neither registry lets out anonymously (a tag of its own, so
    // that the image the other pods pulled is not already present).
    let without: Vec<String> = [(&basic, "nobasic"), (&token, "notoken")]
        .into_iter()
        .map(|(reg, name)| {
            reg.push_busybox("private/busybox:2", Some("test:test"));
            let image = format!("{}/private/busybox:2", reg.host());
            pod_of_image(&n, name, &image, "")
        })
        .collect();

    n.wait_api_pod(&with_basic, 120, "Running (basic auth)", is_running);
    n.wait_api_pod(&with_token, 120, "Running (bearer token)", is_running);
    assert!(
        tokens.take_requests().iter().any(|r| r.granted
            && r.authorization.as_deref()
                == Some(format!("Basic {}", registry::b64(b"test:test", false)).as_str())),
        "the agent's pull asked the token server with the secret's credentials"
    );
    for pod in &without {
        // ErrImagePull, then ImagePullBackOff (which carries the pull's error) until it ends.
        let p = n.wait_api_pod(pod, 120, "ErrImagePull without a secret", |p| {
            matches!(waiting(p).0.as_str(), "ErrImagePull" | "ImagePullBackOff")
        });
        assert!(waiting(&p).1.contains("unauthorized"), "{p}");
        assert_eq!(p["status"]["phase"], "Pending");
    }
    let selector =
        format!("involvedObject.name={with_basic},reason=FailedToRetrieveImagePullSecret");
    n.wait_api(60, "upstream's warning for the missing pull secret", |c| {
        c.ok(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            &selector,
        ])
        .contains(&format!(
            "Unable to retrieve some image pull secrets (gone-{}); attempting to pull the image may not succeed.",
            n.name()
        ))
    });
}

/// GET https://127.0.0.1:<port><path> with curl and an optional bearer token; the status.
fn curl_status(port: u16, path: &str, token: Option<&str>) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sk",
        "--max-time",
        "20",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn webhook_authentication_and_authorization_of_service_account_tokens() {
    // As a production node: anonymous requests refused (kubeadm's KubeletConfiguration).
    let n = ClusterNode::start("cluster-webhook", &["--anonymous-auth=false"]);
    let mut made = Made::new(&n.cluster);
    let (allowed, denied, role) = (
        format!("proxy-{}", n.name()),
        format!("noproxy-{}", n.name()),
        format!("krs-nodes-proxy-{}", n.name()),
    );
    for sa in [&allowed, &denied] {
        n.cluster
            .ok(&["-n", "default", "create", "serviceaccount", sa]);
        made.add("serviceaccount", sa, true);
    }
    n.cluster.ok(&[
        "create",
        "clusterrole",
        &role,
        "--verb=get,create",
        "--resource=nodes/proxy",
    ]);
    made.add("clusterrole", &role, false);
    n.cluster.ok(&[
        "create",
        "clusterrolebinding",
        &role,
        &format!("--clusterrole={role}"),
        &format!("--serviceaccount=default:{allowed}"),
    ]);
    made.add("clusterrolebinding", &role, false);
    let token = |sa: &str| {
        n.cluster
            .ok(&["-n", "default", "create", "token", sa])
            .trim()
            .to_string()
    };
    let (ok_token, denied_token) = (token(&allowed), token(&denied));
    let port = n.secure_port;

    // RBAC bindings reach the apiserver's authorizer within moments; wait for the 200.
    let mut last = 0;
    n.wait_api(60, "200 for the bound service account", |_| {
        last = curl_status(port, "/pods", Some(&ok_token));
        last == 200
    });
    assert_eq!(curl_status(port, "/pods", Some(&denied_token)), 403);
    assert_eq!(curl_status(port, "/pods", None), 401);
    assert_eq!(curl_status(port, "/pods", Some("not-a-token")), 401);
    // The same verdicts a second time, from the agent's review caches.
    assert_eq!(curl_status(port, "/pods", Some(&ok_token)), 200);
    assert_eq!(curl_status(port, "/pods", Some(&denied_token)), 403);
}
