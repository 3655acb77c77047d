//! Member convergence: each pool's members from the LoadBalancer's desired members ([`plan`]: serve
//! with weight 1, drain with weight 0, keep), written with Octavia's batch member update, one pool
//! per call; and each member's state as the status tree shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::OctaviaProvider;
use super::api::{ApiVersion, Request, Session};
use super::call::Call;
use super::documents::{LbRecord, PoolMember, TreePool};
use super::naming::child_name;
use super::reason;
use super::stop::Stop;
use crate::provider::{DesiredMember, Listener, MemberIntent, MemberState, MemberStatus, Progress};

/// How long what the provider knows of member weights is trusted without reading them back.
const MEMBERS_FRESH: Duration = Duration::from_secs(600);

/// Each member's address and state by target name.
type States = BTreeMap<String, (String, MemberState)>;

impl OctaviaProvider {
    /// What the provider knows of a pool's members, read back when it does not match the tree.
    async fn pool_members(
        &self,
        session: &Session,
        pool: &TreePool,
    ) -> Result<Vec<PoolMember>, Stop> {
        // Members on their way out (PENDING_DELETE after a batch update) no longer count.
        let in_tree: BTreeSet<(String, i32)> = pool
            .members
            .iter()
            .filter(|m| m.provisioning_status != "PENDING_DELETE")
            .map(|m| (m.address.clone(), m.protocol_port))
            .collect();
        if in_tree.is_empty() {
            // The tree is authoritative about which members exist: none, nothing to read.
            return Ok(Vec::new());
        }
        if let Ok(known) = self.members.lock()
            && let Some((at, members)) = known.get(&pool.id)
            && at.elapsed() < MEMBERS_FRESH
            && members
                .iter()
                .map(|m| (m.address.clone(), m.protocol_port))
                .collect::<BTreeSet<_>>()
                == in_tree
        {
            return Ok(members.clone());
        }
        let body = session
            .require(
                self.observer(),
                "member.list",
                Request::get(format!("lbaas/pools/{}/members", pool.id)),
            )
            .await?;
        let mut members: Vec<PoolMember> =
            body.field("members", "member.list")?.unwrap_or_default();
        members.sort();
        self.remember_members(&pool.id, members.clone());
        Ok(members)
    }

    /// Remember the members each pool of a load balancer was just created with, as the answer to
    /// the create shows them (as a batch update remembers what it wrote): once the load balancer
    /// is ACTIVE, they need not be read back.
    pub(super) fn remember_created_members(&self, record: &LbRecord) {
        for pool in &record.pools {
            let mut members = pool.members.clone();
            members.sort();
            self.remember_members(&pool.id, members);
        }
    }

    /// Remember `members` as those of pool `id`, now.
    fn remember_members(&self, id: &str, members: Vec<PoolMember>) {
        if let Ok(mut known) = self.members.lock() {
            let now = Instant::now();
            crate::bounded::insert(
                &mut known,
                id.to_string(),
                (now, members),
                super::MAX_CACHED,
                MEMBERS_FRESH,
                now,
                |(at, _)| *at,
            );
        }
    }

