use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, ExecAction, GRPCAction, HTTPGetAction, HTTPHeader,
    LifecycleHandler, Probe, SleepAction, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::action::{expand_one_for_tests, run_probe, Outcome};
use super::http::{resolve_location, Url};
use super::*;

// ---------- a scripted ExecRunner ----------

/// Exit codes per command name (cmd[0]); -1 means "times out", -2 "cannot run".
#[derive(Default)]
struct FakeExec {
    codes: Mutex<HashMap<String, i32>>,
    calls: Mutex<Vec<(String, Instant)>>,
}

impl FakeExec {
    fn set(&self, name: &str, code: i32) {
        self.codes.lock().unwrap().insert(name.into(), code);
    }

    fn calls(&self, name: &str) -> Vec<Instant> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }
}

impl ExecRunner for FakeExec {
    fn exec(
        &self,
        _container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecResult, ExecError>> {
        let name = cmd[0].clone();
        self.calls
            .lock()
            .unwrap()
            .push((name.clone(), Instant::now()));
        let code = *self.codes.lock().unwrap().get(&name).unwrap_or(&0);
        async move {
            match code {
                -1 => Err(ExecError::TimedOut(timeout)),
                -2 => Err(ExecError::Failed("container not found".into())),
                c => Ok(ExecResult {
                    exit_code: c,
                    stdout: format!("{name} exit {c}\n").into_bytes(),
                    stderr: Vec::new(),
                }),
            }
        }
        .boxed()
    }
}

fn exec_probe(name: &str, period: i32, success: i32, failure: i32, delay: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec![name.to_string()]),
        }),
        period_seconds: Some(period),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        initial_delay_seconds: Some(delay),
        ..Default::default()
    }
}

fn target() -> ProbeTarget {
    ProbeTarget {
        pod: "default/web".into(),
        container: "app".into(),
        container_id: "c1".into(),
        pod_uid: "uid-1".into(),
        pod_ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ports: vec![],
    }
}

fn container(
    liveness: Option<Probe>,
    readiness: Option<Probe>,
    startup: Option<Probe>,
) -> Container {
    Container {
        name: "app".into(),
        liveness_probe: liveness,
        readiness_probe: readiness,
        startup_probe: startup,
        ..Default::default()
    }
}

/// No jitter: the agent is long past its first period.
fn steady() -> ProbeOptions {
    ProbeOptions {
        agent_uptime: Some(Duration::from_secs(3600)),
        running_for: Duration::ZERO,
        events: None,
    }
}

fn start(
    c: &Container,
    fake: &Arc<FakeExec>,
    options: ProbeOptions,
) -> (ContainerProbes, Arc<Notify>) {
    let notify = Arc::new(Notify::new());
    let probes =
        ContainerProbes::start_scaled(target(), c, fake.clone(), notify.clone(), options, UNIT);
    (probes, notify)
}

/// Consumes the stored notification, if any.
fn notified(n: &Notify) -> bool {
    n.notified().now_or_never().is_some()
}

/// One probe "second" in these tests. The timing tests run on tokio's paused clock, so the
/// instants are exact however loaded the machine is (a real-time run flaked in CI).
const UNIT: Duration = Duration::from_millis(100);

async fn sleep_until_secs(t0: Instant, secs: f64) {
    tokio::time::sleep_until(t0 + UNIT.mul_f64(secs)).await;
}

/// The probe instants, in units after `t0`, rounded to a tenth of a unit.
fn units(t0: Instant, calls: &[Instant]) -> Vec<f64> {
    calls
        .iter()
        .map(|t| ((*t - t0).as_secs_f64() / UNIT.as_secs_f64() * 10.0).round() / 10.0)
        .collect()
}

// ---------- thresholds and state ----------

#[tokio::test(start_paused = true)]
async fn without_probes_a_running_container_is_started_and_ready() {
    let fake = Arc::new(FakeExec::default());
    let (p, n) = start(&container(None, None, None), &fake, steady());
    tokio::time::sleep(UNIT * 3).await;
    assert_eq!(
        p.status(),
        ProbeStatus {
            started: true,
            ready: true,
            liveness_failure: None
        }
    );
    assert!(!notified(&n));
}

