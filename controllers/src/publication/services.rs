//! Stable `-ext` endpoints for every Service of `type: LoadBalancer`, whatever implements it
//! (kube-dc, MetalLB, a cloud's controller manager, capi-lb).
//!
//! Once a Service has addresses in `status.loadBalancer.ingress`, capi-lb publishes them under the
//! headless selectorless Service `<svc><suffix>` (default `-ext`) with one EndpointSlice per IP family
//! (an ExternalName Service for a hostname-only ingress), owned by the source Service, through the same
//! [`crate::publication`] code as a LoadBalancer's endpoint. The DNS name is written back onto the
//! source as the annotation `loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name`. When the
//! Service stops being `type: LoadBalancer`, loses its addresses or opts out, the `-ext` objects go;
//! when it is deleted, the garbage collector removes them through their owner references (and the
//! orphan check below does it where there is no garbage collector).
//!
//! Which Services: every LoadBalancer Service ([`Policy::All`], the default) or only those annotated
//! `loadbalancer.cluster.x-k8s.io/external-endpoint: "true"` ([`Policy::Annotated`]);
//! `"false"` always opts out. `loadbalancer.cluster.x-k8s.io/external-endpoint-suffix` picks another
//! suffix. A name that does not fit (a DNS label of at most 63 characters) or an invalid annotation
//! is reported with a Warning Event on the Service and nothing is done.
//!
//! [`decide`] is pure; [`reconcile_service`] applies it. A reconcile of an unchanged Service makes
//! no write, and a Service that is not (and was not) of `type: LoadBalancer` costs no API call.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use capi_lb_api::constants::{
    ANNOTATION_DNS_ENDPOINT, ANNOTATION_DNS_TTL, ANNOTATION_EXTERNAL_ENDPOINT,
    ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME, ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX,
    ANNOTATION_HOSTNAMES, ENDPOINT_TYPE_EXTERNAL, KUBE_DC_LABEL_MANAGED_BY,
    KUBE_DC_LABEL_SOURCE_SERVICE, KUBE_DC_MANAGED_BY_VALUE, LABEL_ENDPOINT_TYPE,
    LABEL_EXTERNAL_MANAGED_BY, LABEL_MANAGED_BY, LABEL_SOURCE_SERVICE, MANAGED_BY_VALUE, event,
    reason,
};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_api::naming::is_dns_label;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::context::{ExternalEndpoints, Outcome, Policy};
use crate::dns;
use crate::error::{Result, is_not_found, kube_err};
use crate::metadata::{controller_of, patch_params};
use crate::publication::{self, Desired, Published, PublishedPort, Publisher};

/// What to do with one Service.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Publish this.
    Publish(Desired),
    /// Publish nothing (remove what was published); the reason, for the Event.
    Withdraw(String),
    /// Something is wrong with the Service's annotations or name: report it, change nothing.
    Invalid(String),
    /// Not a LoadBalancer Service and nothing was ever published for it: no API call at all.
    Ignore,
}

fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// What the Service publisher's cache keeps of `service`: no `managedFields`, and of a Service
/// that is not of type LoadBalancer only its metadata and type (all a reconcile reads of it: it
/// withdraws what was published for it, or removes an orphaned `-ext` Service). A cluster has
/// many more of those than LoadBalancers, this publisher's own `-ext` Services among them.
pub fn cached_view(service: &mut Service) {
    service.metadata.managed_fields = None;
    if !is_load_balancer(service) {
        service.spec = service.spec.take().map(|spec| ServiceSpec {
            type_: spec.type_,
            ..ServiceSpec::default()
        });
        service.status = None;
    }
}

