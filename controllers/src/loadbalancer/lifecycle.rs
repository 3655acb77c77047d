//! The target state machine: pure functions from what a reconcile observes about one target (its
//! selection, deletion, `disabled` annotation, address, readiness gates and the state recorded on it
//! earlier) to what the provider is asked for that target, and, once the provider answered, to the
//! target's new state, the time it entered it, and whether its Cluster API deletion hooks must be
//! held. Everything it needs is on the target itself (annotations) or in the provider's member list,
//! so a restarted controller continues exactly where the previous one stopped.
//!
//! ```text
//!             admitted + address            provider reports Active
//!   (new) ──► adding ───────────────────────────────────────────► active
//!               ▲  │ disabled                                        │ disabled
//!     enabled   │  ▼                                                 ▼
//!            disabled ◄──── member gone ◄──── drainSeconds ◄──── disabling
//!
//!   deleting or deselected, from any state:  removing ──(drainSeconds, member gone)──► removed
//!
//!   failed its health probes (spec.targetHealth):  failing ──(drainSeconds, member gone)──► unhealthy
//!   passes them again:                             adding ──► active
//! ```
//!
//! A member leaving the load balancer is first drained (no new connections, existing ones continue)
//! for `spec.drainSeconds`, then removed. Deletion hooks are held on a Machine for as long as it is,
//! or may become, a member; they are released once its member is gone, or at once when the Cluster
//! or the LoadBalancer is being deleted (so deletion can never deadlock).

use std::collections::BTreeMap;
use std::time::Duration;

use capi_lb_api::constants::ANNOTATION_TARGET_STATUS;
use capi_lb_api::constants::TARGET_STATE_PREFIX;
use capi_lb_api::constants::{ANNOTATION_TARGET_DISABLED, ANNOTATION_TARGET_LB};
use capi_lb_api::target::{TargetKeys, TargetState, hook_owner, target_key};
use capi_lb_providers::{MemberIntent, MemberState, MemberStatus};
use jiff::Timestamp;

/// What one reconcile observed about one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Object name (the member name).
    pub name: String,
    /// The LoadBalancer's selector matches it.
    pub selected: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// It has the `loadbalancer.cluster.x-k8s.io/disabled` annotation.
    pub disabled: bool,
    /// It failed its health probes (`spec.targetHealth`) and is to be taken out. Decided by the
    /// caller over all targets: never for every target that would serve.
    pub unhealthy: bool,
    /// Its health is not known yet, and the load balancer is made of DNS records (whose set
    /// changes only on what was probed): it is kept as it is, a member if it is one, never made
    /// one. Decided by the caller.
    pub unproven: bool,
    /// Its preferred usable address.
    pub address: Option<String>,
    /// Readiness gates that are not `True` on it (empty: admitted).
    pub gates_pending: Vec<String>,
    /// The state this LoadBalancer recorded on it earlier.
    pub recorded: Option<TargetState>,
    /// When it entered the recorded state.
    pub since: Option<Timestamp>,
    /// This LoadBalancer's pre-drain hook is on it.
    pub pre_drain: bool,
    /// This LoadBalancer's pre-terminate hook is on it.
    pub pre_terminate: bool,
}

impl Observed {
    /// Read one object: `selected` from the caller (selector match), the rest from its
    /// annotations. `address` and `gates_pending` are computed by the caller from its status.
    pub fn from_annotations(
        name: String,
        selected: bool,
        deleting: bool,
        annotations: &BTreeMap<String, String>,
        keys: &TargetKeys,
        address: Option<String>,
        gates_pending: Vec<String>,
    ) -> Self {
        Self {
            name,
            selected,
            deleting,
            disabled: annotations.contains_key(ANNOTATION_TARGET_DISABLED),
            unhealthy: false,
            unproven: false,
            address,
            gates_pending,
            recorded: annotations
                .get(&keys.state)
                .and_then(|v| TargetState::parse(v)),
            since: annotations
                .get(&keys.since)
                .and_then(|v| v.parse::<Timestamp>().ok()),
            pre_drain: annotations.contains_key(&keys.pre_drain),
            pre_terminate: annotations.contains_key(&keys.pre_terminate),
        }
    }

