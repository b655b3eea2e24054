//! Capacity and allocatable (upstream's MachineInfo setter and the container manager's
//! GetNodeAllocatableReservation): allocatable = capacity − kubeReserved − systemReserved −
//! the hard eviction thresholds (memory.available for memory, nodefs.available for
//! ephemeral-storage), never below zero; huge pages are taken from allocatable memory.
//! Amounts are whole units except cpu, kept in millicores.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::machine::Machine;
use crate::config::node::EvictionThresholds;
use crate::vocabulary::quantity::{binary_size, Quantity};

/// One resource list in integer units: cpu in millicores, the rest in whole units.
pub(crate) type Amounts = BTreeMap<String, i64>;

/// The node's capacity from the machine and maxPods.
pub(crate) fn capacity(machine: &Machine, max_pods: u32) -> Amounts {
    let mut c = Amounts::new();
    c.insert("cpu".into(), machine.cpu_cores * 1000);
    c.insert("memory".into(), machine.memory_bytes);
    c.insert("pods".into(), i64::from(max_pods));
    if let Some(bytes) = machine.ephemeral_storage_bytes {
        c.insert("ephemeral-storage".into(), bytes);
    }
    for (name, bytes) in &machine.hugepages {
        c.insert(name.clone(), *bytes);
    }
    c
}

fn amount(name: &str, q: &Quantity) -> i64 {
    if name == "cpu" {
        q.milli_value()
    } else {
        q.value()
    }
}

/// What is held back from each capacity entry: both reservations plus the hard eviction
/// thresholds that guard memory and the node filesystem.
pub(crate) fn reservation(
    capacity: &Amounts,
    kube_reserved: &BTreeMap<String, Quantity>,
    system_reserved: &BTreeMap<String, Quantity>,
    eviction_hard: &EvictionThresholds,
) -> Amounts {
    let mut eviction = Amounts::new();
    for (signal, resource) in [
        ("memory.available", "memory"),
        ("nodefs.available", "ephemeral-storage"),
    ] {
        if let (Some(threshold), Some(cap)) = (eviction_hard.get(signal), capacity.get(resource)) {
            eviction.insert(resource.to_string(), threshold.amount(*cap));
        }
    }
    capacity
        .keys()
        .filter_map(|name| {
            let total = [kube_reserved.get(name), system_reserved.get(name)]
                .into_iter()
                .flatten()
                .map(|q| amount(name, q))
                .chain(eviction.get(name).copied())
                .fold(0i64, i64::saturating_add);
            (total != 0).then(|| (name.clone(), total))
        })
        .collect()
}

/// Capacity minus the reservation, never below zero; then huge pages out of memory.
pub(crate) fn allocatable(capacity: &Amounts, reservation: &Amounts) -> Amounts {
    let mut out: Amounts = capacity
        .iter()
        .map(|(name, cap)| {
            let left = cap.saturating_sub(reservation.get(name).copied().unwrap_or(0));
            (name.clone(), left.max(0))
        })
        .collect();
    let hugepages: i64 = capacity
        .iter()
        .filter(|(name, _)| name.starts_with("hugepages-"))
        .map(|(_, bytes)| *bytes)
        .sum();
    if let Some(memory) = out.get_mut("memory") {
        *memory = (*memory - hugepages).max(0);
    }
    out
}

/// What node allocatable enforcement puts on the pods' cgroup (upstream's
/// getNodeAllocatableAbsolute): capacity minus kubeReserved and systemReserved only, never
/// below zero. The hard eviction thresholds stay out of it on purpose: pods may use that
/// memory until the eviction manager acts, rather than meet the kernel's OOM killer first.
pub(crate) fn enforced_allocatable(
    capacity: &Amounts,
    kube_reserved: &BTreeMap<String, Quantity>,
    system_reserved: &BTreeMap<String, Quantity>,
) -> Amounts {
    let reserved = reservation(
        capacity,
        kube_reserved,
        system_reserved,
        &EvictionThresholds::new(),
    );
    capacity
        .iter()
        .map(|(name, cap)| {
            let left = cap.saturating_sub(reserved.get(name).copied().unwrap_or(0));
            (name.clone(), left.max(0))
        })
        .collect()
}

