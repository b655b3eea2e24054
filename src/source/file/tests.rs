use super::*;
use crate::vocabulary::pod_source::CONFIG_SEEN_ANNOTATION;

/// Long enough that only inotify can explain a prompt update.
const NO_RESYNC: Duration = Duration::from_secs(3600);

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
    )
}

async fn next_update(rx: &mut mpsc::Receiver<SourceUpdate>) -> SourceUpdate {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an update within 10s")
        .expect("the source is running")
}

async fn assert_quiet(rx: &mut mpsc::Receiver<SourceUpdate>) {
    let extra = tokio::time::timeout(Duration::from_millis(400), rx.recv()).await;
    assert!(extra.is_err(), "unexpected update: {extra:?}");
}

fn names(update: &SourceUpdate) -> Vec<String> {
    update
        .pods
        .iter()
        .map(|p| p.pod.metadata.name.clone().unwrap())
        .collect()
}

fn uid_of(update: &SourceUpdate, name: &str) -> String {
    update
        .pods
        .iter()
        .find(|p| p.pod.metadata.name.as_deref() == Some(name))
        .and_then(|p| p.pod.metadata.uid.clone())
        .unwrap()
}

fn image_of(update: &SourceUpdate, name: &str) -> String {
    update
        .pods
        .iter()
        .find(|p| p.pod.metadata.name.as_deref() == Some(name))
        .and_then(|p| p.pod.spec.as_ref()?.containers[0].image.clone())
        .unwrap()
}

#[tokio::test]
async fn add_change_and_remove_through_inotify() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_file_source(dir.path().to_path_buf(), "node1".into(), NO_RESYNC, tx);

    let first = next_update(&mut rx).await;
    assert_eq!(first.source, SourceKind::File);
    assert!(
        first.pods.is_empty(),
        "an empty folder is announced as an empty set"
    );

    let web = dir.path().join("web.yaml");
    std::fs::write(&web, manifest("web", "nginx:1.27")).unwrap();
    let added = next_update(&mut rx).await;
    assert_eq!(names(&added), vec!["web-node1"]);
    assert_eq!(added.pods[0].origin, web.display().to_string());
    let annotations = added.pods[0].pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["kubernetes.io/config.source"], "file");
    assert!(annotations.contains_key(CONFIG_SEEN_ANNOTATION));
    let first_uid = uid_of(&added, "web-node1");

    // Ignored: a dotfile and a file of another type.
    std::fs::write(dir.path().join(".web.yaml.swp"), manifest("swap", "x")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), manifest("notes", "x")).unwrap();
    assert_quiet(&mut rx).await;

    // An edit is a new pod.
    std::fs::write(&web, manifest("web", "nginx:1.28")).unwrap();
    let changed = next_update(&mut rx).await;
    assert_eq!(names(&changed), vec!["web-node1"]);
    assert_eq!(image_of(&changed, "web-node1"), "nginx:1.28");
    assert_ne!(uid_of(&changed, "web-node1"), first_uid);

    // Atomic replace by rename, as many tools write files.
    let tmp = dir.path().join(".db.json.tmp");
    std::fs::write(
        &tmp,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db"},"spec":{"containers":[{"name":"db","image":"redis:7"}]}}"#,
    )
    .unwrap();
    std::fs::rename(&tmp, dir.path().join("db.json")).unwrap();
    let renamed = next_update(&mut rx).await;
    assert_eq!(names(&renamed), vec!["db-node1", "web-node1"]);

    std::fs::remove_file(&web).unwrap();
    let removed = next_update(&mut rx).await;
    assert_eq!(names(&removed), vec!["db-node1"]);

    task.abort();
}

/// The node e2e suite's MirrorPod "recreate" spec: a manifest removed and written again at
/// once (same content, so the same UID) is its pod removed, then added again, even when both
/// events are read together, as upstream's source handles each event in turn.
#[tokio::test]
async fn a_manifest_removed_and_written_again_at_once_is_removed_then_added() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let web = dir.path().join("web.yaml");
    let db = dir.path().join("db.yaml");
    std::fs::write(&web, manifest("web", "nginx:1.27")).unwrap();
    std::fs::write(&db, manifest("db", "redis:7")).unwrap();
    let task = spawn_file_source(dir.path().to_path_buf(), "node1".into(), NO_RESYNC, tx);
    let first = next_update(&mut rx).await;
    assert_eq!(names(&first), vec!["db-node1", "web-node1"]);
    let uid = uid_of(&first, "web-node1");

    std::fs::remove_file(&web).unwrap();
    std::fs::write(&web, manifest("web", "nginx:1.27")).unwrap();
    let removed = next_update(&mut rx).await;
    assert_eq!(names(&removed), vec!["db-node1"], "the other pod stays");
    let back = next_update(&mut rx).await;
    assert_eq!(names(&back), vec!["db-node1", "web-node1"]);
    assert_eq!(uid_of(&back, "web-node1"), uid, "the same pod");
    assert_quiet(&mut rx).await;

    task.abort();
}

