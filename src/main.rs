//! kubelet-rs: the node agent's entry point. `anyhow` lives here only.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubelet_rs::certificates;
use kubelet_rs::cgroups::Cgroups;
use kubelet_rs::config::{self, Config, ConfigError};
use kubelet_rs::events::{EventType, Recorder};
use kubelet_rs::eviction::sources::{CollectorSummaries, Reclaim};
use kubelet_rs::eviction::{EvictionManager, Pressure, PressureView};
use kubelet_rs::network::cni::Cni;
use kubelet_rs::node;
use kubelet_rs::pod::evictions::PodEvictions;
use kubelet_rs::pod::mirror::MirrorPods;
use kubelet_rs::pod::status_manager::StatusManager;
use kubelet_rs::pod::status_sync::StatusSync;
use kubelet_rs::pod::sync_health::SyncLoopHealth;
use kubelet_rs::pod::worker::{Shared, StatsPods};
use kubelet_rs::pod::{PodManager, StatusStore};
use kubelet_rs::runtime::events::{spawn_task_events, OomSeen};
use kubelet_rs::runtime::handlers::RuntimeHandlers;
use kubelet_rs::runtime::pull::{PullOptions, Puller};
use kubelet_rs::runtime::{Containerd, ContainerdRuntime, Runtime};
use kubelet_rs::source::apiserver::spawn_api_source;
use kubelet_rs::source::{spawn_file_source, spawn_http_source, SourceKind};
use kubelet_rs::stats::{Collector, CollectorConfig, PodInfo};
use kubelet_rs::{logs, server};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // containerd's shim starts this same binary as each container's log writer.
    if logs::is_logger_invocation(&args) {
        std::process::exit(logs::run_logger(&args));
    }
    // The agent starts it as the io relay of each container with stdin or a tty; it forks,
    // so it must run while the process has a single thread.
    if kubelet_rs::runtime::attach::is_relay_invocation(&args) {
        std::process::exit(kubelet_rs::runtime::attach::run_relay(&args));
    }
    if args.get(1).map(String::as_str) == Some("image") {
        std::process::exit(image_command(&args[2..]));
    }
    let cfg = match config::load_from_args(&args) {
        Ok(c) => c,
        Err(ConfigError::Help(text)) => {
            println!("{text}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("kubelet-rs: {e}");
            std::process::exit(e.exit_code());
        }
    };
    init_tracing(&cfg);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubelet-rs: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(cfg)) {
        error!("{e:#}");
        std::process::exit(1);
    }
}

fn init_tracing(cfg: &Config) {
    let level = match cfg.verbosity {
        0..=2 => "info",
        3..=4 => "debug",
        _ => "trace",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("KUBELET_RS_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                "kubelet_rs={level},kubelet_rs::runtime=info,warn"
            ))
        });
    let ansi = wants_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if cfg.logging_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Colour codes only for a person at a terminal: journald, a file or a pipe keep plain text
/// (tracing-subscriber colours whenever NO_COLOR is unset, whatever stderr is). A non-empty
/// NO_COLOR (no-color.org) turns colour off at a terminal too.
fn wants_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

