//! What a set-up volume is, as the node's other parts see it: the metrics' plugin name, how
//! often a set-up counts as a mount, and how the stats collector measures it. One place, one
//! arm per kind, so a new kind is described where it is declared.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir,
    /// emptyDir with medium Memory: a tmpfs.
    EmptyDirMemory,
    HostPath,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    /// A `local` PersistentVolume, bind-mounted into the pod's dir.
    Local,
    /// A CSI volume, published by its driver into the pod's dir.
    Csi,
    /// A raw block volume of an in-tree `local` PV (volumeMode Block): `path` is the pod's
    /// link to the device, `<pod>/volumeDevices/kubernetes.io~local-volume/<pv>`.
    LocalBlock,
    /// A raw block volume of a CSI PV: `path` is the pod's link to the device,
    /// `<pod>/volumeDevices/kubernetes.io~csi/<pv>`.
    CsiBlock,
}

/// How the stats collector measures a volume, as upstream's plugin does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// Not at all (hostPath: upstream's plugin has no metrics).
    NotMeasured,
    /// Walked for what it holds; `node_disk`: it lives on the node's disk, so it counts in
    /// the pod's ephemeral storage (upstream's IsLocalEphemeralVolume).
    Walk { node_disk: bool },
    /// Its filesystem's statfs alone (a `local` PV).
    StatFs,
    /// What its driver reports for its path (CSI).
    Reported,
    /// What its driver reports for the pod's map file, upstream's volume path of a block
    /// volume (a CSI block volume).
    ReportedForMapFile,
    /// A raw block device: its size (a `local` block PV).
    DeviceSize,
}

/// A kind's properties.
struct Described {
    /// Upstream's plugin name (`kubernetes.io/empty-dir`).
    plugin: &'static str,
    /// Set up again on every sync because its content follows an object (upstream remounts
    /// those); the others are mounted once.
    remounts: bool,
    usage: Usage,
}

impl VolumeKind {
    fn describe(self) -> Described {
        let d = |plugin, remounts, usage| Described {
            plugin,
            remounts,
            usage,
        };
        let walk = |node_disk| Usage::Walk { node_disk };
        match self {
            VolumeKind::EmptyDir => d("kubernetes.io/empty-dir", false, walk(true)),
            VolumeKind::EmptyDirMemory => d("kubernetes.io/empty-dir", false, walk(false)),
            VolumeKind::HostPath => d("kubernetes.io/host-path", false, Usage::NotMeasured),
            VolumeKind::ConfigMap => d("kubernetes.io/configmap", true, walk(true)),
            VolumeKind::Secret => d("kubernetes.io/secret", true, walk(false)),
            VolumeKind::DownwardApi => d("kubernetes.io/downward-api", true, walk(false)),
            VolumeKind::Projected => d("kubernetes.io/projected", true, walk(false)),
            VolumeKind::Local => d("kubernetes.io/local-volume", false, Usage::StatFs),
            VolumeKind::LocalBlock => d("kubernetes.io/local-volume", false, Usage::DeviceSize),
            VolumeKind::Csi => d("kubernetes.io/csi", false, Usage::Reported),
            VolumeKind::CsiBlock => d("kubernetes.io/csi", false, Usage::ReportedForMapFile),
        }
    }

    /// A raw block volume, for containers' volumeDevices.
    pub fn is_block(self) -> bool {
        matches!(self, VolumeKind::LocalBlock | VolumeKind::CsiBlock)
    }

    /// Upstream's plugin name (`kubernetes.io/empty-dir`, ...).
    pub fn plugin_name(self) -> &'static str {
        self.describe().plugin
    }

    /// Whether each set-up is a mount (content that follows an object), or only the first.
    pub fn remounts(self) -> bool {
        self.describe().remounts
    }

    /// How the stats collector measures it.
    pub fn usage(self) -> Usage {
        self.describe().usage
    }
}
