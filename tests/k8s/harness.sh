#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for capi-lb's end-to-end tests, without containers:
# etcd, kube-apiserver, kube-controller-manager (garbage collector, namespace controller, ...),
# CoreDNS serving cluster.local from that apiserver, the MetalLB controller assigning
# LoadBalancer addresses (only to Services of its own loadBalancerClass), a DNS publication chain:
# ExternalDNS (--source=crd) writing DNSEndpoints into a BIND9 zone with RFC 2136 updates, and the
# Cluster API core controller manager with its webhooks (clusterctl is built beside it), and the CRDs
# of the providers the cluster templates use (no controller of theirs).
#
#   tests/k8s/harness.sh install   # build/fetch the pinned binaries into $PREFIX (idempotent, cached)
#   tests/k8s/harness.sh start     # start everything (idempotent), write $STATE/env, print it
#   tests/k8s/harness.sh env       # print what tests need as KEY=VALUE lines
#   tests/k8s/harness.sh stop      # stop everything; no process is left behind
#   tests/k8s/harness.sh clean     # stop and forget the cluster's data (the next start is a new cluster)
#   tests/k8s/harness.sh target start|stop|clean|env
#                                  # the same for a second, minimal instance: the target of `clusterctl move`
#   tests/k8s/harness.sh legacy start|stop|clean|env
#                                  # a third, minimal instance whose Cluster API CRDs serve v1beta1 only
#   tests/k8s/harness.sh fresh install|start|stop|clean|env
#                                  # a fourth, minimal instance where clusterctl installs capi-lb; it
#                                  # runs the oldest supported Kubernetes, which only `fresh install`
#                                  # builds (after `install`), so that CI builds it beside the tests
#   tests/k8s/harness.sh [target|legacy|fresh] apiserver-stop|apiserver-start [--compact]
#                                  # an outage: stop kube-apiserver and etcd (the other components keep
#                                  # running and reconnect), start them again with the same data; with
#                                  # --compact, etcd's history is compacted first, so that every watch
#                                  # resuming from before the outage is answered 410 Gone and re-lists
#
# Binaries: kube-apiserver, kube-controller-manager and kubectl are built with Go from the
# k8s.io/kubernetes module at $K8S_VERSION (through the Go module proxy, in a small wrapper module:
# k8s.io/kubernetes cannot be `go install`ed because of its replace directives), CoreDNS and the
# MetalLB controller with `go install` (MetalLB's CRDs and controller RBAC are copied from its module
# at install time, so `start` needs no network), ExternalDNS in a wrapper module too (see
# install_external_dns; its DNSEndpoint CRD is copied the same way), the Cluster API core manager and
# clusterctl in a wrapper module too (see install_cluster_api; its CRDs, RBAC and webhook configurations
# are copied the same way), the CRDs of the providers the templates use are copied from their Go modules
# (see install_template_providers; nothing is built), the CRDs of the older Cluster API release
# $LEGACY_CAPI_VERSION for the legacy instance the same way, etcd is Debian's etcd-server, BIND9
# (named, tsig-keygen, dig) Debian's bind9 and bind9-dnsutils, installed with apt-get when missing. They
# are cached in $PREFIX keyed by version, outside the checkout; the first install takes about 20 minutes
# on 2 cores, later runs reuse the cache.
#
# The cluster: TLS everywhere, RBAC authorization, service-account tokens, the controller manager with
# all its default controllers. `start` creates:
#   $STATE/admin.kubeconfig       system:masters, for the tests' own set-up and assertions
#   $STATE/controller.kubeconfig  ServiceAccount capi-lb-system/capi-lb-manager, bound only to capi-lb's
#                                 generated ClusterRole and leader-election Role (config/rbac), so the
#                                 real authorizer checks every request the controller makes
#   CoreDNS on 127.0.0.1:$DNS_PORT (UDP and TCP), zone cluster.local, with its own least-privilege user.
#   The MetalLB controller (no speaker: addresses are assigned, never announced) with MetalLB's CRDs,
#   IPAddressPool $METALLB_NAMESPACE/harness on $METALLB_POOL (RFC 5737 documentation range), serving
#   only Services with spec.loadBalancerClass $METALLB_CLASS (class-less LoadBalancer Services other
#   tests create stay pending), as its own user bound to MetalLB's controller ClusterRole and Role.
#   The data plane: kube-proxy ($K8S_VERSION, nftables mode, as system:kube-proxy, which the
#   apiserver's bootstrap policy binds to system:node-proxier) on this host as Node $NODE_NAME, so a
#   Service's cluster IP and its MetalLB-assigned ingress IP really forward to its EndpointSlices'
#   endpoints (from this host: nothing announces the IPs to other machines), and $DATA_PLANE_RANGE on
#   lo for the API servers the data-plane tests start (tests/tests/e2e/rollout.rs). Needs root
#   (CAP_NET_ADMIN) and Debian's nftables; `stop` removes kube-proxy's tables.
#   BIND9 on 127.0.0.1:$BIND_PORT (UDP and TCP), primary for $DNS_ZONE, which only the TSIG key in
#   $STATE/tsig.key may update or transfer; the zone is reset to its SOA, NS and ns A records whenever
#   named starts. ExternalDNS publishing the externaldns.k8s.io/v1alpha1 DNSEndpoints of every namespace
#   into it (policy sync, TXT ownership records with owner id capi-lb-harness, a full sync every
#   $EXTERNAL_DNS_INTERVAL s), as its own user allowed only to read DNSEndpoints and update their status.
#   The Cluster API core manager $CAPI_VERSION (Cluster, Machine, MachineSet, ... controllers, all
#   namespaces, no leader election) with all 13 of its CRDs (v1beta2 stored, v1beta1 served and
#   converted by its conversion webhook), its validating and mutating webhooks called by the apiserver
#   at https://127.0.0.1:$CAPI_WEBHOOK_PORT (a certificate of the harness CA with IP SAN 127.0.0.1; the
#   manager has no flag for the webhook host and listens on every interface), health on
#   127.0.0.1:$CAPI_HEALTH_PORT, metrics on 127.0.0.1:$CAPI_DIAGNOSTICS_PORT, as its own user bound to
#   CAPI's aggregated ClusterRole (a provider's kinds outside *.cluster.x-k8s.io need a ClusterRole
#   labelled cluster.x-k8s.io/aggregate-to-manager, as in a real management cluster). No bootstrap,
#   control-plane or infrastructure provider runs: tests bring their own kinds. clusterctl is in
#   $CAPI_HOME/bin (CAPI_LB_E2E_CLUSTERCTL in the env).
#   Both instances are management clusters as `clusterctl init` leaves them: CAPI's CRDs carry the
#   labels clusterctl puts on a provider's components (clusterctl.cluster.x-k8s.io, which `clusterctl
#   move` lists CRDs by, and cluster.x-k8s.io/provider: cluster-api), and the clusterctl inventory
#   (CRD providers.clusterctl.cluster.x-k8s.io, copied from the CAPI module at install time) holds the
#   Providers cluster-api (CoreProvider, $CAPI_VERSION, namespace capi-system) and infrastructure-capi-lb
#   (InfrastructureProvider capi-lb, the workspace version, namespace capi-lb-system): `clusterctl move`
#   refuses a target whose inventory lacks a provider of the source, or has an older one.
#   The CRDs the cluster templates (templates/cluster-template-*.yaml) use, so that every template
#   object is judged by its real schema (template_provider_crds): the kubeadm control plane and
#   bootstrap ($CAPI_VERSION), CAPD's DockerCluster and friends (sigs.k8s.io/cluster-api/test
#   $CAPI_VERSION), cluster-api-provider-openstack $CAPO_VERSION, cluster-api-provider-kubevirt
#   $CAPK_VERSION (all from the Go module proxy, cached in $PREFIX/capi-providers), Kamaji's
#   KamajiControlPlane and TenantControlPlane and kube-dc's EIp and FIp (from ../shared/crds), with the
#   contract and clusterctl labels their releases and `clusterctl init` put on them. None of these
#   providers runs. `start` on a running instance applies them again (an instance started before they
#   were added gains them). Main instance only.
#
# The target instance (`target ACTION`) is a second management cluster for `clusterctl move` tests:
# etcd, kube-apiserver, kube-controller-manager and the Cluster API manager with its webhooks, the
# clusterctl inventory and capi-lb's ServiceAccount as above, and nothing else (no CoreDNS, MetalLB,
# BIND9, ExternalDNS). Its state is in $CAPI_LB_K8S_TARGET_STATE (default: the first instance's state
# folder + "-target"), its ports are CAPI_LB_K8S_TARGET_{ETCD,APISERVER,KCM,CAPI_WEBHOOK,CAPI_HEALTH,
# CAPI_DIAGNOSTICS}_PORT (defaults below, none shared with the first instance), and its env prints
# CAPI_LB_E2E_TARGET_* keys only (no KUBECONFIG), so both envs can be read into one process.
#
# The legacy instance (`legacy ACTION`) is an older management cluster whose Cluster API serves only
# the deprecated v1beta1 API, for the tests that capi-lb still reads it (tests/tests/e2e/v1beta1.rs):
# etcd, kube-apiserver, kube-controller-manager (garbage collection of owner references, namespace
# deletion) and capi-lb's ServiceAccount as above, plus the cluster.x-k8s.io and
# controlplane.cluster.x-k8s.io CRDs of Cluster API $LEGACY_CAPI_VERSION unmodified (v1beta1 served
# and stored, v1alpha3/v1alpha4 not served, no v1beta2, no conversion webhook), copied from the
# module at install time into $LEGACY_CAPI_HOME. No Cluster API controller runs there (building
# $LEGACY_CAPI_VERSION's manager is not worth it: the tests write the status a provider and Cluster
# API would write); nor CoreDNS, MetalLB, BIND9, ExternalDNS. Its state is in
# $CAPI_LB_K8S_LEGACY_STATE (default: the first instance's state folder + "-legacy"), its ports are
# CAPI_LB_K8S_LEGACY_{ETCD,APISERVER,KCM}_PORT (defaults below, shared with neither other instance),
# and its env prints CAPI_LB_E2E_LEGACY_* keys only.
#
# The fresh instance (`fresh ACTION`) is a management cluster as `clusterctl init` of Cluster API alone
# leaves it (its kube-apiserver runs the default lease endpoint reconciler, advertising 192.0.2.80; the
# workload-endpoints test uses it as a workload cluster whose API servers do), for the tests that
# install capi-lb with the real clusterctl (tests/tests/e2e/clusterctl.rs:
# `clusterctl init --infrastructure capi-lb`, `upgrade plan`, `delete`): etcd, kube-apiserver,
# kube-controller-manager and the Cluster API manager with its webhooks as on the target, the clusterctl
# inventory holding only the core provider cluster-api, and cert-manager's API (the CRDs of
# cert-manager.io's Issuer and Certificate, schema-less; no cert-manager runs): `clusterctl init`
# checks for cert-manager by creating a test Issuer and Certificate, and installs it from GitHub when
# that fails, which no test machine can reach. Nothing of capi-lb is there before clusterctl installs
# it (no namespace, ServiceAccount or RBAC). Its state is in $CAPI_LB_K8S_FRESH_STATE (default: the
# first instance's state folder + "-fresh"), its ports are CAPI_LB_K8S_FRESH_{ETCD,APISERVER,KCM,
# CAPI_WEBHOOK,CAPI_HEALTH,CAPI_DIAGNOSTICS}_PORT, and its env prints CAPI_LB_E2E_FRESH_* keys only.
# A test that installs capi-lb there removes it (`clusterctl delete`) when it is done.
# Facts behind the flags: ../shared/FACTS.md section 8.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

