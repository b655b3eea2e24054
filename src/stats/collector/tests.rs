use super::*;
use crate::stats::parse::parse_mem_total;
use crate::test_support::copy_tree;

const UID: &str = "7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
const POD: &str = "/kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b";
const APP: &str = "5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c";
const SANDBOX: &str = "8f2b4d6e0a1c3e5f7b9d1a3c5e7f9b1d3a5c7e9f1b3d5a7c9e1f3b5d7a9c1e3f";

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/stats/testdata")
        .join(rel)
}

struct Fixture {
    _tmp: tempfile::TempDir,
    cgroup_root: PathBuf,
    config: CollectorConfig,
    pod: PodInfo,
}

/// A writable copy of the v2 tree, /proc fixtures, and a pod with a writable layer and logs.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let cgroup_root = tmp.path().join("cgroup");
    copy_tree(&testdata("v2"), &cgroup_root);
    let upper = tmp.path().join("upper");
    std::fs::create_dir_all(upper.join("etc")).unwrap();
    std::fs::write(upper.join("etc/hello"), vec![1u8; 10_000]).unwrap();
    let logs = tmp.path().join("logs/app");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("0.log"), vec![b'x'; 5000]).unwrap();
    let empty_dir = tmp.path().join("volumes/cache");
    std::fs::create_dir_all(&empty_dir).unwrap();
    std::fs::write(empty_dir.join("f"), vec![0u8; 3000]).unwrap();
    let memory_dir = tmp.path().join("volumes/shm");
    std::fs::create_dir_all(&memory_dir).unwrap();
    std::fs::write(memory_dir.join("f"), vec![0u8; 70_000]).unwrap();
    let hosts = tmp.path().join("etc-hosts");
    std::fs::write(&hosts, vec![b'h'; 9000]).unwrap();

    let mut config = CollectorConfig::new("node-1");
    config.proc_root = testdata("proc");
    config.node_fs_dir = tmp.path().to_path_buf();
    config.image_fs_dir = tmp.path().to_path_buf();
    config.image_fs_usage_dir = Some(upper.clone());
    config.kubelet_cgroup = Some(ProcessCgroup::same(POD));
    config.kubelet_start_time = Utc.with_ymd_and_hms(2025, 6, 23, 10, 0, 0).unwrap();
    let start = Utc.with_ymd_and_hms(2025, 6, 23, 10, 0, 3).unwrap();
    let pod = PodInfo {
        uid: UID.into(),
        name: "web".into(),
        namespace: "default".into(),
        pause_pid: Some(7644),
        sandbox: Some(SandboxInfo {
            id: SANDBOX.into(),
            image: "registry.k8s.io/pause:3.10".into(),
        }),
        cgroup_parent: POD.into(),
        start_time: start,
        containers: vec![
            ContainerInfo {
                name: "app".into(),
                id: APP.into(),
                image: "docker.io/library/busybox:1.36".into(),
                cgroup_path: format!("{POD}/{APP}"),
                start_time: start,
                log_dir: Some(logs),
                rootfs_upper: Some(upper),
            },
            ContainerInfo {
                name: "gone".into(),
                id: "dead".into(),
                image: "docker.io/library/busybox:1.36".into(),
                cgroup_path: format!("{POD}/dead"),
                start_time: start,
                log_dir: None,
                rootfs_upper: None,
            },
        ],
        volumes: vec![
            VolumeInfo {
                name: "cache".into(),
                path: empty_dir,
                ephemeral: true,
                measure: Measure::Walk,
                pvc: None,
            },
            VolumeInfo {
                name: "shm".into(),
                path: memory_dir,
                ephemeral: false,
                measure: Measure::Walk,
                pvc: None,
            },
        ],
        host_files: vec![hosts],
    };
    Fixture {
        _tmp: tmp,
        cgroup_root,
        config,
        pod,
    }
}

#[test]
fn rate_between_two_samples() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(10);
    // 2.5 cores over 10 s
    assert_eq!(
        usage_nano_cores(0, t0, 25_000_000_000, t1),
        Some(2_500_000_000)
    );
    assert_eq!(usage_nano_cores(100, t0, 100, t1), Some(0));
    // counter reset (cgroup recreated) and time not advancing give no value
    assert_eq!(usage_nano_cores(200, t0, 100, t1), None);
    assert_eq!(usage_nano_cores(0, t1, 100, t1), None);
    assert_eq!(usage_nano_cores(0, t1, 100, t0), None);
}

