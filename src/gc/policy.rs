//! The image GC's decisions as plain data: how full the image filesystem is, how much to
//! free, which images may go and in which order. No containerd here, so every rule is
//! unit-tested.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::runtime::images::normalize_reference;

/// What statvfs says about the image filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    pub capacity: u64,
    /// Bytes an unprivileged writer could still use (f_bavail), as upstream's "available".
    pub available: u64,
}

impl FsUsage {
    /// Upstream's integer rule: 100 - available*100/capacity, so 84.9 % counts as 85 %.
    pub fn used_percent(&self) -> u64 {
        if self.capacity == 0 {
            return 0;
        }
        let available = self.available.min(self.capacity) as u128;
        100 - (available * 100 / self.capacity as u128) as u64
    }

    /// Bytes still to free before use is down to `percent`; 0 once it is.
    pub fn bytes_above(&self, percent: u8) -> u64 {
        let keep_free = self.capacity as u128 * u128::from(100 - percent.min(100)) / 100;
        (keep_free as u64).saturating_sub(self.available)
    }
}

/// The thresholds and age limits of imageGC*Percent, imageMinimumGCAge and
/// imageMaximumGCAge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_percent: u8,
    pub low_percent: u8,
    pub min_age: Duration,
    /// An unused image is removed once it has not been used for longer than this, whatever
    /// the disk use; zero turns the rule off (upstream's default).
    pub max_age: Duration,
}

impl ImageGcPolicy {
    /// Upstream stubs the image GC out when the high threshold is 100 and no maximum age is
    /// set.
    pub fn is_disabled(&self) -> bool {
        self.high_percent >= 100 && self.max_age.is_zero()
    }

    /// `None` below the high threshold; else the bytes to free to get down to the low one.
    pub fn bytes_to_free(&self, usage: FsUsage) -> Option<u64> {
        (usage.used_percent() >= u64::from(self.high_percent))
            .then(|| usage.bytes_above(self.low_percent))
    }
}

pub use crate::runtime::image_store::ListedImage;

/// An image as upstream counts it: one target digest with all the names pointing at it.
/// Removing it removes every name, as upstream removes an image by ID with all its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub digest: String,
    pub names: Vec<String>,
    /// Bytes of its content (manifest, config, layers); 0 when unknown. For logs only: the
    /// filesystem is measured again after each removal.
    pub size: u64,
}

/// Groups records by target digest, names sorted, images in digest order.
pub fn group_by_digest(listed: &[ListedImage]) -> Vec<Image> {
    let mut by_digest: HashMap<&str, Vec<String>> = HashMap::new();
    for l in listed {
        by_digest.entry(&l.digest).or_default().push(l.name.clone());
    }
    let mut images: Vec<Image> = by_digest
        .into_iter()
        .map(|(digest, mut names)| {
            names.sort();
            Image {
                digest: digest.to_string(),
                names,
                size: 0,
            }
        })
        .collect();
    images.sort_by(|a, b| a.digest.cmp(&b.digest));
    images
}

/// Digests of the images some reference in `refs` names. References are normalized first,
/// so `busybox:1.36` matches `docker.io/library/busybox:1.36`.
pub fn digests_named<S: AsRef<str>>(images: &[Image], refs: &[S]) -> HashSet<String> {
    let wanted: HashSet<String> = refs
        .iter()
        .map(|r| normalize_reference(r.as_ref()))
        .collect();
    images
        .iter()
        .filter(|i| {
            i.names
                .iter()
                .any(|n| wanted.contains(&normalize_reference(n)))
        })
        .map(|i| i.digest.clone())
        .collect()
}

#[derive(Debug, Clone)]
struct Record {
    names: Vec<String>,
    size: u64,
    first_detected: Instant,
    /// None: never seen in use since the agent started.
    last_used: Option<Instant>,
}

/// Upstream's in-memory image records: when the agent first saw each image and when it last
/// saw a container using it. Lost on restart, as upstream's are; first-detected then
/// restarts, which only delays collection.
#[derive(Debug, Default)]
pub struct ImageRecords {
    records: HashMap<String, Record>,
}

/// An image that may be removed, in removal order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub digest: String,
    pub names: Vec<String>,
    pub size: u64,
}

impl ImageRecords {
    pub fn size_of(&self, digest: &str) -> Option<u64> {
        self.records.get(digest).map(|r| r.size)
    }

