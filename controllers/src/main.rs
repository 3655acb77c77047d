//! The `capi-lb` binary: `run` (the controller), `crds` (print or write the CRDs), `manifests`
//! (write the install manifests) and `simulate` (run the real reconcilers offline against an
//! in-memory API and the in-memory provider). Without a command it simulates the embedded
//! quickstart. The benchmarks are a binary of their own, `capi-lb-bench` (the `bench` crate).

use std::path::PathBuf;
use std::process::ExitCode;

use capi_lb::run::RunOptions;
use capi_lb::sim::simulate::{Options, Source};
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
    Run(Box<RunOptions>),
    /// Write the install manifests (CRDs, RBAC, Deployment, kustomizations, clusterctl components)
    /// under a directory, by component, and the Helm chart made of the same objects.
    Manifests {
        /// Where to write them (the repository keeps them in `config`).
        #[arg(long, default_value = "config")]
        output_dir: PathBuf,
        /// Where to write the Helm chart (the repository keeps it in `charts/capi-lb`).
        #[arg(long, default_value = "charts/capi-lb")]
        chart_dir: PathBuf,
    },
    /// Print the CRDs of the shipped install as YAML (or write them under a directory with
    /// --output-dir).
    Crds {
        /// Write `bases/<group>_<plural>.yaml` and `kustomization.yaml` here (e.g. config/crd).
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// Print the in-memory provider's CRD as well (tests and demos: `run --providers
        /// inmemory`); no shipped install has it.
        #[arg(long, conflicts_with = "output_dir")]
        all: bool,
    },
    /// Load manifests into an in-memory API, run the real reconcilers with the in-memory provider
    /// until nothing changes, and print a timeline and the resulting objects as YAML.
    Simulate {
        /// Manifest files (LoadBalancers and their infrastructure objects, Machines, Clusters,
        /// Services, EndpointSlices; other projects' kinds and Secrets are taken as context) or
        /// clusterctl templates (`${VAR}` rendered from the environment and the template's
        /// defaults). Without any, the embedded quickstart is used.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// Exit with status 2 when a LoadBalancer is not Ready at the end.
        #[arg(long)]
        expect_ready: bool,
    },
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
        Command::Run(options) => {
            init_logging(cli.log_format, "info");
            run(*options).await
        }
        Command::Manifests {
            output_dir,
            chart_dir,
        } => finish("manifests", manifests(&output_dir, &chart_dir), wrote),
        Command::Crds {
            output_dir: Some(dir),
            ..
        } => finish("crds", capi_lb::install::crds::write(&dir), wrote),
        Command::Crds {
            output_dir: None,
            all,
        } => {
            let crds = if all {
                capi_lb::install::crds::all()
            } else {
                capi_lb::install::crds::shipped()
            };
            finish(
                "crds",
                capi_lb::install::crds::to_yaml_stream(&crds),
                |yaml| {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                },
            )
        }
        Command::Simulate {
            files,
            expect_ready,
        } => {
            // Reconciler logs would drown the report; RUST_LOG=info shows them.
            init_logging(cli.log_format, "error");
            simulate(&files, expect_ready).await
        }
    }
}

/// `capi-lb manifests`: `config/` and the Helm chart (whose values' comments are `run`'s help).
fn manifests(
    output_dir: &std::path::Path,
    chart_dir: &std::path::Path,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    use clap::Args;
    let mut written = capi_lb::install::manifests::write(output_dir)?;
    let run = RunOptions::augment_args(clap::Command::new("run"));
    written.extend(capi_lb::install::chart::write(chart_dir, &run)?);
    Ok(written)
}

