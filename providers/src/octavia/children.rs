//! A load balancer's children: one listener, pool and health monitor per LoadBalancer port. Creates
//! what is missing, applies changed settings (tracked as hashes in the status), replaces a health
//! monitor whose settings changed and removes the children of ports no longer wanted; one write per
//! call, since Octavia takes one write at a time.

use std::collections::{BTreeMap, BTreeSet};

use capi_lb_api::octavia::{AppliedSettings, ListenerStatus};
use serde_json::{Map, Value, json};

use super::OctaviaProvider;
use super::api::{ApiVersion, Request, Session};
use super::call::Call;
use super::documents::{Tree, TreeListener, TreePool};
use super::naming::child_name;
use super::reason;
use super::settings::{Settings, with};
use super::stop::Stop;
use crate::provider::{Listener, Progress};

/// One write to Octavia: the operation (as reported to the observer), the request, and what it
/// does (for the changes and the progress message).
struct Write {
    operation: &'static str,
    request: Request,
    what: String,
}

impl OctaviaProvider {
    /// Body of a listener with its default pool and health monitor (single-call create).
    pub(super) fn listener_body(
        &self,
        call: &Call<'_>,
        listener: &Listener,
        version: ApiVersion,
    ) -> Value {
        let name = child_name(&call.lb_name(), listener);
        let settings = Settings::new(&call.infra, listener, version);
        let tags = call.tags();
        let protocol = listener.protocol.as_str();
        let mut monitor = with(settings.monitor, json!({ "name": name }));
        let mut pool = with(settings.pool, json!({ "name": name, "protocol": protocol }));
        let mut body = with(
            settings.listener,
            json!({ "name": name, "protocol": protocol, "protocol_port": listener.port }),
        );
        if version >= ApiVersion::TAGS {
            for object in [&mut monitor, &mut pool, &mut body] {
                if let Value::Object(o) = object {
                    o.insert("tags".into(), json!(tags));
                }
            }
        }
        if let Value::Object(p) = &mut pool {
            p.insert("healthmonitor".into(), monitor);
        }
        if let Value::Object(b) = &mut body {
            b.insert("default_pool".into(), pool);
        }
        body
    }

    /// Listeners, pools and monitors: create what is missing, apply changed settings, remove ports
    /// no longer wanted; one write per call.
    pub(super) async fn converge_children(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        tree: &Tree,
        listeners: &[Listener],
    ) -> Result<Progress, Stop> {
        let lb = call.lb_name();
        let lb_id = tree.id.clone();
        let previous: BTreeMap<i32, ListenerStatus> = call
            .status
            .listeners
            .iter()
            .map(|l| (l.port, l.clone()))
            .collect();
        let mut statuses = Vec::new();
        let mut write: Option<Write> = None;
        for listener in listeners {
            let name = child_name(&lb, listener);
            let settings = Settings::new(&call.infra, listener, session.version);
            let mut entry = previous
                .get(&listener.port)
                .cloned()
                .unwrap_or(ListenerStatus {
                    port: listener.port,
                    ..Default::default()
                });
            match tree
                .listeners
                .iter()
                .find(|l| l.name.as_deref() == Some(name.as_str()))
            {
                None if write.is_none() => {
                    let (created, next) =
                        self.create_listener(call, listener, &lb_id, &settings, session.version);
                    entry = created;
                    write = Some(next);
                }
                None => {}
                Some(found) => {
                    take_ids(&mut entry, found);
                    if write.is_none() {
                        let port = Port {
                            listener,
                            name: &name,
                            found,
                            settings: &settings,
                        };
                        write = next_write(call, &port, session.version, &mut entry);
                    }
                }
            }
            statuses.push(entry);
        }
        if write.is_none() {
            write = remove_stale(&lb, tree, listeners);
        }
        call.status.listeners = statuses;
        let Some(Write {
            operation,
            request,
            what,
        }) = write
        else {
            return Ok(Progress::Done);
        };
        self.forget_tree(&lb_id);
        // A delete of an object already gone has done its job.
        let sent = if operation.ends_with(".delete") {
            session
                .require_or_gone(self.observer(), operation, request)
                .await
                .map(|_| ())
        } else {
            session
                .require(self.observer(), operation, request)
                .await
                .map(|_| ())
        };
        if let Err(stop) = sent {
            call.status.listeners = previous.into_values().collect();
            return Err(stop);
        }
        call.changes.push(what.clone());
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_PENDING,
            what,
            call.began(),
        ))
    }

    /// The write for a port without a listener, and its status once written. Octavia's listener
    /// create fails on a nested default pool (HTTP 500 seen with Octavia 19): the listener alone,
    /// then its pool, then its monitor.
    fn create_listener(
        &self,
        call: &Call<'_>,
        listener: &Listener,
        lb_id: &str,
        settings: &Settings,
        version: ApiVersion,
    ) -> (ListenerStatus, Write) {
        let mut body = self.listener_body(call, listener, version);
        if let Value::Object(o) = &mut body {
            o.remove("default_pool");
            o.insert("loadbalancer_id".into(), json!(lb_id));
        }
        let entry = ListenerStatus {
            port: listener.port,
            applied: Some(AppliedSettings {
                listener: settings.applied().listener,
                ..Default::default()
            }),
            ..Default::default()
        };
        let write = Write {
            operation: "listener.create",
            request: Request::post("lbaas/listeners", json!({ "listener": body })),
            what: format!("creating the listener of port {}", listener.port),
        };
        (entry, write)
    }
}