    /// Selected, not being deleted, not disabled and not unhealthy: it should serve.
    pub fn wants_in(&self) -> bool {
        self.would_serve() && !self.unhealthy
    }

    /// Selected, not being deleted and not disabled: it should serve if it is healthy.
    pub fn would_serve(&self) -> bool {
        self.selected && !self.deleting && !self.disabled
    }

    /// Out because the user disabled it (rather than deleted or deselected it).
    fn disabled_only(&self) -> bool {
        self.selected && !self.deleting && self.disabled
    }

    /// Out only because it failed its health probes.
    fn unhealthy_only(&self) -> bool {
        self.would_serve() && self.unhealthy
    }

    /// Whether a member may exist for it, going by what was recorded.
    fn recorded_member(&self) -> bool {
        self.recorded.is_some_and(TargetState::may_be_member)
    }
}

/// Per-LoadBalancer settings of the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `spec.drainSeconds`.
    pub drain: Duration,
    /// Targets are Cluster API Machines, so deletion hooks apply.
    pub hooks: bool,
    /// The Cluster or the LoadBalancer is being deleted: hold no hook.
    pub release_hooks: bool,
}

/// What to ask of the provider for `target`; `None` leaves it out of the member set (removed).
pub fn intent(target: &Observed, now: Timestamp, settings: &Settings) -> Option<MemberIntent> {
    if target.wants_in() {
        return Some(match &target.address {
            Some(address) if target.gates_pending.is_empty() && !target.unproven => {
                MemberIntent::Serve(address.clone())
            }
            // No address right now, not admitted yet, or not probed yet where that decides:
            // never create, never drop a serving member.
            _ => MemberIntent::Keep,
        });
    }
    match target.recorded {
        Some(state) if state.is_draining() => match target.since {
            Some(since) if drained(since, now, settings.drain) => None,
            _ => Some(MemberIntent::Drain),
        },
        Some(TargetState::Disabled | TargetState::Removed | TargetState::Unhealthy) => None,
        // Serving, joining, or never recorded (a member may exist): drain first.
        _ if settings.drain.is_zero() => None,
        _ => Some(MemberIntent::Drain),
    }
}

fn drained(since: Timestamp, now: Timestamp, drain: Duration) -> bool {
    jiff::SignedDuration::try_from(drain)
        .ok()
        .and_then(|d| since.checked_add(d).ok())
        .is_none_or(|deadline| now >= deadline)
}

/// Whether this LoadBalancer's hooks must be on `target` before the provider is called: wherever a
/// member may already exist going by the recorded state (a target whose hooks someone removed).
/// `None` means "leave them as they are": a target joining gets its hooks with its first state,
/// after the call ([`settle`]), in one write.
pub fn hooks_before(target: &Observed, settings: &Settings) -> Option<bool> {
    if !settings.hooks {
        return None;
    }
    if settings.release_hooks {
        return Some(false);
    }
    target.recorded_member().then_some(true)
}

/// What the provider answered about members.
#[derive(Clone, Copy, Debug)]
pub enum Members<'a> {
    /// The member set after converging.
    Known(&'a [MemberStatus]),
    /// Members could not be converged (load balancer not provisioned, provider error).
    Unknown,
}

/// A target's new state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The state to record.
    pub state: TargetState,
    /// When it entered that state.
    pub since: Timestamp,
    /// Whether this LoadBalancer's deletion hooks must be on it.
    pub hooks: bool,
    /// Reconcile again after this long (a drain deadline).
    pub requeue_after: Option<Duration>,
    /// Whether to write it on the target. Always, except for a target seen for the first time
    /// that wants in while no member can exist for it yet (no address, readiness gates pending,
    /// not probed yet, so nothing was asked of the provider for it, and the provider has none):
    /// it is written once it joins, its state and its hooks in one write.
    pub record: bool,
}

