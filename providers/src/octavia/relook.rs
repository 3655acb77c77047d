//! How soon to look again while Octavia is busy with a load balancer: the schedule ([`relook`]: as
//! long as the wait has lasted, from [`FIRST_LOOK`] up to [`MAX_LOOK`]) and the per-load-balancer
//! record of when the current wait began ([`Waits`]).
//!
//! **The schedule.** After capi-lb gives Octavia work (one write: the create, a child, a batch member
//! update, a delete) it looks again after [`FIRST_LOOK`], and then after as long as it has waited so
//! far, at most [`MAX_LOOK`]: looks 0.25, 0.5, 1, 2, 4 s after the write, then every 4 s. An
//! operation that ends just after a look is seen at most twice its duration after it began (until
//! the cap), at most [`MAX_LOOK`] late after that. Compared with the fixed 2 s it replaces (looks of
//! an operation of duration d, and when it is seen):
//!
//! | d | fixed 2 s | this schedule |
//! |---|---|---|
//! | 0.5 s | 1 look, at 2 s | 2 looks, at 0.5 s |
//! | 1 s | 1, at 2 s | 3, at 1 s |
//! | 2 s | 1, at 2 s | 4, at 2 s |
//! | 5 s | 3, at 6 s | 6, at 8 s |
//! | 10 s | 5, at 10 s | 7, at 12 s |
//! | 15 s | 8, at 16 s | 8, at 16 s |
//! | 60 s (an amphora boot) | 30, at 60 s | **19**, at 60 s |
//! | 120 s | 60, at 120 s | 34, at 120 s |
//!
//! Short operations (the test harness' no-op Octavia) are seen in a fraction of the time for a few
//! more looks; from 15 s on the schedule makes fewer looks (an amphora boot of a
//! minute: 5 looks to reach the cap, 14 more to the minute); in between it costs a few more looks and
//! may see the end up to 4 s late instead of 2 (an operation of 5 s at 8 s instead of 6). Each
//! reconcile's own time only spaces the looks further. Each look is one request (the status tree,
//! which `converge_members` shares with `ensure`; the list of the delete), so the schedule changes how
//! often a busy load balancer is read, never what a look costs; a steady-state reconcile never
//! consults it.
//!
//! **What the wait is measured from.** An in-memory record per LoadBalancer and OctaviaLoadBalancer
//! (by their UIDs, [`key`]: the two OctaviaLoadBalancers of a provider swap wait apart): when the
//! wait began, when it was last looked at; read and written under the provider's per-LoadBalancer
//! lock:
//! - a write Octavia accepted begins a new wait (the first look comes after [`FIRST_LOOK`]);
//! - a look that finds Octavia still busy continues the wait of the record; with no record (after a
//!   restart), it continues from `status.pendingSince` when the load balancer is PENDING (the start the
//!   status keeps across restarts, clamped to now: a time in the future, from another replica's
//!   clock, counts as now), else it begins a wait now;
//! - a record not looked at for [`STALE`] belongs to a wait that ended (an ongoing one is looked at
//!   every [`MAX_LOOK`] at most): it is dropped, and a later wait begins afresh. Records are dropped
//!   that way whenever one is written, and when the LoadBalancer's deletion is done, so the map holds
//!   at most the load balancers that waited in the last [`STALE`].
//!
//! Why not Octavia's own times: the status tree (the one request of a look) has none, and a load
//! balancer's `updated_at` would cost a request per look, is written by another clock and has a
//! resolution of one second. Why not the status alone: the delete path writes no status, and members
//! being provisioned are not a PENDING state of the load balancer.
//!
//! Why this cannot turn into a flood of requests: looks stay [`FIRST_LOOK`] apart only at the start
//! of a wait; a wait begins again only after a write (which Octavia accepts only while the load
//! balancer is ACTIVE, so no faster than Octavia finishes its operations), after [`STALE`] without a
//! look, or when the clock stepped back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;

use crate::clock::{after, until};

/// The first look after capi-lb gave Octavia work, or first found it busy.
pub const FIRST_LOOK: Duration = Duration::from_millis(250);

/// The longest interval between two looks at a load balancer Octavia is busy with.
pub const MAX_LOOK: Duration = Duration::from_secs(4);

/// A record not looked at for this long belongs to a wait that ended.
const STALE: Duration = Duration::from_secs(30);

/// The record of the Octavia load balancer of LoadBalancer `lb_uid` made with OctaviaLoadBalancer
/// `infra_uid`.
pub(super) fn key(lb_uid: &str, infra_uid: Option<&str>) -> String {
    format!("{lb_uid}/{}", infra_uid.unwrap_or_default())
}

