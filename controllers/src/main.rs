//! The `capi-lb` binary: `run` (the controller), `crds` (print or write the CRDs) and `simulate`
//! (run the real reconcilers offline against an in-memory API and the in-memory provider). Without a
//! command it simulates the embedded quickstart.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use capi_lb::context::{ExternalEndpoints, Policy};
use capi_lb::run::RunOptions;
use capi_lb::sim::simulate::{Options, Source};
use capi_lb_api::constants::{DEFAULT_CLUSTER_DOMAIN, DEFAULT_PUBLICATION_SUFFIX};
use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// The quickstart manifests, embedded so `capi-lb` alone can show what it does.
const QUICKSTART: &str = include_str!("../../examples/quickstart.yaml");

#[derive(Parser, Debug)]
#[command(
    name = "capi-lb",
    version,
    about = "Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPI_LB_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller against the cluster in KUBECONFIG (or the in-cluster configuration).
    Run {
        /// Watch only this namespace (default: all namespaces).
        #[arg(long, env = "CAPI_LB_NAMESPACE")]
        namespace: Option<String>,
        /// Cluster DNS domain used in published endpoint names.
        #[arg(long, default_value = DEFAULT_CLUSTER_DOMAIN, env = "CAPI_LB_CLUSTER_DOMAIN")]
        cluster_domain: String,
        /// Providers to enable (comma-separated).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "inmemory",
            env = "CAPI_LB_PROVIDERS",
            value_parser = clap::builder::PossibleValuesParser::new(capi_lb_providers::catalog::names())
        )]
        providers: Vec<String>,
        /// LoadBalancers reconciled at the same time.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
        concurrency: u16,
        /// Seconds between reconciles of an unchanged LoadBalancer (repairs drift in the cloud).
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(10..))]
        resync_seconds: u64,
        /// Publish a stable `<svc>-ext` endpoint for Services of type LoadBalancer.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "CAPI_LB_EXTERNAL_ENDPOINTS")]
        external_endpoints: bool,
        /// Which LoadBalancer Services get one when they carry no
        /// `loadbalancer.cluster.x-k8s.io/external-endpoint` annotation.
        #[arg(long, value_enum, default_value_t = Policy::All)]
        external_endpoints_policy: Policy,
        /// Default suffix of the published Service.
        #[arg(long, default_value = DEFAULT_PUBLICATION_SUFFIX)]
        external_endpoints_suffix: String,
        /// Take over `-ext` Services and Endpoints made by kube-dc's publisher (labels
        /// `kube-dc.com/managed-by=service-lb-controller`), to migrate from it.
        #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
        adopt_kube_dc: bool,
        /// Also write legacy v1 Endpoints for the `-ext` Services (for consumers that do not read
        /// EndpointSlices).
        #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
        legacy_endpoints: bool,
        /// Serve /metrics, /livez and /readyz on this address ("off" to disable).
        #[arg(
            long,
            default_value = "0.0.0.0:8080",
            env = "CAPI_LB_METRICS_BIND_ADDRESS"
        )]
        metrics_bind_address: String,
        /// Reconcile only while holding a Lease, so that several replicas can run.
        #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
        leader_elect: bool,
        /// Namespace of the leader Lease (default: the pod's namespace from POD_NAMESPACE).
        #[arg(long, env = "POD_NAMESPACE")]
        leader_election_namespace: Option<String>,
        /// Name of the leader Lease.
        #[arg(long, default_value = "capi-lb-leader")]
        leader_election_id: String,
        /// Seconds a Lease stays valid after its last renewal: the longest failover time.
        #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=300))]
        lease_duration_seconds: u64,
        /// The leader renews this many seconds before the Lease expires.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
        lease_grace_seconds: u64,
        /// Reconcile only LoadBalancers labelled cluster.x-k8s.io/watch-filter=<value> (clusterctl).
        #[arg(long, env = "CAPI_LB_WATCH_FILTER")]
        watch_filter: Option<String>,
    },
    /// Measure how fast an ingress IP change of a LoadBalancer Service reaches its `-ext`
    /// EndpointSlice, with N Services in an in-memory cluster (see docs/benchmarks.md).
    Bench {
        /// LoadBalancer Services in the cluster (comma-separated list: one run each).
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
        services: Vec<usize>,
        /// IP changes measured per run.
        #[arg(long, default_value_t = 500)]
        changes: usize,
    },
    /// Write the install manifests (CRDs, RBAC, Deployment, kustomizations, clusterctl components)
    /// under a directory, by component.
    Manifests {
        /// Where to write them (the repository keeps them in `config`).
        #[arg(long, default_value = "config")]
        output_dir: PathBuf,
    },
    /// Print the CRDs as YAML (or write them under a directory with --output-dir).
    Crds {
        /// Write `bases/<group>_<plural>.yaml` and `kustomization.yaml` here (e.g. config/crd).
        #[arg(long)]
        output_dir: Option<PathBuf>,
    },
    /// Load manifests into an in-memory API, run the real reconcilers with the in-memory provider
    /// until nothing changes, and print a timeline and the resulting objects as YAML.
    Simulate {
        /// Manifest files (LoadBalancers, InMemoryLoadBalancers, Machines, Clusters, Services).
        /// Without any, the embedded quickstart is used.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// Exit with status 2 when a LoadBalancer is not Ready at the end.
        #[arg(long)]
        expect_ready: bool,
    },
}