# The management cluster's Kubernetes at both ends of what Cluster API v1.14 supports (1.33 to 1.37,
# its release notes): the newest the Go module proxy serves runs the main, target and legacy
# instances; the oldest served 1.33 patch runs the fresh instance, where clusterctl installs capi-lb
# and a LoadBalancer is reconciled to Ready (tests/tests/e2e/clusterctl.rs) and which the
# workload-endpoints test uses as a workload cluster. kubectl is the newest's everywhere.
K8S_VERSION="v1.37.2"
K8S_OLDEST_VERSION="v1.33.13"
COREDNS_VERSION="v1.12.4"
# The newest v0.15 the Go module proxy serves (it has v0.11.0, v0.13.5, v0.15.2, v0.16.2); v0.16's
# controller wants its own Pod (--pod-name) and exits outside a cluster.
METALLB_VERSION="v0.15.2"
# The proxy serves v0.22.0 and v0.23.0; v0.22.0 is what ../shared/FACTS.md section 8 describes (needs Go >= 1.26.6).
EXTERNAL_DNS_VERSION="v0.22.0"
ETCD_DEB_VERSION="3.4.23-4+b4" # Debian bookworm's etcd-server
# The proxy serves v1.8.4, v1.13.4-6 and v1.14.2; v1.14.2's core/config/crd/bases are byte for byte
# the CRDs in ../shared/crds/cluster-api that the tests install (controller-gen v0.21.0).
CAPI_VERSION="v1.14.2"
# The providers the cluster templates (templates/cluster-template-*.yaml) use, for their CRDs only (no
# controller of theirs runs). cluster-api-provider-openstack: the proxy serves v0.11.0 and v0.13.0, but
# the checksum database does not know v0.13.0 (404), so `go mod download` refuses it; v0.11.0 has the
# v1beta1 OpenStackCluster the kamaji-octavia flavor uses. cluster-api-provider-kubevirt: v0.1.10, the
# newest the proxy serves. The kubeadm control plane and bootstrap CRDs come from the Cluster API
# module and CAPD's (DockerCluster, ...) from sigs.k8s.io/cluster-api/test, both at $CAPI_VERSION.
CAPO_VERSION="v0.11.0"
CAPK_VERSION="v0.1.10"
# The legacy instance's Cluster API: the only release before v1beta2 (v1.11) that the proxy serves.
# Its CRDs serve v1beta1 as the storage version and no v1beta2, as an older management cluster does.
LEGACY_CAPI_VERSION="v1.8.4"

case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin" ;; esac # named and tsig-keygen

# `harness.sh target ACTION` acts on the second instance, `harness.sh legacy ACTION` on the third.
INSTANCE=main
SELF="$0" # for messages
if [ "${1:-}" = target ] || [ "${1:-}" = legacy ] || [ "${1:-}" = fresh ]; then
  INSTANCE="$1"
  SELF="$0 $1"
  shift
fi

PREFIX="${CAPI_LB_K8S_PREFIX:-/opt/capi-lb-k8s}"
STATE="${CAPI_LB_K8S_STATE:-/tmp/capi-lb-k8s}"
ETCD_PORT="${CAPI_LB_K8S_ETCD_PORT:-23790}"
APISERVER_PORT="${CAPI_LB_K8S_APISERVER_PORT:-36443}"
KCM_PORT="${CAPI_LB_K8S_KCM_PORT:-30257}"
DNS_PORT="${CAPI_LB_K8S_DNS_PORT:-10053}"
DNS_READY_PORT="${CAPI_LB_K8S_DNS_READY_PORT:-10181}"
METALLB_PORT="${CAPI_LB_K8S_METALLB_PORT:-17472}" # its metrics (MetalLB has no flag for the host)
METALLB_NAMESPACE="metallb-system"
METALLB_CLASS="metallb.io/harness"
# The top of 198.51.100.0/24 (RFC 5737): the tests' own pools and hand-written ingress addresses take
# its first addresses, and kube-proxy forwards every LoadBalancer Service's ingress IP, so MetalLB's
# must never be one of theirs (two Services on one IP and port: kube-proxy sends it to one of them).
METALLB_POOL="198.51.100.240/28"
BIND_PORT="${CAPI_LB_K8S_BIND_PORT:-10055}"                 # named, UDP and TCP
EXTERNAL_DNS_PORT="${CAPI_LB_K8S_EXTERNAL_DNS_PORT:-17979}" # ExternalDNS's /healthz and /metrics
CAPI_WEBHOOK_PORT="${CAPI_LB_K8S_CAPI_WEBHOOK_PORT:-19443}"         # Cluster API's webhooks (all interfaces: no host flag)
CAPI_HEALTH_PORT="${CAPI_LB_K8S_CAPI_HEALTH_PORT:-19440}"           # its /healthz and /readyz
CAPI_DIAGNOSTICS_PORT="${CAPI_LB_K8S_CAPI_DIAGNOSTICS_PORT:-18443}" # its /metrics (plain HTTP)
# The data plane (main instance only): kube-proxy in nftables mode on this host, as Node
# $NODE_NAME, forwarding Services' cluster IPs and their status.loadBalancer.ingress IPs (MetalLB's
# pool) to their endpoints, and the private range $DATA_PLANE_RANGE on lo, whose addresses the
# data-plane tests and benchmarks give their API servers ($NODE_IP is the node's own). nftables'
# tables are per network namespace: one main instance per machine runs it; CAPI_LB_K8S_KUBE_PROXY=off
# leaves it out (another main instance beside the first, e.g. a probe).
KUBE_PROXY="${CAPI_LB_K8S_KUBE_PROXY:-on}"
KUBE_PROXY_HEALTH_PORT="${CAPI_LB_K8S_KUBE_PROXY_HEALTH_PORT:-10356}"
KUBE_PROXY_METRICS_PORT="${CAPI_LB_K8S_KUBE_PROXY_METRICS_PORT:-10349}"
NODE_NAME="capi-lb-harness"
DATA_PLANE_RANGE="10.199.0.0/24"
NODE_IP="10.199.0.1"
# What an instance runs (`running` checks each): everything, or for the target only what a
# management cluster needs.
COMPONENTS="etcd kube-apiserver kube-controller-manager coredns metallb-controller named external-dns cluster-api-manager"
if [ "$KUBE_PROXY" = on ]; then COMPONENTS="$COMPONENTS kube-proxy"; fi
if [ "$INSTANCE" = target ]; then
  # Derived from the first instance's state folder, so a test run with its own CAPI_LB_K8S_STATE
  # gets its own target too (and `stop`'s pkill of "$STATE/" never matches the other instance).
  STATE="${CAPI_LB_K8S_TARGET_STATE:-$STATE-target}"
  ETCD_PORT="${CAPI_LB_K8S_TARGET_ETCD_PORT:-23800}" # and +1 for its peer URL
  APISERVER_PORT="${CAPI_LB_K8S_TARGET_APISERVER_PORT:-36543}"
  KCM_PORT="${CAPI_LB_K8S_TARGET_KCM_PORT:-30357}"
  CAPI_WEBHOOK_PORT="${CAPI_LB_K8S_TARGET_CAPI_WEBHOOK_PORT:-19543}"
  CAPI_HEALTH_PORT="${CAPI_LB_K8S_TARGET_CAPI_HEALTH_PORT:-19540}"
  CAPI_DIAGNOSTICS_PORT="${CAPI_LB_K8S_TARGET_CAPI_DIAGNOSTICS_PORT:-18543}"
  COMPONENTS="etcd kube-apiserver kube-controller-manager cluster-api-manager"
elif [ "$INSTANCE" = fresh ]; then
  STATE="${CAPI_LB_K8S_FRESH_STATE:-$STATE-fresh}"
  ETCD_PORT="${CAPI_LB_K8S_FRESH_ETCD_PORT:-23820}" # and +1 for its peer URL
  APISERVER_PORT="${CAPI_LB_K8S_FRESH_APISERVER_PORT:-36743}"
  KCM_PORT="${CAPI_LB_K8S_FRESH_KCM_PORT:-30557}"
  CAPI_WEBHOOK_PORT="${CAPI_LB_K8S_FRESH_CAPI_WEBHOOK_PORT:-19643}"
  CAPI_HEALTH_PORT="${CAPI_LB_K8S_FRESH_CAPI_HEALTH_PORT:-19640}"
  CAPI_DIAGNOSTICS_PORT="${CAPI_LB_K8S_FRESH_CAPI_DIAGNOSTICS_PORT:-18643}"
  COMPONENTS="etcd kube-apiserver kube-controller-manager cluster-api-manager"
elif [ "$INSTANCE" = legacy ]; then
  STATE="${CAPI_LB_K8S_LEGACY_STATE:-$STATE-legacy}"
  ETCD_PORT="${CAPI_LB_K8S_LEGACY_ETCD_PORT:-23810}" # and +1 for its peer URL
  APISERVER_PORT="${CAPI_LB_K8S_LEGACY_APISERVER_PORT:-36643}"
  KCM_PORT="${CAPI_LB_K8S_LEGACY_KCM_PORT:-30457}"
  COMPONENTS="etcd kube-apiserver kube-controller-manager"
fi
DNS_ZONE="capi-lb.test"
TSIG_KEY="capi-lb-harness"
# Seconds between ExternalDNS's full syncs (an AXFR and a list from its cache: cheap). A change is
# in DNS within about interval + 1 s (it checks every second whether a sync is due). Its --events
# (the crd source supports it) only schedules a sync 5 s after a change, so it is not used.
EXTERNAL_DNS_INTERVAL=2

K8S_BIN="$PREFIX/kubernetes-$K8S_VERSION/bin"
K8S_OLDEST_BIN="$PREFIX/kubernetes-$K8S_OLDEST_VERSION/bin"
KUBECTL="$K8S_BIN/kubectl"
# The binaries of this instance's Kubernetes (the fresh instance runs the oldest supported).
INSTANCE_K8S_VERSION="$K8S_VERSION"
INSTANCE_K8S_BIN="$K8S_BIN"
if [ "$INSTANCE" = fresh ]; then
  INSTANCE_K8S_VERSION="$K8S_OLDEST_VERSION"
  INSTANCE_K8S_BIN="$K8S_OLDEST_BIN"
