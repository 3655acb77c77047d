//! The kube-dc provider: load balancers on OVN external IPs, realised the way kube-dc itself does it,
//! through kube-dc's own controller.
//!
//! For a LoadBalancer whose `infrastructureRef` names a `KubeDCLoadBalancer` `<infra>`:
//! - an `EIp` (`kube-dc.com/v1`) `<infra>-eip` with the spec's `externalNetworkType`, unless
//!   `spec.eipName` names an existing EIp (the project's `default-gw`, or a pre-allocated one), which
//!   is never modified or deleted; the address is `EIp.status.ipAddress` once `status.ready`;
//! - a selectorless Service of `type: LoadBalancer` `<infra>-lb` bound to that EIp
//!   (`service.nlb.kube-dc.com/bind-on-eip`, or `bind-on-default-gw-eip` for `default-gw`) with the
//!   LoadBalancer's ports; kube-dc's controller programs OVN for it and fills its
//!   `status.loadBalancer.ingress`;
//! - the members as that Service's endpoints: EndpointSlices, plus v1 Endpoints because kube-dc's
//!   controller reads Endpoints. kube-dc has no weights, so a draining member stays in the endpoints
//!   until the reconciler removes it after the drain time.
//!
//! Everything it creates carries a controller owner reference to the `KubeDCLoadBalancer`, capi-lb's
//! labels and the owning LoadBalancer's UID label, which is what ownership is decided on: an object
//! with the same name that does not carry it is never touched (reported as `NameConflict`), and a
//! restarted controller adopts what carries it. Nothing blocks: a not-ready EIp or a Service without
//! ingress is `Pending` with its own condition reason, and so is a cluster without kube-dc's CRDs
//! (the provider then waits for them to appear instead of failing).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use capi_lb_api::KubeDCLoadBalancer;
use capi_lb_api::constants::{
    ANNOTATION_EXTERNAL_ENDPOINT, DNS_LABEL_MAX, FIELD_MANAGER, INFRASTRUCTURE_GROUP,
    LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MANAGED_BY_VALUE,
};
use capi_lb_api::kubedc::{EIp, EIpSpec};
use capi_lb_api::loadbalancer::LoadBalancerAddress;
use capi_lb_api::validation::parse;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Endpoints, ObjectReference, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::catalog::{Dependencies, Entry, OwnedKind};
use crate::clock::SharedClock;
use crate::endpoints::{self, EndpointObjects, ServiceEndpoints};
use crate::error::{INVALID_CONFIGURATION, ProviderError};
use crate::provider::{
    DeleteOutcome, DeleteRequest, EnsureOutcome, EnsureRequest, Listener, LoadBalancerIdentity,
    MemberIntent, MemberState, MemberStatus, MembersOutcome, MembersRequest, Progress, Provider,
    tags,
};

/// Name of the kube-dc provider for `--providers`.
pub const NAME: &str = "kubedc";
/// The kube-dc provider's catalog entry.
pub const ENTRY: Entry = Entry {
    name: NAME,
    title: "kube-dc provider",
    docs: "docs/providers/kubedc.md",
    infrastructure: infrastructure_resource,
    crd: <KubeDCLoadBalancer as kube::CustomResourceExt>::crd,
    build,
    owned_kinds: &[OwnedKind {
        group: "kube-dc.com",
        version: "v1",
        kind: "EIp",
        plural: "eips",
        missing: "kube-dc's CRDs are not installed: LoadBalancers on kube-dc report KubeDCNotInstalled until they are",
    }],
    calls: &[
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers",
            &["get", "patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers/status",
            &["patch"],
        ),
        (
            INFRASTRUCTURE_GROUP,
            "kubedcloadbalancers/finalizers",
            &["update"],
        ),
        ("kube-dc.com", "eips", &["get", "list", "create", "delete"]),
        // The LoadBalancer Service and its Endpoints, created by server-side apply.
        ("", "services", &["create"]),
        (
            "",
            "endpoints",
            &["get", "create", "patch", "list", "delete"],
        ),
    ],
    reasons: reason::ALL,
};

fn infrastructure_resource() -> ApiResource {
    ApiResource::erase::<KubeDCLoadBalancer>(&())
}

fn build(dependencies: &Dependencies) -> Arc<dyn Provider> {
    Arc::new(KubeDcProvider::new(
        dependencies.client.clone(),
        dependencies.clock.clone(),
    ))
}