/// The ingress addresses of `service`: IPs, and hostnames where an entry has no IP.
pub fn ingress_addresses(service: &Service) -> Vec<LoadBalancerAddress> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| match (&i.ip, &i.hostname) {
            (Some(ip), _) if !ip.is_empty() => Some(LoadBalancerAddress::ip(ip.clone())),
            (_, Some(host)) if !host.is_empty() => {
                Some(LoadBalancerAddress::hostname(host.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What to do with `service` under `config`.
pub fn decide(service: &Service, config: &ExternalEndpoints) -> Decision {
    // Services of capi-lb's own class are published by the LoadBalancer that realises them.
    if crate::class::is_ours(service) {
        return Decision::Ignore;
    }
    let name = service.name_any();
    let annotations = service.annotations();
    let published_before = annotations.contains_key(ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME);
    if !is_load_balancer(service) {
        return if published_before {
            Decision::Withdraw("the Service is no longer of type LoadBalancer".into())
        } else {
            Decision::Ignore
        };
    }
    if service.meta().deletion_timestamp.is_some() {
        return Decision::Withdraw("the Service is being deleted".into());
    }
    let opted_in = match annotations
        .get(ANNOTATION_EXTERNAL_ENDPOINT)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        None => config.policy == Policy::All,
        Some(other) => {
            return Decision::Invalid(format!(
                "annotation {ANNOTATION_EXTERNAL_ENDPOINT} must be \"true\" or \"false\", not {other:?}; nothing was changed"
            ));
        }
    };
    if !opted_in {
        return Decision::Withdraw(match config.policy {
            Policy::All => {
                format!("the Service opted out ({ANNOTATION_EXTERNAL_ENDPOINT}: \"false\")")
            }
            Policy::Annotated => format!(
                "only Services annotated {ANNOTATION_EXTERNAL_ENDPOINT}: \"true\" get an external endpoint"
            ),
        });
    }
    let suffix = match suffix(service, config) {
        Ok(suffix) => suffix,
        Err(message) => return Decision::Invalid(message),
    };
    let service_name = format!("{name}{suffix}");
    if !is_dns_label(&service_name) {
        return Decision::Invalid(format!(
            "the external endpoint name {service_name} is not a DNS label of at most 63 characters; set a shorter suffix with {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX}; nothing was changed"
        ));
    }
    let addresses = ingress_addresses(service);
    if addresses.is_empty() {
        return Decision::Withdraw(
            "the Service has no address in status.loadBalancer.ingress".into(),
        );
    }
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| PublishedPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            port: p.port,
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
        })
        .collect();
    Decision::Publish(Desired {
        service_name,
        ports,
        addresses,
        ready: true,
    })
}

/// The suffix of `service`'s `-ext` endpoint: its annotation, or the configured one; `Err` with
/// the message when the annotation is not a valid suffix.
fn suffix(service: &Service, config: &ExternalEndpoints) -> std::result::Result<String, String> {
    match service
        .annotations()
        .get(ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX)
    {
        Some(s) => {
            let ok = !s.is_empty()
                && s.len() < 63
                && s.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
            if ok {
                Ok(s.clone())
            } else {
                Err(format!(
                    "annotation {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX} {s:?} is not a valid suffix (lowercase letters, digits and -); nothing was changed"
                ))
            }
        }
        None => Ok(config.suffix.clone()),
    }
}

/// Labels on every object the `-ext` publisher creates for Service `source`.
pub fn labels(source: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (
            LABEL_EXTERNAL_MANAGED_BY.to_string(),
            MANAGED_BY_VALUE.to_string(),
        ),
        (LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
        (
            LABEL_ENDPOINT_TYPE.to_string(),
            ENDPOINT_TYPE_EXTERNAL.to_string(),
        ),
    ])
}