/// A port whose listener exists: the LoadBalancer's listener, the name of its children, the
/// listener found in the tree and the settings it should have.
struct Port<'a> {
    listener: &'a Listener,
    name: &'a str,
    found: &'a TreeListener,
    settings: &'a Settings,
}

/// Record in `entry` the IDs of a port's children as the tree shows them; what was applied to
/// another listener than the one found does not count.
fn take_ids(entry: &mut ListenerStatus, found: &TreeListener) {
    if entry.listener_id.as_deref() != Some(found.id.as_str()) && entry.listener_id.is_some() {
        entry.applied = None;
    }
    entry.listener_id = Some(found.id.clone());
    let pool = found.pools.first();
    entry.pool_id = pool.map(|p| p.id.clone());
    entry.monitor_id = pool.and_then(|p| p.health_monitor.as_ref().map(|m| m.id.clone()));
}

/// `body` (an object) with the fields of `extra` added.
fn with_fields(body: Value, extra: Value) -> Value {
    with(
        match body {
            Value::Object(o) => o,
            _ => Map::new(),
        },
        extra,
    )
}

/// The next write of a port whose listener exists: its pool, else its monitor, else the settings
/// that changed; `entry` records what the write applies.
fn next_write(
    call: &Call<'_>,
    port: &Port<'_>,
    version: ApiVersion,
    entry: &mut ListenerStatus,
) -> Option<Write> {
    let wanted = port.settings.applied();
    let applied = entry.applied.clone().unwrap_or_default();
    let tags = if version >= ApiVersion::TAGS {
        json!({ "tags": call.tags() })
    } else {
        json!({})
    };
    let number = port.listener.port;
    match port.found.pools.first() {
        None => {
            let body = with(
                port.settings.pool.clone(),
                json!({ "name": port.name, "protocol": port.listener.protocol.as_str(), "listener_id": port.found.id }),
            );
            let body = with_fields(body, tags);
            entry.applied = Some(AppliedSettings {
                pool: wanted.pool.clone(),
                monitor: None,
                ..applied
            });
            Some(Write {
                operation: "pool.create",
                request: Request::post("lbaas/pools", json!({ "pool": body })),
                what: format!("creating the pool of port {number}"),
            })
        }
        Some(pool) if pool.health_monitor.is_none() => {
            let body = with(
                port.settings.monitor.clone(),
                json!({ "name": port.name, "pool_id": pool.id }),
            );
            let body = with_fields(body, tags);
            entry.applied = Some(AppliedSettings {
                monitor: wanted.monitor.clone(),
                ..applied
            });
            Some(Write {
                operation: "healthmonitor.create",
                request: Request::post("lbaas/healthmonitors", json!({ "healthmonitor": body })),
                what: format!("creating the health monitor of port {number}"),
            })
        }
        Some(pool) => update(port, pool, &wanted, &applied, entry),
    }
}

