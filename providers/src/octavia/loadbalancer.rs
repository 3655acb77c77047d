//! The Octavia load balancer itself: finding and adopting one this LoadBalancer owns by its tags,
//! creating it together with all its listeners in one call, deleting it, and the top of `ensure`
//! (what to do in each provisioning status, recreating one in ERROR, then its children and its
//! floating IP).

use std::time::Duration;

use capi_lb_api::octavia::{ListenerStatus, OctaviaProvider as Driver};
use serde_json::{Value, json};

use super::OctaviaProvider;
use super::api::{ApiVersion, Request, Session};
use super::call::Call;
use super::documents::{LbRecord, Tree};
use super::members::{member_bodies, plan};
use super::naming::{description, lb_name, owned, uid_tag};
use super::reason;
use super::settings::Settings;
use super::stop::Stop;
use crate::provider::{DesiredMember, Listener, LoadBalancerIdentity, Progress};

impl OctaviaProvider {
    /// The load balancers this LoadBalancer owns, oldest first: by tag (API 2.5+), else by name
    /// and the UID in the description.
    pub(super) async fn find_owned(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra_uid: Option<&str>,
    ) -> Result<Vec<LbRecord>, Stop> {
        let request = if session.version >= ApiVersion::TAGS {
            Request::get("lbaas/loadbalancers").query("tags", uid_tag(identity))
        } else {
            Request::get("lbaas/loadbalancers").query("name", lb_name(identity))
        };
        let body = session
            .require(self.observer(), "loadbalancer.list", request)
            .await?;
        let list: Vec<LbRecord> = body
            .field("loadbalancers", "loadbalancer.list")?
            .unwrap_or_default();
        let mut owned: Vec<LbRecord> = list
            .into_iter()
            .filter(|r| owned(r, identity, infra_uid) && r.provisioning_status != "DELETED")
            .collect();
        owned.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(owned)
    }

    /// Find the load balancer: the one in the status, else adopt one found by its tags.
    async fn locate(&self, session: &Session, call: &mut Call<'_>) -> Result<Option<Tree>, Stop> {
        if let Some(id) = call.status.load_balancer_id.clone() {
            // An ID from the status is trusted once this process has seen its tags (it created,
            // adopted or checked it); a status naming a load balancer that is not ours is ignored.
            let owner = owner_key(call);
            let trusted = self
                .verified
                .lock()
                .is_ok_and(|v| v.contains_key(&(owner, id.clone())))
                || self.verify(session, call, &id).await?;
            if trusted {
                if let Some(tree) = self.tree(session, &id, false).await? {
                    return Ok(Some(tree));
                }
                call.changes
                    .push(format!("Octavia load balancer {id} is gone; looking again"));
            }
            call.forget_lb();
        }
        let found = self
            .find_owned(session, call.identity, call.infra.uid.as_deref())
            .await?;
        let Some(record) = found
            .into_iter()
            .find(|r| r.provisioning_status != "PENDING_DELETE")
        else {
            return Ok(None);
        };
        call.status.load_balancer_id = Some(record.id.clone());
        call.status.vip_address = record.vip_address.clone();
        call.status.vip_port_id = record.vip_port_id.clone();
        call.changes.push(format!(
            "adopted Octavia load balancer {} (found by its ownership tags)",
            record.id
        ));
        self.mark_verified(call, &record.id);
        self.tree(session, &record.id, false).await
    }

    /// Remember that `id` carries the tags of the owner of `call`.
    fn mark_verified(&self, call: &Call<'_>, id: &str) {
        if let Ok(mut verified) = self.verified.lock() {
            let now = std::time::Instant::now();
            let key = (owner_key(call), id.to_string());
            crate::bounded::insert(
                &mut verified,
                key,
                now,
                super::MAX_CACHED,
                super::VERIFIED_FOR,
                now,
                |at| *at,
            );
        }
    }

