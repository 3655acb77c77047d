//! Publication of load balancer addresses under a stable DNS name. One implementation serves both
//! publishers: a `LoadBalancer` (its `<name><suffix>` Service) and a Service of `type: LoadBalancer`
//! (its `<svc><suffix>` Service, see `crate::publication::services`).
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

mod plan;
pub mod services;

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
use std::ops::ControlFlow;

use crate::cache::{Caches, Lookup, ObjectCache};
use crate::context::Context;
use crate::error::{Result, is_not_found, kube_err};
use crate::metadata::patch_params;

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

/// Take a foreign object over: drop the labels that marked it as the other publisher's (so that
/// publisher, if still running, sees it as not its own), keeping everything else.
async fn strip_adopt_labels<K>(api: &Api<K>, obj: &K, publisher: &Publisher) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let labels: serde_json::Map<String, serde_json::Value> = publisher
        .adopt
        .iter()
        .flatten()
        .map(|(k, _)| (k.clone(), serde_json::Value::Null))
        .collect();
    api.patch(
        &obj.name_any(),
        &patch_params(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .map_err(kube_err("adopt", obj.name_any()))
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
    Publication::new(ctx, publisher, &desired.service_name, changes)
        .run(plan(publisher, desired), ours)
        .await
}

/// Whether `service` carries the marker that says legacy Endpoints were written for it.
fn has_legacy_marker(service: &Service) -> bool {
    service
        .annotations()
        .contains_key(ANNOTATION_LEGACY_ENDPOINTS)
}

/// One application of a [`Plan`] by [`publish`]: where it writes and what it has done so far.
struct Publication<'a> {
    client: &'a kube::Client,
    caches: &'a Caches,
    publisher: &'a Publisher,
    /// The planned Service's name.
    name: &'a str,
    services: Api<Service>,
    slices: Api<EndpointSlice>,
    /// Server-side apply as capi-lb, taking fields over from other managers.
    apply: PatchParams,
    changes: Vec<String>,
    adopted: Vec<String>,
}

/// The result of a step of a [`Publication`]: go on, or stop because the object described is in
/// the way (someone else's, not adoptable).
type Step<T = ()> = ControlFlow<String, T>;

impl<'a> Publication<'a> {
    /// A publication of Service `name` for `publisher`, after the `changes` made so far.
    fn new(
        ctx: &'a Context,
        publisher: &'a Publisher,
        name: &'a str,
        changes: Vec<String>,
    ) -> Self {
        let client = &ctx.client;
        Self {
            client,
            caches: &ctx.caches,
            publisher,
            name,
            services: Api::namespaced(client.clone(), &publisher.namespace),
            slices: Api::namespaced(client.clone(), &publisher.namespace),
            apply: PatchParams::apply(FIELD_MANAGER).force(),
            changes,
            adopted: Vec::new(),
        }
    }

    /// Apply `plan`: the Service (`ours`: the one [`withdraw_except`] kept), its slices, its legacy
    /// Endpoints, in that order, stopping at the first object in the way.
    async fn run(mut self, plan: Plan, ours: Option<Service>) -> Result<Report> {
        let observed = self.observe_service(ours).await?;
        let had_legacy = observed.as_ref().is_some_and(has_legacy_marker);
        let (observed, adopting) = match self.adopt_service(observed).await? {
            ControlFlow::Continue(found) => found,
            ControlFlow::Break(what) => return Ok(self.conflict(&what)),
        };
        let service = self
            .converge_service(observed, &plan.service, adopting)
            .await?;
        if let ControlFlow::Break(what) = self.converge_slices(&service, plan.slices).await? {
            return Ok(self.conflict(&what));
        }
        self.converge_legacy(&service, plan.endpoints, had_legacy || adopting)
            .await?;
        Ok(self.report(plan.has_address, plan.skipped))
    }

    /// How the planned Service is named in messages.
    fn describe_service(&self) -> String {
        format!("Service {}/{}", self.publisher.namespace, self.name)
    }

