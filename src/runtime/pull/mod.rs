//! Image pulls for containerd 1.6, whose native API has no server-side pull: the agent
//! resolves the reference against the registry (oci-client), streams each blob into
//! containerd's content store under a lease (digests checked as they stream, GC labels
//! set), unpacks the layers into the snapshotter and writes the image record.
//!
//! `Puller` adds the kubelet's policy around that: credentials (node docker config, pod
//! imagePullSecrets), loopback and insecure registries over plain HTTP, one pull per image
//! however many pods ask for it at once, and serializeImagePulls / maxParallelImagePulls.
//! `import_archive` loads an OCI-layout or `docker save` tarball by the same store/unpack
//! path, for nodes without a registry.

pub mod archive;
mod bounded;
mod content;
pub mod credentials;
mod manifest;
pub mod registry;
mod unpack;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use sha2::Digest as _;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::runtime::images::{
    normalize_reference, repository, BlobKind, ImageInfo, MAX_CONFIG, SNAPSHOTTER,
};
use crate::runtime::{Containerd, RuntimeError};

pub use archive::import_archive;
pub use credentials::RegistryCredential;

use content::{Lease, WriteError};
use manifest::{Desc, Document};
use registry::{map_error, Transport};
use unpack::{Layer, UnpackError};

/// Blobs of one image fetched at once (containerd's own default for `max_concurrent_downloads`).
const BLOB_CONCURRENCY: usize = 3;
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// oci-client is built with `rustls-tls-no-provider`: rustls needs a process-wide crypto
/// provider before the first TLS connection. Idempotent; main calls it at start, and every
/// path here that builds a client calls it too.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[derive(Debug, Clone)]
pub struct PullOptions {
    /// A docker config file (or a directory holding `config.json`). None: the kubelet's
    /// search order (`<root_dir>/config.json`, ./config.json, ~/.docker/config.json,
    /// /.docker/config.json, then the legacy .dockercfg files).
    pub docker_config: Option<PathBuf>,
    /// The agent's --root-dir: upstream's preferred place for the node's docker config is
    /// its own root dir. None (the `image pull` command) leaves it out of the search.
    pub root_dir: Option<PathBuf>,
    /// Registries (`host[:port]`, bare host, or CIDR) reached over plain HTTP when HTTPS
    /// fails. Loopback registries need no entry.
    pub insecure_registries: Vec<String>,
    /// serializeImagePulls: one pull at a time (upstream default true).
    pub serialize: bool,
    /// maxParallelImagePulls: with `serialize` false, at most this many pulls at once.
    pub max_parallel: Option<usize>,
    pub snapshotter: String,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            docker_config: None,
            root_dir: None,
            insecure_registries: Vec::new(),
            serialize: true,
            max_parallel: None,
            snapshotter: SNAPSHOTTER.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct PullOutcome {
    pub image: ImageInfo,
    /// False when containerd already had the image complete (only the manifest was checked).
    pub pulled: bool,
    /// Bytes fetched from the registry (blobs containerd already had are not counted).
    pub bytes: u64,
    /// The image's size as its manifest gives it (config and compressed layers), what
    /// upstream reports as "Image size"; 0 when the pull found the image complete.
    pub size: u64,
    /// From the moment this pull got its turn (serializeImagePulls / maxParallelImagePulls)
    /// to the image record: waiting for a turn is not in it.
    pub duration: Duration,
}

/// A failed pull: one line naming the image and what the registry (or containerd) said.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("pull of image {image:?} failed: registry {registry} answered unauthorized: {detail}")]
    Unauthorized {
        image: String,
        registry: String,
        detail: String,
    },
    #[error("pull of image {image:?} failed: registry {registry} answered not found: {detail}")]
    NotFound {
        image: String,
        registry: String,
        detail: String,
    },
    #[error("pull of image {image:?} failed: bad digest for {digest}: {detail}")]
    BadDigest {
        image: String,
        digest: String,
        detail: String,
    },
    #[error("pull of image {image:?} failed: registry {registry} is unreachable: {detail}")]
    Unreachable {
        image: String,
        registry: String,
        detail: String,
    },
    #[error("pull of image {image:?} failed: {source}")]
    Runtime {
        image: String,
        #[source]
        source: RuntimeError,
    },
    #[error("pull of image {image:?} failed: {detail}")]
    Other { image: String, detail: String },
}