#[tokio::test(start_paused = true)]
async fn readiness_follows_success_and_failure_thresholds_and_notifies_on_change_only() {
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    let c = container(None, Some(exec_probe("ready", 10, 2, 3, 0)), None);
    let (p, n) = start(&c, &fake, steady());
    assert!(!p.status().ready, "readiness starts false");

    sleep_until_secs(t0, 0.5).await;
    assert_eq!(fake.calls("ready").len(), 1);
    assert!(!p.status().ready, "one success is below successThreshold 2");
    assert!(!notified(&n));

    sleep_until_secs(t0, 10.5).await;
    assert!(p.status().ready);
    assert!(notified(&n));

    sleep_until_secs(t0, 40.5).await;
    assert_eq!(fake.calls("ready").len(), 5);
    assert!(!notified(&n), "repeated successes change nothing");

    fake.set("ready", 1);
    sleep_until_secs(t0, 60.5).await;
    assert!(
        p.status().ready,
        "two failures are below failureThreshold 3"
    );
    assert!(!notified(&n));
    sleep_until_secs(t0, 70.5).await;
    assert!(!p.status().ready);
    assert!(notified(&n));
    assert_eq!(p.status().liveness_failure, None);
}

#[tokio::test(start_paused = true)]
async fn liveness_failure_is_reported_once_and_probing_stops() {
    let fake = Arc::new(FakeExec::default());
    fake.set("live", 1);
    let t0 = Instant::now();
    let mut probe = exec_probe("live", 10, 1, 3, 0);
    probe.termination_grace_period_seconds = Some(5);
    let (p, n) = start(&container(Some(probe), None, None), &fake, steady());

    sleep_until_secs(t0, 10.5).await;
    assert_eq!(p.status().liveness_failure, None);
    assert!(p.status().ready, "no readiness probe: ready while running");
    sleep_until_secs(t0, 20.5).await;
    assert_eq!(
        p.status().liveness_failure,
        Some(LivenessFailure {
            message: "Liveness probe failed: live exit 1".into(),
            grace_period_override: Some(5),
            kind: "Liveness",
        })
    );
    assert!(notified(&n));
    sleep_until_secs(t0, 100.0).await;
    assert_eq!(
        fake.calls("live").len(),
        3,
        "probing stops after the failure"
    );
    assert!(!notified(&n));
}

#[tokio::test(start_paused = true)]
async fn liveness_success_resets_the_failure_run() {
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    let (p, _n) = start(
        &container(Some(exec_probe("live", 10, 1, 3, 0)), None, None),
        &fake,
        steady(),
    );
    for round in 0..4 {
        // Two failures, then a success: never three in a row.
        fake.set("live", 1);
        sleep_until_secs(t0, 30.0 * round as f64 + 10.5).await;
        fake.set("live", 0);
        sleep_until_secs(t0, 30.0 * round as f64 + 20.5).await;
    }
    assert_eq!(p.status().liveness_failure, None);
}

#[tokio::test(start_paused = true)]
async fn initial_delay_holds_the_first_probe_back() {
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    let (_p, _n) = start(
        &container(Some(exec_probe("live", 10, 1, 3, 15)), None, None),
        &fake,
        steady(),
    );
    sleep_until_secs(t0, 14.9).await;
    assert!(fake.calls("live").is_empty());
    sleep_until_secs(t0, 15.1).await;
    assert_eq!(units(t0, &fake.calls("live")), vec![15.0]);

    // A container that has been running for 10 s already waits only the rest.
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    let options = ProbeOptions {
        running_for: UNIT * 10,
        ..steady()
    };
    let (_p, _n) = start(
        &container(Some(exec_probe("live", 10, 1, 3, 15)), None, None),
        &fake,
        options,
    );
    sleep_until_secs(t0, 5.1).await;
    assert_eq!(units(t0, &fake.calls("live")), vec![5.0]);
}

