//! Watches (`?watch=true`): a stream of newline-separated `{"type": ..., "object": ...}` events, as
//! kube-runtime's `watcher` reads them. From a resourceVersion, the store's history after it (an
//! `ERROR` event with a 410 `Expired` Status when the history no longer reaches back so far);
//! without one (or `0`, or `sendInitialEvents=true`), an `ADDED` event for every object first. A
//! change that moves an object into or out of the selectors is `ADDED` or `DELETED`, as the
//! apiserver's watch cache says. Bookmarks: the initial-events-end one, and one when the watch times
//! out (`timeoutSeconds`, at most an hour).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::watch::Receiver;

use super::request::View;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Change, ChangeType, Store};

/// The longest a watch stays open.
const LONGEST: Duration = Duration::from_secs(3600);

/// What a watch asks for.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    /// API group.
    pub group: String,
    /// Resource.
    pub resource: String,
    /// Kind (for bookmarks).
    pub kind: String,
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Changes after this resourceVersion; `None`: the current objects first.
    pub from: Option<u64>,
    /// `sendInitialEvents`: a bookmark marks the end of the current objects.
    pub initial_events_end: bool,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// How objects are shown.
    pub view: View,
}

impl Watch {
    fn selects(&self, namespace: &str, object: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    fn line(&self, kind: &str, object: &Value) -> Bytes {
        let mut line = json!({"type": kind, "object": self.view.show(object)}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    fn bookmark(&self, revision: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let api_version = match &self.view {
            View::Full(v) => v.clone(),
            View::Metadata => "meta.k8s.io/v1".into(),
        };
        let mut line = json!({"type": "BOOKMARK",
            "object": {"kind": self.kind, "apiVersion": api_version, "metadata": metadata}})
        .to_string();
        line.push('\n');
        Bytes::from(line)
    }

    fn expired(&self, asked: u64, oldest: u64) -> Bytes {
        let status =
            ApiError::expired(format!("too old resource version: {asked} ({oldest})")).to_status();
        let mut line = json!({"type": "ERROR", "object": status}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    /// The event `change` makes for this watch, if any.
    fn event(&self, change: &Change) -> Option<Bytes> {
        if change.key.group != self.group || change.key.resource != self.resource {
            return None;
        }
        let namespace = &change.key.namespace;
        let now = self.selects(namespace, &change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.selects(namespace, p));
        let kind = match (change.kind, before, now) {
            (ChangeType::Added, _, true) => "ADDED",
            (ChangeType::Modified, true, true) => "MODIFIED",
            (ChangeType::Modified, false, true) => "ADDED",
            (ChangeType::Modified, true, false) => "DELETED",
            (ChangeType::Deleted, _, true) => "DELETED",
            _ => return None,
        };
        Some(self.line(kind, &change.object))
    }
}

/// Where a watch is.
struct State {
    store: Arc<Mutex<Store>>,
    revisions: Receiver<u64>,
    watch: Watch,
    last: u64,
    pending: VecDeque<Bytes>,
    done: bool,
    deadline: tokio::time::Instant,
}

impl State {
    /// Queue the events of the changes since the last look.
    fn look(&mut self) {
        self.revisions.borrow_and_update();
        let store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        match store.changes_since(self.last) {
            Ok(changes) => {
                let events = changes.iter().filter_map(|c| self.watch.event(c));
                self.pending.extend(events);
                self.last = store.revision();
            }
            Err(oldest) => {
                self.pending
                    .push_back(self.watch.expired(self.last, oldest));
                self.done = true;
            }
        }
    }
}

/// The events of `watch` on `store`, whose writes `revisions` announces.
pub(super) fn stream(
    store: Arc<Mutex<Store>>,
    revisions: Receiver<u64>,
    watch: Watch,
) -> BoxStream<'static, Bytes> {
    let mut pending = VecDeque::new();
    let last = {
        let guard = store.lock().unwrap_or_else(PoisonError::into_inner);
        match watch.from {
            Some(from) => from,
            None => {
                for (key, object) in guard.objects(
                    &watch.group,
                    &watch.resource,
                    watch.namespace.as_deref(),
                    None,
                ) {
                    if watch.selects(&key.namespace, object) {
                        pending.push_back(watch.line("ADDED", object));
                    }
                }
                if watch.initial_events_end {
                    pending.push_back(watch.bookmark(guard.revision(), true));
                }
                guard.revision()
            }
        }
    };
    let timeout = watch.timeout.unwrap_or(LONGEST).min(LONGEST);
    let state = State {
        store,
        revisions,
        watch,
        last,
        pending,
        done: false,
        deadline: tokio::time::Instant::now() + timeout,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                return Some((event, state));
            }
            if state.done {
                return None;
            }
            state.look();
            if !state.pending.is_empty() || state.done {
                continue;
            }
            tokio::select! {
                changed = state.revisions.changed() => {
                    if changed.is_err() {
                        state.done = true;
                    }
                }
                () = tokio::time::sleep_until(state.deadline) => {
                    if state.watch.bookmarks {
                        let bookmark = state.watch.bookmark(state.last, false);
                        state.pending.push_back(bookmark);
                    }
                    state.done = true;
                }
            }
        }
    }))
}