#[test]
fn network_skips_lo_and_veth_and_inlines_eth0() {
    let now = Time(Utc::now());
    let path = testdata("proc/1/net/dev");
    let c = parse_net_dev(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    let n = network_stats(now, &c);
    let names: Vec<_> = n.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["ifb0", "ifb1", "eth0", "kubers0"]);
    assert_eq!(n.default_interface.name, "eth0");
    assert_eq!(n.default_interface.rx_bytes, Some(137410592));
    let none = network_stats(now, &c[..1]);
    assert_eq!(none.default_interface.name, "");
    assert!(none.interfaces.is_empty());
}

#[test]
fn snapshot_of_a_v2_pod() {
    let mut f = fixture();
    // containerd's cgroup stands in as the sandbox leaf: a cgroup with files of its own that
    // differs from the kubelet's, so the runtime entry shows it read its own cgroup.
    f.config.runtime_cgroup = Some(ProcessCgroup::same(&format!("{POD}/{SANDBOX}")));
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    assert!(c.summary(false).is_none());
    assert!(c.metrics_resource().contains("resource_scrape_error 1"));

    c.collect(std::slice::from_ref(&f.pod));
    let snap = c.snapshot();
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let s = c.summary(false).unwrap();

    // node
    assert_eq!(s.node.node_name, "node-1");
    assert_eq!(s.node.start_time.0.timestamp(), 1796215659);
    let ncpu = s.node.cpu.as_ref().unwrap();
    assert_eq!(ncpu.usage_core_nano_seconds, Some(4928000 * 1000));
    assert_eq!(ncpu.usage_nano_cores, None, "first sample has no rate");
    let nmem = s.node.memory.as_ref().unwrap();
    // The v2 root has no memory.current: anon + file of its memory.stat.
    let usage = 8773632u64 + 39895040;
    let ws = usage - 16908288;
    assert_eq!(nmem.usage_bytes, Some(usage));
    assert_eq!(nmem.working_set_bytes, Some(ws));
    let meminfo = testdata("proc/meminfo");
    let mem_total = parse_mem_total(&meminfo, &std::fs::read_to_string(&meminfo).unwrap()).unwrap();
    assert_eq!(nmem.available_bytes, Some(mem_total - ws));
    assert_eq!(nmem.rss_bytes, Some(8773632));
    assert_eq!(nmem.page_faults, Some(11360));
    let nnet = s.node.network.as_ref().unwrap();
    assert_eq!(nnet.default_interface.tx_bytes, Some(311244));
    let rl = s.node.rlimit.as_ref().unwrap();
    assert_eq!(rl.maxpid, Some(32768));
    let loadavg = std::fs::read_to_string(testdata("proc/loadavg")).unwrap();
    assert_eq!(
        rl.curproc,
        Some(parse_loadavg_tasks(Path::new("loadavg"), &loadavg).unwrap() as i64)
    );
    let nfs = s.node.fs.as_ref().unwrap();
    assert!(nfs.capacity_bytes.unwrap() > 0 && nfs.used_bytes.unwrap() > 0);
    let image = s.node.runtime.as_ref().unwrap().image_fs.as_ref().unwrap();
    assert!(image.used_bytes.unwrap() >= 10_000, "{image:?}");
    assert_eq!(image.inodes_used, Some(3));
    // kubelet (pointed at the pod cgroup here), runtime (the sandbox leaf) and pods (kubepods,
    // which has its own files on a real v2 node)
    let names: Vec<_> = s
        .node
        .system_containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["kubelet", "runtime", "pods"]);
    assert_eq!(
        s.node.system_containers[0].start_time,
        Time(f.config.kubelet_start_time)
    );
    let runtime = &s.node.system_containers[1];
    let rmem = runtime.memory.as_ref().unwrap();
    assert_eq!(rmem.usage_bytes, Some(94208));
    assert_eq!(rmem.working_set_bytes, Some(94208));
    assert_eq!(
        runtime.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(5281 * 1000)
    );
    let pods_sys = &s.node.system_containers[2];
    let psmem = pods_sys.memory.as_ref().unwrap();
    assert_eq!(psmem.usage_bytes, Some(47190016));
    assert_eq!(psmem.working_set_bytes, Some(47190016 - 16908288));
    assert_eq!(psmem.available_bytes, None, "kubepods has memory.max max");

    // pod
    assert_eq!(s.pods.len(), 1);
    let p = &s.pods[0];
    assert_eq!(p.pod_ref.uid, UID);
    let pmem = p.memory.as_ref().unwrap();
    assert_eq!(pmem.usage_bytes, Some(47173632));
    assert_eq!(pmem.working_set_bytes, Some(47173632 - 16908288));
    assert_eq!(
        pmem.available_bytes,
        Some(268435456 - (47173632 - 16908288))
    );
    assert_eq!(pmem.rss_bytes, Some(8609792));
    assert_eq!(pmem.page_faults, Some(5089));
    assert_eq!(pmem.major_page_faults, Some(0));
    assert_eq!(
        p.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(2972622000)
    );
    assert_eq!(p.process_stats.as_ref().unwrap().process_count, Some(3));
    let net = p.network.as_ref().unwrap();
    assert_eq!(net.default_interface.name, "eth0");
    assert_eq!(
        (
            net.default_interface.rx_bytes,
            net.default_interface.rx_errors,
            net.default_interface.tx_bytes,
            net.default_interface.tx_errors
        ),
        (Some(1048576), Some(3), Some(524288), Some(1))
    );
    assert_eq!(net.interfaces.len(), 1, "lo is left out");

    // containers: the vanished one is left out
    assert_eq!(p.containers.len(), 1);
    let app = &p.containers[0];
    assert_eq!(app.name, "app");
    let amem = app.memory.as_ref().unwrap();
    assert_eq!(amem.available_bytes, None, "no limit on the leaf");
    assert_eq!(amem.working_set_bytes, Some(47063040 - 16908288));
    assert_eq!(
        app.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(2967340000)
    );
    let rootfs = app.rootfs.as_ref().unwrap();
    assert!(rootfs.used_bytes.unwrap() >= 10_000);
    assert_eq!(rootfs.inodes_used, Some(3));
    assert!(rootfs.capacity_bytes.is_some() && rootfs.inodes_free.is_some());
    let logs = app.logs.as_ref().unwrap();
    assert!(logs.used_bytes.unwrap() >= 5000);
    assert_eq!(logs.inodes_used, Some(2));

    // volume and ephemeral storage = rootfs + logs + ephemeral volumes + etc-hosts; a
    // memory-backed volume is reported but is no disk
    assert_eq!(p.volume_stats[0].name, "cache");
    assert_eq!(p.volume_stats[1].name, "shm");
    assert!(p.volume_stats[1].fs.used_bytes.unwrap() >= 70_000);
    let vol_used = p.volume_stats[0].fs.used_bytes.unwrap();
    let hosts_used = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&f.pod.host_files[0]).unwrap().blocks() * 512
    };
    assert!(hosts_used >= 9000);
    let eph = p.ephemeral_storage.as_ref().unwrap();
    assert_eq!(
        eph.used_bytes,
        Some(rootfs.used_bytes.unwrap() + logs.used_bytes.unwrap() + vol_used + hosts_used)
    );
    assert_eq!(eph.inodes_used, Some(3 + 2 + 2 + 1));
    // the Summary's per-pod ephemeral-storage has every field upstream gives it
    let json = serde_json::to_value(p).unwrap();
    for field in [
        "time",
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ] {
        assert!(
            json["ephemeral-storage"].get(field).is_some(),
            "ephemeral-storage.{field}: {json}"
        );
    }

    // the views read the same snapshot
    let only = c.summary(true).unwrap();
    assert!(only.node.fs.is_none() && only.pods[0].network.is_none());
    assert_eq!(only.pods[0].containers[0].memory, app.memory);
    let text = c.metrics_resource();
    assert!(text.contains("resource_scrape_error 0\n"), "{text}");
    assert!(
        text.contains(&format!(
            "pod_memory_working_set_bytes{{namespace=\"default\",pod=\"web\"}} 3.0265344e+07 {}",
            pmem.time.0.timestamp_millis()
        )),
        "{text}"
    );
    assert!(text.contains("container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.750672803e+09\n"), "{text}");
}

