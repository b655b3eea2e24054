//! The Summary API (`/stats/summary`, kubelet stats/v1alpha1) as serde types. Field names,
//! optional fields and nesting follow upstream's Go JSON tags
//! (k8s.io/kubelet/pkg/apis/stats/v1alpha1/types.go): pointers with `omitempty` are
//! `Option`s skipped when None, inlined structs are flattened, slices with `omitempty` are
//! skipped when empty.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// metav1.Time: serialised as RFC3339 in UTC with whole seconds. The full precision is kept
/// in memory because /metrics/resource stamps samples in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub DateTime<Utc>);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| Time(t.with_timezone(&Utc)))
            .map_err(serde::de::Error::custom)
    }
}

pub const SYSTEM_CONTAINER_KUBELET: &str = "kubelet";
pub const SYSTEM_CONTAINER_RUNTIME: &str = "runtime";
pub const SYSTEM_CONTAINER_MISC: &str = "misc";
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(rename = "volume", default, skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(
        rename = "ephemeral-storage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        rename = "process_stats",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accelerators: Vec<AcceleratorStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_defined_metrics: Vec<UserDefinedMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    pub time: Time,
    /// The default interface (eth0) inlined; an empty name when the pod has none.
    #[serde(flatten)]
    pub default_interface: InterfaceStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// IOStats: only pressure so far, as upstream's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// PSIStats: the `full` and `some` lines of a pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiStats {
    pub full: PsiData,
    pub some: PsiData,
}

/// PSIData. `total` is the kernel's counter as cAdvisor passes it on (microseconds, though
/// upstream's comment says nanoseconds); the averages are percentages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiData {
    pub total: u64,
    #[serde(serialize_with = "go_float")]
    pub avg10: f64,
    #[serde(serialize_with = "go_float")]
    pub avg60: f64,
    #[serde(serialize_with = "go_float")]
    pub avg300: f64,
}

/// A float as Go's encoding/json writes it: a whole number without `.0`.
fn go_float<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