/// kube-dc annotation binding a LoadBalancer Service to a named EIp.
pub const BIND_ON_EIP: &str = "service.nlb.kube-dc.com/bind-on-eip";
/// kube-dc annotation binding a LoadBalancer Service to the project's `default-gw` EIp.
pub const BIND_ON_DEFAULT_GW: &str = "service.nlb.kube-dc.com/bind-on-default-gw-eip";
/// The EIp every kube-dc project namespace has.
pub const DEFAULT_GW: &str = "default-gw";

/// Condition reasons of the kube-dc provider.
pub mod reason {
    use crate::provider::Reason;

    /// kube-dc has not allocated the EIp yet.
    pub const EIP_NOT_READY: Reason = Reason::wait("EIpNotReady");
    /// The EIp has been pending for long (public IP quota exhausted, or kube-dc stuck).
    pub const EIP_STUCK: Reason = Reason::problem("EIpStuck");
    /// The EIp named in `spec.eipName` does not exist.
    pub const EIP_NOT_FOUND: Reason = Reason::problem("EIpNotFound");
    /// kube-dc has not put the EIp's address on the Service yet.
    pub const SERVICE_WITHOUT_INGRESS: Reason = Reason::wait("ServiceWithoutIngress");
    /// kube-dc's CRDs are not installed in this cluster.
    pub const KUBEDC_NOT_INSTALLED: Reason = Reason::problem("KubeDCNotInstalled");
    /// An object the provider would create exists and is not capi-lb's.
    pub const NAME_CONFLICT: Reason =
        Reason::problem(capi_lb_api::constants::reason::NAME_CONFLICT);

    /// Every reason above.
    pub const ALL: &[Reason] = &[
        EIP_NOT_READY,
        EIP_STUCK,
        EIP_NOT_FOUND,
        SERVICE_WITHOUT_INGRESS,
        KUBEDC_NOT_INSTALLED,
        NAME_CONFLICT,
    ];
}

/// After this long a not-ready EIp is reported as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(300);

/// How often to look again while waiting for kube-dc.
const POLL: Duration = Duration::from_secs(5);
/// How often to look again while kube-dc is not installed or a name is taken.
const SLOW_POLL: Duration = Duration::from_secs(60);

/// How far one step of [`Provider::ensure`] got: what it made or found, or the progress to report
/// when the reconcile has to stop there (kube-dc is not installed, a name is taken, the EIp named in
/// `spec.eipName` does not exist). API failures are not a step's outcome but a [`ProviderError`].
#[derive(Debug)]
enum Step<T> {
    /// The step is done; carry on with this.
    Ready(T),
    /// Stop here and report this progress (pending, with its condition reason).
    Wait(Progress),
}

/// The kube-dc provider.
#[derive(Clone)]
pub struct KubeDcProvider {
    client: kube::Client,
    clock: SharedClock,
}

impl std::fmt::Debug for KubeDcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeDcProvider").finish_non_exhaustive()
    }
}

/// `base + suffix` when it is a DNS label of at most 63 characters starting with a letter;
/// otherwise `capi-lb-<base cut>-<8 hex of its SHA-256><suffix>`, which always is.
pub fn derived_name(base: &str, suffix: &str) -> String {
    let candidate = format!("{base}{suffix}");
    let is_label = candidate.len() <= DNS_LABEL_MAX
        && candidate.starts_with(|c: char| c.is_ascii_lowercase())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !candidate.ends_with('-');
    if is_label {
        return candidate;
    }
    let hash: String = Sha256::digest(base.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = DNS_LABEL_MAX - "capi-lb-".len() - 1 - hash.len() - suffix.len();
    let cut: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(room)
        .collect();
    let cut = cut.trim_matches('-');
    if cut.is_empty() {
        format!("capi-lb-{hash}{suffix}")
    } else {
        format!("capi-lb-{cut}-{hash}{suffix}")
    }
}

/// What the provider needs from the infrastructure object.
struct Infra {
    name: String,
    uid: Option<String>,
    namespace: String,
    spec: capi_lb_api::KubeDCLoadBalancerSpec,
    owner: Option<OwnerReference>,
}

impl Infra {
    fn read(infra: &DynamicObject, identity: &LoadBalancerIdentity) -> Result<Self, ProviderError> {
        let value = serde_json::to_value(infra)
            .map_err(|e| ProviderError::permanent(INVALID_CONFIGURATION, e.to_string()))?;
        let parsed: KubeDCLoadBalancer = parse(&value).map_err(|e| {
            ProviderError::permanent(
                INVALID_CONFIGURATION,
                format!("KubeDCLoadBalancer {}: {e}", infra.name_any()),
            )
        })?;
        Ok(Self {
            name: infra.name_any(),
            uid: infra.metadata.uid.clone(),
            namespace: identity.namespace.clone(),
            owner: parsed.controller_owner_ref(&()).map(|mut o| {
                o.block_owner_deletion = Some(true);
                o
            }),
            spec: parsed.spec,
        })
    }

    fn service_name(&self) -> String {
        derived_name(&self.name, "-lb")
    }

    fn created_eip_name(&self) -> String {
        derived_name(&self.name, "-eip")
    }

    /// The EIp in use and whether the provider owns it.
    fn eip(&self) -> (String, bool) {
        match &self.spec.eip_name {
            Some(name) => (name.clone(), false),
            None => (self.created_eip_name(), true),
        }
    }
}

/// Labels on everything the provider creates.
fn labels(identity: &LoadBalancerIdentity, infra: &Infra) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (tags::UID.to_string(), identity.uid.clone()),
    ]);
    if let Some(uid) = &infra.uid {
        labels.insert(tags::INFRASTRUCTURE_UID.to_string(), uid.clone());
    }
    labels
}

