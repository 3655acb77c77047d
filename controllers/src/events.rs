//! Kubernetes Events (events.k8s.io/v1) from one shared sink, so that a repeat is recognised across
//! reconciles, and an optional timeline of the same events stamped with the controller's clock, which
//! `capi-lb simulate` prints.
//!
//! A repeat (same object, type, reason, action and note within [`REPEAT_WINDOW`]) updates the first
//! Event's `series` instead of creating another, as client-go's recorder does. The sink remembers
//! only what it needs to patch that series: a hash of the repeat key, the Event's name and namespace,
//! its count and when it was last seen (about 100 bytes an Event). kube-runtime's `Recorder` keeps
//! every Event whole for six minutes and scans them all at each publication; with 1,000 LoadBalancers
//! converging (six Events each) that was 35 MB of a 44 MB heap peak. It also leaves the note out of
//! its key, so a different note of the same reason became a repeat of the first one's text.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capi_lb_api::constants::CONTROLLER_NAME;
use capi_lb_providers::clock::SharedClock;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};

/// How long a published Event is remembered, so that a repeat updates its series (kube-runtime's
/// and client-go's window).
pub const REPEAT_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// At most this many Events are remembered; past it, a new Event is still published, it only cannot
/// be recognised when it repeats.
const REMEMBERED: usize = 16_384;

/// How often forgotten Events are swept out (rather than at every publication).
const SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(30);

/// One entry of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// When (controller clock).
    pub time: Timestamp,
    /// `Kind/name` of the object the event is about.
    pub object: String,
    /// True for Warning events.
    pub warning: bool,
    /// Event reason.
    pub reason: String,
    /// Event message.
    pub message: String,
}

/// Where the controllers send Events.
#[derive(Clone)]
pub struct EventSink {
    client: kube::Client,
    /// `reportingInstance`: the pod's name, else the controller's.
    instance: String,
    published: Arc<Mutex<Published>>,
    timeline: Option<Arc<Mutex<Vec<TimelineEntry>>>>,
    clock: SharedClock,
}

/// What the sink remembers of an Event it published.
#[derive(Debug)]
struct Remembered {
    namespace: Box<str>,
    name: Box<str>,
    count: i32,
    last: Timestamp,
}

/// The Events published within [`REPEAT_WINDOW`], by a hash of their repeat key.
#[derive(Debug)]
struct Published {
    hasher: RandomState,
    events: HashMap<u64, Remembered>,
    swept: Timestamp,
}

impl Published {
    fn new(now: Timestamp) -> Self {
        Self {
            hasher: RandomState::new(),
            events: HashMap::new(),
            swept: now,
        }
    }

    fn key(&self, object: &ObjectReference, event: &Event) -> u64 {
        let mut h = self.hasher.build_hasher();
        (
            &object.api_version,
            &object.kind,
            &object.namespace,
            &object.name,
            &object.uid,
        )
            .hash(&mut h);
        (&event.type_, &event.reason, &event.action, &event.note).hash(&mut h);
        h.finish()
    }

    /// Forget what is past the window, at most every [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Timestamp) {
        if now.duration_since(self.swept) < SWEEP_EVERY {
            return;
        }
        self.swept = now;
        self.events
            .retain(|_, e| now.duration_since(e.last) < REPEAT_WINDOW);
    }

    /// The series to patch when `key` repeats an Event still remembered (counting it).
    fn repeat(&mut self, key: u64, now: Timestamp) -> Option<(Box<str>, Box<str>, i32)> {
        self.sweep(now);
        let e = self.events.get_mut(&key)?;
        if now.duration_since(e.last) >= REPEAT_WINDOW {
            return None;
        }
        e.count += 1;
        e.last = now;
        Some((e.namespace.clone(), e.name.clone(), e.count))
    }

    fn remember(&mut self, key: u64, namespace: &str, name: &str, now: Timestamp) {
        if self.events.len() >= REMEMBERED && !self.events.contains_key(&key) {
            return;
        }
        self.events.insert(
            key,
            Remembered {
                namespace: namespace.into(),
                name: name.into(),
                count: 1,
                last: now,
            },
        );
    }

    fn forget(&mut self, key: u64) {
        self.events.remove(&key);
    }
}

