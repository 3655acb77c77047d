//! Names shared by every crate: API groups, annotation and label keys, finalizers, condition types
//! and reasons, Event reasons. Keeping them here means a reader can find every string capi-lb puts on
//! an object in one place.

/// API group of the generic `LoadBalancer` resource.
pub const GROUP: &str = "loadbalancer.cluster.x-k8s.io";
/// API group of infrastructure provider resources such as `InMemoryLoadBalancer`.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// API version of every capi-lb resource.
pub const VERSION: &str = "v1alpha1";

/// Cluster API contract label put on our CRDs (value: the API versions that implement the contract).
pub const CAPI_CONTRACT_LABEL: &str = "cluster.x-k8s.io/v1beta2";

/// Field manager for every server-side apply capi-lb makes.
pub const FIELD_MANAGER: &str = "capi-lb";
/// Reporting controller name used for Events.
pub const CONTROLLER_NAME: &str = "capi-lb";

/// Finalizer on a `LoadBalancer`: provider resources and published objects must be cleaned up first.
pub const LOADBALANCER_FINALIZER: &str = "loadbalancer.cluster.x-k8s.io/cleanup";
/// Finalizer capi-lb puts on the infrastructure object a LoadBalancer uses, so that the provider
/// configuration (credentials, pools) stays readable until the provider resources are gone.
pub const INFRASTRUCTURE_FINALIZER: &str = "loadbalancer.cluster.x-k8s.io/infrastructure";

// --- labels -------------------------------------------------------------------------------------

/// Label on targets (proposal) and on every object capi-lb creates: the owning LoadBalancer's name.
pub const LABEL_LB_NAME: &str = "loadbalancer.cluster.x-k8s.io/name";
/// Standard "managed by" label on objects capi-lb creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY_VALUE: &str = "capi-lb";
/// CAPI label that restricts a controller to objects with a given value (`--watch-filter`).
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// CAPI label present on control-plane Machines.
pub const LABEL_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// Annotation on a Cluster (or its control-plane object) naming the LoadBalancer in front of its
/// control plane: the `loadBalancerRef` of the CAPI load-balancer proposal, as an annotation because
/// no upstream type has the field.
pub const ANNOTATION_LOAD_BALANCER_REF: &str = "loadbalancer.cluster.x-k8s.io/loadBalancerRef";
/// CAPI label carrying the cluster name.
pub const LABEL_CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";

/// Label on legacy v1 Endpoints telling the EndpointSlice mirroring controller not to mirror them.
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// EndpointSlice label naming the Service the slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// EndpointSlice label naming the controller that manages the slice.
pub const LABEL_ENDPOINTSLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Value of [`LABEL_ENDPOINTSLICE_MANAGED_BY`]. A label value: no `/`, at most 63 characters.
pub const ENDPOINTSLICE_MANAGED_BY_VALUE: &str = "capi-lb.loadbalancer.cluster.x-k8s.io";

// --- annotations --------------------------------------------------------------------------------

/// Label clusterctl looks for on CRDs: only kinds whose CRD carries it are considered by
/// `clusterctl move` (and `clusterctl init` adds it to a provider's CRDs).
pub const LABEL_CLUSTERCTL: &str = "clusterctl.cluster.x-k8s.io";
/// Annotation `clusterctl move` puts on each object it deletes from the source cluster after
/// creating it in the target: its cloud resources must survive.
pub const ANNOTATION_DELETE_FOR_MOVE: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
/// Ownership of cloud resources across `clusterctl move` and restores, on a LoadBalancer and on
/// each infrastructure object capi-lb claims: `<name>/<uid>`, the object's name and the UID under
/// which its cloud resources are tagged (its own UID when capi-lb first saw it). A copy of the
/// object made by `clusterctl move` (or a backup restore) gets a new UID but keeps this, so it
/// adopts the cloud resources instead of creating new ones; a copy under another name does not.
pub const ANNOTATION_OWNERSHIP: &str = "loadbalancer.cluster.x-k8s.io/ownership";
/// CAPI pause annotation: when present on a LoadBalancer, capi-lb does not reconcile it.
pub const ANNOTATION_PAUSED: &str = "cluster.x-k8s.io/paused";
/// Per-target status annotation (proposal).
pub const ANNOTATION_TARGET_STATUS: &str = "loadbalancer.cluster.x-k8s.io/status";
/// User annotation that temporarily takes a target out of the load balancer (proposal). Its
/// presence counts, whatever the value.
pub const ANNOTATION_TARGET_DISABLED: &str = "loadbalancer.cluster.x-k8s.io/disabled";
/// Cluster API's annotation on a Machine whose in-place update has started (set by the Machine's
/// owner, e.g. KubeadmControlPlane, removed by the Machine controller when the update is done): a
/// target with it is taken out like a disabled one.
pub const ANNOTATION_UPDATE_IN_PROGRESS: &str =
    "in-place-updates.internal.cluster.x-k8s.io/update-in-progress";