fi
COREDNS_BIN="$PREFIX/coredns-$COREDNS_VERSION/bin"
METALLB_HOME="$PREFIX/metallb-$METALLB_VERSION" # bin/metallb-controller, crds/*.yaml, rbac/controller.yaml
METALLB_BIN="$METALLB_HOME/bin"
ETCD_BIN="$PREFIX/etcd-${ETCD_DEB_VERSION%%-*}/bin"
EXTERNAL_DNS_HOME="$PREFIX/external-dns-$EXTERNAL_DNS_VERSION" # bin/external-dns, crds/*.yaml
CAPI_HOME="$PREFIX/cluster-api-$CAPI_VERSION" # bin/{cluster-api-manager,clusterctl}, crds/, rbac/, webhook/, clusterctl/
CLUSTERCTL="$CAPI_HOME/bin/clusterctl"
# One line per provider whose CRDs the templates need: the name clusterctl gives its components
# (cluster.x-k8s.io/provider), the Go module and version, and the kustomize folder in the module whose
# bases/ are the CRDs and whose kustomization.yaml has the contract labels (cluster.x-k8s.io/<contract>).
# Each is cached in $PROVIDERS_HOME/<name>-<version>/ (crds/*.yaml, contract-labels).
TEMPLATE_PROVIDERS="control-plane-kubeadm sigs.k8s.io/cluster-api $CAPI_VERSION controlplane/kubeadm/config/crd
bootstrap-kubeadm sigs.k8s.io/cluster-api $CAPI_VERSION bootstrap/kubeadm/config/crd
infrastructure-docker sigs.k8s.io/cluster-api/test $CAPI_VERSION infrastructure/docker/config/crd
infrastructure-openstack sigs.k8s.io/cluster-api-provider-openstack $CAPO_VERSION config/crd
infrastructure-kubevirt sigs.k8s.io/cluster-api-provider-kubevirt $CAPK_VERSION config/crd"
PROVIDERS_HOME="$PREFIX/capi-providers"
# Kamaji (its control-plane provider's KamajiControlPlane, Kamaji's TenantControlPlane) and kube-dc
# (EIp, FIp): the Go module proxy serves neither the Kamaji provider nor a Kamaji newer than v1.0.0
# (2024, no loadBalancerClass), and kube-dc has no Go module, so their CRDs come from ../shared/crds
# (the commits are in its README), as for the tests that install them themselves.
KAMAJI_CRDS="${KAMAJI_CRDS_DIR:-$REPO/../shared/crds/kamaji}"
KUBEDC_CRDS="${KUBEDC_CRDS_DIR:-$REPO/../shared/crds/kube-dc}"
# The contract label of KamajiControlPlane: config/crd/kustomization.yaml of
# clastix/cluster-api-control-plane-provider-kamaji at the commit of ../shared/crds/kamaji.
KAMAJI_CONTRACT_LABEL='cluster.x-k8s.io/v1beta2: v1alpha2'
LEGACY_CAPI_HOME="$PREFIX/cluster-api-crds-$LEGACY_CAPI_VERSION" # crds/*.yaml
SERVER="https://127.0.0.1:$APISERVER_PORT"

log() { printf '[k8s-harness] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# One install or start at a time (several test binaries may ask at once).
with_lock() {
  mkdir -p "$(dirname "$STATE")"
  exec 9>"$STATE.lock"
  flock 9
  "$@"
}

# --- install -----------------------------------------------------------------------------------

install_packages() {
  local missing=()
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  command -v flock >/dev/null || missing+=(util-linux)
  { command -v named && command -v tsig-keygen; } >/dev/null || missing+=(bind9)
  command -v dig >/dev/null || missing+=(bind9-dnsutils)
  command -v nft >/dev/null || missing+=(nftables) # kube-proxy's nftables mode runs nft
  command -v ip >/dev/null || missing+=(iproute2)   # the data plane's addresses on lo
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  command -v go >/dev/null || die "Go is needed to build kube-apiserver and CoreDNS (https://go.dev/dl, >= 1.26.6: ExternalDNS v0.22 needs it)"
}

install_etcd() {
  [ -x "$ETCD_BIN/etcd" ] && return
  log "fetching etcd-server $ETCD_DEB_VERSION from Debian"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -qq "etcd-server=$ETCD_DEB_VERSION" 2>/dev/null) || {
    apt-get update -qq
    (cd "$tmp" && apt-get download -qq "etcd-server=$ETCD_DEB_VERSION")
  }
  dpkg -x "$tmp"/etcd-server_*.deb "$tmp/x"
  mkdir -p "$ETCD_BIN"
  install -m 0755 "$tmp/x/usr/bin/etcd" "$ETCD_BIN/etcd.tmp"
  mv "$ETCD_BIN/etcd.tmp" "$ETCD_BIN/etcd"
  rm -rf "$tmp"
}

# kubernetes_installed VERSION COMMAND...: the commands built for VERSION.
kubernetes_installed() {
  local version="$1" b; shift
  for b in "$@"; do [ -x "$PREFIX/kubernetes-$version/bin/$b" ] || return 1; done
}

# install_kubernetes VERSION COMMAND...: build k8s.io/kubernetes/cmd/COMMAND of VERSION into
# $PREFIX/kubernetes-VERSION/bin. k8s.io/kubernetes requires its staging modules at v0.0.0 with
# replace directives to ./staging, which only apply in the main module: a wrapper module replaces
# each with its published v0.MINOR.PATCH. The list of staging modules and the godebug line are read
# from the module's own go.mod (1.37 added cri-streaming and streaming to 1.33's 31).
install_kubernetes() {
  local version="$1"; shift
  kubernetes_installed "$version" "$@" && return
  local src="$PREFIX/src/kubernetes-$version" staging="v0.${version#v1.}" bin="$PREFIX/kubernetes-$version/bin"
  local began=$SECONDS gomod modules godebug
  log "building Kubernetes $version ($*) in $src; about 8 minutes the first time"
  mkdir -p "$src"
  gomod="$(cd "$src" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "k8s.io/kubernetes@$version" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -s "$gomod" ] || die "k8s.io/kubernetes@$version: no go.mod from the module proxy"
  modules="$(sed -n '/^replace (/,/^)/p' "$gomod" | awk '$1 ~ /^k8s\.io\// && $2 == "=>" { sub(/^k8s\.io\//, "", $1); print $1 }')"
  [ -n "$modules" ] || die "k8s.io/kubernetes@$version: no staging modules in its go.mod"
  godebug="$(grep -m1 '^godebug ' "$gomod" || true)"
  {
    printf 'module capi-lb.local/k8s-harness\n\n%s\n\n%s\n\n' "$(grep -m1 '^go ' "$gomod")" "$godebug"
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$version"
    local m
    for m in $modules; do printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$staging"; done
    printf ')\n'
  } >"$src/go.mod"
  {
    printf '//go:build tools\n\n// Package tools keeps the commands the harness builds in the module graph.\npackage tools\n\nimport (\n'
    local c
    for c in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } >"$src/tools.go"
  local minor="${version#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w" pkg packages=()
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for c in "$@"; do packages+=("k8s.io/kubernetes/cmd/$c"); done
  (
    cd "$src"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod tidy
    go build -trimpath -ldflags "$ldflags" -o "$src/bin/" "${packages[@]}"
  )
  mkdir -p "$bin"
  for c in "$@"; do mv "$src/bin/$c" "$bin/$c"; done
  log "built Kubernetes $version ($*) in $((SECONDS - began)) s"
}

# CoreDNS compiles every plugin its command lists (core/plugin/zplugin.go: cloud backends with their
# SDKs, etcd, gRPC, GeoIP, tracing, ...), and the harness's Corefile names four (bind, errors, ready,
# kubernetes). So the module is copied and that list cut to these and a few small ones a person
# debugging the harness may add (health, log, cache, forward, loop, reload, loadbalance, whoami,
# root), then built as its own main module (its go.mod and go.sum unchanged; the plugins the kept ones
# import stay in). Measured 2026-11-29 on 2 idle cores with empty Go caches: 109 s against 174 s for
# `go install` of the whole command; in the cold CI run of that day the whole command took about
# 320 s beside the Rust builds. A Corefile naming a plugin cut out fails with "unknown directive".
COREDNS_PLUGINS_KEPT="bind errors ready kubernetes health log cache forward loop reload loadbalance whoami root"