#[tokio::test(start_paused = true)]
async fn startup_probe_holds_liveness_and_readiness_back_until_it_succeeds() {
    let fake = Arc::new(FakeExec::default());
    fake.set("start", 1);
    let t0 = Instant::now();
    let c = container(
        Some(exec_probe("live", 10, 1, 3, 0)),
        Some(exec_probe("ready", 10, 1, 3, 0)),
        Some(exec_probe("start", 1, 1, 30, 0)),
    );
    let (p, n) = start(&c, &fake, steady());
    sleep_until_secs(t0, 2.5).await;
    assert_eq!(fake.calls("start").len(), 3);
    assert!(fake.calls("live").is_empty() && fake.calls("ready").is_empty());
    let s = p.status();
    assert!(!s.started && !s.ready && s.liveness_failure.is_none());
    assert!(!notified(&n));

    fake.set("start", 0);
    sleep_until_secs(t0, 3.5).await;
    let s = p.status();
    assert!(s.started && s.ready, "{s:?}");
    assert!(notified(&n));
    // Readiness and liveness ran as soon as the container counted as started.
    assert_eq!(units(t0, &fake.calls("ready")), vec![3.0]);
    assert_eq!(units(t0, &fake.calls("live")), vec![3.0]);

    sleep_until_secs(t0, 30.0).await;
    assert_eq!(
        fake.calls("start").len(),
        4,
        "startup probing stops once started"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_startup_probe_is_a_liveness_failure() {
    let fake = Arc::new(FakeExec::default());
    fake.set("start", 1);
    let t0 = Instant::now();
    let c = container(
        Some(exec_probe("live", 10, 1, 3, 0)),
        None,
        Some(exec_probe("start", 5, 1, 2, 0)),
    );
    let (p, n) = start(&c, &fake, steady());
    sleep_until_secs(t0, 5.5).await;
    let f = p
        .status()
        .liveness_failure
        .expect("startup failure reported");
    assert_eq!(f.kind, "Startup");
    assert_eq!(f.message, "Startup probe failed: start exit 1");
    assert!(!p.status().started && !p.status().ready);
    assert!(notified(&n));
    assert!(fake.calls("live").is_empty());
}

#[tokio::test(start_paused = true)]
async fn exec_timeouts_count_as_failures_and_runtime_errors_are_ignored() {
    let fake = Arc::new(FakeExec::default());
    fake.set("live", -2);
    fake.set("ready", -1);
    let t0 = Instant::now();
    let c = container(
        Some(exec_probe("live", 10, 1, 1, 0)),
        Some(exec_probe("ready", 10, 1, 1, 0)),
        None,
    );
    let (p, _n) = start(&c, &fake, steady());
    sleep_until_secs(t0, 50.5).await;
    // Errored attempts are retried (3 per period) and never counted.
    assert_eq!(fake.calls("live").len(), 6 * 3);
    assert_eq!(p.status().liveness_failure, None);
    assert!(!p.status().ready);

    fake.set("live", -1);
    sleep_until_secs(t0, 60.5).await;
    let f = p.status().liveness_failure.expect("a timeout is a failure");
    assert_eq!(
        f.message,
        "Liveness probe failed: command \"live\" timed out"
    );
}

#[tokio::test(start_paused = true)]
async fn first_probes_are_spread_over_the_period() {
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    // One command name per container, so each container's first probe can be told apart
    // from a second probe of a container whose jitter was near zero.
    let names: Vec<String> = (0..20).map(|i| format!("live{i}")).collect();
    let all: Vec<_> = names
        .iter()
        .map(|n| {
            start(
                &container(Some(exec_probe(n, 10, 1, 3, 0)), None, None),
                &fake,
                ProbeOptions::default(),
            )
        })
        .collect();
    // The jitter is anywhere in [0, period); tokio's timers fire on whole milliseconds, so a
    // jitter just under the period may land a millisecond past it.
    let period = UNIT * 10;
    let slack = Duration::from_millis(2);
    tokio::time::sleep_until(t0 + period + slack).await;
    let first: Vec<Duration> = names
        .iter()
        .map(|n| match fake.calls(n).first() {
            Some(t) => *t - t0,
            None => panic!("{n} was not probed within its first period"),
        })
        .collect();
    let granularity = Duration::from_millis(1);
    assert!(
        first.iter().all(|d| *d <= period + granularity),
        "{first:?}"
    );
    let spread = *first.iter().max().unwrap() - *first.iter().min().unwrap();
    assert!(spread > UNIT * 2, "first probes are bunched: {first:?}");
    drop(all);

    // An agent long past its start probes new containers right away (upstream's rule).
    let c = container(Some(exec_probe("live", 10, 1, 3, 0)), None, None);
    let fake = Arc::new(FakeExec::default());
    let t0 = Instant::now();
    let (_p, _n) = start(&c, &fake, steady());
    sleep_until_secs(t0, 0.9).await;
    let first = units(t0, &fake.calls("live"));
    assert!(first.len() == 1 && first[0] < 0.5, "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_probes_stops_them() {
    let fake = Arc::new(FakeExec::default());
    let c = container(Some(exec_probe("live", 1, 1, 3, 0)), None, None);
    let (p, _n) = start(&c, &fake, steady());
    tokio::time::sleep(UNIT * 5 / 2).await;
    drop(p);
    let before = fake.calls("live").len();
    tokio::time::sleep(UNIT * 5).await;
    assert_eq!(fake.calls("live").len(), before);
}

#[tokio::test(start_paused = true)]
async fn a_removed_pods_probe_series_are_forgotten() {
    let fake = Arc::new(FakeExec::default());
    fake.set("ready", 1);
    let c = container(
        Some(exec_probe("live", 1, 1, 3, 0)),
        Some(exec_probe("ready", 1, 1, 3, 0)),
        None,
    );
    let mut t = target();
    t.pod_uid = "uid-dropped-probes".into();
    let other = ProbeTarget {
        pod_uid: "uid-kept-probes".into(),
        ..target()
    };
    let notify = Arc::new(Notify::new());
    let p = ContainerProbes::start_scaled(t, &c, fake.clone(), notify.clone(), steady(), UNIT);
    let kept = ContainerProbes::start_scaled(other, &c, fake.clone(), notify, steady(), UNIT);
    tokio::time::sleep(UNIT * 5 / 2).await;
    let series = |uid: &str| -> Vec<String> {
        crate::metrics::probes_registry()
            .gather()
            .lines()
            .filter(|l| l.starts_with("prober_probe_total{") && l.contains(uid))
            .map(str::to_string)
            .collect()
    };
    let before = series("pod_uid=\"uid-dropped-probes\"");
    assert!(
        before
            .iter()
            .any(|l| l.contains("probe_type=\"Liveness\",result=\"successful\""))
            && before
                .iter()
                .any(|l| l.contains("probe_type=\"Readiness\",result=\"failed\"")),
        "{before:?}"
    );
    drop(p);
    // A container restart drops its probes but keeps counting, as upstream.
    assert_eq!(series("pod_uid=\"uid-dropped-probes\""), before);
    // What the pod worker does once the pod has left the node.
    crate::metrics::forget_pod_probe_series("uid-dropped-probes");
    assert_eq!(
        series("pod_uid=\"uid-dropped-probes\""),
        Vec::<String>::new()
    );
    tokio::time::sleep(UNIT * 3).await;
    assert_eq!(
        series("pod_uid=\"uid-dropped-probes\""),
        Vec::<String>::new()
    );
    assert!(!series("pod_uid=\"uid-kept-probes\"").is_empty());
    drop(kept);
}

#[test]
fn probe_defaults_are_upstreams() {
    let s = super::worker::ProbeSpec::new(&Probe::default(), Duration::from_secs(1));
    assert_eq!(s.initial_delay, Duration::ZERO);
    assert_eq!(s.period, Duration::from_secs(10));
    assert_eq!(s.timeout, Duration::from_secs(1));
    assert_eq!((s.success_threshold, s.failure_threshold), (1, 3));
}

#[test]
fn exec_commands_expand_static_env() {
    let env = vec![
        EnvVar {
            name: "PORT".into(),
            value: Some("8080".into()),
            ..Default::default()
        },
        EnvVar {
            name: "SECRET".into(),
            value_from: Some(Default::default()),
            ..Default::default()
        },
    ];
    let got = super::action::expand_static(
        &[
            "check".into(),
            "--port=$(PORT)".into(),
            "$(SECRET)".into(),
            "$$(PORT)".into(),
            "$(UNSET)x".into(),
            "$(".into(),
            "a$b".into(),
        ],
        &env,
    );
    assert_eq!(
        got,
        vec![
            "check",
            "--port=8080",
            "$(SECRET)",
            "$(PORT)",
            "$(UNSET)x",
            "$(",
            "a$b"
        ]
    );
    assert_eq!(expand_one_for_tests("$(PORT)$(PORT)", &env), "80808080");
}

#[test]
fn redirect_locations_resolve_against_the_request() {
    let base = Url {
        scheme: "http".into(),
        host: "10.0.0.5".into(),
        port: 8080,
        path: "/a/b?x=1".into(),
    };
    let abs = resolve_location(&base, "http://example.com/z").unwrap();
    assert_eq!(
        (abs.host.as_str(), abs.port, abs.path.as_str()),
        ("example.com", 80, "/z")
    );
    let root = resolve_location(&base, "/ok?y=2").unwrap();
    assert_eq!(root.to_string(), "http://10.0.0.5:8080/ok?y=2");
    let rel = resolve_location(&base, "c").unwrap();
    assert_eq!(rel.to_string(), "http://10.0.0.5:8080/a/c");
    let v6 = resolve_location(&base, "http://[::1]:81/").unwrap();
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 81));
}

// ---------- httpGet, tcpSocket, grpc against local servers ----------

/// A small HTTP server on 127.0.0.1: /ok (200 when the probe's headers are right), /fail
/// (500), /same (302 to /ok), /away (302 to another host), /loop (302 to itself).
async fn http_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let h = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string()
                        };
                        let (status, location, body) = match req.uri().path() {
                            "/ok" => (
                                200,
                                None,
                                format!("ua={} x={}", h("user-agent"), h("x-custom")),
                            ),
                            "/fail" => (500, None, "secret body".to_string()),
                            "/same" => (302, Some("/ok".to_string()), String::new()),
                            "/away" => (
                                302,
                                Some("http://192.0.2.1:9/ok".to_string()),
                                "moved".into(),
                            ),
                            "/loop" => (302, Some("/loop".to_string()), String::new()),
                            _ => (404, None, String::new()),
                        };
                        let mut resp = Response::builder().status(status);
                        if let Some(l) = location {
                            resp = resp.header("location", l);
                        }
                        Ok::<_, Infallible>(resp.body(Full::new(Bytes::from(body))).unwrap())
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

