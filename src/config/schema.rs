//! The shape of upstream's KubeletConfiguration v1beta1 (k8s.io/kubelet config/v1beta1
//! types.go), field by field: its JSON type, upstream's default, the simple ranges upstream's
//! validation enforces, and whether the agent acts on it.
//!
//! `file.rs` reads the fields the agent implements with their own typed readers. This table is
//! for the rest: each is type-checked and range-checked as upstream would (so an invalid value
//! is refused even though nothing uses it), and named in the start-up warning when set to
//! anything but its default. It also drives the unknown-field check (upstream's lenient
//! decoding: a warning, not an error) and the defaults /configz shows.

use std::time::Duration;

use serde_json::{Map, Value};

use super::duration::parse_duration;

/// A field's JSON type and the checks upstream's decoding and validation apply to it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// Read by its declaration in settings.rs (or by file.rs); here only so the field is
    /// known.
    Implemented,
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    /// A positive multiple of `step` below `max` (userNamespaces.idsPerPod).
    IntStep {
        step: i64,
        max: i64,
    },
    Float {
        /// Exclusive lower bound.
        above: f64,
        max: f64,
    },
    /// A Go duration string; the bounds are inclusive.
    Duration {
        min: Duration,
        max: Option<Duration>,
    },
    /// component-base's flushFrequency: a duration string or a number of nanoseconds.
    DurationOrNanos,
    Str,
    /// One of these strings; "" is allowed where upstream defaults it.
    Choice(&'static [&'static str]),
    /// A resource.Quantity string.
    Quantity,
    /// A Linux CPU list, `0-3,8` (reservedSystemCPUs).
    CpuSet,
    StringList,
    IntList,
    StringMap,
    /// resource name -> quantity (reservedMemory[].limits).
    QuantityMap,
    Object(&'static [Field]),
    ObjectList(&'static [Field]),
}

/// Upstream's default for a field, as the v1beta1 defaulting sets it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Preset {
    /// Go's zero value (false, 0, "", empty).
    Zero,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'static str),
    Millis(u64),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Preset,
    /// A pointer upstream: an explicit zero value is kept rather than defaulted, so it
    /// counts as set.
    pub pointer: bool,
}

const fn f(name: &'static str, kind: Kind, default: Preset) -> Field {
    Field {
        name,
        kind,
        default,
        pointer: false,
    }
}

const fn p(name: &'static str, kind: Kind, default: Preset) -> Field {
    Field {
        name,
        kind,
        default,
        pointer: true,
    }
}

const fn done(name: &'static str) -> Field {
    f(name, Kind::Implemented, Preset::Zero)
}

const I32: Kind = Kind::Int {
    min: i32::MIN as i64,
    max: i32::MAX as i64,
};
const NON_NEGATIVE_I32: Kind = Kind::Int {
    min: 0,
    max: i32::MAX as i64,
};
const I64: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
};
const DURATION: Kind = Kind::Duration {
    min: Duration::ZERO,
    max: None,
};
const fn secs(n: u64) -> Preset {
    Preset::Millis(n * 1000)
}

