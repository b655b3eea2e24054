//! The pass against a fake runtime and filesystem: removal order, the stopping rules, and
//! what a failed removal does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::*;

const MIB: u64 = 1 << 20;
const PAUSE: &str = "registry.k8s.io/pause:3.10";

#[derive(Default)]
struct State {
    images: Vec<ListedImage>,
    containers: Vec<String>,
    sizes: HashMap<String, u64>,
    refuse: HashSet<String>,
    /// Whether a removal gives its bytes back to the measured filesystem.
    frees_space: bool,
    removals: Vec<String>,
    usage: Option<FsUsage>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

impl Fake {
    fn with(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.0.lock().unwrap())
    }

    fn add_image(&self, name: &str, digest: &str, size: u64) {
        self.with(|s| {
            s.images.push(ListedImage {
                name: name.into(),
                digest: digest.into(),
            });
            s.sizes.insert(digest.into(), size);
        })
    }

    fn names(&self) -> Vec<String> {
        let s = self.0.lock().unwrap();
        let mut names: Vec<String> = s.images.iter().map(|i| i.name.clone()).collect();
        names.sort();
        names
    }
}

impl ImageRuntime for Fake {
    async fn list_images(&self) -> Result<Vec<ListedImage>, GcError> {
        Ok(self.0.lock().unwrap().images.clone())
    }
    async fn container_images(&self) -> Result<Vec<String>, GcError> {
        Ok(self.0.lock().unwrap().containers.clone())
    }
    async fn image_size(&self, digest: &str) -> Result<u64, GcError> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .sizes
            .get(digest)
            .copied()
            .unwrap_or(0))
    }
    async fn remove_image(&self, image: &Candidate) -> Result<(), GcError> {
        let mut s = self.0.lock().unwrap();
        if s.refuse.contains(&image.digest) {
            return Err(GcError::Runtime(crate::runtime::RuntimeError::BadImage {
                image: image.digest.clone(),
                reason: "refused by the fake".into(),
            }));
        }
        s.images.retain(|i| i.digest != image.digest);
        s.removals.push(image.digest.clone());
        let size = s.sizes.get(&image.digest).copied().unwrap_or(0);
        if s.frees_space {
            if let Some(u) = s.usage.as_mut() {
                u.available += size;
            }
        }
        Ok(())
    }
}

impl UsageProbe for Fake {
    async fn usage(&self) -> Result<FsUsage, GcError> {
        Ok(self.0.lock().unwrap().usage.expect("usage set"))
    }
}

/// 100 MiB filesystem with `available_mib` free; busybox in use by a dead container, pause
/// pinned, three unused 6 MiB images a, b, c.
fn node(available_mib: u64) -> Fake {
    let fake = Fake::default();
    fake.add_image("docker.io/library/busybox:1.36", "sha256:bb", 6 * MIB);
    fake.add_image("docker.io/library/busybox:other-tag", "sha256:bb", 6 * MIB);
    fake.add_image(PAUSE, "sha256:pp", MIB);
    for (name, digest) in [
        ("a:1", "sha256:a"),
        ("b:1", "sha256:b"),
        ("c:1", "sha256:c"),
    ] {
        fake.add_image(&format!("docker.io/library/{name}"), digest, 6 * MIB);
    }
    fake.with(|s| {
        s.containers = vec!["docker.io/library/busybox:1.36".into()];
        s.frees_space = true;
        s.usage = Some(FsUsage {
            capacity: 100 * MIB,
            available: available_mib * MIB,
        });
    });
    fake
}

fn gc(fake: &Fake, min_age: Duration) -> ImageGc<Fake, Fake> {
    let policy = ImageGcPolicy {
        high_percent: 85,
        low_percent: 80,
        min_age,
        max_age: Duration::ZERO,
    };
    ImageGc::new(
        fake.clone(),
        fake.clone(),
        policy,
        vec!["registry.k8s.io/pause:3.10".into()],
    )
}

fn digests(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn below_high_removes_nothing() {
    let fake = node(16);
    let outcome = gc(&fake, Duration::ZERO)
        .collect(Instant::now())
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::BelowHigh { used_percent: 84 });
    assert!(fake.0.lock().unwrap().removals.is_empty());
}

#[tokio::test]
async fn removes_until_low_is_reached_and_keeps_used_and_pinned() {
    // 90 % used: 10 MiB to free; two 6 MiB images are enough.
    let fake = node(10);
    let outcome = gc(&fake, Duration::ZERO)
        .collect(Instant::now())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::ReachedLow {
            removed: digests(&["sha256:a", "sha256:b"])
        }
    );
    assert_eq!(
        fake.names(),
        vec![
            "docker.io/library/busybox:1.36",
            "docker.io/library/busybox:other-tag",
            "docker.io/library/c:1",
            PAUSE,
        ],
        "in-use image keeps all its names, pause is pinned, c was not needed"
    );
}