fn http_probe(path: &str, port: IntOrString, headers: Vec<(&str, &str)>) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port,
            http_headers: Some(
                headers
                    .into_iter()
                    .map(|(n, v)| HTTPHeader {
                        name: n.into(),
                        value: v.into(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn once(probe: &Probe, t: &ProbeTarget) -> Result<Outcome, String> {
    // Round trips on loopback; generous for a loaded machine.
    run_probe(probe, t, &[], &FakeExec::default(), Duration::from_secs(10)).await
}

#[tokio::test]
async fn http_get_probes() {
    let port = http_server().await;
    let p = IntOrString::Int(port as i32);
    let t = target();

    let ok = once(&http_probe("/ok", p.clone(), vec![("X-Custom", "v")]), &t).await;
    assert_eq!(
        ok,
        Ok(Outcome::Success(format!(
            "ua=kube-probe/{KUBE_VERSION} x=v"
        )))
    );

    let ua = once(
        &http_probe("ok", p.clone(), vec![("user-agent", "mine")]),
        &t,
    )
    .await;
    assert_eq!(ua, Ok(Outcome::Success("ua=mine x=".into())));

    let fail = once(&http_probe("/fail", p.clone(), vec![]), &t).await;
    assert_eq!(
        fail,
        Ok(Outcome::Failure(
            "HTTP probe failed with statuscode: 500".into()
        ))
    );

    let same = once(&http_probe("/same", p.clone(), vec![("X-Custom", "r")]), &t).await;
    assert_eq!(
        same,
        Ok(Outcome::Success(format!(
            "ua=kube-probe/{KUBE_VERSION} x=r"
        )))
    );

    let away = once(&http_probe("/away", p.clone(), vec![]), &t)
        .await
        .unwrap();
    assert_eq!(
        away,
        Outcome::Warning("Probe terminated redirects, Response body: moved".into())
    );
    assert!(away.is_success());

    let looped = once(&http_probe("/loop", p.clone(), vec![]), &t)
        .await
        .unwrap();
    assert!(
        matches!(&looped, Outcome::Failure(m) if m.contains("stopped after 10 redirects")),
        "{looped:?}"
    );

    // A port given by name resolves against the container's ports.
    let mut named = target();
    named.ports = vec![ContainerPort {
        name: Some("web".into()),
        container_port: port as i32,
        ..Default::default()
    }];
    let by_name = once(
        &http_probe("/ok", IntOrString::String("web".into()), vec![]),
        &named,
    )
    .await;
    assert!(matches!(by_name, Ok(Outcome::Success(_))), "{by_name:?}");
    let unknown = once(
        &http_probe("/ok", IntOrString::String("nope".into()), vec![]),
        &named,
    )
    .await;
    assert!(
        matches!(&unknown, Err(e) if e.contains("couldn't find port: nope")),
        "{unknown:?}"
    );

    // Nothing listening: a failure with the dial error.
    let closed = closed_port().await;
    let refused = once(
        &http_probe("/", IntOrString::Int(closed as i32), vec![]),
        &t,
    )
    .await
    .unwrap();
    assert!(
        matches!(&refused, Outcome::Failure(m) if m.starts_with("Get \"http://127.0.0.1:") && m.contains("refused")),
        "{refused:?}"
    );
}

/// One-shot HTTPS server with a self-signed certificate, answering 200 "secure".
async fn https_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                continue;
            };
            let mut buf = [0u8; 2048];
            let _ = tls.read(&mut buf).await;
            let _ = tls
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure",
                )
                .await;
            let _ = tls.shutdown().await;
        }
    });
    port
}