/// How soon to look again at a load balancer Octavia has been busy with for `waited`: as long again,
/// between [`FIRST_LOOK`] and [`MAX_LOOK`] (so the looks double the wait until the cap).
pub fn relook(waited: Duration) -> Duration {
    waited.clamp(FIRST_LOOK, MAX_LOOK)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wait {
    /// When the wait began.
    since: Timestamp,
    /// When it was last looked at.
    seen: Timestamp,
}

/// When the current wait of each load balancer (by [`key`]) began.
#[derive(Debug, Default)]
pub(super) struct Waits {
    waits: Mutex<HashMap<String, Wait>>,
}

impl Waits {
    /// Octavia accepted a write for load balancer `key` at `now`: a new wait begins. How soon to
    /// look.
    pub(super) fn began(&self, key: &str, now: Timestamp) -> Duration {
        self.record(key, now, |_| now)
    }

    /// Octavia is still busy with load balancer `key` at `now` (`pending_since`: since when the
    /// status says it is PENDING, if it does). How soon to look again.
    pub(super) fn waiting(
        &self,
        key: &str,
        now: Timestamp,
        pending_since: Option<Timestamp>,
    ) -> Duration {
        self.record(key, now, |live| match live {
            Some(wait) => wait.since,
            None => pending_since.map_or(now, |since| since.min(now)),
        })
    }

    /// The deletion of load balancer `key` is done: forget its wait.
    pub(super) fn forget(&self, key: &str) {
        if let Ok(mut waits) = self.waits.lock() {
            waits.remove(key);
        }
    }

    /// Record the wait of `key` as seen `now`, beginning when `since` says given the live record (one
    /// looked at within [`STALE`], not in the future); how soon to look again.
    fn record(
        &self,
        key: &str,
        now: Timestamp,
        since: impl FnOnce(Option<Wait>) -> Timestamp,
    ) -> Duration {
        let Ok(mut waits) = self.waits.lock() else {
            // Nothing to measure from: the slow end, which can never flood Octavia.
            return MAX_LOOK;
        };
        // Records of other load balancers may have been seen after `now` (a call that began later
        // but recorded first): kept unless stale.
        waits.retain(|_, w| after(w.seen, STALE) > now);
        // This one's record began after `now` only when the clock stepped back: not live.
        let live = waits.get(key).copied().filter(|w| w.since <= now);
        let since = since(live);
        waits.insert(key.to_string(), Wait { since, seen: now });
        relook(until(since, now))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.waits.lock().map(|w| w.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        after(Timestamp::UNIX_EPOCH, Duration::from_millis(ms))
    }

    /// The looks of one wait that began at 0 and lasts `total`, each after the delay the previous
    /// one asked for: (when, delay asked).
    fn looks(total: Duration) -> Vec<(Duration, Duration)> {
        let waits = Waits::default();
        let mut now = Duration::ZERO;
        let mut delay = waits.began("lb", at(0));
        let mut out = vec![(now, delay)];
        while now < total {
            now += delay;
            delay = waits.waiting("lb", at(now.as_millis() as u64), None);
            out.push((now, delay));
        }
        out
    }

    #[test]
    fn the_schedule_starts_short_doubles_the_wait_and_stops_at_the_cap() {
        let looks = looks(Duration::from_secs(120));
        assert_eq!(looks[0].1, FIRST_LOOK, "the first look after a write");
        for pair in looks.windows(2) {
            let ((_, before), (when, delay)) = (pair[0], pair[1]);
            assert!(
                delay >= before,
                "never shorter than the previous delay: {looks:?}"
            );
            assert!(delay <= MAX_LOOK, "never beyond the cap: {looks:?}");
            if when >= FIRST_LOOK && when <= MAX_LOOK {
                assert_eq!(delay, when, "as long again as the wait so far: {looks:?}");
            }
        }
        assert_eq!(relook(Duration::ZERO), FIRST_LOOK);
        assert_eq!(relook(Duration::from_secs(3600)), MAX_LOOK);
        assert!(
            FIRST_LOOK >= Duration::from_millis(100),
            "Progress' own floor"
        );
    }

    #[test]
    fn the_module_docs_table_of_looks_holds() {
        // (duration, looks and when seen with a fixed 2 s, looks and when seen with the schedule)
        let table: [(f64, u32, f64, usize, f64); 8] = [
            (0.5, 1, 2.0, 2, 0.5),
            (1.0, 1, 2.0, 3, 1.0),
            (2.0, 1, 2.0, 4, 2.0),
            (5.0, 3, 6.0, 6, 8.0),
            (10.0, 5, 10.0, 7, 12.0),
            (15.0, 8, 16.0, 8, 16.0),
            (60.0, 30, 60.0, 19, 60.0),
            (120.0, 60, 120.0, 34, 120.0),
        ];
        let fixed = Duration::from_secs(2);
        for (d, fixed_looks, fixed_at, schedule_looks, schedule_at) in table {
            let d = Duration::from_secs_f64(d);
            let n = d.as_millis().div_ceil(fixed.as_millis()) as u32;
            assert_eq!(
                (n, fixed * n),
                (fixed_looks, Duration::from_secs_f64(fixed_at))
            );
            let looks = looks(d);
            let seen = looks.last().map(|l| l.0).unwrap_or_default();
            assert_eq!(
                (looks.len() - 1, seen),
                (schedule_looks, Duration::from_secs_f64(schedule_at)),
                "{d:?}: {looks:?}"
            );
            // Seen at most twice the duration after it began, and at most MAX_LOOK late.
            assert!(
                seen >= d && (seen <= 2 * d || seen - d <= MAX_LOOK),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_write_begins_a_new_wait_and_a_look_continues_it() {
        let waits = Waits::default();
        assert_eq!(waits.began("a", at(0)), FIRST_LOOK);
        assert_eq!(waits.waiting("a", at(3_000), None), Duration::from_secs(3));
        // Another LoadBalancer's wait is its own.
        assert_eq!(waits.waiting("b", at(3_000), None), FIRST_LOOK);
        // A new write starts over.
        assert_eq!(waits.began("a", at(4_000)), FIRST_LOOK);
        assert_eq!(
            waits.waiting("a", at(4_500), None),
            Duration::from_millis(500)
        );
        // A live record wins over the status' pendingSince.
        assert_eq!(
            waits.waiting("a", at(5_000), Some(at(0))),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn the_two_octavia_load_balancers_of_a_provider_swap_wait_apart() {
        let waits = Waits::default();
        let (old, new) = (key("lb", Some("olb-1")), key("lb", Some("olb-2")));
        assert_ne!(old, new);
        waits.began(&old, at(0));
        assert_eq!(waits.began(&new, at(2_000)), FIRST_LOOK);
        assert_eq!(waits.waiting(&old, at(3_000), None), Duration::from_secs(3));
        assert_eq!(waits.waiting(&new, at(3_000), None), Duration::from_secs(1));
        waits.forget(&new);
        assert_eq!(waits.len(), 1);
    }

    #[test]
    fn after_a_restart_the_wait_continues_from_pending_since_clamped_to_now() {
        let waits = Waits::default();
        assert_eq!(
            waits.waiting("a", at(10_000), Some(at(8_000))),
            Duration::from_secs(2)
        );
        // pendingSince from a clock ahead of this one counts as now, and the wait goes on from it.
        assert_eq!(waits.waiting("b", at(10_000), Some(at(70_000))), FIRST_LOOK);
        assert_eq!(
            waits.waiting("b", at(10_500), Some(at(70_000))),
            Duration::from_millis(500)
        );
        // No pendingSince: a wait begins now.
        assert_eq!(waits.waiting("c", at(10_000), None), FIRST_LOOK);
    }

    #[test]
    fn a_stale_record_or_a_clock_stepped_back_begins_a_new_wait() {
        let waits = Waits::default();
        waits.began("a", at(0));
        assert_eq!(waits.waiting("a", at(20_000), None), MAX_LOOK);
        // Not looked at for longer than STALE: that wait ended.
        let later = 20_000 + STALE.as_millis() as u64 + 1;
        assert_eq!(waits.waiting("a", at(later), None), FIRST_LOOK);
        // The clock stepped back before the wait began: it begins again, not a flood.
        waits.began("b", at(50_000));
        assert_eq!(waits.waiting("b", at(40_000), None), FIRST_LOOK);
        assert_eq!(waits.waiting("b", at(41_000), None), Duration::from_secs(1));
    }

    #[test]
    fn records_are_bounded_by_the_load_balancers_that_waited_lately() {
        let waits = Waits::default();
        for i in 0..100 {
            waits.began(&format!("lb-{i}"), at(1_000));
        }
        // A call that began before the others wrote keeps their records.
        waits.waiting("late", at(900), None);
        assert_eq!(waits.len(), 101);
        let later = 1_000 + STALE.as_millis() as u64 + 1;
        waits.began("new", at(later));
        assert_eq!(waits.len(), 1, "stale records dropped");
        waits.forget("new");
        assert_eq!(waits.len(), 0);
    }
}
