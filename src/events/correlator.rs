//! What happens to an Event before it is written (client-go's EventCorrelator, the
//! kubelet's defaults): similar events are combined (the aggregator), a repeat of a written
//! event becomes a count on it (the observer), and each source and object gets a token
//! bucket of events (the spam filter), so a pod failing in a loop cannot flood the API
//! server or bury its other events.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::event::event_name;
use super::lru::LruCache;
use super::token_bucket::TokenBucket;

/// Entries in each of the three caches (upstream's maxLruCacheEntries).
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// Similar events (differing only in message) within the interval before they are combined.
pub(crate) const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long a group of similar events stays open after its last event.
pub(crate) const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Events a source may write about one object at once…
pub(crate) const SPAM_BURST: u32 = 25;
/// …and then one more per this interval (upstream's qps of 1/300).
pub(crate) const SPAM_REFILL: Duration = Duration::from_secs(300);

const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What to do with an Event after correlation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Correlated {
    /// The spam filter refused it.
    Skip,
    /// A new Event.
    Create(Event),
    /// A repeat: `patch` (strategic merge) sets the count, last time and message of the
    /// Event already written under `event`'s name; `event` is the whole Event to create if
    /// that one is gone.
    Patch {
        event: Event,
        patch: serde_json::Value,
    },
}

/// The correlator's state, owned by the sink's task.
#[derive(Debug)]
pub(crate) struct Correlator {
    spam: LruCache<TokenBucket>,
    groups: LruCache<SimilarEvents>,
    observed: LruCache<Observation>,
}

impl Default for Correlator {
    fn default() -> Correlator {
        Correlator {
            spam: LruCache::new(CACHE_ENTRIES),
            groups: LruCache::new(CACHE_ENTRIES),
            observed: LruCache::new(CACHE_ENTRIES),
        }
    }
}

impl Correlator {
    /// Correlates `event` seen at `now` (`wall` names and stamps a combined event). The
    /// order is upstream's: aggregate, observe, then filter, so an event the filter drops is
    /// still counted and a later repeat reports the true count.
    pub(crate) fn correlate(&mut self, event: Event, now: Instant, wall: Timestamp) -> Correlated {
        let (event, key) = self.aggregate(event, now, wall);
        let (event, patch) = self.observe(event, key);
        if !self.allow(&event, now) {
            return Correlated::Skip;
        }
        match patch {
            Some(patch) => Correlated::Patch { event, patch },
            None => Correlated::Create(event),
        }
    }

    /// Remembers the Event as the API server returned it (its name and resourceVersion), so
    /// the next repeat patches it.
    pub(crate) fn update_state(&mut self, event: &Event) {
        self.observed
            .insert(event_key(event), Observation::of(event));
    }

    /// Groups events differing only in message; from the tenth distinct message within the
    /// interval on, the event is replaced by one combined event per group.
    fn aggregate(&mut self, event: Event, now: Instant, wall: Timestamp) -> (Event, String) {
        let key = event_key(&event);
        let group_key = aggregate_key(&event);
        let group = self
            .groups
            .get_or_insert_with(&group_key, || SimilarEvents {
                messages: HashSet::new(),
                last: now,
            });
        if now.duration_since(group.last) > AGGREGATE_INTERVAL {
            group.messages.clear();
        }
        group
            .messages
            .insert(event.message.clone().unwrap_or_default());
        group.last = now;
        if group.messages.len() < AGGREGATE_MAX_EVENTS {
            return (event, key);
        }
        // Keep the group just under the limit, so every new message makes it combine again.
        if let Some(any) = group.messages.iter().next().cloned() {
            group.messages.remove(&any);
        }
        let combined = Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(event_name(
                    event.involved_object.name.as_deref().unwrap_or_default(),
                    wall,
                )),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(wall)),
            last_timestamp: Some(Time(wall)),
            message: Some(format!(
                "{COMBINED_PREFIX}{}",
                event.message.as_deref().unwrap_or_default()
            )),
            // Upstream's combined event carries the object, type, reason and source only
            // (no reportingComponent/Instance); so does ours.
            involved_object: event.involved_object.clone(),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            ..Event::default()
        };
        (combined, group_key)
    }

    /// Turns a repeat of an event already seen under `key` into a count on it.
    fn observe(&mut self, mut event: Event, key: String) -> (Event, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.observed.get_mut(&key).filter(|o| o.count > 0) {
            event.metadata.name = Some(last.name.clone());
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            patch = Some(repeat_patch(&event));
        }
        self.observed.insert(key, Observation::of(&event));
        (event, patch)
    }

    /// The spam filter: true while the event's source and object have a token left.
    fn allow(&mut self, event: &Event, now: Instant) -> bool {
        self.spam
            .get_or_insert_with(&spam_key(event), || {
                TokenBucket::full(SPAM_BURST, SPAM_REFILL, now)
            })
            .take(now)
    }
}

