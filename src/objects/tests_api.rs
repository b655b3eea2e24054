//! [`ApiObjects`] against the fake API server: watches per referenced object, reads from
//! their caches, tokens and their renewal. Time is tokio's paused clock (watches, grace)
//! or an injected wall clock (tokens).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::fake_api::{FakeApi, Seen, TokenAnswer};
use super::watched::{MAX_IDLE, RELEASE_GRACE};
use super::{ApiObjects, ClusterObjects, ObjectKind, TokenSpec};

fn pod(uid: &str, namespace: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{uid}"), "namespace": namespace, "uid": uid},
        "spec": spec
    }))
    .unwrap()
}

/// A pod mounting ConfigMap `cm` as a volume.
fn mounting(uid: &str, namespace: &str, cm: &str) -> Pod {
    pod(
        uid,
        namespace,
        json!({"containers": [{"name": "c", "image": "busybox"}],
               "volumes": [{"name": "v", "configMap": {"name": cm}}]}),
    )
}

fn config_map(namespace: &str, name: &str, value: &str) -> Value {
    json!({"kind": "ConfigMap", "apiVersion": "v1",
           "metadata": {"namespace": namespace, "name": name},
           "data": {"key": value}})
}

async fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_long(120, what, cond).await;
}

async fn wait_long(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn requests_to<'a>(seen: &'a [Seen], path: &'a str) -> impl Iterator<Item = &'a Seen> + 'a {
    seen.iter().filter(move |r| r.path == path)
}

async fn value(objects: &ApiObjects, namespace: &str, name: &str) -> String {
    let cm = objects.config_map(namespace, name).await.unwrap();
    cm.data.as_ref().unwrap()["key"].clone()
}

