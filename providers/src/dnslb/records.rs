//! The record set of a DNS load balancer and its members (pure): from the records published so
//! far, the targets draining, the members the reconciler wants and what ExternalDNS last took, the
//! next record set and how each member stands.
//!
//! - A target to `Serve` at an IP address is a record; one to `Keep` stays a record if it is one,
//!   and is never made one; one to `Drain`, or no longer listed, is taken out.
//! - A record is an `Active` member once ExternalDNS took a record set with its address, `Adding`
//!   before. A target taken out is reported `Active` for as long as the set ExternalDNS took still
//!   has its address (its drain has not started: clients still get it), then `Draining` while the
//!   reconciler drains it, and gone once it is no longer listed.
//! - The set is never empty once it had a record: when every target would leave, the records there
//!   are stay (and are reported). Their targets are not held for it: one asked to drain is
//!   reported draining, one no longer listed is gone, so a Machine's deletion never waits on it.

use std::collections::BTreeSet;
use std::net::IpAddr;

use capi_lb_api::dnslb::DNSRecord;

use crate::provider::{DesiredMember, MemberIntent, MemberState, MemberStatus};

/// The next record set and the members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The records to publish, in the order of the targets asked for.
    pub records: Vec<DNSRecord>,
    /// Targets taken out and still tracked.
    pub draining: Vec<DNSRecord>,
    /// The members as the reconciler sees them.
    pub members: Vec<MemberStatus>,
    /// Targets kept as records because none would be left otherwise.
    pub kept_last: Vec<String>,
    /// Targets to serve whose address is not an IP address (kept if they were records).
    pub not_ip: Vec<String>,
}

impl Decision {
    /// True when ExternalDNS took exactly the records decided.
    pub fn published(&self, taken: &BTreeSet<String>) -> bool {
        let wanted: BTreeSet<&str> = self.records.iter().map(|r| r.address.as_str()).collect();
        wanted.len() == taken.len() && taken.iter().all(|a| wanted.contains(a.as_str()))
    }
}

/// `address` as a record holds it (an IP in its canonical form), or `None` for a DNS name.
fn ip(address: &str) -> Option<String> {
    address.parse::<IpAddr>().ok().map(|ip| ip.to_string())
}

