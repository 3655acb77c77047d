//! The command line of `capi-lb-bench` as clap types, in the library so that tests can read every
//! scenario's flags (`clap::CommandFactory`) and check the command lines the documentation shows.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `capi-lb-bench`: a scenario, `external-endpoints` without one.
#[derive(Parser, Debug)]
#[command(
    name = "capi-lb-bench",
    version,
    about = "The benchmarks of capi-lb (docs/benchmarks.md)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub scenario: Option<Scenario>,
}

#[derive(Subcommand, Debug)]
pub enum Scenario {
    /// How fast an ingress IP change of a LoadBalancer Service reaches its `-ext` EndpointSlice,
    /// with N Services in an in-memory cluster.
    ExternalEndpoints {
        /// LoadBalancer Services in the cluster (comma-separated list: one run each).
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
        services: Vec<usize>,
        /// IP changes measured per run.
        #[arg(long, default_value_t = 500)]
        changes: usize,
    },
    /// N LoadBalancers with M Machines each converging on a real cluster (default: the test
    /// harness of tests/k8s/harness.sh) under `capi-lb run --providers inmemory` started as a
    /// child process: time to Ready and to every target active, reconciles and API requests per
    /// LoadBalancer, writes while idle, a warm restart, peak memory. Installs capi-lb's CRDs (and
    /// its RBAC with --controller-kubeconfig), works in a fresh namespace and deletes it after.
    Converge(Box<ConvergeArgs>),
    /// An ingress IP change of a LoadBalancer Service reaching its `-ext` EndpointSlice on a real
    /// cluster (default: the harness), seen through a watch, with `capi-lb run` as a child
    /// process: latency percentiles, reconciles and API requests per change, peak memory.
    ExtPropagation(Box<PropagationArgs>),
    /// What capi-lb adds to a management cluster with Cluster API's own manager: N Clusters with M
    /// control-plane Machines on the benchmark's infrastructure kinds (a fake provider in the
    /// benchmark provisions them), settled first by Cluster API alone, then again with capi-lb and
    /// one LoadBalancer per Cluster: both times to settled, their ratio, the control plane's CPU in
    /// each, capi-lb's requests per LoadBalancer. Fresh namespaces, deleted after.
    Capi(Box<CapiArgs>),
    /// What one write costs kube-apiserver and etcd (CPU from /proc, through the harness's pid
    /// files beside --kubeconfig): the same change to N LoadBalancers K times with a JSON merge
    /// patch, then with server-side apply, on the metadata (an annotation) and on the status.
    WriteCost(Box<WriteCostArgs>),
    /// Requests through a control-plane load balancer while every control-plane Machine is
    /// replaced one at a time: real kube-apiservers (on the harness's data-plane range on lo) as
    /// the Machines' infrastructure, Cluster API's deletions, the Service provider on MetalLB with
    /// kube-proxy, clients with a new TLS connection per request and with one long-lived HTTP/2
    /// connection through the published `-ext` name. Requests sent and failed per client kind,
    /// the time each Machine took to leave. Needs root (the API servers bind addresses on lo).
    Rollout(Box<RolloutArgs>),
}

#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Control-plane Machines.
    #[arg(long, default_value_t = 3)]
    pub machines: usize,
    /// Machines replaced, one at a time [default: --machines].
    #[arg(long)]
    pub replacements: Option<usize>,
    /// Clients of each kind.
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Requests a second per client.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// The LoadBalancer's drainSeconds.
    #[arg(long, default_value_t = 5)]
    pub drain_seconds: i32,
    /// The API servers' --shutdown-delay-duration, in seconds.
    #[arg(long, default_value_t = 5)]
    pub shutdown_delay_seconds: u64,
    /// Seconds of load before the first replacement and after the last.
    #[arg(long, default_value_t = 5)]
    pub settle_seconds: u64,
    /// Give up on a step (a Machine active, a Machine gone) after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub step_timeout_seconds: u64,
    /// The comparison: capi-lb kept out of the deletions (the LoadBalancer paused and its hooks
    /// taken off each Machine before it is deleted).
    #[arg(long)]
    pub unmanaged: bool,
    /// The addresses on lo the run may use (etcd's, then one per Machine) [default: the
    /// harness's CAPI_LB_E2E_DATA_PLANE_RANGE from its 16th address].
    #[arg(long)]
    pub range: Option<ipnet::Ipv4Net>,
    /// kube-apiserver [default: the harness's CAPI_LB_E2E_KUBE_APISERVER].
    #[arg(long)]
    pub kube_apiserver: Option<PathBuf>,
    /// etcd [default: the harness's CAPI_LB_E2E_ETCD_BINARY].
    #[arg(long)]
    pub etcd: Option<PathBuf>,
    /// The cluster's DNS server, IP:port [default: the harness's CAPI_LB_E2E_DNS].
    #[arg(long)]
    pub dns: Option<std::net::SocketAddr>,
    /// The provider: service (MetalLB and kube-proxy) or dns (ExternalDNS into BIND, the zone and
    /// server from the harness's CAPI_LB_E2E_DNS_ZONE and CAPI_LB_E2E_BIND).
    #[arg(long, default_value = "service")]
    pub provider: String,
    /// MetalLB's loadBalancerClass [default: the harness's CAPI_LB_E2E_METALLB_CLASS].
    #[arg(long)]
    pub service_class: Option<String>,
    /// Exit with status 3 when any request failed.
    #[arg(long)]
    pub fail_on_failed_requests: bool,
    /// A stopped or killed API server's host vanishes too: its address drops every packet (an
    /// nftables table of the run's), as a deleted VM's does, instead of refusing connections.
    #[arg(long)]
    pub black_hole: bool,
    /// A failover instead of a rollout: the first Machine's API server killed without warning
    /// (SIGKILL) after the settle; how long requests fail until target health takes it out.
    /// Turns target health on.
    #[arg(long)]
    pub failover: bool,
    /// The LoadBalancer's spec.targetHealth.periodSeconds (turns target health on; with
    /// --failover alone: 2).
    #[arg(long)]
    pub target_health_period_seconds: Option<i32>,
    /// Its failureThreshold.
    #[arg(long, default_value_t = 2)]
    pub target_health_failure_threshold: i32,
    /// Its probe: Auto (HTTPS GET /readyz on the API servers' port) or TCP.
    #[arg(long, default_value = "Auto")]
    pub target_health_probe: String,
}