#[tokio::test]
async fn https_probes_skip_certificate_verification() {
    let port = https_server().await;
    let mut https = http_probe("/", IntOrString::Int(port as i32), vec![]);
    https.http_get.as_mut().unwrap().scheme = Some("HTTPS".into());
    let out = once(&https, &target()).await.unwrap();
    assert_eq!(out, Outcome::Success("secure".into()));
}

async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn tcp_socket_probes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = |port: u16| Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(port as i32),
            host: None,
        }),
        ..Default::default()
    };
    assert!(matches!(
        once(&probe(port), &target()).await,
        Ok(Outcome::Success(_))
    ));
    drop(listener);
    let closed = once(&probe(closed_port().await), &target()).await.unwrap();
    assert!(
        matches!(&closed, Outcome::Failure(m) if m.starts_with("dial tcp 127.0.0.1:")),
        "{closed:?}"
    );
}

#[tokio::test]
async fn grpc_health_probes() {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("up", tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("down", tonic_health::ServingStatus::NotServing)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let incoming = futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );
    let probe = |service: &str, port: u16| Probe {
        grpc: Some(GRPCAction {
            port: port as i32,
            service: Some(service.into()),
        }),
        ..Default::default()
    };
    assert_eq!(
        once(&probe("up", port), &target()).await,
        Ok(Outcome::Success("service healthy".into()))
    );
    assert_eq!(
        once(&probe("down", port), &target()).await,
        Ok(Outcome::Failure(
            "service unhealthy (responded with \"NOT_SERVING\")".into()
        ))
    );
    let unknown = once(&probe("other", port), &target()).await.unwrap();
    assert!(
        matches!(&unknown, Outcome::Failure(m) if m.contains("NotFound")),
        "{unknown:?}"
    );
    let closed = once(&probe("up", closed_port().await), &target())
        .await
        .unwrap();
    assert!(
        matches!(&closed, Outcome::Failure(m) if m.starts_with("error: failed to connect service at")),
        "{closed:?}"
    );
}

