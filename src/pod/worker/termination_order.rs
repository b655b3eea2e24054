//! The order in which a pod with sidecars stops, as upstream's terminationOrdering: every
//! container's stop begins at once (its Killing event and preStop hook), but a sidecar is
//! sent its stop signal only once every main container has ended and every sidecar defined
//! after it has ended, so sidecars stop in the reverse of their order in the spec. A
//! sidecar waits at most for what is left of the grace period; its stop then gets the
//! usual minimum window. Containers that are not running are not waited for.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;
use tokio::sync::watch;

use crate::pod::sidecar::{has_sidecars, is_sidecar};

/// Who waits for whom while a pod stops; `None` for a pod without sidecars (upstream's
/// containers then stop all at once, as before).
pub(super) struct TerminationOrder {
    /// Per container name: set once it has ended.
    ended: HashMap<String, watch::Sender<bool>>,
    /// Per sidecar name: the containers it waits for.
    waits_for: HashMap<String, Vec<String>>,
}

impl TerminationOrder {
    /// The order for `spec`, given the names of its containers that run now.
    pub(super) fn new<'a>(
        spec: &PodSpec,
        running: impl IntoIterator<Item = &'a str>,
    ) -> Option<TerminationOrder> {
        if !has_sidecars(spec) {
            return None;
        }
        let running: Vec<&str> = running.into_iter().collect();
        let mut ended = HashMap::new();
        let mut track = |name: &str| {
            // What does not run has ended already: nobody waits for it.
            let (tx, _) = watch::channel(!running.contains(&name));
            ended.insert(name.to_string(), tx);
        };
        let mains: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
        for name in &mains {
            track(name);
        }
        let mut waits_for = HashMap::new();
        let mut later_sidecar: Option<String> = None;
        for c in spec.init_containers.iter().flatten().rev() {
            track(&c.name);
            if is_sidecar(c) {
                let mut before = mains.clone();
                before.extend(later_sidecar.take());
                waits_for.insert(c.name.clone(), before);
                later_sidecar = Some(c.name.clone());
            }
        }
        Some(TerminationOrder { ended, waits_for })
    }

    /// Waits until it is `name`'s turn to be sent its stop signal, at most `limit`.
    pub(super) async fn wait_turn(&self, name: &str, limit: Duration) {
        let waits = self.waits_for.get(name).into_iter().flatten();
        let receivers: Vec<watch::Receiver<bool>> = waits
            .filter_map(|n| self.ended.get(n))
            .map(|tx| tx.subscribe())
            .collect();
        let all = async {
            for mut rx in receivers {
                // The senders live as long as `self`: an error cannot happen while we wait.
                let _ = rx.wait_for(|ended| *ended).await;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
    }

    /// `name` has ended: those waiting for it may go on.
    pub(super) fn ended(&self, name: &str) {
        if let Some(tx) = self.ended.get(name) {
            tx.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn spec() -> PodSpec {
        serde_json::from_value(serde_json::json!({
            "initContainers": [
                {"name": "side-a", "restartPolicy": "Always"},
                {"name": "setup"},
                {"name": "side-b", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "app"}, {"name": "web"}],
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_without_sidecars_has_no_order() {
        let s: PodSpec = serde_json::from_value(serde_json::json!({
            "initContainers": [{"name": "setup"}], "containers": [{"name": "app"}]}))
        .unwrap();
        assert!(TerminationOrder::new(&s, ["app"]).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_the_main_containers_then_for_later_sidecars() {
        let order =
            Arc::new(TerminationOrder::new(&spec(), ["app", "web", "side-a", "side-b"]).unwrap());
        let turn = |name: &'static str| {
            let order = order.clone();
            tokio::spawn(async move { order.wait_turn(name, Duration::from_secs(30)).await })
        };
        let (a, b) = (turn("side-a"), turn("side-b"));
        // Main containers never wait.
        tokio::time::timeout(
            Duration::from_millis(1),
            order.wait_turn("app", Duration::from_secs(30)),
        )
        .await
        .expect("main containers go at once");
        tokio::time::sleep(Duration::from_secs(1)).await;
        order.ended("app");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!b.is_finished(), "side-b waits for web too");
        order.ended("web");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(b.is_finished());
        assert!(
            !a.is_finished(),
            "side-a waits for side-b, defined after it"
        );
        order.ended("side-b");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(a.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn what_does_not_run_is_not_waited_for_and_the_wait_is_bounded() {
        // web and side-b do not run: side-a waits for app only.
        let order = TerminationOrder::new(&spec(), ["app", "side-a"]).unwrap();
        let begun = tokio::time::Instant::now();
        order.wait_turn("side-a", Duration::from_secs(7)).await;
        assert_eq!(
            begun.elapsed(),
            Duration::from_secs(7),
            "app never ended: the limit"
        );
        order.ended("app");
        let begun = tokio::time::Instant::now();
        order.wait_turn("side-a", Duration::from_secs(7)).await;
        assert_eq!(begun.elapsed(), Duration::ZERO);
    }
}