async fn run(cfg: Config) -> anyhow::Result<()> {
    let cfg = Arc::new(cfg);
    info!(node = %cfg.node_name, root_dir = %cfg.root_dir.display(), "kubelet-rs starting");
    // As Go's runtime does for the upstream kubelet; the servers' connection caps are sized
    // from the limit this leaves.
    match kubelet_rs::open_files::raise_soft_to_hard() {
        Ok(l) => info!(soft = l.soft, hard = l.hard, was = l.was, "open-file limit"),
        Err(e) => warn!("{e}; keeping the open-file limit as it is"),
    }
    for warning in cfg.warnings() {
        tracing::warn!("{warning}");
    }
    // Upstream's container manager refuses to start with swap on unless told otherwise.
    kubelet_rs::cm::swap::check_node(cfg.fail_swap_on)?;
    // Owner and group only: pods' secrets, tokens and emptyDirs are below.
    kubelet_rs::data_dirs::setup_data_dirs(&cfg.root_dir).context("setting up the root dir")?;

    let statuses: StatusStore = StatusManager::new();
    // Health first: the healthz port answers while containerd is still coming up.
    if cfg.healthz_port != 0 {
        server::serve_healthz(SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port)).await?;
    }
    // The HTTP servers come up before containerd is reached, so the node answers (and its
    // server is testable) while the runtime is still starting.
    let server_state = server::ServerState::new(cfg.clone(), statuses.clone());
    // With --bootstrap-kubeconfig, a kubeconfig that is missing or holds an expired client
    // certificate is replaced first: a client certificate from the certificates API (TLS
    // bootstrap), before any client is built.
    if let (Some(kubeconfig), Some(bootstrap)) = (&cfg.kubeconfig, &cfg.bootstrap_kubeconfig) {
        certificates::load_client_cert(kubeconfig, bootstrap, &cfg.cert_dir, &cfg.node_name)
            .await
            .context("TLS bootstrap")?;
    }
    // One API client (--kubeconfig) for everything that talks to the apiserver: the webhook
    // authn/authz of the main server and, in cluster mode, the Node, pods, statuses, events.
    let api = match &cfg.kubeconfig {
        // A rotated client certificate is picked up without a restart.
        Some(path) if cfg.rotate_certificates => Some(Arc::new(
            kubelet_rs::api_client::ApiClient::from_kubeconfig_reloadable(path).await?,
        )),
        Some(path) => Some(Arc::new(
            kubelet_rs::api_client::ApiClient::from_kubeconfig(path).await?,
        )),
        None => None,
    };
    if let Some(api) = &api {
        if cfg.rotate_certificates {
            certificates::spawn_client_rotation(api.clone(), &cfg.cert_dir, &cfg.node_name);
        }
        if cfg.server_tls_bootstrap {
            // The names the Node reports: its Hostname and InternalIP addresses.
            let ip = cfg.node_ip.or_else(node::host_ip);
            certificates::spawn_serving_certificate(
                api.clone(),
                &cfg.cert_dir,
                &cfg.node_name,
                vec![cfg.node_name.clone()],
                ip.into_iter().collect(),
            );
        }
    } else if cfg.server_tls_bootstrap {
        warn!("serverTLSBootstrap needs --kubeconfig: the main server has no certificate to serve");
    }
    server::serve_configured(server_state.clone(), api.clone()).await?;
    kubelet_rs::metrics::set_node_name(&cfg.node_name);

    let stats_pods: StatsPods = Default::default();
    let rt = Containerd::connect_with_backoff(
        &cfg.container_runtime_endpoint,
        &cfg.containerd_namespace,
    )
    .await;
    let cni = Cni::new(
        &cfg.cni_conf_dir,
        cfg.cni_bin_dirs.clone(),
        Duration::from_secs(60),
    )
    .with_result_cache(cfg.root_dir.join("cni-results"));
    let oom_seen = OomSeen::default();
    let sync_loop = Arc::new(SyncLoopHealth::new(cfg.sync_frequency));
    let containerd_runtime = Arc::new(ContainerdRuntime {
        containerd: rt.clone(),
        puller: new_puller(&cfg, &rt),
    });
    let runtime: Arc<dyn Runtime> = containerd_runtime.clone();
    // Events go to the API in cluster mode; a standalone node records none (as upstream).
    let recorder = match &api {
        Some(api) => {
            let (recorder, sink) = Recorder::new(api.client().clone(), cfg.node_name.clone());
            tokio::spawn(sink);
            recorder
        }
        None => Recorder::disabled(),
    };
    protect_agent_from_oom();
    let cm = start_container_manager(&cfg, &recorder).await?;
    // Runtime events, and the eviction manager's requests, wake the pods' workers.
    let (ev_tx, ev_rx) = mpsc::channel(256);
    let evictions = PodEvictions::new(statuses.clone(), Some(ev_tx.clone()));
    // The RuntimeClass handlers this node serves, from containerd's own config file: a file
    // that cannot be read or makes no sense stops the agent, naming it and the field.
    let handlers = Arc::new(
        RuntimeHandlers::load(&cfg.containerd_config)
            .context("reading the runtime handlers (--containerd-config)")?,
    );
    info!(path = %cfg.containerd_config.display(), handlers = %handlers.names().join(","), "runtime handlers configured");
    // CSI drivers register through <root-dir>/plugins_registry; in cluster mode the watcher
    // also writes the node's CSINode and the Node's driver annotation.
    let csi_host = kubelet_rs::volume::csi::CsiHost {
        drivers: Default::default(),
        root_dir: cfg.root_dir.clone(),
        node_name: cfg.node_name.clone(),
        in_use: Default::default(),
    };
    let csi_node: Arc<dyn kubelet_rs::csi::node_info::CsiNodeWriter> = match &api {
        Some(api) => Arc::new(kubelet_rs::csi::node_info::ApiNodeInfo::new(
            api.client().clone(),
            cfg.node_name.clone(),
        )),
        None => Arc::new(kubelet_rs::csi::node_info::NoApi),
    };
    tokio::spawn(kubelet_rs::csi::registration::run(
        cfg.root_dir.clone(),
        csi_host.drivers.clone(),
        csi_node,
    ));
    let shared = Arc::new(Shared {
        rt: runtime.clone(),
        cni,
        cfg: cfg.clone(),
        statuses: statuses.clone(),
        exe: logs::logger_executable(&cfg.root_dir, &cfg.container_runtime_endpoint)
            .context("choosing the containers' log writer")?,
        // The pods' hostIP is the node's InternalIP: --node-ip, else the default route's.
        host_ip: cfg
            .node_ip
            .or_else(node::host_ip)
            .map(|i| i.to_string())
            .unwrap_or_else(|| "127.0.0.1".into()),
        memory_capacity: memory_capacity().unwrap_or(i64::MAX),
        started: std::time::Instant::now(),
        stats_pods: stats_pods.clone(),
        cpu_capacity_millis: std::thread::available_parallelism().map_or(1, |n| n.get()) as i64
            * 1000,
        oom_score_adj_min: oom_score_adj_min(),
        cm,
        oom_seen: oom_seen.clone(),
        sync_loop: sync_loop.clone(),
        recorder: recorder.clone(),
        objects: match &api {
            Some(api) => Arc::new(
                kubelet_rs::objects::ApiObjects::new(api.client().clone())
                    .wake_pods_through(ev_tx.clone())
                    .watch_services(api.client().clone())
                    .watch_runtime_classes(api.client().clone()),
            ),
            None => Arc::new(kubelet_rs::objects::Standalone),
        },
        evictions: evictions.clone(),
        start_slots: kubelet_rs::pod::worker::start_slots(),
        handlers: handlers.clone(),
        allocations: Arc::new(kubelet_rs::pod::allocation::Allocations::load(
            &cfg.root_dir,
        )),
        csi: csi_host.clone(),
    });
    server_state.set_sync_loop(sync_loop);
    server_state.set_runtime(runtime.clone());

    let collector = start_stats(&cfg, &server_state, stats_pods, &csi_host.drivers);
    let image_gc = start_image_gc(&cfg, &runtime);
    let pressure = start_eviction(&cfg, collector, evictions, image_gc, &recorder);

    let (tx, rx) = mpsc::channel(64);
    let mut expected = Vec::new();
    if let Some(dir) = &cfg.static_pod_path {
        expected.push(SourceKind::File);
        spawn_file_source(
            dir.clone(),
            cfg.node_name.clone(),
            cfg.file_check_frequency,
            tx.clone(),
        );
    }
    if let Some(url) = &cfg.static_pod_url {
        expected.push(SourceKind::Http);
        spawn_http_source(
            url.clone(),
            cfg.static_pod_url_header.clone(),
            cfg.node_name.clone(),
            cfg.http_check_frequency,
            tx.clone(),
        );
    }
    // Cluster mode: the Node (registration, status, Lease), the pods bound to it, their
    // statuses back to the API, and the static pods' mirrors, all on the one client.
    let mut node_view = None;
    if let Some(api) = &api {
        let client = api.client().clone();
        recorder.node(EventType::Normal, "Starting", "Starting kubelet.");
        expected.push(SourceKind::Api);
        let view = node::start(
            client.clone(),
            cfg.clone(),
            containerd_runtime.clone(),
            recorder.clone(),
            pressure.clone(),
            handlers.names(),
            csi_host.in_use.clone(),
        );
        let (_source, api_pods) =
            spawn_api_source(client.clone(), cfg.node_name.clone(), tx.clone());
        tokio::spawn(StatusSync::new(client.clone(), statuses.clone(), api_pods.clone()).run());
        tokio::spawn(MirrorPods::new(client, statuses.clone(), api_pods, view.clone()).run());
        node_view = Some(view);
    }
    if expected.is_empty() {
        warn!(
            "no pod source configured (--pod-manifest-path, --manifest-url, --kubeconfig): \
             the node runs no pods"
        );
    }

    let mut manager = PodManager::new(shared, &expected)
        .with_events(recorder)
        .with_pressure(pressure);
    if let Some(view) = node_view {
        manager = manager.with_node(view);
    }
    manager.recover().await;
    spawn_task_events(rt, ev_tx, oom_seen);

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = manager.run(rx, ev_rx) => {}
        _ = sigterm.recv() => info!("SIGTERM: exiting; pods keep running"),
        _ = tokio::signal::ctrl_c() => info!("interrupted: exiting; pods keep running"),
    }
    drop(tx);
    Ok(())
}

