//! The `capi-lb` binary: `run` (the controller), `crds` (print or write the CRDs), `manifests`
//! (write the install manifests, the Helm chart and the flag reference), `uninstall` (let capi-lb go
//! without taking the clusters' endpoints with it) and `simulate` (run the real reconcilers offline
//! against an in-memory API and the in-memory provider). Without a
//! command it simulates the embedded quickstart. The command line itself is `capi_lb::cli`. The
//! benchmarks are a binary of their own, `capi-lb-bench` (the `bench` crate).

use std::path::PathBuf;
use std::process::ExitCode;

use capi_lb::cli::{Cli, Command, LogFormat};
use capi_lb::run::RunOptions;
use capi_lb::sim::simulate::{Options, Source};
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// The quickstart manifests, embedded so `capi-lb` alone can show what it does.
const QUICKSTART: &str = include_str!("../../examples/quickstart.yaml");

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

/// The stack of each of the runtime's threads: a reconcile is a deep stack of futures (the CEL
/// evaluation of a spec at its bottom), and a stack overflow, unlike a panic, cannot be caught at a
/// boundary: it would end the process for every tenant. Tokio's default is 2 MiB.
const THREAD_STACK: usize = 8 << 20;

fn main() -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK)
        .build()
    {
        Ok(runtime) => runtime.block_on(start()),
        Err(e) => {
            eprintln!("capi-lb: no runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn start() -> ExitCode {
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
            flags_doc,
        } => finish(
            "manifests",
            manifests(&output_dir, &chart_dir, &flags_doc),
            wrote,
        ),
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
        Command::Uninstall {
            dry_run,
            force,
            lease_namespace,
            lease_name,
            namespace,
        } => {
            init_logging(cli.log_format, "warn");
            let options = capi_lb::install::uninstall::Options {
                dry_run,
                force,
                lease: (lease_namespace, lease_name),
                namespace,
            };
            uninstall(&options).await
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

/// `capi-lb manifests`: `config/`, the Helm chart (whose values' comments are `run`'s help) and
/// the flag reference (every command's help).
fn manifests(
    output_dir: &std::path::Path,
    chart_dir: &std::path::Path,
    flags_doc: &std::path::Path,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    use clap::{Args, CommandFactory};
    let mut written = capi_lb::install::manifests::write(output_dir)?;
    let run = RunOptions::augment_args(clap::Command::new("run"));
    written.extend(capi_lb::install::chart::write(chart_dir, &run)?);
    written.push(capi_lb::install::flags::write(flags_doc, &Cli::command())?);
    Ok(written)
}

/// `capi-lb uninstall`: each change on a line; 2 while the controller still runs, 1 when a change
/// failed (the others are made; run again).
async fn uninstall(options: &capi_lb::install::uninstall::Options) -> ExitCode {
    use capi_lb::install::uninstall::{UninstallError, uninstall};
    capi_lb::install_crypto_provider();
    let config = match kube::Config::infer().await {
        Ok(config) => capi_lb::run::client::bounded(config),
        Err(e) => {
            eprintln!("capi-lb uninstall: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("capi-lb uninstall: {e}");
            return ExitCode::FAILURE;
        }
    };
    let prefix = if options.dry_run { "would be: " } else { "" };
    match uninstall(client, options).await {
        Ok(report) => {
            for line in &report.changes {
                println!("{prefix}{line}");
            }
            println!("{prefix}{} change(s)", report.changes.len());
            if options.namespace.is_none() && !options.dry_run {
                println!(
                    "capi-lb's CRDs can now be deleted without taking anything else: `capi-lb crds --all | kubectl delete -f -`"
                );
            }
            ExitCode::SUCCESS
        }
        Err(e @ UninstallError::StillRunning(..)) => {
            eprintln!("capi-lb uninstall: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("capi-lb uninstall: {e}");
            ExitCode::FAILURE
        }
    }
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