    /// `converge_members`: the first pool whose members differ from the plan is written; when none
    /// does, `out` gets each member's state.
    pub(super) async fn converge_members_inner(
        &self,
        call: &mut Call<'_>,
        listeners: &[Listener],
        desired: &[DesiredMember],
        out: &mut Vec<MemberStatus>,
    ) -> Result<Progress, Stop> {
        let Some(id) = call.status.load_balancer_id.clone() else {
            return Ok(Progress::pending(
                "no Octavia load balancer yet",
                call.relook(),
            ));
        };
        let session = self.session(&call.infra).await?;
        let Some(tree) = self.tree(&session, &id, true).await? else {
            return Ok(Progress::pending(
                format!("Octavia load balancer {id} is gone"),
                call.relook(),
            ));
        };
        // While Octavia applies an update (PENDING_UPDATE) nothing can be written, but the tree
        // still shows every member and its state: they are reported, so targets keep their
        // states instead of looking absent until the next look. Other states (PENDING_CREATE,
        // PENDING_DELETE, ERROR) have no members worth reporting.
        let updating = tree.provisioning_status == "PENDING_UPDATE";
        if tree.provisioning_status != "ACTIVE" && !updating {
            call.status.provisioning_status = Some(tree.provisioning_status.clone());
            return Ok(call.pending(&tree.provisioning_status));
        }
        let lb = call.lb_name();
        let bad = not_ip(desired);
        let mut state = States::new();
        let mut count = 0;
        let mut pending_pool = None;
        let mut wrote = None;
        for listener in listeners {
            let name = child_name(&lb, listener);
            let Some(pool) = tree
                .listeners
                .iter()
                .find(|l| l.name.as_deref() == Some(name.as_str()))
                .and_then(|l| l.pools.first())
            else {
                pending_pool = Some(listener.port);
                continue;
            };
            let known = self.pool_members(&session, pool).await?;
            let wanted = plan(desired, &known, listener.target_port);
            // One write per call: Octavia is busy with it until it is applied. The states are
            // those of the members as written (a new one Adding, a removed one Draining until
            // Octavia has deleted it); the others keep theirs.
            if wanted != known && !updating && wrote.is_none() {
                self.forget_tree(&id);
                self.write_members(&session, call, pool, &wanted).await?;
                call.changes.push(format!(
                    "members of port {}: {}",
                    listener.port,
                    describe_change(&known, &wanted)
                ));
                wrote = Some(listener.port);
                count += wanted.len();
                add_states(&mut state, &wanted, pool);
                add_leaving(&mut state, known.iter().map(|m| (&m.name, &m.address)));
                continue;
            }
            count += pool.members.len();
            add_states(&mut state, &known, pool);
            add_leaving(
                &mut state,
                pool.members
                    .iter()
                    .filter(|m| m.provisioning_status == "PENDING_DELETE")
                    .map(|m| (&m.name, &m.address)),
            );
        }
        call.status.member_count = i32::try_from(count).unwrap_or(i32::MAX);
        *out = state
            .into_iter()
            .map(|(name, (address, state))| MemberStatus {
                name,
                address,
                state,
            })
            .collect();
        if let Some(port) = wrote {
            return Ok(Progress::pending_because(
                reason::LOAD_BALANCER_PENDING,
                format!("updating the members of port {port}"),
                call.began(),
            ));
        }
        if updating {
            call.status.provisioning_status = Some(tree.provisioning_status.clone());
            return Ok(call.pending(&tree.provisioning_status));
        }
        if let Some(port) = pending_pool {
            return Ok(Progress::pending(
                format!("waiting for the pool of port {port}"),
                call.relook(),
            ));
        }
        if !bad.is_empty() {
            return Ok(Progress::pending_because(
                reason::MEMBER_ADDRESS_NOT_IP,
                format!(
                    "Octavia members need IP addresses; these targets have only a DNS name: {}",
                    bad.join(", ")
                ),
                Duration::from_secs(60),
            ));
        }
        if out.iter().any(|m| m.state == MemberState::Adding) {
            return Ok(Progress::pending(
                "members being provisioned",
                call.relook(),
            ));
        }
        Ok(Progress::Done)
    }

    /// Set a pool's members to `wanted` with one batch member update, and remember them.
    async fn write_members(
        &self,
        session: &Session,
        call: &Call<'_>,
        pool: &TreePool,
        wanted: &[PoolMember],
    ) -> Result<(), Stop> {
        let members = member_bodies(call, wanted, session.version);
        session
            .require(
                self.observer(),
                "member.batch-update",
                Request::put(
                    format!("lbaas/pools/{}/members", pool.id),
                    json!({ "members": members }),
                ),
            )
            .await?;
        self.remember_members(&pool.id, wanted.to_vec());
        Ok(())
    }
}

/// The request bodies of `members` (with capi-lb's tags where the API has them), for a batch
/// member update or a pool created with its members.
pub(super) fn member_bodies(
    call: &Call<'_>,
    members: &[PoolMember],
    version: ApiVersion,
) -> Vec<Value> {
    let tags = (version >= ApiVersion::TAGS).then(|| call.tags());
    members
        .iter()
        .map(|m| {
            let mut v = json!({
                "address": m.address,
                "protocol_port": m.protocol_port,
                "name": m.name,
                "weight": m.weight,
            });
            if let (Some(tags), Value::Object(o)) = (&tags, &mut v) {
                o.insert("tags".into(), json!(tags));
            }
            v
        })
        .collect()
}

/// The targets to serve that have no IP address (only a DNS name), by name.
fn not_ip(desired: &[DesiredMember]) -> Vec<&str> {
    desired
        .iter()
        .filter_map(|d| match &d.intent {
            MemberIntent::Serve(a) if a.parse::<IpAddr>().is_err() => Some(d.name.as_str()),
            _ => None,
        })
        .collect()
}

/// Add the state of a pool's named members to `state`: Adding until the tree shows the member
/// ACTIVE (or PENDING_UPDATE: it exists and serves), then Draining (weight 0) or Active.
fn add_states(state: &mut States, known: &[PoolMember], pool: &TreePool) {
    for member in known {
        let Some(name) = &member.name else { continue };
        // A member being updated (its weight changed) exists and serves meanwhile.
        let provisioned = pool.members.iter().any(|m| {
            m.address == member.address
                && m.protocol_port == member.protocol_port
                && matches!(m.provisioning_status.as_str(), "ACTIVE" | "PENDING_UPDATE")
        });
        let s = if !provisioned {
            MemberState::Adding
        } else if member.weight == 0 {
            MemberState::Draining
        } else {
            MemberState::Active
        };
        let entry = state
            .entry(name.clone())
            .or_insert((member.address.clone(), s));
        // The weakest state across pools wins: Adding < Draining < Active.
        if s == MemberState::Adding
            || (s == MemberState::Draining && entry.1 == MemberState::Active)
        {
            entry.1 = s;
        }
    }
}