/// The write applying a port's changed settings: the listener's, else the pool's, else the
/// monitor's; `None` when nothing changed.
fn update(
    port: &Port<'_>,
    pool: &TreePool,
    wanted: &AppliedSettings,
    applied: &AppliedSettings,
    entry: &mut ListenerStatus,
) -> Option<Write> {
    let number = port.listener.port;
    if applied.listener != wanted.listener {
        entry.applied = Some(AppliedSettings {
            listener: wanted.listener.clone(),
            ..applied.clone()
        });
        Some(Write {
            operation: "listener.update",
            request: Request::put(
                format!("lbaas/listeners/{}", port.found.id),
                json!({ "listener": Value::Object(port.settings.listener.clone()) }),
            ),
            what: format!("updating the listener of port {number}"),
        })
    } else if applied.pool != wanted.pool {
        entry.applied = Some(AppliedSettings {
            pool: wanted.pool.clone(),
            ..applied.clone()
        });
        Some(Write {
            operation: "pool.update",
            request: Request::put(
                format!("lbaas/pools/{}", pool.id),
                json!({ "pool": Value::Object(port.settings.pool.clone()) }),
            ),
            what: format!("updating the pool of port {number}"),
        })
    } else if applied.monitor != wanted.monitor
        && let Some(monitor) = &pool.health_monitor
        && monitor.type_.as_deref() == port.settings.monitor.get("type").and_then(Value::as_str)
    {
        // Same type (or settings never recorded: a lost status, a moved object): updated in
        // place, so the members are never without a monitor.
        entry.applied = Some(AppliedSettings {
            monitor: wanted.monitor.clone(),
            ..applied.clone()
        });
        let mut body = port.settings.monitor.clone();
        body.remove("type");
        Some(Write {
            operation: "healthmonitor.update",
            request: Request::put(
                format!("lbaas/healthmonitors/{}", monitor.id),
                json!({ "healthmonitor": Value::Object(body) }),
            ),
            what: format!("updating the health monitor of port {number}"),
        })
    } else if applied.monitor != wanted.monitor
        && let Some(monitor) = &pool.health_monitor
    {
        // A monitor's type cannot change: replace it (the next call creates the new one).
        entry.applied = Some(AppliedSettings {
            monitor: None,
            ..applied.clone()
        });
        entry.monitor_id = None;
        Some(Write {
            operation: "healthmonitor.delete",
            request: Request::delete(format!("lbaas/healthmonitors/{}", monitor.id)),
            what: format!("replacing the health monitor of port {number}"),
        })
    } else {
        None
    }
}

/// Listeners of ports no longer wanted (named like ours; anything else on the load balancer is
/// left alone): the pool first (it takes its members and monitor), then the listener.
fn remove_stale(lb: &str, tree: &Tree, listeners: &[Listener]) -> Option<Write> {
    let wanted: BTreeSet<String> = listeners.iter().map(|l| child_name(lb, l)).collect();
    let stale = tree.listeners.iter().find(|l| {
        l.name
            .as_deref()
            .is_some_and(|n| n.starts_with(&format!("{lb}-")) && !wanted.contains(n))
    })?;
    let name = stale.name.clone().unwrap_or_default();
    Some(match stale.pools.first() {
        Some(pool) => Write {
            operation: "pool.delete",
            request: Request::delete(format!("lbaas/pools/{}", pool.id)),
            what: format!("removing the pool of {name} (port no longer wanted)"),
        },
        None => Write {
            operation: "listener.delete",
            request: Request::delete(format!("lbaas/listeners/{}", stale.id)),
            what: format!("removing listener {name} (port no longer wanted)"),
        },
    })
}
