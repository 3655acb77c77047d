//! Publication of load balancer addresses under a stable DNS name: the library both controllers
//! publish with, a `LoadBalancer` (its `<name><suffix>` Service) and a Service of `type:
//! LoadBalancer` (its `<svc><suffix>` Service, see [`crate::service`]). It imports neither
//! controller. [`dns`] does the same for names outside the cluster, through ExternalDNS.
//!
//! For a [`Publisher`] (who owns the objects and how they are labelled) and a [`Desired`] publication
//! (Service name, ports, addresses, readiness), capi-lb maintains a selectorless headless Service
//! (`port == targetPort`) with a controller owner reference to the publisher, and one
//! `discovery.k8s.io/v1` EndpointSlice per IP family (`<service>-ipv4`, `<service>-ipv6`) listing every
//! address of that family, owned by the Service. Cluster DNS then answers
//! `<service>.<namespace>.svc.<cluster-domain>` with those addresses, however often they change. When
//! there is only a hostname, the Service is an ExternalName Service (a CNAME) instead, once the load
//! balancer is ready (a CNAME cannot be marked not-ready; until then the Service is headless with no
//! endpoints, so DNS answers nothing that does not work yet). Optionally a
//! legacy v1 Endpoints object mirrors the slices for old consumers (labelled so the mirroring
//! controller does not copy it back into slices).
//!
//! The plan ([`plan`]) is pure. [`publish`] applies it: it never touches an object it does not own
//! (a Service without the publisher's controller reference and label, a slice or Endpoints without
//! our labels) unless the publisher may adopt it, writes only when the observed object differs from
//! the plan, updates slices in place, and removes what is no longer planned (a family that
//! disappeared, the Service of an old suffix, everything when publication stops).

mod apply;
pub mod dns;
mod holders;
mod plan;

pub use plan::*;

use capi_lb_api::LoadBalancer;
use capi_lb_api::constants::{ANNOTATION_LEGACY_ENDPOINTS, FIELD_MANAGER, LABEL_SERVICE_NAME};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::cache::{Caches, Lookup, ObjectCache};
use crate::context::Context;
use crate::error::{Result, is_not_found, kube_err};

/// The cache of the Services capi-lb publishes (`run` only), which the publication reads instead of
/// listing them.
fn service_cache(caches: &Caches) -> Option<&ObjectCache> {
    caches.of(&ApiResource::erase::<Service>(&()))
}

/// The cache of the EndpointSlices capi-lb manages (`run` only).
fn slice_cache(caches: &Caches) -> Option<&ObjectCache> {
    caches.of(&ApiResource::erase::<EndpointSlice>(&()))
}

/// Tell `cache` (if any) what capi-lb just wrote.
fn wrote<K: serde::Serialize>(cache: Option<&ObjectCache>, object: &K) {
    if let Some(cache) = cache {
        cache.wrote_as(object);
    }
}

/// Tell `cache` (if any) that capi-lb just deleted `object`.
fn gone<K: Resource>(cache: Option<&ObjectCache>, object: &K) {
    if let (Some(cache), Some(uid)) = (cache, object.meta().uid.as_deref()) {
        cache.gone(uid);
    }
}

/// Replace the ports of our Service `existing` with those of `desired` (a JSON merge patch replaces
/// a list whole), guarded by the resourceVersion `existing` was read at. Returns the Service.
async fn replace_ports(
    services: &Api<Service>,
    existing: &Service,
    desired: &Service,
    describe: &str,
) -> Result<Service> {
    let ports = desired.spec.as_ref().and_then(|s| s.ports.clone());
    let patch = json!({
        "metadata": {"resourceVersion": existing.resource_version()},
        "spec": {"ports": ports},
    });
    services
        .patch(
            &existing.name_any(),
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_err("replace the ports of", describe.to_string()))
}

/// Delete `obj` itself (a UID precondition: never an object recreated by someone else meanwhile);
/// gone already is fine.
pub(crate) async fn delete_exact<K>(api: &Api<K>, obj: &K, what: &str) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&obj.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(kube_err("delete", what.to_string())(e)),
    }
}

/// The EndpointSlices labelled as belonging to Service `service`: those capi-lb manages from the
/// cache when there is one (a foreign slice that matters is looked up by name where it does), else
/// all of them through the API.
async fn slices_of(
    caches: &Caches,
    slices: &Api<EndpointSlice>,
    namespace: &str,
    service: &str,
) -> Result<Vec<EndpointSlice>> {
    let cached = slice_cache(caches).and_then(|c| {
        c.list_as(
            namespace,
            &Lookup::labelled(LABEL_SERVICE_NAME, service),
            |o| o.labels().get(LABEL_SERVICE_NAME).map(String::as_str) == Some(service),
        )
    });
    if let Some(cached) = cached {
        return Ok(cached);
    }
    Ok(slices
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service}")))
        .await
        .map_err(kube_err("list EndpointSlices of", service.to_string()))?
        .items)
}

