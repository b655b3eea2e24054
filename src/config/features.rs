//! Feature gates (`featureGates` in the file, `--feature-gates` on the command line).
//!
//! Only the gates the agent acts on have a meaning here, each with upstream's 1.34 default
//! (pkg/features/kube_features.go); every other gate a user sets is kept, so /configz shows
//! it, and named in the start-up warning about what is accepted but not acted on. Upstream
//! refuses gate names it does not know; the agent cannot tell a real gate it does not
//! implement from a typo without upstream's whole list, so it warns instead.

use std::collections::BTreeMap;

/// A gate the agent acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `/logs/?query=`: node log query (beta, off by default in 1.34).
    NodeLogQuery,
    /// PSI in `/stats/summary` and `container_pressure_*` in `/metrics/cadvisor` (beta, on
    /// by default in 1.34).
    KubeletPsi,
}

impl Gate {
    const ALL: [Gate; 2] = [Gate::NodeLogQuery, Gate::KubeletPsi];

    pub fn name(self) -> &'static str {
        match self {
            Gate::NodeLogQuery => "NodeLogQuery",
            Gate::KubeletPsi => "KubeletPSI",
        }
    }

    /// Upstream's default in 1.34.
    fn default_enabled(self) -> bool {
        match self {
            Gate::NodeLogQuery => false,
            Gate::KubeletPsi => true,
        }
    }
}

/// The gates set explicitly, file first and the flag over it (name by name, as upstream
/// merges `--feature-gates` into the file's map).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    explicit: BTreeMap<String, bool>,
}

impl FeatureGates {
    pub fn set(&mut self, name: &str, enabled: bool) {
        self.explicit.insert(name.to_string(), enabled);
    }

    pub fn enabled(&self, gate: Gate) -> bool {
        self.explicit
            .get(gate.name())
            .copied()
            .unwrap_or_else(|| gate.default_enabled())
    }

    /// What was set, for /configz.
    pub fn explicit(&self) -> &BTreeMap<String, bool> {
        &self.explicit
    }

    /// Gates set that the agent does not act on, sorted.
    pub fn not_acted_on(&self) -> Vec<String> {
        self.explicit
            .keys()
            .filter(|k| !Gate::ALL.iter().any(|g| g.name() == k.as_str()))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_1_34_ones_and_explicit_values_win() {
        let mut gates = FeatureGates::default();
        assert!(!gates.enabled(Gate::NodeLogQuery));
        assert!(gates.enabled(Gate::KubeletPsi));
        gates.set("NodeLogQuery", true);
        gates.set("KubeletPSI", false);
        gates.set("SomeOtherGate", true);
        assert!(gates.enabled(Gate::NodeLogQuery));
        assert!(!gates.enabled(Gate::KubeletPsi));
        assert_eq!(gates.not_acted_on(), vec!["SomeOtherGate"]);
    }
}