/// Cluster API's Machine condition that is `True` while an in-place update is in progress.
pub const CONDITION_UPDATING: &str = "Updating";
/// Per-target annotation naming the LoadBalancer whose state [`ANNOTATION_TARGET_STATUS`] shows
/// (proposal). With several LoadBalancers selecting one target, the first one holds this pair; each
/// one's own state is under [`TARGET_STATE_PREFIX`].
pub const ANNOTATION_TARGET_LB: &str = "loadbalancer.cluster.x-k8s.io/name";
/// Prefix of the per-LoadBalancer state annotation on a target:
/// `state.loadbalancer.cluster.x-k8s.io/<target key>: <state>`.
pub const TARGET_STATE_PREFIX: &str = "state.loadbalancer.cluster.x-k8s.io/";
/// Prefix of the per-LoadBalancer annotation recording when the target entered its current state
/// (RFC 3339): `since.loadbalancer.cluster.x-k8s.io/<target key>`. A draining member is removed at
/// `since + spec.drainSeconds`.
pub const TARGET_SINCE_PREFIX: &str = "since.loadbalancer.cluster.x-k8s.io/";
/// Cluster API pre-drain deletion hook prefix (`<prefix><hook name>: <owner>`).
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/";
/// Cluster API pre-terminate deletion hook prefix.
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/";
/// Prefix of the per-LoadBalancer target key and deletion hook name.
pub const TARGET_KEY_PREFIX: &str = "capi-lb-";

/// Annotation on a published Service for which capi-lb also maintains legacy v1 Endpoints.
pub const ANNOTATION_LEGACY_ENDPOINTS: &str = "loadbalancer.cluster.x-k8s.io/legacy-endpoints";

// --- external endpoints of Services of type LoadBalancer ----------------------------------------

/// Service annotation: `"true"` publishes an `-ext` endpoint for this Service, `"false"` never does
/// (whatever the controller's default policy).
pub const ANNOTATION_EXTERNAL_ENDPOINT: &str = "loadbalancer.cluster.x-k8s.io/external-endpoint";
/// Service annotation: the suffix of this Service's `-ext` endpoint (default `-ext`).
pub const ANNOTATION_EXTERNAL_ENDPOINT_SUFFIX: &str =
    "loadbalancer.cluster.x-k8s.io/external-endpoint-suffix";
/// Service annotation written by capi-lb: the DNS name of the published `-ext` endpoint.
pub const ANNOTATION_EXTERNAL_ENDPOINT_DNS_NAME: &str =
    "loadbalancer.cluster.x-k8s.io/external-endpoint-dns-name";