/// The API form of an amount: cpu as cores or millicores, memory-like resources in
/// BinarySI, counts as plain numbers (the forms upstream's serialisation produces).
pub(crate) fn to_api(amounts: &Amounts) -> BTreeMap<String, ApiQuantity> {
    amounts
        .iter()
        .map(|(name, v)| {
            let text = match name.as_str() {
                "cpu" if v % 1000 == 0 => (v / 1000).to_string(),
                "cpu" => format!("{v}m"),
                "pods" => v.to_string(),
                _ => binary_size(*v),
            };
            (name.clone(), ApiQuantity(text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::node::{default_eviction_hard, ThresholdValue};

    fn machine() -> Machine {
        Machine {
            cpu_cores: 4,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: Some(100 << 30),
            hugepages: vec![("hugepages-2Mi".into(), 512 << 20)],
        }
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap()
    }

    #[test]
    fn capacity_lists_every_resource() {
        let c = capacity(&machine(), 110);
        assert_eq!(c["cpu"], 4000);
        assert_eq!(c["memory"], 8 << 30);
        assert_eq!(c["pods"], 110);
        assert_eq!(c["ephemeral-storage"], 100 << 30);
        assert_eq!(c["hugepages-2Mi"], 512 << 20);
        let api = to_api(&c);
        assert_eq!(api["cpu"].0, "4");
        assert_eq!(api["memory"].0, "8Gi");
        assert_eq!(api["pods"].0, "110");
        assert_eq!(api["hugepages-2Mi"].0, "512Mi");
    }

    #[test]
    fn allocatable_takes_reservations_and_hard_eviction_away() {
        let cap = capacity(&machine(), 110);
        let kube = BTreeMap::from([("cpu".to_string(), q("100m")), ("memory".into(), q("1Gi"))]);
        let system = BTreeMap::from([
            ("cpu".to_string(), q("0.5")),
            ("ephemeral-storage".into(), q("10Gi")),
            ("pid".into(), q("1000")),
        ]);
        let reserved = reservation(&cap, &kube, &system, &default_eviction_hard());
        assert_eq!(reserved["cpu"], 600);
        assert_eq!(reserved["memory"], (1 << 30) + (100 << 20));
        // 10Gi reserved + 10% of 100Gi, with upstream's float32 10%.
        let ten_percent = ((100u64 << 30) as f64 * f64::from(0.1f32)) as i64;
        assert_eq!(reserved["ephemeral-storage"], (10 << 30) + ten_percent);
        assert!(!reserved.contains_key("pods") && !reserved.contains_key("pid"));

        let alloc = allocatable(&cap, &reserved);
        assert_eq!(alloc["cpu"], 3400);
        assert_eq!(
            alloc["memory"],
            (8 << 30) - (1 << 30) - (100 << 20) - (512 << 20),
            "huge pages come out of memory"
        );
        assert_eq!(alloc["ephemeral-storage"], (90 << 30) - ten_percent);
        assert_eq!(alloc["pods"], 110);
        assert_eq!(alloc["hugepages-2Mi"], 512 << 20);
        assert_eq!(to_api(&alloc)["cpu"].0, "3400m");
    }

    #[test]
    fn enforced_allocatable_leaves_eviction_thresholds_and_huge_pages_in() {
        let mut cap = capacity(&machine(), 110);
        cap.insert("pid".into(), 4_194_304);
        let kube = BTreeMap::from([("cpu".to_string(), q("100m")), ("memory".into(), q("1Gi"))]);
        let system = BTreeMap::from([
            ("memory".to_string(), q("512Mi")),
            ("pid".into(), q("1000")),
        ]);
        let enforced = enforced_allocatable(&cap, &kube, &system);
        assert_eq!(enforced["cpu"], 3900);
        assert_eq!(enforced["memory"], (8 << 30) - (1 << 30) - (512 << 20));
        assert_eq!(enforced["pid"], 4_194_304 - 1000);
        let huge = BTreeMap::from([("memory".to_string(), q("9Gi"))]);
        assert_eq!(
            enforced_allocatable(&cap, &huge, &BTreeMap::new())["memory"],
            0
        );
    }

    #[test]
    fn allocatable_never_goes_below_zero() {
        let cap = capacity(&machine(), 110);
        let kube = BTreeMap::from([("cpu".to_string(), q("8")), ("memory".into(), q("7.9Gi"))]);
        let eviction = BTreeMap::from([(
            "memory.available".to_string(),
            ThresholdValue::Quantity(q("1Gi")),
        )]);
        let reserved = reservation(&cap, &kube, &BTreeMap::new(), &eviction);
        let alloc = allocatable(&cap, &reserved);
        assert_eq!(alloc["cpu"], 0);
        assert_eq!(alloc["memory"], 0);
        assert_eq!(
            alloc["ephemeral-storage"],
            100 << 30,
            "no nodefs threshold given"
        );
    }
}
