//! The values node allocatable enforcement writes: on kubepods, the node's capacity minus
//! kubeReserved and systemReserved (`node::resources::enforced_allocatable`) as cpu shares,
//! a memory limit and a pids limit; with `pods` not enforced, the whole capacity (upstream
//! still raises kubepods' cpu shares then, as the default 1024 could starve pods). On the
//! reserved cgroups (`kube-reserved`, `system-reserved`), the reservation itself; the
//! `-compressible` forms write only the cpu shares.

use std::collections::BTreeMap;

use crate::cgroups::{milli_cpu_to_shares, ResourceConfig};
use crate::node::resources::{enforced_allocatable, Amounts};
use crate::vocabulary::quantity::Quantity;

/// Upstream's getCgroupConfig over an amounts list (cpu in millicores).
pub(crate) fn config_for(amounts: &Amounts, compressible_only: bool) -> ResourceConfig {
    let mut config = ResourceConfig {
        cpu_shares: amounts.get("cpu").map(|m| milli_cpu_to_shares(*m)),
        ..ResourceConfig::default()
    };
    if !compressible_only {
        config.memory = amounts.get("memory").copied();
        config.pids = amounts.get("pid").copied();
    }
    config
}

/// kubepods' settings from the node's capacity (cpu millicores, memory bytes, pid count).
pub(crate) fn kubepods_config(
    capacity: &Amounts,
    kube_reserved: &BTreeMap<String, Quantity>,
    system_reserved: &BTreeMap<String, Quantity>,
    enforce_pods: bool,
) -> ResourceConfig {
    let only_cgroup_resources = |a: Amounts| -> Amounts {
        a.into_iter()
            .filter(|(k, _)| matches!(k.as_str(), "cpu" | "memory" | "pid"))
            .collect()
    };
    if enforce_pods {
        config_for(
            &only_cgroup_resources(enforced_allocatable(
                capacity,
                kube_reserved,
                system_reserved,
            )),
            false,
        )
    } else {
        config_for(&only_cgroup_resources(capacity.clone()), false)
    }
}

/// A reservation (kubeReserved or systemReserved) as amounts.
pub(crate) fn reserved_amounts(reserved: &BTreeMap<String, Quantity>) -> Amounts {
    reserved
        .iter()
        .map(|(name, q)| {
            let v = if name == "cpu" {
                q.milli_value()
            } else {
                q.value()
            };
            (name.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    fn capacity() -> Amounts {
        BTreeMap::from([
            ("cpu".to_string(), 2000),
            ("memory".to_string(), 4 << 30),
            ("pid".to_string(), 32_768),
            ("pods".to_string(), 110),
            ("ephemeral-storage".to_string(), 100 << 30),
        ])
    }

    #[test]
    fn kubepods_gets_capacity_minus_reservations() {
        let kube = BTreeMap::from([
            ("cpu".to_string(), q("200m")),
            ("memory".into(), q("256Mi")),
        ]);
        let system = BTreeMap::from([("memory".to_string(), q("256Mi")), ("pid".into(), q("768"))]);
        let c = kubepods_config(&capacity(), &kube, &system, true);
        assert_eq!(c.cpu_shares, Some(milli_cpu_to_shares(1800)));
        assert_eq!(c.memory, Some((4 << 30) - (512 << 20)));
        assert_eq!(c.pids, Some(32_000));
        assert_eq!((c.cpu_quota, c.cpu_period), (None, None), "never a quota");
    }

    #[test]
    fn without_pods_enforcement_kubepods_gets_the_capacity() {
        let kube = BTreeMap::from([("memory".to_string(), q("1Gi"))]);
        let c = kubepods_config(&capacity(), &kube, &BTreeMap::new(), false);
        assert_eq!(c.cpu_shares, Some(2048));
        assert_eq!(c.memory, Some(4 << 30));
        assert_eq!(c.pids, Some(32_768));
    }

    #[test]
    fn reserved_cgroups_get_the_reservation() {
        let kube = BTreeMap::from([("cpu".to_string(), q("500m")), ("memory".into(), q("1Gi"))]);
        let amounts = reserved_amounts(&kube);
        let full = config_for(&amounts, false);
        assert_eq!(full.cpu_shares, Some(512));
        assert_eq!(full.memory, Some(1 << 30));
        let compressible = config_for(&amounts, true);
        assert_eq!(compressible.cpu_shares, Some(512));
        assert_eq!(compressible.memory, None);
    }
}