const LOGGING_STREAM_OPTIONS: &[Field] = &[
    f("splitStream", Kind::Bool, Preset::Zero),
    f("infoBufferSize", Kind::Quantity, Preset::Zero),
];
const LOGGING_OPTIONS: &[Field] = &[
    f("json", Kind::Object(LOGGING_STREAM_OPTIONS), Preset::Zero),
    f("text", Kind::Object(LOGGING_STREAM_OPTIONS), Preset::Zero),
];
const VMODULE_ITEM: &[Field] = &[
    f("filePattern", Kind::Str, Preset::Zero),
    f(
        "verbosity",
        Kind::Int {
            min: 0,
            max: u32::MAX as i64,
        },
        Preset::Zero,
    ),
];
/// component-base's LoggingConfiguration: format and verbosity are implemented.
const LOGGING: &[Field] = &[
    done("format"),
    done("verbosity"),
    f("flushFrequency", Kind::DurationOrNanos, secs(5)),
    f("vmodule", Kind::ObjectList(VMODULE_ITEM), Preset::Zero),
    f("options", Kind::Object(LOGGING_OPTIONS), Preset::Zero),
];
const AUTHENTICATION: &[Field] = &[
    f("x509", Kind::Object(&[done("clientCAFile")]), Preset::Zero),
    f(
        "webhook",
        Kind::Object(&[done("enabled"), done("cacheTTL")]),
        Preset::Zero,
    ),
    f("anonymous", Kind::Object(&[done("enabled")]), Preset::Zero),
];
const AUTHORIZATION: &[Field] = &[
    done("mode"),
    f(
        "webhook",
        Kind::Object(&[done("cacheAuthorizedTTL"), done("cacheUnauthorizedTTL")]),
        Preset::Zero,
    ),
];
const SHUTDOWN_BY_PRIORITY: &[Field] = &[
    f("priority", I32, Preset::Zero),
    f("shutdownGracePeriodSeconds", I64, Preset::Zero),
];
const MEMORY_RESERVATION: &[Field] = &[
    f("numaNode", I32, Preset::Zero),
    f("limits", Kind::QuantityMap, Preset::Zero),
];
const TRACING: &[Field] = &[
    f("endpoint", Kind::Str, Preset::Zero),
    p(
        "samplingRatePerMillion",
        Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        Preset::Zero,
    ),
];