#[tokio::test(start_paused = true)]
async fn one_watch_per_object_shared_by_its_pods_and_stopped_after_the_last_leaves() {
    let (client, api) = FakeApi::start();
    api.put(config_map("ns", "cfg", "v1")).await;
    let objects = ApiObjects::new(client);

    objects.register_pod(&mounting("a", "ns", "cfg"));
    let env_ref = pod(
        "b",
        "ns",
        json!({"containers": [{"name": "c", "image": "busybox",
            "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "key"}}}]}]}),
    );
    objects.register_pod(&env_ref);
    // Passes register again and again; nothing changes.
    objects.register_pod(&env_ref);
    wait_for("the watch", || {
        api.open_watches("configmaps", "ns", "cfg") == 1
    })
    .await;
    assert!(objects.synced(ObjectKind::ConfigMap, "ns", "cfg"));

    let seen = api.requests();
    let to_cfgs: Vec<_> = requests_to(&seen, "/api/v1/namespaces/ns/configmaps").collect();
    assert_eq!(to_cfgs.len(), 2, "one list and one watch: {to_cfgs:?}");
    for r in &to_cfgs {
        assert_eq!(r.method, "GET");
        assert!(
            r.query.contains("fieldSelector=metadata.name%3Dcfg"),
            "{}",
            r.query
        );
    }
    assert!(
        !to_cfgs[0].is_watch() && to_cfgs[1].is_watch(),
        "{to_cfgs:?}"
    );

    // Read from the cache: no GET of the object.
    assert_eq!(value(&objects, "ns", "cfg").await, "v1");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps/cfg").count(),
        0
    );

    objects.unregister_pod("a");
    tokio::time::sleep(RELEASE_GRACE * 2).await;
    assert_eq!(
        api.open_watches("configmaps", "ns", "cfg"),
        1,
        "b still uses it"
    );
    assert_eq!(
        objects.watched(ObjectKind::ConfigMap),
        vec![("ns".to_string(), "cfg".to_string())]
    );

    objects.unregister_pod("b");
    wait_for("the watch to stop", || {
        api.open_watches("configmaps", "ns", "cfg") == 0
    })
    .await;
    assert!(objects.watched(ObjectKind::ConfigMap).is_empty());
    // Unreferenced, the object is asked for.
    assert_eq!(value(&objects, "ns", "cfg").await, "v1");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps/cfg").count(),
        1
    );
    let lists = requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps").count();
    assert_eq!(lists, 2, "no watch reopened");
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_drops_a_reference_releases_its_watch() {
    let (client, api) = FakeApi::start();
    api.put(config_map("ns", "old", "o")).await;
    api.put(config_map("ns", "new", "n")).await;
    let objects = ApiObjects::new(client);
    objects.register_pod(&mounting("a", "ns", "old"));
    wait_for("old's watch", || {
        api.open_watches("configmaps", "ns", "old") == 1
    })
    .await;
    // The pod object changes (same UID): its references are diffed.
    objects.register_pod(&mounting("a", "ns", "new"));
    wait_for("new's watch", || {
        api.open_watches("configmaps", "ns", "new") == 1
    })
    .await;
    wait_for("old's watch to stop", || {
        api.open_watches("configmaps", "ns", "old") == 0
    })
    .await;
    assert_eq!(
        objects.watched(ObjectKind::ConfigMap),
        vec![("ns".to_string(), "new".to_string())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_nobody_reads_stops_and_the_next_read_reopens_it() {
    let (client, api) = FakeApi::start();
    api.put(config_map("ns", "read", "r")).await;
    api.put(config_map("ns", "unread", "u")).await;
    let objects = ApiObjects::new(client);
    let p = pod(
        "a",
        "ns",
        json!({"containers": [{"name": "c", "image": "busybox",
            "envFrom": [{"configMapRef": {"name": "unread"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "read"}}]}),
    );
    objects.register_pod(&p);
    wait_for("the watches", || {
        api.open_watches("configmaps", "ns", "read") == 1
            && api.open_watches("configmaps", "ns", "unread") == 1
    })
    .await;
    // A volume is read every sync period; the env reference only when a container starts.
    let reader = async {
        loop {
            assert_eq!(value(&objects, "ns", "read").await, "r");
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    };
    let idle = wait_long(MAX_IDLE.as_secs() + 180, "the unread watch to stop", || {
        api.open_watches("configmaps", "ns", "unread") == 0
    });
    tokio::select! {
        _ = reader => unreachable!(),
        _ = idle => {}
    }
    assert_eq!(
        api.open_watches("configmaps", "ns", "read"),
        1,
        "read, kept"
    );
    assert_eq!(
        objects.watched(ObjectKind::ConfigMap).len(),
        2,
        "both referenced"
    );
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps/read").count(),
        0,
        "the read object came from its watch throughout"
    );

    // The next read asks the server (the cache may be stale) and reopens the watch.
    assert_eq!(value(&objects, "ns", "unread").await, "u");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps/unread").count(),
        1
    );
    wait_for("the watch again", || {
        api.open_watches("configmaps", "ns", "unread") == 1
    })
    .await;
    api.put(config_map("ns", "unread", "u2")).await;
    api.bookmark("ConfigMap", "ns", "unread").await;
    api.bookmark("ConfigMap", "ns", "unread").await;
    assert_eq!(value(&objects, "ns", "unread").await, "u2");
}

#[tokio::test(start_paused = true)]
async fn an_update_through_the_watch_is_what_the_next_read_returns() {
    let (client, api) = FakeApi::start();
    api.put(config_map("ns", "cfg", "v1")).await;
    let objects = ApiObjects::new(client);
    objects.register_pod(&mounting("a", "ns", "cfg"));
    wait_for("the watch", || {
        api.open_watches("configmaps", "ns", "cfg") == 1
    })
    .await;
    assert_eq!(value(&objects, "ns", "cfg").await, "v1");

    api.put(config_map("ns", "cfg", "v2")).await;
    api.bookmark("ConfigMap", "ns", "cfg").await;
    api.bookmark("ConfigMap", "ns", "cfg").await;
    assert_eq!(value(&objects, "ns", "cfg").await, "v2");

    api.delete("ConfigMap", "ns", "cfg").await;
    api.bookmark("ConfigMap", "ns", "cfg").await;
    api.bookmark("ConfigMap", "ns", "cfg").await;
    let err = objects.config_map("ns", "cfg").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.to_string(), "configmap \"cfg\" not found");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/configmaps/cfg").count(),
        0,
        "every read came from the watch"
    );
}

#[tokio::test(start_paused = true)]
async fn a_changed_object_wakes_the_pods_that_reference_it_and_no_others() {
    let (client, api) = FakeApi::start();
    api.put(config_map("ns", "cfg", "v1")).await;
    api.put(config_map("ns", "other", "o1")).await;
    let (tx, mut woken) = tokio::sync::mpsc::channel(16);
    let objects = ApiObjects::new(client).wake_pods_through(tx);
    objects.register_pod(&mounting("a", "ns", "cfg"));
    objects.register_pod(&mounting("b", "ns", "other"));
    wait_for("the watches", || {
        api.open_watches("configmaps", "ns", "cfg") == 1
            && api.open_watches("configmaps", "ns", "other") == 1
    })
    .await;
    assert_eq!(value(&objects, "ns", "cfg").await, "v1");
    // The first listing wakes nobody: the pods' passes read the object anyway.
    assert!(woken.try_recv().is_err());

    api.put(config_map("ns", "cfg", "v2")).await;
    let uid = tokio::time::timeout(Duration::from_secs(60), woken.recv())
        .await
        .expect("a wake-up for the pod mounting cfg")
        .unwrap();
    assert_eq!(uid, "a");
    assert_eq!(value(&objects, "ns", "cfg").await, "v2");

    api.delete("ConfigMap", "ns", "cfg").await;
    let uid = tokio::time::timeout(Duration::from_secs(60), woken.recv())
        .await
        .expect("a wake-up for the deletion")
        .unwrap();
    assert_eq!(uid, "a");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(woken.try_recv().is_err(), "b references neither change");
}

#[tokio::test(start_paused = true)]
async fn a_missing_object_reads_not_found_until_it_is_created() {
    let (client, api) = FakeApi::start();
    let objects = ApiObjects::new(client);
    let p = pod(
        "a",
        "ns",
        json!({"containers": [{"name": "c", "image": "busybox"}],
               "volumes": [{"name": "v", "secret": {"secretName": "later"}}]}),
    );
    objects.register_pod(&p);
    // Before the watch has listed, a read asks the server: NotFound all the same.
    let err = objects.secret("ns", "later").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    wait_for("the watch", || {
        api.open_watches("secrets", "ns", "later") == 1
    })
    .await;
    let gets_before = requests_to(&api.requests(), "/api/v1/namespaces/ns/secrets/later").count();
    let err = objects.secret("ns", "later").await.unwrap_err();
    assert_eq!(err.to_string(), "secret \"later\" not found");

    api.put(json!({"kind": "Secret", "apiVersion": "v1",
                   "metadata": {"namespace": "ns", "name": "later"},
                   "data": {"key": "aGk="}}))
        .await;
    api.bookmark("Secret", "ns", "later").await;
    api.bookmark("Secret", "ns", "later").await;
    let s = objects.secret("ns", "later").await.unwrap();
    assert_eq!(s.data.as_ref().unwrap()["key"].0, b"hi");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/ns/secrets/later").count(),
        gets_before,
        "the watch answered once it had listed"
    );
}

#[tokio::test(start_paused = true)]
async fn an_immutable_object_stops_being_watched_once_seen() {
    let (client, api) = FakeApi::start();
    let mut cm = config_map("ns", "frozen", "v1");
    cm["immutable"] = json!(true);
    api.put(cm.clone()).await;
    let objects = ApiObjects::new(client);
    objects.register_pod(&mounting("a", "ns", "frozen"));
    wait_for("the list", || {
        objects.synced(ObjectKind::ConfigMap, "ns", "frozen")
    })
    .await;
    // Long enough for a watch to have been opened, were one going to be.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let seen = api.requests();
    let to_cfgs: Vec<_> = requests_to(&seen, "/api/v1/namespaces/ns/configmaps").collect();
    assert_eq!(to_cfgs.len(), 1, "a list and no watch: {to_cfgs:?}");
    assert!(!to_cfgs[0].is_watch());

    // The data cannot change (the server would refuse); what was seen keeps being served
    // without a request while the pod references it.
    cm["metadata"]["labels"] = json!({"touched": "yes"});
    api.put(cm).await;
    let read = objects.config_map("ns", "frozen").await.unwrap();
    assert_eq!(read.data.as_ref().unwrap()["key"], "v1");
    assert!(read.metadata.labels.is_none(), "the cached copy");
    assert_eq!(api.requests().len(), seen.len(), "no request for the read");
    assert_eq!(objects.watched(ObjectKind::ConfigMap).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_cache_never_serves_another_namespaces_object() {
    let (client, api) = FakeApi::start();
    api.put(config_map("a", "cfg", "from-a")).await;
    api.put(config_map("b", "cfg", "from-b")).await;
    let objects = ApiObjects::new(client);
    objects.register_pod(&mounting("p", "a", "cfg"));
    wait_for("the watch", || {
        api.open_watches("configmaps", "a", "cfg") == 1
    })
    .await;

    assert_eq!(value(&objects, "a", "cfg").await, "from-a");
    assert_eq!(value(&objects, "b", "cfg").await, "from-b");
    // A watch that answered with b's object (a server bug) changes nothing.
    let mut stray = config_map("b", "cfg", "stray");
    stray["metadata"]["resourceVersion"] = json!("100");
    let modified = json!({"type": "MODIFIED", "object": stray.clone()});
    api.push("configmaps", "a", "cfg", modified).await;
    api.bookmark("ConfigMap", "a", "cfg").await;
    api.bookmark("ConfigMap", "a", "cfg").await;
    assert_eq!(value(&objects, "a", "cfg").await, "from-a");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/a/configmaps").count(),
        2,
        "read from the same watch (no relist)"
    );
    let deleted = json!({"type": "DELETED", "object": stray});
    api.push("configmaps", "a", "cfg", deleted).await;
    api.bookmark("ConfigMap", "a", "cfg").await;
    api.bookmark("ConfigMap", "a", "cfg").await;
    assert_eq!(value(&objects, "a", "cfg").await, "from-a");
    assert_eq!(
        requests_to(&api.requests(), "/api/v1/namespaces/a/configmaps/cfg").count(),
        0,
        "a's reads came from the cache"
    );
}

#[tokio::test]
async fn a_token_is_renewed_at_four_fifths_of_its_life_and_kept_while_renewal_fails() {
    let (client, api) = FakeApi::start();
    let t0: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    let now = Arc::new(Mutex::new(t0));
    let clock = now.clone();
    let objects = ApiObjects::with_clock(client, Arc::new(move || *clock.lock().unwrap()));
    let set = |t: DateTime<Utc>| *now.lock().unwrap() = t;
    let minutes = chrono::Duration::minutes;
    let p = pod(
        "uid-1",
        "ns",
        json!({"containers": [{"name": "c", "image": "busybox"}]}),
    );
    objects.register_pod(&p);
    let spec = TokenSpec {
        service_account: "default".into(),
        audience: String::new(),
        expiration_seconds: 3600,
    };
    let token_posts = || {
        requests_to(
            &api.requests(),
            "/api/v1/namespaces/ns/serviceaccounts/default/token",
        )
        .count()
    };

    api.script_token(TokenAnswer::Issue {
        token: "tok-1".into(),
        expires: t0 + minutes(60),
    });
    let t = objects.service_account_token(&p, &spec).await.unwrap();
    assert_eq!(t.token, "tok-1");
    let post = &api.requests()[0];
    assert_eq!(post.method, "POST");
    assert_eq!(post.body["spec"]["expirationSeconds"], 3600);
    assert_eq!(
        post.body["spec"]["boundObjectRef"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "pod-uid-1", "uid": "uid-1"})
    );

    set(t0 + minutes(47));
    let t = objects.service_account_token(&p, &spec).await.unwrap();
    assert_eq!(
        (t.token.as_str(), token_posts()),
        ("tok-1", 1),
        "still fresh"
    );

    set(t0 + minutes(48));
    api.script_token(TokenAnswer::Issue {
        token: "tok-2".into(),
        expires: t0 + minutes(108),
    });
    let t = objects.service_account_token(&p, &spec).await.unwrap();
    assert_eq!(
        (t.token.as_str(), token_posts()),
        ("tok-2", 2),
        "renewed at 80 %"
    );

    set(t0 + minutes(100));
    api.script_token(TokenAnswer::Fail(500));
    let t = objects.service_account_token(&p, &spec).await.unwrap();
    assert_eq!(
        (t.token.as_str(), token_posts()),
        ("tok-2", 3),
        "renewal failed: the old token, still valid"
    );

    set(t0 + minutes(109));
    api.script_token(TokenAnswer::Fail(500));
    let err = objects.service_account_token(&p, &spec).await.unwrap_err();
    assert!(
        err.to_string().contains("service account ns/default"),
        "{err}"
    );

    // A pod gone and back (same UID) asks afresh.
    set(t0 + minutes(100));
    objects.unregister_pod("uid-1");
    api.script_token(TokenAnswer::Issue {
        token: "tok-3".into(),
        expires: t0 + minutes(160),
    });
    let t = objects.service_account_token(&p, &spec).await.unwrap();
    assert_eq!((t.token.as_str(), token_posts()), ("tok-3", 5));
}