#[derive(clap::Args, Debug)]
pub struct CapiArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Clusters (comma-separated list: both phases for each).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub clusters: Vec<usize>,
    /// Control-plane Machines per Cluster.
    #[arg(long, default_value_t = 3)]
    pub machines: usize,
    /// Requests in flight while creating (and the fake provider's writes in flight).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: u16,
    /// No change to any Cluster, Machine or LoadBalancer for this many seconds ends a phase.
    #[arg(long, default_value_t = 10)]
    pub quiet_seconds: u64,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_seconds: u64,
    /// Exit with status 3 when capi-lb adds more than this many percent to the time Cluster API
    /// alone needs until every object is in its settled state.
    #[arg(long)]
    pub max_added_percent: Option<f64>,
}

#[derive(clap::Args, Debug)]
pub struct WriteCostArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// LoadBalancers written to.
    #[arg(long, default_value_t = 100)]
    pub objects: usize,
    /// Writes per LoadBalancer, method and target.
    #[arg(long, default_value_t = 10)]
    pub writes: usize,
    /// Writes in flight.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: u16,
}

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Admin kubeconfig of the cluster [default: the harness's, $CAPI_LB_K8S_STATE or
    /// /tmp/capi-lb-k8s, /admin.kubeconfig].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The controller's kubeconfig [default: the harness's controller.kubeconfig when
    /// --kubeconfig is not given; else --kubeconfig].
    #[arg(long)]
    pub controller_kubeconfig: Option<PathBuf>,
    /// A CRD file to apply first (e.g. Cluster API's Machine and Cluster CRDs); repeatable.
    #[arg(long = "crd")]
    pub crds: Vec<PathBuf>,
    /// An extra argument of `capi-lb run` (e.g. --controller-arg=--concurrency=8); repeatable.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    pub controller_args: Vec<String>,
    /// Where the controller's log goes.
    #[arg(long, default_value = "/tmp/capi-lb-bench-controller.log")]
    pub controller_log: PathBuf,
    /// Keep the namespace and its objects.
    #[arg(long)]
    pub keep: bool,
    /// The `capi-lb` binary to run as the controller [default: `capi-lb` beside this binary, as
    /// cargo builds them].
    #[arg(long)]
    pub controller_binary: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ConvergeArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// LoadBalancers (comma-separated list: one run each).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub loadbalancers: Vec<usize>,
    /// Machines per LoadBalancer.
    #[arg(long, default_value_t = 3)]
    pub machines: usize,
    /// Requests in flight while creating.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: u16,
    /// The idle window after convergence, in seconds.
    #[arg(long, default_value_t = 15)]
    pub idle_seconds: u64,
    /// Give up waiting for convergence after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_seconds: u64,
    /// Skip the warm restart.
    #[arg(long)]
    pub no_restart: bool,
    /// Exit with status 3 when convergence took more reconciles per LoadBalancer than this.
    #[arg(long)]
    pub max_reconciles_per_loadbalancer: Option<f64>,
    /// Exit with status 3 when convergence took more writes per LoadBalancer than this (Events
    /// included).
    #[arg(long)]
    pub max_writes_per_loadbalancer: Option<f64>,
    /// Exit with status 3 when the controller wrote anything while idle or after the warm
    /// restart.
    #[arg(long)]
    pub fail_on_idle_writes: bool,
}
#[derive(clap::Args, Debug)]
pub struct PropagationArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// LoadBalancer Services (comma-separated list: one run each).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub services: Vec<usize>,
    /// IP changes measured per run, one at a time.
    #[arg(long, default_value_t = 500)]
    pub changes: usize,
    /// Give up on a change (or the initial publish) after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
}
