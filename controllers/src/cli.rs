//! The `capi-lb` command line as clap reads it: the global flags, the subcommands (`run`,
//! `manifests`, `crds`, `simulate`) and their flags. The binary (`main.rs`) acts on what was parsed;
//! `capi-lb manifests` renders the flag reference `docs/flags.md` from this same definition
//! ([`crate::install::flags`]), so the help texts here are the documentation.
//!
//! Boolean flags are switches: `--flag` alone means true, `--flag=true` and `--flag=false` are
//! accepted too (the only way to turn off one whose default is true), and a value must be joined
//! with `=`, so the argument after a switch is never taken as its value.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::run::RunOptions;

/// Where `capi-lb manifests` writes the flag reference by default (the repository's copy).
pub const FLAGS_DOC: &str = "docs/flags.md";

/// The `capi-lb` command line.
#[derive(Parser, Debug)]
#[command(
    name = "capi-lb",
    version,
    about = "Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints"
)]
pub struct Cli {
    /// Format of the log lines written to stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text,
        env = "CAPI_LB_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// What to do; without a command, `simulate` the embedded quickstart.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands of `capi-lb`.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller against the cluster in KUBECONFIG (or the in-cluster configuration).
    Run(Box<RunOptions>),
    /// Write the install manifests (CRDs, RBAC, Deployment, kustomizations, clusterctl components)
    /// under a directory, by component, the Helm chart made of the same objects, and this flag
    /// reference: every generated file of the repository, from the repository's root.
    Manifests {
        /// Directory to write the install manifests in, created if missing (the repository keeps
        /// them in `config`).
        #[arg(long, value_name = "DIR", default_value = "config")]
        output_dir: PathBuf,
        /// Directory to write the Helm chart in, created if missing (the repository keeps it in
        /// `charts/capi-lb`).
        #[arg(long, value_name = "DIR", default_value = "charts/capi-lb")]
        chart_dir: PathBuf,
        /// File to write the flag reference of every `capi-lb` command in, as markdown (the
        /// repository keeps it in `docs/flags.md`).
        #[arg(long, value_name = "FILE", default_value = FLAGS_DOC)]
        flags_doc: PathBuf,
    },
    /// Print the CRDs of the shipped install as YAML (or write them under a directory with
    /// --output-dir).
    Crds {
        /// Write `bases/<group>_<plural>.yaml` and `kustomization.yaml` under this directory
        /// (e.g. config/crd) instead of printing the CRDs.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Print the in-memory provider's CRD as well (tests and demos: `run --providers
        /// inmemory`); no shipped install has it.
        #[arg(
            long,
            conflicts_with = "output_dir",
            value_name = "BOOL",
            default_value_t = false,
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true",
            action = clap::ArgAction::Set
        )]
        all: bool,
    },
    /// Let capi-lb go without cutting clusters off, after its controller is removed and before its
    /// CRDs are deleted: every object capi-lb's kinds own (the Service provider's Services, kube-dc's
    /// EIps, `-ext` Services, DNSEndpoints, ...) loses that ownerReference so that deleting the CRDs
    /// keeps it, capi-lb's finalizers are removed, and Machines lose capi-lb's deletion hooks and
    /// target annotations. Nothing is deleted (docs/uninstall.md). Uses the cluster in KUBECONFIG.
    Uninstall {
        /// Say what would be changed, change nothing.
        #[arg(
            long,
            value_name = "BOOL",
            default_value_t = false,
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true",
            action = clap::ArgAction::Set
        )]
        dry_run: bool,
        /// Go on although capi-lb's leader Lease was renewed lately (a controller still running
        /// would put back what this removes).
        #[arg(
            long,
            value_name = "BOOL",
            default_value_t = false,
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true",
            action = clap::ArgAction::Set
        )]
        force: bool,
        /// Namespace of capi-lb's leader Lease.
        #[arg(long, value_name = "NAMESPACE", default_value = "capi-lb-system")]
        lease_namespace: String,
        /// Name of capi-lb's leader Lease.
        #[arg(long, value_name = "NAME", default_value = "capi-lb-leader")]
        lease_name: String,
        /// Only this namespace (an install that watched one namespace, `run --namespace`);
        /// default: every namespace.
        #[arg(long, value_name = "NAMESPACE")]
        namespace: Option<String>,
    },
    /// Load manifests into an in-memory API, run the real reconcilers with the in-memory provider
    /// until nothing changes, and print a timeline and the resulting objects as YAML.
    Simulate {
        /// A manifest file to load: LoadBalancers and their infrastructure objects (other
        /// providers' are simulated by the in-memory provider standing in), Machines, Clusters,
        /// Services, EndpointSlices; other projects' kinds and Secrets are taken as context; or a
        /// clusterctl template (`${VAR}` rendered from the environment and the template's
        /// defaults). Without any, the embedded quickstart is used.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Exit with status 2 when a LoadBalancer is not Ready at the end.
        #[arg(
            long,
            value_name = "BOOL",
            default_value_t = false,
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = "true",
            action = clap::ArgAction::Set
        )]
        expect_ready: bool,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;
    use crate::run::RunOptions;

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
        let mut expected = RunOptions::new(vec![
            "kubedc".into(),
            "octavia".into(),
            "service".into(),
            "dns".into(),
            "zoned".into(),
        ]);
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
        assert_eq!(external.policy, crate::context::Policy::Annotated);
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

    /// Every boolean flag of every command: `(command, id, long)`, found by its values
    /// (`true`/`false`), so that a new one is checked too.
    fn boolean_flags() -> Vec<(String, String, String)> {
        let cli = Cli::command();
        let mut found = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let values: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                if values == ["true", "false"] {
                    found.push((
                        sub.get_name().to_string(),
                        arg.get_id().to_string(),
                        arg.get_long().unwrap().to_string(),
                    ));
                }
            }
        }
        found
    }

    /// What `capi-lb <command> <args>` parses the flag `id` to.
    fn parsed_bool(command: &str, id: &str, args: &[&str]) -> Result<bool, clap::Error> {
        let matches =
            Cli::command().try_get_matches_from(["capi-lb", command].iter().chain(args))?;
        let (_, sub) = matches.subcommand().unwrap();
        Ok(*sub.get_one::<bool>(id).unwrap())
    }

    #[test]
    fn every_boolean_flag_is_a_switch_that_also_takes_true_and_false() {
        let flags = boolean_flags();
        let longs: Vec<&str> = flags.iter().map(|(_, _, l)| l.as_str()).collect();
        assert_eq!(
            longs,
            [
                "address-allow-loopback",
                "dns-wildcards",
                "external-endpoints",
                "adopt-kube-dc",
                "legacy-endpoints",
                "metrics-secure",
                "leader-elect",
                "all",
                "dry-run",
                "force",
                "expect-ready"
            ]
        );
        for (command, id, long) in &flags {
            let flag = format!("--{long}");
            assert!(parsed_bool(command, id, &[&flag]).unwrap(), "{flag} alone");
            assert!(parsed_bool(command, id, &[&format!("{flag}=true")]).unwrap());
            assert!(!parsed_bool(command, id, &[&format!("{flag}=false")]).unwrap());
            let error = parsed_bool(command, id, &[&format!("{flag}=yes")]).unwrap_err();
            assert!(error.to_string().contains(&flag), "{error}");
        }
    }

    #[test]
    fn a_switch_defaulting_to_true_is_turned_off_with_false() {
        let options = run(&[]).unwrap();
        assert!(options.external.enabled);
        assert!(run(&["--external-endpoints"]).unwrap().external.enabled);
        assert!(
            !run(&["--external-endpoints=false"])
                .unwrap()
                .external
                .enabled
        );
    }

    #[test]
    fn the_argument_after_a_switch_is_never_taken_as_its_value() {
        // Before switches, `--leader-elect false` set the flag from the next argument.
        for next in ["false", "somepositional"] {
            let error = run(&["--leader-elect", next]).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{error}"
            );
            assert!(error.to_string().contains(&format!("'{next}'")), "{error}");
        }
        // The next flag stays a flag, and `simulate`'s files stay files.
        let options = run(&["--leader-elect", "--leader-election-namespace=x"]).unwrap();
        assert!(options.leader_election.enabled);
        assert_eq!(options.leader_election.namespace.as_deref(), Some("x"));
        let cli =
            Cli::try_parse_from(["capi-lb", "simulate", "--expect-ready", "-f", "a.yaml"]).unwrap();
        match cli.command {
            Some(Command::Simulate {
                files,
                expect_ready,
            }) => {
                assert!(expect_ready);
                assert_eq!(files, [PathBuf::from("a.yaml")]);
            }
            other => panic!("not simulate: {other:?}"),
        }
    }

    /// The environment variable of the test's child process holding the value it must see.
    const CHILD: &str = "CAPI_LB_TEST_BOOLEAN_ENV";

    /// Boolean flags' environment variables take `true` and `false` (and a flag given wins).
    /// clap reads the environment when the command is built, so each value is tried in a child
    /// process: this test binary running this test alone with the variables set.
    #[test]
    fn boolean_environment_variables_take_true_and_false() {
        let variables = [
            "CAPI_LB_DNS_WILDCARDS",
            "CAPI_LB_EXTERNAL_ENDPOINTS",
            "CAPI_LB_METRICS_SECURE",
        ];
        if let Ok(value) = std::env::var(CHILD) {
            // The child: every variable holds `value`.
            let options = run(&[]);
            if value == "maybe" {
                let error = options.unwrap_err().to_string();
                assert!(error.contains("invalid value 'maybe'"), "{error}");
                return;
            }
            let want = value == "true";
            let options = options.unwrap();
            assert_eq!(options.dns_wildcards, want);
            assert_eq!(options.external.enabled, want);
            assert_eq!(options.metrics_secure, want);
            let flagged =
                run(&["--metrics-secure", &format!("--dns-wildcards={}", !want)]).unwrap();
            assert!(flagged.metrics_secure);
            assert_eq!(flagged.dns_wildcards, !want);
            return;
        }
        let name = format!(
            "{}::boolean_environment_variables_take_true_and_false",
            module_path!().split_once("::").unwrap().1
        );
        for value in ["true", "false", "maybe"] {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            child.args([name.as_str(), "--exact", "--test-threads=1"]);
            child.env(CHILD, value);
            for variable in variables {
                child.env(variable, value);
            }
            let out = child.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{value}: {stdout}");
            assert!(
                stdout.contains("1 passed"),
                "{value}: the child ran no test: {stdout}"
            );
        }
    }
}
