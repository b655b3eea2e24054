//! Thresholds and the per-pass decision of upstream's eviction manager: which thresholds the
//! observations cross, which have been crossed for their grace period, which stay active
//! until their minimum reclaim is free, and which pressure conditions the node reports
//! (they outlast their thresholds by evictionPressureTransitionPeriod).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::signals::{Condition, Observations, Signal};
use crate::config::node::ThresholdValue;
use crate::config::Config;

/// One configured threshold. Hard thresholds have no grace period (upstream tells them
/// apart by that alone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    pub grace_period: Duration,
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    pub(crate) fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    /// The threshold in the signal's unit for a resource of `capacity` units, with the
    /// minimum reclaim added when asked.
    pub(crate) fn quantity(&self, capacity: i64, with_min_reclaim: bool) -> i64 {
        let q = self.value.amount(capacity);
        match self.min_reclaim {
            Some(m) if with_min_reclaim => q.saturating_add(m.amount(capacity)),
            _ => q,
        }
    }
}

/// The thresholds of a configuration, in upstream's order: hard, soft, then the
/// allocatable copies of the hard memory.available thresholds (only when node allocatable
/// is enforced on the pods). Signals were validated when the configuration was read.
pub(crate) fn from_config(cfg: &Config) -> Vec<Threshold> {
    let min_reclaim = |signal: &str| cfg.eviction_minimum_reclaim.get(signal).copied();
    let mut out = Vec::new();
    for (name, value) in &cfg.eviction_hard {
        if let Some(signal) = Signal::parse(name) {
            out.push(Threshold {
                signal,
                value: *value,
                grace_period: Duration::ZERO,
                min_reclaim: min_reclaim(name),
            });
        }
    }
    for (name, value) in &cfg.eviction_soft {
        let (Some(signal), Some(grace)) = (
            Signal::parse(name),
            cfg.eviction_soft_grace_period.get(name),
        ) else {
            continue;
        };
        out.push(Threshold {
            signal,
            value: *value,
            grace_period: *grace,
            min_reclaim: min_reclaim(name),
        });
    }
    if cfg
        .enforce_node_allocatable
        .iter()
        .any(|k| k == crate::config::ENFORCE_PODS)
    {
        let copies: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        out.extend(copies);
    }
    out
}

/// The thresholds (by index) the observations cross: what is available is less than the
/// threshold (plus its minimum reclaim when `with_min_reclaim`). A threshold whose signal
/// was not observed is not crossed.
pub(crate) fn crossed(
    thresholds: &[Threshold],
    indices: impl IntoIterator<Item = usize>,
    observations: &Observations,
    with_min_reclaim: bool,
) -> BTreeSet<usize> {
    indices
        .into_iter()
        .filter(|i| {
            let t = &thresholds[*i];
            observations
                .get(&t.signal)
                .is_some_and(|o| t.quantity(o.capacity, with_min_reclaim) > o.available)
        })
        .collect()
}

/// What one pass decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Decision {
    /// The pressure conditions the node reports now.
    pub conditions: BTreeSet<Condition>,
    /// The thresholds (indices) crossed for their grace period: what eviction acts on.
    pub act_on: Vec<usize>,
}

/// The manager's memory between passes (upstream's thresholdsFirstObservedAt,
/// nodeConditionsLastObservedAt and thresholdsMet).
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    first_crossed: BTreeMap<usize, Instant>,
    condition_last_seen: BTreeMap<Condition, Instant>,
    /// The thresholds acted on last pass: they stay active until their minimum reclaim is
    /// free.
    acting: BTreeSet<usize>,
}

impl Tracker {
    /// One pass at `now` over `observations`, in upstream's order.
    pub(crate) fn step(
        &mut self,
        thresholds: &[Threshold],
        observations: &Observations,
        transition: Duration,
        now: Instant,
    ) -> Decision {
        let mut crossed_now = crossed(thresholds, 0..thresholds.len(), observations, false);
        // Once acted on, a threshold stays until what is available reaches it plus its
        // minimum reclaim.
        crossed_now.extend(crossed(
            thresholds,
            self.acting.iter().copied(),
            observations,
            true,
        ));
        self.first_crossed.retain(|i, _| crossed_now.contains(i));
        for i in &crossed_now {
            self.first_crossed.entry(*i).or_insert(now);
        }
        // Conditions from every crossed threshold, before any grace period: a soft
        // threshold sets its condition at once, only eviction waits.
        for i in &crossed_now {
            self.condition_last_seen
                .insert(thresholds[*i].signal.condition(), now);
        }
        let conditions = self
            .condition_last_seen
            .iter()
            .filter(|(_, seen)| now.duration_since(**seen) < transition)
            .map(|(c, _)| *c)
            .collect();
        let act_on: Vec<usize> = self
            .first_crossed
            .iter()
            .filter(|(i, first)| now.duration_since(**first) >= thresholds[**i].grace_period)
            .map(|(i, _)| *i)
            .collect();
        self.acting = act_on.iter().copied().collect();
        Decision { conditions, act_on }
    }
}