async fn bench(services: &[usize], changes: usize) -> ExitCode {
    println!(
        "| Services | changes | median | p99 | max | writes/change | events/change | reads/change | initial publish |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in services {
        match capi_lb::sim::bench::external_endpoints(n, changes).await {
            Ok(r) => println!(
                "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} | {:.1} | {:.1} | {:.2} s |",
                r.services,
                r.changes,
                r.median.as_secs_f64() * 1e3,
                r.p99.as_secs_f64() * 1e3,
                r.max.as_secs_f64() * 1e3,
                r.writes_per_change,
                r.events_per_change,
                r.reads_per_change,
                r.initial.as_secs_f64(),
            ),
            Err(e) => {
                eprintln!("capi-lb bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or_else(|| {
        eprintln!(
            "capi-lb: no command given, simulating the embedded quickstart (see capi-lb --help)"
        );
        Command::Simulate {
            files: Vec::new(),
            expect_ready: false,
        }
    });
    match command {
        Command::Bench { services, changes } => bench(&services, changes).await,
        Command::Run {
            namespace,
            cluster_domain,
            providers,
            concurrency,
            resync_seconds,
            external_endpoints,
            external_endpoints_policy,
            external_endpoints_suffix,
            adopt_kube_dc,
            legacy_endpoints,
            metrics_bind_address,
            leader_elect,
            leader_election_namespace,
            leader_election_id,
            lease_duration_seconds,
            lease_grace_seconds,
            watch_filter,
        } => {
            init_logging(cli.log_format, "info");
            let metrics_address = match metrics_bind_address.as_str() {
                "off" | "" | "0" => None,
                address => match address.parse() {
                    Ok(address) => Some(address),
                    Err(e) => {
                        tracing::error!("--metrics-bind-address {address:?}: {e}");
                        return ExitCode::from(2);
                    }
                },
            };
            let leader_election = if leader_elect {
                if lease_grace_seconds >= lease_duration_seconds {
                    tracing::error!(
                        "--lease-grace-seconds must be shorter than --lease-duration-seconds"
                    );
                    return ExitCode::from(2);
                }
                let Some(namespace) = leader_election_namespace else {
                    tracing::error!(
                        "--leader-elect needs --leader-election-namespace (or POD_NAMESPACE)"
                    );
                    return ExitCode::from(2);
                };
                let identity = std::env::var("POD_NAME")
                    .or_else(|_| std::env::var("HOSTNAME"))
                    .unwrap_or_else(|_| format!("capi-lb-{}", std::process::id()));
                Some(capi_lb::run::LeaderElection {
                    namespace,
                    lease_name: leader_election_id,
                    identity,
                    duration_seconds: lease_duration_seconds,
                    grace_seconds: lease_grace_seconds,
                })
            } else {
                None
            };
            let options = RunOptions {
                namespace,
                cluster_domain,
                providers,
                concurrency,
                resync: Duration::from_secs(resync_seconds),
                external: ExternalEndpoints {
                    enabled: external_endpoints,
                    policy: external_endpoints_policy,
                    suffix: external_endpoints_suffix,
                    adopt_kube_dc,
                    legacy_endpoints,
                },
                metrics_address,
                leader_election,
                watch_filter,
            };
            match capi_lb::run::run(options).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    eprintln!("capi-lb: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Manifests { output_dir } => {
            match capi_lb::install::manifests::write(&output_dir) {
                Ok(written) => {
                    for path in written {
                        eprintln!("wrote {path}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("capi-lb manifests: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crds { output_dir } => match output_dir {
            Some(dir) => match capi_lb::install::crds::write(&dir) {
                Ok(files) => {
                    for f in files {
                        eprintln!("wrote {f}");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("capi-lb crds: {e}");
                    ExitCode::FAILURE
                }
            },
            None => match capi_lb::install::crds::all_yaml() {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("capi-lb crds: {e}");
                    ExitCode::FAILURE
                }
            },
        },
        Command::Simulate {
            files,
            expect_ready,
        } => {
            // Reconciler logs would drown the report; RUST_LOG=info shows them.
            init_logging(cli.log_format, "error");
            let sources = if files.is_empty() {
                vec![Source {
                    name: "<embedded examples/quickstart.yaml>".into(),
                    text: QUICKSTART.into(),
                }]
            } else {
                match capi_lb::sim::simulate::read(&files) {
                    Ok(sources) => sources,
                    Err(e) => {
                        eprintln!("capi-lb simulate: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            };
            match capi_lb::sim::simulate::simulate(&sources, &Options { expect_ready }).await {
                Ok(simulation) => {
                    print!("{}", simulation.output);
                    if expect_ready && !simulation.not_ready.is_empty() {
                        eprintln!(
                            "capi-lb simulate: not Ready: {}",
                            simulation.not_ready.join(", ")
                        );
                        ExitCode::from(2)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("capi-lb simulate: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
