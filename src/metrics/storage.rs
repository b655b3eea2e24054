//! The volume families: `storage_operation_duration_seconds` for each mount of a volume into
//! a pod, and `volume_manager_total_volumes`, the pods' volumes as wanted
//! (desired_state_of_world) and as set up (actual_state_of_world), by plugin.
//!
//! The agent sets a pod's volumes up again on every pass (idempotent). Upstream's volume
//! manager mounts an emptyDir, hostPath or local volume once and remounts only the volumes
//! whose content follows an object (configMap, secret, downwardAPI, projected) on each sync,
//! so the same is counted here: the first successful set-up of the others, every set-up of
//! those. CSI volumes are timed around their driver calls (`volume::csi`), with the driver in
//! the plugin name as upstream (`kubernetes.io/csi:<driver>`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Volume};

use super::kubelet;
use crate::volume::{HostVolume, VolumeKind};

/// A volume as the volume manager counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tracked {
    plugin: String,
    mounted: bool,
}

#[derive(Default)]
struct State {
    /// Per pod UID, its volumes by name.
    pods: HashMap<String, BTreeMap<String, Tracked>>,
    /// (pod UID, volume) mounted once: not counted again unless they remount.
    mounted_once: HashSet<(String, String)>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Default::default)
}

fn observe(plugin: &str, operation: &str, started: Instant, ok: bool) {
    kubelet().storage_operation_duration.observe(
        &[
            plugin,
            operation,
            if ok { "success" } else { "fail-unknown" },
            "false",
        ],
        started.elapsed().as_secs_f64(),
    );
}

/// Sets up one volume of `pod` with `f`, timing it as a `volume_mount` and tracking it for
/// the volume manager's totals. CSI volumes are tracked here and timed by `csi_mount`.
pub fn mount<E>(
    pod: &Pod,
    vol: &Volume,
    f: impl FnOnce() -> Result<HostVolume, E>,
) -> Result<HostVolume, E> {
    let started = Instant::now();
    let result = f();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let kind = result.as_ref().ok().map(|hv| hv.kind);
    let plugin = match (kind, &vol.csi) {
        (Some(VolumeKind::Csi), Some(csi)) => format!("kubernetes.io/csi:{}", csi.driver),
        (Some(_), _) => result
            .as_ref()
            .map(|hv| hv.kind.plugin_name().to_string())
            .unwrap_or_default(),
        (None, _) => crate::volume::plugin_of_spec(vol),
    };
    let mut s = state().lock().unwrap_or_else(|p| p.into_inner());
    let key = (uid.clone(), vol.name.clone());
    let counted = match kind {
        Some(VolumeKind::Csi) => false,
        Some(k) if k.remounts() => true,
        Some(_) => !s.mounted_once.contains(&key),
        None => vol.csi.is_none() && !s.mounted_once.contains(&key),
    };
    if counted {
        observe(&plugin, "volume_mount", started, result.is_ok());
    }
    if result.is_ok() {
        s.mounted_once.insert(key);
    }
    let tracked = Tracked {
        plugin,
        mounted: result.is_ok(),
    };
    let volumes = s.pods.entry(uid).or_default();
    if volumes.get(&vol.name) != Some(&tracked) {
        volumes.insert(vol.name.clone(), tracked);
        publish(&s);
    }
    result
}

/// A CSI volume's stage and publish by `driver`, timed as one `volume_mount` until it is
/// mounted (later passes find it mounted and keep it, as upstream mounts it once).
pub async fn csi_mount<T, E>(
    pod: &Pod,
    volume: &str,
    driver: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let result = f.await;
    let key = (
        pod.metadata.uid.clone().unwrap_or_default(),
        volume.to_string(),
    );
    let mounted_before = state()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .mounted_once
        .contains(&key);
    if !mounted_before {
        observe(
            &format!("kubernetes.io/csi:{driver}"),
            "volume_mount",
            started,
            result.is_ok(),
        );
    }
    result
}

/// The pod's volumes were torn down: it no longer counts.
pub fn forget_pod(uid: &str) {
    let mut s = state().lock().unwrap_or_else(|p| p.into_inner());
    s.mounted_once.retain(|(u, _)| u != uid);
    if s.pods.remove(uid).is_some() {
        publish(&s);
    }
}

