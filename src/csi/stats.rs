//! The published CSI volumes' usage, as their drivers report it (NodeGetVolumeStats), for
//! `/stats/summary` and the `kubelet_volume_stats_*` series. The collector's tick is
//! synchronous and walks folders on a blocking thread, so the driver calls are made here,
//! on the agent's own task, every volumeStatsAggPeriod (upstream caches a volume's metrics
//! for as long); the collector reads the last answer for each target path. A driver without
//! GET_VOLUME_STATS, or one that fails, leaves its volumes out, as upstream leaves out a
//! volume whose metrics it cannot get.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use tracing::debug;

use super::client::DriverClient;
use super::proto::csi as pb;
use super::Drivers;
use crate::stats::{ReportedUsage, ReportedVolumes};

/// One CSI volume published into a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiVolume {
    pub driver: String,
    pub volume_id: String,
    /// The pod's target path (`.../volumes/kubernetes.io~csi/<name>/mount`).
    pub target: PathBuf,
}

/// The CSI volumes published at `targets`, as their `vol_data.json` name them (a target
/// without one, e.g. torn down since, is left out).
pub fn published(targets: &[PathBuf]) -> Vec<CsiVolume> {
    targets
        .iter()
        .filter_map(|t| {
            let d = crate::volume::csi::published_data(t)?;
            Some(CsiVolume {
                driver: d.driver_name,
                volume_id: d.volume_handle,
                target: t.clone(),
            })
        })
        .collect()
}

/// Polls every `period` until the task is dropped: the volumes `volumes` lists now, each
/// asked of its driver, the answers replacing `out`'s.
pub async fn run(
    drivers: Drivers,
    volumes: impl Fn() -> Vec<CsiVolume>,
    out: ReportedVolumes,
    period: Duration,
) {
    let mut ticker = tokio::time::interval(period.max(Duration::from_secs(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let fresh = poll(&drivers, &volumes()).await;
        if let Ok(mut m) = out.write() {
            *m = fresh;
        }
    }
}

/// One round: each volume's usage by its target path.
pub(crate) async fn poll(
    drivers: &Drivers,
    volumes: &[CsiVolume],
) -> HashMap<PathBuf, ReportedUsage> {
    // Each driver's capabilities asked once a round: a driver that gains or loses
    // GET_VOLUME_STATS across an upgrade is followed.
    let mut capable: HashMap<String, bool> = HashMap::new();
    let mut out = HashMap::new();
    for v in volumes {
        let Some(driver) = drivers.get(&v.driver) else {
            continue;
        };
        let client = DriverClient::new(&driver.endpoint);
        if !capable.contains_key(&v.driver) {
            let has = match client.node_capabilities().await {
                Ok(c) => c.volume_stats,
                Err(e) => {
                    debug!(driver = %v.driver, error = %e, "CSI driver's capabilities unknown: no volume stats this round");
                    false
                }
            };
            capable.insert(v.driver.clone(), has);
        }
        if !capable[&v.driver] {
            continue;
        }
        match client.volume_stats(&v.volume_id, &v.target).await {
            Ok(r) => {
                out.insert(v.target.clone(), usage(&r));
            }
            Err(e) => {
                debug!(driver = %v.driver, volume = %v.volume_id, target = %v.target.display(), error = %e, "NodeGetVolumeStats failed");
            }
        }
    }
    out
}

/// The driver's answer in the summary's terms: bytes and inodes, each as far as reported
/// (negative numbers are a driver's bug and dropped).
pub(crate) fn usage(r: &pb::NodeGetVolumeStatsResponse) -> ReportedUsage {
    use pb::volume_usage::Unit;
    let n = |v: i64| u64::try_from(v).ok();
    let mut u = ReportedUsage::default();
    for x in &r.usage {
        match Unit::try_from(x.unit) {
            Ok(Unit::Bytes) => {
                u.capacity = n(x.total);
                u.available = n(x.available);
                u.used = n(x.used);
            }
            Ok(Unit::Inodes) => {
                u.inodes = n(x.total);
                u.inodes_free = n(x.available);
                u.inodes_used = n(x.used);
            }
            _ => {}
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::fake::{serve, FakeDriver};
    use crate::csi::proto::csi::node_server::NodeServer;
    use crate::csi::Driver;

    fn register(drivers: &Drivers, name: &str, endpoint: PathBuf) {
        let d = Driver {
            endpoint,
            registration: PathBuf::from("/nowhere"),
            node_id: "n".into(),
            version: "1.0.0".into(),
        };
        drivers.insert(name, d);
    }

    #[tokio::test]
    async fn volumes_are_asked_of_drivers_that_report_usage_and_the_rest_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let with = FakeDriver {
            volume_stats: true,
            ..FakeDriver::default()
        };
        let without = FakeDriver::default();
        let (a, b) = (tmp.path().join("a.sock"), tmp.path().join("b.sock"));
        let _sa = serve(&a, NodeServer::new(with.clone()));
        let _sb = serve(&b, NodeServer::new(without.clone()));
        let drivers = Drivers::default();
        register(&drivers, "with.csi", a);
        register(&drivers, "without.csi", b);
        let vol = |driver: &str, id: &str, target: &str| CsiVolume {
            driver: driver.into(),
            volume_id: id.into(),
            target: PathBuf::from(target),
        };
        let got = poll(
            &drivers,
            &[
                vol("with.csi", "v1", "/p/1/mount"),
                vol("with.csi", "v2", "/p/22/mount"),
                vol("without.csi", "v3", "/p/3/mount"),
                vol("gone.csi", "v4", "/p/4/mount"),
            ],
        )
        .await;
        assert_eq!(got.len(), 2, "{got:?}");
        let u = got[&PathBuf::from("/p/22/mount")];
        assert_eq!(u.capacity, Some(1 << 30));
        assert_eq!(u.used, Some("/p/22/mount".len() as u64));
        assert_eq!(u.available, Some((1 << 30) - "/p/22/mount".len() as u64));
        assert_eq!(
            (u.inodes, u.inodes_free, u.inodes_used),
            (Some(100), Some(99), Some(1))
        );
        let asked: Vec<_> = with
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.volume_id.clone(), c.target.clone(), c.staging.clone()))
            .collect();
        assert_eq!(
            asked,
            [
                ("v1".into(), "/p/1/mount".into(), String::new()),
                ("v2".into(), "/p/22/mount".into(), String::new()),
            ],
            "the volume ID and target path only, as upstream"
        );
        assert!(
            without.calls.lock().unwrap().is_empty(),
            "no GET_VOLUME_STATS: not asked"
        );
    }

    #[test]
    fn the_published_volumes_are_read_from_their_vol_data() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kubernetes.io~csi/pv-1");
        std::fs::create_dir_all(dir.join("mount")).unwrap();
        std::fs::write(
            dir.join("vol_data.json"),
            r#"{"driverName":"d.csi","volumeHandle":"h-1","specVolID":"pv-1"}"#,
        )
        .unwrap();
        let gone = tmp.path().join("kubernetes.io~csi/pv-2/mount");
        let got = published(&[dir.join("mount"), gone]);
        assert_eq!(
            got,
            [CsiVolume {
                driver: "d.csi".into(),
                volume_id: "h-1".into(),
                target: dir.join("mount"),
            }]
        );
    }
}