/// Service annotation: DNS names (comma-separated) to publish for this Service of type
/// LoadBalancer through ExternalDNS (a `DNSEndpoint` named like its `-ext` endpoint).
pub const ANNOTATION_HOSTNAMES: &str = "loadbalancer.cluster.x-k8s.io/hostnames";
/// Service annotation: TTL in seconds of the records of [`ANNOTATION_HOSTNAMES`].
pub const ANNOTATION_DNS_TTL: &str = "loadbalancer.cluster.x-k8s.io/dns-ttl";
/// Service annotation written by capi-lb: the name of the `DNSEndpoint` it keeps for the Service.
pub const ANNOTATION_DNS_ENDPOINT: &str = "loadbalancer.cluster.x-k8s.io/dns-endpoint";
/// Label on objects the `-ext` publisher creates: who manages them.
pub const LABEL_EXTERNAL_MANAGED_BY: &str = "loadbalancer.cluster.x-k8s.io/managed-by";
/// Label on objects the `-ext` publisher creates: the source Service.
pub const LABEL_SOURCE_SERVICE: &str = "loadbalancer.cluster.x-k8s.io/source-service";
/// Label on objects the `-ext` publisher creates: `external`.
pub const LABEL_ENDPOINT_TYPE: &str = "loadbalancer.cluster.x-k8s.io/endpoint-type";
/// Value of [`LABEL_ENDPOINT_TYPE`].
pub const ENDPOINT_TYPE_EXTERNAL: &str = "external";
/// kube-dc's `-ext` publisher labels (adoption mode): managed-by ...
pub const KUBE_DC_LABEL_MANAGED_BY: &str = "kube-dc.com/managed-by";
/// ... with this value ...
pub const KUBE_DC_MANAGED_BY_VALUE: &str = "service-lb-controller";
/// ... and the source Service.
pub const KUBE_DC_LABEL_SOURCE_SERVICE: &str = "kube-dc.com/source-service";
/// kube-dc's endpoint-type label.
pub const KUBE_DC_LABEL_ENDPOINT_TYPE: &str = "kube-dc.com/endpoint-type";

// --- defaults -----------------------------------------------------------------------------------

/// Default suffix of the published Service: `<name>-ext`.
pub const DEFAULT_PUBLICATION_SUFFIX: &str = "-ext";
/// Default `spec.drainSeconds`.
pub const DEFAULT_DRAIN_SECONDS: i32 = 30;
/// Default cluster DNS domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
/// Default load balancer port (kube-apiserver).
pub const DEFAULT_PORT: i32 = 6443;
/// Name of the default port.
pub const DEFAULT_PORT_NAME: &str = "kube-apiserver";
/// CAPI API group (default target kind).
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
/// The API group of Cluster API control-plane providers' kinds (KubeadmControlPlane, KamajiControlPlane, ...).
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
/// The control-plane kinds (kind, plural) of the self-hosted control-plane providers, all in
/// [`CONTROL_PLANE_GROUP`]: capi-lb reads a Cluster's control-plane object of these kinds for its
/// `loadBalancerRef` annotation (its RBAC names them one by one).
pub const CONTROL_PLANE_KINDS: &[(&str, &str)] = &[
    ("KubeadmControlPlane", "kubeadmcontrolplanes"),
    ("KamajiControlPlane", "kamajicontrolplanes"),
    ("K0smotronControlPlane", "k0smotroncontrolplanes"),
    ("K0sControlPlane", "k0scontrolplanes"),
    ("RKE2ControlPlane", "rke2controlplanes"),
    ("TalosControlPlane", "taloscontrolplanes"),
    ("MicroK8sControlPlane", "microk8scontrolplanes"),
    ("CK8sControlPlane", "ck8scontrolplanes"),
];
/// CAPI Machine kind (default target kind).
pub const MACHINE_KIND: &str = "Machine";
/// Longest DNS label (Service names, label values).
pub const DNS_LABEL_MAX: usize = 63;
/// At most this many endpoints go into one EndpointSlice.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

// --- conditions ---------------------------------------------------------------------------------

/// Condition types on a `LoadBalancer`.
pub mod condition {
    /// Summary: the load balancer exists, has an address and its endpoint is published.
    pub const READY: &str = "Ready";
    /// The infrastructure provider's load balancer exists and is provisioned.
    pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    /// Every selected target with an address is an active member.
    pub const TARGETS_READY: &str = "TargetsReady";
    /// The `<name>-ext` Service and its EndpointSlices reflect the load balancer's addresses.
    pub const ENDPOINT_PUBLISHED: &str = "EndpointPublished";
    /// Reconciliation is paused (CAPI contract).
    pub const PAUSED: &str = "Paused";
    /// A control-plane load balancer's endpoint is the Cluster's `spec.controlPlaneEndpoint`.
    pub const CLUSTER_ENDPOINT: &str = "ClusterEndpoint";
    /// A change of `spec.infrastructureRef` is in progress (True) or finished (False).
    pub const INFRASTRUCTURE_MIGRATION: &str = "InfrastructureMigration";
    /// Everything the spec asks of the provider is in effect (True), or the provider said what it
    /// does not do (False: for example restricting `spec.sourceRanges`).
    pub const SPEC_HONOURED: &str = "SpecHonoured";
    /// The DNS names of `spec.dns` are in ExternalDNS's `DNSEndpoint` and ExternalDNS processed it.
    pub const DNS_PUBLISHED: &str = "DNSPublished";
    /// (With `spec.reachability`) the endpoint answered capi-lb's last probe.
    pub const REACHABLE: &str = "Reachable";
    /// (With `spec.workloadEndpoints`) the workload cluster's `default/kubernetes`
    /// endpoints are the load balancer's addresses and port.
    pub const WORKLOAD_ENDPOINTS: &str = "WorkloadEndpoints";
}