impl PullError {
    pub fn image(&self) -> &str {
        match self {
            PullError::Unauthorized { image, .. }
            | PullError::NotFound { image, .. }
            | PullError::BadDigest { image, .. }
            | PullError::Unreachable { image, .. }
            | PullError::Runtime { image, .. }
            | PullError::Other { image, .. } => image,
        }
    }

    fn runtime(image: &str, source: RuntimeError) -> PullError {
        PullError::Runtime {
            image: image.to_string(),
            source,
        }
    }

    fn other(image: &str, detail: impl Into<String>) -> PullError {
        PullError::Other {
            image: image.to_string(),
            detail: detail.into(),
        }
    }

    /// A copy for every caller that waited on one merged pull. RuntimeError is not Clone
    /// (a transport error inside); its text is kept where its value cannot be.
    fn duplicate(&self) -> PullError {
        match self {
            PullError::Unauthorized {
                image,
                registry,
                detail,
            } => PullError::Unauthorized {
                image: image.clone(),
                registry: registry.clone(),
                detail: detail.clone(),
            },
            PullError::NotFound {
                image,
                registry,
                detail,
            } => PullError::NotFound {
                image: image.clone(),
                registry: registry.clone(),
                detail: detail.clone(),
            },
            PullError::BadDigest {
                image,
                digest,
                detail,
            } => PullError::BadDigest {
                image: image.clone(),
                digest: digest.clone(),
                detail: detail.clone(),
            },
            PullError::Unreachable {
                image,
                registry,
                detail,
            } => PullError::Unreachable {
                image: image.clone(),
                registry: registry.clone(),
                detail: detail.clone(),
            },
            PullError::Runtime { image, source } => match source {
                RuntimeError::Call { op, object, status } => PullError::Runtime {
                    image: image.clone(),
                    source: RuntimeError::Call {
                        op,
                        object: object.clone(),
                        status: status.clone(),
                    },
                },
                RuntimeError::Timeout { op, object, secs } => PullError::Runtime {
                    image: image.clone(),
                    source: RuntimeError::Timeout {
                        op,
                        object: object.clone(),
                        secs: *secs,
                    },
                },
                other => PullError::other(image, other.to_string()),
            },
            PullError::Other { image, detail } => PullError::other(image, detail.clone()),
        }
    }
}

/// What the registry said about an image, before anything is stored.
struct Fetched<'a> {
    top_doc: &'a Document,
    top_digest: &'a str,
    top_bytes: Bytes,
    manifest_digest: &'a str,
    manifest_bytes: Bytes,
    /// For an index: the chosen entry's position and digest.
    index_child: Option<(usize, String)>,
    config: &'a Desc,
    layers: &'a [Desc],
}

type SharedPull = Shared<BoxFuture<'static, Result<PullOutcome, Arc<PullError>>>>;

/// Pulls images into containerd; cheap to clone.
#[derive(Clone)]
pub struct Puller {
    inner: Arc<Inner>,
}

struct Inner {
    rt: Containerd,
    opts: PullOptions,
    limit: Option<Arc<Semaphore>>,
    /// Pulls under way, by image and credential set: later callers wait on the first.
    in_flight: Mutex<HashMap<String, SharedPull>>,
    /// Per API host of an insecure/loopback registry: true once it answered plain HTTP,
    /// so later pulls skip the failing HTTPS attempt.
    plain_http: Mutex<HashMap<String, bool>>,
}