#[test]
fn second_tick_gives_the_rate_and_a_recreated_cgroup_starts_over() {
    let f = fixture();
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    let a0 = Instant::now();
    c.collect(std::slice::from_ref(&f.pod));
    let a1 = Instant::now();
    std::thread::sleep(Duration::from_millis(50));
    // one more core-second for the app container
    let stat = f
        .cgroup_root
        .join(POD.trim_start_matches('/'))
        .join(APP)
        .join("cpu.stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    std::fs::write(
        &stat,
        text.replace("usage_usec 2967340", "usage_usec 3967340"),
    )
    .unwrap();
    let b0 = Instant::now();
    c.collect(std::slice::from_ref(&f.pod));
    let b1 = Instant::now();
    let s = c.summary(false).unwrap();
    let rate = s.pods[0].containers[0]
        .cpu
        .as_ref()
        .unwrap()
        .usage_nano_cores
        .unwrap();
    let lo = (1e9 / (b1 - a0).as_secs_f64()) as u64;
    let hi = (1e9 / (b0 - a1).as_secs_f64()) as u64;
    assert!(lo <= rate && rate <= hi, "{lo} <= {rate} <= {hi}");
    // unchanged counters: zero rate, not missing
    assert_eq!(s.pods[0].cpu.as_ref().unwrap().usage_nano_cores, Some(0));
    assert_eq!(s.node.cpu.as_ref().unwrap().usage_nano_cores, Some(0));

    // counter went backwards (container recreated under the same path): no rate
    std::fs::write(&stat, text.replace("usage_usec 2967340", "usage_usec 1")).unwrap();
    c.collect(std::slice::from_ref(&f.pod));
    let s = c.summary(false).unwrap();
    assert_eq!(
        s.pods[0].containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        None
    );
}