install_coredns() {
  [ -x "$COREDNS_BIN/coredns" ] && return
  local src="$PREFIX/src/coredns-$COREDNS_VERSION" dir tmp began=$SECONDS
  log "building CoreDNS $COREDNS_VERSION (the plugins the harness uses) in $src"
  dir="$(GOTOOLCHAIN=local GOFLAGS='' go mod download -json "github.com/coredns/coredns@$COREDNS_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -s "$dir/core/plugin/zplugin.go" ] || die "github.com/coredns/coredns@$COREDNS_VERSION: no core/plugin/zplugin.go in '$dir'"
  rm -rf "$src"
  mkdir -p "$(dirname "$src")"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  local list="$src/core/plugin/zplugin.go"
  awk -v kept=" $COREDNS_PLUGINS_KEPT " '
    /^\t_ "github\.com\/coredns\/coredns\/plugin\/[a-z0-9_]+"$/ {
      name = $0; sub(".*/plugin/", "", name); sub("\"$", "", name)
      if (index(kept, " " name " ") == 0) next
    }
    { print }' "$list" >"$list.cut"
  mv "$list.cut" "$list"
  # shellcheck disable=SC2086
  [ "$(grep -cP '^\t_ "github\.com/coredns/coredns/plugin/' "$list")" = "$(set -- $COREDNS_PLUGINS_KEPT; echo $#)" ] \
    && grep -qP '^\t_ "github\.com/coredns/coredns/plugin/kubernetes"$' "$list" \
    && ! grep -q 'plugin/route53\|plugin/etcd"' "$list" \
    || die "github.com/coredns/coredns@$COREDNS_VERSION: its plugin list did not cut as expected"
  tmp="$(mktemp -d)"
  (cd "$src" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/coredns" .)
  mkdir -p "$COREDNS_BIN"
  mv "$tmp/coredns" "$COREDNS_BIN/coredns"
  rm -rf "$tmp"
  log "built CoreDNS $COREDNS_VERSION in $((SECONDS - began)) s"
}

metallb_installed() {
  [ -x "$METALLB_BIN/metallb-controller" ] && [ -s "$METALLB_HOME/crds/metallb.io_ipaddresspools.yaml" ] \
    && [ -s "$METALLB_HOME/rbac/controller.yaml" ]
}

# The controller binary, the CRDs (config/crd/bases: all eight, as upstream installs them; the
# controller itself watches IPAddressPool and Community) and, from config/rbac/role.yaml, only the
# controller's ClusterRole and Role (not the speaker's, not the bindings to ServiceAccounts).
install_metallb() {
  metallb_installed && return
  log "building the MetalLB controller $METALLB_VERSION"
  local tmp dir stage="$METALLB_HOME.tmp.$$"
  tmp="$(mktemp -d)"
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/crds" "$stage/rbac"
  (cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 GOBIN="$tmp" \
    go install -trimpath -ldflags '-s -w' "go.universe.tf/metallb/controller@$METALLB_VERSION")
  dir="$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "go.universe.tf/metallb@$METALLB_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -d "$dir/config/crd/bases" ] || die "go.universe.tf/metallb@$METALLB_VERSION: no config/crd/bases in '$dir'"
  install -m 0644 "$dir"/config/crd/bases/*.yaml "$stage/crds/"
  awk 'BEGIN { RS = "\n---\n" }
       /(^|\n)kind: (ClusterRole|Role)\n/ && /\n  name: (metallb-system:controller|controller)\n/ { printf "---\n%s\n", $0 }' \
    "$dir/config/rbac/role.yaml" >"$stage/rbac/controller.yaml"
  [ "$(grep -c '^kind: \(ClusterRole\|Role\)$' "$stage/rbac/controller.yaml")" = 2 ] \
    || die "go.universe.tf/metallb@$METALLB_VERSION: config/rbac/role.yaml has no controller ClusterRole and Role"
  mv "$tmp/controller" "$stage/bin/metallb-controller"
  rm -rf "$tmp" "$METALLB_HOME"
  mv "$stage" "$METALLB_HOME"
}

external_dns_installed() {
  [ -x "$EXTERNAL_DNS_HOME/bin/external-dns" ] \
    && [ -s "$EXTERNAL_DNS_HOME/crds/dnsendpoints.externaldns.k8s.io.yaml" ]
}

# The Go module proxy here does not serve three of the modules sigs.k8s.io/external-dns v0.22.0 requires
# (403 "This module version is not available"): github.com/exoscale/egoscale/v3 v3.1.44 and
# github.com/openshift/api and client-go of 2026-08. So `go install sigs.k8s.io/external-dns@v0.22.0`
# fails; a wrapper module (as for Kubernetes) replaces each with the nearest version the proxy serves.
# None of them is used with --provider=rfc2136 --source=crd; they only have to compile.
EXTERNAL_DNS_REPLACE="github.com/exoscale/egoscale/v3 v3.1.43
github.com/openshift/api v0.0.0-20260709102940-580f1c1ba691
github.com/openshift/client-go v0.0.0-20251015124057-db0dee36e235"

# Only the rfc2136 provider and the TXT registry run here, and the command compiles every provider's
# cloud SDK (AWS, Azure, Google, OCI, ...) through two factory packages that list them: 1,419 packages
# of 188 modules, 619 s of CPU cold (measured 2026-11-29 on 2 cores). So the module is copied into
# the wrapper and those two lists are cut to what the harness selects (the rfc2136 provider; the
# noop, txt and crd registries) before the build: about 757 packages of 88 modules, the same command
# otherwise (selecting another provider fails with "unknown dns provider"). The cut is a filter over
# the two files, checked afterwards.
EXTERNAL_DNS_PROVIDERS_KEPT="rfc2136"
EXTERNAL_DNS_REGISTRIES_KEPT="noop txt crd"

# external_dns_cut FILE KIND KEPT...: drop from FILE (provider/factory/provider.go or
# registry/factory/registry.go) the imports of sigs.k8s.io/external-dns/KIND/<name> and the
# constructor-map entries `<name>.New...` of every <name> not in KEPT.
external_dns_cut() {
  local file="$1" kind="$2"; shift 2
  awk -v kind="$kind" -v kept=" $* " '
    $0 ~ "^\t\"sigs\\.k8s\\.io/external-dns/" kind "/[a-z0-9]+\"$" {
      name = $0; sub(".*/" kind "/", "", name); sub("\"$", "", name)
      if (index(kept, " " name " ") == 0) next
    }
    /^\t\texternaldns\.[A-Za-z0-9]+: +[a-z0-9]+\.New[A-Za-z]*,$/ {
      name = $2; sub("\\..*", "", name)
      if (index(kept, " " name " ") == 0) next
    }
    { print }' "$file" >"$file.cut"
  mv "$file.cut" "$file"
}

# The binary and its DNSEndpoint CRD (config/crd/standard), staged and then moved into place.
install_external_dns() {
  external_dns_installed && return
  local src="$PREFIX/src/external-dns-$EXTERNAL_DNS_VERSION" dir began=$SECONDS stage="$EXTERNAL_DNS_HOME.tmp.$$"
  log "building ExternalDNS $EXTERNAL_DNS_VERSION (its rfc2136 provider alone) in $src; about 5 minutes the first time"
  rm -rf "$EXTERNAL_DNS_HOME".tmp.* # left by an install that failed
  mkdir -p "$src" "$stage/bin" "$stage/crds"
  {
    printf 'module capi-lb.local/external-dns-harness\n\ngo 1.26.6\n\n'
    printf 'require sigs.k8s.io/external-dns %s\n\nreplace (\n' "$EXTERNAL_DNS_VERSION"
    local m v
    while read -r m v; do printf '\t%s => %s %s\n' "$m" "$m" "$v"; done <<<"$EXTERNAL_DNS_REPLACE"
    printf ')\n'
  } >"$src/go.mod"
  cat >"$src/tools.go" <<'EOF'
//go:build tools

// Package tools keeps the command the harness builds in the module graph.
package tools

import _ "sigs.k8s.io/external-dns"
EOF
  # The module, copied into the wrapper with its provider and registry lists cut (above).
  dir="$(cd "$src" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "sigs.k8s.io/external-dns@$EXTERNAL_DNS_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -d "$dir/provider/factory" ] || die "sigs.k8s.io/external-dns@$EXTERNAL_DNS_VERSION: no provider/factory in '$dir'"
  rm -rf "$src/external-dns"
  cp -r "$dir" "$src/external-dns"
  chmod -R u+w "$src/external-dns"
  local cut="$src/external-dns"
  # shellcheck disable=SC2086
  external_dns_cut "$cut/provider/factory/provider.go" provider $EXTERNAL_DNS_PROVIDERS_KEPT
  # shellcheck disable=SC2086
  external_dns_cut "$cut/registry/factory/registry.go" registry $EXTERNAL_DNS_REGISTRIES_KEPT
  [ "$(grep -c '"sigs.k8s.io/external-dns/provider/[a-z0-9]*"$' "$cut/provider/factory/provider.go")" = 1 ] \
    && grep -q 'externaldns.ProviderRFC2136: *rfc2136.New,' "$cut/provider/factory/provider.go" \
    && [ "$(grep -c 'externaldns.Provider[A-Za-z0-9]*: ' "$cut/provider/factory/provider.go")" = 1 ] \
    && grep -q 'externaldns.RegistryTXT: *txt.New,' "$cut/registry/factory/registry.go" \
    && ! grep -q 'dynamodb\|awssd' "$cut/registry/factory/registry.go" \
    || die "sigs.k8s.io/external-dns@$EXTERNAL_DNS_VERSION: its provider or registry list did not cut as expected"
  printf 'replace sigs.k8s.io/external-dns => ./external-dns\n' >>"$src/go.mod"
  (
    cd "$src"
    GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod tidy
    GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$stage/bin/external-dns" \
      -ldflags "-s -w -X sigs.k8s.io/external-dns/pkg/apis/externaldns.Version=$EXTERNAL_DNS_VERSION" \
      sigs.k8s.io/external-dns
  )
  [ -s "$dir/config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml" ] \
    || die "sigs.k8s.io/external-dns@$EXTERNAL_DNS_VERSION: no config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml in '$dir'"
  install -m 0644 "$dir/config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml" "$stage/crds/"
  rm -rf "$EXTERNAL_DNS_HOME"
  mv "$stage" "$EXTERNAL_DNS_HOME"
  log "built ExternalDNS $EXTERNAL_DNS_VERSION in $((SECONDS - began)) s"
}

capi_installed() {
  [ -x "$CAPI_HOME/bin/cluster-api-manager" ] && [ -x "$CLUSTERCTL" ] \
    && [ -s "$CAPI_HOME/crds/cluster.x-k8s.io_machines.yaml" ] && [ -s "$CAPI_HOME/rbac/role.yaml" ] \
    && [ -s "$CAPI_HOME/rbac/aggregated_role.yaml" ] && [ -s "$CAPI_HOME/webhook/manifests.yaml" ]
}