/// Delete the slices in `listed` that this publisher manages, except those named in `keep`.
async fn prune_slices(
    caches: &Caches,
    slices: &Api<EndpointSlice>,
    listed: &[EndpointSlice],
    publisher: &Publisher,
    keep: &[String],
    changes: &mut Vec<String>,
) -> Result<()> {
    for slice in listed {
        let name = slice.name_any();
        if is_our_slice(slice, publisher) && !keep.contains(&name) {
            delete_exact(slices, slice, &format!("EndpointSlice {name}")).await?;
            gone(slice_cache(caches), slice);
            changes.push(format!("removed EndpointSlice {name}"));
        }
    }
    Ok(())
}

/// Delete our legacy Endpoints named `name`, if any.
async fn prune_endpoints(
    client: &kube::Client,
    publisher: &Publisher,
    name: &str,
    changes: &mut Vec<String>,
) -> Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), &publisher.namespace);
    let found = api.get_opt(name).await.map_err(kube_err(
        "get",
        format!("Endpoints {}/{name}", publisher.namespace),
    ))?;
    if let Some(endpoints) = found
        && is_our_endpoints(&endpoints, publisher)
    {
        delete_exact(&api, &endpoints, &format!("Endpoints {name}")).await?;
        changes.push(format!("removed Endpoints {name}"));
    }
    Ok(())
}

/// Remove everything `publisher` published.
pub async fn withdraw(ctx: &Context, publisher: &Publisher) -> Result<Vec<String>> {
    Ok(withdraw_except(ctx, publisher, None).await?.0)
}

/// Remove everything `publisher` published except the Service named `keep`, which is returned when
/// it exists and is ours (so the caller does not need to read it again).
async fn withdraw_except(
    ctx: &Context,
    publisher: &Publisher,
    keep: Option<&str>,
) -> Result<(Vec<String>, Option<Service>)> {
    let client = &ctx.client;
    let caches = &ctx.caches;
    let namespace = &publisher.namespace;
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let mut changes = Vec::new();
    let mut kept = None;
    let (key, value) = &publisher.selector;
    let cached = service_cache(caches).and_then(|c| {
        c.list_as::<Service>(namespace, &Lookup::labelled(key, value), |o| {
            o.labels().get(key).map(String::as_str) == Some(value.as_str())
        })
    });
    let listed = match cached {
        Some(listed) => listed,
        None => {
            services
                .list(&ListParams::default().labels(&format!("{key}={value}")))
                .await
                .map_err(kube_err("list Services of", publisher.describe.clone()))?
                .items
        }
    };
    for service in listed {
        let name = service.name_any();
        if !is_our_service(&service, publisher) {
            continue;
        }
        if Some(name.as_str()) == keep {
            kept = Some(service);
            continue;
        }
        let listed_slices = slices_of(caches, &slices, namespace, &name).await?;
        prune_slices(
            caches,
            &slices,
            &listed_slices,
            publisher,
            &[],
            &mut changes,
        )
        .await?;
        if has_legacy_marker(&service) {
            prune_endpoints(client, publisher, &name, &mut changes).await?;
        }
        delete_exact(&services, &service, &format!("Service {namespace}/{name}")).await?;
        gone(service_cache(caches), &service);
        changes.push(format!("removed Service {name}"));
    }
    Ok((changes, kept))
}

/// Bring what `publisher` publishes in line with `desired` (`None`: publish nothing).
pub async fn publish(
    ctx: &Context,
    publisher: &Publisher,
    desired: Option<&Desired>,
) -> Result<Report> {
    let keep = desired.map(|d| d.service_name.as_str());
    let (changes, ours) = withdraw_except(ctx, publisher, keep).await?;
    let Some(desired) = desired else {
        return Ok(Report {
            state: Published::Disabled,
            changes,
            adopted: Vec::new(),
        });
    };
    apply::Publication::new(ctx, publisher, &desired.service_name, changes)
        .run(plan(publisher, desired), ours)
        .await
}

/// Whether `service` carries the marker that says legacy Endpoints were written for it.
fn has_legacy_marker(service: &Service) -> bool {
    service
        .annotations()
        .contains_key(ANNOTATION_LEGACY_ENDPOINTS)
}

/// Bring what LoadBalancer `lb` publishes in line with `addresses` (see [`lb_desired`]).
pub async fn publish_lb(
    ctx: &Context,
    lb: &LoadBalancer,
    addresses: &[LoadBalancerAddress],
    ready: bool,
) -> Result<Report> {
    let Some(publisher) = lb_publisher(lb) else {
        return Err(crate::error::Error::MissingField(
            format!("LoadBalancer {}", lb.name_any()),
            "uid",
        ));
    };
    publish(ctx, &publisher, lb_desired(lb, addresses, ready).as_ref()).await
}

/// Remove everything LoadBalancer `lb` published.
pub async fn withdraw_lb(ctx: &Context, lb: &LoadBalancer) -> Result<Vec<String>> {
    match lb_publisher(lb) {
        Some(publisher) => withdraw(ctx, &publisher).await,
        None => Ok(Vec::new()),
    }
}