#[test]
fn pod_without_cgroup_is_left_out_and_v1_tree_works() {
    let f = fixture();
    let mut config = f.config.clone();
    config.kubelet_cgroup = None;
    config.proc_root = testdata("proc");
    let c = Collector::new(config, Cgroups::v1_at(testdata("v1")));
    let mut gone = f.pod.clone();
    gone.uid = "other".into();
    gone.cgroup_parent = "/kubepods/besteffort/podother".into();
    c.collect(&[f.pod.clone(), gone]);
    let snap = c.snapshot();
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let s = snap.summary.unwrap();
    assert_eq!(s.pods.len(), 1);
    let p = &s.pods[0];
    assert_eq!(
        p.cpu.as_ref().unwrap().usage_core_nano_seconds,
        Some(3148951450)
    );
    assert_eq!(p.memory.as_ref().unwrap().usage_bytes, Some(63979520));
    assert_eq!(p.process_stats.as_ref().unwrap().process_count, Some(3));
    // v1 fixture has the kubepods files: the pods system container appears
    let pods_sys = s
        .node
        .system_containers
        .iter()
        .find(|c| c.name == "pods")
        .unwrap();
    assert!(pods_sys.memory.as_ref().unwrap().usage_bytes.unwrap() > 0);
}

#[test]
fn unreadable_node_files_are_scrape_errors() {
    let f = fixture();
    let mut config = f.config.clone();
    config.proc_root = f.cgroup_root.join("no-proc-here");
    config.node_fs_dir = PathBuf::from("/no/such/node/fs");
    let c = Collector::new(config, Cgroups::v2_at(&f.cgroup_root));
    c.collect(&[]);
    let snap = c.snapshot();
    assert!(
        snap.errors.iter().any(|e| e.contains("/no/such/node/fs")),
        "{:?}",
        snap.errors
    );
    assert!(
        snap.errors.iter().any(|e| e.contains("meminfo")),
        "{:?}",
        snap.errors
    );
    assert!(c.metrics_resource().ends_with("resource_scrape_error 1\n"));
    // what could be read is still there
    assert!(snap.summary.unwrap().node.cpu.is_some());
}

#[tokio::test]
async fn housekeeping_loop_fills_the_cache_and_stops() {
    let f = fixture();
    let mut config = f.config.clone();
    config.housekeeping_interval = Duration::from_millis(20);
    let c = Arc::new(Collector::new(config, Cgroups::v2_at(&f.cgroup_root)));
    let pod = f.pod.clone();
    let lister = Arc::new(move || vec![pod.clone()]);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(c.clone().run(lister, async {
        let _ = rx.await;
    }));
    // Generous: two real collects on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rate = c
            .summary(false)
            .and_then(|s| s.pods.first()?.cpu.as_ref()?.usage_nano_cores);
        if rate.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "no second tick within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
}

