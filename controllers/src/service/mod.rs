//! The Service controller: for every Service of `type: LoadBalancer`, whatever implements it
//! (kube-dc, MetalLB, a cloud's controller manager, capi-lb), a stable `-ext` endpoint and the DNS
//! names its annotations ask for; for a Service of capi-lb's own load-balancer class, the binding
//! to the LoadBalancer that realises it.
//!
//! Once a Service has addresses in `status.loadBalancer.ingress`, capi-lb publishes them under the
//! headless selectorless Service `<svc><suffix>` (default `-ext`) with one EndpointSlice per IP family
//! (an ExternalName Service for a hostname-only ingress), owned by the source Service, through the same
//! [`crate::publication`] library as a LoadBalancer's endpoint. The DNS name is written back onto the
//! source as the annotation `loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name`. When the
//! Service stops being `type: LoadBalancer`, loses its addresses or opts out, the `-ext` objects go;
//! when it is deleted, the garbage collector removes them through their owner references (and the
//! orphan check below does it where there is no garbage collector).
//!
//! Which Services: every LoadBalancer Service ([`Policy::All`](crate::context::Policy::All), the
//! default) or only those annotated `loadbalancer.cluster.x-k8s.io/external-endpoint: "true"`
//! ([`Policy::Annotated`](crate::context::Policy::Annotated)); `"false"` always opts out.
//! `loadbalancer.cluster.x-k8s.io/external-endpoint-suffix` picks another suffix. A name that does
//! not fit (a DNS label of at most 63 characters) or an invalid annotation is reported with a
//! Warning Event on the Service and nothing is done.
//!
//! The decisions are pure ([`decide`], [`dns_wanted`]); [`reconcile_service`] applies them:
//! `endpoint.rs` the `-ext` endpoint, `dns.rs` the `DNSEndpoint` of the Service's names, `bind.rs`
//! the binding of a Service of capi-lb's class. A reconcile of an unchanged Service makes no
//! write, and a Service that is not (and was not) of `type: LoadBalancer` costs no API call.

mod bind;
mod decide;
mod dns;
mod endpoint;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::class;
use crate::context::{Context, Outcome};
use crate::error::{Result, is_not_found, kube_err};
use crate::metadata::{controller_of, patch_params};
use crate::publication;

pub use decide::{Decision, cached_view, decide, dns_wanted, ingress_addresses, labels};
use decide::{publisher, source_of};

/// Reconcile one Service: publish, update or withdraw its `-ext` endpoint, or, for an `-ext`
/// Service whose source is gone, remove it.
pub async fn reconcile_service(
    service: Arc<Service>,
    ctx: Arc<Context>,
    reported: &Reported,
) -> Result<Outcome> {
    let reference = service.object_ref(&());
    // Boxed: a reconcile is a large future, better on the heap than copied along the stack.
    let guarded = Box::pin(reconcile_unguarded(service, ctx.clone(), reported));
    match crate::boundary::contain(guarded).await {
        Ok(result) => result,
        Err(panic) => Err(ctx.panicked("external-endpoint", &reference, panic).await),
    }
}

async fn reconcile_unguarded(
    service: Arc<Service>,
    ctx: Arc<Context>,
    reported: &Reported,
) -> Result<Outcome> {
    ctx.caches.synced().await;
    let namespace = service.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(source) = source_of(&service) {
        return remove_orphan(&ctx, &services, &service, &source).await;
    }
    let outcome = if class::is_ours(&service) {
        bind::bind(&ctx, &service, reported).await?
    } else {
        endpoint::publish(&ctx, &service, reported).await?
    };
    dns::publish(&ctx, &service, reported).await?;
    Ok(outcome)
}

/// An `-ext` Service whose source Service is gone (or was recreated: another UID) is removed with
/// its slices and Endpoints. A real cluster's garbage collector does the same through the owner
/// references; this covers clusters where it is slow and the in-memory API, which has none.
async fn remove_orphan(
    ctx: &Context,
    services: &Api<Service>,
    ext: &Service,
    source: &str,
) -> Result<Outcome> {
    let Some(owner) = controller_of(ext).cloned() else {
        return Ok(Outcome::done());
    };
    if owner.kind != "Service" || owner.name != source {
        return Ok(Outcome::done());
    }
    let namespace = ext.namespace().unwrap_or_default();
    let found = services
        .get_opt(source)
        .await
        .map_err(kube_err("get", format!("Service {namespace}/{source}")))?;
    if found.as_ref().and_then(|s| s.uid()) == Some(owner.uid.clone()) {
        return Ok(Outcome::done());
    }
    let publisher = publisher(&namespace, source, owner, &ctx.config.external);
    publication::withdraw(ctx, &publisher).await?;
    Ok(Outcome::done())
}

/// Problems already reported per Service UID, so a conflict or an invalid annotation is reported
/// once, not at every resync (an Event is a write).
#[derive(Debug, Default)]
pub struct Reported(Mutex<HashMap<String, String>>);

impl Reported {
    /// True when `message` is new for `uid` (and remember it).
    fn first_time(&self, uid: &str, message: &str) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.get(uid).map(String::as_str) == Some(message) {
            return false;
        }
        seen.insert(uid.to_string(), message.to_string());
        true
    }

    /// What was last reported for `uid`.
    fn get(&self, uid: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned()
    }

    fn clear(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

/// A Warning Event on `service`, unless the same `message` was already reported for it.
async fn warn_once(
    ctx: &Context,
    service: &Service,
    reported: &Reported,
    reason: &str,
    action: &str,
    message: String,
) {
    if reported.first_time(&service.uid().unwrap_or_default(), &message) {
        ctx.events
            .publish(&service.object_ref(&()), true, reason, action, message)
            .await;
    }
}

/// One of capi-lb's annotations on the source (`None`: removed), only when it differs (a source
/// deleted meanwhile is left alone).
async fn annotate(
    services: &Api<Service>,
    service: &Service,
    key: &str,
    value: Option<String>,
) -> Result<()> {
    let current = service.annotations().get(key);
    if current == value.as_ref() {
        return Ok(());
    }
    let name = service.name_any();
    let patch = json!({"metadata": {"annotations": {key: value}}});
    match services
        .patch(&name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(kube_err(
            "annotate",
            format!("Service {}/{name}", service.namespace().unwrap_or_default()),
        )(e)),
    }
}
