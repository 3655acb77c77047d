//! `capi-lb-bench`: the benchmarks of `docs/benchmarks.md`. `external-endpoints` (the default)
//! runs in an in-memory cluster; `converge` and `ext-propagation` run against a real cluster
//! (default: the harness of `tests/k8s/harness.sh`) with the `capi-lb` binary as a child process.

use std::path::PathBuf;
use std::process::ExitCode;

use capi_lb_bench::cli::{
    CapiArgs, Cli, ClusterArgs, ConvergeArgs, PropagationArgs, RolloutArgs, Scenario,
};
use clap::Parser;
use tracing_subscriber::EnvFilter;

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
        Scenario::Capi(args) => bench_capi(*args).await,
        Scenario::WriteCost(args) => bench_write_cost(*args).await,
        Scenario::Rollout(args) => bench_rollout(*args).await,
    }
}

/// KEY=VALUE lines the harness wrote beside its kubeconfigs (`tests/k8s/harness.sh env`).
fn harness_env() -> std::collections::BTreeMap<String, String> {
    std::fs::read_to_string(harness_state().join("env"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

async fn bench_rollout(args: RolloutArgs) -> ExitCode {
    use capi_lb_bench::rollout;
    use std::time::Duration;
    let Some(launch) = launch(&args.cluster) else {
        return ExitCode::FAILURE;
    };
    let env = harness_env();
    let from_env = |key: &str| {
        env.get(key).cloned().ok_or_else(|| {
            format!("no {key} in the harness's env ({}/env): give the flag, or start tests/k8s/harness.sh with its data plane", harness_state().display())
        })
    };
    let settings = (|| -> Result<_, String> {
        let range = match args.range {
            Some(r) => r,
            None => from_env("CAPI_LB_E2E_DATA_PLANE_RANGE")?
                .parse()
                .map_err(|e| format!("CAPI_LB_E2E_DATA_PLANE_RANGE: {e}"))?,
        };
        let kube_apiserver = match &args.kube_apiserver {
            Some(p) => p.clone(),
            None => from_env("CAPI_LB_E2E_KUBE_APISERVER")?.into(),
        };
        let etcd = match &args.etcd {
            Some(p) => p.clone(),
            None => from_env("CAPI_LB_E2E_ETCD_BINARY")?.into(),
        };
        let dns = match args.dns {
            Some(d) => d,
            None => from_env("CAPI_LB_E2E_DNS")?
                .parse()
                .map_err(|e| format!("CAPI_LB_E2E_DNS: {e}"))?,
        };
        let provider = match args.provider.as_str() {
            "service" => rollout::Provider::Service {
                class: match &args.service_class {
                    Some(c) => c.clone(),
                    None => from_env("CAPI_LB_E2E_METALLB_CLASS")?,
                },
            },
            "dns" => rollout::Provider::Dns {
                zone: from_env("CAPI_LB_E2E_DNS_ZONE")?,
                server: from_env("CAPI_LB_E2E_BIND")?
                    .parse()
                    .map_err(|e| format!("CAPI_LB_E2E_BIND: {e}"))?,
            },
            other => return Err(format!("--provider {other}: service or dns")),
        };
        Ok((range, kube_apiserver, etcd, dns, provider))
    })();
    let (range, kube_apiserver, etcd, dns, provider) = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("capi-lb-bench rollout: {e}");
            return ExitCode::FAILURE;
        }
    };
    let replacements = args.replacements.unwrap_or(args.machines);
    let period = args
        .target_health_period_seconds
        .or(args.failover.then_some(2));
    let target_health = match period {
        Some(period) => {
            let probe = match serde_json::from_value(serde_json::json!(args.target_health_probe)) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!(
                        "capi-lb-bench rollout: --target-health-probe {}: {e}",
                        args.target_health_probe
                    );
                    return ExitCode::FAILURE;
                }
            };
            Some(capi_lb_api::loadbalancer::TargetHealth {
                period_seconds: period,
                timeout_seconds: (period - 1).clamp(1, 2),
                failure_threshold: args.target_health_failure_threshold,
                success_threshold: 2,
                probe,
            })
        }
        None => None,
    };
    let options = rollout::Options {
        fleet: rollout::fleet::Settings {
            binary: kube_apiserver,
            etcd_binary: etcd,
            shutdown_delay: Duration::from_secs(args.shutdown_delay_seconds),
            log_dir: rollout::default_log_dir(),
        },
        addresses: rollout::addresses(range, 16, 1 + args.machines + replacements),
        machines: args.machines,
        replacements,
        clients_per_kind: args.clients,
        rate: args.rate,
        provider,
        dns,
        cluster_domain: "cluster.local".into(),
        drain_seconds: args.drain_seconds,
        settle: Duration::from_secs(args.settle_seconds),
        step_timeout: Duration::from_secs(args.step_timeout_seconds),
        unmanaged: args.unmanaged,
        target_health,
        failover: args.failover,
        black_hole: args.black_hole,
    };
    match rollout::bench(&launch, &options).await {
        Ok(report) => {
            print!("{}", rollout::render(&report));
            if args.fail_on_failed_requests && report.failed() > 0 {
                eprintln!("capi-lb-bench rollout: {} requests failed", report.failed());
                return ExitCode::from(3);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("capi-lb-bench rollout: {e}");
            ExitCode::FAILURE
        }
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

async fn bench_write_cost(args: capi_lb_bench::cli::WriteCostArgs) -> ExitCode {
    let Some(launch) = launch(&args.cluster) else {
        return ExitCode::FAILURE;
    };
    let options = capi_lb_bench::writecost::Options {
        launch,
        objects: args.objects,
        writes: args.writes,
        parallel: usize::from(args.parallel),
    };
    match capi_lb_bench::writecost::run(&options).await {
        Ok(costs) => {
            print!("{}", capi_lb_bench::writecost::render(&costs));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("capi-lb-bench write-cost: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench_capi(args: CapiArgs) -> ExitCode {
    let Some(launch) = launch(&args.cluster) else {
        return ExitCode::FAILURE;
    };
    let mut status = ExitCode::SUCCESS;
    print!("{}", capi_lb_bench::capi::HEADER);
    for n in args.clusters {
        let options = capi_lb_bench::capi::Options {
            launch: launch.clone(),
            clusters: n,
            machines: args.machines,
            parallel: usize::from(args.parallel),
            quiet: std::time::Duration::from_secs(args.quiet_seconds),
            timeout: std::time::Duration::from_secs(args.timeout_seconds),
        };
        let report = match capi_lb_bench::capi::run(&options).await {
            Ok(report) => report,
            Err(e) => {
                eprintln!("capi-lb-bench capi: {n} Clusters: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!("{}", capi_lb_bench::capi::render(&report));
        let added = (report.ratio() - 1.0) * 100.0;
        if let Some(max) = args.max_added_percent
            && added > max
        {
            eprintln!(
                "capi-lb-bench capi: capi-lb added {added:.0} % to Cluster API's time until all was in its state, more than {max} %"
            );
            status = ExitCode::from(3);
        }
    }
    status
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
        let writes = report.converge.writes() / n.max(1) as f64;
        if let Some(max) = args.max_writes_per_loadbalancer
            && writes > max
        {
            eprintln!(
                "capi-lb-bench converge: {writes:.2} writes per LoadBalancer, more than {max}"
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