# The Cluster API core manager (package sigs.k8s.io/cluster-api/core) and clusterctl, with what the
# manager needs at start copied from the module: its CRDs (core/config/crd/bases, all of them), its
# ClusterRole and the aggregating ClusterRole it is bound to in a real install (core/config/rbac; the
# aggregation label the release's kustomize patch adds is added here) and its webhook configurations
# (core/config/webhook/manifests.yaml). Since v1.13 the module's go.mod replaces
# sigs.k8s.io/cluster-api/api with ./api (a module of its own, not in the parent's zip), so `go install
# sigs.k8s.io/cluster-api/core@version` refuses it; a wrapper module replaces it with the published
# sigs.k8s.io/cluster-api/api of the same version, as for Kubernetes.
install_cluster_api() {
  capi_installed && return
  local src="$PREFIX/src/cluster-api-$CAPI_VERSION" dir began=$SECONDS stage="$CAPI_HOME.tmp.$$"
  log "building Cluster API $CAPI_VERSION (core manager, clusterctl) in $src; about 10 minutes the first time"
  rm -rf "$CAPI_HOME".tmp.* # left by an install that failed
  mkdir -p "$src" "$stage/bin" "$stage/crds" "$stage/rbac" "$stage/webhook"
  cat >"$src/go.mod" <<EOF
module capi-lb.local/cluster-api-harness

go 1.26.0

require sigs.k8s.io/cluster-api $CAPI_VERSION

replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api $CAPI_VERSION
EOF
  cat >"$src/tools.go" <<'EOF'
//go:build tools

// Package tools keeps the commands the harness builds in the module graph.
package tools

import (
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
	_ "sigs.k8s.io/cluster-api/core"
)
EOF
  local minor="${CAPI_VERSION#v1.}"; minor="${minor%%.*}" v="sigs.k8s.io/cluster-api/version"
  local ldflags="-s -w -X $v.gitVersion=$CAPI_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  (
    cd "$src"
    GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod tidy
    GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
      -o "$stage/bin/cluster-api-manager" sigs.k8s.io/cluster-api/core
    GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
      -o "$stage/bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
  )
  dir="$(cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)/core/config"
  if ! { [ -s "$dir/crd/bases/cluster.x-k8s.io_machines.yaml" ] && [ -s "$dir/rbac/role.yaml" ] \
    && [ -s "$dir/rbac/aggregated_role.yaml" ] && [ -s "$dir/webhook/manifests.yaml" ]; }; then
    die "sigs.k8s.io/cluster-api@$CAPI_VERSION: no CRDs, RBAC or webhook manifests in '$dir'"
  fi
  install -m 0644 "$dir"/crd/bases/*.yaml "$stage/crds/"
  install -m 0644 "$dir/rbac/aggregated_role.yaml" "$dir/webhook/manifests.yaml" "$stage/rbac/"
  mv "$stage/rbac/manifests.yaml" "$stage/webhook/manifests.yaml"
  # manager-role joins aggregated-manager-role, as the release's manager_role_aggregation_patch does.
  awk '{ print } /^  name: manager-role$/ { print "  labels:\n    cluster.x-k8s.io/aggregate-to-manager: \"true\"" }' \
    "$dir/rbac/role.yaml" >"$stage/rbac/role.yaml"
  grep -q 'aggregate-to-manager' "$stage/rbac/role.yaml" \
    || die "sigs.k8s.io/cluster-api@$CAPI_VERSION: core/config/rbac/role.yaml has no ClusterRole manager-role"
  rm -rf "$CAPI_HOME"
  mv "$stage" "$CAPI_HOME"
  log "built Cluster API $CAPI_VERSION in $((SECONDS - began)) s"
}

clusterctl_inventory_installed() { [ -s "$CAPI_HOME/clusterctl/clusterctl-api.yaml" ]; }

# clusterctl's inventory CRD (providers.clusterctl.cluster.x-k8s.io, cmd/clusterctl/config/manifest in
# the module; clusterctl embeds it and installs it on first use, `start` installs it beforehand as
# `clusterctl init` does). Separate from install_cluster_api so an existing install only gains the file
# (the module is in Go's cache from that build) instead of a rebuild.
install_clusterctl_inventory() {
  clusterctl_inventory_installed && return
  local src="$PREFIX/src/cluster-api-$CAPI_VERSION" dir
  [ -s "$src/go.mod" ] || die "$src/go.mod missing: remove $CAPI_HOME and run $0 install again"
  dir="$(cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)"
  [ -s "$dir/cmd/clusterctl/config/manifest/clusterctl-api.yaml" ] \
    || die "sigs.k8s.io/cluster-api@$CAPI_VERSION: no cmd/clusterctl/config/manifest/clusterctl-api.yaml in '$dir'"
  mkdir -p "$CAPI_HOME/clusterctl"
  install -m 0644 "$dir/cmd/clusterctl/config/manifest/clusterctl-api.yaml" "$CAPI_HOME/clusterctl/clusterctl-api.yaml.tmp"
  mv "$CAPI_HOME/clusterctl/clusterctl-api.yaml.tmp" "$CAPI_HOME/clusterctl/clusterctl-api.yaml"
}

template_providers_installed() {
  local name module version path
  while read -r name module version path; do
    [ -s "$PROVIDERS_HOME/$name-$version/contract-labels" ] || return 1
  done <<<"$TEMPLATE_PROVIDERS"
}

# The CRDs of each of $TEMPLATE_PROVIDERS from its module (`go mod download`, checked against the
# checksum database): every file of <path>/bases, as the provider's release installs them, and the
# contract labels its <path>/kustomization.yaml adds to them (commonLabels or labels.pairs; not
# cluster.x-k8s.io/provider, which clusterctl sets). Nothing is built.
install_template_providers() {
  local name module version path dir stage home tmp
  tmp="$(mktemp -d)"
  while read -r name module version path; do
    home="$PROVIDERS_HOME/$name-$version"
    [ -s "$home/contract-labels" ] && continue
    log "fetching the CRDs of $name ($module@$version)"
    dir="$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "$module@$version" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
    [ -d "$dir/$path/bases" ] && [ -s "$dir/$path/kustomization.yaml" ] \
      || die "$module@$version: no $path/bases or $path/kustomization.yaml in '$dir'"
    stage="$home.tmp.$$"
    rm -rf "$stage"
    mkdir -p "$stage/crds"
    install -m 0644 "$dir/$path"/bases/*.yaml "$stage/crds/"
    grep -E '^[[:space:]]+cluster\.x-k8s\.io/v1(alpha|beta)[0-9]+: [a-z0-9_]+$' "$dir/$path/kustomization.yaml" \
      | sed 's/^[[:space:]]*//' >"$stage/contract-labels" || true
    [ -s "$stage/contract-labels" ] || die "$module@$version: no contract label in $path/kustomization.yaml"
    rm -rf "$home"
    mv "$stage" "$home"
  done <<<"$TEMPLATE_PROVIDERS"
  rm -rf "$tmp"
}

legacy_capi_installed() { [ -s "$LEGACY_CAPI_HOME/crds/cluster.x-k8s.io_machines.yaml" ]; }

# The legacy instance's CRDs: Cluster API $LEGACY_CAPI_VERSION's cluster.x-k8s.io kinds
# (config/crd/bases) and its KubeadmControlPlane kinds (controlplane/kubeadm/config/crd/bases), from
# the module as `go mod download` fetches it (no build), staged and then moved into place. Each must
# serve and store v1beta1 and must not know v1beta2: that is what the legacy instance is for.
install_legacy_capi() {
  legacy_capi_installed && return
  local tmp dir f stage="$LEGACY_CAPI_HOME.tmp.$$"
  log "fetching the CRDs of Cluster API $LEGACY_CAPI_VERSION (legacy instance)"
  rm -rf "$LEGACY_CAPI_HOME".tmp.* # left by an install that failed
  mkdir -p "$stage/crds"
  tmp="$(mktemp -d)"
  dir="$(cd "$tmp" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "sigs.k8s.io/cluster-api@$LEGACY_CAPI_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  rm -rf "$tmp"
  for f in "$dir"/config/crd/bases/cluster.x-k8s.io_*.yaml "$dir"/controlplane/kubeadm/config/crd/bases/controlplane.cluster.x-k8s.io_*.yaml; do
    [ -s "$f" ] || die "sigs.k8s.io/cluster-api@$LEGACY_CAPI_VERSION: no CRDs in '$dir' ($f)"
    legacy_versions served "$f" | grep -qx v1beta2 && die "$f serves v1beta2: not a legacy release"
    legacy_versions storage "$f" | grep -qx v1beta1 || die "$f does not store v1beta1"
    install -m 0644 "$f" "$stage/crds/"
  done
  rm -rf "$LEGACY_CAPI_HOME"
  mv "$stage" "$LEGACY_CAPI_HOME"
}

# legacy_versions served|storage CRD_FILE: the versions of a CRD (controller-gen's layout: each
# entry of spec.versions has `name` before `served` and `storage`) that are served or stored.
legacy_versions() {
  awk -v field="$1" '/^  - / { v = "" } /^  - name: v|^    name: v/ { v = $NF }
    $0 == "    " field ": true" && v { print v }' "$2"
}

cmd_install() {
  install_packages
  install_etcd
  install_coredns
  install_metallb
  install_external_dns
  install_kubernetes "$K8S_VERSION" kube-apiserver kube-controller-manager kubectl kube-proxy
  install_cluster_api
  install_clusterctl_inventory
  install_template_providers
  install_legacy_capi
  log "installed: $("$K8S_BIN/kube-apiserver" --version), etcd $("$ETCD_BIN/etcd" --version | head -1 | awk '{print $3}'), CoreDNS $COREDNS_VERSION, MetalLB $METALLB_VERSION, ExternalDNS $EXTERNAL_DNS_VERSION, Cluster API $CAPI_VERSION (and $LEGACY_CAPI_VERSION's CRDs), the templates' provider CRDs (CAPO $CAPO_VERSION, CAPK $CAPK_VERSION, CAPD and kubeadm $CAPI_VERSION), $(named -v); the fresh instance's Kubernetes $K8S_OLDEST_VERSION is built by \`$SELF fresh install\`"
}

# The fresh instance's own Kubernetes, the oldest supported: a separate step, so that CI can build it
# in the background while the tests that do not need it run (.ci/run; it is 7 to 16 minutes of Go
# build on 2 cores, most of it CPU that the mostly waiting tests leave idle). Under the fresh
# instance's lock: a test asking for the instance meanwhile waits for this build and then starts it.
cmd_install_fresh() {
  install_packages
  install_kubernetes "$K8S_OLDEST_VERSION" kube-apiserver kube-controller-manager
  log "installed: $("$K8S_OLDEST_BIN/kube-apiserver" --version) for the fresh instance"
}

installed() {
  [ -x "$ETCD_BIN/etcd" ] && kubernetes_installed "$K8S_VERSION" kube-apiserver kube-controller-manager kubectl kube-proxy \
    && { [ "$INSTANCE" != fresh ] || kubernetes_installed "$K8S_OLDEST_VERSION" kube-apiserver kube-controller-manager; } && [ -x "$COREDNS_BIN/coredns" ] && metallb_installed && external_dns_installed \
    && capi_installed && clusterctl_inventory_installed && template_providers_installed && command -v named >/dev/null && command -v tsig-keygen >/dev/null && command -v dig >/dev/null \
    && command -v nft >/dev/null && command -v ip >/dev/null \
    && { [ "$INSTANCE" != legacy ] || legacy_capi_installed; }
}

# --- start -------------------------------------------------------------------------------------

