//! The floating IP in front of the VIP (Neutron): a given one associated (never taken from another
//! port), or one allocated, tagged and associated; a previous one released when the spec changes;
//! all of them released when the LoadBalancer is deleted.

use std::time::{Duration, Instant};

use capi_lb_api::octavia::FloatingIp as WantedFloatingIp;
use serde_json::json;

use super::OctaviaProvider;
use super::api::{Request, Session};
use super::call::Call;
use super::documents::{FloatingIp, LbRecord};
use super::naming::{description, fip_owned, fip_tags, fip_uid_tag};
use super::reason;
use super::settings::Infra;
use super::stop::Stop;
use crate::provider::{LoadBalancerIdentity, Progress};

/// How long a floating IP seen in place is trusted without asking Neutron.
const FIP_FRESH: Duration = Duration::from_secs(600);

/// Whether the status shows the floating IP the spec wants (or none, when it wants none).
fn in_place(call: &Call<'_>, wanted: &Option<WantedFloatingIp>) -> bool {
    match wanted {
        None => call.status.floating_ip_id.is_none(),
        Some(w) => {
            call.status.floating_ip_id.is_some()
                && w.address
                    .as_ref()
                    .is_none_or(|a| call.status.floating_ip.as_ref() == Some(a))
                && (w.address.is_none() == call.status.floating_ip_allocated)
        }
    }
}