/// Every top-level field of v1beta1 KubeletConfiguration besides apiVersion and kind.
pub(crate) const FIELDS: &[Field] = &[
    done("enableServer"),
    done("staticPodPath"),
    done("podLogsDir"),
    done("syncFrequency"),
    done("fileCheckFrequency"),
    done("httpCheckFrequency"),
    done("staticPodURL"),
    done("staticPodURLHeader"),
    done("address"),
    done("port"),
    done("readOnlyPort"),
    done("tlsCertFile"),
    done("tlsPrivateKeyFile"),
    done("tlsCipherSuites"),
    f("tlsCurvePreferences", Kind::IntList, Preset::Zero),
    done("tlsMinVersion"),
    done("rotateCertificates"),
    done("serverTLSBootstrap"),
    f("authentication", Kind::Object(AUTHENTICATION), Preset::Zero),
    f("authorization", Kind::Object(AUTHORIZATION), Preset::Zero),
    p("registryPullQPS", NON_NEGATIVE_I32, Preset::Int(5)),
    f("registryBurst", NON_NEGATIVE_I32, Preset::Int(10)),
    f(
        "imagePullCredentialsVerificationPolicy",
        Kind::Choice(&[
            "NeverVerify",
            "NeverVerifyPreloadedImages",
            "NeverVerifyAllowlistedImages",
            "AlwaysVerify",
        ]),
        Preset::Str("NeverVerifyPreloadedImages"),
    ),
    f(
        "preloadedImagesVerificationAllowlist",
        Kind::StringList,
        Preset::Zero,
    ),
    p("eventRecordQPS", NON_NEGATIVE_I32, Preset::Int(50)),
    f("eventBurst", NON_NEGATIVE_I32, Preset::Int(100)),
    done("enableDebuggingHandlers"),
    f("enableContentionProfiling", Kind::Bool, Preset::Zero),
    done("healthzPort"),
    done("healthzBindAddress"),
    p(
        "oomScoreAdj",
        Kind::Int {
            min: -1000,
            max: 1000,
        },
        Preset::Int(-999),
    ),
    done("clusterDomain"),
    done("clusterDNS"),
    f("streamingConnectionIdleTimeout", DURATION, secs(4 * 3600)),
    done("nodeStatusUpdateFrequency"),
    done("nodeStatusReportFrequency"),
    done("nodeLeaseDurationSeconds"),
    done("imageMinimumGCAge"),
    done("imageMaximumGCAge"),
    done("imageGCHighThresholdPercent"),
    done("imageGCLowThresholdPercent"),
    done("volumeStatsAggPeriod"),
    f("kubeletCgroups", Kind::Str, Preset::Zero),
    f("systemCgroups", Kind::Str, Preset::Zero),
    done("cgroupRoot"),
    done("cgroupsPerQOS"),
    done("cgroupDriver"),
    f(
        "cpuManagerPolicy",
        Kind::Choice(&["none", "static"]),
        Preset::Str("none"),
    ),
    p("singleProcessOOMKill", Kind::Bool, Preset::Bool(false)),
    f("cpuManagerPolicyOptions", Kind::StringMap, Preset::Zero),
    f("cpuManagerReconcilePeriod", DURATION, secs(10)),
    // Newer than 1.34's types.go; accepted so a newer file still loads.
    f("draManagerReconcilePeriod", DURATION, secs(60)),
    f(
        "memoryManagerPolicy",
        Kind::Choice(&["None", "Static"]),
        Preset::Str("None"),
    ),
    f(
        "topologyManagerPolicy",
        Kind::Choice(&["none", "best-effort", "restricted", "single-numa-node"]),
        Preset::Str("none"),
    ),
    f(
        "topologyManagerScope",
        Kind::Choice(&["container", "pod"]),
        Preset::Str("container"),
    ),
    f(
        "topologyManagerPolicyOptions",
        Kind::StringMap,
        Preset::Zero,
    ),
    f("qosReserved", Kind::StringMap, Preset::Zero),
    f("runtimeRequestTimeout", DURATION, secs(120)),
    f(
        "hairpinMode",
        Kind::Choice(&["promiscuous-bridge", "hairpin-veth", "none"]),
        Preset::Str("promiscuous-bridge"),
    ),
    done("maxPods"),
    f("podCIDR", Kind::Str, Preset::Zero),
    done("podPidsLimit"),
    done("resolvConf"),
    f("runOnce", Kind::Bool, Preset::Zero),
    p("cpuCFSQuota", Kind::Bool, Preset::Bool(true)),
    p(
        "cpuCFSQuotaPeriod",
        Kind::Duration {
            min: Duration::from_millis(1),
            max: Some(Duration::from_secs(1)),
        },
        Preset::Millis(100),
    ),
    p(
        "nodeStatusMaxImages",
        Kind::Int {
            min: -1,
            max: i32::MAX as i64,
        },
        Preset::Int(50),
    ),
    f(
        "maxOpenFiles",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        Preset::Int(1_000_000),
    ),
    f(
        "contentType",
        Kind::Str,
        Preset::Str("application/vnd.kubernetes.protobuf"),
    ),
    p("kubeAPIQPS", NON_NEGATIVE_I32, Preset::Int(50)),
    f("kubeAPIBurst", NON_NEGATIVE_I32, Preset::Int(100)),
    done("serializeImagePulls"),
    done("maxParallelImagePulls"),
    done("evictionHard"),
    done("evictionSoft"),
    done("evictionSoftGracePeriod"),
    done("evictionPressureTransitionPeriod"),
    done("evictionMaxPodGracePeriod"),
    done("evictionMinimumReclaim"),
    p(
        "mergeDefaultEvictionSettings",
        Kind::Bool,
        Preset::Bool(false),
    ),
    f("podsPerCore", NON_NEGATIVE_I32, Preset::Zero),
    p(
        "enableControllerAttachDetach",
        Kind::Bool,
        Preset::Bool(true),
    ),
    f("protectKernelDefaults", Kind::Bool, Preset::Zero),
    p("makeIPTablesUtilChains", Kind::Bool, Preset::Bool(true)),
    p(
        "iptablesMasqueradeBit",
        Kind::Int { min: 0, max: 31 },
        Preset::Int(14),
    ),
    p(
        "iptablesDropBit",
        Kind::Int { min: 0, max: 31 },
        Preset::Int(15),
    ),
    done("featureGates"),
    done("failSwapOn"),
    f(
        "memorySwap",
        Kind::Object(&[done("swapBehavior")]),
        Preset::Zero,
    ),
    done("containerLogMaxSize"),
    done("containerLogMaxFiles"),
    p(
        "containerLogMaxWorkers",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        Preset::Int(1),
    ),
    p(
        "containerLogMonitorInterval",
        Kind::Duration {
            min: Duration::from_secs(3),
            max: None,
        },
        secs(10),
    ),
    f(
        "configMapAndSecretChangeDetectionStrategy",
        Kind::Choice(&["Get", "Cache", "Watch"]),
        Preset::Str("Watch"),
    ),
    done("systemReserved"),
    done("kubeReserved"),
    f("reservedSystemCPUs", Kind::CpuSet, Preset::Zero),
    f("showHiddenMetricsForVersion", Kind::Str, Preset::Zero),
    done("systemReservedCgroup"),
    done("kubeReservedCgroup"),
    done("enforceNodeAllocatable"),
    done("allowedUnsafeSysctls"),
    // Not in 1.34's types.go; accepted (as sysctl name/value pairs) so a newer file loads.
    f(
        "defaultPodSysctls",
        Kind::ObjectList(&[
            f("name", Kind::Str, Preset::Zero),
            f("value", Kind::Str, Preset::Zero),
        ]),
        Preset::Zero,
    ),
    f(
        "volumePluginDir",
        Kind::Str,
        Preset::Str("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
    ),
    f("providerID", Kind::Str, Preset::Zero),
    f("kernelMemcgNotification", Kind::Bool, Preset::Zero),
    f("logging", Kind::Object(LOGGING), Preset::Zero),
    done("enableSystemLogHandler"),
    done("enableSystemLogQuery"),
    f("shutdownGracePeriod", DURATION, Preset::Zero),
    f("shutdownGracePeriodCriticalPods", DURATION, Preset::Zero),
    f(
        "shutdownGracePeriodByPodPriority",
        Kind::ObjectList(SHUTDOWN_BY_PRIORITY),
        Preset::Zero,
    ),
    f(
        "crashLoopBackOff",
        Kind::Object(&[p(
            "maxContainerRestartPeriod",
            Kind::Duration {
                min: Duration::from_secs(1),
                max: Some(Duration::from_secs(300)),
            },
            secs(300),
        )]),
        Preset::Zero,
    ),
    f(
        "reservedMemory",
        Kind::ObjectList(MEMORY_RESERVATION),
        Preset::Zero,
    ),
    p("enableProfilingHandler", Kind::Bool, Preset::Bool(true)),
    p("enableDebugFlagsHandler", Kind::Bool, Preset::Bool(true)),
    done("seccompDefault"),
    p(
        "memoryThrottlingFactor",
        Kind::Float {
            above: 0.0,
            max: 1.0,
        },
        Preset::Float(0.9),
    ),
    f(
        "memoryReservationPolicy",
        Kind::Choice(&["None", "TieredReservation"]),
        Preset::Str("None"),
    ),
    done("registerWithTaints"),
    done("registerNode"),
    f("tracing", Kind::Object(TRACING), Preset::Zero),
    done("localStorageCapacityIsolation"),
    done("containerRuntimeEndpoint"),
    f("imageServiceEndpoint", Kind::Str, Preset::Zero),
    p("failCgroupV1", Kind::Bool, Preset::Bool(false)),
    f(
        "userNamespaces",
        Kind::Object(&[p(
            "idsPerPod",
            Kind::IntStep {
                step: 65536,
                max: 1 << 32,
            },
            Preset::Int(65536),
        )]),
        Preset::Zero,
    ),
];

/// What walking a file's fields found.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Survey {
    /// Dotted paths of fields upstream does not have (upstream's lenient decoding drops them
    /// with a warning).
    pub unknown: Vec<String>,
    /// Dotted paths of accepted-but-not-implemented fields set to a non-default value.
    pub unimplemented: Vec<String>,
    /// Their values as written, for /configz.
    pub values: Map<String, Value>,
}