/// What the configuration says about pulls, in the Puller's terms.
fn pull_options(cfg: &Config) -> PullOptions {
    PullOptions {
        root_dir: Some(cfg.root_dir.clone()),
        insecure_registries: cfg.insecure_registries.clone(),
        serialize: cfg.serialize_image_pulls,
        // Validated as >= 1 when set.
        max_parallel: cfg.max_parallel_image_pulls.map(|n| n as usize),
        ..PullOptions::default()
    }
}

fn new_puller(cfg: &Config, rt: &Containerd) -> Puller {
    let puller = Puller::new(rt.clone(), pull_options(cfg));
    // Read back from the Puller, so the line shows what pulls will actually use.
    let o = puller.options();
    info!(
        serialize = o.serialize,
        max_parallel = %o.max_parallel.map_or("unlimited".to_string(), |n| n.to_string()),
        insecure_registries = %o.insecure_registries.join(","),
        docker_config_dir = %o.root_dir.as_deref().map_or("none".into(), |d| d.display().to_string()),
        "image pulls configured"
    );
    puller
}

/// Upstream's kubelet lowers its own oom_score_adj to -999 (oomScoreAdj's default) so the
/// kernel's OOM killer takes pods first; without CAP_SYS_RESOURCE the kernel refuses, and
/// the agent runs on with what it has, as upstream does.
fn protect_agent_from_oom() {
    const AGENT_OOM_SCORE_ADJ: &str = "-999";
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", AGENT_OOM_SCORE_ADJ) {
        warn!(error = %e, "could not set the agent's own oom_score_adj to -999");
    }
}

