//! Where a phase of `capi-lb-bench capi` is: what its watches have seen, and when it ends (the
//! quiet window once everything is in its settled state, or the deadline).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How often a phase prints where it is (on stderr), so a long run shows its progress and a phase
/// that ends in an error has said how far it got.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_secs(60);

/// What a phase's watches have seen: each object's settled state, when the last change came, and
/// when every object was first in its settled state.
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    seen: HashMap<(&'static str, String), bool>,
    /// Per kind: how many objects there are to be, how many are in their state.
    kinds: BTreeMap<&'static str, (usize, usize)>,
    /// Per kind: from the start to the moment all its objects were in their settled state (while
    /// they are); says whether Cluster API's objects or capi-lb's came last.
    pub(super) reached_by_kind: BTreeMap<&'static str, Duration>,
    /// From the start to the last object created.
    pub(super) created: Option<Duration>,
    /// From the start to the moment every object was in its settled state (while they are).
    pub(super) reached: Option<Duration>,
    pub(super) last_change: Instant,
}

impl Progress {
    /// A phase expecting `expected` objects of each kind.
    pub(super) fn new(start: Instant, expected: &[(&'static str, usize)]) -> Self {
        Self {
            start,
            seen: HashMap::new(),
            kinds: expected.iter().map(|&(k, n)| (k, (n, 0))).collect(),
            reached_by_kind: BTreeMap::new(),
            created: None,
            reached: None,
            last_change: start,
        }
    }

    /// A change of `kind` `name`, in its settled state or not, at `now`.
    pub(super) fn observe(&mut self, kind: &'static str, name: String, ok: bool, now: Instant) {
        let was = self.seen.insert((kind, name), ok).unwrap_or(false);
        let since_start = now.saturating_duration_since(self.start);
        if let Some((expected, in_state)) = self.kinds.get_mut(kind) {
            *in_state = *in_state + usize::from(ok) - usize::from(was);
            if *in_state == *expected {
                self.reached_by_kind.entry(kind).or_insert(since_start);
            } else {
                self.reached_by_kind.remove(kind);
            }
        }
        self.last_change = now;
        if self.all_in_state() {
            self.reached.get_or_insert(since_start);
        } else {
            self.reached = None;
        }
    }

    /// Objects to be, and objects in their state, over all kinds.
    fn counts(&self) -> (usize, usize) {
        self.kinds
            .values()
            .fold((0, 0), |(e, i), (expected, in_state)| {
                (e + expected, i + in_state)
            })
    }

    fn all_in_state(&self) -> bool {
        let (expected, in_state) = self.counts();
        self.seen.len() == expected && in_state == expected
    }

    fn done(&self) -> bool {
        self.created.is_some() && self.all_in_state()
    }

    /// When to look again: the end of the quiet window once everything is in its state, never
    /// later than `deadline` (changes that keep coming must not keep a phase from ending).
    pub(super) fn wake(&self, quiet: Duration, deadline: Instant) -> Instant {
        if self.done() {
            (self.last_change + quiet).min(deadline)
        } else {
            deadline
        }
    }

    /// Everything is in its state and nothing changed for `quiet` before `now`.
    pub(super) fn quiet_since(&self, quiet: Duration, now: Instant) -> bool {
        self.done() && now >= self.last_change + quiet
    }

    /// Where the phase is at `now`, in words.
    pub(super) fn summary(&self, now: Instant) -> String {
        let (expected, in_state) = self.counts();
        format!(
            "{} of {} objects in their settled state ({} seen), {}, last change {:.1} s ago{}",
            in_state,
            expected,
            self.seen.len(),
            self.created
                .map_or("still creating".to_string(), |c| format!(
                    "all created at {:.1} s",
                    c.as_secs_f64()
                )),
            now.saturating_duration_since(self.last_change)
                .as_secs_f64(),
            self.reached.map_or(String::new(), |r| format!(
                ", all in state since {:.1} s",
                r.as_secs_f64()
            )),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_ends_after_the_quiet_window_or_at_its_deadline_however_many_changes_come() {
        let start = Instant::now();
        let quiet = Duration::from_secs(10);
        let deadline = start + Duration::from_secs(100);
        let mut p = Progress::new(start, &[("Cluster", 1), ("Machine", 1)]);
        assert_eq!(p.wake(quiet, deadline), deadline);
        p.observe("Cluster", "c0".into(), true, start + Duration::from_secs(1));
        p.observe(
            "Machine",
            "m0".into(),
            false,
            start + Duration::from_secs(2),
        );
        assert!(p.reached.is_none());
        assert_eq!(p.reached_by_kind["Cluster"], Duration::from_secs(1));
        assert!(!p.reached_by_kind.contains_key("Machine"));
        p.observe("Machine", "m0".into(), true, start + Duration::from_secs(3));
        assert_eq!(p.reached, Some(Duration::from_secs(3)));
        assert_eq!(p.reached_by_kind["Machine"], Duration::from_secs(3));
        // Not done before everything is created.
        assert_eq!(p.wake(quiet, deadline), deadline);
        p.created = Some(Duration::from_secs(2));
        assert_eq!(p.wake(quiet, deadline), start + Duration::from_secs(13));
        assert!(!p.quiet_since(quiet, start + Duration::from_secs(12)));
        assert!(p.quiet_since(quiet, start + Duration::from_secs(13)));
        // Changes that keep coming (in state all along) move the quiet window, never the deadline.
        for t in 4..200 {
            p.observe("Machine", "m0".into(), true, start + Duration::from_secs(t));
            assert!(p.wake(quiet, deadline) <= deadline);
        }
        assert_eq!(p.reached, Some(Duration::from_secs(3)));
        // An object out of its state again: no longer reached, and the summary says so.
        p.observe(
            "Cluster",
            "c0".into(),
            false,
            start + Duration::from_secs(200),
        );
        assert!(p.reached.is_none());
        assert!(!p.reached_by_kind.contains_key("Cluster"));
        assert_eq!(p.reached_by_kind["Machine"], Duration::from_secs(3));
        assert_eq!(p.wake(quiet, deadline), deadline);
        let text = p.summary(start + Duration::from_secs(201));
        assert!(
            text.starts_with("1 of 2 objects in their settled state (2 seen)"),
            "{text}"
        );
        assert!(text.contains("last change 1.0 s ago"), "{text}");
    }
}
