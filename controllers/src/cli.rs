//! The command line of the `capi-lb` binary (`run`, `crds`, `manifests`, `simulate`) as clap types,
//! in the library so that tests can read every subcommand's flags (`clap::CommandFactory`) and check
//! the command lines the documentation shows. The binary (`main.rs`) acts on what is parsed.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::run::RunOptions;

/// `capi-lb`: its global flags and a subcommand.
#[derive(Parser, Debug)]
#[command(
    name = "capi-lb",
    version,
    about = "Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "CAPI_LB_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
        /// Manifest files (LoadBalancers, InMemoryLoadBalancers, Machines, Clusters, Services).
        /// Without any, the embedded quickstart is used.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// Exit with status 2 when a LoadBalancer is not Ready at the end.
        #[arg(long)]
        expect_ready: bool,
    },
}