/// The threshold to act on first: memory signals before the others (upstream's
/// byEvictionPriority), else the first in configuration order.
pub(crate) fn first_to_act(thresholds: &[Threshold], act_on: &[usize]) -> Option<usize> {
    act_on
        .iter()
        .copied()
        .find(|i| thresholds[*i].signal.is_memory())
        .or_else(|| act_on.first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::signals::Observation;
    use crate::vocabulary::quantity::Quantity;

    fn q(text: &str) -> ThresholdValue {
        ThresholdValue::Quantity(Quantity::parse(text).unwrap())
    }

    fn memory(available: i64) -> Observations {
        Observations::from([(
            Signal::MemoryAvailable,
            Observation {
                available,
                capacity: 1000,
            },
        )])
    }

    fn hard(value: &str) -> Threshold {
        Threshold {
            signal: Signal::MemoryAvailable,
            value: q(value),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        }
    }

    #[test]
    fn a_threshold_is_crossed_only_below_it_and_percentages_take_the_capacity() {
        let t = [hard("100"), {
            let mut p = hard("1");
            p.value = ThresholdValue::Percentage(0.2);
            p
        }];
        assert_eq!(crossed(&t, 0..2, &memory(100), false), BTreeSet::from([1]));
        assert_eq!(
            crossed(&t, 0..2, &memory(99), false),
            BTreeSet::from([0, 1])
        );
        assert_eq!(crossed(&t, 0..2, &memory(200), false), BTreeSet::new());
        assert_eq!(
            crossed(&t, 0..2, &Observations::new(), false),
            BTreeSet::new(),
            "an unobserved signal is never crossed"
        );
    }

    #[test]
    fn a_hard_threshold_acts_at_once_and_its_condition_outlasts_it_by_the_transition_period() {
        let t = [hard("100")];
        let mut tr = Tracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(30);
        let d = tr.step(&t, &memory(50), period, t0);
        assert_eq!(d.act_on, vec![0]);
        assert_eq!(d.conditions, BTreeSet::from([Condition::Memory]));
        let d = tr.step(&t, &memory(500), period, t0 + Duration::from_secs(10));
        assert!(d.act_on.is_empty());
        assert_eq!(d.conditions, BTreeSet::from([Condition::Memory]));
        let d = tr.step(&t, &memory(500), period, t0 + Duration::from_secs(30));
        assert!(d.conditions.is_empty(), "30 s after it was last crossed");
    }

    #[test]
    fn a_soft_threshold_sets_its_condition_at_once_and_acts_after_its_grace_period() {
        let mut soft = hard("100");
        soft.grace_period = Duration::from_secs(20);
        let t = [soft];
        let mut tr = Tracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(300);
        let d = tr.step(&t, &memory(50), period, t0);
        assert!(d.act_on.is_empty());
        assert_eq!(d.conditions, BTreeSet::from([Condition::Memory]));
        assert!(tr
            .step(&t, &memory(50), period, t0 + Duration::from_secs(10))
            .act_on
            .is_empty());
        // Not crossed for one pass: the grace period starts again.
        tr.step(&t, &memory(500), period, t0 + Duration::from_secs(15));
        assert!(tr
            .step(&t, &memory(50), period, t0 + Duration::from_secs(25))
            .act_on
            .is_empty());
        assert_eq!(
            tr.step(&t, &memory(50), period, t0 + Duration::from_secs(45))
                .act_on,
            vec![0]
        );
    }

    #[test]
    fn a_threshold_acted_on_stays_until_its_minimum_reclaim_is_free() {
        let mut t = hard("100");
        t.min_reclaim = Some(q("50"));
        let t = [t];
        let mut tr = Tracker::default();
        let t0 = Instant::now();
        let period = Duration::from_secs(300);
        assert_eq!(tr.step(&t, &memory(90), period, t0).act_on, vec![0]);
        assert_eq!(
            tr.step(&t, &memory(120), period, t0).act_on,
            vec![0],
            "120 is above the threshold but below threshold + minimum reclaim"
        );
        assert!(tr.step(&t, &memory(150), period, t0).act_on.is_empty());
        assert!(
            tr.step(&t, &memory(120), period, t0).act_on.is_empty(),
            "not acted on any more: only the threshold itself counts again"
        );
    }

    #[test]
    fn a_zero_transition_period_reports_no_condition() {
        let t = [hard("100")];
        let d = Tracker::default().step(&t, &memory(50), Duration::ZERO, Instant::now());
        assert!(d.conditions.is_empty());
        assert_eq!(d.act_on, vec![0]);
    }

    #[test]
    fn thresholds_come_from_the_configuration_with_allocatable_copies() {
        let mut cfg = Config::defaults(true);
        cfg.eviction_hard = crate::config::node::parse_eviction_thresholds(
            &[("memory.available".to_string(), "200Mi".to_string())].into(),
        )
        .unwrap();
        cfg.eviction_soft = crate::config::node::parse_eviction_thresholds(
            &[("nodefs.available".to_string(), "20%".to_string())].into(),
        )
        .unwrap();
        cfg.eviction_soft_grace_period =
            [("nodefs.available".to_string(), Duration::from_secs(90))].into();
        cfg.eviction_minimum_reclaim = crate::config::node::parse_eviction_thresholds(
            &[("memory.available".to_string(), "50Mi".to_string())].into(),
        )
        .unwrap();
        let t = from_config(&cfg);
        let signals: Vec<Signal> = t.iter().map(|t| t.signal).collect();
        assert_eq!(
            signals,
            vec![
                Signal::MemoryAvailable,
                Signal::NodeFsAvailable,
                Signal::AllocatableMemoryAvailable
            ]
        );
        assert_eq!(t[1].grace_period, Duration::from_secs(90));
        assert_eq!(t[2].min_reclaim, Some(q("50Mi")));
        assert_eq!(t[2].value, q("200Mi"));
        cfg.enforce_node_allocatable = vec![];
        assert_eq!(
            from_config(&cfg).len(),
            2,
            "no copy without pods enforcement"
        );
    }

    #[test]
    fn memory_is_acted_on_first() {
        let mut disk = hard("1");
        disk.signal = Signal::NodeFsAvailable;
        let t = [disk, hard("1")];
        assert_eq!(first_to_act(&t, &[0, 1]), Some(1));
        assert_eq!(first_to_act(&t, &[0]), Some(0));
        assert_eq!(first_to_act(&t, &[]), None);
    }
}