/// The patch upstream sends for a repeat: the two-way strategic merge diff from the Event
/// with count 0, the epoch as last time and no message to the Event, which is these three
/// fields (a message only when there is one).
fn repeat_patch(event: &Event) -> serde_json::Value {
    let mut patch = serde_json::Map::new();
    patch.insert("count".to_string(), event.count.unwrap_or(1).into());
    if let Some(last) = &event.last_timestamp {
        patch.insert(
            "lastTimestamp".to_string(),
            serde_json::to_value(last).unwrap_or_default(),
        );
    }
    if let Some(message) = event.message.as_deref().filter(|m| !m.is_empty()) {
        patch.insert("message".to_string(), message.into());
    }
    serde_json::Value::Object(patch)
}

/// Keys join their fields with a NUL, which no field holds, so two different events cannot
/// share a key (upstream joins them with nothing).
fn join(fields: &[Option<&str>]) -> String {
    fields
        .iter()
        .map(|f| f.unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\0")
}

fn source_and_object(event: &Event) -> [Option<&str>; 7] {
    let source = event.source.as_ref();
    let object = &event.involved_object;
    [
        source.and_then(|s| s.component.as_deref()),
        source.and_then(|s| s.host.as_deref()),
        object.kind.as_deref(),
        object.namespace.as_deref(),
        object.name.as_deref(),
        object.uid.as_deref(),
        object.api_version.as_deref(),
    ]
}

/// An event exactly: source, object (with field path), type, reason and message.
fn event_key(event: &Event) -> String {
    let mut fields = source_and_object(event).to_vec();
    fields.extend([
        event.involved_object.field_path.as_deref(),
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.message.as_deref(),
    ]);
    join(&fields)
}

/// Similar events: all but the message (and the field path, as upstream).
fn aggregate_key(event: &Event) -> String {
    let mut fields = source_and_object(event).to_vec();
    fields.extend([
        event.type_.as_deref(),
        event.reason.as_deref(),
        event.reporting_component.as_deref(),
        event.reporting_instance.as_deref(),
    ]);
    join(&fields)
}

/// One source and object.
fn spam_key(event: &Event) -> String {
    join(&source_and_object(event))
}

/// The messages of one group of similar events and when the last one came.
#[derive(Debug)]
struct SimilarEvents {
    messages: HashSet<String>,
    last: Instant,
}

/// An Event as last written or about to be.
#[derive(Debug)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

impl Observation {
    fn of(event: &Event) -> Observation {
        Observation {
            count: event.count.unwrap_or(0),
            first_timestamp: event.first_timestamp.clone(),
            name: event.metadata.name.clone().unwrap_or_default(),
            resource_version: event.metadata.resource_version.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::event::{make_event, node_reference, pod_reference};
    use crate::events::EventType;
    use k8s_openapi::api::core::v1::Pod;

    fn pod() -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".to_string());
        pod.metadata.namespace = Some("team".to_string());
        pod.metadata.uid = Some("u-1".to_string());
        pod
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::new(1_700_000_000 + second, 0).unwrap()
    }

    fn pod_event(reason: &str, message: &str, second: i64) -> Event {
        make_event(
            pod_reference(&pod(), Some("spec.containers{app}")),
            "n1",
            EventType::Warning,
            reason,
            message.to_string(),
            at(second),
        )
    }

    fn created(c: Correlated) -> Event {
        match c {
            Correlated::Create(e) => e,
            other => panic!("expected a new event, got {other:?}"),
        }
    }

    #[test]
    fn a_repeat_patches_the_count_of_the_event_the_server_returned() {
        let mut c = Correlator::default();
        let now = Instant::now();
        let first = created(c.correlate(pod_event("BackOff", "m", 0), now, at(0)));
        let mut stored = first.clone();
        stored.metadata.resource_version = Some("41".to_string());
        c.update_state(&stored);

        match c.correlate(pod_event("BackOff", "m", 7), now, at(7)) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.metadata.name, first.metadata.name);
                assert_eq!(event.metadata.resource_version.as_deref(), Some("41"));
                assert_eq!(event.first_timestamp, first.first_timestamp);
                assert_eq!(event.count, Some(2));
                assert_eq!(
                    patch,
                    serde_json::json!({
                        "count": 2,
                        "lastTimestamp": "2023-11-14T22:13:27Z",
                        "message": "m",
                    })
                );
            }
            other => panic!("expected a patch, got {other:?}"),
        }
    }

    #[test]
    fn the_tenth_distinct_message_is_combined_and_later_ones_count_on_it() {
        let mut c = Correlator::default();
        let now = Instant::now();
        for i in 0..9 {
            let e = created(c.correlate(pod_event("Failed", &format!("m{i}"), i), now, at(i)));
            assert_eq!(e.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        let combined = created(c.correlate(pod_event("Failed", "m9", 9), now, at(9)));
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert_eq!(combined.reason.as_deref(), Some("Failed"));
        assert_eq!(combined.count, Some(1));
        match c.correlate(pod_event("Failed", "m10", 10), now, at(10)) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.metadata.name, combined.metadata.name);
                assert_eq!(patch["count"], 2);
                assert_eq!(patch["message"], "(combined from similar events): m10");
            }
            other => panic!("expected a patch of the combined event, got {other:?}"),
        }
        // Another reason is another group.
        let other = created(c.correlate(pod_event("Killing", "k", 11), now, at(11)));
        assert_eq!(other.message.as_deref(), Some("k"));
    }

    #[test]
    fn similar_events_more_than_the_interval_apart_start_a_new_group() {
        let mut c = Correlator::default();
        let start = Instant::now();
        for i in 0..9 {
            created(c.correlate(pod_event("Failed", &format!("m{i}"), i), start, at(i)));
        }
        let later = start + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let e = created(c.correlate(pod_event("Failed", "m9", 700), later, at(700)));
        assert_eq!(e.message.as_deref(), Some("m9"));
    }

    #[test]
    fn an_object_gets_a_burst_of_25_then_one_event_per_five_minutes() {
        let mut c = Correlator::default();
        let start = Instant::now();
        // Distinct reasons: neither combined nor counted, so only the filter decides.
        for i in 0..25 {
            created(c.correlate(pod_event(&format!("R{i}"), "m", i), start, at(i)));
        }
        assert_eq!(
            c.correlate(pod_event("R25", "m", 25), start, at(25)),
            Correlated::Skip
        );
        // Another object has its own bucket.
        let node = make_event(
            node_reference("n1"),
            "n1",
            EventType::Normal,
            "R",
            "m".to_string(),
            at(25),
        );
        created(c.correlate(node, start, at(25)));

        let almost = start + SPAM_REFILL - Duration::from_millis(1);
        assert_eq!(
            c.correlate(pod_event("R26", "m", 299), almost, at(299)),
            Correlated::Skip
        );
        let refilled = start + SPAM_REFILL;
        created(c.correlate(pod_event("R27", "m", 300), refilled, at(300)));
        assert_eq!(
            c.correlate(pod_event("R28", "m", 300), refilled, at(300)),
            Correlated::Skip
        );
    }

    #[test]
    fn dropped_repeats_still_count() {
        let mut c = Correlator::default();
        let start = Instant::now();
        for i in 0..25 {
            created(c.correlate(pod_event(&format!("R{i}"), "m", 0), start, at(0)));
        }
        let first = created(c.correlate(pod_event("BackOff", "m", 0), start + SPAM_REFILL, at(0)));
        assert_eq!(
            c.correlate(pod_event("BackOff", "m", 1), start + SPAM_REFILL, at(1)),
            Correlated::Skip
        );
        match c.correlate(pod_event("BackOff", "m", 2), start + SPAM_REFILL * 2, at(2)) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.metadata.name, first.metadata.name);
                assert_eq!(patch["count"], 3);
            }
            other => panic!("expected a patch, got {other:?}"),
        }
    }
}