/// Condition reasons, each with its severity ([`crate::conditions::Severity`]: a problem someone has
/// to act on comes with a Warning Event). Each one is also the reason of the Event emitted for the
/// same transition, so a user can search for it in `kubectl get events` and in `docs/`.
pub mod reason {
    use crate::conditions::Reason;

    // Ready
    /// Everything is in place.
    pub const READY: Reason = Reason::normal("Ready");
    /// Some part is still progressing; the message says which.
    pub const NOT_READY: Reason = Reason::normal("NotReady");
    /// The object is being deleted.
    pub const DELETING: Reason = Reason::normal("Deleting");
    /// The spec is invalid; nothing was changed. The message names the field.
    pub const INVALID_SPEC: Reason = Reason::problem("InvalidSpec");

    // InfrastructureReady
    /// The provider reports the load balancer as provisioned.
    pub const PROVISIONED: Reason = Reason::normal("Provisioned");
    /// The provider is still provisioning.
    pub const PROVISIONING: Reason = Reason::normal("Provisioning");
    /// `spec.infrastructureRef` names a kind no enabled provider handles.
    pub const PROVIDER_NOT_ENABLED: Reason = Reason::problem("ProviderNotEnabled");
    /// The referenced infrastructure object does not exist.
    pub const INFRASTRUCTURE_NOT_FOUND: Reason = Reason::problem("InfrastructureNotFound");
    /// The referenced infrastructure object is invalid.
    pub const INVALID_INFRASTRUCTURE: Reason = Reason::problem("InvalidInfrastructure");
    /// The referenced infrastructure object is already used by another LoadBalancer.
    pub const INFRASTRUCTURE_IN_USE: Reason = Reason::problem("InfrastructureInUse");
    /// The referenced infrastructure object is being deleted.
    pub const INFRASTRUCTURE_DELETING: Reason = Reason::normal("InfrastructureDeleting");
    /// The infrastructure object is being moved to another cluster by `clusterctl move`.
    pub const MOVING: Reason = Reason::normal("MovingToAnotherCluster");
    /// The provider failed and will be retried with back-off.
    pub const PROVIDER_ERROR: Reason = Reason::problem("ProviderError");
    /// The provider failed in a way retrying cannot fix; the message says what to change.
    pub const PROVIDER_FAILED: Reason = Reason::problem("ProviderFailed");
    /// The provider got no answer within its deadline (a cloud or remote cluster that accepts
    /// connections and never answers); retried with back-off.
    pub const PROVIDER_TIMEOUT: Reason = Reason::problem("ProviderTimeout");

    // TargetsReady
    /// Every target is an active member.
    pub const TARGETS_ACTIVE: Reason = Reason::normal("TargetsActive");
    /// Some targets are still being added.
    pub const TARGETS_PROGRESSING: Reason = Reason::normal("TargetsProgressing");
    /// Targets fail their health probes (`spec.targetHealth`): taken out, or all kept because every
    /// one fails.
    pub const TARGETS_UNHEALTHY: Reason = Reason::problem("TargetsUnhealthy");
    /// Some selected targets have no usable address.
    pub const TARGETS_WITHOUT_ADDRESS: Reason = Reason::problem("TargetsWithoutAddress");
    /// The selector matches no target.
    pub const NO_TARGETS: Reason = Reason::normal("NoTargets");
    /// The target kind cannot be listed (not installed, or not known to capi-lb).
    pub const TARGET_KIND_UNAVAILABLE: Reason = Reason::problem("TargetKindUnavailable");
    /// The target kind is not one LoadBalancers may name (`capi-lb run --target-kinds`), or capi-lb
    /// manages that kind for its own purposes: nothing of it is read or written.
    pub const TARGET_KIND_NOT_ALLOWED: Reason = Reason::problem("TargetKindNotAllowed");
    /// Some targets wait for their readiness gates before they are admitted.
    pub const TARGETS_NOT_ADMITTED: Reason = Reason::normal("TargetsNotAdmitted");
    /// The member set could not be read or changed; target states are the last known ones.
    pub const MEMBERS_UNKNOWN: Reason = Reason::normal("MembersUnknown");

