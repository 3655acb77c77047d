//! Kubernetes Events from one shared recorder (so the recorder's de-duplication works across
//! reconciles), and an optional timeline of the same events stamped with the controller's clock, which
//! `capi-lb simulate` prints.

use std::sync::{Arc, Mutex, PoisonError};

use capi_lb_api::constants::CONTROLLER_NAME;
use capi_lb_providers::clock::SharedClock;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

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
    recorder: Recorder,
    timeline: Option<Arc<Mutex<Vec<TimelineEntry>>>>,
    clock: SharedClock,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl EventSink {
    /// A sink publishing through `client` as `capi-lb` (instance `instance`, e.g. the pod name).
    pub fn new(client: kube::Client, instance: Option<String>, clock: SharedClock) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
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
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(truncate(message, 1024)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            tracing::warn!(error = %e, reason, "could not publish event");
        }
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