    /// Whether load balancer `id` (from the status) carries this LoadBalancer's ownership tags.
    /// Gone counts as ours (nothing to protect); not ours is reported in the changes.
    async fn verify(&self, session: &Session, call: &mut Call<'_>, id: &str) -> Result<bool, Stop> {
        let Some(body) = session
            .require_or_gone(
                self.observer(),
                "loadbalancer.get",
                Request::get(format!("lbaas/loadbalancers/{id}")),
            )
            .await?
        else {
            return Ok(true);
        };
        let record: LbRecord = body.required("loadbalancer", "loadbalancer.get")?;
        if owned(&record, call.identity, call.infra.uid.as_deref()) {
            self.mark_verified(call, id);
            return Ok(true);
        }
        call.changes.push(format!(
            "the status names Octavia load balancer {id}, which does not carry this LoadBalancer's ownership tags; it is left alone"
        ));
        Ok(false)
    }

    /// Body of a load balancer with all its listeners, pools, health monitors and the members to
    /// serve (single-call create), and how many members it has.
    fn lb_body(
        &self,
        call: &Call<'_>,
        listeners: &[Listener],
        members: &[DesiredMember],
        version: ApiVersion,
    ) -> (Value, usize) {
        let spec = &call.infra.spec;
        let mut count = 0;
        let listeners: Vec<Value> = listeners
            .iter()
            .map(|l| {
                let mut body = self.listener_body(call, l, version);
                // Only members to serve: nothing exists yet to keep or drain.
                let members = plan(members, &[], l.target_port);
                count += members.len();
                if !members.is_empty()
                    && let Some(Value::Object(pool)) = body.get_mut("default_pool")
                {
                    pool.insert(
                        "members".into(),
                        json!(member_bodies(call, &members, version)),
                    );
                }
                body
            })
            .collect();
        let mut lb = json!({
            "name": call.lb_name(),
            "description": description(call.identity),
            "listeners": listeners,
        });
        if let Value::Object(o) = &mut lb {
            if let Some(subnet) = &spec.vip.subnet_id {
                o.insert("vip_subnet_id".into(), json!(subnet));
            }
            if let Some(network) = &spec.vip.network_id {
                o.insert("vip_network_id".into(), json!(network));
            }
            if let Some(address) = &spec.vip.address {
                o.insert("vip_address".into(), json!(address));
            }
            if let Some(provider) = spec.provider {
                let name = match provider {
                    Driver::Amphora => "amphora",
                    Driver::Ovn => "ovn",
                };
                o.insert("provider".into(), json!(name));
            }
            if let Some(flavor) = &spec.flavor_id {
                o.insert("flavor_id".into(), json!(flavor));
            }
            if let Some(zone) = &spec.availability_zone {
                o.insert("availability_zone".into(), json!(zone));
            }
            if version >= ApiVersion::TAGS {
                o.insert("tags".into(), json!(call.tags()));
            }
        }
        (lb, count)
    }

    /// Create the load balancer with everything on it, its members included: one operation of
    /// Octavia's instead of a create and then a member update.
    async fn create(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        listeners: &[Listener],
        members: &[DesiredMember],
    ) -> Result<Progress, Stop> {
        let send = |lb: Value| {
            session.require(
                self.observer(),
                "loadbalancer.create",
                Request::post("lbaas/loadbalancers", json!({ "loadbalancer": lb })),
            )
        };
        let (lb, mut member_count) = self.lb_body(call, listeners, members, session.version);
        let body = match send(lb).await {
            // Octavia refuses the whole create for one member it does not accept (a reserved
            // address, say): the load balancer is created without members instead, so it exists
            // and serves its address, and the member update that follows reports the refusal.
            Err(Stop::Wait(Progress::Pending {
                reason: Some(why), ..
            })) if member_count > 0 && why == reason::REQUEST_REJECTED => {
                member_count = 0;
                send(self.lb_body(call, listeners, &[], session.version).0).await?
            }
            sent => sent?,
        };
        let record: LbRecord = body.required("loadbalancer", "loadbalancer.create")?;
        call.created = true;
        self.mark_verified(call, &record.id);
        // The members as Octavia took them, per pool: what `converge_members` would otherwise read
        // back once the load balancer is ACTIVE.
        self.remember_created_members(&record);
        call.status.load_balancer_id = Some(record.id.clone());
        call.status.vip_address = record.vip_address.clone();
        call.status.vip_port_id = record.vip_port_id.clone();
        call.status.provisioning_status = Some(record.provisioning_status.clone());
        call.status.ready = false;
        call.status.listeners = listeners
            .iter()
            .map(|l| ListenerStatus {
                port: l.port,
                applied: Some(Settings::new(&call.infra, l, session.version).applied()),
                ..Default::default()
            })
            .collect();
        call.changes.push(format!(
            "created Octavia load balancer {} with {} listener(s) and {member_count} member(s)",
            record.id,
            listeners.len()
        ));
        Ok(call.pending_after_write("PENDING_CREATE"))
    }