/// The pods' cgroup tree (kubepods and the QoS parents), made before any pod starts; a
/// failure stops the agent, as upstream's container manager does. Then, once a minute as
/// upstream: node allocatable enforced on kubepods until it succeeds (pods may use more
/// memory than the new limit for a while; nothing is killed to make room), and the QoS
/// parents' shares written again.
async fn start_container_manager(
    cfg: &Arc<Config>,
    recorder: &Recorder,
) -> anyhow::Result<Option<Arc<kubelet_rs::cm::ContainerManager>>> {
    let c = cfg.clone();
    let cm = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let Some(cm) = kubelet_rs::cm::from_host(&c).context("reading the cgroup hierarchies")?
        else {
            return Ok(None);
        };
        cm.start().context("creating the pods' cgroups")?;
        Ok(Some(Arc::new(cm)))
    })
    .await??;
    let Some(cm) = cm else { return Ok(None) };
    let (manager, recorder) = (cm.clone(), recorder.clone());
    tokio::spawn(async move {
        let mut enforced = false;
        loop {
            let m = manager.clone();
            let (enforce, qos) = tokio::task::spawn_blocking(move || {
                let enforce = (!enforced).then(|| m.enforce_node_allocatable());
                (enforce, m.update_qos())
            })
            .await
            .unwrap_or((None, Ok(())));
            match enforce {
                Some(Ok(())) => {
                    enforced = true;
                    info!("node allocatable enforced on the pods' cgroup");
                    recorder.node(
                        EventType::Normal,
                        "NodeAllocatableEnforced",
                        "Updated Node Allocatable limit across pods",
                    );
                }
                Some(Err(e)) => {
                    warn!(error = %e, "node allocatable not enforced yet; trying again in a minute");
                    recorder.node(
                        EventType::Warning,
                        "FailedNodeAllocatableEnforcement",
                        format!("Failed to update Node Allocatable Limits: {e}"),
                    );
                }
                None => {}
            }
            if let Err(e) = qos {
                warn!(error = %e, "updating the QoS class cgroups");
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    });
    Ok(Some(cm))
}

fn memory_capacity() -> Option<i64> {
    use procfs::Current;
    let total = procfs::Meminfo::current().ok()?.mem_total;
    i64::try_from(total).ok()
}

/// Without CAP_SYS_RESOURCE (some VMs and nested containers drop it) the kernel refuses an
/// oom_score_adj below the agent's own; containers then get at least that value.
fn oom_score_adj_min() -> i64 {
    let me = procfs::process::Process::myself().ok();
    let cap_eff = me
        .as_ref()
        .and_then(|p| p.status().ok())
        .map_or(0, |s| s.capeff);
    const CAP_SYS_RESOURCE: u64 = 24;
    if cap_eff & (1 << CAP_SYS_RESOURCE) != 0 {
        return -1000;
    }
    let own = me.and_then(|p| p.oom_score_adj().ok()).map_or(0, i64::from);
    warn!(
        oom_score_adj_min = own,
        "no CAP_SYS_RESOURCE: container oom_score_adj values are raised to the agent's own"
    );
    own
}

/// The stats collector (the cAdvisor replacement) on its housekeeping timer; the servers
/// and the eviction manager read its cache.
fn start_stats(
    cfg: &Arc<Config>,
    server: &Arc<server::ServerState>,
    pods: StatsPods,
    drivers: &kubelet_rs::csi::Drivers,
) -> Option<CollectorSummaries> {
    let cgroups = match Cgroups::detect() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "no cgroup hierarchy found: /stats/summary, /metrics/resource and eviction are off");
            return None;
        }
    };
    let mut c = CollectorConfig::new(cfg.node_name.clone());
    c.housekeeping_interval = cfg.housekeeping_interval;
    // Upstream measures volumes every volumeStatsAggPeriod; writable layers and logs are
    // walked on the same cadence here (containerd's own usage scan is no cheaper).
    c.disk_usage_interval = cfg.volume_stats_agg_period;
    c.node_fs_dir = cfg.root_dir.clone();
    c.psi = cfg
        .feature_gates
        .enabled(kubelet_rs::config::Gate::KubeletPsi);
    // The CSI volumes' usage is their drivers' word, asked on a task of its own.
    let csi_targets = {
        let pods = pods.clone();
        move || {
            let targets: Vec<std::path::PathBuf> = pods
                .read()
                .map(|m| {
                    m.values()
                        .flat_map(|p| &p.volumes)
                        .filter(|v| v.measure == kubelet_rs::stats::Measure::Reported)
                        .map(|v| v.path.clone())
                        .collect()
                })
                .unwrap_or_default();
            kubelet_rs::csi::stats::published(&targets)
        }
    };
    tokio::spawn(kubelet_rs::csi::stats::run(
        drivers.clone(),
        csi_targets,
        c.reported_volumes.clone(),
        cfg.volume_stats_agg_period,
    ));
    // The `pods` system container is kubepods wherever cgroupRoot and the driver put it.
    let layout = kubelet_rs::cm::Layout::from_config(cfg);
    c.pods_cgroup = layout.kubepods().to_path(layout.driver);
    let collector = Arc::new(Collector::new(c, cgroups));
    server.set_stats(Arc::new(CollectorViews(collector.clone())));
    let lister = Arc::new(move || -> Vec<PodInfo> {
        pods.read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    });
    tokio::spawn(
        collector
            .clone()
            .run(lister.clone(), std::future::pending::<()>()),
    );
    Some(CollectorSummaries {
        collector,
        pods: lister,
    })
}