impl OctaviaProvider {
    /// Floating IPs of this project matching `query` (Neutron list filters).
    async fn floating_ips(
        &self,
        session: &Session,
        query: &[(&'static str, String)],
    ) -> Result<Vec<FloatingIp>, Stop> {
        let mut request = Request::get("floatingips").network();
        for (k, v) in query {
            request = request.query(k, v.clone());
        }
        let body = session
            .require(self.observer(), "floatingip.list", request)
            .await?;
        Ok(body
            .field("floatingips", "floatingip.list")?
            .unwrap_or_default())
    }

    /// Point floating IP `id` at `port` (`None`: disassociate; one already gone counts as that).
    async fn set_port(&self, session: &Session, id: &str, port: Option<&str>) -> Result<(), Stop> {
        let request = Request::put(
            format!("floatingips/{id}"),
            json!({ "floatingip": { "port_id": port } }),
        )
        .network();
        match port {
            None => session
                .require_or_gone(self.observer(), "floatingip.update", request)
                .await
                .map(|_| ()),
            Some(_) => session
                .require(self.observer(), "floatingip.update", request)
                .await
                .map(|_| ()),
        }
    }

    /// The floating IP in front of the VIP: the given one associated (never taken from another
    /// port), or one allocated, tagged and associated; a previous one released when the spec
    /// changed. Checked against Neutron when the status does not already show it in place, and
    /// every ten minutes.
    pub(super) async fn converge_floating_ip(
        &self,
        session: &Session,
        call: &mut Call<'_>,
    ) -> Result<Progress, Stop> {
        let wanted = call.infra.spec.floating_ip.clone();
        if wanted.is_none() && call.status.floating_ip_id.is_none() {
            // No floating IP wanted or held: Neutron is not involved at all.
            return Ok(Progress::Done);
        }
        let in_place = in_place(call, &wanted);
        let key = call.status.load_balancer_id.clone().unwrap_or_default();
        let recently = self
            .fip_checked
            .lock()
            .ok()
            .and_then(|c| c.get(&key).copied());
        if in_place && recently.is_some_and(|at| at.elapsed() < FIP_FRESH) {
            return Ok(Progress::Done);
        }
        session.network().await?;
        let Some(port) = call.status.vip_port_id.clone() else {
            // Adopted by an older capi-lb, or the port was not reported yet: read it.
            let body = session
                .require(
                    self.observer(),
                    "loadbalancer.get",
                    Request::get(format!("lbaas/loadbalancers/{key}")),
                )
                .await?;
            let record: LbRecord = body.required("loadbalancer", "loadbalancer.get")?;
            call.status.vip_port_id = record.vip_port_id;
            return Ok(Progress::pending("reading the VIP port", call.relook()));
        };
        // What is on our VIP port now (only ever ours, or something someone put there by hand).
        let on_port = self
            .floating_ips(session, &[("port_id", port.clone())])
            .await?;
        // Release a previous floating IP the spec no longer asks for.
        let previous = self.release_candidates(session, call, &wanted).await?;
        if let Some(progress) = previous {
            return Ok(progress);
        }
        let Some(wanted) = wanted else {
            call.status.floating_ip = None;
            call.status.floating_ip_id = None;
            call.status.floating_ip_allocated = false;
            self.mark_fip_checked(&key);
            return Ok(Progress::Done);
        };
        let fip = if let Some(address) = &wanted.address {
            let network = wanted.network_id.as_deref();
            let fip = self
                .given_fip(session, call, address, network, &port)
                .await?;
            call.status.floating_ip_allocated = false;
            fip
        } else {
            let network = wanted.network_id.clone().unwrap_or_default();
            let fip = self
                .allocated_fip(session, call, &network, &port, &on_port)
                .await?;
            call.status.floating_ip_allocated = true;
            fip
        };
        call.status.floating_ip = Some(fip.floating_ip_address.clone());
        call.status.floating_ip_id = Some(fip.id.clone());
        self.mark_fip_checked(&key);
        Ok(Progress::Done)
    }

    /// The floating IP the spec names by `address` (on `network`, when the spec names one too),
    /// associated with the VIP `port`; one on another port or network is never taken.
    async fn given_fip(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        address: &str,
        network: Option<&str>,
        port: &str,
    ) -> Result<FloatingIp, Stop> {
        let found = self
            .floating_ips(session, &[("floating_ip_address", address.to_string())])
            .await?;
        let Some(fip) = found.into_iter().next() else {
            return Err(Stop::Wait(Progress::pending_because(
                reason::FLOATING_IP_NOT_FOUND,
                format!("floating IP {address} does not exist in this project"),
                Duration::from_secs(60),
            )));
        };
        if let (Some(wanted), Some(actual)) = (network, fip.floating_network_id.as_deref())
            && wanted != actual
        {
            return Err(Stop::Wait(Progress::pending_because(
                reason::FLOATING_IP_NOT_FOUND,
                format!(
                    "floating IP {address} is on network {actual}, not on floatingIP.networkID {wanted}; name a floating IP of that network, or the network it is on"
                ),
                Duration::from_secs(60),
            )));
        }
        match fip.port_id.as_deref() {
            Some(p) if p == port => {}
            Some(other) => {
                return Err(Stop::Wait(Progress::pending_because(
                    reason::FLOATING_IP_IN_USE,
                    format!(
                        "floating IP {address} is associated with port {other}; capi-lb never takes a floating IP from another port. Disassociate it, or name another one"
                    ),
                    Duration::from_secs(60),
                )));
            }
            None => {
                self.set_port(session, &fip.id, Some(port)).await?;
                call.changes
                    .push(format!("associated floating IP {address} with the VIP"));
            }
        }
        Ok(fip)
    }

    /// The floating IP capi-lb allocates from `network` for the VIP `port`: the one on the port,
    /// else one allocated earlier and left unassociated, else a new one; tagged as ours. One on the
    /// port that capi-lb did not allocate is left alone.
    async fn allocated_fip(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        network: &str,
        port: &str,
        on_port: &[FloatingIp],
    ) -> Result<FloatingIp, Stop> {
        let ours = |f: &FloatingIp| fip_owned(&f.tags, f.description.as_deref(), call.identity);
        let mine = on_port.iter().find(|f| ours(f)).cloned();
        if mine.is_none()
            && let Some(other) = on_port.first()
        {
            return Err(Stop::Wait(Progress::pending_because(
                reason::FLOATING_IP_IN_USE,
                format!(
                    "the VIP port already has floating IP {}, which capi-lb did not allocate; it is left alone. Remove it, or set floatingIP.address: {} to use it",
                    other.floating_ip_address, other.floating_ip_address
                ),
                Duration::from_secs(60),
            )));
        }
        let fip = match mine {
            Some(fip) => fip,
            None => {
                // One allocated earlier but left unassociated (a crash between the calls).
                let tagged = self
                    .floating_ips(session, &[("tags", fip_uid_tag(call.identity))])
                    .await?;
                match tagged
                    .into_iter()
                    .find(|f| fip_owned(&f.tags, f.description.as_deref(), call.identity))
                {
                    Some(fip) => {
                        self.set_port(session, &fip.id, Some(port)).await?;
                        call.changes.push(format!(
                            "associated floating IP {} (found by its tags) with the VIP",
                            fip.floating_ip_address
                        ));
                        fip
                    }
                    None => self.allocate(session, call, network, port).await?,
                }
            }
        };
        if !fip.tags.contains(&fip_uid_tag(call.identity)) {
            self.tag_fip(session, call, &fip).await?;
        }
        Ok(fip)
    }

    fn mark_fip_checked(&self, key: &str) {
        if let Ok(mut c) = self.fip_checked.lock() {
            let now = Instant::now();
            crate::bounded::insert(
                &mut c,
                key.to_string(),
                now,
                super::MAX_CACHED,
                FIP_FRESH,
                now,
                |at| *at,
            );
        }
    }

    async fn allocate(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        network: &str,
        port: &str,
    ) -> Result<FloatingIp, Stop> {
        let body = session
            .require(
                self.observer(),
                "floatingip.create",
                Request::post(
                    "floatingips",
                    json!({ "floatingip": {
                        "floating_network_id": network,
                        "port_id": port,
                        "description": description(call.identity),
                    }}),
                )
                .network(),
            )
            .await?;
        let fip: FloatingIp = body.required("floatingip", "floatingip.create")?;
        call.changes.push(format!(
            "allocated floating IP {} from network {network} for the VIP",
            fip.floating_ip_address
        ));
        Ok(fip)
    }

    async fn tag_fip(
        &self,
        session: &Session,
        call: &Call<'_>,
        fip: &FloatingIp,
    ) -> Result<(), Stop> {
        session
            .require(
                self.observer(),
                "floatingip.tags",
                Request::put(
                    format!("floatingips/{}/tags", fip.id),
                    json!({ "tags": fip_tags(call.identity) }),
                )
                .network(),
            )
            .await
            .map(|_| ())
    }

    /// Release the floating IP recorded in the status when the spec no longer wants it: delete
    /// one capi-lb allocated, disassociate one it was given.
    async fn release_candidates(
        &self,
        session: &Session,
        call: &mut Call<'_>,
        wanted: &Option<WantedFloatingIp>,
    ) -> Result<Option<Progress>, Stop> {
        let Some(id) = call.status.floating_ip_id.clone() else {
            return Ok(None);
        };
        let still_wanted = match wanted {
            None => false,
            Some(w) => match &w.address {
                Some(a) => {
                    !call.status.floating_ip_allocated
                        && call.status.floating_ip.as_ref() == Some(a)
                }
                None => call.status.floating_ip_allocated,
            },
        };
        if still_wanted {
            return Ok(None);
        }
        let allocated = call.status.floating_ip_allocated;
        let address = call.status.floating_ip.clone().unwrap_or_default();
        self.release(session, &id, allocated, call.identity).await?;
        call.changes.push(if allocated {
            format!("released floating IP {address} (no longer in the spec)")
        } else {
            format!("disassociated floating IP {address} (no longer in the spec; kept)")
        });
        call.status.floating_ip = None;
        call.status.floating_ip_id = None;
        call.status.floating_ip_allocated = false;
        Ok(Some(Progress::pending(
            "floating IP released",
            call.began(),
        )))
    }

    /// Whether floating IP `id` (named by a status, which is not proof of anything) carries this
    /// LoadBalancer's ownership tags; `None` when it is gone.
    async fn owned(
        &self,
        session: &Session,
        id: &str,
        identity: &LoadBalancerIdentity,
    ) -> Result<Option<bool>, Stop> {
        let found = session
            .require_or_gone(
                self.observer(),
                "floatingip.get",
                Request::get(format!("floatingips/{id}")).network(),
            )
            .await?;
        let Some(body) = found else {
            return Ok(None);
        };
        let fip: FloatingIp = body.required("floatingip", "floatingip.get")?;
        Ok(Some(fip_owned(
            &fip.tags,
            fip.description.as_deref(),
            identity,
        )))
    }

    /// Delete an allocated floating IP, or disassociate a given one (404: already gone). One named
    /// by the status is deleted only when its tags say it is this LoadBalancer's: a status can be
    /// written by whoever may write the infrastructure object's status; anything else is left
    /// alone (its address is dropped from the status all the same).
    async fn release(
        &self,
        session: &Session,
        id: &str,
        allocated: bool,
        identity: &LoadBalancerIdentity,
    ) -> Result<(), Stop> {
        if !allocated {
            return self.set_port(session, id, None).await;
        }
        if self.owned(session, id, identity).await? != Some(true) {
            tracing::warn!(
                floating_ip = id,
                loadbalancer = %identity.name,
                namespace = %identity.namespace,
                "a floating IP named in the status does not carry this LoadBalancer's tags: not released"
            );
            return Ok(());
        }
        session
            .require_or_gone(
                self.observer(),
                "floatingip.delete",
                Request::delete(format!("floatingips/{id}")).network(),
            )
            .await
            .map(|_| ())
    }

    /// On delete: disassociate the given floating IP (kept), release every one capi-lb allocated
    /// for this LoadBalancer (found by its tags, and the one in the status).
    pub(super) async fn release_all(
        &self,
        session: &Session,
        identity: &LoadBalancerIdentity,
        infra: &Infra,
        changes: &mut Vec<String>,
    ) -> Result<(), Stop> {
        session.network().await?;
        if let Some(id) = &infra.status.floating_ip_id
            && !infra.status.floating_ip_allocated
        {
            self.release(session, id, false, identity).await?;
        }
        // Found by their tags: ours. The status's own is checked by `release`.
        let mut allocated: Vec<(String, String)> = self
            .floating_ips(session, &[("tags", fip_uid_tag(identity))])
            .await?
            .into_iter()
            .filter(|f| fip_owned(&f.tags, f.description.as_deref(), identity))
            .map(|f| (f.id, f.floating_ip_address))
            .collect();
        if let Some(id) = &infra.status.floating_ip_id
            && infra.status.floating_ip_allocated
            && !allocated.iter().any(|(f, _)| f == id)
        {
            let address = infra.status.floating_ip.clone().unwrap_or_default();
            allocated.push((id.clone(), address));
        }
        for (id, address) in allocated {
            self.release(session, &id, true, identity).await?;
            changes.push(format!("released floating IP {address}"));
        }
        Ok(())
    }
}