/// The new state of `target` after the provider answered.
pub fn settle(
    target: &Observed,
    intent: Option<&MemberIntent>,
    members: Members<'_>,
    now: Timestamp,
    settings: &Settings,
) -> Settled {
    let leaving = if target.disabled_only() {
        (TargetState::Disabling, TargetState::Disabled)
    } else if target.unhealthy_only() {
        (TargetState::Failing, TargetState::Unhealthy)
    } else {
        (TargetState::Removing, TargetState::Removed)
    };
    let state = match members {
        Members::Known(members) => {
            let member = members.iter().find(|m| m.name == target.name);
            match (target.wants_in(), member) {
                (true, Some(m)) if m.state == MemberState::Active => TargetState::Active,
                (true, _) => TargetState::Adding,
                // Leaving, but the provider still sends it new connections (a weight not written
                // yet, a DNS record ExternalDNS has not taken out): it is still active, and its
                // drain starts once the provider stopped that.
                (false, Some(m)) if m.state == MemberState::Active => TargetState::Active,
                (false, Some(_)) => leaving.0,
                (false, None) => leaving.1,
            }
        }
        Members::Unknown => match (target.wants_in(), target.recorded) {
            (true, Some(s @ (TargetState::Adding | TargetState::Active))) => s,
            (true, _) => TargetState::Adding,
            (false, Some(s)) if s.is_draining() => leaving.0,
            (false, Some(s @ (TargetState::Adding | TargetState::Active))) => s,
            (false, _) => leaving.1,
        },
    };
    // The drain clock keeps running across disabling <-> removing; any other change restarts it.
    let continues = target.recorded == Some(state)
        || (state.is_draining() && target.recorded.is_some_and(TargetState::is_draining));
    let since = match target.since {
        Some(since) if continues => since,
        _ => now,
    };
    let requeue_after = match intent {
        Some(MemberIntent::Drain) if state.is_draining() => {
            let deadline = jiff::SignedDuration::try_from(settings.drain)
                .ok()
                .and_then(|d| since.checked_add(d).ok())
                .unwrap_or(now);
            Some(until(now, deadline))
        }
        // Left out but still there (a provider that removes asynchronously): look again soon.
        None if state.is_draining() || (state == TargetState::Active && !target.wants_in()) => {
            Some(Duration::from_secs(1))
        }
        _ => None,
    };
    let record = target.recorded.is_some()
        || !target.wants_in()
        || matches!(intent, Some(MemberIntent::Serve(_)))
        || matches!(members, Members::Known(members) if members.iter().any(|m| m.name == target.name));
    Settled {
        state,
        since,
        hooks: settings.hooks && !settings.release_hooks && state.may_be_member(),
        requeue_after,
        record,
    }
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Put this LoadBalancer's two deletion hooks on (`true`) or take them off (`false`) `annotations`.
pub fn set_hooks(
    annotations: &mut BTreeMap<String, String>,
    keys: &TargetKeys,
    lb_name: &str,
    hooks: bool,
) {
    for key in [&keys.pre_drain, &keys.pre_terminate] {
        if hooks {
            annotations
                .entry(key.clone())
                .or_insert_with(|| hook_owner(lb_name));
        } else {
            annotations.remove(key);
        }
    }
}

/// The annotations of a target after applying this LoadBalancer's view of it. `settled` is `None`
/// when the LoadBalancer lets go of the target entirely (it is being deleted): every annotation of
/// ours is removed. `hooks` overrides the hooks (`None` keeps them as they are).
///
/// The proposal's unkeyed pair (`loadbalancer.cluster.x-k8s.io/name` and `.../status`) is held by
/// one LoadBalancer at a time: the holder keeps it current; another LoadBalancer takes it over only
/// when it is unheld or its holder no longer tracks the target (no state, or `removed`).
pub fn annotate(
    annotations: &BTreeMap<String, String>,
    namespace: &str,
    lb_name: &str,
    keys: &TargetKeys,
    settled: Option<(TargetState, Timestamp)>,
    hooks: Option<bool>,
) -> BTreeMap<String, String> {
    let mut out = annotations.clone();
    match settled {
        Some((state, since)) => {
            out.insert(keys.state.clone(), state.as_str().to_string());
            out.insert(keys.since.clone(), since.to_string());
        }
        None => {
            out.remove(&keys.state);
            out.remove(&keys.since);
        }
    }
    match hooks.or(settled.is_none().then_some(false)) {
        Some(true) => {
            for key in [&keys.pre_drain, &keys.pre_terminate] {
                out.entry(key.clone())
                    .or_insert_with(|| hook_owner(lb_name));
            }
        }
        Some(false) => {
            out.remove(&keys.pre_drain);
            out.remove(&keys.pre_terminate);
        }
        None => {}
    }
    let holder = annotations.get(ANNOTATION_TARGET_LB).cloned();
    match (holder.as_deref(), settled) {
        (Some(h), Some((state, _))) if h == lb_name => {
            out.insert(ANNOTATION_TARGET_STATUS.to_string(), state.as_str().into());
        }
        (Some(h), None) if h == lb_name => {
            out.remove(ANNOTATION_TARGET_LB);
            out.remove(ANNOTATION_TARGET_STATUS);
        }
        (None, Some((state, _))) => {
            out.insert(ANNOTATION_TARGET_LB.to_string(), lb_name.to_string());
            out.insert(ANNOTATION_TARGET_STATUS.to_string(), state.as_str().into());
        }
        (Some(h), Some((state, _))) if state != TargetState::Removed => {
            let holder_state = annotations
                .get(&format!(
                    "{TARGET_STATE_PREFIX}{}",
                    target_key(namespace, h)
                ))
                .and_then(|v| TargetState::parse(v));
            if holder_state.is_none_or(|s| s == TargetState::Removed) {
                out.insert(ANNOTATION_TARGET_LB.to_string(), lb_name.to_string());
                out.insert(ANNOTATION_TARGET_STATUS.to_string(), state.as_str().into());
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAIN: Duration = Duration::from_secs(30);

    fn t0() -> Timestamp {
        Timestamp::from_second(1_767_225_600).unwrap()
    }

    fn at(secs: u64) -> Timestamp {
        t0().checked_add(Duration::from_secs(secs)).unwrap()
    }

    fn settings() -> Settings {
        Settings {
            drain: DRAIN,
            hooks: true,
            release_hooks: false,
        }
    }

    fn target() -> Observed {
        Observed {
            name: "m1".into(),
            selected: true,
            deleting: false,
            disabled: false,
            unhealthy: false,
            unproven: false,
            address: Some("10.0.0.1".into()),
            gates_pending: Vec::new(),
            recorded: None,
            since: None,
            pre_drain: false,
            pre_terminate: false,
        }
    }

    fn member(state: MemberState) -> Vec<MemberStatus> {
        vec![MemberStatus {
            name: "m1".into(),
            address: "10.0.0.1".into(),
            state,
        }]
    }

    fn recorded(mut t: Observed, state: TargetState, since: u64) -> Observed {
        t.recorded = Some(state);
        t.since = Some(at(since));
        t
    }

    #[test]
    fn a_new_target_is_asked_for_then_active() {
        let t = target();
        let s = settings();
        assert_eq!(
            intent(&t, at(0), &s),
            Some(MemberIntent::Serve("10.0.0.1".into()))
        );
        assert_eq!(
            hooks_before(&t, &s),
            None,
            "a joining target gets its hooks with its first state"
        );
        // `adding` while the provider builds its member; `active` straight away from a provider
        // that serves it at once. Either way its hooks go in the same write.
        for (member_state, state) in [
            (MemberState::Adding, TargetState::Adding),
            (MemberState::Active, TargetState::Active),
        ] {
            let first = settle(
                &t,
                intent(&t, at(0), &s).as_ref(),
                Members::Known(&member(member_state)),
                at(0),
                &s,
            );
            assert_eq!(first.state, state);
            assert!(first.hooks && first.record, "{first:?}");
        }
        let t = recorded(t, TargetState::Adding, 0);
        let active = settle(
            &t,
            intent(&t, at(5), &s).as_ref(),
            Members::Known(&member(MemberState::Active)),
            at(5),
            &s,
        );
        assert_eq!(active.state, TargetState::Active);
        assert_eq!(active.since, at(5));
    }

    #[test]
    fn no_address_or_pending_gates_keep_but_never_create() {
        let s = settings();
        let mut t = target();
        t.address = None;
        assert_eq!(intent(&t, at(0), &s), Some(MemberIntent::Keep));
        // Nothing is written on a new target that cannot join yet: no state, no hooks.
        let out = settle(
            &t,
            Some(&MemberIntent::Keep),
            Members::Known(&[]),
            at(0),
            &s,
        );
        assert!(!out.record, "{out:?}");
        let out = settle(&t, Some(&MemberIntent::Keep), Members::Unknown, at(0), &s);
        assert!(!out.record, "{out:?}");
        // Unless the provider has a member for it (one adopted): then it is recorded, hooks on.
        let out = settle(
            &t,
            Some(&MemberIntent::Keep),
            Members::Known(&member(MemberState::Active)),
            at(0),
            &s,
        );
        assert!(out.record && out.hooks, "{out:?}");
        let mut t = target();
        t.gates_pending = vec!["APIServerPodHealthy".into()];
        assert_eq!(intent(&t, at(0), &s), Some(MemberIntent::Keep));
        // An active member whose gate turns false stays active.
        let t = recorded(t, TargetState::Active, 0);
        let out = settle(
            &t,
            Some(&MemberIntent::Keep),
            Members::Known(&member(MemberState::Active)),
            at(1),
            &s,
        );
        assert_eq!(out.state, TargetState::Active);
        assert_eq!(out.since, at(0), "unchanged state keeps its time");
    }

    #[test]
    fn disable_drains_for_the_drain_time_then_removes() {
        let s = settings();
        let mut t = recorded(target(), TargetState::Active, 0);
        t.disabled = true;
        assert_eq!(intent(&t, at(10), &s), Some(MemberIntent::Drain));
        let out = settle(
            &t,
            Some(&MemberIntent::Drain),
            Members::Known(&member(MemberState::Draining)),
            at(10),
            &s,
        );
        assert_eq!(out.state, TargetState::Disabling);
        assert_eq!(out.since, at(10));
        assert_eq!(out.requeue_after, Some(DRAIN));
        assert!(out.hooks);

        let t = Observed {
            recorded: Some(TargetState::Disabling),
            since: Some(at(10)),
            ..t
        };
        assert_eq!(intent(&t, at(39), &s), Some(MemberIntent::Drain));
        let out = settle(
            &t,
            Some(&MemberIntent::Drain),
            Members::Known(&member(MemberState::Draining)),
            at(39),
            &s,
        );
        assert_eq!(out.requeue_after, Some(Duration::from_secs(1)));
        assert_eq!(intent(&t, at(40), &s), None, "drained: removed");
        let out = settle(&t, None, Members::Known(&[]), at(40), &s);
        assert_eq!(out.state, TargetState::Disabled);
        assert!(!out.hooks, "no member, no hooks");

        // Enabled again: served again, its hooks back with its state after the provider call.
        let mut t = recorded(t, TargetState::Disabled, 40);
        t.disabled = false;
        assert_eq!(
            intent(&t, at(50), &s),
            Some(MemberIntent::Serve("10.0.0.1".into()))
        );
        assert_eq!(hooks_before(&t, &s), None);
    }

    #[test]
    fn an_unhealthy_target_drains_then_is_out_in_states_of_its_own_and_comes_back_healthy() {
        let s = settings();
        let mut t = recorded(target(), TargetState::Active, 0);
        t.unhealthy = true;
        assert!(!t.wants_in() && t.would_serve());
        assert_eq!(intent(&t, at(10), &s), Some(MemberIntent::Drain));
        let out = settle(
            &t,
            Some(&MemberIntent::Drain),
            Members::Known(&member(MemberState::Draining)),
            at(10),
            &s,
        );
        assert_eq!(out.state, TargetState::Failing);
        assert!(out.hooks, "a draining member keeps the hooks");
        let t = Observed {
            recorded: Some(TargetState::Failing),
            since: Some(at(10)),
            ..t
        };
        assert_eq!(intent(&t, at(40), &s), None, "drained: out");
        let out = settle(&t, None, Members::Known(&[]), at(40), &s);
        assert_eq!(out.state, TargetState::Unhealthy);
        assert!(!out.hooks, "no member, no hooks");
        let mut t = recorded(t, TargetState::Unhealthy, 40);
        assert_eq!(intent(&t, at(45), &s), None, "stays out while unhealthy");
        // Deleted while out: removed, not unhealthy.
        t.deleting = true;
        assert_eq!(
            settle(&t, None, Members::Known(&[]), at(46), &s).state,
            TargetState::Removed
        );
        // Healthy again: served again.
        t.deleting = false;
        t.unhealthy = false;
        assert_eq!(
            intent(&t, at(50), &s),
            Some(MemberIntent::Serve("10.0.0.1".into()))
        );
        let out = settle(
            &t,
            intent(&t, at(50), &s).as_ref(),
            Members::Known(&member(MemberState::Active)),
            at(50),
            &s,
        );
        assert_eq!(out.state, TargetState::Active);
    }

    #[test]
    fn re_enabling_while_disabling_serves_again() {
        let s = settings();
        let t = recorded(target(), TargetState::Disabling, 0);
        assert_eq!(
            intent(&t, at(5), &s),
            Some(MemberIntent::Serve("10.0.0.1".into()))
        );
        let out = settle(
            &t,
            intent(&t, at(5), &s).as_ref(),
            Members::Known(&member(MemberState::Active)),
            at(5),
            &s,
        );
        assert_eq!(out.state, TargetState::Active);
    }

    #[test]
    fn deletion_during_disabling_keeps_the_drain_clock() {
        let s = settings();
        let mut t = recorded(target(), TargetState::Disabling, 0);
        t.disabled = true;
        t.deleting = true;
        assert_eq!(intent(&t, at(20), &s), Some(MemberIntent::Drain));
        let out = settle(
            &t,
            Some(&MemberIntent::Drain),
            Members::Known(&member(MemberState::Draining)),
            at(20),
            &s,
        );
        assert_eq!(out.state, TargetState::Removing);
        assert_eq!(out.since, at(0));
        assert_eq!(out.requeue_after, Some(Duration::from_secs(10)));
    }

    #[test]
    fn zero_drain_removes_at_once_and_missing_members_are_not_drained() {
        let s = Settings {
            drain: Duration::ZERO,
            ..settings()
        };
        let mut t = recorded(target(), TargetState::Active, 0);
        t.deleting = true;
        assert_eq!(intent(&t, at(1), &s), None);
        // A target that was never a member goes straight to removed.
        let mut t = target();
        t.deleting = true;
        let s = settings();
        assert_eq!(
            hooks_before(&t, &s),
            None,
            "no hooks added to a deleting stranger"
        );
        let out = settle(
            &t,
            intent(&t, at(0), &s).as_ref(),
            Members::Known(&[]),
            at(0),
            &s,
        );
        assert_eq!(out.state, TargetState::Removed);
        assert!(!out.hooks);
    }

    #[test]
    fn unknown_members_keep_the_recorded_state_and_hooks() {
        let s = settings();
        let mut t = recorded(target(), TargetState::Active, 0);
        t.deleting = true;
        let out = settle(&t, Some(&MemberIntent::Drain), Members::Unknown, at(5), &s);
        assert_eq!(
            out.state,
            TargetState::Active,
            "not draining until the provider says so"
        );
        assert!(out.hooks, "a member may exist: hooks held");
        let t = recorded(t, TargetState::Removed, 0);
        let out = settle(&t, None, Members::Unknown, at(5), &s);
        assert_eq!(out.state, TargetState::Removed);
        assert!(!out.hooks);
        let new = target();
        let out = settle(&new, Some(&MemberIntent::Keep), Members::Unknown, at(0), &s);
        assert_eq!(out.state, TargetState::Adding);
    }

    #[test]
    fn release_drops_hooks_everywhere() {
        let s = Settings {
            release_hooks: true,
            ..settings()
        };
        let t = recorded(target(), TargetState::Active, 0);
        assert_eq!(hooks_before(&t, &s), Some(false));
        let out = settle(
            &t,
            intent(&t, at(0), &s).as_ref(),
            Members::Known(&member(MemberState::Active)),
            at(0),
            &s,
        );
        assert!(!out.hooks);
        let no_hooks = Settings {
            hooks: false,
            ..settings()
        };
        assert_eq!(hooks_before(&t, &no_hooks), None);
    }

    #[test]
    fn garbage_annotations_read_as_nothing_recorded() {
        let keys = TargetKeys::new("default", "cp");
        let annotations = BTreeMap::from([
            (keys.state.clone(), "Active".to_string()),
            (keys.since.clone(), "yesterday".to_string()),
        ]);
        let t = Observed::from_annotations(
            "m1".into(),
            true,
            false,
            &annotations,
            &keys,
            None,
            Vec::new(),
        );
        assert_eq!(t.recorded, None);
        assert_eq!(t.since, None);
    }

    #[test]
    fn the_unkeyed_pair_has_one_holder() {
        let ns = "default";
        let (a, b) = (TargetKeys::new(ns, "a"), TargetKeys::new(ns, "b"));
        let empty = BTreeMap::new();
        let first = annotate(
            &empty,
            ns,
            "a",
            &a,
            Some((TargetState::Active, t0())),
            Some(true),
        );
        assert_eq!(first[ANNOTATION_TARGET_LB], "a");
        assert_eq!(first[ANNOTATION_TARGET_STATUS], "active");
        assert_eq!(first[&a.pre_drain], "capi-lb/a");
        assert!(first.contains_key(&a.pre_terminate));
        // b does not take it over while a tracks the target.
        let both = annotate(
            &first,
            ns,
            "b",
            &b,
            Some((TargetState::Adding, t0())),
            Some(true),
        );
        assert_eq!(both[ANNOTATION_TARGET_LB], "a");
        assert_eq!(both[ANNOTATION_TARGET_STATUS], "active");
        assert_eq!(both[&b.state], "adding");
        // a lets go (its LoadBalancer is deleted): the pair goes, b takes it on its next pass.
        let released = annotate(&both, ns, "a", &a, None, None);
        assert!(!released.contains_key(ANNOTATION_TARGET_LB));
        assert!(!released.contains_key(&a.pre_drain));
        assert!(released.contains_key(&b.pre_drain));
        let taken = annotate(
            &released,
            ns,
            "b",
            &b,
            Some((TargetState::Active, t0())),
            Some(true),
        );
        assert_eq!(taken[ANNOTATION_TARGET_LB], "b");
        // a holder that only says "removed" yields to a live LoadBalancer.
        let removed = annotate(
            &empty,
            ns,
            "a",
            &a,
            Some((TargetState::Removed, t0())),
            Some(false),
        );
        let taken = annotate(
            &removed,
            ns,
            "b",
            &b,
            Some((TargetState::Adding, t0())),
            Some(true),
        );
        assert_eq!(taken[ANNOTATION_TARGET_LB], "b");
        assert_eq!(taken[ANNOTATION_TARGET_STATUS], "adding");
        // Hooks of another owner under other keys are never touched.
        let mut foreign = taken.clone();
        foreign.insert(
            "pre-drain.delete.hook.machine.cluster.x-k8s.io/other".into(),
            "someone".into(),
        );
        let out = annotate(&foreign, ns, "b", &b, None, None);
        assert!(out.contains_key("pre-drain.delete.hook.machine.cluster.x-k8s.io/other"));
    }

    /// Every combination of what can be observed about a target, what was recorded, and what the
    /// provider has: the rules that must hold whatever the combination.
    #[test]
    fn exhaustive_rules_over_every_combination() {
        let bools = [false, true];
        let recorded: Vec<Option<TargetState>> = std::iter::once(None)
            .chain(TargetState::ALL.into_iter().map(Some))
            .collect();
        let member_states = [
            None,
            Some(MemberState::Adding),
            Some(MemberState::Active),
            Some(MemberState::Draining),
        ];
        let mut checked = 0;
        for selected in bools {
            for deleting in bools {
                for disabled in bools {
                    for unhealthy in bools {
                        for address in bools {
                            for gated in bools {
                                for rec in &recorded {
                                    for since in [None, Some(at(0))] {
                                        for member in member_states {
                                            for release in bools {
                                                for drain in [Duration::ZERO, DRAIN] {
                                                    let t = Observed {
                                                        selected,
                                                        deleting,
                                                        disabled,
                                                        unhealthy,
                                                        address: address.then(|| "10.0.0.1".into()),
                                                        gates_pending: if gated {
                                                            vec!["G".into()]
                                                        } else {
                                                            Vec::new()
                                                        },
                                                        recorded: *rec,
                                                        since,
                                                        ..target()
                                                    };
                                                    let s = Settings {
                                                        drain,
                                                        hooks: true,
                                                        release_hooks: release,
                                                    };
                                                    check_rules(&t, member, &s);
                                                    checked += 1;
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 2 * 2 * 2 * 2 * 9 * 2 * 4 * 2 * 2);
    }

    fn check_rules(t: &Observed, member: Option<MemberState>, s: &Settings) {
        let now = at(15);
        let i = intent(t, now, s);
        let ctx = format!("{t:?} member {member:?} {s:?} -> {i:?}");
        // Only a target that wants in, has an address and passed its gates is served.
        if let Some(MemberIntent::Serve(_)) = i {
            assert!(
                t.wants_in() && t.address.is_some() && t.gates_pending.is_empty(),
                "{ctx}"
            );
        }
        // A target that wants in is never removed or drained.
        if t.wants_in() {
            assert!(
                matches!(i, Some(MemberIntent::Serve(_) | MemberIntent::Keep)),
                "{ctx}"
            );
        }
        // A serving member of a target that wants out is drained first when there is a drain time.
        if !t.wants_in() && !s.drain.is_zero() && t.recorded == Some(TargetState::Active) {
            assert_eq!(i, Some(MemberIntent::Drain), "{ctx}");
        }
        // Hooks go on before the call where a member may already exist (going by the recorded
        // state), and are only released by a release.
        match hooks_before(t, s) {
            Some(false) => assert!(s.release_hooks, "{ctx}"),
            Some(true) => assert!(!s.release_hooks && t.recorded_member(), "{ctx}"),
            None => assert!(!s.hooks || !t.recorded_member(), "{ctx}"),
        }
        // The provider answered with `member` (as the in-memory provider would after `i`).
        let after: Vec<MemberStatus> = member
            .into_iter()
            .map(|state| MemberStatus {
                name: t.name.clone(),
                address: "10.0.0.1".into(),
                state,
            })
            .collect();
        let out = settle(t, i.as_ref(), Members::Known(&after), now, s);
        // The state says whether a member exists.
        assert_eq!(
            out.state.may_be_member(),
            t.wants_in() || member.is_some(),
            "{ctx} => {out:?}"
        );
        // Active exactly while the provider says the member takes new connections: one that
        // leaves stays active until the provider stopped that.
        assert_eq!(
            out.state == TargetState::Active,
            member == Some(MemberState::Active),
            "{ctx} => {out:?}"
        );
        // Hooks are held exactly while a member may exist, unless released.
        assert_eq!(
            out.hooks,
            !s.release_hooks && out.state.may_be_member(),
            "{ctx} => {out:?}"
        );
        // Written (state and hooks) whenever a member may exist after the call: one asked for,
        // or one the provider has. Left unwritten only while a new target cannot join yet.
        let asked = matches!(i, Some(MemberIntent::Serve(_)));
        assert_eq!(
            out.record,
            t.recorded.is_some() || !t.wants_in() || asked || member.is_some(),
            "{ctx} => {out:?}"
        );
        // Disabled, unhealthy or removed follows the reason (once no longer active).
        if !t.wants_in() && out.state != TargetState::Active {
            let by_user = t.selected && !t.deleting && t.disabled;
            let by_health = t.selected && !t.deleting && !t.disabled && t.unhealthy;
            assert_eq!(
                matches!(out.state, TargetState::Disabling | TargetState::Disabled),
                by_user,
                "{ctx} => {out:?}"
            );
            assert_eq!(
                matches!(out.state, TargetState::Failing | TargetState::Unhealthy),
                by_health,
                "{ctx} => {out:?}"
            );
        }
        // A drain deadline is asked for only while draining (or leaving and still active).
        if out.requeue_after.is_some() {
            assert!(
                out.state.is_draining() || (out.state == TargetState::Active && !t.wants_in()),
                "{ctx} => {out:?}"
            );
        }
        // Time only moves forward and an unchanged state keeps its time.
        assert!(out.since <= now);
        if t.recorded == Some(out.state) && t.since.is_some() {
            assert_eq!(Some(out.since), t.since, "{ctx} => {out:?}");
        }
        // With the provider unknown, nothing leaves a state that implies a member.
        let unknown = settle(t, i.as_ref(), Members::Unknown, now, s);
        if asked {
            assert!(
                unknown.record && unknown.hooks != s.release_hooks,
                "{ctx} => {unknown:?}"
            );
        }
        if t.recorded.is_some_and(TargetState::may_be_member) {
            assert!(unknown.state.may_be_member(), "{ctx} => {unknown:?}");
            assert_eq!(unknown.hooks, !s.release_hooks, "{ctx} => {unknown:?}");
        }
    }
}