    /// Takes in one listing at `now`: new images are first detected now, images in use are
    /// used now, images containerd no longer has are forgotten.
    pub fn observe(&mut self, images: &[Image], in_use: &HashSet<String>, now: Instant) {
        let present: HashSet<&str> = images.iter().map(|i| i.digest.as_str()).collect();
        self.records.retain(|d, _| present.contains(d.as_str()));
        for image in images {
            let r = self
                .records
                .entry(image.digest.clone())
                .or_insert_with(|| Record {
                    names: Vec::new(),
                    size: image.size,
                    first_detected: now,
                    last_used: None,
                });
            r.names = image.names.clone();
            if image.size != 0 {
                r.size = image.size;
            }
            if in_use.contains(&image.digest) {
                r.last_used = Some(now);
            }
        }
    }

    pub fn forget(&mut self, digest: &str) {
        self.records.remove(digest);
    }

    /// Images that may go: not in use, not pinned, first detected at least `min_age` before
    /// `now`. Least recently used first (never used before any used one), then the earliest
    /// detected, then by digest so the order is stable.
    pub fn candidates(
        &self,
        in_use: &HashSet<String>,
        pinned: &HashSet<String>,
        min_age: Duration,
        now: Instant,
    ) -> Vec<Candidate> {
        let mut eligible: Vec<(&String, &Record)> = self
            .records
            .iter()
            .filter(|(d, _)| !in_use.contains(*d) && !pinned.contains(*d))
            .filter(|(_, r)| now.saturating_duration_since(r.first_detected) >= min_age)
            .collect();
        eligible.sort_by(|(da, a), (db, b)| {
            (a.last_used, a.first_detected, da).cmp(&(b.last_used, b.first_detected, db))
        });
        eligible
            .into_iter()
            .map(|(digest, r)| Candidate {
                digest: digest.clone(),
                names: r.names.clone(),
                size: r.size,
            })
            .collect()
    }
}