/// Decide the record set from the `current` records, the targets `draining`, the `desired`
/// members and the addresses ExternalDNS last `taken`.
pub fn decide(
    current: &[DNSRecord],
    draining: &[DNSRecord],
    desired: &[DesiredMember],
    taken: &BTreeSet<String>,
) -> Decision {
    let find = |name: &str| current.iter().find(|r| r.target == name);
    let mut out = Decision::default();
    for member in desired {
        match &member.intent {
            MemberIntent::Serve(address) => match ip(address) {
                Some(address) => out.records.push(DNSRecord {
                    target: member.name.clone(),
                    address,
                }),
                None => {
                    out.not_ip.push(member.name.clone());
                    out.records.extend(find(&member.name).cloned());
                }
            },
            MemberIntent::Keep => out.records.extend(find(&member.name).cloned()),
            MemberIntent::Drain => {}
        }
    }
    if out.records.is_empty() && !current.is_empty() {
        out.records = current.to_vec();
        out.kept_last = current.iter().map(|r| r.target.clone()).collect();
    }
    let is_record = |name: &str| out.records.iter().any(|r| r.target == name);
    let draining_asked = |name: &str| {
        desired
            .iter()
            .any(|m| m.name == name && m.intent == MemberIntent::Drain)
    };
    let mut seen = BTreeSet::new();
    for left in current.iter().chain(draining) {
        if is_record(&left.target) || !seen.insert(left.target.clone()) {
            continue;
        }
        if draining_asked(&left.target) || taken.contains(&left.address) {
            out.draining.push(left.clone());
        }
    }
    let state = |address: &str, out_of_dns: MemberState| {
        if taken.contains(address) {
            MemberState::Active
        } else {
            out_of_dns
        }
    };
    let kept_state = |name: &str| draining_asked(name).then_some(MemberState::Draining);
    out.members = out
        .records
        .iter()
        .filter_map(|r| {
            let state = if out.kept_last.contains(&r.target) {
                kept_state(&r.target)?
            } else {
                state(&r.address, MemberState::Adding)
            };
            Some(MemberStatus {
                name: r.target.clone(),
                address: r.address.clone(),
                state,
            })
        })
        .chain(out.draining.iter().map(|r| MemberStatus {
            name: r.target.clone(),
            address: r.address.clone(),
            state: state(&r.address, MemberState::Draining),
        }))
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(target: &str, address: &str) -> DNSRecord {
        DNSRecord {
            target: target.into(),
            address: address.into(),
        }
    }

    fn taken(addresses: &[&str]) -> BTreeSet<String> {
        addresses.iter().map(|a| a.to_string()).collect()
    }

    fn states(d: &Decision) -> Vec<(String, MemberState)> {
        d.members
            .iter()
            .map(|m| (m.name.clone(), m.state))
            .collect()
    }

    #[test]
    fn targets_to_serve_are_records_active_once_external_dns_took_them() {
        let desired = [
            DesiredMember::serve("a", "192.0.2.1"),
            DesiredMember::serve("b", "2001:db8:0::2"),
        ];
        let first = decide(&[], &[], &desired, &taken(&[]));
        assert_eq!(
            first.records,
            vec![record("a", "192.0.2.1"), record("b", "2001:db8::2")]
        );
        assert_eq!(
            states(&first),
            vec![
                ("a".into(), MemberState::Adding),
                ("b".into(), MemberState::Adding)
            ]
        );
        assert!(!first.published(&taken(&[])));
        let took = taken(&["192.0.2.1", "2001:db8::2"]);
        let second = decide(&first.records, &[], &desired, &took);
        assert!(second.published(&took));
        assert!(
            second
                .members
                .iter()
                .all(|m| m.state == MemberState::Active)
        );
    }

    #[test]
    fn a_kept_target_stays_a_record_but_is_never_made_one() {
        let current = [record("a", "192.0.2.1")];
        let desired = [DesiredMember::keep("a"), DesiredMember::keep("b")];
        let d = decide(&current, &[], &desired, &taken(&["192.0.2.1"]));
        assert_eq!(d.records, vec![record("a", "192.0.2.1")]);
        assert_eq!(states(&d), vec![("a".into(), MemberState::Active)]);
    }

    #[test]
    fn a_target_taken_out_is_active_until_dns_lost_it_then_draining_then_gone() {
        let current = [record("a", "192.0.2.1"), record("b", "192.0.2.2")];
        let desired = [
            DesiredMember::serve("a", "192.0.2.1"),
            DesiredMember::drain("b"),
        ];
        let both = taken(&["192.0.2.1", "192.0.2.2"]);
        let asked = decide(&current, &[], &desired, &both);
        assert_eq!(asked.records, vec![record("a", "192.0.2.1")]);
        assert_eq!(asked.draining, vec![record("b", "192.0.2.2")]);
        // Still in DNS: its drain has not started.
        assert_eq!(asked.members[1].state, MemberState::Active);
        let one = taken(&["192.0.2.1"]);
        let out = decide(&asked.records, &asked.draining, &desired, &one);
        assert_eq!(out.members[1].state, MemberState::Draining);
        // Drained: no longer listed, gone.
        let done = decide(
            &out.records,
            &out.draining,
            &[DesiredMember::serve("a", "192.0.2.1")],
            &one,
        );
        assert_eq!(done.draining, vec![]);
        assert_eq!(states(&done), vec![("a".into(), MemberState::Active)]);
        // Not listed but still in DNS (a drain of zero seconds): reported until it is out.
        let early = decide(
            &current,
            &[],
            &[DesiredMember::serve("a", "192.0.2.1")],
            &both,
        );
        assert_eq!(early.draining, vec![record("b", "192.0.2.2")]);
        assert_eq!(early.members[1].state, MemberState::Active);
    }

    #[test]
    fn the_records_never_go_empty_the_last_ones_stay_and_are_named_but_hold_no_target() {
        let current = [record("a", "192.0.2.1")];
        let took = taken(&["192.0.2.1"]);
        for (desired, members) in [
            // Asked to drain: drains (its hooks go after the drain, the record stays).
            (
                vec![DesiredMember::drain("a")],
                vec![("a".to_string(), MemberState::Draining)],
            ),
            // Drained, no longer listed: gone as a member, still the record.
            (vec![], vec![]),
        ] {
            let d = decide(&current, &[], &desired, &took);
            assert_eq!(d.records, current.to_vec(), "{desired:?}");
            assert_eq!(d.kept_last, vec!["a".to_string()]);
            assert_eq!(states(&d), members, "{desired:?}");
        }
        // Nothing published yet: nothing to keep.
        let empty = decide(&[], &[], &[DesiredMember::drain("a")], &taken(&[]));
        assert!(empty.records.is_empty() && empty.kept_last.is_empty());
    }

    #[test]
    fn a_dns_name_is_no_record_and_a_record_it_had_stays() {
        let current = [record("a", "192.0.2.1")];
        let desired = [
            DesiredMember::serve("a", "a.example.org"),
            DesiredMember::serve("b", "b.example.org"),
        ];
        let d = decide(&current, &[], &desired, &taken(&[]));
        assert_eq!(d.records, current.to_vec());
        assert_eq!(d.not_ip, vec!["a".to_string(), "b".to_string()]);
    }
}