#[tokio::test]
async fn a_failed_removal_moves_on_to_the_next_image() {
    let fake = node(10);
    fake.with(|s| {
        s.refuse.insert("sha256:a".into());
    });
    let outcome = gc(&fake, Duration::ZERO)
        .collect(Instant::now())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::ReachedLow {
            removed: digests(&["sha256:b", "sha256:c"])
        }
    );
    assert!(fake.names().contains(&"docker.io/library/a:1".to_string()));
}

#[tokio::test]
async fn stops_when_no_candidate_is_left_even_if_space_is_not_returned() {
    // The measured filesystem is not where the content lives: nothing a removal frees shows.
    let fake = node(5);
    fake.with(|s| s.frees_space = false);
    let mut gc = gc(&fake, Duration::ZERO);
    let t0 = Instant::now();
    let outcome = gc.collect(t0).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Exhausted {
            removed: digests(&["sha256:a", "sha256:b", "sha256:c"])
        }
    );
    let again = gc.collect(t0 + Duration::from_secs(1)).await.unwrap();
    assert_eq!(again, Outcome::Exhausted { removed: vec![] });
    assert_eq!(
        fake.0.lock().unwrap().removals.len(),
        3,
        "nothing removed twice"
    );
}

#[tokio::test]
async fn images_younger_than_the_minimum_age_stay() {
    let fake = node(5);
    let mut gc = gc(&fake, Duration::from_secs(120));
    let t0 = Instant::now();
    assert_eq!(
        gc.collect(t0).await.unwrap(),
        Outcome::Exhausted { removed: vec![] },
        "first seen now"
    );
    let outcome = gc.collect(t0 + Duration::from_secs(120)).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::ReachedLow {
            removed: digests(&["sha256:a", "sha256:b", "sha256:c"])
        }
    );
}

#[tokio::test]
async fn an_image_no_container_uses_any_more_goes_after_the_never_used_ones() {
    let fake = node(10);
    fake.with(|s| s.containers.push("docker.io/library/a:1".into()));
    let mut gc = gc(&fake, Duration::ZERO);
    let t0 = Instant::now();
    assert_eq!(
        gc.detect(t0).await.unwrap().1,
        ["sha256:a", "sha256:bb"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    // a's container is gone: a is unused now, but was used last, so it goes last.
    fake.with(|s| s.containers.retain(|c| !c.ends_with("a:1")));
    let outcome = gc.collect(t0 + Duration::from_secs(1)).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::ReachedLow {
            removed: digests(&["sha256:b", "sha256:c"])
        }
    );
}

/// imageMaximumGCAge: with the disk far below the high threshold, an image unused for
/// longer than the maximum age goes; one used within it, the image in use and the pinned
/// pause image stay; nothing goes before the collector has run for the maximum age.
#[tokio::test]
async fn images_unused_for_longer_than_the_maximum_age_go_whatever_the_disk_use() {
    let fake = node(90);
    fake.with(|s| s.containers.push("docker.io/library/a:1".into()));
    let mut gc = gc(&fake, Duration::ZERO);
    gc.policy.max_age = Duration::from_secs(600);
    let t0 = Instant::now();
    gc.detect(t0).await.unwrap();
    // a is last seen in use at t0 + 500 s.
    let outcome = gc.collect(t0 + Duration::from_secs(500)).await.unwrap();
    assert_eq!(outcome, Outcome::BelowHigh { used_percent: 10 });
    assert!(
        fake.0.lock().unwrap().removals.is_empty(),
        "the collector has not run for the maximum age yet"
    );
    fake.with(|s| s.containers.retain(|c| !c.ends_with("a:1")));
    let outcome = gc.collect(t0 + Duration::from_secs(700)).await.unwrap();
    assert_eq!(outcome, Outcome::BelowHigh { used_percent: 0 });
    let mut removed = fake.0.lock().unwrap().removals.clone();
    removed.sort();
    assert_eq!(
        removed,
        digests(&["sha256:b", "sha256:c"]),
        "never used: b and c"
    );
    gc.collect(t0 + Duration::from_secs(1101)).await.unwrap();
    assert_eq!(
        fake.names(),
        vec![
            "docker.io/library/busybox:1.36",
            "docker.io/library/busybox:other-tag",
            PAUSE,
        ],
        "a, last used at 500 s, goes after 1100 s; busybox in use and pause stay"
    );
}

#[tokio::test]
async fn without_a_maximum_age_unused_images_below_the_threshold_stay() {
    let fake = node(90);
    let mut gc = gc(&fake, Duration::ZERO);
    let t0 = Instant::now();
    gc.detect(t0).await.unwrap();
    gc.collect(t0 + Duration::from_secs(365 * 86400))
        .await
        .unwrap();
    assert!(fake.0.lock().unwrap().removals.is_empty());
}