PKI="$STATE/pki"

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the harness CA.
cert() {
  local name="$1" subject="$2" san="${3:-}"
  [ -s "$PKI/$name.crt" ] && return
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
  local ext="$PKI/$name.ext"
  if [ -n "$san" ]; then
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$san" >"$ext"
  else
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$ext"
  fi
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

pki() {
  mkdir -p "$PKI"
  if [ ! -s "$PKI/ca.crt" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=capi-lb-harness-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=capi-lb-harness-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert controller-manager-serving "/CN=kube-controller-manager" "IP:127.0.0.1,DNS:localhost"
  cert coredns "/CN=capi-lb-harness:coredns"
  cert metallb-controller "/CN=capi-lb-harness:metallb-controller"
  cert external-dns "/CN=capi-lb-harness:external-dns"
  cert capi-manager "/CN=capi-lb-harness:capi-manager"
  cert capi-webhook "/CN=cluster-api-webhook" "IP:127.0.0.1,DNS:localhost"
  # Bound to system:node-proxier by the apiserver's own bootstrap policy, as kubeadm's kube-proxy.
  cert kube-proxy "/CN=system:kube-proxy"
  if [ ! -s "$PKI/sa.key" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

# kubeconfig FILE USER (client certificate) | kubeconfig FILE USER token TOKEN
kubeconfig() {
  local file="$1" user="$2"
  local auth
  if [ "${3:-}" = token ]; then
    auth="    token: $4"
  else
    auth="    client-certificate: $PKI/$user.crt
    client-key: $PKI/$user.key"
  fi
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: capi-lb-harness
  cluster:
    server: $SERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
$auth
contexts:
- name: capi-lb-harness
  context: {cluster: capi-lb-harness, user: $user}
current-context: capi-lb-harness
EOF
  mv "$file.tmp" "$file"
}

# A pid file holds "PID START", START being the process's start time (clock ticks after boot, field
# 22 of /proc/PID/stat). A pid alone is not enough: a state folder kept across a reboot (or copied
# with /tmp to another machine) names pids that other processes now have, and a CI run once took an
# unrelated process for the target instance's etcd, never started it and timed out waiting.
proc_start() { [ -r "/proc/$1/stat" ] && sed 's/.*) //' "/proc/$1/stat" | awk '{print $20}'; }
pid_of() { # NAME: the component's pid if that process still runs, else nothing
  local pid start
  [ -s "$STATE/$1.pid" ] || return 1
  read -r pid start <"$STATE/$1.pid" || true
  [ -n "$pid" ] && [ -n "$start" ] && [ "$(proc_start "$pid" 2>/dev/null)" = "$start" ] && echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }

# launch NAME COMMAND...: run in the background (own session), log to $STATE/NAME.log.
launch() {
  local name="$1" pid; shift
  alive "$name" && return
  setsid "$@" >"$STATE/$name.log" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid $(proc_start "$pid")" >"$STATE/$name.pid"
}

# wait_until WHAT SECONDS COMMAND...
wait_until() {
  local what="$1" deadline=$((SECONDS + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "timed out waiting for $what; the last lines of its log:"
      tail -n 20 "$STATE/$what.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

ready() { # URL with the admin client certificate
  [ "$(curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$1")" = ok ]
}

kubectl_admin() { "$KUBECTL" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

start_etcd() {
  launch etcd "$ETCD_BIN/etcd" --name capi-lb-harness --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "capi-lb-harness=http://127.0.0.1:$((ETCD_PORT + 1))" --initial-cluster-state new \
    --quota-backend-bytes 4294967296 --unsafe-no-fsync
  wait_until etcd 20 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  # The fresh instance runs the API servers' own endpoint reconciler, as a management cluster does
  # (tests/tests/e2e/workload_endpoints.rs: capi-lb must see it and not fight it). It refuses a
  # loopback advertise address, so that instance advertises 192.0.2.80, a documentation address
  # nothing connects to (it only appears in its default/kubernetes endpoints). The others run
  # without one, as capi-lb's workload endpoints want it.
  local advertise=(--advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
  if [ "$INSTANCE" = fresh ]; then
    advertise=(--advertise-address=192.0.2.80 --endpoint-reconciler-type=lease)
  fi
  launch kube-apiserver "$INSTANCE_K8S_BIN/kube-apiserver" \
    --bind-address=127.0.0.1 "${advertise[@]}" --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --authorization-mode=RBAC \
    --service-cluster-ip-range=10.96.0.0/12 \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local --api-audiences=https://kubernetes.default.svc.cluster.local \
    --cert-dir="$STATE/apiserver-certs" --profiling=false
  wait_until kube-apiserver 60 ready "$SERVER/readyz"
}

start_controller_manager() {
  mkdir -p "$STATE/flexvolume"
  launch kube-controller-manager "$INSTANCE_K8S_BIN/kube-controller-manager" \
    --kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authentication-skip-lookup=true --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/controller-manager-serving.crt" --tls-private-key-file="$PKI/controller-manager-serving.key" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false --controllers='*' \
    --use-service-account-credentials=true --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" --flex-volume-plugin-dir="$STATE/flexvolume" \
    --kube-api-qps=100 --kube-api-burst=200 --concurrent-gc-syncs=20 --profiling=false
  wait_until kube-controller-manager 30 ready "https://127.0.0.1:$KCM_PORT/healthz"
}

# What exists in every harness cluster (both instances): capi-lb's namespace and its ServiceAccount
# with the generated RBAC (the tests re-apply the RBAC the code under test generates).
bootstrap_objects() {
  # The fresh instance gets capi-lb from clusterctl, nothing before.
  [ "$INSTANCE" != fresh ] || return 0
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: capi-lb-system}
EOF
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$REPO/config/rbac/rbac.yaml" >/dev/null
  if [ ! -s "$STATE/controller.kubeconfig" ]; then
    local token
    token="$(kubectl_admin -n capi-lb-system create token capi-lb-manager --duration=8760h)"
    kubeconfig "$STATE/controller.kubeconfig" capi-lb-manager token "$token"
  fi
}

# CoreDNS's read access.
coredns_objects() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: capi-lb-harness:coredns}
rules:
- {apiGroups: [""], resources: [services, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: capi-lb-harness:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "capi-lb-harness:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "capi-lb-harness:coredns"}
EOF
}

start_coredns() {
  coredns_objects
  cat >"$STATE/Corefile" <<EOF
cluster.local:$DNS_PORT {
    bind 127.0.0.1
    errors
    ready 127.0.0.1:$DNS_READY_PORT
    kubernetes cluster.local {
        kubeconfig $STATE/coredns.kubeconfig
    }
}
EOF
  launch coredns "$COREDNS_BIN/coredns" -conf "$STATE/Corefile"
  wait_until coredns 20 curl -fsS "http://127.0.0.1:$DNS_READY_PORT/ready"
}

# MetalLB's CRDs, its namespace, the controller's own ClusterRole and Role (from MetalLB's
# config/rbac) bound to the harness user capi-lb-harness:metallb-controller, and the pool.
metallb_objects() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$METALLB_HOME/crds" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$METALLB_HOME/crds" >/dev/null
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $METALLB_NAMESPACE}
EOF
  kubectl_admin -n "$METALLB_NAMESPACE" apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$METALLB_HOME/rbac/controller.yaml" >/dev/null
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "capi-lb-harness:metallb-controller"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "metallb-system:controller"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "capi-lb-harness:metallb-controller"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: "capi-lb-harness:metallb-controller", namespace: $METALLB_NAMESPACE}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: controller}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "capi-lb-harness:metallb-controller"}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: harness, namespace: $METALLB_NAMESPACE}
spec:
  addresses: ["$METALLB_POOL"]
  avoidBuggyIPs: true  # never the network address (.0) of the range
EOF
}

# Ready once its metrics count the harness pool's addresses: the pool has been read.
metallb_ready() {
  local metrics
  metrics="$(curl -fsS "http://127.0.0.1:$METALLB_PORT/metrics")" \
    && [[ $metrics == *'metallb_allocator_addresses_total{pool="harness"}'* ]]
}

# No memberlist Secret (only with --ml-secret-name; there is no speaker), no webhook, no Pod.
start_metallb() {
  metallb_objects
  launch metallb-controller env -u METALLB_ML_SECRET_NAME -u METALLB_DEPLOYMENT -u METALLB_BGP_TYPE \
    "$METALLB_BIN/metallb-controller" --kubeconfig="$STATE/metallb-controller.kubeconfig" \
    --namespace="$METALLB_NAMESPACE" --webhook-mode=disabled --port="$METALLB_PORT" \
    --lb-class="$METALLB_CLASS" --log-level=info
  wait_until metallb-controller 30 metallb_ready
}

# The Node kube-proxy runs as (no kubelet: kube-controller-manager marks it NotReady and taints it,
# which no test schedules anything on), and the data plane's range on lo: a /24 on lo makes each of
# its addresses local, so a server can bind any of them.
data_plane_objects() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  labels: {kubernetes.io/hostname: $NODE_NAME, capi-lb.dev/harness: data-plane}
EOF
  # kube-proxy waits (30 s) for the Node's addresses, as a kubelet would report them.
  kubectl_admin patch node "$NODE_NAME" --subresource=status --type=merge \
    -p "{\"status\": {\"addresses\": [{\"type\": \"InternalIP\", \"address\": \"$NODE_IP\"}, {\"type\": \"Hostname\", \"address\": \"$NODE_NAME\"}]}}" >/dev/null
  ip -4 -o addr show dev lo | grep -q " ${NODE_IP}/${DATA_PLANE_RANGE#*/} " \
    || ip addr add "$NODE_IP/${DATA_PLANE_RANGE#*/}" dev lo
}

kube_proxy_ready() { curl -fsS "http://127.0.0.1:$KUBE_PROXY_HEALTH_PORT/healthz" >/dev/null; }

# kube-proxy in nftables mode (table ip kube-proxy), no conntrack sysctl of its own (0 keeps the
# machine's), node ports only on $NODE_IP.
start_kube_proxy() {
  data_plane_objects
  launch kube-proxy "$K8S_BIN/kube-proxy" --kubeconfig="$STATE/kube-proxy.kubeconfig" \
    --proxy-mode=nftables --hostname-override="$NODE_NAME" --bind-address="$NODE_IP" \
    --nodeport-addresses="$NODE_IP/32" \
    --healthz-bind-address="127.0.0.1:$KUBE_PROXY_HEALTH_PORT" \
    --metrics-bind-address="127.0.0.1:$KUBE_PROXY_METRICS_PORT" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0s \
    --conntrack-tcp-timeout-close-wait=0s --profiling=false
  wait_until kube-proxy 30 kube_proxy_ready
}

# Its tables, after it stopped (`kube-proxy --cleanup` also asks for iptables, which is not here).
kube_proxy_cleanup() {
  local family
  for family in ip ip6; do nft delete table "$family" kube-proxy 2>/dev/null || true; done
}

# BIND9 serving $DNS_ZONE on 127.0.0.1:$BIND_PORT, updated only with the TSIG key $TSIG_KEY (made once,
# kept in $STATE/tsig.key). No recursion, no control channel (rndc), nothing outside $STATE. The zone is
# written anew (and its journal dropped) whenever named starts: ExternalDNS puts back what the
# DNSEndpoints in the cluster still ask for at its first sync.
bind_config() {
  local bind="$STATE/bind"
  mkdir -p "$bind"
  if [ ! -s "$STATE/tsig.key" ]; then
    tsig-keygen -a hmac-sha256 "$TSIG_KEY" >"$STATE/tsig.key.tmp"
    chmod 0600 "$STATE/tsig.key.tmp"
    mv "$STATE/tsig.key.tmp" "$STATE/tsig.key"
  fi
  rm -f "$bind/$DNS_ZONE.zone.jnl"
  cat >"$bind/$DNS_ZONE.zone" <<EOF
\$TTL 30
@   IN SOA ns.$DNS_ZONE. hostmaster.$DNS_ZONE. (1 60 30 600 5)
@   IN NS  ns.$DNS_ZONE.
ns  IN A   127.0.0.1
EOF
  cat >"$STATE/named.conf" <<EOF
include "$STATE/tsig.key";
options {
    directory "$bind";
    pid-file "$bind/named.pid";
    session-keyfile "$bind/session.key";
    managed-keys-directory "$bind";
    dump-file "$bind/named_dump.db";
    statistics-file "$bind/named.stats";
    listen-on port $BIND_PORT { 127.0.0.1; };
    listen-on-v6 { none; };
    recursion no;
    dnssec-validation no;
    notify no;
};
controls { };
zone "$DNS_ZONE" {
    type primary;
    file "$bind/$DNS_ZONE.zone";
    allow-update { key $TSIG_KEY; };
    allow-transfer { key $TSIG_KEY; };
};
EOF
}

tsig_secret() { sed -n 's/^[[:space:]]*secret "\(.*\)";$/\1/p' "$STATE/tsig.key"; }

bind_ready() {
  [ -n "$(dig @127.0.0.1 -p "$BIND_PORT" +short +time=1 +tries=1 "$DNS_ZONE" SOA)" ]
}

start_bind() {
  if ! alive named; then
    stop_one external-dns # a fresh zone: its readiness has to mean a sync with this one
    bind_config
  fi
  launch named named -g -c "$STATE/named.conf"
  wait_until named 20 bind_ready
}

# ExternalDNS's DNSEndpoint CRD, and its user: it reads DNSEndpoints and writes only their status.
external_dns_objects() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$EXTERNAL_DNS_HOME/crds" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$EXTERNAL_DNS_HOME/crds" >/dev/null
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "capi-lb-harness:external-dns"}
rules:
- {apiGroups: [externaldns.k8s.io], resources: [dnsendpoints], verbs: [get, list, watch]}
- {apiGroups: [externaldns.k8s.io], resources: [dnsendpoints/status], verbs: [update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "capi-lb-harness:external-dns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "capi-lb-harness:external-dns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "capi-lb-harness:external-dns"}
EOF
}