fn publish(s: &State) {
    let mut counts: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for volumes in s.pods.values() {
        for t in volumes.values() {
            *counts
                .entry((t.plugin.clone(), "desired_state_of_world"))
                .or_default() += 1;
            if t.mounted {
                *counts
                    .entry((t.plugin.clone(), "actual_state_of_world"))
                    .or_default() += 1;
            }
        }
    }
    let series: Vec<(Vec<&str>, f64)> = counts
        .iter()
        .map(|((plugin, state), n)| (vec![plugin.as_str(), *state], *n as f64))
        .collect();
    kubelet().volume_manager_total_volumes.set_all(&series);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn pod(uid: &str) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"uid": uid, "name": "p"}})).unwrap()
    }

    fn volume(v: serde_json::Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    fn host(kind: VolumeKind) -> HostVolume {
        HostVolume {
            path: PathBuf::from("/x"),
            read_only: false,
            kind,
        }
    }

    #[test]
    fn a_block_volume_is_named_by_its_plugin() {
        assert_eq!(
            host(VolumeKind::CsiBlock).kind.plugin_name(),
            "kubernetes.io/csi"
        );
        assert_eq!(
            host(VolumeKind::LocalBlock).kind.plugin_name(),
            "kubernetes.io/local-volume"
        );
        assert_eq!(
            host(VolumeKind::Local).kind.plugin_name(),
            "kubernetes.io/local-volume"
        );
    }

    fn count(plugin: &str, status: &str) -> u64 {
        kubelet()
            .storage_operation_duration
            .totals(&[plugin, "volume_mount", status, "false"])
            .map_or(0, |t| t.0)
    }

    fn total(plugin: &str, state: &str) -> Option<f64> {
        kubelet().volume_manager_total_volumes.get(&[plugin, state])
    }

    #[test]
    fn mounts_count_once_or_on_every_remount_and_the_totals_follow_the_pods() {
        // The plugin names are shared with other tests' pods: deltas and this test's own
        // pods only. The CSI driver name is this test's alone.
        let driver = "storage-test.csi.example";
        let csi_plugin = format!("kubernetes.io/csi:{driver}");
        let empty = volume(serde_json::json!({"name": "scratch", "emptyDir": {}}));
        let cm = volume(serde_json::json!({"name": "conf", "configMap": {"name": "c"}}));
        let csi = volume(serde_json::json!({"name": "data", "csi": {"driver": driver}}));
        let p = pod("uid-storage-test");
        let before_empty = count("kubernetes.io/empty-dir", "success");
        let before_cm = count("kubernetes.io/configmap", "success");
        for _ in 0..3 {
            mount::<()>(&p, &empty, || Ok(host(VolumeKind::EmptyDir))).unwrap();
            mount::<()>(&p, &cm, || Ok(host(VolumeKind::ConfigMap))).unwrap();
        }
        assert!(count("kubernetes.io/empty-dir", "success") > before_empty);
        // Other tests' pods may mount emptyDirs too: at least this pod's three configMap
        // mounts, and this pod's emptyDir counted once (checked through its own key).
        assert!(count("kubernetes.io/configmap", "success") >= before_cm + 3);
        assert!(state()
            .lock()
            .unwrap()
            .mounted_once
            .contains(&("uid-storage-test".to_string(), "scratch".to_string())));

        // A CSI volume that fails: tracked as desired, not as mounted; timed only by its
        // driver calls.
        let _ = mount(&p, &csi, || Err::<HostVolume, _>("no driver"));
        assert_eq!(count(&csi_plugin, "fail-unknown"), 0);
        assert_eq!(total(&csi_plugin, "desired_state_of_world"), Some(1.0));
        assert_eq!(total(&csi_plugin, "actual_state_of_world"), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _ = rt.block_on(csi_mount(&p, "data", driver, async {
            Err::<(), _>("timeout")
        }));
        assert_eq!(count(&csi_plugin, "fail-unknown"), 1);
        let _ = rt.block_on(csi_mount(&p, "data", driver, async { Ok::<_, ()>(()) }));
        let _ = mount::<()>(&p, &csi, || Ok(host(VolumeKind::Csi)));
        assert_eq!(total(&csi_plugin, "actual_state_of_world"), Some(1.0));
        // Mounted: the next passes keep it and count nothing.
        let _ = rt.block_on(csi_mount(&p, "data", driver, async { Ok::<_, ()>(()) }));
        assert_eq!(count(&csi_plugin, "success"), 1);

        forget_pod("uid-storage-test");
        assert_eq!(total(&csi_plugin, "desired_state_of_world"), None);
        let text = crate::metrics::registry().gather();
        assert!(text.contains(
            "storage_operation_duration_seconds_bucket{migrated=\"false\",operation_name=\"volume_mount\",status=\"success\",volume_plugin=\"kubernetes.io/configmap\",le=\"0.1\"}"
        ), "{text}");
    }
}