    // EndpointPublished
    /// The `-ext` Service and EndpointSlices are up to date.
    pub const PUBLISHED: Reason = Reason::normal("Published");
    /// The provider has no address yet.
    pub const WAITING_FOR_ADDRESS: Reason = Reason::normal("WaitingForAddress");
    /// Publication is disabled in the spec.
    pub const PUBLICATION_DISABLED: Reason = Reason::normal("PublicationDisabled");
    /// An object with the `-ext` name exists and is not ours: it was left untouched.
    pub const NAME_CONFLICT: Reason = Reason::problem("NameConflict");
    /// A provider's credentials Secret lacks the label the admin requires of credentials
    /// (`--credentials-secret-label`): it is not read.
    pub const CREDENTIALS_NOT_ALLOWED: Reason = Reason::problem("CredentialsNotAllowed");
    /// The platform's address policy refuses an address the provider reported (a loopback,
    /// link-local or ClusterIP address, one in `--address-deny`, or outside an allow-list): it is
    /// published nowhere.
    pub const ADDRESS_REFUSED: Reason = Reason::problem("AddressRefused");

    // ClusterEndpoint
    /// The Cluster's `spec.controlPlaneEndpoint` is this load balancer's endpoint.
    pub const CLUSTER_ENDPOINT_SET: Reason = Reason::normal("ClusterEndpointSet");
    /// The Cluster already has another endpoint; it is never overwritten.
    pub const CLUSTER_ENDPOINT_MISMATCH: Reason = Reason::problem("ClusterEndpointMismatch");
    /// `spec.clusterName` names a Cluster that does not exist.
    pub const CLUSTER_NOT_FOUND: Reason = Reason::problem("ClusterNotFound");
    /// `spec.controlPlane` asks for the Cluster's endpoint, but the Cluster does not name this
    /// LoadBalancer (`loadbalancer.cluster.x-k8s.io/load-balancer-ref` on the Cluster or its
    /// control plane): nothing is written into the Cluster.
    pub const CLUSTER_ENDPOINT_NOT_NAMED: Reason = Reason::problem("NotNamedByCluster");
    /// The Cluster's control-plane object (`spec.controlPlaneRef`) could not be read to see whether
    /// its `loadBalancerRef` annotation names this LoadBalancer.
    pub const CONTROL_PLANE_UNREADABLE: Reason = Reason::problem("ControlPlaneUnreadable");

    // InfrastructureMigration
    /// The new provider's load balancer is being brought up; the old one serves.
    pub const MIGRATION_PROVISIONING: Reason = Reason::normal("MigrationProvisioning");
    /// The new provider's load balancer cannot be brought up; the old one keeps serving.
    pub const MIGRATION_BLOCKED: Reason = Reason::normal("MigrationBlocked");
    /// Switched to the new load balancer; the old one drains, then is deleted.
    pub const MIGRATION_DRAINING: Reason = Reason::normal("MigrationDraining");
    /// The migration finished: the old load balancer is deleted.
    pub const MIGRATION_COMPLETE: Reason = Reason::normal("MigrationComplete");
    /// `spec.infrastructureRef` went back before the switch: the half-built one was released.
    pub const MIGRATION_CANCELLED: Reason = Reason::normal("MigrationCancelled");

    // SpecHonoured
    /// The provider does everything the spec asks.
    pub const HONOURED: Reason = Reason::normal("Honoured");
    /// The provider does not do something the spec asks; the message says what.
    pub const NOT_HONOURED: Reason = Reason::problem("NotHonoured");