// ---------- lifecycle handlers ----------

// Paused time: the sleep handler is a tokio sleep, so the bounds are exact however loaded
// the machine is.
#[tokio::test(start_paused = true)]
async fn sleep_handlers() {
    let fake = FakeExec::default();
    let sleep = |seconds| LifecycleHandler {
        sleep: Some(SleepAction { seconds }),
        ..Default::default()
    };
    let t0 = Instant::now();
    run_handler(&sleep(1), &target(), &fake, Duration::from_secs(30))
        .await
        .unwrap();
    let took = Instant::now() - t0;
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "{took:?}"
    );

    let h = sleep(5);
    let t0 = Instant::now();
    let e = run_handler(&h, &target(), &fake, Duration::from_millis(200))
        .await
        .unwrap_err();
    let took = Instant::now() - t0;
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(e.contains("Sleep lifecycle hook (5)"), "{e}");
}

#[tokio::test]
async fn exec_and_http_and_tcp_handlers() {
    let fake = FakeExec::default();
    fake.set("bad", 2);
    let exec = |name: &str| LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(vec![name.into(), "arg".into()]),
        }),
        ..Default::default()
    };
    let t = target();
    let d = Duration::from_secs(5);
    run_handler(&exec("good"), &t, &fake, d).await.unwrap();
    let e = run_handler(&exec("bad"), &t, &fake, d).await.unwrap_err();
    assert!(
        e.starts_with(
            "Exec lifecycle hook ([bad arg]) for Container \"app\" in Pod \"default/web\" failed"
        ),
        "{e}"
    );
    assert!(e.contains("exited with 2"), "{e}");

    let port = http_server().await;
    let http = |path: &str, port: u16| LifecycleHandler {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port as i32),
            ..Default::default()
        }),
        ..Default::default()
    };
    run_handler(&http("/ok", port), &t, &fake, d).await.unwrap();
    // Upstream ignores the status code of hook responses.
    run_handler(&http("/fail", port), &t, &fake, d)
        .await
        .unwrap();
    let e = run_handler(&http("/x", closed_port().await), &t, &fake, d)
        .await
        .unwrap_err();
    assert!(
        e.starts_with("HTTP lifecycle hook (/x) for Container \"app\""),
        "{e}"
    );

    let tcp = LifecycleHandler {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(port as i32),
            host: None,
        }),
        ..Default::default()
    };
    let e = run_handler(&tcp, &t, &fake, d).await.unwrap_err();
    assert!(e.contains("tcpSocket is not supported"), "{e}");
}