/// Reads this machine's own cgroups and /proc and checks the values make sense.
#[test]
fn real_machine_sanity() {
    if !Path::new("/sys/fs/cgroup").is_dir() {
        eprintln!("note: /sys/fs/cgroup absent; real-machine stats test skipped");
        return;
    }
    let cgroups = match Cgroups::detect() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("note: no usable cgroup hierarchy ({e}); real-machine stats test skipped");
            return;
        }
    };
    let mut config = CollectorConfig::new("real");
    config.node_fs_dir = PathBuf::from("/");
    config.image_fs_dir = PathBuf::from("/");
    config.image_fs_usage_dir = None;
    let c = Collector::new(config, cgroups.clone());
    c.collect(&[]);
    // burn a little cpu so the second sample moves
    let mut x = 0u64;
    for i in 0..20_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(x);
    std::thread::sleep(Duration::from_millis(100));
    c.collect(&[]);
    let snap = c.snapshot();
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let s = snap.summary.unwrap();

    let meminfo = Path::new("/proc/meminfo");
    let total = parse_mem_total(meminfo, &std::fs::read_to_string(meminfo).unwrap()).unwrap();
    let m = s.node.memory.as_ref().unwrap();
    let (usage, ws) = (m.usage_bytes.unwrap(), m.working_set_bytes.unwrap());
    assert!(
        ws <= usage && usage <= total * 2,
        "usage {usage} ws {ws} total {total}"
    );
    assert!(ws > 0);
    assert_eq!(m.available_bytes, Some(total.saturating_sub(ws)));
    let cpu = s.node.cpu.as_ref().unwrap();
    assert!(cpu.usage_core_nano_seconds.unwrap() > 0);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as u64;
    let rate = cpu.usage_nano_cores.expect("second sample gives a rate");
    // A sanity bound, not a measurement: the two samples' clocks are taken a little apart
    // from their cpu.stat reads, and a busy machine's preemption between them skews a rate
    // over a short interval by tens of percent.
    assert!(
        rate <= cores * 2_000_000_000,
        "rate {rate} on {cores} cores"
    );

    let kubelet = s
        .node
        .system_containers
        .iter()
        .find(|c| c.name == "kubelet")
        .expect("the test process's own cgroup is readable");
    let km = kubelet.memory.as_ref().expect("own memory cgroup");
    assert!(km.usage_bytes.unwrap() > 0, "{km:?}");
    assert!(km.working_set_bytes <= km.usage_bytes);

    let rl = s.node.rlimit.as_ref().unwrap();
    assert!(rl.maxpid.unwrap() > 0 && rl.curproc.unwrap() > 0);
    assert!(rl.curproc.unwrap() <= rl.maxpid.unwrap());
    let fs = s.node.fs.as_ref().unwrap();
    assert!(fs.capacity_bytes.unwrap() >= fs.available_bytes.unwrap());
    assert!(s.node.network.is_some());
    let boot = s.node.start_time.0;
    assert!(boot < Utc::now());
    eprintln!(
        "real machine ({:?}): node cpu {} ns ({} nanocores), ws {} B of {} B, kubelet ws {} B",
        cgroups.version(),
        cpu.usage_core_nano_seconds.unwrap(),
        rate,
        ws,
        total,
        km.working_set_bytes.unwrap()
    );
    // the JSON and metrics views serialise
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"nodeName\":\"real\""));
    assert!(c
        .metrics_resource()
        .contains("node_memory_working_set_bytes "));
}