    // DNSPublished
    /// ExternalDNS processed the current generation of the `DNSEndpoint`.
    pub const DNS_RECORDS_OBSERVED: Reason = Reason::normal("RecordsObserved");
    /// ExternalDNS has not processed the current generation of the `DNSEndpoint` yet.
    pub const DNS_NOT_OBSERVED: Reason = Reason::normal("NotObserved");
    /// ExternalDNS's `DNSEndpoint` CRD is not installed.
    pub const DNS_ENDPOINT_CRD_MISSING: Reason = Reason::problem("DNSEndpointCRDMissing");
    /// A hostname is already published by another LoadBalancer's `DNSEndpoint`.
    pub const HOSTNAME_CONFLICT: Reason = Reason::problem("HostnameConflict");
    /// The platform's DNS name policy does not let the namespace publish a name (outside its
    /// domains, or a wildcard where none is allowed): that name is not published.
    pub const HOSTNAME_NOT_ALLOWED: Reason = Reason::problem("HostnameNotAllowed");
    /// `spec.dns` was removed: nothing is published.
    pub const DNS_DISABLED: Reason = Reason::normal("DNSDisabled");
    /// A name asked for is not a DNS name.
    pub const INVALID_HOSTNAME: Reason = Reason::problem("InvalidHostname");

    // Reachable
    /// Every address and port of the endpoint answered the last probe.
    pub const ENDPOINT_REACHABLE: Reason = Reason::normal("EndpointReachable");
    /// An address or port of the endpoint did not answer (refused, no answer within the timeout,
    /// the name does not resolve).
    pub const ENDPOINT_UNREACHABLE: Reason = Reason::problem("EndpointUnreachable");
    /// A kube-apiserver behind the endpoint answered `GET /readyz` with an error.
    pub const ENDPOINT_NOT_READY: Reason = Reason::problem("EndpointNotReady");
    /// A kube-apiserver behind the endpoint showed a certificate the Cluster's CA does not sign
    /// (or that does not name the endpoint's host).
    pub const CERTIFICATE_NOT_TRUSTED: Reason = Reason::problem("CertificateNotTrusted");
    /// Not probed: the LoadBalancer is not Ready, or its first probe is still to come.
    pub const NOT_PROBED: Reason = Reason::normal("NotProbed");

    // WorkloadEndpoints
    /// The workload cluster's `default/kubernetes` EndpointSlices and Endpoints are the load
    /// balancer's addresses and port.
    pub const WORKLOAD_ENDPOINTS_SYNCED: Reason = Reason::normal("WorkloadEndpointsSynced");
    /// Not written yet: the load balancer is not Ready, or the first look at the workload cluster
    /// is still to come.
    pub const WORKLOAD_ENDPOINTS_PENDING: Reason = Reason::normal("WorkloadEndpointsPending");
    /// The workload cluster's API servers still run their own endpoint reconciler (they wrote
    /// their own addresses back over capi-lb's): capi-lb stopped writing.
    pub const API_SERVER_RECONCILER_ACTIVE: Reason = Reason::problem("APIServerReconcilerActive");
    /// The workload cluster did not answer (connection refused, timeout, TLS) or refused capi-lb
    /// (authentication, authorization); what was last written stays.
    pub const WORKLOAD_CLUSTER_UNREACHABLE: Reason = Reason::problem("WorkloadClusterUnreachable");
    /// The kubeconfig Secret `<clusterName>-kubeconfig` (key `value`) is missing, unusable or not
    /// allowed as credentials.
    pub const WORKLOAD_KUBECONFIG_INVALID: Reason = Reason::problem("WorkloadKubeconfigInvalid");
    /// The load balancer's hostname did not resolve this time: the last addresses it resolved to
    /// stay published (never none); one that never resolved is not written, and with no other
    /// address nothing is.
    pub const WORKLOAD_HOSTNAME_UNRESOLVED: Reason = Reason::problem("WorkloadHostnameUnresolved");

    // Paused
    /// Reconciliation is paused.
    pub const PAUSED: Reason = Reason::normal("Paused");
    /// Reconciliation is not paused.
    pub const NOT_PAUSED: Reason = Reason::normal("NotPaused");
}

