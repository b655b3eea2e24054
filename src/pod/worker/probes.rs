//! The probe workers of a pod's running containers (app containers and sidecars): started
//! when a container with probes runs, dropped when it is gone, and a failed liveness (or
//! startup) probe kills the container so the restart policy applies as for any exit (a
//! sidecar is always restarted).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{debug, warn};

use super::{events, grace_period, Sandbox, Worker};
use crate::pod::sidecar::is_sidecar;
use crate::pod::status;
use crate::prober::{ContainerProbes, ProbeEvents, ProbeOptions, ProbeTarget};
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::{self, Kind};
use crate::runtime::RuntimeError;

impl Worker {
    /// Starts probe workers for running containers that have probes, drops those of
    /// containers that are gone, and kills a container whose liveness (or startup) probe
    /// failed.
    pub(super) async fn manage_probes(
        &mut self,
        pod: &Pod,
        sandbox: &Sandbox,
    ) -> Result<(), RuntimeError> {
        let running: Vec<ContainerRecord> = self
            .view
            .iter()
            .flatten()
            .filter(|r| matches!(r.kind, Kind::App | Kind::Init) && r.is_running())
            .cloned()
            .collect();
        self.probes
            .retain(|id, _| running.iter().any(|r| &r.id == id));
        // Sidecars are probed as app containers are (upstream's prober runs their probes;
        // other init containers have none, the API refuses them).
        let specs: Vec<(Kind, &Container)> = pod
            .spec
            .iter()
            .flat_map(|s| {
                let sidecars = s.init_containers.iter().flatten().filter(|c| is_sidecar(c));
                sidecars
                    .map(|c| (Kind::Init, c))
                    .chain(s.containers.iter().map(|c| (Kind::App, c)))
            })
            .collect();
        for (kind, c) in specs {
            if c.liveness_probe.is_none()
                && c.readiness_probe.is_none()
                && c.startup_probe.is_none()
            {
                continue;
            }
            let Some(r) = running.iter().find(|r| r.kind == kind && r.name == c.name) else {
                continue;
            };
            if !self.probes.contains_key(&r.id) {
                let running_for = match &r.state {
                    State::Running {
                        started_at: Some(t),
                        ..
                    } => (Utc::now() - *t).to_std().unwrap_or_default(),
                    _ => Duration::ZERO,
                };
                let probes = ContainerProbes::start_with(
                    self.probe_target(c, &r.id, &sandbox.ips),
                    c,
                    self.shared.rt.clone(),
                    self.wake.clone(),
                    ProbeOptions {
                        agent_uptime: Some(self.shared.started.elapsed()),
                        running_for,
                        events: Some(ProbeEvents {
                            recorder: self.shared.recorder.clone(),
                            pod: Arc::new(pod.clone()),
                            field_path: events::field_path(kind, &c.name).unwrap_or_default(),
                        }),
                    },
                );
                self.probes.insert(r.id.clone(), probes);
            }
            let failure = self
                .probes
                .get(&r.id)
                .and_then(|p| p.status().liveness_failure);
            if let Some(f) = failure {
                let grace = f
                    .grace_period_override
                    .map(|g| super::spec_seconds(g.max(1)))
                    .unwrap_or_else(|| grace_period(pod));
                let msg = format!("{}; container {} will be restarted", f.message, c.name);
                // Its Unhealthy events came from the prober, one per failed attempt.
                warn!(pod = %self.pod_ref.display(), container = %c.name, reason = events::UNHEALTHY, message = %f.message, "probe failed; killing container");
                // upstream's computePodActions (computeInitContainerActions for a sidecar)
                // words for the kill.
                let probe = f.kind.to_ascii_lowercase();
                let killing = match kind {
                    Kind::Init => format!("Init container {} failed {probe} probe", c.name),
                    _ => format!(
                        "Container {} failed {probe} probe, will be restarted",
                        c.name
                    ),
                };
                let set = HashMap::from([(labels::MESSAGE.to_string(), msg)]);
                self.shared.rt.set_labels(&r.id, set.clone()).await?;
                self.label_record(&r.id, set);
                self.probes.remove(&r.id);
                let (id, status) = self
                    .stop_one(Some(pod), r, grace, &sandbox.ips, Some(killing), None)
                    .await?;
                self.saw_exit(&id, status);
                debug!(pod = %self.pod_ref.display(), container = %c.name, container_id = %id, "container stopped after a failed probe");
            }
        }
        Ok(())
    }

    pub(super) fn probe_target(&self, c: &Container, id: &str, ips: &[String]) -> ProbeTarget {
        ProbeTarget {
            pod: format!("{}/{}", self.pod_ref.namespace, self.pod_ref.name),
            container: c.name.clone(),
            container_id: id.to_string(),
            pod_uid: self.pod_ref.uid.clone(),
            pod_ip: ips.first().and_then(|i| i.parse().ok()),
            ports: c.ports.clone().unwrap_or_default(),
        }
    }

    /// started/ready per container name, from the probe workers of the running containers.
    pub(super) fn probe_results(
        &self,
        records: &[ContainerRecord],
    ) -> HashMap<String, status::Probed> {
        records
            .iter()
            .filter_map(|r| {
                let st = self.probes.get(&r.id)?.status();
                Some((
                    r.name.clone(),
                    status::Probed {
                        started: st.started,
                        ready: st.ready,
                    },
                ))
            })
            .collect()
    }
}