#[test]
fn the_runtime_is_found_by_name_at_each_tick_and_followed_across_restarts() {
    let f = fixture();
    let proc_root = f._tmp.path().join("proc");
    let fake_process = |pid: u32, comm: &str, cgroup: &str| {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
    };
    let runtime_memory = |c: &Collector| {
        c.collect(std::slice::from_ref(&f.pod));
        let s = c.summary(false).unwrap();
        s.node
            .system_containers
            .iter()
            .find(|sc| sc.name == "runtime")
            .map(|sc| sc.memory.as_ref().unwrap().usage_bytes.unwrap())
    };
    let mut config = f.config.clone();
    config.proc_root = proc_root.clone();
    config.runtime_process = Some("containerd".into());
    std::fs::create_dir_all(&proc_root).unwrap();
    fake_process(40, "containerd-shim", &format!("{POD}/{APP}"));
    let c = Collector::new(config, Cgroups::v2_at(&f.cgroup_root));

    // Not running yet: no runtime entry (a shim is not the runtime).
    assert_eq!(runtime_memory(&c), None);

    // Started after the agent, in the sandbox leaf's cgroup.
    fake_process(50, "containerd", &format!("{POD}/{SANDBOX}"));
    assert_eq!(runtime_memory(&c), Some(94208));

    // Restarted under a new pid into another cgroup (the pod's).
    std::fs::remove_dir_all(proc_root.join("50")).unwrap();
    fake_process(60, "containerd", POD);
    let pod_usage: u64 =
        std::fs::read_to_string(f.cgroup_root.join(&POD[1..]).join("memory.current"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_ne!(pod_usage, 94208);
    assert_eq!(runtime_memory(&c), Some(pod_usage));
}

/// `/metrics/cadvisor` from one tick over the captured v2 tree: the app container, the
/// sandbox, the pod cgroup, its QoS parent, the pods' root and the root, each with the labels
/// upstream gives them on containerd, and the values of the capture.
#[test]
fn cadvisor_series_of_a_v2_pod() {
    let f = fixture();
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    let before = crate::stats::cadvisor::parsed::parse(&c.metrics_cadvisor());
    assert_eq!(before.value("container_scrape_error", &[]), 1.0);

    c.collect(std::slice::from_ref(&f.pod));
    let text = c.metrics_cadvisor();
    let p = crate::stats::cadvisor::parsed::parse(&text);
    assert_eq!(p.value("container_scrape_error", &[]), 0.0);
    assert_eq!(p.value("machine_scrape_error", &[]), 0.0);
    assert_eq!(p.value("machine_cpu_cores", &[]), 2.0);

    let app_id = format!("{POD}/{APP}");
    let app = [
        ("container", "app"),
        ("id", app_id.as_str()),
        ("image", "docker.io/library/busybox:1.36"),
        ("name", APP),
        ("namespace", "default"),
        ("pod", "web"),
    ];
    let with = |extra: (&'static str, &'static str)| {
        let mut l = app.to_vec();
        l.push(extra);
        l
    };
    assert_eq!(
        p.value("container_cpu_usage_seconds_total", &with(("cpu", "total"))),
        2.96734
    );
    assert_eq!(
        p.value("container_memory_working_set_bytes", &app),
        (47063040 - 16908288) as f64
    );
    assert_eq!(p.value("container_memory_rss", &app), 8556544.0);
    assert_eq!(p.value("container_memory_cache", &app), 37879808.0);
    assert_eq!(
        p.value("container_cpu_cfs_throttled_periods_total", &app),
        59.0
    );
    assert_eq!(p.value("container_spec_cpu_quota", &app), 50000.0);
    assert_eq!(p.value("container_spec_cpu_period", &app), 100000.0);
    assert_eq!(p.value("container_processes", &app), 2.0);
    // Only the sandbox has the pod's network; lo is left out as cAdvisor does.
    assert!(p
        .find("container_network_receive_bytes_total", &app)
        .is_empty());
    let sandbox_id = format!("{POD}/{SANDBOX}");
    let sandbox = [
        ("container", ""),
        ("id", sandbox_id.as_str()),
        ("image", "registry.k8s.io/pause:3.10"),
        ("name", SANDBOX),
        ("pod", "web"),
    ];
    let mut eth0 = sandbox.to_vec();
    eth0.push(("interface", "eth0"));
    assert_eq!(
        p.value("container_network_receive_bytes_total", &eth0),
        1048576.0
    );
    assert_eq!(
        p.value("container_network_transmit_packets_total", &eth0),
        401.0
    );
    assert_eq!(
        p.find("container_network_receive_bytes_total", &sandbox)
            .len(),
        1,
        "lo left out"
    );
    // The pod cgroup: pod and namespace, no name, image or container; its limits.
    let pod = [
        ("container", ""),
        ("id", POD),
        ("image", ""),
        ("name", ""),
        ("namespace", "default"),
        ("pod", "web"),
    ];
    assert_eq!(
        p.value("container_spec_memory_limit_bytes", &pod),
        268435456.0
    );
    assert_eq!(p.value("container_cpu_usage_seconds_total", &pod), 2.972622);
    // Plain cgroups above the pod: the QoS level, the pods' root and the root, no pod labels.
    for id in ["/kubepods/burstable", "/kubepods", "/"] {
        let raw = [("id", id), ("pod", ""), ("name", ""), ("container", "")];
        assert_eq!(p.find("container_last_seen", &raw).len(), 1, "{id}");
    }
    assert_eq!(
        p.value(
            "container_cpu_usage_seconds_total",
            &[("id", "/"), ("cpu", "total")]
        ),
        4.928
    );
    // The root has the host's network (proc/1/net/dev), veth and lo left out.
    assert!(!p
        .find("container_network_receive_bytes_total", &[("id", "/")])
        .is_empty());
    assert!(p
        .find(
            "container_network_receive_bytes_total",
            &[("interface", "lo")]
        )
        .is_empty());
    // The gone container has no series.
    assert!(p
        .find("container_last_seen", &[("name", "dead")])
        .is_empty());
}

#[test]
fn claims_volumes_are_measured_by_statfs_their_drivers_word_or_their_devices_size() {
    let mut f = fixture();
    // A block device stands in as a file of the device's size: its end is what is read.
    let device = f._tmp.path().join("dev-loop9");
    std::fs::File::create(&device)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let link = f
        ._tmp
        .path()
        .join("volumeDevices/kubernetes.io~local-volume/pv-raw");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&device, &link).unwrap();
    let local = f._tmp.path().join("volumes/local-pv");
    std::fs::create_dir_all(&local).unwrap();
    let csi = f._tmp.path().join("volumes/csi/mount");
    let unreported = f._tmp.path().join("volumes/csi-2/mount");
    let claim = |name: &str| {
        Some(PvcReference {
            name: name.into(),
            namespace: "default".into(),
        })
    };
    f.pod.volumes = vec![
        VolumeInfo {
            name: "db".into(),
            path: local.clone(),
            ephemeral: false,
            measure: Measure::StatFs,
            pvc: claim("data-db"),
        },
        VolumeInfo {
            name: "scratch".into(),
            path: csi.clone(),
            ephemeral: false,
            measure: Measure::Reported,
            pvc: claim("web-scratch"),
        },
        VolumeInfo {
            name: "other".into(),
            path: unreported,
            ephemeral: false,
            measure: Measure::Reported,
            pvc: claim("not-reported"),
        },
        VolumeInfo {
            name: "raw".into(),
            path: link,
            ephemeral: false,
            measure: Measure::DeviceSize,
            pvc: claim("raw-disk"),
        },
        VolumeInfo {
            name: "raw-gone".into(),
            path: f._tmp.path().join("volumeDevices/gone"),
            ephemeral: false,
            measure: Measure::DeviceSize,
            pvc: claim("gone"),
        },
    ];
    let reported = ReportedUsage {
        capacity: Some(1 << 30),
        available: Some(1000 << 20),
        used: Some(24 << 20),
        inodes: Some(1000),
        inodes_free: Some(990),
        inodes_used: Some(10),
    };
    f.config
        .reported_volumes
        .write()
        .unwrap()
        .insert(csi, reported);
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    c.collect(std::slice::from_ref(&f.pod));
    let s = c.summary(false).unwrap();
    let v = &s.pods[0].volume_stats;
    let names: Vec<_> = v.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["db", "scratch", "raw"],
        "a volume its driver said nothing of, or a device gone, is left out"
    );
    let fs = statvfs(&local).unwrap();
    assert_eq!(v[0].fs.capacity_bytes, Some(fs.capacity));
    assert!(
        v[0].fs.used_bytes.is_some_and(|u| u > 0),
        "the filesystem's use"
    );
    assert_eq!(v[0].pvc_ref.as_ref().unwrap().name, "data-db");
    assert_eq!(v[1].fs.used_bytes, Some(24 << 20));
    assert_eq!(v[1].fs.inodes_free, Some(990));
    assert_eq!(v[1].pvc_ref.as_ref().unwrap().name, "web-scratch");
    // Upstream's MetricsBlock: the capacity, every other figure 0.
    let raw = &v[2].fs;
    assert_eq!(raw.capacity_bytes, Some(16 << 20));
    assert_eq!(
        [
            raw.available_bytes,
            raw.used_bytes,
            raw.inodes,
            raw.inodes_free,
            raw.inodes_used
        ],
        [Some(0); 5]
    );
    assert_eq!(v[2].pvc_ref.as_ref().unwrap().name, "raw-disk");
}