/// Add members on their way out of a pool (`(name, address)`) that `state` does not have yet as
/// Draining: they take no new connections and are not gone until Octavia has deleted them.
fn add_leaving<'a>(
    state: &mut States,
    leaving: impl Iterator<Item = (&'a Option<String>, &'a String)>,
) {
    for (name, address) in leaving {
        if let Some(name) = name {
            state
                .entry(name.clone())
                .or_insert((address.clone(), MemberState::Draining));
        }
    }
}

/// The members a pool should have: `Serve` at the target port with weight 1, `Drain` and `Keep`
/// only where a member exists (weight 0 / unchanged), everything else removed.
pub fn plan(desired: &[DesiredMember], known: &[PoolMember], port: i32) -> Vec<PoolMember> {
    let existing = |name: &str| -> Vec<PoolMember> {
        known
            .iter()
            .filter(|m| m.name.as_deref() == Some(name))
            .cloned()
            .collect()
    };
    let mut out: Vec<PoolMember> = Vec::new();
    for member in desired {
        match &member.intent {
            MemberIntent::Serve(address) => {
                if address.parse::<IpAddr>().is_ok() {
                    out.push(PoolMember {
                        address: address.clone(),
                        protocol_port: port,
                        name: Some(member.name.clone()),
                        weight: 1,
                    });
                } else {
                    out.extend(existing(&member.name));
                }
            }
            MemberIntent::Keep => out.extend(existing(&member.name)),
            MemberIntent::Drain => out.extend(
                existing(&member.name)
                    .into_iter()
                    .map(|m| PoolMember { weight: 0, ..m }),
            ),
        }
    }
    out.sort();
    // Octavia matches members by address and port: one member per pair.
    out.dedup_by(|a, b| a.address == b.address && a.protocol_port == b.protocol_port);
    out
}

fn describe_change(before: &[PoolMember], after: &[PoolMember]) -> String {
    let label = |m: &PoolMember| {
        format!(
            "{} {}:{}{}",
            m.name.as_deref().unwrap_or("?"),
            m.address,
            m.protocol_port,
            if m.weight == 0 { " (draining)" } else { "" }
        )
    };
    let added: Vec<String> = after
        .iter()
        .filter(|m| !before.contains(m))
        .map(label)
        .collect();
    let removed: Vec<String> = before
        .iter()
        .filter(|m| {
            !after
                .iter()
                .any(|a| a.address == m.address && a.protocol_port == m.protocol_port)
        })
        .map(label)
        .collect();
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!("set {}", added.join(", ")));
    }
    if !removed.is_empty() {
        parts.push(format!("removed {}", removed.join(", ")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, address: &str, weight: i32) -> PoolMember {
        PoolMember {
            address: address.into(),
            protocol_port: 6443,
            name: Some(name.into()),
            weight,
        }
    }

    #[test]
    fn plan_serves_drains_keeps_and_removes() {
        let known = vec![
            member("a", "10.0.0.1", 1),
            member("b", "10.0.0.2", 1),
            member("c", "10.0.0.3", 1),
            member("d", "10.0.0.4", 0),
        ];
        let desired = vec![
            DesiredMember::serve("a", "10.0.0.1"),
            DesiredMember::drain("b"),
            DesiredMember::keep("d"),
            DesiredMember::serve("e", "10.0.0.5"),
            DesiredMember::drain("never-existed"),
            DesiredMember::keep("also-never"),
        ];
        let wanted = plan(&desired, &known, 6443);
        assert_eq!(
            wanted,
            vec![
                member("a", "10.0.0.1", 1),
                member("b", "10.0.0.2", 0),
                member("d", "10.0.0.4", 0),
                member("e", "10.0.0.5", 1),
            ]
        );
    }

    #[test]
    fn plan_takes_a_draining_member_back_and_moves_addresses() {
        let known = vec![member("a", "10.0.0.1", 0)];
        let wanted = plan(&[DesiredMember::serve("a", "10.0.0.9")], &known, 6443);
        assert_eq!(wanted, vec![member("a", "10.0.0.9", 1)]);
        let wanted = plan(&[DesiredMember::serve("a", "10.0.0.1")], &known, 6443);
        assert_eq!(wanted, vec![member("a", "10.0.0.1", 1)]);
    }

    #[test]
    fn plan_keeps_a_member_whose_target_has_only_a_dns_name() {
        let known = vec![member("a", "10.0.0.1", 1)];
        let wanted = plan(&[DesiredMember::serve("a", "node-a.example")], &known, 6443);
        assert_eq!(wanted, known);
        assert!(plan(&[DesiredMember::serve("b", "node-b.example")], &[], 6443).is_empty());
    }
}