    /// `ensure`: the load balancer, then its children, then its floating IP; one write per call.
    pub(super) async fn ensure_inner(
        &self,
        call: &mut Call<'_>,
        listeners: &[Listener],
        members: &[DesiredMember],
    ) -> Result<Progress, Stop> {
        let session = self.session(&call.infra).await?;
        call.status.api_version = Some(session.version.to_string());
        call.infra.check_version(session.version)?;
        let Some(tree) = self.locate(&session, call).await? else {
            return self.create(&session, call, listeners, members).await;
        };
        call.status.provisioning_status = Some(tree.provisioning_status.clone());
        call.status.operating_status = Some(tree.operating_status.clone());
        match tree.provisioning_status.as_str() {
            "ACTIVE" => call.status.pending_since = None,
            "ERROR" => return self.on_error(&session, call, &tree).await,
            "DELETED" => {
                call.forget_lb();
                return Ok(Progress::pending(
                    "Octavia load balancer deleted",
                    call.relook(),
                ));
            }
            // A provisioned load balancer being updated (members, a listener, a pool) keeps
            // serving with its former configuration until Octavia applies the new one.
            "PENDING_UPDATE" if call.infra.status.ready => {
                return Ok(call.pending("PENDING_UPDATE"));
            }
            state => {
                call.status.ready = false;
                return Ok(call.pending(state));
            }
        }
        let mut progress = self
            .converge_children(&session, call, &tree, listeners)
            .await?;
        if progress.is_done() {
            progress = self.converge_floating_ip(&session, call).await?;
        }
        // Once provisioned, a change being applied (a port added, settings, a floating IP) does
        // not take the load balancer out of service: `ready` stays until ERROR, DELETED or a
        // state other than PENDING_UPDATE says otherwise.
        call.status.ready = progress.is_done() || call.infra.status.ready;
        Ok(progress)
    }

    async fn on_error(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        tree: &Tree,
    ) -> Result<Progress, Stop> {
        call.status.ready = false;
        if !call.infra.spec.recreate_on_error {
            return Ok(Progress::pending_because(
                reason::LOAD_BALANCER_ERROR,
                format!(
                    "Octavia load balancer {} is in ERROR (terminal; operating status {}). Octavia's logs say why; set recreateOnError: true to have capi-lb delete and recreate it",
                    tree.id, tree.operating_status
                ),
                Duration::from_secs(60),
            ));
        }
        self.delete_lb(session, &tree.id).await?;
        call.changes.push(format!(
            "deleting Octavia load balancer {} in ERROR to recreate it (recreateOnError)",
            tree.id
        ));
        Ok(Progress::pending_because(
            reason::LOAD_BALANCER_ERROR,
            format!(
                "Octavia load balancer {} was in ERROR; deleting it to recreate it",
                tree.id
            ),
            call.began(),
        ))
    }

    /// Delete load balancer `id` with everything on it (404: already gone).
    pub(super) async fn delete_lb(&self, session: &Session, id: &str) -> Result<(), Stop> {
        self.forget_tree(id);
        session
            .require_or_gone(
                self.observer(),
                "loadbalancer.delete",
                Request::delete(format!("lbaas/loadbalancers/{id}")).query("cascade", "true"),
            )
            .await
            .map(|_| ())
    }
}

/// The owner a verified Octavia ID is remembered for: the LoadBalancer and its infrastructure
/// object.
fn owner_key(call: &Call<'_>) -> String {
    super::relook::key(&call.identity.uid, call.infra.uid.as_deref())
}