/// The eviction manager on its own task, when there are stats to read; returns the pressure
/// conditions it publishes (none without it).
fn start_eviction(
    cfg: &Config,
    stats: Option<CollectorSummaries>,
    pods: Arc<PodEvictions>,
    image_gc: ImageGcRequests,
    recorder: &Recorder,
) -> PressureView {
    let Some(stats) = stats else {
        let (_, view) = tokio::sync::watch::channel(Pressure::default());
        return view;
    };
    let reclaim = Reclaim {
        pods: pods.clone(),
        images: image_gc,
    };
    let (manager, view) = EvictionManager::new(
        cfg,
        Arc::new(stats),
        pods,
        Some(Arc::new(reclaim)),
        recorder.clone(),
    );
    tokio::spawn(manager.run());
    view
}

/// Requests to the image GC task to remove every unused image.
type ImageGcRequests = mpsc::Sender<tokio::sync::oneshot::Sender<Vec<String>>>;

/// The image GC on its own timer (upstream's ImageGCPeriod); high threshold 100 turns the
/// periodic collection off, as upstream does, but it still removes unused images when the
/// eviction manager asks.
fn start_image_gc(cfg: &Config, rt: &Arc<dyn Runtime>) -> ImageGcRequests {
    use kubelet_rs::gc::{ImageGc, ImageGcPolicy, StatvfsProbe};
    // Validated as 0..=100 with low < high, so both fit a u8.
    let policy = ImageGcPolicy {
        high_percent: cfg.image_gc_high_threshold_percent as u8,
        low_percent: cfg.image_gc_low_threshold_percent as u8,
        min_age: cfg.image_minimum_gc_age,
        max_age: cfg.image_maximum_gc_age,
    };
    if policy.is_disabled() {
        info!("imageGCHighThresholdPercent is 100 and imageMaximumGCAge 0: periodic image garbage collection is off");
    }
    let probe = StatvfsProbe {
        path: cfg.image_fs_path.clone(),
    };
    let pinned = vec![cfg.pod_infra_container_image.clone()];
    let gc = ImageGc::new(rt.clone(), probe, policy, pinned);
    let (requests, incoming) = mpsc::channel(1);
    tokio::spawn(gc.run(cfg.image_gc_period, incoming));
    requests
}