    /// The Service: ours was in the list; otherwise look for one someone else made.
    async fn observe_service(&self, ours: Option<Service>) -> Result<Option<Service>> {
        match ours {
            Some(service) => Ok(Some(service)),
            None => self
                .services
                .get_opt(self.name)
                .await
                .map_err(kube_err("get", self.describe_service())),
        }
    }

    /// Take `observed` over when it is someone else's and the publisher may adopt it (the flag:
    /// adopted); stop when it may not.
    async fn adopt_service(
        &mut self,
        observed: Option<Service>,
    ) -> Result<Step<(Option<Service>, bool)>> {
        match observed {
            Some(existing) if !is_our_service(&existing, self.publisher) => {
                if !adoptable(&existing.metadata, self.publisher) {
                    return Ok(ControlFlow::Break(self.describe_service()));
                }
                let stripped =
                    strip_adopt_labels(&self.services, &existing, self.publisher).await?;
                wrote(service_cache(self.caches), &stripped);
                self.adopted.push(format!("Service {}", self.name));
                Ok(ControlFlow::Continue((Some(stripped), true)))
            }
            observed => Ok(ControlFlow::Continue((observed, false))),
        }
    }

    /// Bring the Service in line with `desired` (rewritten when `adopting`, even if it matches);
    /// returns it as it now is.
    async fn converge_service(
        &mut self,
        observed: Option<Service>,
        desired: &Service,
        adopting: bool,
    ) -> Result<Service> {
        match observed {
            Some(existing) if !adopting && service_matches(&existing, desired) => Ok(existing),
            Some(existing) => self.update_service(&existing, desired, adopting).await,
            None => {
                let applied = self.apply_service(desired).await?;
                self.changes.push(format!("created Service {}", self.name));
                Ok(applied)
            }
        }
    }

    /// Change the `existing` Service into `desired`: recreate it when its kind changes, replace its
    /// ports when they differ, and apply the rest unless the ports were all that differed.
    async fn update_service(
        &mut self,
        existing: &Service,
        desired: &Service,
        adopting: bool,
    ) -> Result<Service> {
        let mut replaced = None;
        if service_kind(existing) != service_kind(desired) {
            // ClusterIP <-> ExternalName cannot be changed in place cleanly: recreate.
            delete_exact(&self.services, existing, &self.describe_service()).await?;
            gone(service_cache(self.caches), existing);
        } else if ports_key(existing) != ports_key(desired) {
            // Ports edited by someone else belong to their field manager: an apply would
            // keep them beside ours (or be refused as a duplicate name). Ours is the whole
            // list, so it is replaced outright, guarded by the version read.
            let service =
                replace_ports(&self.services, existing, desired, &self.describe_service()).await?;
            wrote(service_cache(self.caches), &service);
            replaced = Some(service);
        }
        self.changes.push(format!("updated Service {}", self.name));
        match replaced {
            // The ports were all that differed: one write.
            Some(service) if !adopting && service_matches(&service, desired) => Ok(service),
            _ => self.apply_service(desired).await,
        }
    }

    /// Server-side apply the planned Service.
    async fn apply_service(&self, desired: &Service) -> Result<Service> {
        let applied = self
            .services
            .patch(self.name, &self.apply, &Patch::Apply(desired))
            .await
            .map_err(kube_err("apply", self.describe_service()))?;
        wrote(service_cache(self.caches), &applied);
        Ok(applied)
    }

    /// The EndpointSlices, owned by `service`: apply each planned one that differs, then remove
    /// ours that are no longer planned. Stops at a slice that is someone else's.
    async fn converge_slices(
        &mut self,
        service: &Service,
        planned: Vec<EndpointSlice>,
    ) -> Result<Step> {
        let owner = controller_ref(service);
        let listed = slices_of(
            self.caches,
            &self.slices,
            &self.publisher.namespace,
            self.name,
        )
        .await?;
        let mut keep = Vec::new();
        for mut desired in planned {
            desired.metadata.owner_references = owner.clone().map(|r| vec![r]);
            let name = desired.name_any();
            if let ControlFlow::Break(what) = self.converge_slice(&listed, desired).await? {
                return Ok(ControlFlow::Break(what));
            }
            keep.push(name);
        }
        prune_slices(
            self.caches,
            &self.slices,
            &listed,
            self.publisher,
            &keep,
            &mut self.changes,
        )
        .await?;
        Ok(ControlFlow::Continue(()))
    }