/// `capi-lb run`: 2 for flags that contradict each other, 1 when the controller fails.
async fn run(options: RunOptions) -> ExitCode {
    if let Err(e) = options.check() {
        tracing::error!("{e}");
        eprintln!("capi-lb run: {e}");
        return ExitCode::from(2);
    }
    match capi_lb::run::run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("capi-lb: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `capi-lb simulate`: the embedded quickstart without files; 2 with `--expect-ready` when a
/// LoadBalancer is not Ready at the end.
async fn simulate(files: &[PathBuf], expect_ready: bool) -> ExitCode {
    let sources = if files.is_empty() {
        vec![Source {
            name: "<embedded examples/quickstart.yaml>".into(),
            text: QUICKSTART.into(),
        }]
    } else {
        match capi_lb::sim::simulate::read(files) {
            Ok(sources) => sources,
            Err(e) => return finish("simulate", Err(e), |()| ExitCode::SUCCESS),
        }
    };
    let options = Options {
        expect_ready,
        variables: std::env::vars().collect(),
    };
    let simulation = capi_lb::sim::simulate::simulate(&sources, &options).await;
    finish("simulate", simulation, |simulation| {
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
    })
}

/// The exit status of `command`: what `done` makes of its result, or its error on stderr.
fn finish<T, E: std::fmt::Display>(
    command: &str,
    result: Result<T, E>,
    done: impl FnOnce(T) -> ExitCode,
) -> ExitCode {
    match result {
        Ok(value) => done(value),
        Err(e) => {
            eprintln!("capi-lb {command}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Name the files written.
fn wrote(paths: Vec<String>) -> ExitCode {
    for path in paths {
        eprintln!("wrote {path}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;

    fn run(args: &[&str]) -> Result<RunOptions, clap::Error> {
        let cli = Cli::try_parse_from(["capi-lb", "run"].iter().chain(args))?;
        match cli.command {
            Some(Command::Run(options)) => Ok(*options),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_without_flags_has_the_documented_defaults() {
        let options = run(&[]).unwrap();
        let mut expected =
            RunOptions::new(vec!["kubedc".into(), "octavia".into(), "service".into()]);
        expected.metrics_address = Some("127.0.0.1:8080".parse().unwrap());
        assert_eq!(format!("{options:?}"), format!("{expected:?}"));
    }

    #[test]
    fn each_flag_fills_its_field() {
        let options = run(&[
            "--namespace=capi",
            "--providers=octavia,kubedc",
            "--resync-seconds=30",
            "--drift-check-seconds=20",
            "--provider-timeout-seconds=7",
            "--metrics-bind-address=off",
            "--health-probe-bind-address=0.0.0.0:8081",
            "--credentials-secret-label=loadbalancer.cluster.x-k8s.io/credentials=true",
            "--external-endpoints=false",
            "--external-endpoints-policy=annotated",
            "--external-endpoints-suffix=-lb",
            "--adopt-kube-dc=true",
            "--legacy-endpoints=true",
            "--leader-elect=true",
            "--leader-election-namespace=capi-lb-system",
            "--leader-election-id=lease",
            "--lease-duration-seconds=20",
            "--lease-grace-seconds=4",
            "--watch-filter=w",
            "--target-kinds=Machine.cluster.x-k8s.io,Appliance.example.com",
        ])
        .unwrap();
        assert_eq!(options.namespace.as_deref(), Some("capi"));
        assert_eq!(options.providers, ["octavia", "kubedc"]);
        assert_eq!(options.resync, Duration::from_secs(30));
        assert_eq!(options.drift_check, Duration::from_secs(20));
        assert_eq!(options.provider_timeout, Duration::from_secs(7));
        assert_eq!(options.metrics_address, None);
        assert_eq!(
            options.health_address,
            Some("0.0.0.0:8081".parse().unwrap())
        );
        let external = &options.external;
        assert!(!external.enabled && external.adopt_kube_dc && external.legacy_endpoints);
        assert_eq!(external.policy, capi_lb::context::Policy::Annotated);
        assert_eq!(external.suffix, "-lb");
        let election = &options.leader_election;
        assert_eq!(election.lease(), Ok(Some(("capi-lb-system", "lease"))));
        assert_eq!((election.duration_seconds, election.grace_seconds), (20, 4));
        assert_eq!(options.watch_filter.as_deref(), Some("w"));
        let kinds: Vec<String> = options.target_kinds.iter().map(|k| k.to_string()).collect();
        assert_eq!(kinds, ["Machine.cluster.x-k8s.io", "Appliance.example.com"]);
        assert!(options.check().is_ok());
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (flag, says) in [
            ("--resync-seconds=5", "at least 10 seconds"),
            ("--resync-seconds=soon", "not a number of seconds"),
            ("--drift-check-seconds=9", "at least 10 seconds"),
            ("--provider-timeout-seconds=0", "1 to 600 seconds"),
            (
                "--metrics-bind-address=localhost",
                "not an address and port",
            ),
            ("--concurrency=0", "--concurrency"),
            ("--target-kinds=Service", "core kinds"),
            (
                "--target-kinds=machine.cluster.x-k8s.io",
                "is not Kind.group",
            ),
        ] {
            let error = run(&[flag]).unwrap_err().to_string();
            assert!(error.contains(says), "{flag}: {error}");
            let name = flag.split('=').next().unwrap();
            assert!(error.contains(name), "{flag}: {error}");
        }
    }

    #[test]
    fn contradicting_leader_election_flags_are_refused() {
        let grace = run(&[
            "--leader-elect=true",
            "--leader-election-namespace=x",
            "--lease-duration-seconds=5",
            "--lease-grace-seconds=5",
        ])
        .unwrap();
        let error = grace.check().unwrap_err().to_string();
        assert!(
            error.contains("--lease-grace-seconds must be shorter"),
            "{error}"
        );
        // Without leader election the lease settings are not used, so they are not checked.
        let off = run(&["--lease-duration-seconds=5", "--lease-grace-seconds=5"]).unwrap();
        assert!(off.check().is_ok());
    }
}