impl Puller {
    pub fn new(rt: Containerd, opts: PullOptions) -> Self {
        install_crypto_provider();
        let limit = pull_slots(&opts);
        Puller {
            inner: Arc::new(Inner {
                rt,
                limit: limit.map(|n| Arc::new(Semaphore::new(n))),
                opts,
                in_flight: Mutex::new(HashMap::new()),
                plain_http: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn options(&self) -> &PullOptions {
        &self.inner.opts
    }

    /// Pulls (or confirms) `image` and returns it resolved, ready for a container. `creds`
    /// are the pod's imagePullSecrets (tried before the node's docker config).
    pub async fn pull(
        &self,
        image: &str,
        creds: &[RegistryCredential],
    ) -> Result<PullOutcome, PullError> {
        let name = normalize_reference(image);
        // Merging only pulls with the same credentials: a pod must not get an image through
        // another pod's secret.
        let key = format!("{name} {}", fingerprint(creds));
        let shared = {
            let mut map = self.inner.in_flight.lock().expect("in-flight map");
            match map.get(&key) {
                Some(f) => {
                    debug!(image = %name, "joining a pull already under way");
                    f.clone()
                }
                None => {
                    let inner = self.inner.clone();
                    let (task_name, task_key) = (name.clone(), key.clone());
                    let creds = creds.to_vec();
                    // Its own task: a caller that gives up does not cancel the pull for the
                    // others waiting on it.
                    let task = tokio::spawn(async move {
                        let r = inner
                            .pull_limited(&task_name, &creds)
                            .await
                            .map_err(Arc::new);
                        inner
                            .in_flight
                            .lock()
                            .expect("in-flight map")
                            .remove(&task_key);
                        r
                    });
                    let image = name.clone();
                    let f = async move {
                        task.await.unwrap_or_else(|e| {
                            Err(Arc::new(PullError::other(
                                &image,
                                format!("pull task ended: {e}"),
                            )))
                        })
                    }
                    .boxed()
                    .shared();
                    map.insert(key, f.clone());
                    f
                }
            }
        };
        shared.await.map_err(|e| e.duplicate())
    }
}

/// How many pulls may run at once; None is no limit. serializeImagePulls wins over
/// maxParallelImagePulls, as upstream's serial puller ignores the limit.
pub(crate) fn pull_slots(opts: &PullOptions) -> Option<usize> {
    if opts.serialize {
        Some(1)
    } else {
        // Config validation refuses 0; a library caller's 0 means no limit, not a deadlock.
        opts.max_parallel.filter(|n| *n > 0)
    }
}

fn fingerprint(creds: &[RegistryCredential]) -> String {
    let mut h = sha2::Sha256::new();
    for c in creds {
        for part in [&c.key, &c.username, &c.password] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.update(c.registry_token.as_deref().unwrap_or("").as_bytes());
        h.update([1]);
    }
    hex::encode(&h.finalize()[..8])
}

/// Logs bytes fetched so far while a pull runs.
struct ProgressTicker(tokio::task::JoinHandle<()>);

impl ProgressTicker {
    fn start(image: &str, progress: Arc<AtomicU64>, total: u64, layers: usize) -> Self {
        let image = image.to_string();
        ProgressTicker(tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                info!(
                    image = %image,
                    fetched_bytes = progress.load(Ordering::Relaxed),
                    total_bytes = total,
                    layers,
                    "pull progress"
                );
            }
        }))
    }
}

impl Drop for ProgressTicker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Inner {
    async fn pull_limited(
        &self,
        name: &str,
        creds: &[RegistryCredential],
    ) -> Result<PullOutcome, PullError> {
        let _permit = match &self.limit {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .expect("semaphore never closed"),
            ),
            None => None,
        };
        let start = Instant::now();
        let r = self.pull_with_credentials(name, creds, start).await;
        match &r {
            Ok(o) if o.pulled => info!(
                image = %name,
                bytes = o.bytes,
                duration_ms = o.duration.as_millis() as u64,
                "pulled image"
            ),
            Ok(o) => debug!(
                image = %name,
                duration_ms = o.duration.as_millis() as u64,
                "image already present"
            ),
            Err(e) => warn!(image = %name, error = %e, "image pull failed"),
        }
        r
    }

