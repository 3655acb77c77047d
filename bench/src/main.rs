//! `capi-lb-bench`: the benchmarks of `docs/benchmarks.md`. `external-endpoints` (the default)
//! runs in an in-memory cluster; `converge` and `ext-propagation` run against a real cluster
//! (default: the harness of `tests/k8s/harness.sh`) with the `capi-lb` binary as a child process.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    name = "capi-lb-bench",
    version,
    about = "The benchmarks of capi-lb (docs/benchmarks.md)"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Option<Scenario>,
}

#[derive(Subcommand, Debug)]
enum Scenario {
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
}

#[derive(clap::Args, Debug)]
struct ClusterArgs {
    /// Admin kubeconfig of the cluster [default: the harness's, $CAPI_LB_K8S_STATE or
    /// /tmp/capi-lb-k8s, /admin.kubeconfig].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The controller's kubeconfig [default: the harness's controller.kubeconfig when
    /// --kubeconfig is not given; else --kubeconfig].
    #[arg(long)]
    controller_kubeconfig: Option<PathBuf>,
    /// A CRD file to apply first (e.g. Cluster API's Machine and Cluster CRDs); repeatable.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// An extra argument of `capi-lb run` (e.g. --controller-arg=--concurrency=8); repeatable.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    controller_args: Vec<String>,
    /// Where the controller's log goes.
    #[arg(long, default_value = "/tmp/capi-lb-bench-controller.log")]
    controller_log: PathBuf,
    /// Keep the namespace and its objects.
    #[arg(long)]
    keep: bool,
    /// The `capi-lb` binary to run as the controller [default: `capi-lb` beside this binary, as
    /// cargo builds them].
    #[arg(long)]
    controller_binary: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ConvergeArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// LoadBalancers (comma-separated list: one run each).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    loadbalancers: Vec<usize>,
    /// Machines per LoadBalancer.
    #[arg(long, default_value_t = 3)]
    machines: usize,
    /// Requests in flight while creating.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    parallel: u16,
    /// The idle window after convergence, in seconds.
    #[arg(long, default_value_t = 15)]
    idle_seconds: u64,
    /// Give up waiting for convergence after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
    /// Skip the warm restart.
    #[arg(long)]
    no_restart: bool,
    /// Exit with status 3 when convergence took more reconciles per LoadBalancer than this.
    #[arg(long)]
    max_reconciles_per_loadbalancer: Option<f64>,
    /// Exit with status 3 when the controller wrote anything while idle or after the warm
    /// restart.
    #[arg(long)]
    fail_on_idle_writes: bool,
}
#[derive(clap::Args, Debug)]
struct PropagationArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// LoadBalancer Services (comma-separated list: one run each).
    #[arg(long, value_delimiter = ',', default_value = "100")]
    services: Vec<usize>,
    /// IP changes measured per run, one at a time.
    #[arg(long, default_value_t = 500)]
    changes: usize,
    /// Give up on a change (or the initial publish) after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout_seconds: u64,
}

fn harness_state() -> PathBuf {
    std::env::var_os("CAPI_LB_K8S_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/capi-lb-k8s"))
}

async fn run(scenario: Option<Scenario>) -> ExitCode {
    match scenario.unwrap_or(Scenario::ExternalEndpoints {
        services: vec![100, 1000, 5000],
        changes: 500,
    }) {
        Scenario::ExternalEndpoints { services, changes } => {
            bench_external(&services, changes).await
        }
        Scenario::Converge(args) => bench_converge(*args).await,
        Scenario::ExtPropagation(args) => bench_propagation(*args).await,
    }
}

/// The cluster and the controller of a benchmark against a real cluster.
/// `None` (said on stderr) when the controller's binary cannot be found.
fn launch(args: &ClusterArgs) -> Option<capi_lb_bench::launch::Launch> {
    let controller = match &args.controller_binary {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| eprintln!("capi-lb-bench: cannot find its own binary: {e}"))
            .ok()?
            .with_file_name("capi-lb"),
    };
    if !controller.is_file() {
        eprintln!(
            "capi-lb-bench: the controller {} does not exist: build it (cargo build --release -p capi-lb) or name it with --controller-binary",
            controller.display()
        );
        return None;
    }
    let harness = args.kubeconfig.is_none();
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| harness_state().join("admin.kubeconfig"));
    let controller_kubeconfig = args.controller_kubeconfig.clone().or_else(|| {
        let path = harness_state().join("controller.kubeconfig");
        (harness && path.exists()).then_some(path)
    });
    Some(capi_lb_bench::launch::Launch {
        kubeconfig,
        controller_kubeconfig,
        controller,
        controller_args: args.controller_args.clone(),
        controller_log: args.controller_log.clone(),
        crds: args.crds.clone(),
        keep: args.keep,
    })
}

async fn bench_propagation(args: PropagationArgs) -> ExitCode {
    let Some(launch) = launch(&args.cluster) else {
        return ExitCode::FAILURE;
    };
    print!("{}", capi_lb_bench::propagation::HEADER);
    for n in args.services {
        let options = capi_lb_bench::propagation::Options {
            launch: launch.clone(),
            services: n,
            changes: args.changes,
            timeout: std::time::Duration::from_secs(args.timeout_seconds),
        };
        match capi_lb_bench::propagation::run(&options).await {
            Ok(report) => print!("{}", capi_lb_bench::propagation::render(&report)),
            Err(e) => {
                eprintln!("capi-lb-bench ext-propagation: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

async fn bench_converge(args: ConvergeArgs) -> ExitCode {
    let Some(launch) = launch(&args.cluster) else {
        return ExitCode::FAILURE;
    };
    let mut status = ExitCode::SUCCESS;
    for n in args.loadbalancers {
        let options = capi_lb_bench::converge::Options {
            launch: launch.clone(),
            loadbalancers: n,
            machines: args.machines,
            parallel: usize::from(args.parallel),
            idle: std::time::Duration::from_secs(args.idle_seconds),
            timeout: std::time::Duration::from_secs(args.timeout_seconds),
            restart: !args.no_restart,
        };
        let report = match capi_lb_bench::converge::run(&options).await {
            Ok(report) => report,
            Err(e) => {
                eprintln!("capi-lb-bench converge: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!("{}", capi_lb_bench::converge::render(&report));
        if let Some(Err(e)) = &report.cleanup {
            eprintln!("capi-lb-bench converge: cleanup: {e}");
            status = ExitCode::FAILURE;
        }
        let per_lb = report.converge.reconciles / n.max(1) as f64;
        if let Some(max) = args.max_reconciles_per_loadbalancer
            && per_lb > max
        {
            eprintln!(
                "capi-lb-bench converge: {per_lb:.2} reconciles per LoadBalancer, more than {max}"
            );
            status = ExitCode::from(3);
        }
        let restart_writes = report.restart.as_ref().map_or(0.0, |r| r.counts.writes());
        if args.fail_on_idle_writes && (report.idle.writes() > 0.0 || restart_writes > 0.0) {
            eprintln!(
                "capi-lb-bench converge: {} writes while idle, {restart_writes} after the warm restart",
                report.idle.writes()
            );
            status = ExitCode::from(3);
        }
    }
    status
}

async fn bench_external(services: &[usize], changes: usize) -> ExitCode {
    println!(
        "| Services | changes | median | p99 | max | writes/change | events/change | reads/change | initial publish |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in services {
        match capi_lb_bench::external::external_endpoints(n, changes).await {
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
                eprintln!("capi-lb-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    run(cli.scenario).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