    /// Apply the planned slice `desired` unless the one there (in `listed`, or else looked up)
    /// matches it; stop when that one is someone else's.
    async fn converge_slice(
        &mut self,
        listed: &[EndpointSlice],
        desired: EndpointSlice,
    ) -> Result<Step> {
        let name = desired.name_any();
        let describe = format!("EndpointSlice {}/{name}", self.publisher.namespace);
        // A slice with our name but not our labels is not in the list: look it up.
        let observed = match listed.iter().find(|s| s.name_any() == name) {
            Some(found) => Some(found.clone()),
            None => self
                .slices
                .get_opt(&name)
                .await
                .map_err(kube_err("get", describe.clone()))?,
        };
        match observed {
            Some(existing) if !is_our_slice(&existing, self.publisher) => {
                return Ok(ControlFlow::Break(describe));
            }
            Some(existing) if slice_matches(&existing, &desired) => {}
            existing => {
                let applied = self
                    .slices
                    .patch(&name, &self.apply, &Patch::Apply(&desired))
                    .await
                    .map_err(kube_err("apply", describe))?;
                wrote(slice_cache(self.caches), &applied);
                self.changes.push(match existing {
                    Some(old) => format!(
                        "updated EndpointSlice {name}: {} -> {}",
                        addresses_of(&old),
                        addresses_of(&desired)
                    ),
                    None => format!(
                        "created EndpointSlice {name} with {}",
                        addresses_of(&desired)
                    ),
                });
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Legacy Endpoints (after the slices, so DNS never goes empty during an adoption). Looked at
    /// only when wanted or when some may exist (`may_exist`: we wrote them before, the Service
    /// carries a marker set before they are written and removed after they are gone, or we are
    /// adopting).
    async fn converge_legacy(
        &mut self,
        service: &Service,
        desired: Option<Endpoints>,
        may_exist: bool,
    ) -> Result<()> {
        let wanted = self.publisher.legacy_endpoints;
        let marked = has_legacy_marker(service);
        let namespace = &self.publisher.namespace;
        if wanted && !marked {
            let marked = mark_legacy(&self.services, namespace, self.name, true).await?;
            wrote(service_cache(self.caches), &marked);
        }
        if wanted || may_exist {
            endpoints(
                self.client,
                self.publisher,
                service,
                self.name,
                desired,
                &mut self.changes,
                &mut self.adopted,
            )
            .await?;
        }
        if !wanted && marked {
            let unmarked = mark_legacy(&self.services, namespace, self.name, false).await?;
            wrote(service_cache(self.caches), &unmarked);
        }
        Ok(())
    }

    /// The report when `what` is in the way: nothing more was touched.
    fn conflict(self, what: &str) -> Report {
        Report {
            state: Published::Conflict {
                message: format!(
                    "{what} already exists and is not managed by capi-lb for {}; it was left untouched. {}",
                    self.publisher.describe, self.publisher.conflict_hint
                ),
            },
            changes: self.changes,
            adopted: self.adopted,
        }
    }

    /// The report when everything planned was applied.
    fn report(self, has_address: bool, skipped: Vec<String>) -> Report {
        let service = self.name.to_string();
        let state = if has_address {
            Published::Published { service, skipped }
        } else {
            Published::WaitingForAddress { service, skipped }
        };
        Report {
            state,
            changes: self.changes,
            adopted: self.adopted,
        }
    }
}

/// Set or remove the marker annotation that says legacy Endpoints exist for Service `name` (a merge
/// patch: it must go when they go, which an apply of a plan without it would not guarantee).
async fn mark_legacy(
    services: &Api<Service>,
    namespace: &str,
    name: &str,
    on: bool,
) -> Result<Service> {
    let value = on.then_some("true");
    services
        .patch(
            name,
            &patch_params(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {ANNOTATION_LEGACY_ENDPOINTS: value}}}),
            ),
        )
        .await
        .map_err(kube_err("annotate", format!("Service {namespace}/{name}")))
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

/// Converge the legacy Endpoints named `name`: apply `desired` (owned by `service`), or remove ours
/// (and an adoptable foreign one: it is replaced by the slices) when there is none.
async fn endpoints(
    client: &kube::Client,
    publisher: &Publisher,
    service: &Service,
    name: &str,
    desired: Option<Endpoints>,
    changes: &mut Vec<String>,
    adopted: &mut Vec<String>,
) -> Result<()> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), &publisher.namespace);
    let observed = api.get_opt(name).await.map_err(kube_err(
        "get",
        format!("Endpoints {}/{name}", publisher.namespace),
    ))?;
    let ours = observed
        .as_ref()
        .is_some_and(|e| is_our_endpoints(e, publisher));
    let foreign_adoptable = observed
        .as_ref()
        .is_some_and(|e| !ours && adoptable(&e.metadata, publisher));
    match (desired, observed) {
        (Some(mut desired), observed) => {
            desired.metadata.owner_references = controller_ref(service).map(|r| vec![r]);
            if let Some(existing) = &observed {
                if foreign_adoptable {
                    strip_adopt_labels(&api, existing, publisher).await?;
                    adopted.push(format!("Endpoints {name}"));
                } else if !ours {
                    // Someone else's Endpoints: left alone (the slices carry the addresses).
                    return Ok(());
                } else if endpoints_match(existing, &desired) {
                    return Ok(());
                }
            }
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(kube_err(
                "apply",
                format!("Endpoints {}/{name}", publisher.namespace),
            ))?;
            changes.push(format!(
                "{} Endpoints {name}",
                if observed.is_some() {
                    "updated"
                } else {
                    "created"
                }
            ));
        }
        (None, Some(existing)) if ours || foreign_adoptable => {
            delete_exact(&api, &existing, &format!("Endpoints {name}")).await?;
            if foreign_adoptable {
                adopted.push(format!("Endpoints {name} (replaced by EndpointSlices)"));
            }
            changes.push(format!("removed Endpoints {name}"));
        }
        (None, _) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_lb_api::constants::LABEL_ENDPOINTSLICE_MANAGED_BY;
    use capi_lb_api::loadbalancer::{InfrastructureRef, LoadBalancerSpec};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn lb() -> LoadBalancer {
        let mut lb = LoadBalancer::new(
            "cp",
            LoadBalancerSpec::with_infrastructure(InfrastructureRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "InMemoryLoadBalancer".into(),
                name: "cp".into(),
            }),
        );
        lb.metadata.namespace = Some("default".into());
        lb.metadata.uid = Some("uid-cp".into());
        lb
    }

    fn lb_plan(lb: &LoadBalancer, addresses: &[LoadBalancerAddress], ready: bool) -> Option<Plan> {
        let desired = lb_desired(lb, addresses, ready)?;
        Some(plan(&lb_publisher(lb).unwrap(), &desired))
    }

    #[test]
    fn classifies_families_and_refuses_unpublishable_addresses() {
        let c = classify(&[
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("2001:db8::1"),
            LoadBalancerAddress::ip("203.0.113.1"),
            LoadBalancerAddress::ip("127.0.0.1"),
            LoadBalancerAddress::ip("169.254.1.1"),
            LoadBalancerAddress::ip("fe80::1"),
            LoadBalancerAddress::ip("::1"),
            LoadBalancerAddress::ip("0.0.0.0"),
            LoadBalancerAddress::hostname("lb.example.com"),
        ]);
        assert_eq!(c.ipv4, vec!["203.0.113.1"]);
        assert_eq!(c.ipv6, vec!["2001:db8::1"]);
        assert_eq!(c.hostnames, vec!["lb.example.com"]);
        assert_eq!(c.skipped.len(), 5, "{:?}", c.skipped);
    }

    #[test]
    fn plans_a_headless_service_and_one_slice_per_family() {
        let p = lb_plan(
            &lb(),
            &[
                LoadBalancerAddress::ip("203.0.113.1"),
                LoadBalancerAddress::ip("2001:db8::1"),
            ],
            true,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(p.service.metadata.name.as_deref(), Some("cp-ext"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.selector.is_none(), "selectorless");
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!(port.target_port, Some(IntOrString::Int(port.port)));
        let owner = &p.service.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("LoadBalancer", Some(true))
        );
        let names: Vec<_> = p.slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["cp-ext-ipv4", "cp-ext-ipv6"]);
        let labels = p.slices[0].labels();
        assert_eq!(labels[LABEL_SERVICE_NAME], "cp-ext");
        assert_eq!(
            labels[LABEL_ENDPOINTSLICE_MANAGED_BY],
            "capi-lb.loadbalancer.cluster.x-k8s.io"
        );
        assert!(!labels[LABEL_ENDPOINTSLICE_MANAGED_BY].contains('/'));
        assert_eq!(p.slices[1].address_type, "IPv6");
        assert!(p.has_address);
    }

    #[test]
    fn plans_an_external_name_for_a_hostname_only_provider() {
        let p = lb_plan(
            &lb(),
            &[LoadBalancerAddress::hostname("lb.example.com")],
            true,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
        assert_eq!(spec.external_name.as_deref(), Some("lb.example.com"));
        assert!(spec.cluster_ip.is_none());
        assert!(p.slices.is_empty());
        // Not provisioned yet: no CNAME (it cannot be marked not-ready), a headless Service with
        // no endpoints, so DNS answers nothing until the load balancer works.
        let p = lb_plan(
            &lb(),
            &[LoadBalancerAddress::hostname("lb.example.com")],
            false,
        )
        .unwrap();
        let spec = p.service.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.external_name.is_none());
        assert!(p.slices.is_empty() && p.has_address);
        // IPs win over a hostname.
        let p = lb_plan(
            &lb(),
            &[
                LoadBalancerAddress::hostname("lb.example.com"),
                LoadBalancerAddress::ip("203.0.113.9"),
            ],
            true,
        )
        .unwrap();
        assert_eq!(p.service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    }

    #[test]
    fn no_plan_when_publication_is_disabled_and_no_slices_without_addresses() {
        let mut disabled = lb();
        disabled.spec.publication.enabled = false;
        assert!(lb_plan(&disabled, &[LoadBalancerAddress::ip("203.0.113.1")], true).is_none());
        let p = lb_plan(&lb(), &[], true).unwrap();
        assert!(p.slices.is_empty() && !p.has_address);
    }

    #[test]
    fn matching_ignores_apiserver_defaults_but_sees_real_changes() {
        let p = lb_plan(&lb(), &[LoadBalancerAddress::ip("203.0.113.1")], true).unwrap();
        let mut observed = p.service.clone();
        let spec = observed.spec.as_mut().unwrap();
        spec.session_affinity = Some("None".into());
        spec.ip_families = Some(vec!["IPv4".into()]);
        observed
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        assert!(service_matches(&observed, &p.service));
        observed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 443;
        assert!(!service_matches(&observed, &p.service));

        let mut slice = p.slices[0].clone();
        assert!(slice_matches(&slice, &p.slices[0]));
        let not_ready = lb_plan(&lb(), &[LoadBalancerAddress::ip("203.0.113.1")], false).unwrap();
        assert!(
            !slice_matches(&not_ready.slices[0], &p.slices[0]),
            "readiness is part of the slice"
        );
        slice.endpoints[0].addresses = vec!["203.0.113.2".into()];
        assert!(!slice_matches(&slice, &p.slices[0]));
    }
}