# Ready once it has synced with BIND (read the DNSEndpoints, transferred the zone) at least once.
external_dns_ready() {
  local metrics
  [ "$(curl -fsS "http://127.0.0.1:$EXTERNAL_DNS_PORT/healthz")" = OK ] \
    && metrics="$(curl -fsS "http://127.0.0.1:$EXTERNAL_DNS_PORT/metrics")" \
    && [[ $metrics =~ (^|$'\n')external_dns_controller_last_sync_timestamp_seconds\ [1-9] ]]
}

# Every flag can also come from an EXTERNAL_DNS_* variable, so it runs with an empty environment
# (and gets the TSIG secret that way, not on its command line).
start_external_dns() {
  external_dns_objects
  launch external-dns env -i PATH=/usr/bin:/bin HOME="$STATE" \
    EXTERNAL_DNS_RFC2136_TSIG_SECRET="$(tsig_secret)" \
    "$EXTERNAL_DNS_HOME/bin/external-dns" --kubeconfig="$STATE/external-dns.kubeconfig" \
    --source=crd --crd-source-apiversion=externaldns.k8s.io/v1alpha1 --crd-source-kind=DNSEndpoint \
    --provider=rfc2136 --rfc2136-host=127.0.0.1 --rfc2136-port="$BIND_PORT" --rfc2136-zone="$DNS_ZONE" \
    --rfc2136-tsig-keyname="$TSIG_KEY" --rfc2136-tsig-secret-alg=hmac-sha256 --rfc2136-axfr \
    --policy=sync --registry=txt --txt-owner-id=capi-lb-harness --domain-filter="$DNS_ZONE" \
    --interval="${EXTERNAL_DNS_INTERVAL}s" --metrics-address="127.0.0.1:$EXTERNAL_DNS_PORT" --log-level=info
  wait_until external-dns 30 external_dns_ready
}

# Cluster API's CRDs as `clusterctl init` installs a release: the bases plus the conversion webhook
# its kustomize patches add (here at a loopback URL), so a v1beta1 read is converted by CAPI itself,
# and the labels clusterctl puts on every component of a provider (`clusterctl move` only moves
# kinds whose CRD carries clusterctl.cluster.x-k8s.io).
capi_crds() {
  local dir="$STATE/cluster-api/crds" ca f
  ca="$(base64 -w0 <"$PKI/ca.crt")"
  rm -rf "$dir"
  mkdir -p "$dir"
  for f in "$CAPI_HOME"/crds/*.yaml; do
    awk -v url="https://127.0.0.1:$CAPI_WEBHOOK_PORT/convert" -v ca="$ca" '
      { print }
      /^metadata:$/ && !labelled {
        print "  labels:\n    clusterctl.cluster.x-k8s.io: \"\"\n    cluster.x-k8s.io/provider: cluster-api"
        labelled = 1
      }
      /^spec:$/ && !done {
        print "  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [\"v1\"]"
        print "      clientConfig:\n        url: " url "\n        caBundle: " ca
        done = 1
      }' "$f" >"$dir/$(basename "$f")"
  done
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f "$dir" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$dir" >/dev/null
}

# label_crds PROVIDER LABELS FILE...: copy each CRD into $STATE/capi-providers with clusterctl's labels
# for PROVIDER (clusterctl.cluster.x-k8s.io, cluster.x-k8s.io/provider) and the contract LABELS (one
# `key: value` a line) added to its metadata.
label_crds() {
  local provider="$1" labels="$2" f; shift 2
  for f in "$@"; do
    [ -s "$f" ] || die "$f: missing (set KAMAJI_CRDS_DIR / KUBEDC_CRDS_DIR, or run $0 install)"
    ! grep -q '^  labels:$' "$f" || die "$f: has labels of its own, which label_crds would duplicate"
    awk -v provider="$provider" -v labels="$labels" '
      { print }
      /^metadata:$/ && !labelled {
        print "  labels:\n    clusterctl.cluster.x-k8s.io: \"\"\n    cluster.x-k8s.io/provider: " provider
        n = split(labels, l, "\n")
        for (i = 1; i <= n; i++) if (l[i] != "") print "    " l[i]
        labelled = 1
      }' "$f" >"$STATE/capi-providers/$provider.$(basename "$f")"
  done
}

# The CRDs the cluster templates (templates/) use, as `clusterctl init --bootstrap kubeadm
# --control-plane kubeadm,kamaji --infrastructure docker,openstack,kubevirt` leaves them (each
# provider's CRDs with its contract labels, which Cluster API needs to follow a reference to its kinds,
# and clusterctl's labels), but without the conversion webhooks their releases add: no provider runs
# here, so objects are written and read in the version the templates use. Plus Kamaji's
# TenantControlPlane and kube-dc's EIp and FIp as they are (not Cluster API providers). No controller
# of any of them runs: tests act for them where they need to. Main instance only.
template_provider_crds() {
  local dir="$STATE/capi-providers" name module version path
  rm -rf "$dir"
  mkdir -p "$dir"
  while read -r name module version path; do
    label_crds "$name" "$(cat "$PROVIDERS_HOME/$name-$version/contract-labels")" "$PROVIDERS_HOME/$name-$version"/crds/*.yaml
  done <<<"$TEMPLATE_PROVIDERS"
  label_crds control-plane-kamaji "$KAMAJI_CONTRACT_LABEL" "$KAMAJI_CRDS/controlplane.cluster.x-k8s.io_kamajicontrolplanes.yaml"
  cp "$KAMAJI_CRDS/kamaji.clastix.io_tenantcontrolplanes.yaml" "$KUBEDC_CRDS/kube-dc.com_eips.yaml" \
    "$KUBEDC_CRDS/kube-dc.com_fips.yaml" "$dir/"
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f "$dir" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$dir" >/dev/null
}

# CAPI's ClusterRole (joined to the aggregated one, as in a release) and the aggregated ClusterRole,
# bound to the harness user capi-lb-harness:capi-manager. Providers add rules for their kinds with
# ClusterRoles labelled cluster.x-k8s.io/aggregate-to-manager, as they would in a real cluster.
capi_rbac() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$CAPI_HOME/rbac/role.yaml" -f "$CAPI_HOME/rbac/aggregated_role.yaml" >/dev/null
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "capi-lb-harness:capi-manager"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: aggregated-manager-role}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "capi-lb-harness:capi-manager"}
EOF
}

# CAPI's validating and mutating webhook configurations (named as a release names them), calling the
# manager at https://127.0.0.1:$CAPI_WEBHOOK_PORT/<path> instead of its Service.
capi_webhooks() {
  local ca
  ca="$(base64 -w0 <"$PKI/ca.crt")"
  awk -v url="https://127.0.0.1:$CAPI_WEBHOOK_PORT" -v ca="$ca" '
    /^  name: (mutating|validating)-webhook-configuration$/ { sub(/name: /, "name: capi-") }
    /^    service:$/ { service = 1; next }
    service && /^      (name|namespace):/ { next }
    service && /^      path:/ { print "    url: " url $2; print "    caBundle: " ca; service = 0; next }
    { print }' "$CAPI_HOME/webhook/manifests.yaml" >"$STATE/cluster-api/webhooks.yaml"
  grep -q 'service:' "$STATE/cluster-api/webhooks.yaml" && die "$CAPI_HOME/webhook/manifests.yaml: a webhook kept its Service"
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$STATE/cluster-api/webhooks.yaml" >/dev/null
}

capi_healthy() { [ "$(curl -fsS "http://127.0.0.1:$CAPI_HEALTH_PORT/readyz")" = ok ]; }

# The apiserver reaches the webhooks: a dry-run Cluster without any reference is refused by CAPI's
# validation (the schema alone accepts it).
capi_webhooks_served() {
  local out
  out="$(kubectl_admin -n default create --dry-run=server -f - 2>&1 <<EOF
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: capi-lb-harness-webhook-check}
spec: {paused: true}
EOF
)" && return 1
  [[ $out == *"one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set"* ]]
}

# The Cluster API core manager: every controller of a release (MachinePool on, as released; no
# ClusterTopology or RuntimeSDK), watching all namespaces, without leader election, as its own user.
start_cluster_api() {
  local began=$SECONDS
  mkdir -p "$STATE/cluster-api/certs"
  cp "$PKI/capi-webhook.crt" "$STATE/cluster-api/certs/tls.crt"
  cp "$PKI/capi-webhook.key" "$STATE/cluster-api/certs/tls.key"
  capi_crds
  capi_rbac
  launch cluster-api-manager "$CAPI_HOME/bin/cluster-api-manager" \
    --kubeconfig="$STATE/capi-manager.kubeconfig" --leader-elect=false \
    --webhook-port="$CAPI_WEBHOOK_PORT" --webhook-cert-dir="$STATE/cluster-api/certs" \
    --health-addr="127.0.0.1:$CAPI_HEALTH_PORT" \
    --diagnostics-address="127.0.0.1:$CAPI_DIAGNOSTICS_PORT" --insecure-diagnostics \
    --feature-gates=MachinePool=true,ClusterTopology=false,RuntimeSDK=false
  wait_until cluster-api-manager 60 capi_healthy
  capi_webhooks
  wait_until cluster-api-manager 30 capi_webhooks_served
  log "Cluster API $CAPI_VERSION manager and webhooks up in $((SECONDS - began)) s"
}

# The clusterctl inventory as `clusterctl init` leaves it: its CRD and one Provider per installed
# provider, in the provider's namespace, with the labels clusterctl gives it. `clusterctl move`
# compares the two clusters' inventories (a provider of the source missing or older in the target
# stops it) and also moves Secrets from an infrastructure provider's namespace when something being
# moved owns them. capi-lb is entered as infrastructure provider "capi-lb" (instance
# infrastructure-capi-lb) at the workspace version.
clusterctl_inventory() {
  local crd="$CAPI_HOME/clusterctl/clusterctl-api.yaml" capi_lb_version
  capi_lb_version="v$(sed -n '/^\[workspace.package\]$/,/^\[/ s/^version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml")"
  [ "$capi_lb_version" != v ] || die "$REPO/Cargo.toml: no [workspace.package] version"
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f "$crd" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$crd" >/dev/null
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: capi-system}
---
apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Provider
metadata:
  name: cluster-api
  namespace: capi-system
  labels: {clusterctl.cluster.x-k8s.io: "", cluster.x-k8s.io/provider: cluster-api}
type: CoreProvider
providerName: cluster-api
version: $CAPI_VERSION
EOF
  # The fresh instance's inventory has Cluster API alone: clusterctl installs capi-lb there.
  if [ "$INSTANCE" = fresh ]; then
    cert_manager_api
    return 0
  fi
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Provider
metadata:
  name: infrastructure-capi-lb
  namespace: capi-lb-system
  labels: {clusterctl.cluster.x-k8s.io: "", cluster.x-k8s.io/provider: infrastructure-capi-lb}
type: InfrastructureProvider
providerName: capi-lb
version: $capi_lb_version
EOF
}

# cert-manager's API as far as `clusterctl init` looks at it (its readiness check creates an Issuer
# and a Certificate in cert-manager.io/v1 and deletes them): the two CRDs, without a schema. No
# cert-manager runs; nothing capi-lb installs uses it.
cert_manager_api() {
  local kind plural singular
  for kind in Issuer Certificate; do
    singular="$(printf '%s' "$kind" | tr '[:upper:]' '[:lower:]')"
    plural="${singular}s"
    kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $plural.cert-manager.io
  labels: {capi-lb-harness/stand-in: cert-manager}
spec:
  group: cert-manager.io
  names: {kind: $kind, listKind: ${kind}List, plural: $plural, singular: $singular}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
EOF
  done
  kubectl_admin wait --for=condition=Established --timeout=30s crd/issuers.cert-manager.io crd/certificates.cert-manager.io >/dev/null
}

# The legacy instance's Cluster API CRDs, as released (no conversion webhook to call: they serve one
# version).
legacy_capi_crds() {
  kubectl_admin apply --server-side --force-conflicts --field-manager=capi-lb-harness \
    -f "$LEGACY_CAPI_HOME/crds" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=30s -f "$LEGACY_CAPI_HOME/crds" >/dev/null
}

write_env() {
  if [ "$INSTANCE" = legacy ]; then
    # Distinct keys, like the target's.
    cat >"$STATE/env.tmp" <<EOF
CAPI_LB_E2E_LEGACY_KUBECONFIG=$STATE/admin.kubeconfig
CAPI_LB_E2E_LEGACY_CONTROLLER_KUBECONFIG=$STATE/controller.kubeconfig
CAPI_LB_E2E_LEGACY_KUBECTL=$KUBECTL
CAPI_LB_E2E_LEGACY_KUBERNETES_VERSION=$K8S_VERSION
CAPI_LB_E2E_LEGACY_CAPI_VERSION=$LEGACY_CAPI_VERSION
EOF
    mv "$STATE/env.tmp" "$STATE/env"
    return
  fi
  if [ "$INSTANCE" = fresh ]; then
    cat >"$STATE/env.tmp" <<EOF
CAPI_LB_E2E_FRESH_KUBECONFIG=$STATE/admin.kubeconfig
CAPI_LB_E2E_FRESH_KUBERNETES_VERSION=$INSTANCE_K8S_VERSION
CAPI_LB_E2E_FRESH_CAPI_VERSION=$CAPI_VERSION
EOF
    mv "$STATE/env.tmp" "$STATE/env"
    return
  fi
  if [ "$INSTANCE" = target ]; then
    # Distinct keys: a test reads this env beside the first instance's.
    cat >"$STATE/env.tmp" <<EOF
CAPI_LB_E2E_TARGET_KUBECONFIG=$STATE/admin.kubeconfig
CAPI_LB_E2E_TARGET_CONTROLLER_KUBECONFIG=$STATE/controller.kubeconfig
CAPI_LB_E2E_TARGET_KUBERNETES_VERSION=$K8S_VERSION
CAPI_LB_E2E_TARGET_CAPI_VERSION=$CAPI_VERSION
EOF
    mv "$STATE/env.tmp" "$STATE/env"
    return
  fi
  cat >"$STATE/env.tmp" <<EOF
KUBECONFIG=$STATE/admin.kubeconfig
CAPI_LB_E2E_CONTROLLER_KUBECONFIG=$STATE/controller.kubeconfig
CAPI_LB_E2E_DNS=127.0.0.1:$DNS_PORT
CAPI_LB_E2E_DNS_ZONE=$DNS_ZONE
CAPI_LB_E2E_BIND=127.0.0.1:$BIND_PORT
CAPI_LB_E2E_BIND_TSIG_KEY=$STATE/tsig.key
CAPI_LB_E2E_EXTERNAL_DNS_VERSION=$EXTERNAL_DNS_VERSION
CAPI_LB_E2E_EXTERNAL_DNS_INTERVAL=$EXTERNAL_DNS_INTERVAL
CAPI_LB_E2E_KUBECTL=$KUBECTL
CAPI_LB_E2E_KUBERNETES_VERSION=$K8S_VERSION
CAPI_LB_E2E_METALLB_CLASS=$METALLB_CLASS
CAPI_LB_E2E_METALLB_POOL=$METALLB_POOL
CAPI_LB_E2E_METALLB_NAMESPACE=$METALLB_NAMESPACE
CAPI_LB_E2E_METALLB_VERSION=$METALLB_VERSION
CAPI_LB_E2E_CAPI_VERSION=$CAPI_VERSION
CAPI_LB_E2E_CLUSTERCTL=$CLUSTERCTL
EOF
  if [ "$KUBE_PROXY" = on ]; then
    cat >>"$STATE/env.tmp" <<EOF
CAPI_LB_E2E_DATA_PLANE_RANGE=$DATA_PLANE_RANGE
CAPI_LB_E2E_ETCD_BINARY=$ETCD_BIN/etcd
CAPI_LB_E2E_KUBE_APISERVER=$K8S_BIN/kube-apiserver
EOF
  fi
  mv "$STATE/env.tmp" "$STATE/env"
}

running() {
  local c
  for c in $COMPONENTS; do alive "$c" || return 1; done
  [ -s "$STATE/env" ] && ready "$SERVER/readyz"
}

cmd_start() {
  if running; then
    # An instance started by an older harness gains the templates' provider CRDs (idempotent).
    if [ "$INSTANCE" = main ]; then
      template_providers_installed || die "the templates' provider CRDs are not installed: run $0 install"
      template_provider_crds
    fi
    cat "$STATE/env"
    return
  fi
  installed || die "not installed: run $0 install first$([ "$INSTANCE" != fresh ] || echo ", then $SELF install")"
  local began=$SECONDS
  mkdir -p "$STATE"
  rm -f "$STATE/env"
  pki
  kubeconfig "$STATE/admin.kubeconfig" admin
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/capi-manager.kubeconfig" capi-manager
  start_etcd
  start_apiserver
  start_controller_manager
  bootstrap_objects
  if [ "$INSTANCE" = main ]; then
    kubeconfig "$STATE/coredns.kubeconfig" coredns
    kubeconfig "$STATE/metallb-controller.kubeconfig" metallb-controller
    kubeconfig "$STATE/external-dns.kubeconfig" external-dns
    start_coredns
    start_metallb
    start_bind
    start_external_dns
    if [ "$KUBE_PROXY" = on ]; then
      kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy
      start_kube_proxy
    fi
  fi
  if [ "$INSTANCE" = legacy ]; then
    legacy_capi_crds
  else
    start_cluster_api
    clusterctl_inventory
  fi
  if [ "$INSTANCE" = main ]; then template_provider_crds; fi
  write_env
  log "Kubernetes $INSTANCE_K8S_VERSION ($INSTANCE instance) up at $SERVER in $((SECONDS - began)) s (state in $STATE)"
  cat "$STATE/env"
}

# --- stop --------------------------------------------------------------------------------------

stop_one() {
  local name="$1" pid
  [ -e "$STATE/$name.pid" ] || return 0
  if pid="$(pid_of "$name")"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/$name.pid"
}

cmd_stop() {
  rm -f "$STATE/env"
  # Every component either instance may run (a missing pid file is nothing to stop).
  for name in cluster-api-manager kube-proxy external-dns named metallb-controller coredns kube-controller-manager kube-apiserver etcd; do stop_one "$name"; done
  if [ "$INSTANCE" = main ] && [ "$KUBE_PROXY" = on ]; then kube_proxy_cleanup; fi
  # Anything still running from this state folder (a pid file lost by hand) goes too.
  pkill -KILL -f -- "$STATE/" 2>/dev/null || true
  log "stopped"
}

# An outage of the control plane: the apiserver and its etcd go, everything else stays.
cmd_apiserver_stop() {
  stop_one kube-apiserver
  stop_one etcd
  log "kube-apiserver and etcd stopped ($INSTANCE instance)"
}

# A write (so that the revision moves past every watcher's) and a compaction of everything before it,
# through etcd's JSON gateway.
etcd_compact() {
  local url="http://127.0.0.1:$ETCD_PORT" revision
  # The key is /capi-lb-harness/compact, base64.
  revision="$(curl -fsS -X POST "$url/v3/kv/put" -d '{"key": "L2NhcGktbGItaGFybmVzcy9jb21wYWN0", "value": "eA=="}' |
    sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')"
  [ -n "$revision" ] || die "etcd gave no revision"
  curl -fsS -X POST "$url/v3/kv/compaction" -d "{\"revision\": \"$revision\", \"physical\": true}" >/dev/null
  log "etcd compacted at revision $revision"
}

cmd_apiserver_start() {
  installed || die "not installed: run $0 install first"
  start_etcd
  if [ "${1:-}" = --compact ]; then etcd_compact; fi
  start_apiserver
  log "kube-apiserver and etcd started again ($INSTANCE instance)"
}

cmd_clean() {
  cmd_stop
  rm -rf "$STATE"
}

case "$INSTANCE:${1:-}" in
  main:install) with_lock cmd_install ;;
  fresh:install) with_lock cmd_install_fresh ;;
  *:start) with_lock cmd_start ;;
  *:stop) with_lock cmd_stop ;;
  *:clean) with_lock cmd_clean ;;
  *:apiserver-stop) with_lock cmd_apiserver_stop ;;
  *:apiserver-start) with_lock cmd_apiserver_start "${2:-}" ;;
  *:env) if [ -s "$STATE/env" ] && running; then cat "$STATE/env"; else die "not running: run $SELF start"; fi ;;
  *) echo "usage: $0 install|start|stop|clean|env|apiserver-stop|apiserver-start, or $0 target|legacy|fresh ACTION" >&2; exit 2 ;;
esac