/// Annotations on everything the provider creates (names can be longer than label values).
fn annotations(identity: &LoadBalancerIdentity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (tags::NAMESPACE.to_string(), identity.namespace.clone()),
        (tags::NAME.to_string(), identity.name.clone()),
    ])
}

fn meta(name: &str, infra: &Infra, identity: &LoadBalancerIdentity) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(infra.namespace.clone()),
        labels: Some(labels(identity, infra)),
        annotations: Some(annotations(identity)),
        owner_references: infra.owner.clone().map(|o| vec![o]),
        ..Default::default()
    }
}

fn ours(meta: &ObjectMeta, identity: &LoadBalancerIdentity, infra: &Infra) -> bool {
    let labels = meta.labels.clone().unwrap_or_default();
    identity.owns(&labels)
        && labels
            .get(tags::INFRASTRUCTURE_UID)
            .is_none_or(|uid| Some(uid) == infra.uid.as_ref())
}

fn api_error(what: &str, e: kube::Error) -> ProviderError {
    ProviderError::transient(format!("{what}: {e}"))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn conflict(kind: &str, name: &str, identity: &LoadBalancerIdentity) -> Progress {
    Progress::pending_because(
        reason::NAME_CONFLICT,
        format!(
            "{kind} {}/{name} already exists and is not managed by capi-lb for LoadBalancer {}; it was left untouched. Delete or rename it, or use another KubeDCLoadBalancer name",
            identity.namespace,
            identity.display()
        ),
        SLOW_POLL,
    )
}

fn not_installed() -> Progress {
    Progress::pending_because(
        reason::KUBEDC_NOT_INSTALLED,
        "kube-dc's CRDs (eips.kube-dc.com) are not installed in this cluster; the kube-dc provider waits for them",
        SLOW_POLL,
    )
}

fn service_ports(listeners: &[Listener]) -> Vec<ServicePort> {
    listeners
        .iter()
        .map(|l| ServicePort {
            name: Some(l.name.clone()),
            port: l.port,
            target_port: Some(IntOrString::Int(l.target_port)),
            protocol: Some(l.protocol.as_str().to_string()),
            ..Default::default()
        })
        .collect()
}

/// A Service port as compared: name, port, target port, protocol.
type PortKey = (Option<String>, i32, Option<IntOrString>, Option<String>);

fn ports_of(service: &Service) -> Vec<PortKey> {
    let mut ports: Vec<_> = service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.target_port.clone(),
                Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            )
        })
        .collect();
    ports.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    ports
}

fn ingress_ips(service: &Service) -> Vec<String> {
    service
        .status
        .iter()
        .flat_map(|s| s.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.clone())
        .collect()
}