/// Event reasons that are not condition reasons.
pub mod event {
    /// The provider created the load balancer.
    pub const LOAD_BALANCER_CREATED: &str = "LoadBalancerCreated";
    /// The provider changed the load balancer (listeners, addresses, configuration).
    pub const LOAD_BALANCER_UPDATED: &str = "LoadBalancerUpdated";
    /// A load balancer that was ready is gone behind capi-lb's back (deleted in the cloud, its
    /// objects removed) and the provider created a new one (a Warning, naming what was found).
    pub const LOAD_BALANCER_LOST: &str = "LoadBalancerLost";
    /// The provider's addresses changed.
    pub const ADDRESSES_CHANGED: &str = "AddressesChanged";
    /// The member set changed.
    pub const MEMBERS_CHANGED: &str = "MembersChanged";
    /// The `-ext` objects were created or updated.
    pub const ENDPOINT_PUBLISHED: &str = "EndpointPublished";
    /// The `-ext` objects were removed.
    pub const ENDPOINT_WITHDRAWN: &str = "EndpointWithdrawn";
    /// The ExternalDNS `DNSEndpoint` of `spec.dns` was created, updated or deleted.
    pub const DNS_ENDPOINT_CHANGED: &str = "DNSEndpointChanged";
    /// The provider deleted the load balancer.
    pub const LOAD_BALANCER_DELETED: &str = "LoadBalancerDeleted";
    /// A previously used infrastructure object was released (its provider resources deleted).
    pub const INFRASTRUCTURE_RELEASED: &str = "InfrastructureReleased";
    /// A target changed state (`adding`, `active`, `disabling`, ...). Emitted on the LoadBalancer
    /// and on the target.
    pub const TARGET_STATE_CHANGED: &str = "TargetStateChanged";
    /// The `-ext` endpoint of a Service of type LoadBalancer was created or updated.
    pub const EXTERNAL_ENDPOINT_PUBLISHED: &str = "ExternalEndpointPublished";
    /// The `-ext` endpoint of a Service was removed.
    pub const EXTERNAL_ENDPOINT_WITHDRAWN: &str = "ExternalEndpointWithdrawn";
    /// An object with the `-ext` name exists and is not ours: left untouched.
    pub const EXTERNAL_ENDPOINT_CONFLICT: &str = "ExternalEndpointConflict";
    /// Objects of kube-dc's `-ext` publisher were taken over (adoption mode).
    pub const EXTERNAL_ENDPOINT_ADOPTED: &str = "ExternalEndpointAdopted";
    /// The Service's `-ext` annotations or name cannot work; nothing was done.
    pub const INVALID_EXTERNAL_ENDPOINT: &str = "InvalidExternalEndpoint";
    /// A Service of capi-lb's load-balancer class was bound to the LoadBalancer that realises it.
    pub const SERVICE_BOUND: &str = "ServiceBound";
    /// A Service of capi-lb's load-balancer class has no LoadBalancer to realise it (or it is taken).
    pub const SERVICE_NOT_REALISED: &str = "ServiceNotRealised";
    /// Deletion hooks were added to Machines.
    pub const DELETION_HOOKS_ADDED: &str = "DeletionHooksAdded";
    /// Deletion hooks were released from Machines (their member is gone, they are no longer
    /// selected, or the Cluster or LoadBalancer is being deleted).
    pub const DELETION_HOOKS_RELEASED: &str = "DeletionHooksReleased";
    /// A LoadBalancer the API stored cannot be read by this version of capi-lb (typically written
    /// through a newer CRD): it is left as it is until it changes; the others go on.
    pub const UNREADABLE: &str = "Unreadable";
    /// A reconcile of the object (or a background job for it) panicked: a bug in capi-lb, caught
    /// so that it fails this object's pass alone; retried with back-off. Please report it.
    pub const INTERNAL_ERROR: &str = "InternalError";
    /// Cluster API's cluster controller copied its infrastructure or control-plane provider's
    /// endpoint over the one capi-lb had written into `Cluster.spec.controlPlaneEndpoint` (from a
    /// stale read: it copies only into an empty field, with a merge patch that does not check the
    /// resourceVersion); capi-lb wrote its own back.
    pub const CLUSTER_ENDPOINT_RESTORED: &str = "ClusterEndpointRestored";
    /// A reconcile took longer than `--reconcile-timeout-seconds` (an API server that stopped
    /// answering, say): abandoned, its work slot given back, retried with back-off.
    pub const RECONCILE_TIMED_OUT: &str = "ReconcileTimedOut";
}