/// The captured pressure files (hack/capture-cgroup-v2-pressure.sh) in the Summary: cpu and
/// memory `psi`, and `io` with its `psi`, for the node (the root cgroup), the system
/// containers, the pod and its container, as upstream's stats API names them.
#[test]
fn psi_of_a_v2_pod_in_the_summary() {
    let f = fixture();
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    c.collect(std::slice::from_ref(&f.pod));
    let snap = c.snapshot();
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let s = c.summary(false).unwrap();
    let v = serde_json::to_value(&s).unwrap();
    let node_cpu = &v["node"]["cpu"]["psi"];
    assert_eq!(
        node_cpu,
        &serde_json::json!({
            "full": {"total": 0, "avg10": 0, "avg60": 0, "avg300": 0},
            "some": {"total": 2188823521u64, "avg10": 98.06, "avg60": 97.99, "avg300": 92.83},
        })
    );
    assert_eq!(v["node"]["memory"]["psi"]["some"]["total"], 606);
    assert_eq!(v["node"]["io"]["psi"]["full"]["total"], 34885768);
    assert!(v["node"]["io"]["time"].is_string());
    let pod = &v["pods"][0];
    assert_eq!(
        pod["cpu"]["psi"]["full"],
        serde_json::json!({"total": 2049681, "avg10": 13.31, "avg60": 3.13, "avg300": 0.68})
    );
    assert_eq!(pod["memory"]["psi"]["some"]["total"], 0);
    assert_eq!(pod["io"]["psi"]["some"]["total"], 18478);
    let app = &pod["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["cpu"]["psi"]["some"]["total"], 2179611);
    assert_eq!(app["io"]["psi"]["full"]["total"], 13723);
    // The kubelet system container is the pod cgroup in this fixture.
    let kubelet = &v["node"]["systemContainers"][0];
    assert_eq!(kubelet["cpu"]["psi"]["some"]["total"], 2179639);
    // Upstream's field order: io right after memory.
    let text = serde_json::to_string(&s.pods[0]).unwrap();
    let (m, io, net) = (
        text.find("\"memory\"").unwrap(),
        text.find("\"io\"").unwrap(),
        text.find("\"network\"").unwrap(),
    );
    assert!(m < io && io < net, "{text}");
    // only_cpu_and_memory keeps the cpu and memory pressure, not io.
    let small = serde_json::to_value(c.summary(true).unwrap()).unwrap();
    assert_eq!(small["pods"][0]["cpu"]["psi"]["some"]["total"], 2179639);
    assert!(small["pods"][0].get("io").is_none());

    // The KubeletPSI gate off: none of it.
    let mut config = f.config.clone();
    config.psi = false;
    let c = Collector::new(config, Cgroups::v2_at(&f.cgroup_root));
    c.collect(std::slice::from_ref(&f.pod));
    let text = serde_json::to_string(&c.summary(false).unwrap()).unwrap();
    assert!(!text.contains("psi") && !text.contains("\"io\""), "{text}");

    // cgroup v1 has no per-cgroup pressure: none either.
    let mut config = f.config.clone();
    config.kubelet_cgroup = None;
    let c = Collector::new(config, Cgroups::v1_at(testdata("v1")));
    c.collect(std::slice::from_ref(&f.pod));
    let text = serde_json::to_string(&c.summary(false).unwrap()).unwrap();
    assert!(!text.contains("psi") && !text.contains("\"io\""), "{text}");
}

/// cAdvisor's `container_pressure_*` series over the captured pressure files: its names,
/// help, type and labels, the kernel's microseconds as seconds.
#[test]
fn cadvisor_pressure_series_of_a_v2_pod() {
    let f = fixture();
    let c = Collector::new(f.config.clone(), Cgroups::v2_at(&f.cgroup_root));
    c.collect(std::slice::from_ref(&f.pod));
    let text = c.metrics_cadvisor();
    for (name, help) in [
        ("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion."),
        ("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion."),
        ("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion."),
        ("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion."),
        ("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion."),
        ("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion."),
    ] {
        assert!(text.contains(&format!("# HELP {name} {help}\n# TYPE {name} counter\n")), "{name}");
    }
    let p = crate::stats::cadvisor::parsed::parse(&text);
    let app_id = format!("{POD}/{APP}");
    let app = [
        ("container", "app"),
        ("id", app_id.as_str()),
        ("image", "docker.io/library/busybox:1.36"),
        ("name", APP),
        ("namespace", "default"),
        ("pod", "web"),
    ];
    assert_eq!(
        p.value("container_pressure_cpu_waiting_seconds_total", &app),
        2.179611
    );
    assert_eq!(
        p.value("container_pressure_cpu_stalled_seconds_total", &app),
        2.049652
    );
    assert_eq!(
        p.value("container_pressure_io_waiting_seconds_total", &app),
        0.018478
    );
    assert_eq!(
        p.value("container_pressure_io_stalled_seconds_total", &app),
        0.013723
    );
    assert_eq!(
        p.value("container_pressure_memory_waiting_seconds_total", &app),
        0.0
    );
    let root = [
        ("container", ""),
        ("id", "/"),
        ("image", ""),
        ("name", ""),
        ("namespace", ""),
        ("pod", ""),
    ];
    assert_eq!(
        p.value("container_pressure_cpu_waiting_seconds_total", &root),
        2188.823521
    );
    assert_eq!(
        p.value("container_pressure_memory_stalled_seconds_total", &root),
        0.000471
    );
    // One series per cgroup cAdvisor reports, the sandbox's zeros included.
    assert_eq!(
        p.find("container_pressure_cpu_waiting_seconds_total", &[])
            .len(),
        p.find("container_cpu_usage_seconds_total", &[]).len()
    );

    let mut config = f.config.clone();
    config.psi = false;
    let c = Collector::new(config, Cgroups::v2_at(&f.cgroup_root));
    c.collect(std::slice::from_ref(&f.pod));
    assert!(!c.metrics_cadvisor().contains("container_pressure_"));
    let mut config = f.config.clone();
    config.kubelet_cgroup = None;
    let c = Collector::new(config, Cgroups::v1_at(testdata("v1")));
    c.collect(std::slice::from_ref(&f.pod));
    assert!(!c.metrics_cadvisor().contains("container_pressure_"));
}
