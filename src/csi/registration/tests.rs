use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::csi::client::NodeInfo;
use crate::csi::fake::{serve, FakeDriver, FakeRegistrar};
use crate::csi::node_info::NodeInfoError;
use crate::csi::proto::csi::node_server::NodeServer;
use crate::csi::proto::registration::{registration_server::RegistrationServer, PluginInfo};

/// What registration wrote for the node, in order.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl CsiNodeWriter for Recorded {
    async fn install(&self, driver: &str, info: &NodeInfo) -> Result<(), NodeInfoError> {
        self.0.lock().unwrap().push(format!(
            "install {driver} {} max={} topology={:?}",
            info.node_id, info.max_volumes, info.topology
        ));
        Ok(())
    }
    async fn uninstall(&self, driver: &str) -> Result<(), NodeInfoError> {
        self.0.lock().unwrap().push(format!("uninstall {driver}"));
        Ok(())
    }
}

fn registrar(kind: &str, endpoint: &Path, versions: &[&str]) -> FakeRegistrar {
    FakeRegistrar {
        info: PluginInfo {
            r#type: kind.into(),
            name: "csi.example.com".into(),
            endpoint: endpoint.display().to_string(),
            supported_versions: versions.iter().map(|v| v.to_string()).collect(),
        },
        statuses: Default::default(),
    }
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..800 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn the_highest_1_x_version_is_chosen_and_others_are_not_spoken() {
    let v = |s: &[&str]| highest_supported(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(v(&["0.3.0", "1.0.0", "v1.2.0"]).as_deref(), Some("1.2.0"));
    assert_eq!(v(&["1.10", "1.9.9"]).as_deref(), Some("1.10.0"));
    assert_eq!(v(&["0.3.0", "2.0.0", "banana"]), None);
}

#[tokio::test]
async fn a_registrar_socket_registers_its_driver_and_its_removal_deregisters_it() {
    let tmp = tempfile::tempdir().unwrap();
    let reg_dir = tmp.path().join(REGISTRY_DIR);
    std::fs::create_dir_all(reg_dir.join("sub")).unwrap();
    let driver_sock = tmp.path().join("csi.sock");
    let _driver = serve(&driver_sock, NodeServer::new(FakeDriver::default()));
    // In a subfolder, as some drivers lay it out; a hidden socket is not a plugin.
    let reg_sock = reg_dir.join("sub/csi.example.com-reg.sock");
    let r = registrar(CSI_PLUGIN, &driver_sock, &["1.0.0"]);
    let statuses = r.statuses.clone();
    let server = serve(&reg_sock, RegistrationServer::new(r));
    let hidden = registrar(CSI_PLUGIN, &driver_sock, &["1.0.0"]);
    let hidden_statuses = hidden.statuses.clone();
    let _hidden = serve(
        &reg_dir.join(".hidden.sock"),
        RegistrationServer::new(hidden),
    );

    let drivers = Drivers::default();
    let node = Arc::new(Recorded::default());
    let watcher = tokio::spawn(run(tmp.path().to_path_buf(), drivers.clone(), node.clone()));
    eventually("the registration", || {
        drivers.get("csi.example.com").is_some()
    })
    .await;
    let d = drivers.get("csi.example.com").unwrap();
    assert_eq!(d.endpoint, driver_sock);
    assert_eq!(d.node_id, "fake-node-id");
    assert_eq!(d.version, "1.0.0");
    eventually("the registrar told", || {
        !statuses.lock().unwrap().is_empty()
    })
    .await;
    let told = statuses.lock().unwrap()[0].clone();
    assert!(told.plugin_registered, "{told:?}");
    assert_eq!(
        node.0.lock().unwrap().as_slice(),
        ["install csi.example.com fake-node-id max=7 topology={\"topology.fake/zone\": \"z1\"}"]
    );
    assert!(
        hidden_statuses.lock().unwrap().is_empty(),
        "hidden sockets are not plugins"
    );

    server.abort();
    std::fs::remove_file(&reg_sock).unwrap();
    eventually("the deregistration", || {
        drivers.get("csi.example.com").is_none()
    })
    .await;
    eventually("the uninstall", || node.0.lock().unwrap().len() == 2).await;
    assert_eq!(node.0.lock().unwrap()[1], "uninstall csi.example.com");
    watcher.abort();
}

#[tokio::test]
async fn plugins_it_cannot_serve_are_told_why_and_not_registered() {
    let tmp = tempfile::tempdir().unwrap();
    let reg_dir = tmp.path().join(REGISTRY_DIR);
    std::fs::create_dir_all(&reg_dir).unwrap();
    let driver_sock = tmp.path().join("csi.sock");
    let _driver = serve(&driver_sock, NodeServer::new(FakeDriver::default()));
    let device = registrar("DevicePlugin", &driver_sock, &["v1beta1"]);
    let device_told = device.statuses.clone();
    let _d = serve(
        &reg_dir.join("device.sock"),
        RegistrationServer::new(device),
    );
    let old = registrar(CSI_PLUGIN, &driver_sock, &["0.3.0"]);
    let old_told = old.statuses.clone();
    let _o = serve(&reg_dir.join("old.sock"), RegistrationServer::new(old));

    let drivers = Drivers::default();
    let node = Arc::new(Recorded::default());
    let watcher = tokio::spawn(run(tmp.path().to_path_buf(), drivers.clone(), node.clone()));
    eventually("both told", || {
        !device_told.lock().unwrap().is_empty() && !old_told.lock().unwrap().is_empty()
    })
    .await;
    let d = device_told.lock().unwrap()[0].clone();
    assert!(!d.plugin_registered);
    assert_eq!(
        d.error,
        format!(
            "no handler registered for plugin type: DevicePlugin at socket {}",
            reg_dir.join("device.sock").display()
        )
    );
    let o = old_told.lock().unwrap()[0].clone();
    assert!(!o.plugin_registered);
    assert!(
        o.error
            .contains("none of the CSI versions reported by this driver are supported"),
        "{}",
        o.error
    );
    assert!(drivers.names().is_empty());
    assert!(node.0.lock().unwrap().is_empty());
    watcher.abort();
}