/// The publisher for Service `source` (whose controller reference is `owner`).
fn publisher(
    namespace: &str,
    source: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    config: &ExternalEndpoints,
) -> Publisher {
    Publisher {
        namespace: namespace.to_string(),
        describe: format!("Service {source}"),
        owner,
        labels: labels(source),
        selector: (LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
        conflict_hint: format!(
            "Delete it, or choose another suffix with the {ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX} annotation"
        ),
        adopt: config.adopt_kube_dc.then(|| {
            BTreeMap::from([
                (
                    KUBE_DC_LABEL_MANAGED_BY.to_string(),
                    KUBE_DC_MANAGED_BY_VALUE.to_string(),
                ),
                (KUBE_DC_LABEL_SOURCE_SERVICE.to_string(), source.to_string()),
            ])
        }),
        legacy_endpoints: config.legacy_endpoints,
    }
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

/// Whether `service` is an `-ext` Service this publisher created: its source's name.
fn source_of(service: &Service) -> Option<String> {
    let labels = service.labels();
    (labels.get(LABEL_EXTERNAL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_ENDPOINT_TYPE).map(String::as_str) == Some(ENDPOINT_TYPE_EXTERNAL))
    .then(|| labels.get(LABEL_SOURCE_SERVICE).cloned())
    .flatten()
}

/// Reconcile one Service: publish, update or withdraw its `-ext` endpoint, or, for an `-ext`
/// Service whose source is gone, remove it.
pub async fn reconcile_service(
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
    let outcome = if crate::class::is_ours(&service) {
        bind(&ctx, &service, reported).await?
    } else {
        publish_endpoint(&ctx, &service, reported).await?
    };
    publish_dns(&ctx, &service, reported).await?;
    Ok(outcome)
}

/// The `-ext` endpoint of a Service of another class than capi-lb's.
async fn publish_endpoint(
    ctx: &Arc<Context>,
    service: &Arc<Service>,
    reported: &Reported,
) -> Result<Outcome> {
    let config = &ctx.config.external;
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let desired = match decide(service, config) {
        Decision::Ignore => return Ok(Outcome::done()),
        Decision::Invalid(message) => {
            warn_once(
                ctx,
                service,
                reported,
                event::INVALID_EXTERNAL_ENDPOINT,
                "Publish",
                message,
            )
            .await;
            // Only a change of the Service can help.
            return Ok(Outcome::until_changed());
        }
        Decision::Withdraw(why) => Err(why),
        Decision::Publish(desired) => Ok(desired),
    };
    let Some(owner) = publication::controller_ref(service.as_ref()) else {
        return Ok(Outcome::done());
    };
    let publisher = publisher(&namespace, &name, owner, config);
    let report = publication::publish(ctx, &publisher, desired.as_ref().ok()).await?;
    let dns_name = announce(ctx, service, reported, &report, &desired).await;
    annotate(
        &services,
        service,
        ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME,
        dns_name,
    )
    .await?;
    Ok(Outcome::done())
}

/// The DNS names a Service asks for with [`ANNOTATION_HOSTNAMES`] (and [`ANNOTATION_DNS_TTL`]):
/// `None` when it asks for none or is not (or no longer) a LoadBalancer; `Err` with what is wrong
/// with the annotations.
pub fn dns_wanted(service: &Service) -> std::result::Result<Option<dns::Wanted>, String> {
    let annotations = service.annotations();
    let Some(listed) = annotations.get(ANNOTATION_HOSTNAMES) else {
        return Ok(None);
    };
    if !is_load_balancer(service) || service.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    let names = dns::unique(listed.split(','));
    if names.is_empty() {
        return Ok(None);
    }
    if names.len() > MAX_HOSTNAMES {
        return Err(format!(
            "annotation {ANNOTATION_HOSTNAMES} names {} DNS names, at most {MAX_HOSTNAMES} are published; nothing was changed",
            names.len()
        ));
    }
    let ttl = match annotations.get(ANNOTATION_DNS_TTL) {
        None => None,
        Some(v) => match v.trim().parse::<i64>() {
            Ok(ttl) if (1..=604_800).contains(&ttl) => Some(ttl),
            _ => {
                return Err(format!(
                    "annotation {ANNOTATION_DNS_TTL} must be a number of seconds from 1 to 604800, not {v:?}; nothing was changed"
                ));
            }
        },
    };
    Ok(Some(dns::Wanted {
        names,
        options: dns::RecordOptions {
            ttl,
            ..Default::default()
        },
    }))
}

/// What [`Reported`] holds for a Service whose `DNSEndpoint` ExternalDNS has not taken yet.
const WAITING_FOR_EXTERNAL_DNS: &str = "waiting for ExternalDNS";

/// At most this many names per Service (as in a LoadBalancer's `spec.dns.hostnames`).
const MAX_HOSTNAMES: usize = 8;

/// The name of the `DNSEndpoint` of `service`: like its `-ext` endpoint (with the configured
/// suffix while its suffix annotation is invalid, which is reported on its own).
fn dns_endpoint_name(service: &Service, config: &ExternalEndpoints) -> String {
    let suffix = suffix(service, config).unwrap_or_else(|_| config.suffix.clone());
    format!("{}{suffix}", service.name_any())
}

/// DNS names of a Service of type LoadBalancer (any class) through ExternalDNS: its
/// `DNSEndpoint` follows the Service's ingress; problems and ExternalDNS taking the records are
/// told with Events on the Service; the `DNSEndpoint`'s name is written onto it
/// ([`ANNOTATION_DNS_ENDPOINT`]), which is also how a Service that no longer asks is known to
/// have one to remove without an API call for every other Service.
async fn publish_dns(ctx: &Context, service: &Service, reported: &Reported) -> Result<()> {
    let marker = service.annotations().get(ANNOTATION_DNS_ENDPOINT).cloned();
    let uid = service.uid().unwrap_or_default();
    let key = format!("{uid}/dns");
    let wanted = match dns_wanted(service) {
        Ok(wanted) => wanted,
        Err(message) => {
            if reported.first_time(&key, &message) {
                ctx.events
                    .publish(
                        &service.object_ref(&()),
                        true,
                        reason::INVALID_HOSTNAME,
                        "PublishDNS",
                        message,
                    )
                    .await;
            }
            return Ok(());
        }
    };
    if wanted.is_none() && marker.is_none() {
        return Ok(());
    }
    let Some(reference) = publication::controller_ref(service) else {
        return Ok(());
    };
    let namespace = service.namespace().unwrap_or_default();
    let source = service.name_any();
    let owner = |name: String| dns::Owner {
        namespace: namespace.clone(),
        name,
        describe: format!("Service {source}"),
        reference: reference.clone(),
        labels: labels(&source),
    };
    let current = owner(dns_endpoint_name(service, &ctx.config.external));
    let mut changes = Vec::new();
    if let Some(old) = marker.as_ref().filter(|m| **m != current.name) {
        // Another suffix: the old one goes.
        changes.extend(
            dns::publish(&ctx.client, &owner(old.clone()), None, &[], false)
                .await?
                .changes,
        );
    }
    let published = dns::publish(
        &ctx.client,
        &current,
        wanted.as_ref(),
        &ingress_addresses(service),
        false,
    )
    .await?;
    changes.extend(published.changes);
    let reference = service.object_ref(&());
    if !changes.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::DNS_ENDPOINT_CHANGED,
                "PublishDNS",
                changes.join("; "),
            )
            .await;
    }
    match published.condition {
        // Taken by ExternalDNS: told once it was seen waiting for it (so a restart, which finds
        // everything observed, writes no Event).
        Some(c) if c.status => {
            let was_waiting = reported.get(&key).as_deref() == Some(WAITING_FOR_EXTERNAL_DNS);
            if reported.first_time(&key, &c.message) && was_waiting {
                ctx.events
                    .publish(&reference, false, c.reason, "PublishDNS", c.message)
                    .await;
            }
        }
        Some(c) if reason::is_problem(c.reason) => {
            if reported.first_time(&key, &c.message) {
                ctx.events
                    .publish(&reference, true, c.reason, "PublishDNS", c.message)
                    .await;
            }
        }
        Some(_) => {
            reported.first_time(&key, WAITING_FOR_EXTERNAL_DNS);
        }
        None => reported.clear(&key),
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    annotate(
        &services,
        service,
        ANNOTATION_DNS_ENDPOINT,
        published.exists.then_some(current.name),
    )
    .await
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

/// Tell with Events on the source `service` what publishing (`desired`, or withdrawing for the
/// reason given) did: an adoption, then a conflict (once), the publication or the withdrawal.
/// Returns the DNS name the source should carry.
async fn announce(
    ctx: &Context,
    service: &Service,
    reported: &Reported,
    report: &publication::Report,
    desired: &std::result::Result<Desired, String>,
) -> Option<String> {
    let reference = service.object_ref(&());
    if !report.adopted.is_empty() {
        ctx.events
            .publish(
                &reference,
                false,
                event::EXTERNAL_ENDPOINT_ADOPTED,
                "Publish",
                format!(
                    "took over from kube-dc's publisher: {}",
                    report.adopted.join(", ")
                ),
            )
            .await;
    }
    let uid = service.uid().unwrap_or_default();
    let namespace = service.namespace().unwrap_or_default();
    let changes = (!report.changes.is_empty()).then(|| report.changes.join("; "));
    let (note, dns_name) = match (&report.state, desired) {
        (Published::Conflict { message }, _) => (
            reported
                .first_time(&uid, message)
                .then(|| (true, event::EXTERNAL_ENDPOINT_CONFLICT, message.clone())),
            None,
        ),
        (_, Ok(desired)) => {
            reported.clear(&uid);
            (
                changes.map(|c| (false, event::EXTERNAL_ENDPOINT_PUBLISHED, c)),
                Some(format!(
                    "{}.{namespace}.svc.{}",
                    desired.service_name, ctx.config.cluster_domain
                )),
            )
        }
        (_, Err(why)) => {
            reported.clear(&uid);
            (
                changes.map(|c| {
                    (
                        false,
                        event::EXTERNAL_ENDPOINT_WITHDRAWN,
                        format!("{why}: {c}"),
                    )
                }),
                None,
            )
        }
    };
    if let Some((warning, reason, message)) = note {
        ctx.events
            .publish(&reference, warning, reason, "Publish", message)
            .await;
    }
    dns_name
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

/// A Service of capi-lb's load-balancer class: bind it to the LoadBalancer that realises it (which
/// then takes its ports and endpoints and writes its ingress), or say why it cannot be.
async fn bind(ctx: &Context, service: &Service, reported: &Reported) -> Result<Outcome> {
    use crate::class::{ANNOTATION_SERVICE, ANNOTATION_SERVICE_LOAD_BALANCER_REF, realised_by};
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let uid = service.uid().unwrap_or_default();
    let lb_name = realised_by(service);
    let lbs: Api<capi_lb_api::LoadBalancer> = Api::namespaced(ctx.client.clone(), &namespace);
    let lb = lbs.get_opt(&lb_name).await.map_err(kube_err(
        "get",
        format!("LoadBalancer {namespace}/{lb_name}"),
    ))?;
    // A LoadBalancer annotated for another Service is taken only while that Service still exists
    // and still names it.
    let taken_by = match lb
        .as_ref()
        .and_then(|lb| lb.annotations().get(ANNOTATION_SERVICE))
        .filter(|other| **other != name)
    {
        Some(other) => {
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
            services
                .get_opt(other)
                .await
                .map_err(kube_err("get", format!("Service {namespace}/{other}")))?
                .filter(|o| crate::class::is_ours(o) && realised_by(o) == lb_name)
                .map(|_| other.clone())
        }
        None => None,
    };
    let problem = match &lb {
        None => Some(format!(
            "Service {name} has load-balancer class {} but there is no LoadBalancer {lb_name} to realise it: create one (it gives the provider), or name an existing one with the {ANNOTATION_SERVICE_LOAD_BALANCER_REF} annotation",
            crate::class::LOAD_BALANCER_CLASS
        )),
        Some(_) => taken_by.map(|other| {
            format!(
                "LoadBalancer {lb_name} already realises Service {other}; each Service needs its own"
            )
        }),
    };
    if let Some(message) = problem {
        warn_once(
            ctx,
            service,
            reported,
            event::SERVICE_NOT_REALISED,
            "Bind",
            message,
        )
        .await;
        return Ok(Outcome::done());
    }
    reported.clear(&uid);
    if let Some(lb) = lb
        && lb.annotations().get(ANNOTATION_SERVICE) != Some(&name)
    {
        lbs.patch(
            &lb_name,
            &patch_params(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_SERVICE: name}}})),
        )
        .await
        .map_err(kube_err(
            "bind",
            format!("LoadBalancer {namespace}/{lb_name}"),
        ))?;
        ctx.events
            .publish(
                &service.object_ref(&()),
                false,
                event::SERVICE_BOUND,
                "Bind",
                format!("realised by LoadBalancer {lb_name}"),
            )
            .await;
    }
    Ok(Outcome::done())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn service(spec: Value, status: Value, annotations: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "etcd-lb", "namespace": "tenant", "uid": "u1", "annotations": annotations},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn lb_service(ingress: Value, annotations: Value) -> Service {
        service(
            json!({"type": "LoadBalancer", "ports": [{"name": "etcd", "port": 2379, "protocol": "TCP"}]}),
            json!({"loadBalancer": {"ingress": ingress}}),
            annotations,
        )
    }

    fn config() -> ExternalEndpoints {
        ExternalEndpoints::default()
    }

    #[test]
    fn the_cache_keeps_a_load_balancer_whole_and_of_another_service_its_metadata_and_type() {
        let mut lb = lb_service(json!([{"ip": "203.0.113.7"}]), json!({"a": "b"}));
        lb.metadata.managed_fields = Some(vec![Default::default()]);
        let mut kept = lb.clone();
        cached_view(&mut kept);
        lb.metadata.managed_fields = None;
        assert_eq!(kept, lb);

        let published =
            json!({ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME: "etcd-lb-ext.tenant.svc.cluster.local"});
        let full = service(
            json!({"type": "ClusterIP", "clusterIP": "10.0.0.9", "ports": [{"port": 2379}]}),
            json!({"loadBalancer": {}}),
            published,
        );
        let mut kept = full.clone();
        cached_view(&mut kept);
        assert_eq!(kept.metadata, full.metadata);
        assert_eq!(
            kept.spec.as_ref().unwrap().type_.as_deref(),
            Some("ClusterIP")
        );
        assert_eq!(kept.spec.as_ref().unwrap().ports, None);
        assert_eq!(kept.status, None);
        // What reconciles decide on is the same.
        assert_eq!(decide(&kept, &config()), decide(&full, &config()));
        assert!(matches!(decide(&kept, &config()), Decision::Withdraw(_)));
        assert_eq!(source_of(&kept), source_of(&full));
        assert_eq!(dns_wanted(&kept), dns_wanted(&full));
    }

    #[test]
    fn a_load_balancer_service_with_addresses_is_published() {
        let s = lb_service(
            json!([{"ip": "198.51.100.7"}, {"hostname": "lb.example.com"}]),
            json!({}),
        );
        let Decision::Publish(d) = decide(&s, &config()) else {
            panic!("expected a publication")
        };
        assert_eq!(d.service_name, "etcd-lb-ext");
        assert_eq!(d.addresses.len(), 2);
        assert_eq!(d.ports[0].port, 2379);
        assert_eq!(d.ports[0].name.as_deref(), Some("etcd"));
    }

    #[test]
    fn policy_and_opt_in_out() {
        let s = lb_service(json!([{"ip": "198.51.100.7"}]), json!({}));
        let annotated_only = ExternalEndpoints {
            policy: Policy::Annotated,
            ..config()
        };
        assert!(matches!(decide(&s, &annotated_only), Decision::Withdraw(_)));
        let opted_in = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "true"}),
        );
        assert!(matches!(
            decide(&opted_in, &annotated_only),
            Decision::Publish(_)
        ));
        let opted_out = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "false"}),
        );
        assert!(matches!(
            decide(&opted_out, &config()),
            Decision::Withdraw(_)
        ));
        let garbage = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT: "yes"}),
        );
        assert!(matches!(decide(&garbage, &config()), Decision::Invalid(_)));
    }

    #[test]
    fn suffixes_and_names_that_do_not_fit_are_invalid() {
        let custom = lb_service(
            json!([{"ip": "198.51.100.7"}]),
            json!({ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX: "-public"}),
        );
        let Decision::Publish(d) = decide(&custom, &config()) else {
            panic!()
        };
        assert_eq!(d.service_name, "etcd-lb-public");
        for bad in ["", "-Ext", "_x", "-ext.", &"-x".repeat(40)] {
            let s = lb_service(
                json!([{"ip": "198.51.100.7"}]),
                json!({ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX: bad}),
            );
            assert!(
                matches!(decide(&s, &config()), Decision::Invalid(_)),
                "{bad:?}"
            );
        }
        let mut long = lb_service(json!([{"ip": "198.51.100.7"}]), json!({}));
        long.metadata.name = Some("a".repeat(60));
        let Decision::Invalid(message) = decide(&long, &config()) else {
            panic!()
        };
        assert!(message.contains("63"), "{message}");
    }

    #[test]
    fn no_addresses_or_not_a_load_balancer() {
        let s = lb_service(json!([]), json!({}));
        assert!(matches!(decide(&s, &config()), Decision::Withdraw(_)));
        let cluster_ip = service(json!({"type": "ClusterIP"}), json!({}), json!({}));
        assert_eq!(decide(&cluster_ip, &config()), Decision::Ignore);
        let was_published = service(
            json!({"type": "ClusterIP"}),
            json!({}),
            json!({ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME: "etcd-lb-ext.tenant.svc.cluster.local"}),
        );
        assert!(matches!(
            decide(&was_published, &config()),
            Decision::Withdraw(_)
        ));
    }
}