fn contains_all(
    observed: &Option<BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) -> bool {
    let observed = observed.clone().unwrap_or_default();
    wanted.iter().all(|(k, v)| observed.get(k) == Some(v))
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

impl KubeDcProvider {
    /// A provider that talks to kube-dc through `client`.
    pub fn new(client: kube::Client, clock: SharedClock) -> Self {
        Self { client, clock }
    }

    fn eips(&self, namespace: &str) -> Api<EIp> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Whether kube-dc's EIp kind is served: a list of a missing resource is a 404.
    async fn kube_dc_installed(&self, namespace: &str) -> Result<bool, ProviderError> {
        match self
            .eips(namespace)
            .list(&ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(api_error("list EIps", e)),
        }
    }

    /// Find or create the EIp: the EIp and whether it was created just now, or
    /// [`Step::Wait`] when the caller must stop and report.
    async fn ensure_eip(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        changes: &mut Vec<String>,
    ) -> Result<Step<(EIp, bool)>, ProviderError> {
        let (name, owned) = infra.eip();
        let api = self.eips(&infra.namespace);
        let found = match api.get_opt(&name).await {
            Ok(found) => found,
            Err(e) if is_not_found(&e) => return Ok(Step::Wait(not_installed())),
            Err(e) => return Err(api_error(&format!("get EIp {name}"), e)),
        };
        if found.is_none() && !self.kube_dc_installed(&infra.namespace).await? {
            return Ok(Step::Wait(not_installed()));
        }
        match (found, owned) {
            (Some(eip), false) => Ok(Step::Ready((eip, false))),
            (None, false) => Ok(Step::Wait(Progress::pending_because(
                reason::EIP_NOT_FOUND,
                format!(
                    "EIp {}/{name} named in spec.eipName does not exist; create it or fix spec.eipName",
                    infra.namespace
                ),
                SLOW_POLL,
            ))),
            (Some(eip), true) if !ours(&eip.metadata, identity, infra) => {
                Ok(Step::Wait(conflict("EIp", &name, identity)))
            }
            (Some(eip), true) => Ok(Step::Ready((eip, false))),
            (None, true) => {
                let eip = EIp {
                    metadata: meta(&name, infra, identity),
                    spec: EIpSpec {
                        external_network_type: Some(
                            infra.spec.external_network_type.as_str().to_string(),
                        ),
                        rest: BTreeMap::new(),
                    },
                    status: None,
                };
                let created = match api.create(&PostParams::default(), &eip).await {
                    Ok(created) => created,
                    Err(e) if is_not_found(&e) => return Ok(Step::Wait(not_installed())),
                    Err(e) => return Err(api_error(&format!("create EIp {name}"), e)),
                };
                changes.push(format!(
                    "created EIp {name} ({})",
                    infra.spec.external_network_type.as_str()
                ));
                Ok(Step::Ready((created, true)))
            }
        }
    }

    /// Create or update the LoadBalancer Service bound to `eip`; [`Step::Wait`] on a conflict.
    async fn ensure_service(
        &self,
        infra: &Infra,
        identity: &LoadBalancerIdentity,
        eip: &str,
        listeners: &[Listener],
        changes: &mut Vec<String>,
    ) -> Result<Step<Service>, ProviderError> {
        let name = infra.service_name();
        let api = self.services(&infra.namespace);
        let mut metadata = meta(&name, infra, identity);
        let mut wanted_annotations = annotations(identity);
        if eip == DEFAULT_GW {
            wanted_annotations.insert(BIND_ON_DEFAULT_GW.into(), "true".into());
        } else {
            wanted_annotations.insert(BIND_ON_EIP.into(), eip.to_string());
        }
        // capi-lb publishes the LoadBalancer's own -ext endpoint; this Service needs no other.
        wanted_annotations.insert(ANNOTATION_EXTERNAL_ENDPOINT.into(), "false".into());
        metadata.annotations = Some(wanted_annotations.clone());
        let desired = Service {
            metadata,
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(service_ports(listeners)),
                ..Default::default()
            }),
            status: None,
        };
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| api_error(&format!("get Service {name}"), e))?;
        if let Some(existing) = &found {
            if !ours(&existing.metadata, identity, infra) {
                return Ok(Step::Wait(conflict("Service", &name, identity)));
            }
            let same = existing.spec.as_ref().and_then(|s| s.type_.as_deref())
                == Some("LoadBalancer")
                && existing.spec.as_ref().is_some_and(|s| s.selector.is_none())
                && ports_of(existing) == ports_of(&desired)
                && contains_all(&existing.metadata.annotations, &wanted_annotations)
                && contains_all(&existing.metadata.labels, &labels(identity, infra))
                && desired.metadata.owner_references.iter().flatten().all(|d| {
                    existing
                        .owner_references()
                        .iter()
                        .any(|o| o.uid == d.uid && o.controller == d.controller)
                });
            if same {
                return Ok(Step::Ready(existing.clone()));
            }
        }
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(|e| api_error(&format!("apply Service {name}"), e))?;
        changes.push(format!(
            "{} Service {name} bound to EIp {eip}",
            if found.is_some() {
                "updated"
            } else {
                "created"
            }
        ));
        Ok(Step::Ready(applied))
    }

    /// How long `eip` has been waiting, and what kube-dc says about it.
    fn eip_waiting(&self, eip: &EIp, now: Timestamp) -> Progress {
        let name = eip.name_any();
        let since = eip
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(now);
        let waited = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        let said: Vec<String> = eip
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .filter(|c| c.get("status").and_then(Value::as_str) != Some("True"))
            .filter_map(|c| {
                let reason = c.get("reason").and_then(Value::as_str).unwrap_or_default();
                let message = c.get("message").and_then(Value::as_str).unwrap_or_default();
                (!(reason.is_empty() && message.is_empty())).then(|| format!("{reason}: {message}"))
            })
            .collect();
        let quota = said.iter().any(|s| s.to_lowercase().contains("quota"));
        let kube_dc = if said.is_empty() {
            String::new()
        } else {
            format!("; kube-dc says: {}", said.join("; "))
        };
        if quota || waited >= STUCK_AFTER {
            Progress::pending_because(
                reason::EIP_STUCK,
                format!(
                    "EIp {name} has been pending for {}{kube_dc}. Check the project's {} IP quota and kube-dc's controller",
                    human(waited),
                    eip.spec
                        .external_network_type
                        .as_deref()
                        .unwrap_or("external"),
                ),
                SLOW_POLL.min(STUCK_AFTER),
            )
        } else {
            Progress::pending_because(
                reason::EIP_NOT_READY,
                format!(
                    "waiting for kube-dc to allocate EIp {name} (pending for {}){kube_dc}",
                    human(waited)
                ),
                POLL,
            )
        }
    }

    /// The member slices and Endpoints of Service `service`, as they are: name -> address.
    async fn current_members(
        &self,
        namespace: &str,
        service: &str,
    ) -> Result<(Vec<EndpointSlice>, BTreeMap<String, String>), ProviderError> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        let listed = slices
            .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={service}")))
            .await
            .map_err(|e| api_error("list EndpointSlices", e))?
            .items;
        let mut members = BTreeMap::new();
        for slice in &listed {
            for endpoint in &slice.endpoints {
                if let (Some(target), Some(address)) = (
                    endpoint.target_ref.as_ref().and_then(|t| t.name.clone()),
                    endpoint.addresses.first(),
                ) {
                    members.insert(target, address.clone());
                }
            }
        }
        Ok((listed, members))
    }
}