impl From<crate::cgroups::pressure::Psi> for PsiStats {
    fn from(p: crate::cgroups::pressure::Psi) -> Self {
        let data = |d: crate::cgroups::pressure::PsiData| PsiData {
            total: d.total,
            avg10: d.avg10,
            avg60: d.avg60,
            avg300: d.avg300,
        };
        PsiStats {
            full: data(p.full),
            some: data(p.some),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorStats {
    pub make: String,
    pub model: String,
    pub id: String,
    pub memory_total: u64,
    pub memory_used: u64,
    pub duty_cycle: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_health_stats: Option<VolumeHealthStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeHealthStats {
    pub abnormal: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserDefinedMetric {
    pub name: String,
    #[serde(rename = "type")]
    pub metric_type: String,
    pub units: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub time: Time,
    pub value: f64,
}

impl Summary {
    /// The `only_cpu_and_memory=true` view: node cpu/memory (and system containers'
    /// cpu/memory), pods with their cpu/memory and their containers' cpu/memory only.
    pub fn cpu_and_memory_only(&self) -> Summary {
        let strip_container = |c: &ContainerStats| ContainerStats {
            io: None,
            name: c.name.clone(),
            start_time: c.start_time,
            cpu: c.cpu.clone(),
            memory: c.memory.clone(),
            accelerators: Vec::new(),
            rootfs: None,
            logs: None,
            user_defined_metrics: Vec::new(),
            swap: None,
        };
        Summary {
            node: NodeStats {
                io: None,
                node_name: self.node.node_name.clone(),
                system_containers: self
                    .node
                    .system_containers
                    .iter()
                    .map(strip_container)
                    .collect(),
                start_time: self.node.start_time,
                cpu: self.node.cpu.clone(),
                memory: self.node.memory.clone(),
                network: None,
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods: self
                .pods
                .iter()
                .map(|p| PodStats {
                    io: None,
                    pod_ref: p.pod_ref.clone(),
                    start_time: p.start_time,
                    containers: p.containers.iter().map(strip_container).collect(),
                    cpu: p.cpu.clone(),
                    memory: p.memory.clone(),
                    network: None,
                    volume_stats: Vec::new(),
                    ephemeral_storage: None,
                    process_stats: None,
                    swap: None,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeSet;

    fn t() -> Time {
        Time(
            DateTime::parse_from_rfc3339("2025-06-23T19:09:31.568123456Z")
                .unwrap()
                .with_timezone(&Utc),
        )
    }

    fn fs() -> FsStats {
        FsStats {
            time: t(),
            available_bytes: Some(1),
            capacity_bytes: Some(2),
            used_bytes: Some(3),
            inodes_free: Some(4),
            inodes: Some(5),
            inodes_used: Some(6),
        }
    }

    fn iface(name: &str) -> InterfaceStats {
        InterfaceStats {
            name: name.into(),
            rx_bytes: Some(1),
            rx_errors: Some(2),
            tx_bytes: Some(3),
            tx_errors: Some(4),
        }
    }

    fn cpu() -> CpuStats {
        CpuStats {
            psi: None,
            time: t(),
            usage_nano_cores: Some(1),
            usage_core_nano_seconds: Some(2),
        }
    }

    fn mem() -> MemoryStats {
        MemoryStats {
            psi: None,
            time: t(),
            available_bytes: Some(1),
            usage_bytes: Some(2),
            working_set_bytes: Some(3),
            rss_bytes: Some(4),
            page_faults: Some(5),
            major_page_faults: Some(6),
        }
    }

    fn swap() -> SwapStats {
        SwapStats {
            time: t(),
            swap_available_bytes: Some(1),
            swap_usage_bytes: Some(2),
        }
    }

    fn container() -> ContainerStats {
        ContainerStats {
            io: None,
            name: "c".into(),
            start_time: t(),
            cpu: Some(cpu()),
            memory: Some(mem()),
            accelerators: vec![AcceleratorStats {
                make: "m".into(),
                model: "m".into(),
                id: "i".into(),
                memory_total: 1,
                memory_used: 1,
                duty_cycle: 1,
            }],
            rootfs: Some(fs()),
            logs: Some(fs()),
            user_defined_metrics: vec![UserDefinedMetric {
                name: "n".into(),
                metric_type: "gauge".into(),
                units: "u".into(),
                labels: BTreeMap::from([("k".into(), "v".into())]),
                time: t(),
                value: 1.5,
            }],
            swap: Some(swap()),
        }
    }

    fn full() -> Summary {
        Summary {
            node: NodeStats {
                io: None,
                node_name: "n".into(),
                system_containers: vec![container()],
                start_time: t(),
                cpu: Some(cpu()),
                memory: Some(mem()),
                network: Some(NetworkStats {
                    time: t(),
                    default_interface: iface("eth0"),
                    interfaces: vec![iface("eth0")],
                }),
                fs: Some(fs()),
                runtime: Some(RuntimeStats {
                    image_fs: Some(fs()),
                    container_fs: Some(fs()),
                }),
                rlimit: Some(RlimitStats {
                    time: t(),
                    maxpid: Some(1),
                    curproc: Some(2),
                }),
                swap: Some(swap()),
            },
            pods: vec![PodStats {
                io: None,
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                start_time: t(),
                containers: vec![container()],
                cpu: Some(cpu()),
                memory: Some(mem()),
                network: Some(NetworkStats {
                    time: t(),
                    default_interface: iface("eth0"),
                    interfaces: vec![iface("eth0")],
                }),
                volume_stats: vec![VolumeStats {
                    fs: fs(),
                    name: "v".into(),
                    pvc_ref: Some(PvcReference {
                        name: "c".into(),
                        namespace: "ns".into(),
                    }),
                    volume_health_stats: Some(VolumeHealthStats { abnormal: false }),
                }],
                ephemeral_storage: Some(fs()),
                process_stats: Some(ProcessStats {
                    process_count: Some(3),
                }),
                swap: Some(swap()),
            }],
        }
    }

    fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(p.clone());
                    paths(v, &p, out);
                }
            }
            Value::Array(a) => {
                for v in a {
                    paths(v, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }

    // Field names per struct as upstream's types.go tags them (swap/containerFs era).
    const CPU: &[&str] = &["time", "usageNanoCores", "usageCoreNanoSeconds"];
    const MEMORY: &[&str] = &[
        "time",
        "availableBytes",
        "usageBytes",
        "workingSetBytes",
        "rssBytes",
        "pageFaults",
        "majorPageFaults",
    ];
    const FS: &[&str] = &[
        "time",
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ];
    const SWAP: &[&str] = &["time", "swapAvailableBytes", "swapUsageBytes"];
    const IFACE: &[&str] = &["name", "rxBytes", "rxErrors", "txBytes", "txErrors"];
    const ACCEL: &[&str] = &[
        "make",
        "model",
        "id",
        "memoryTotal",
        "memoryUsed",
        "dutyCycle",
    ];
    const UDM: &[&str] = &[
        "name", "type", "units", "labels", "labels.k", "time", "value",
    ];

    fn golden() -> BTreeSet<String> {
        let mut g = BTreeSet::new();
        let mut add = |prefix: &str, fields: &[&str]| {
            // Array elements are not keys of their own.
            if !prefix.is_empty() && !prefix.ends_with("[]") {
                g.insert(prefix.to_string());
            }
            for f in fields {
                g.insert(if prefix.is_empty() {
                    f.to_string()
                } else {
                    format!("{prefix}.{f}")
                });
            }
        };
        let container = |add: &mut dyn FnMut(&str, &[&str]), p: &str| {
            add(
                p,
                &["name", "startTime", "accelerators", "userDefinedMetrics"],
            );
            add(&format!("{p}.cpu"), CPU);
            add(&format!("{p}.memory"), MEMORY);
            add(&format!("{p}.accelerators[]"), ACCEL);
            add(&format!("{p}.rootfs"), FS);
            add(&format!("{p}.logs"), FS);
            add(&format!("{p}.userDefinedMetrics[]"), UDM);
            add(&format!("{p}.swap"), SWAP);
        };
        add("", &["node", "pods"]);
        add("node", &["nodeName", "systemContainers", "startTime"]);
        container(&mut add, "node.systemContainers[]");
        add("node.cpu", CPU);
        add("node.memory", MEMORY);
        add("node.network", &["time", "interfaces"]);
        add("node.network", IFACE);
        add("node.network.interfaces[]", IFACE);
        add("node.fs", FS);
        add("node.runtime", &["imageFs", "containerFs"]);
        add("node.runtime.imageFs", FS);
        add("node.runtime.containerFs", FS);
        add("node.rlimit", &["time", "maxpid", "curproc"]);
        add("node.swap", SWAP);
        add(
            "pods[]",
            &[
                "podRef",
                "startTime",
                "containers",
                "volume",
                "ephemeral-storage",
                "process_stats",
            ],
        );
        add("pods[].podRef", &["name", "namespace", "uid"]);
        container(&mut add, "pods[].containers[]");
        add("pods[].cpu", CPU);
        add("pods[].memory", MEMORY);
        add("pods[].network", &["time", "interfaces"]);
        add("pods[].network", IFACE);
        add("pods[].network.interfaces[]", IFACE);
        add("pods[].volume[]", FS);
        add("pods[].volume[]", &["name", "pvcRef", "volumeHealthStats"]);
        add("pods[].volume[].pvcRef", &["name", "namespace"]);
        add("pods[].volume[].volumeHealthStats", &["abnormal"]);
        add("pods[].ephemeral-storage", FS);
        add("pods[].process_stats", &["process_count"]);
        add("pods[].swap", SWAP);
        g
    }

    #[test]
    fn json_field_names_match_upstream() {
        let v = serde_json::to_value(full()).unwrap();
        let mut got = BTreeSet::new();
        paths(&v, "", &mut got);
        let want = golden();
        let missing: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "missing {missing:?}, unexpected {extra:?}"
        );
    }

    #[test]
    fn round_trips_and_time_is_whole_seconds_utc() {
        let s = full();
        let text = serde_json::to_string(&s).unwrap();
        assert!(
            text.contains(r#""startTime":"2025-06-23T19:09:31Z""#),
            "{text}"
        );
        let back: Summary = serde_json::from_str(&text).unwrap();
        assert_eq!(back.node.node_name, "n");
        assert_eq!(
            back.pods[0].containers[0]
                .cpu
                .as_ref()
                .unwrap()
                .usage_nano_cores,
            Some(1)
        );
    }

    #[test]
    fn optional_fields_are_omitted_and_required_ones_stay() {
        let s = Summary {
            node: NodeStats {
                io: None,
                node_name: "n".into(),
                system_containers: vec![],
                start_time: t(),
                cpu: Some(CpuStats {
                    psi: None,
                    time: t(),
                    usage_nano_cores: None,
                    usage_core_nano_seconds: Some(5),
                }),
                memory: None,
                network: Some(NetworkStats {
                    time: t(),
                    default_interface: InterfaceStats::default(),
                    interfaces: vec![],
                }),
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods: vec![PodStats {
                io: None,
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                start_time: t(),
                containers: vec![],
                cpu: None,
                memory: None,
                network: None,
                volume_stats: vec![],
                ephemeral_storage: None,
                process_stats: None,
                swap: None,
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "node": {"nodeName": "n", "startTime": "2025-06-23T19:09:31Z",
                         "cpu": {"time": "2025-06-23T19:09:31Z", "usageCoreNanoSeconds": 5},
                         "network": {"time": "2025-06-23T19:09:31Z", "name": ""}},
                "pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"},
                          "startTime": "2025-06-23T19:09:31Z", "containers": []}]
            })
        );
    }

    #[test]
    fn cpu_and_memory_only_strips_the_rest() {
        let v = serde_json::to_value(full().cpu_and_memory_only()).unwrap();
        let mut got = BTreeSet::new();
        paths(&v, "", &mut got);
        for gone in [
            "node.fs",
            "node.network",
            "node.runtime",
            "node.rlimit",
            "node.swap",
            "node.systemContainers[].rootfs",
            "pods[].network",
            "pods[].volume",
            "pods[].ephemeral-storage",
            "pods[].process_stats",
            "pods[].containers[].logs",
            "pods[].containers[].rootfs",
            "pods[].containers[].accelerators",
        ] {
            assert!(!got.contains(gone), "{gone} still present");
        }
        for kept in [
            "node.cpu.usageNanoCores",
            "node.memory.workingSetBytes",
            "node.systemContainers[].cpu",
            "pods[].cpu.usageCoreNanoSeconds",
            "pods[].containers[].memory.workingSetBytes",
            "pods[].containers[].startTime",
        ] {
            assert!(got.contains(kept), "{kept} missing");
        }
    }
}