/// A name for a new Event about `object`: its name and a hex timestamp in nanoseconds, as
/// kube-runtime and client-go name theirs, strictly increasing within the process so that two Events
/// of one instant do not collide.
fn event_name(object: &str, now: Timestamp) -> String {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let nanos = u64::try_from(now.as_nanosecond()).unwrap_or_default();
    let mut stamp = nanos;
    let _ = LAST.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
        stamp = nanos.max(last.saturating_add(1));
        Some(stamp)
    });
    format!("{object}.{stamp:x}")
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl EventSink {
    /// A sink publishing through `client` as `capi-lb` (instance `instance`, e.g. the pod name).
    pub fn new(client: kube::Client, instance: Option<String>, clock: SharedClock) -> Self {
        Self {
            client,
            instance: instance.unwrap_or_else(|| CONTROLLER_NAME.to_string()),
            published: Arc::new(Mutex::new(Published::new(Timestamp::now()))),
            timeline: None,
            clock,
        }
    }

    /// Also record every event in a timeline.
    pub fn with_timeline(mut self) -> Self {
        self.timeline = Some(Arc::new(Mutex::new(Vec::new())));
        self
    }

    /// The timeline so far (empty without [`EventSink::with_timeline`]).
    pub fn timeline(&self) -> Vec<TimelineEntry> {
        self.timeline
            .as_ref()
            .map(|t| t.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .unwrap_or_default()
    }

    /// Publish an event about `object`. Failures are logged, never propagated: an Event that cannot
    /// be written must not fail a reconcile.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        message: String,
    ) {
        if let Some(timeline) = &self.timeline {
            timeline
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(TimelineEntry {
                    time: self.clock.now(),
                    object: format!(
                        "{}/{}",
                        object.kind.as_deref().unwrap_or_default(),
                        object.name.as_deref().unwrap_or_default()
                    ),
                    warning,
                    reason: reason.to_string(),
                    message: message.clone(),
                });
        }
        if warning {
            tracing::warn!(object = ?object.name, reason, "{message}");
        } else {
            tracing::info!(object = ?object.name, reason, "{message}");
        }
        let event = Event {
            type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
            reason: Some(reason.to_string()),
            action: Some(action.to_string()),
            note: Some(truncate(message, 1024)),
            ..Event::default()
        };
        if let Err(e) = self.send(object, event).await {
            tracing::warn!(error = %e, reason, "could not publish event");
        }
    }

    /// Create the Event, or count a repeat in the series of the one it repeats.
    async fn send(&self, object: &ObjectReference, mut event: Event) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let (key, repeat) = {
            let mut published = self
                .published
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let key = published.key(object, &event);
            (key, published.repeat(key, now))
        };
        if let Some((namespace, name, count)) = repeat {
            let series =
                serde_json::json!({"series": {"count": count, "lastObservedTime": MicroTime(now)}});
            let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (the apiserver's event TTL, a deleted namespace): a new Event.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    self.forget(key);
                    return Err(e);
                }
            }
        }
        // Cluster-scoped objects' Events go to `default`, as kube-runtime's and client-go's do.
        let namespace = object.namespace.as_deref().unwrap_or("default");
        let name = event_name(object.name.as_deref().unwrap_or(CONTROLLER_NAME), now);
        event.metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        };
        event.event_time = Some(MicroTime(now));
        event.regarding = Some(object.clone());
        event.reporting_controller = Some(CONTROLLER_NAME.to_string());
        event.reporting_instance = Some(self.instance.clone());
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        match events.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.published
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remember(key, namespace, &name, now);
                Ok(())
            }
            Err(e) => {
                self.forget(key);
                Err(e)
            }
        }
    }

    fn forget(&self, key: u64) {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget(key);
    }
}

/// Event notes are limited to 1 kB by the API.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max.saturating_sub(3);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("loadbalancer.cluster.x-k8s.io/v1alpha1".into()),
            kind: Some("LoadBalancer".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: Some("Normal".into()),
            reason: Some(reason.into()),
            action: Some("Reconcile".into()),
            note: Some(note.into()),
            ..Event::default()
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_repeat_within_the_window_counts_in_the_first_events_series() {
        let mut p = Published::new(at(0));
        let key = p.key(&object("a", "u1"), &event("Ready", "ready at x"));
        assert_eq!(p.repeat(key, at(0)), None);
        p.remember(key, "ns", "a.1", at(0));
        assert_eq!(p.repeat(key, at(10)), Some(("ns".into(), "a.1".into(), 2)));
        // The window runs from the last time it was seen.
        assert_eq!(p.repeat(key, at(350)), Some(("ns".into(), "a.1".into(), 3)));
        assert_eq!(
            p.repeat(key, at(350 + 359)),
            Some(("ns".into(), "a.1".into(), 4))
        );
        assert_eq!(p.repeat(key, at(709 + 360)), None, "past the window");
        assert!(p.events.is_empty(), "swept out when it was looked up");
    }

    #[test]
    fn another_note_object_or_reason_is_not_a_repeat() {
        let p = Published::new(at(0));
        let first = p.key(&object("a", "u1"), &event("MembersChanged", "added m0"));
        for other in [
            p.key(&object("a", "u1"), &event("MembersChanged", "removed m0")),
            p.key(&object("a", "u1"), &event("Ready", "added m0")),
            p.key(&object("b", "u1"), &event("MembersChanged", "added m0")),
            // The same name, recreated.
            p.key(&object("a", "u2"), &event("MembersChanged", "added m0")),
        ] {
            assert_ne!(first, other);
        }
        assert_eq!(
            first,
            p.key(&object("a", "u1"), &event("MembersChanged", "added m0"))
        );
    }

    #[test]
    fn forgotten_events_are_swept_and_the_memory_is_bounded() {
        let mut p = Published::new(at(0));
        for i in 0..REMEMBERED + 10 {
            let key = p.key(&object(&format!("lb-{i}"), "u"), &event("Ready", "r"));
            p.remember(key, "ns", &format!("lb-{i}.1"), at(0));
        }
        assert_eq!(p.events.len(), REMEMBERED, "no more than REMEMBERED");
        // A lookup within SWEEP_EVERY of the last sweep does not scan.
        let key = p.key(&object("x", "u"), &event("Ready", "r"));
        assert_eq!(p.repeat(key, at(20)), None);
        assert_eq!(p.events.len(), REMEMBERED);
        // Past the window, the next lookup sweeps everything out.
        assert_eq!(p.repeat(key, at(400)), None);
        assert!(p.events.is_empty());
    }

    #[test]
    fn names_of_one_instant_differ() {
        let now = at(0);
        let names: std::collections::BTreeSet<String> =
            (0..100).map(|_| event_name("lb", now)).collect();
        assert_eq!(names.len(), 100);
        assert!(names.iter().all(|n| n.starts_with("lb.")));
    }
}