/// Why a not-implemented field's value is refused: its dotted path and the reason.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldProblem {
    pub field: String,
    pub value: Value,
    pub reason: String,
}

/// Checks `obj` (a whole KubeletConfiguration) against the table.
pub(crate) fn survey(obj: &Map<String, Value>) -> Result<Survey, FieldProblem> {
    let mut out = Survey::default();
    walk(obj, FIELDS, "", &mut out)?;
    check_together(obj)?;
    // A stable order for the warning, whatever order the file had.
    out.unknown.sort();
    out.unimplemented.sort();
    Ok(out)
}

fn walk(
    obj: &Map<String, Value>,
    fields: &[Field],
    prefix: &str,
    out: &mut Survey,
) -> Result<(), FieldProblem> {
    for (key, value) in obj {
        if prefix.is_empty() && (key == "apiVersion" || key == "kind") {
            continue;
        }
        let path = format!("{prefix}{key}");
        let Some(field) = fields.iter().find(|f| f.name == key) else {
            out.unknown.push(path);
            continue;
        };
        match field.kind {
            Kind::Implemented => {}
            // A block the agent reads part of: look inside for the rest.
            Kind::Object(children) if has_implemented(children) => {
                if let Some(map) = value.as_object() {
                    walk(map, children, &format!("{path}."), out)?;
                }
            }
            _ => {
                let mut unknown = Vec::new();
                check(field, value, &path, &mut unknown)?;
                out.unknown.extend(unknown);
                if !is_default(field, value) {
                    out.unimplemented.push(path.clone());
                    if prefix.is_empty() {
                        out.values.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Upstream's validation rules that tie not-implemented fields together (none of these has
/// a flag, so the document alone decides).
fn check_together(obj: &Map<String, Value>) -> Result<(), FieldProblem> {
    let duration = |key: &str| {
        obj.get(key)
            .and_then(|v| duration_of(v).ok())
            .unwrap_or_default()
    };
    let (all, critical) = (
        duration("shutdownGracePeriod"),
        duration("shutdownGracePeriodCriticalPods"),
    );
    for (key, d) in [
        ("shutdownGracePeriod", all),
        ("shutdownGracePeriodCriticalPods", critical),
    ] {
        if !d.is_zero() && d < Duration::from_secs(1) {
            return Err(problem(
                key,
                &obj[key],
                "must be either zero or otherwise >= 1s",
            ));
        }
    }
    if critical > all {
        return Err(problem(
            "shutdownGracePeriodCriticalPods",
            &obj["shutdownGracePeriodCriticalPods"],
            format!(
                "must be <= shutdownGracePeriod {}",
                super::format_duration(all)
            ),
        ));
    }
    let by_priority = obj
        .get("shutdownGracePeriodByPodPriority")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if by_priority && !all.is_zero() {
        return Err(problem(
            "shutdownGracePeriodByPodPriority",
            &obj["shutdownGracePeriodByPodPriority"],
            "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
        ));
    }
    let flag = |key: &str, default: bool| obj.get(key).and_then(Value::as_bool).unwrap_or(default);
    if flag("enableSystemLogQuery", false) && !flag("enableSystemLogHandler", true) {
        return Err(problem(
            "enableSystemLogQuery",
            &obj["enableSystemLogQuery"],
            "needs enableSystemLogHandler",
        ));
    }
    Ok(())
}

/// Why a text is not a Linux CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CpuSetError {
    #[error("{0:?} is not a CPU number or range")]
    NotACpu(String),
    #[error("invalid range {0:?}: start exceeds end")]
    Reversed(String),
}

/// Why a field's value does not have the shape its type needs.
#[derive(Debug, thiserror::Error)]
enum ShapeError {
    #[error("expected a mapping")]
    NotAMapping,
    #[error("expected a string")]
    NotAString,
    #[error("expected a quantity string")]
    NotAQuantityString,
    #[error("expected a duration string")]
    NotADurationString,
    #[error("{key}: {source}")]
    Entry {
        key: String,
        #[source]
        source: Box<ShapeError>,
    },
    #[error(transparent)]
    Quantity(#[from] crate::vocabulary::quantity::QuantityError),
    #[error(transparent)]
    Duration(#[from] super::DurationError),
}

/// Linux's CPU list syntax as upstream's cpuset.Parse takes it: `N` or `N-M` (N <= M),
/// comma-separated; "" is the empty set.
pub(crate) fn check_cpu_set(text: &str) -> Result<(), CpuSetError> {
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let number = |n: &str| {
            n.trim()
                .parse::<u32>()
                .map_err(|_| CpuSetError::NotACpu(part.to_string()))
        };
        match part.split_once('-') {
            Some((from, to)) => {
                if number(from)? > number(to)? {
                    return Err(CpuSetError::Reversed(part.to_string()));
                }
            }
            None => {
                number(part)?;
            }
        }
    }
    Ok(())
}

fn has_implemented(fields: &[Field]) -> bool {
    fields.iter().any(|f| match f.kind {
        Kind::Implemented => true,
        Kind::Object(children) => has_implemented(children),
        _ => false,
    })
}

fn problem(path: &str, value: &Value, reason: impl Into<String>) -> FieldProblem {
    FieldProblem {
        field: path.to_string(),
        value: value.clone(),
        reason: reason.into(),
    }
}

/// Upstream's decoding (types) and validation (ranges) of one value.
fn check(
    field: &Field,
    value: &Value,
    path: &str,
    unknown: &mut Vec<String>,
) -> Result<(), FieldProblem> {
    if value.is_null() {
        return Ok(());
    }
    let bad = |reason: &str| problem(path, value, reason);
    match field.kind {
        Kind::Implemented => Ok(()),
        Kind::Bool => value
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| bad("expected true or false")),
        Kind::Int { min, max } => {
            let n = value.as_i64().ok_or_else(|| bad("expected an integer"))?;
            if n < min || n > max {
                return Err(bad(&format!("must be between {min} and {max}, inclusive")));
            }
            Ok(())
        }
        Kind::IntStep { step, max } => {
            let n = value.as_i64().ok_or_else(|| bad("expected an integer"))?;
            if n <= 0 || n % step != 0 || n >= max {
                return Err(bad(&format!(
                    "must be a positive multiple of {step} and less than {max}"
                )));
            }
            Ok(())
        }
        Kind::Float { above, max } => {
            let x = value.as_f64().ok_or_else(|| bad("expected a number"))?;
            if x <= above || x > max {
                return Err(bad(&format!(
                    "must be greater than {above} and at most {max}"
                )));
            }
            Ok(())
        }
        Kind::Duration { min, max } => {
            let d = duration_of(value).map_err(|r| bad(&r.to_string()))?;
            // Zero means "the default" for a non-pointer duration.
            if d.is_zero() && !field.pointer {
                return Ok(());
            }
            if d < min || max.is_some_and(|m| d > m) {
                let range = match max {
                    Some(m) => format!(
                        "must be between {} and {}, inclusive",
                        super::format_duration(min),
                        super::format_duration(m)
                    ),
                    None => format!("must be at least {}", super::format_duration(min)),
                };
                return Err(bad(&range));
            }
            Ok(())
        }
        Kind::DurationOrNanos => match value {
            Value::Number(n) if n.as_i64().is_some_and(|n| n >= 0) => Ok(()),
            Value::String(_) => duration_of(value)
                .map(|_| ())
                .map_err(|r| bad(&r.to_string())),
            _ => Err(bad("expected a duration or a number of nanoseconds")),
        },
        Kind::Str => value
            .as_str()
            .map(|_| ())
            .ok_or_else(|| bad("expected a string")),
        Kind::Choice(choices) => {
            let s = value.as_str().ok_or_else(|| bad("expected a string"))?;
            // "" is the zero value: upstream's defaulting fills it in.
            if s.is_empty() || choices.contains(&s) {
                Ok(())
            } else {
                Err(bad(&format!("expected one of {}", choices.join(", "))))
            }
        }
        Kind::Quantity => {
            let s = value
                .as_str()
                .ok_or_else(|| bad("expected a quantity string"))?;
            crate::vocabulary::quantity::Quantity::parse(s)
                .map(|_| ())
                .map_err(|e| bad(&e.to_string()))
        }
        Kind::CpuSet => {
            let s = value.as_str().ok_or_else(|| bad("expected a string"))?;
            check_cpu_set(s).map_err(|r| bad(&r.to_string()))
        }
        Kind::StringList => list_of(value, |v| v.is_string())
            .then_some(())
            .ok_or_else(|| bad("expected a list of strings")),
        Kind::IntList => list_of(value, |v| {
            v.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
        })
        .then_some(())
        .ok_or_else(|| bad("expected a list of 32-bit integers")),
        Kind::StringMap => map_of(value, |_, v| {
            v.is_string().then_some(()).ok_or(ShapeError::NotAString)
        })
        .map_err(|r| bad(&r.to_string())),
        Kind::QuantityMap => map_of(value, |_, v| {
            let text = v.as_str().ok_or(ShapeError::NotAQuantityString)?;
            Ok(crate::vocabulary::quantity::Quantity::parse(text).map(|_| ())?)
        })
        .map_err(|r| bad(&r.to_string())),
        Kind::Object(children) => {
            let map = value.as_object().ok_or_else(|| bad("expected a mapping"))?;
            check_object(map, children, path, unknown)
        }
        Kind::ObjectList(children) => {
            let items = value
                .as_array()
                .ok_or_else(|| bad("expected a list of mappings"))?;
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                let map = item
                    .as_object()
                    .ok_or_else(|| problem(&item_path, item, "expected a mapping"))?;
                check_object(map, children, &item_path, unknown)?;
            }
            Ok(())
        }
    }
}

fn check_object(
    map: &Map<String, Value>,
    children: &[Field],
    path: &str,
    unknown: &mut Vec<String>,
) -> Result<(), FieldProblem> {
    for (key, v) in map {
        let child_path = format!("{path}.{key}");
        match children.iter().find(|c| c.name == key) {
            Some(child) => check(child, v, &child_path, unknown)?,
            None => unknown.push(child_path),
        }
    }
    Ok(())
}

fn list_of(value: &Value, item_ok: impl Fn(&Value) -> bool) -> bool {
    value
        .as_array()
        .is_some_and(|items| items.iter().all(item_ok))
}

fn map_of(
    value: &Value,
    entry_ok: impl Fn(&str, &Value) -> Result<(), ShapeError>,
) -> Result<(), ShapeError> {
    let map = value.as_object().ok_or(ShapeError::NotAMapping)?;
    for (k, v) in map {
        entry_ok(k, v).map_err(|source| ShapeError::Entry {
            key: k.clone(),
            source: Box::new(source),
        })?;
    }
    Ok(())
}

fn duration_of(value: &Value) -> Result<Duration, ShapeError> {
    let text = value.as_str().ok_or(ShapeError::NotADurationString)?;
    Ok(parse_duration(text)?)
}

/// Whether `value` leaves the field at upstream's default: absent or null, the zero value of
/// a non-pointer field (upstream's defaulting replaces it), or the default itself.
fn is_default(field: &Field, value: &Value) -> bool {
    if value.is_null() {
        return true;
    }
    let zero = match field.kind {
        Kind::Duration { .. } | Kind::DurationOrNanos if value.is_string() => {
            duration_of(value).is_ok_and(|d| d.is_zero())
        }
        Kind::Quantity => value
            .as_str()
            .and_then(|s| crate::vocabulary::quantity::Quantity::parse(s).ok())
            .is_some_and(|q| q.is_zero()),
        _ => is_zero(value),
    };
    if zero && (!field.pointer || field.default == Preset::Zero) {
        return true;
    }
    match (field.kind, field.default) {
        (Kind::Object(children), _) => value.as_object().is_some_and(|map| {
            map.iter().all(|(k, v)| {
                children
                    .iter()
                    .find(|c| c.name == k)
                    .is_some_and(|c| is_default(c, v))
            })
        }),
        (_, Preset::Bool(b)) => value.as_bool() == Some(b),
        (_, Preset::Int(n)) => value.as_i64() == Some(n),
        (_, Preset::Float(x)) => value.as_f64() == Some(x),
        (_, Preset::Str(s)) => value.as_str() == Some(s),
        (_, Preset::Millis(ms)) => match (field.kind, value) {
            (Kind::DurationOrNanos, Value::Number(n)) => n.as_u64() == Some(ms * 1_000_000),
            _ => duration_of(value).ok() == Some(Duration::from_millis(ms)),
        },
        (_, Preset::Zero) => zero,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_zero),
    }
}

/// The defaults of the not-implemented top-level fields, as /configz shows them (Go's
/// omitempty leaves out zero values).
pub(crate) fn configz_defaults() -> Map<String, Value> {
    let mut out = Map::new();
    for field in FIELDS {
        if matches!(field.kind, Kind::Implemented) {
            continue;
        }
        let value = match field.default {
            Preset::Zero => continue,
            Preset::Bool(b) => Value::Bool(b),
            Preset::Int(n) => Value::from(n),
            Preset::Float(x) => Value::from(x),
            Preset::Str(s) => Value::from(s),
            Preset::Millis(ms) => Value::from(super::format_duration(Duration::from_millis(ms))),
        };
        // Nested defaults live inside objects (crashLoopBackOff, userNamespaces): left out.
        if matches!(field.kind, Kind::Object(_)) {
            continue;
        }
        out.insert(field.name.to_string(), value);
    }
    out
}