#[tokio::test]
async fn broken_file_keeps_other_pods_and_its_last_good_pod() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), manifest("a", "busybox:1")).unwrap();
    std::fs::write(dir.path().join("b.yml"), manifest("b", "busybox:1")).unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: c\n",
    )
    .unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_file_source(dir.path().to_path_buf(), "node1".into(), NO_RESYNC, tx);

    let first = next_update(&mut rx).await;
    assert_eq!(
        names(&first),
        vec!["a-node1", "b-node1"],
        "the invalid file gives no pod"
    );
    let b_uid = uid_of(&first, "b-node1");

    // Break b: the set does not change, so nothing is sent.
    std::fs::write(
        dir.path().join("b.yml"),
        "apiVersion: v1\nkind: Pod\nspec: [\n",
    )
    .unwrap();
    assert_quiet(&mut rx).await;

    // A later change elsewhere shows b is still there with its last good pod.
    std::fs::write(dir.path().join("c.yaml"), manifest("c", "busybox:1")).unwrap();
    let next = next_update(&mut rx).await;
    assert_eq!(names(&next), vec!["a-node1", "b-node1", "c-node1"]);
    assert_eq!(uid_of(&next, "b-node1"), b_uid);
    assert_eq!(
        next.pods,
        {
            let mut expected = first.pods.clone();
            expected.push(next.pods[2].clone());
            expected
        },
        "unchanged pods keep their seen time"
    );

    // Fixing b with new content replaces its pod.
    std::fs::write(dir.path().join("b.yml"), manifest("b", "busybox:2")).unwrap();
    let fixed = next_update(&mut rx).await;
    assert_eq!(image_of(&fixed, "b-node1"), "busybox:2");
    assert_ne!(uid_of(&fixed, "b-node1"), b_uid);

    // Deleting a broken file's manifest removes its last good pod too.
    std::fs::write(dir.path().join("c.yaml"), "not: [valid").unwrap();
    assert_quiet(&mut rx).await;
    std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
    let gone = next_update(&mut rx).await;
    assert_eq!(names(&gone), vec!["a-node1", "b-node1"]);

    task.abort();
}

#[tokio::test]
async fn folder_appearing_later_is_picked_up() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("manifests");
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_file_source(dir.clone(), "node1".into(), Duration::from_millis(200), tx);

    let first = next_update(&mut rx).await;
    assert!(first.pods.is_empty(), "a missing folder is an empty set");

    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("late.yaml"), manifest("late", "busybox:1")).unwrap();
    let appeared = next_update(&mut rx).await;
    assert_eq!(names(&appeared), vec!["late-node1"]);

    // Once found, the folder is watched with inotify: a change shows up without the resync.
    std::fs::write(dir.join("more.yaml"), manifest("more", "busybox:1")).unwrap();
    let more = next_update(&mut rx).await;
    assert_eq!(names(&more), vec!["late-node1", "more-node1"]);

    // The folder going away empties the set; coming back restores it.
    std::fs::remove_dir_all(&dir).unwrap();
    let gone = next_update(&mut rx).await;
    assert!(gone.pods.is_empty());
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("late.yaml"), manifest("late", "busybox:1")).unwrap();
    let back = next_update(&mut rx).await;
    assert_eq!(names(&back), vec!["late-node1"]);
    assert_eq!(uid_of(&back, "late-node1"), uid_of(&appeared, "late-node1"));

    task.abort();
}

#[tokio::test]
async fn periodic_reread_without_events_finds_changes() {
    // The safety net: with the watch dropped, the period alone still finds new files.
    let dir = tempfile::tempdir().unwrap();
    let mut source = FileSource::new(dir.path().to_path_buf(), "n".into());
    assert_eq!(source.scan(), Some(Vec::new()));
    std::fs::write(dir.path().join("p.yaml"), manifest("p", "busybox:1")).unwrap();
    let pods = source.scan().unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(
        source.scan().unwrap(),
        pods,
        "an unchanged folder gives an identical set"
    );
}