/// The candidates (in removal order) unused for longer than `max_age` at `now`: last used
/// before then, or never seen in use since the agent started (upstream's zero lastUsed).
/// None while the collector itself has run for `max_age` or less (upstream waits that long
/// after its start, so images of pods not yet recovered are not taken for unused).
pub fn aged_out(
    records: &ImageRecords,
    candidates: Vec<Candidate>,
    max_age: Duration,
    began: Instant,
    now: Instant,
) -> Vec<Candidate> {
    if max_age.is_zero() || now.saturating_duration_since(began) <= max_age {
        return Vec::new();
    }
    candidates
        .into_iter()
        .filter(|c| {
            records
                .records
                .get(&c.digest)
                .and_then(|r| r.last_used)
                .is_none_or(|used| now.saturating_duration_since(used) > max_age)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn listed(name: &str, digest: &str) -> ListedImage {
        ListedImage {
            name: name.into(),
            digest: digest.into(),
        }
    }

    fn image(digest: &str, names: &[&str], size: u64) -> Image {
        Image {
            digest: digest.into(),
            names: names.iter().map(|n| n.to_string()).collect(),
            size,
        }
    }

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn digests(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.digest.as_str()).collect()
    }

    fn policy(high: u8, low: u8) -> ImageGcPolicy {
        ImageGcPolicy {
            high_percent: high,
            low_percent: low,
            min_age: Duration::ZERO,
            max_age: Duration::ZERO,
        }
    }

    #[test]
    fn used_percent_rounds_as_upstream() {
        let u = |available| FsUsage {
            capacity: 100 * MIB,
            available,
        };
        assert_eq!(u(100 * MIB).used_percent(), 0);
        assert_eq!(u(15 * MIB).used_percent(), 85);
        // 15.5 % free: 100 - floor(15.5) = 85, so it already counts as 85 %.
        assert_eq!(u(15 * MIB + MIB / 2).used_percent(), 85);
        assert_eq!(u(0).used_percent(), 100);
        let empty = FsUsage {
            capacity: 0,
            available: 0,
        };
        assert_eq!(empty.used_percent(), 0, "no capacity: nothing to measure");
    }

    #[test]
    fn frees_down_to_low_only_once_high_is_reached() {
        let p = policy(85, 80);
        let at = |available| FsUsage {
            capacity: 100 * MIB,
            available,
        };
        assert_eq!(p.bytes_to_free(at(16 * MIB)), None, "84 % is below high");
        assert_eq!(p.bytes_to_free(at(15 * MIB)), Some(5 * MIB));
        assert_eq!(p.bytes_to_free(at(2 * MIB)), Some(18 * MIB));
        assert_eq!(at(20 * MIB).bytes_above(80), 0);
        assert_eq!(at(25 * MIB).bytes_above(80), 0);
    }

    #[test]
    fn high_100_disables() {
        assert!(policy(100, 80).is_disabled());
        assert!(!policy(85, 80).is_disabled());
    }

    #[test]
    fn groups_names_by_target_digest() {
        let images = group_by_digest(&[
            listed("docker.io/library/busybox:1.36", "sha256:b"),
            listed("docker.io/library/a:1", "sha256:a"),
            listed("docker.io/library/busybox:copy", "sha256:b"),
        ]);
        assert_eq!(
            images,
            vec![
                image("sha256:a", &["docker.io/library/a:1"], 0),
                image(
                    "sha256:b",
                    &[
                        "docker.io/library/busybox:1.36",
                        "docker.io/library/busybox:copy"
                    ],
                    0
                ),
            ]
        );
    }

    #[test]
    fn names_match_after_normalization() {
        let images = vec![
            image("sha256:b", &["docker.io/library/busybox:1.36"], 0),
            image("sha256:p", &["registry.k8s.io/pause:3.10"], 0),
        ];
        assert_eq!(
            digests_named(&images, &["busybox:1.36"]),
            set(&["sha256:b"])
        );
        assert_eq!(
            digests_named(&images, &["registry.k8s.io/pause:3.10", "gone:1"]),
            set(&["sha256:p"])
        );
        assert!(digests_named::<&str>(&images, &[]).is_empty());
    }

    #[test]
    fn skips_images_in_use_pinned_or_too_young() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let images = vec![
            image("sha256:used", &["u:1"], MIB),
            image("sha256:pause", &["p:1"], MIB),
            image("sha256:old", &["o:1"], MIB),
        ];
        records.observe(&images, &set(&["sha256:used"]), t0);
        let young = vec![image("sha256:young", &["y:1"], MIB)];
        let all: Vec<Image> = images.iter().chain(&young).cloned().collect();
        let t1 = t0 + Duration::from_secs(90);
        records.observe(&all, &set(&["sha256:used"]), t1);

        let min_age = Duration::from_secs(60);
        let got = records.candidates(&set(&["sha256:used"]), &set(&["sha256:pause"]), min_age, t1);
        assert_eq!(digests(&got), vec!["sha256:old"], "young is 0 s old");
        let later = t1 + min_age;
        let got = records.candidates(
            &set(&["sha256:used"]),
            &set(&["sha256:pause"]),
            min_age,
            later,
        );
        assert_eq!(digests(&got), vec!["sha256:old", "sha256:young"]);
    }

    #[test]
    fn least_recently_used_first_then_earliest_detected() {
        let t0 = Instant::now();
        let t = |s| t0 + Duration::from_secs(s);
        let mut records = ImageRecords::default();
        let a = image("sha256:a", &["a:1"], 1);
        let b = image("sha256:b", &["b:1"], 2);
        let c = image("sha256:c", &["c:1"], 3);
        let d = image("sha256:d", &["d:1"], 4);
        // a and b used at 0 s; a again at 10 s; d first seen at 20 s, never used; c never used.
        records.observe(
            &[a.clone(), b.clone(), c.clone()],
            &set(&["sha256:a", "sha256:b"]),
            t(0),
        );
        records.observe(
            &[a.clone(), b.clone(), c.clone()],
            &set(&["sha256:a"]),
            t(10),
        );
        records.observe(
            &[a.clone(), b.clone(), c.clone(), d.clone()],
            &set(&[]),
            t(20),
        );
        let got = records.candidates(&set(&[]), &set(&[]), Duration::ZERO, t(30));
        assert_eq!(
            digests(&got),
            vec!["sha256:c", "sha256:d", "sha256:b", "sha256:a"],
            "never used (by detection time), then by last use"
        );
        assert_eq!(got[0].names, vec!["c:1".to_string()]);
        assert_eq!(got[0].size, 3);
    }

    #[test]
    fn forgets_images_containerd_no_longer_has() {
        let t0 = Instant::now();
        let mut records = ImageRecords::default();
        let a = image("sha256:a", &["a:1"], 7);
        records.observe(std::slice::from_ref(&a), &set(&[]), t0);
        assert_eq!(records.size_of("sha256:a"), Some(7));
        records.observe(&[], &set(&[]), t0);
        assert_eq!(records.size_of("sha256:a"), None);
        // Seen again later: its age starts over.
        let t1 = t0 + Duration::from_secs(100);
        records.observe(&[a], &set(&[]), t1);
        let got = records.candidates(&set(&[]), &set(&[]), Duration::from_secs(50), t1);
        assert!(got.is_empty());
    }
}