/// The EndpointSlices and Endpoints of the member Service `service`, owned by it. `members` maps a
/// member's name (its `targetRef`) to its address and whether it drains. Every member is ready: kube-dc
/// has no weights, so a draining member serves until it is left out. The endpoints' ports are the
/// listeners' target ports. Without members, the Endpoints has no subsets (and there is no slice).
fn member_endpoints(
    infra: &Infra,
    identity: &LoadBalancerIdentity,
    service: &Service,
    listeners: &[Listener],
    members: &BTreeMap<String, (String, bool)>,
) -> EndpointObjects {
    let owner = service.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    });
    endpoints::build(&ServiceEndpoints {
        namespace: infra.namespace.clone(),
        service_name: infra.service_name(),
        labels: labels(identity, infra),
        owner_references: owner.into_iter().collect(),
        ports: listeners
            .iter()
            .map(|l| endpoints::Port {
                name: Some(l.name.clone()),
                port: l.target_port,
                protocol: l.protocol.as_str().to_string(),
            })
            .collect(),
        addresses: members
            .iter()
            .map(|(name, (address, _))| endpoints::Address {
                ip: address.clone(),
                ready: true,
                target: Some(target_ref(name)),
            })
            .collect(),
    })
}

fn target_ref(name: &str) -> ObjectReference {
    ObjectReference {
        name: Some(name.to_string()),
        ..Default::default()
    }
}