struct CollectorViews(Arc<Collector>);

impl server::StatsViews for CollectorViews {
    fn summary_json(&self, only_cpu_and_memory: bool) -> Option<Vec<u8>> {
        self.0
            .summary(only_cpu_and_memory)
            .and_then(|s| serde_json::to_vec(&s).ok())
    }
    fn resource_metrics(&self) -> Option<String> {
        Some(self.0.metrics_resource())
    }
    fn cadvisor_metrics(&self) -> Option<String> {
        Some(self.0.metrics_cadvisor())
    }
}

/// `kubelet-rs image import FILE` loads an OCI-layout or docker-archive tarball into
/// containerd without a registry; `kubelet-rs image pull REF` pulls as the agent does (the
/// node's docker config for credentials, searched from `--root-dir` as the agent does, and
/// `--insecure-registry` as the agent's flag). Both take `--namespace NS` and `--address SOCKET`.
fn image_command(args: &[String]) -> i32 {
    let usage =
        "usage: kubelet-rs image import FILE | pull REF [--namespace NS] [--address SOCKET] \
                 [--root-dir DIR] [--insecure-registry HOST]...";
    let (mut operand, mut ns, mut socket) = (
        None,
        "kubelet-rs".to_string(),
        "/run/containerd/containerd.sock".to_string(),
    );
    let mut pull_options = PullOptions {
        root_dir: Some(kubelet_rs::config::DEFAULT_ROOT_DIR.into()),
        ..PullOptions::default()
    };
    let mut it = args.iter();
    let verb = match it.next().map(String::as_str) {
        Some(v @ ("import" | "pull")) => v,
        _ => {
            eprintln!("{usage}");
            return 2;
        }
    };
    while let Some(a) = it.next() {
        let takes_value = matches!(a.as_str(), "--namespace" | "-n" | "--address")
            || (verb == "pull" && matches!(a.as_str(), "--root-dir" | "--insecure-registry"));
        if !takes_value {
            if operand.is_none() && !a.starts_with('-') {
                operand = Some(a.to_string());
                continue;
            }
            eprintln!("kubelet-rs image {verb}: unexpected argument {a:?}\n{usage}");
            return 2;
        }
        let Some(value) = it.next().filter(|v| !v.is_empty()) else {
            eprintln!("kubelet-rs image {verb}: {a} needs a value\n{usage}");
            return 2;
        };
        match a.as_str() {
            "--namespace" | "-n" => ns = value.clone(),
            "--address" => socket = value.clone(),
            "--root-dir" => pull_options.root_dir = Some(value.into()),
            _ => pull_options.insecure_registries.push(value.clone()),
        }
    }
    let Some(operand) = operand else {
        eprintln!("{usage}");
        return 2;
    };
    if let Err(e) = kubelet_rs::config::check_containerd_namespace(&ns) {
        eprintln!("kubelet-rs image {verb}: invalid --namespace {ns:?}: {e}\n{usage}");
        return 2;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubelet-rs: {e}");
            return 1;
        }
    };
    let result: Result<Vec<String>, String> = rt.block_on(async {
        let c = Containerd::connect(std::path::Path::new(&socket), &ns)
            .await
            .map_err(|e| e.to_string())?;
        if verb == "import" {
            kubelet_rs::runtime::pull::import_archive(
                &c,
                std::path::Path::new(&operand),
                "overlayfs",
            )
            .await
            .map_err(|e| e.to_string())
        } else {
            let puller = Puller::new(c, pull_options);
            let out = puller
                .pull(&operand, &[])
                .await
                .map_err(|e| e.to_string())?;
            Ok(vec![format!(
                "{} ({} bytes fetched in {} ms)",
                out.image.image_ref,
                out.bytes,
                out.duration.as_millis()
            )])
        }
    });
    match result {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            0
        }
        Err(e) => {
            eprintln!("kubelet-rs image {verb}: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wants_colour;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(wants_colour(true, None));
        assert!(
            wants_colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!wants_colour(true, Some(OsStr::new("1"))));
        // A pipe or a file (journald, a test's log) never gets escape codes.
        assert!(!wants_colour(false, None));
        assert!(!wants_colour(false, Some(OsStr::new("1"))));
    }
}