    async fn pull_with_credentials(
        &self,
        name: &str,
        pod_creds: &[RegistryCredential],
        start: Instant,
    ) -> Result<PullOutcome, PullError> {
        let reference = registry::oci_reference(name)
            .map_err(|e| PullError::other(name, format!("invalid image reference: {e}")))?;
        // A digest never changes what it names: a complete local image needs no registry.
        if let Some(d) = reference.digest() {
            if let Some(image) = self.complete_locally(name, d).await? {
                return Ok(PullOutcome {
                    image,
                    pulled: false,
                    bytes: 0,
                    size: 0,
                    duration: start.elapsed(),
                });
            }
        }
        let host = registry::registry_host(name).to_string();
        let node_creds = credentials::load_node_credentials(
            self.opts.docker_config.as_deref(),
            self.opts.root_dir.as_deref(),
        )
        .map_err(|e| PullError::other(name, e.to_string()))?;
        let repo = reference.repository().to_string();
        let mut attempts: Vec<Option<&RegistryCredential>> = Vec::new();
        for c in credentials::matching(pod_creds, &host, &repo)
            .into_iter()
            .chain(credentials::matching(&node_creds, &host, &repo))
        {
            if !attempts.iter().flatten().any(|a| {
                a.username == c.username
                    && a.password == c.password
                    && a.registry_token == c.registry_token
            }) {
                attempts.push(Some(c));
            }
        }
        if attempts.is_empty() {
            attempts.push(None);
        }
        let mut last = None;
        for cred in attempts {
            match self
                .pull_from_registry(name, &host, &reference, cred, start)
                .await
            {
                Err(PullError::Unauthorized {
                    image,
                    registry,
                    detail,
                }) => {
                    let who = cred
                        .map(|c| format!("credentials for {} from {}", c.key, c.source))
                        .unwrap_or_else(|| "no credentials".into());
                    warn!(image = %name, registry = %registry, with = %who, "registry refused");
                    last = Some(PullError::Unauthorized {
                        image,
                        registry,
                        detail: format!("{detail} (tried {who})"),
                    });
                }
                r => return r,
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// The image as containerd has it, if its record targets `digest` and it is unpacked.
    async fn complete_locally(
        &self,
        name: &str,
        digest: &str,
    ) -> Result<Option<ImageInfo>, PullError> {
        match self.rt.resolve_image(name).await {
            Ok(info) if info.image_ref.ends_with(&format!("@{digest}")) => Ok(Some(info)),
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() || matches!(e, RuntimeError::BadImage { .. }) => Ok(None),
            Err(e) => Err(PullError::runtime(name, e)),
        }
    }

    /// An oci-client that has authenticated against the registry, and the bounded client
    /// for its manifests with the same scheme and credentials. For loopback and insecure
    /// registries: HTTPS (certificates unchecked) first, then plain HTTP; every other
    /// registry: HTTPS with its certificate checked.
    async fn connect(
        &self,
        name: &str,
        host: &str,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<(oci_client::Client, bounded::ManifestClient), PullError> {
        let api = reference.resolve_registry().to_string();
        let transport = registry::transport_for(host, &self.opts.insecure_registries);
        let order: Vec<bool> = match transport {
            Transport::Https => vec![false],
            Transport::HttpsThenHttp => {
                let known = self
                    .plain_http
                    .lock()
                    .expect("scheme map")
                    .get(&api)
                    .copied();
                if known == Some(true) {
                    vec![true, false]
                } else {
                    vec![false, true]
                }
            }
        };
        let mut failures = Vec::new();
        for plain in order {
            let skip_verify = registry::skip_verify(transport, plain);
            let client = registry::oci_client(&api, plain, skip_verify);
            match client.auth(reference, auth, RegistryOperation::Pull).await {
                Ok(token) => {
                    self.plain_http
                        .lock()
                        .expect("scheme map")
                        .insert(api.clone(), plain);
                    let credentials = bounded::Credentials::from_auth(token, auth);
                    let manifests = bounded::ManifestClient::new(plain, skip_verify, credentials)
                        .map_err(|e| manifest_error(name, host, name, e))?;
                    return Ok((client, manifests));
                }
                Err(e) if registry::is_transport_error(&e) => {
                    let scheme = if plain { "http" } else { "https" };
                    let mapped = map_error(name, host, name, e);
                    failures.push(match mapped {
                        PullError::Unreachable { detail, .. } => format!("{scheme}: {detail}"),
                        other => other.to_string(),
                    });
                }
                Err(e) => return Err(map_error(name, host, name, e)),
            }
        }
        Err(PullError::Unreachable {
            image: name.to_string(),
            registry: host.to_string(),
            detail: failures.join("; "),
        })
    }

    async fn pull_from_registry(
        &self,
        name: &str,
        host: &str,
        reference: &Reference,
        cred: Option<&RegistryCredential>,
        start: Instant,
    ) -> Result<PullOutcome, PullError> {
        let auth = registry::registry_auth(cred);
        let (client, manifest_client) = self.connect(name, host, reference, &auth).await?;
        let rt = &self.rt;
        // The manifest check: a HEAD for the digest the reference names now.
        let top_digest = match reference.digest() {
            Some(d) => d.to_string(),
            None => manifest_client
                .digest(reference)
                .await
                .map_err(|e| manifest_error(name, host, name, e))?,
        };
        if let Some(image) = self.complete_locally(name, &top_digest).await? {
            return Ok(PullOutcome {
                image,
                pulled: false,
                bytes: 0,
                size: 0,
                duration: start.elapsed(),
            });
        }
        let by_digest = reference.clone_with_digest(top_digest.clone());
        let top_bytes = self
            .fetch_manifest(&manifest_client, &by_digest, name, host, &top_digest)
            .await?;
        let top_doc = manifest::parse(&top_bytes)
            .map_err(|e| PullError::other(name, format!("manifest {top_digest}: {e}")))?;
        let (manifest_bytes, manifest_digest, index_child) = match &top_doc {
            Document::Index { manifests, .. } => {
                let (i, child) = manifest::pick_platform(manifests).ok_or_else(|| {
                    PullError::other(
                        name,
                        format!(
                            "no manifest for linux/{} in index {top_digest} (it has: {})",
                            manifest::node_arch(),
                            manifest::platforms(manifests)
                        ),
                    )
                })?;
                let child_ref = reference.clone_with_digest(child.digest.clone());
                let bytes = self
                    .fetch_manifest(&manifest_client, &child_ref, name, host, &child.digest)
                    .await?;
                (bytes, child.digest.clone(), Some((i, child.digest.clone())))
            }
            Document::Manifest { .. } => (top_bytes.clone(), top_digest.clone(), None),
        };
        let Document::Manifest { config, layers, .. } = manifest::parse(&manifest_bytes)
            .map_err(|e| PullError::other(name, format!("manifest {manifest_digest}: {e}")))?
        else {
            return Err(PullError::other(
                name,
                format!("index {top_digest} names another index for this platform"),
            ));
        };
        if layers.is_empty() {
            return Err(PullError::other(
                name,
                format!("manifest {manifest_digest} has no layers"),
            ));
        }
        config_within_bound(name, &manifest_digest, &config)?;
        info!(
            image = %name,
            registry = %host,
            digest = %top_digest,
            layers = layers.len(),
            bytes = layers.iter().map(|l| l.size.max(0) as u64).sum::<u64>(),
            "pulling image"
        );

        let lease = Lease::create(rt, "pull")
            .await
            .map_err(|e| PullError::runtime(name, e))?;
        let stored = self
            .store_and_unpack(
                &client,
                &by_digest,
                &lease.id,
                name,
                host,
                Fetched {
                    top_doc: &top_doc,
                    top_digest: &top_digest,
                    top_bytes,
                    manifest_digest: &manifest_digest,
                    manifest_bytes,
                    index_child,
                    config: &config,
                    layers: &layers,
                },
            )
            .await;
        // Released on failure too: what a failed pull wrote is garbage for the next GC.
        lease.release().await;
        let (image, fetched) = stored?;
        Ok(PullOutcome {
            image,
            pulled: true,
            bytes: fetched,
            size: std::iter::once(&config)
                .chain(&layers)
                .map(|d| d.size.max(0) as u64)
                .sum(),
            duration: start.elapsed(),
        })
    }

    /// Under the pull's lease: blobs, manifest and index into the content store, unpack,
    /// image record. Returns the image and the bytes fetched from the registry.
    async fn store_and_unpack(
        &self,
        client: &oci_client::Client,
        by_digest: &Reference,
        lease: &str,
        name: &str,
        host: &str,
        f: Fetched<'_>,
    ) -> Result<(ImageInfo, u64), PullError> {
        let rt = &self.rt;
        let Fetched {
            top_doc,
            top_digest,
            top_bytes,
            manifest_digest,
            manifest_bytes,
            index_child,
            config,
            layers,
        } = f;
        let progress = Arc::new(AtomicU64::new(0));
        let total: u64 = std::iter::once(config)
            .chain(layers)
            .map(|d| d.size.max(0) as u64)
            .sum();
        let ticker = ProgressTicker::start(name, progress.clone(), total, layers.len());
        let n_layers = layers.len();
        // A Vec of futures rather than a closure over the stream: closures returning
        // borrowing futures defeat the Send inference tokio::spawn needs.
        let mut jobs = Vec::with_capacity(n_layers + 1);
        for (i, d) in std::iter::once(config).chain(layers).enumerate() {
            jobs.push(self.fetch_blob_logged(
                client, by_digest, lease, i, n_layers, d, &progress, name, host,
            ));
        }
        let results: Vec<Result<u64, PullError>> = futures::stream::iter(jobs)
            .buffer_unordered(BLOB_CONCURRENCY)
            .collect()
            .await;
        drop(ticker);
        let mut fetched = 0u64;
        for r in results {
            fetched += r?;
        }

        let layer_digests: Vec<String> = layers.iter().map(|l| l.digest.clone()).collect();
        content::put_bytes(
            rt,
            lease,
            manifest_digest,
            manifest_bytes,
            content::manifest_gc_labels(&config.digest, &layer_digests),
        )
        .await
        .map_err(|e| write_error(name, host, manifest_digest, e))?;
        let top_size = top_bytes.len() as i64;
        if let Some((i, child)) = &index_child {
            content::put_bytes(
                rt,
                lease,
                top_digest,
                top_bytes,
                content::index_gc_labels(&[(*i, child.clone())]),
            )
            .await
            .map_err(|e| write_error(name, host, top_digest, e))?;
        }
        let image = finish_image(
            rt,
            lease,
            &self.opts.snapshotter,
            name,
            config,
            layers,
            top_doc.media_type(),
            top_digest,
            top_size,
        )
        .await?;
        Ok((image, fetched))
    }

    /// The manifest or index `digest`, read up to its bound (`bounded`), checked against
    /// its digest.
    async fn fetch_manifest(
        &self,
        manifests: &bounded::ManifestClient,
        reference: &Reference,
        name: &str,
        host: &str,
        digest: &str,
    ) -> Result<Bytes, PullError> {
        let bytes = manifests
            .get(reference)
            .await
            .map_err(|e| manifest_error(name, host, digest, e))?;
        let got = manifest::sha256_digest(&bytes);
        if got != digest {
            return Err(PullError::BadDigest {
                image: name.to_string(),
                digest: digest.to_string(),
                detail: format!("registry {host} sent a manifest hashing to {got}"),
            });
        }
        Ok(bytes)
    }

    #[allow(clippy::too_many_arguments)]
    async fn fetch_blob_logged(
        &self,
        client: &oci_client::Client,
        reference: &Reference,
        lease: &str,
        i: usize,
        layers: usize,
        d: &Desc,
        progress: &AtomicU64,
        name: &str,
        host: &str,
    ) -> Result<u64, PullError> {
        let n = self
            .fetch_blob(client, reference, lease, d, progress, name, host)
            .await?;
        // Position 0 is the config.
        if i > 0 {
            info!(
                image = %name,
                layer = i,
                layers,
                digest = %d.digest,
                bytes = n,
                cached = n == 0,
                "layer fetched"
            );
        }
        Ok(n)
    }

    /// Streams one blob from the registry into containerd; 0 when containerd had it.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_blob(
        &self,
        client: &oci_client::Client,
        reference: &Reference,
        lease: &str,
        d: &Desc,
        progress: &AtomicU64,
        name: &str,
        host: &str,
    ) -> Result<u64, PullError> {
        let Some(writer) = content::open_blob(&self.rt, lease, &d.digest, d.size)
            .await
            .map_err(|e| PullError::runtime(name, e))?
        else {
            return Ok(0);
        };
        let desc = OciDescriptor {
            media_type: d.media_type.clone(),
            digest: d.digest.clone(),
            size: d.size,
            ..Default::default()
        };
        // oci-client's stream checks the digest as it goes and fails at the end on a
        // mismatch, before the commit; containerd checks again at commit.
        let stream = client
            .pull_blob_stream(reference, &desc)
            .await
            .map_err(|e| map_error(name, host, &d.digest, e))?;
        writer
            .write_all(stream, HashMap::new(), progress)
            .await
            .map_err(|e| write_error(name, host, &d.digest, e))
    }
}

/// The config is read whole into memory once stored: one declared past its bound is refused
/// before it is fetched (and containerd's commit holds the blob to its declared size).
fn config_within_bound(image: &str, manifest_digest: &str, config: &Desc) -> Result<(), PullError> {
    if (0..=MAX_CONFIG as i64).contains(&config.size) {
        return Ok(());
    }
    Err(PullError::other(
        image,
        format!(
            "manifest {manifest_digest}: config {} declares {} bytes; at most {MAX_CONFIG} are read",
            config.digest, config.size
        ),
    ))
}

fn manifest_error(image: &str, host: &str, what: &str, e: bounded::FetchError) -> PullError {
    match e {
        bounded::FetchError::Registry(e) => map_error(image, host, what, e),
        e @ bounded::FetchError::TooLarge { .. } => {
            PullError::other(image, format!("registry {host}: manifest {what}: {e}"))
        }
    }
}

fn write_error(image: &str, host: &str, digest: &str, e: WriteError) -> PullError {
    match e {
        WriteError::Source(io) => match registry::digest_error_in(&io) {
            Some(d) => PullError::BadDigest {
                image: image.to_string(),
                digest: digest.to_string(),
                detail: format!("from {host}: {d}"),
            },
            None => PullError::Unreachable {
                image: image.to_string(),
                registry: host.to_string(),
                detail: format!("reading blob {digest}: {io}"),
            },
        },
        WriteError::Size { expected, got } => PullError::BadDigest {
            image: image.to_string(),
            digest: digest.to_string(),
            detail: format!("{host} sent {got} bytes, the manifest says {expected}"),
        },
        WriteError::Runtime(r) => PullError::runtime(image, r),
    }
}

/// After the blobs are stored: unpack, label, write the image record, and describe the
/// image for a container. Shared by pulls and archive imports.
#[allow(clippy::too_many_arguments)]
async fn finish_image(
    rt: &Containerd,
    lease: &str,
    snapshotter: &str,
    name: &str,
    config: &Desc,
    layers: &[Desc],
    target_media_type: &str,
    target_digest: &str,
    target_size: i64,
) -> Result<ImageInfo, PullError> {
    let config_bytes = rt
        .read_blob(&config.digest, BlobKind::Config)
        .await
        .map_err(|e| PullError::runtime(name, e))?;
    let config_file: manifest::ConfigFile = serde_json::from_slice(&config_bytes)
        .map_err(|e| PullError::other(name, format!("config {} is invalid: {e}", config.digest)))?;
    if config_file.rootfs.diff_ids.len() != layers.len() {
        return Err(PullError::other(
            name,
            format!(
                "config {} lists {} diff_ids for {} layers",
                config.digest,
                config_file.rootfs.diff_ids.len(),
                layers.len()
            ),
        ));
    }
    let to_unpack: Vec<Layer> = layers
        .iter()
        .zip(&config_file.rootfs.diff_ids)
        .map(|(d, diff)| Layer {
            blob: d.to_containerd(),
            diff_id: diff.clone(),
        })
        .collect();
    let unpack_start = Instant::now();
    let n = to_unpack.len();
    let chain_id = unpack::unpack(
        rt,
        lease,
        snapshotter,
        &config.digest,
        &to_unpack,
        |i, applied| {
            debug!(image = %name, layer = i + 1, layers = n, applied, "layer unpacked");
        },
    )
    .await
    .map_err(|e| match e {
        UnpackError::Runtime(r) => PullError::runtime(name, r),
        UnpackError::DiffMismatch {
            layer,
            expected,
            got,
        } => PullError::BadDigest {
            image: name.to_string(),
            digest: layer,
            detail: format!("uncompressed layer hashes to {got}, the config says {expected}"),
        },
    })?;
    debug!(image = %name, duration_ms = unpack_start.elapsed().as_millis() as u64, "unpacked");
    unpack::put_image(
        rt,
        lease,
        name,
        containerd_client::types::Descriptor {
            media_type: target_media_type.to_string(),
            digest: target_digest.to_string(),
            size: target_size,
            annotations: HashMap::new(),
        },
    )
    .await
    .map_err(|e| PullError::runtime(name, e))?;
    Ok(ImageInfo {
        name: name.to_string(),
        image_ref: format!("{}@{target_digest}", repository(name)),
        chain_id,
        config: config_file.config.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(user: &str) -> RegistryCredential {
        RegistryCredential {
            key: "r.io".into(),
            username: user.into(),
            password: "p".into(),
            registry_token: None,
            source: "t".into(),
        }
    }

    #[test]
    fn a_config_declared_past_its_bound_is_refused_before_it_is_fetched() {
        let desc = |size: i64| -> Desc {
            serde_json::from_value(serde_json::json!({
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:cc", "size": size}))
            .unwrap()
        };
        assert!(config_within_bound("app:1", "sha256:mm", &desc(1500)).is_ok());
        assert!(config_within_bound("app:1", "sha256:mm", &desc(4 << 20)).is_ok());
        let e = config_within_bound("app:1", "sha256:mm", &desc((4 << 20) + 1)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("app:1") && text.contains("config sha256:cc declares 4194305 bytes"),
            "{text}"
        );
        assert!(config_within_bound("app:1", "sha256:mm", &desc(-1)).is_err());
    }

    #[test]
    fn pull_slots_follow_serialize_then_max_parallel() {
        let slots = |serialize, max_parallel| {
            pull_slots(&PullOptions {
                serialize,
                max_parallel,
                ..PullOptions::default()
            })
        };
        assert_eq!(pull_slots(&PullOptions::default()), Some(1));
        assert_eq!(slots(true, None), Some(1));
        assert_eq!(slots(true, Some(1)), Some(1));
        assert_eq!(slots(false, None), None);
        assert_eq!(slots(false, Some(1)), Some(1));
        assert_eq!(slots(false, Some(2)), Some(2));
        assert_eq!(slots(false, Some(0)), None);
    }

    #[test]
    fn fingerprints_separate_credential_sets() {
        assert_eq!(fingerprint(&[]), fingerprint(&[]));
        assert_eq!(fingerprint(&[cred("a")]), fingerprint(&[cred("a")]));
        assert_ne!(fingerprint(&[cred("a")]), fingerprint(&[cred("b")]));
        assert_ne!(fingerprint(&[]), fingerprint(&[cred("a")]));
    }

    #[test]
    fn duplicated_errors_keep_kind_and_text() {
        let e = PullError::NotFound {
            image: "i".into(),
            registry: "r".into(),
            detail: "d".into(),
        };
        assert_eq!(e.duplicate().to_string(), e.to_string());
        let e = PullError::Runtime {
            image: "i".into(),
            source: RuntimeError::Call {
                op: "write content",
                object: "sha256:x".into(),
                status: Box::new(tonic::Status::unavailable("down")),
            },
        };
        let d = e.duplicate();
        assert!(matches!(d, PullError::Runtime { .. }));
        assert_eq!(d.to_string(), e.to_string());
    }
}