#[async_trait]
impl Provider for KubeDcProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    fn infrastructure_resource(&self) -> ApiResource {
        infrastructure_resource()
    }

    async fn ensure(&self, request: EnsureRequest<'_>) -> Result<EnsureOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let mut changes = Vec::new();
        let mut status = Map::new();
        let outcome = |progress: Progress, addresses, created, changes, status| EnsureOutcome {
            progress,
            addresses,
            created,
            changes,
            status,
        };
        let (eip, created) = match self.ensure_eip(&infra, identity, &mut changes).await? {
            Step::Ready(found) => found,
            Step::Wait(progress) => {
                if let Progress::Pending { message, .. } = &progress {
                    status.insert("ready".into(), json!(false));
                    status.insert("waitingFor".into(), json!(message));
                }
                return Ok(outcome(progress, Vec::new(), false, changes, status));
            }
        };
        let eip_name = eip.name_any();
        let (_, eip_owned) = infra.eip();
        status.insert("eipName".into(), json!(eip_name));
        status.insert("eipCreated".into(), json!(eip_owned));
        let service = match self
            .ensure_service(&infra, identity, &eip_name, request.listeners, &mut changes)
            .await?
        {
            Step::Ready(service) => service,
            Step::Wait(progress) => {
                if let Progress::Pending { message, .. } = &progress {
                    status.insert("ready".into(), json!(false));
                    status.insert("waitingFor".into(), json!(message));
                }
                return Ok(outcome(progress, Vec::new(), created, changes, status));
            }
        };
        status.insert("serviceName".into(), json!(service.name_any()));
        let address = eip
            .status
            .as_ref()
            .filter(|s| s.ready)
            .and_then(|s| s.ip_address.clone())
            .filter(|ip| ip.parse::<IpAddr>().is_ok());
        status.insert("address".into(), json!(address));
        let addresses: Vec<LoadBalancerAddress> = address
            .iter()
            .map(|a| LoadBalancerAddress::ip(a.clone()))
            .collect();
        let progress = match &address {
            None => self.eip_waiting(&eip, self.clock.now()),
            Some(ip) if !ingress_ips(&service).contains(ip) => Progress::pending_because(
                reason::SERVICE_WITHOUT_INGRESS,
                format!(
                    "EIp {eip_name} has {ip}; waiting for kube-dc to put it on Service {} (status.loadBalancer.ingress)",
                    service.name_any()
                ),
                POLL,
            ),
            Some(_) => Progress::Done,
        };
        let waiting = match &progress {
            Progress::Pending { message, .. } => Some(message.clone()),
            Progress::Done => None,
        };
        status.insert("ready".into(), json!(progress.is_done()));
        status.insert("waitingFor".into(), json!(waiting));
        Ok(outcome(progress, addresses, created, changes, status))
    }

    async fn converge_members(
        &self,
        request: MembersRequest<'_>,
    ) -> Result<MembersOutcome, ProviderError> {
        let identity = request.identity;
        let infra = Infra::read(request.infra, identity)?;
        let service_name = infra.service_name();
        let services = self.services(&infra.namespace);
        let Some(service) = services
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Service {service_name}"), e))?
            .filter(|s| ours(&s.metadata, identity, &infra))
        else {
            return Err(ProviderError::transient(format!(
                "Service {service_name} does not exist yet"
            )));
        };
        let (listed, current) = self
            .current_members(&infra.namespace, &service_name)
            .await?;

        // The member set: name -> (address, draining).
        let mut members: BTreeMap<String, (String, bool)> = BTreeMap::new();
        let mut skipped = Vec::new();
        for desired in request.members {
            let existing = current.get(&desired.name);
            match &desired.intent {
                MemberIntent::Serve(address) => {
                    if address.parse::<IpAddr>().is_ok() {
                        members.insert(desired.name.clone(), (address.clone(), false));
                    } else {
                        skipped.push(format!("{} ({address})", desired.name));
                    }
                }
                MemberIntent::Keep => {
                    if let Some(address) = existing {
                        members.insert(desired.name.clone(), (address.clone(), false));
                    }
                }
                // No weights in kube-dc: a draining member stays until it is left out.
                MemberIntent::Drain => {
                    if let Some(address) = existing {
                        members.insert(desired.name.clone(), (address.clone(), true));
                    }
                }
            }
        }
        let mut changes = Vec::new();
        for (name, (address, _)) in &members {
            match current.get(name) {
                None => changes.push(format!(
                    "added member {name} ({address}) to Service {service_name}"
                )),
                Some(old) if old != address => changes.push(format!(
                    "member {name} of Service {service_name} moved from {old} to {address}"
                )),
                Some(_) => {}
            }
        }
        for name in current.keys().filter(|n| !members.contains_key(*n)) {
            changes.push(format!("removed member {name} from Service {service_name}"));
        }

        let built = member_endpoints(&infra, identity, &service, request.listeners, &members);
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &infra.namespace);
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let mut keep = BTreeSet::new();
        for desired in &built.slices {
            let name = desired.name_any();
            keep.insert(name.clone());
            let existing = listed.iter().find(|s| s.name_any() == name);
            if existing.is_some_and(|s| !ours(&s.metadata, identity, &infra)) {
                return Err(ProviderError::transient(format!(
                    "EndpointSlice {name} exists and is not managed by capi-lb; it was left untouched"
                )));
            }
            let same = existing.is_some_and(|s| {
                s.endpoints == desired.endpoints
                    && s.ports == desired.ports
                    && s.address_type == desired.address_type
            });
            if !same {
                slices
                    .patch(&name, &apply, &Patch::Apply(desired))
                    .await
                    .map_err(|e| api_error(&format!("apply EndpointSlice {name}"), e))?;
            }
        }
        for slice in &listed {
            let name = slice.name_any();
            if ours(&slice.metadata, identity, &infra) && !keep.contains(&name) {
                match slices.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete EndpointSlice {name}"), e)),
                }
            }
        }

        // v1 Endpoints, which kube-dc's controller reads (without subsets when there is no member).
        let endpoints_api: Api<Endpoints> = Api::namespaced(self.client.clone(), &infra.namespace);
        let desired = built.endpoints;
        let observed = endpoints_api
            .get_opt(&service_name)
            .await
            .map_err(|e| api_error(&format!("get Endpoints {service_name}"), e))?;
        if let Some(existing) = &observed
            && !ours(&existing.metadata, identity, &infra)
        {
            return Err(ProviderError::transient(format!(
                "Endpoints {service_name} exist and are not managed by capi-lb; they were left untouched"
            )));
        }
        let same = observed.as_ref().is_some_and(|e| {
            e.subsets.as_deref().unwrap_or_default()
                == desired.subsets.as_deref().unwrap_or_default()
        });
        if !same {
            endpoints_api
                .patch(&service_name, &apply, &Patch::Apply(&desired))
                .await
                .map_err(|e| api_error(&format!("apply Endpoints {service_name}"), e))?;
        }

        // kube-dc programs OVN from the endpoints once the Service has its address.
        let programmed = !ingress_ips(&service).is_empty();
        let statuses: Vec<MemberStatus> = members
            .iter()
            .map(|(name, (address, draining))| MemberStatus {
                name: name.clone(),
                address: address.clone(),
                state: if *draining {
                    MemberState::Draining
                } else if programmed {
                    MemberState::Active
                } else {
                    MemberState::Adding
                },
            })
            .collect();
        let progress = if !skipped.is_empty() {
            Progress::pending(
                format!(
                    "kube-dc load balances to IP addresses only; not added: {}",
                    skipped.join(", ")
                ),
                SLOW_POLL,
            )
        } else if statuses.iter().any(|m| m.state == MemberState::Adding) {
            Progress::pending(
                format!("waiting for kube-dc to program Service {service_name}"),
                POLL,
            )
        } else {
            Progress::Done
        };
        let mut status = Map::new();
        status.insert("memberCount".into(), json!(statuses.len()));
        Ok(MembersOutcome {
            progress,
            members: statuses,
            changes,
            status,
        })
    }

    async fn delete(&self, request: DeleteRequest<'_>) -> Result<DeleteOutcome, ProviderError> {
        let identity = request.identity;
        let namespace = &identity.namespace;
        // Everything made for this LoadBalancer, and for this infrastructure object when it is known
        // (during a migration between two KubeDCLoadBalancers the LoadBalancer owns both sets).
        let mut selector = format!("{}={}", tags::UID, identity.uid);
        if let Some(uid) = request.infra.and_then(|i| i.metadata.uid.as_ref()) {
            selector.push_str(&format!(",{}={uid}", tags::INFRASTRUCTURE_UID));
        }
        let params = ListParams::default().labels(&selector);
        let mut changes = Vec::new();
        let mut waiting = Vec::new();

        // The Service first: kube-dc releases an EIp only once no Service is bound to it.
        let services = self.services(namespace);
        for service in services
            .list(&params)
            .await
            .map_err(|e| api_error("list Services", e))?
            .items
        {
            let name = service.name_any();
            waiting.push(format!("Service {name}"));
            if service.metadata.deletion_timestamp.is_none() {
                match services.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => changes.push(format!("deleted Service {name}")),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_error(&format!("delete Service {name}"), e)),
                }
            }
        }
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        for slice in slices
            .list(&params)
            .await
            .map_err(|e| api_error("list EndpointSlices", e))?
            .items
        {
            match slices
                .delete(&slice.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(api_error("delete EndpointSlice", e)),
            }
        }
        let endpoints: Api<Endpoints> = Api::namespaced(self.client.clone(), namespace);
        for e in endpoints
            .list(&params)
            .await
            .map_err(|e| api_error("list Endpoints", e))?
            .items
        {
            match endpoints
                .delete(&e.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(err) if is_not_found(&err) => {}
                Err(err) => return Err(api_error("delete Endpoints", err)),
            }
        }
        // Then the EIps the provider created (never one named in spec.eipName: it has no label).
        if waiting.is_empty() {
            let eips = self.eips(namespace);
            let listed = match eips.list(&params).await {
                Ok(list) => list.items,
                // kube-dc not installed: there is no EIp to delete.
                Err(e) if is_not_found(&e) => Vec::new(),
                Err(e) => return Err(api_error("list EIps", e)),
            };
            for eip in listed {
                let name = eip.name_any();
                waiting.push(format!("EIp {name}"));
                if eip.metadata.deletion_timestamp.is_none() {
                    match eips.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => changes.push(format!("deleted EIp {name}")),
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(api_error(&format!("delete EIp {name}"), e)),
                    }
                }
            }
        }
        let progress = if waiting.is_empty() {
            Progress::Done
        } else {
            Progress::pending(format!("deleting {}", waiting.join(", ")), POLL)
        };
        Ok(DeleteOutcome { progress, changes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_fit_and_stay_readable() {
        assert_eq!(derived_name("cp", "-lb"), "cp-lb");
        let long = "a".repeat(80);
        let name = derived_name(&long, "-eip");
        assert!(name.len() <= 63 && name.ends_with("-eip") && name.starts_with("capi-lb-a"));
        assert_ne!(
            derived_name(&format!("{long}x"), "-lb"),
            derived_name(&format!("{long}y"), "-lb")
        );
        // Names that are not DNS-1035 labels (a leading digit, dots) are derived too.
        let dotted = derived_name("1.cp", "-lb");
        assert!(dotted.starts_with("capi-lb-1-cp-"), "{dotted}");
        assert!(
            dotted
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn member_endpoints_are_ready_owned_by_the_service_and_point_at_target_ports() {
        let identity = LoadBalancerIdentity {
            namespace: "ns".into(),
            name: "cp".into(),
            uid: "lb-uid".into(),
            cluster_name: None,
        };
        let infra = Infra {
            name: "kdc".into(),
            uid: Some("infra-uid".into()),
            namespace: "ns".into(),
            spec: capi_lb_api::KubeDCLoadBalancerSpec {
                external_network_type: Default::default(),
                eip_name: None,
            },
            owner: None,
        };
        let service = Service {
            metadata: ObjectMeta {
                name: Some("kdc-lb".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let listeners = [Listener {
            name: "api".into(),
            port: 6443,
            target_port: 16443,
            protocol: capi_lb_api::loadbalancer::Protocol::Tcp,
        }];
        let members = BTreeMap::from([
            ("b".to_string(), ("2001:db8::2".to_string(), false)),
            ("a".to_string(), ("10.0.0.1".to_string(), true)),
        ]);
        let built = member_endpoints(&infra, &identity, &service, &listeners, &members);
        let names: Vec<_> = built.slices.iter().map(|s| s.name_any()).collect();
        assert_eq!(names, ["kdc-lb-ipv4", "kdc-lb-ipv6"]);
        let owners: Vec<_> = built.endpoints.owner_references().to_vec();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "svc-uid");
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        for slice in &built.slices {
            assert_eq!(slice.owner_references(), owners.as_slice());
            assert_eq!(slice.labels().get(tags::UID), Some(&"lb-uid".to_string()));
            let ports: Vec<_> = slice.ports.iter().flatten().map(|p| p.port).collect();
            assert_eq!(ports, [Some(16443)]);
        }
        // A draining member is still ready: kube-dc has no weights.
        let subsets = built.endpoints.subsets.clone().unwrap_or_default();
        let addresses: Vec<_> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| (a.ip.as_str(), a.target_ref.clone().and_then(|t| t.name)))
            .collect();
        assert_eq!(
            addresses,
            [
                ("10.0.0.1", Some("a".to_string())),
                ("2001:db8::2", Some("b".to_string()))
            ]
        );
        assert_eq!(subsets[0].not_ready_addresses, None);
        assert_eq!(
            subsets[0]
                .ports
                .iter()
                .flatten()
                .map(|p| p.port)
                .collect::<Vec<_>>(),
            [16443]
        );

        let empty = member_endpoints(&infra, &identity, &service, &listeners, &BTreeMap::new());
        assert!(empty.slices.is_empty());
        assert_eq!(empty.endpoints.subsets, Some(Vec::new()));
    }

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(human(Duration::from_secs(42)), "42s");
        assert_eq!(human(Duration::from_secs(600)), "10m");
        assert_eq!(human(Duration::from_secs(7320)), "2h2m");
    }
}