// ---------- timeouts ----------

/// A port whose listener accepts connections and keeps them open without ever answering.
async fn silent_server() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    port
}

#[tokio::test]
async fn probes_and_hooks_give_up_on_a_silent_server_at_their_timeout() {
    let port = silent_server().await;
    let t = target();
    let timeout = Duration::from_millis(300);
    let fake = FakeExec::default();
    // Gave up rather than waited on: far above the timeout, far below forever, and room for
    // a loaded machine.
    let bound = Duration::from_secs(20);

    let probe = http_probe("/", IntOrString::Int(port as i32), vec![]);
    let t0 = std::time::Instant::now();
    let out = run_probe(&probe, &t, &[], &fake, timeout).await;
    let took = t0.elapsed();
    assert!(
        matches!(&out, Ok(Outcome::Failure(m)) if m.contains("Client.Timeout exceeded")),
        "{out:?}"
    );
    assert!(took >= timeout && took < bound, "http probe took {took:?}");

    let probe = Probe {
        grpc: Some(GRPCAction {
            port: port as i32,
            service: None,
        }),
        ..Default::default()
    };
    let t0 = std::time::Instant::now();
    let out = run_probe(&probe, &t, &[], &fake, timeout).await;
    let took = t0.elapsed();
    assert!(
        matches!(&out, Ok(Outcome::Failure(m)) if m.starts_with("timeout: ")),
        "{out:?}"
    );
    assert!(took >= timeout && took < bound, "grpc probe took {took:?}");

    let hook = LifecycleHandler {
        http_get: Some(HTTPGetAction {
            path: Some("/hook".into()),
            port: IntOrString::Int(port as i32),
            ..Default::default()
        }),
        ..Default::default()
    };
    let t0 = std::time::Instant::now();
    let e = run_handler(&hook, &t, &fake, timeout).await.unwrap_err();
    let took = t0.elapsed();
    assert!(
        e.starts_with("HTTP lifecycle hook (/hook)") && e.contains("Client.Timeout exceeded"),
        "{e}"
    );
    assert!(took >= timeout && took < bound, "http hook took {took:?}");
}

// ---------- events ----------

#[tokio::test(start_paused = true)]
async fn every_failed_attempt_is_an_unhealthy_event_below_the_threshold_too() {
    let fake = Arc::new(FakeExec::default());
    fake.set("ready", 1);
    let t0 = Instant::now();
    let (recorder, mut events) = crate::events::Recorder::capturing();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"}
    }))
    .unwrap();
    let options = ProbeOptions {
        events: Some(super::ProbeEvents {
            recorder,
            pod: Arc::new(pod),
            field_path: "spec.containers{app}".into(),
        }),
        ..steady()
    };
    let c = container(None, Some(exec_probe("ready", 10, 1, 3, 0)), None);
    let (p, _n) = start(&c, &fake, options);
    sleep_until_secs(t0, 10.5).await;
    assert_eq!(fake.calls("ready").len(), 2);
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push(e);
    }
    assert_eq!(seen.len(), 2, "one Unhealthy per failed attempt: {seen:?}");
    for e in &seen {
        assert_eq!(e.reason.as_deref(), Some("Unhealthy"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(
            e.involved_object.field_path.as_deref(),
            Some("spec.containers{app}")
        );
        assert!(
            e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("Readiness probe failed:")),
            "{e:?}"
        );
    }
    assert!(!p.status().ready, "readiness never succeeded");
}