#[tokio::test]
async fn a_single_manifest_file_path_works_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("only.yaml");
    std::fs::write(&file, manifest("only", "busybox:1")).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn_file_source(file.clone(), "node1".into(), NO_RESYNC, tx);
    assert_eq!(names(&next_update(&mut rx).await), vec!["only-node1"]);
    std::fs::write(&file, manifest("only", "busybox:2")).unwrap();
    assert_eq!(
        image_of(&next_update(&mut rx).await, "only-node1"),
        "busybox:2"
    );
    task.abort();
}

#[test]
fn manifest_names() {
    assert!(is_manifest_name(Path::new("/m/a.yaml")));
    assert!(is_manifest_name(Path::new("/m/a.yml")));
    assert!(is_manifest_name(Path::new("/m/a.json")));
    assert!(!is_manifest_name(Path::new("/m/.a.yaml")));
    assert!(!is_manifest_name(Path::new("/m/a.yaml.swp")));
    assert!(!is_manifest_name(Path::new("/m/a.txt")));
    assert!(!is_manifest_name(Path::new("/m/yaml")));
}

#[test]
fn pod_list_file_is_refused_by_name_and_the_others_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), manifest("a", "busybox:1")).unwrap();
    let list = dir.path().join("list.yaml");
    // Well-formed and valid as a PodList, so only the one-Pod-per-file rule refuses it.
    let list_body = format!(
        "apiVersion: v1\nkind: PodList\nitems:\n- {}\n",
        manifest("inlist", "busybox:1")
            .trim_end()
            .replace('\n', "\n  ")
    );
    assert!(
        matches!(decode_manifest(list_body.as_bytes()), Ok(Manifest::List(ref pods)) if pods.len() == 1),
        "the test's PodList must decode"
    );
    std::fs::write(&list, &list_body).unwrap();
    std::fs::write(dir.path().join("z.json"), manifest("z", "busybox:1")).unwrap();

    let mut source = FileSource::new(dir.path().to_path_buf(), "n".into());
    let err = source
        .read_pod(&list, list_body.as_bytes())
        .expect_err("a PodList in a manifest file is refused");
    let text = err.to_string();
    assert!(text.contains(&list.display().to_string()), "{text}");
    assert!(text.contains("PodList"), "{text}");

    let pods = source.scan().unwrap();
    let names: Vec<&str> = pods
        .iter()
        .map(|p| p.pod.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, vec!["a-n", "z-n"]);
}

/// A manifest that sets a UID which is not a plain name (it would name the pod's folder) or
/// an out-of-range deadline is refused with the file, the pod and the field; the other
/// manifests in the folder still load.
#[test]
fn unsafe_uid_and_absurd_numbers_are_refused_and_the_others_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), manifest("a", "busybox:1")).unwrap();
    let bad_uid = dir.path().join("b.yaml");
    let body = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  uid: ../../../etc\nspec:\n  containers:\n  - name: app\n    image: busybox\n";
    std::fs::write(&bad_uid, body).unwrap();
    let deadline = dir.path().join("c.yaml");
    let body2 = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: c\nspec:\n  activeDeadlineSeconds: 9223372036854775807\n  containers:\n  - name: app\n    image: busybox\n";
    std::fs::write(&deadline, body2).unwrap();

    let mut source = FileSource::new(dir.path().to_path_buf(), "n".into());
    let text = source
        .read_pod(&bad_uid, body.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with(&format!(
            "{}: invalid pod \"b\": metadata.uid: Invalid value: \"../../../etc\"",
            bad_uid.display()
        )),
        "{text}"
    );
    let text = source
        .read_pod(&deadline, body2.as_bytes())
        .unwrap_err()
        .to_string();
    assert_eq!(
        text,
        format!("{}: invalid pod \"c\": spec.activeDeadlineSeconds: Invalid value: 9223372036854775807: must be between 1 and 2147483647, inclusive", deadline.display())
    );
    let pods = source.scan().unwrap();
    let names: Vec<&str> = pods
        .iter()
        .map(|p| p.pod.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, vec!["a-n"]);
}
