//! The chart's values as one tree: `values.yaml` (every value under its comment) and
//! `values.schema.json` are both written from it, so the two cannot disagree. The defaults that
//! `config/` also has come from its objects (the Deployment's replicas, security contexts,
//! resources, grace period, arguments), and the comments of the values that are flags of `run`
//! are those flags' own help, read from `run`'s command line.

use serde_json::{Map, Value, json};

use super::ChartError;

/// One value (with its default and JSON schema), or a group of values.
#[derive(Clone, Debug)]
pub enum Node {
    /// A value.
    Leaf {
        /// Its key.
        key: &'static str,
        /// Its comment.
        doc: String,
        /// Its default.
        default: Value,
        /// Its JSON schema (without description and default, which are added).
        schema: Value,
    },
    /// A group of values (a YAML map).
    Group {
        /// Its key.
        key: &'static str,
        /// Its comment.
        doc: String,
        /// Its values.
        children: Vec<Node>,
    },
}

fn leaf(key: &'static str, doc: impl Into<String>, default: Value, schema: Value) -> Node {
    Node::Leaf {
        key,
        doc: doc.into(),
        default,
        schema,
    }
}

fn group(key: &'static str, doc: impl Into<String>, children: Vec<Node>) -> Node {
    Node::Group {
        key,
        doc: doc.into(),
        children,
    }
}

/// The help of `run`'s flag `--long`, with its default when it has one; an error when `run` has no
/// such flag (a renamed flag must be renamed in the chart too).
fn flag(run: &clap::Command, long: &str) -> Result<String, ChartError> {
    let arg = run
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .ok_or_else(|| ChartError::Generator(format!("`capi-lb run` has no flag --{long}")))?;
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let mut doc = format!("--{long}: {}", help.trim_end_matches('.'));
    if defaults.is_empty() {
        doc.push('.');
    } else {
        doc.push_str(&format!(" (capi-lb's default: {}).", defaults.join(",")));
    }
    Ok(doc)
}

/// `field` of `object`, or an error naming what the chart expected of `config/`.
fn field<'a>(object: &'a Value, pointer: &str) -> Result<&'a Value, ChartError> {
    object
        .pointer(pointer)
        .filter(|v| !v.is_null())
        .ok_or_else(|| ChartError::Generator(format!("config/'s Deployment has no {pointer}")))
}

/// The value of the Deployment's argument `--name=value` in `config/`.
fn config_arg<'a>(container: &'a Value, name: &str) -> Result<&'a str, ChartError> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(&format!("{name}=")))
        .ok_or_else(|| ChartError::Generator(format!("config/'s Deployment has no {name}")))
}

fn host_and_port(address: &str) -> Result<(String, u64), ChartError> {
    address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_string(), port.parse().ok()?)))
        .ok_or_else(|| ChartError::Generator(format!("{address} is not host:port")))
}

fn boolean(value: &str) -> Result<bool, ChartError> {
    value
        .parse()
        .map_err(|_| ChartError::Generator(format!("{value} is not true or false")))
}

fn object() -> Value {
    json!({"type": "object"})
}
fn string() -> Value {
    json!({"type": "string"})
}
fn boolean_schema() -> Value {
    json!({"type": "boolean"})
}
fn port() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535})
}
fn seconds_or_null() -> Value {
    json!({"type": ["integer", "null"], "minimum": 10})
}

/// The values: `run` is `capi-lb run`'s command line (for the flags' help), `deployment` the
/// Deployment of `config/` (for the defaults it has), `providers` the providers there are and
/// `shipped` those the shipped install enables.
pub fn tree(
    run: &clap::Command,
    deployment: &Value,
    image: &str,
    providers: &[&str],
    shipped: &[String],
) -> Result<Vec<Node>, ChartError> {
    let pod = field(deployment, "/spec/template/spec")?;
    let container = field(pod, "/containers/0")?;
    let (repository, _) = image
        .rsplit_once(':')
        .ok_or_else(|| ChartError::Generator(format!("the image {image} has no tag")))?;
    let (metrics_host, metrics_port) =
        host_and_port(config_arg(container, "--metrics-bind-address")?)?;
    let (health_host, health_port) =
        host_and_port(config_arg(container, "--health-probe-bind-address")?)?;
    let leader_elect = boolean(config_arg(container, "--leader-elect")?)?;
    let metrics_secure = boolean(config_arg(container, "--metrics-secure")?)?;
    let external_endpoints = config_arg(container, "--external-endpoints")
        .map(boolean)
        .unwrap_or(Ok(true))?;
    Ok(vec![
        leaf(
            "nameOverride",
            "Replaces the chart's name (capi-lb) in the objects' names and labels.",
            json!(""),
            string(),
        ),
        leaf(
            "fullnameOverride",
            "Replaces `<release>-capi-lb` (or the release's name when it contains capi-lb) as the \
             prefix of every object's name. Cluster-scoped objects (ClusterRoles, \
             ClusterRoleBindings) carry it, so two releases never share one.",
            json!(""),
            string(),
        ),
        group(
            "image",
            "The controller's image.",
            vec![
                leaf("repository", "Repository.", json!(repository), string()),
                leaf(
                    "tag",
                    "Tag; empty: `v` and the chart's appVersion.",
                    json!(""),
                    string(),
                ),
                leaf(
                    "pullPolicy",
                    "Pull policy.",
                    json!("IfNotPresent"),
                    json!({"enum": ["Always", "IfNotPresent", "Never"]}),
                ),
            ],
        ),
        leaf(
            "imagePullSecrets",
            "Secrets to pull the image with: `[{name: ...}]`.",
            json!([]),
            json!({"type": "array", "items": {"type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string"}}}}),
        ),
        leaf(
            "replicaCount",
            "Replicas of the Deployment; more than one needs leaderElection.enabled (one leads, the \
             others stand by).",
            field(deployment, "/spec/replicas")?.clone(),
            json!({"type": "integer", "minimum": 0}),
        ),
        leaf(
            "providers",
            format!(
                "{} The manager ClusterRole aggregates exactly the controller's part and these \
                 providers' parts, so the RBAC follows this list. `inmemory` (tests, demos) needs \
                 its CRD, which the chart does not install: `capi-lb crds --all`.",
                flag(run, "providers")?
            ),
            json!(shipped),
            json!({"type": "array", "minItems": 1, "uniqueItems": true,
                   "items": {"enum": providers}}),
        ),
        leaf(
            "watchNamespace",
            format!("{} Empty: all namespaces.", flag(run, "namespace")?),
            json!(""),
            string(),
        ),
        leaf(
            "watchFilter",
            format!("{} Empty: no filter.", flag(run, "watch-filter")?),
            json!(""),
            string(),
        ),
        leaf(
            "resyncSeconds",
            format!("{} Null: capi-lb's default.", flag(run, "resync-seconds")?),
            Value::Null,
            seconds_or_null(),
        ),
        leaf(
            "driftCheckSeconds",
            format!(
                "{} Null: capi-lb's default.",
                flag(run, "drift-check-seconds")?
            ),
            Value::Null,
            seconds_or_null(),
        ),
        leaf(
            "concurrency",
            format!("{} Null: capi-lb's default.", flag(run, "concurrency")?),
            Value::Null,
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": 65535}),
        ),
        leaf(
            "logFormat",
            "--log-format: text (human-readable lines) or json (one JSON object per \
              line). Null: text.",
            Value::Null,
            json!({"enum": ["text", "json", null]}),
        ),
        group(
            "leaderElection",
            "Leader election (a Lease in the release's namespace).",
            vec![leaf(
                "enabled",
                flag(run, "leader-elect")?,
                json!(leader_elect),
                boolean_schema(),
            )],
        ),
        group(
            "externalEndpoints",
            "The `-ext` publisher for Services of type LoadBalancer.",
            vec![leaf(
                "enabled",
                format!(
                    "{} False also leaves the publisher's permissions out of the \
                  controller's ClusterRole.",
                    flag(run, "external-endpoints")?
                ),
                json!(external_endpoints),
                boolean_schema(),
            )],
        ),
        group(
            "tenantRoles",
            "The tenants' roles: ClusterRoles that Kubernetes' `admin` and `edit` aggregate (create, \
             change and delete LoadBalancers and the shipped providers' kinds in a namespace) and \
             `view` aggregates (read them); never the in-memory kind. docs/security.md says what \
             they allow.",
            vec![leaf(
                "enabled",
                "Install them; false: only the bindings you make give access to capi-lb's kinds.",
                json!(true),
                boolean_schema(),
            )],
        ),
        group(
            "metrics",
            "/metrics (Prometheus).",
            vec![
                leaf(
                    "enabled",
                    "Serve /metrics; false: --metrics-bind-address=off (the probes keep \
                  their own port).",
                    json!(true),
                    boolean_schema(),
                ),
                leaf(
                    "bindAddress",
                    "The address /metrics listens on, without the port (`[::]` on \
                  IPv6-only clusters).",
                    json!(metrics_host),
                    string(),
                ),
                leaf(
                    "port",
                    "Its port (the container port `metrics`).",
                    json!(metrics_port),
                    port(),
                ),
                leaf(
                    "secure",
                    format!(
                        "{} False: plain HTTP to anyone who reaches the port, and no \
                  TokenReview/SubjectAccessReview permissions.",
                        flag(run, "metrics-secure")?
                    ),
                    json!(metrics_secure),
                    boolean_schema(),
                ),
                group(
                    "service",
                    "A Service `<fullname>-metrics` in front of the metrics port, for a \
                   scraper.",
                    vec![leaf("enabled", "Create it.", json!(true), boolean_schema())],
                ),
                leaf(
                    "readerSubjects",
                    "Subjects (e.g. Prometheus's ServiceAccount: `{kind: \
                  ServiceAccount, name: ..., namespace: ...}`) bound by the ClusterRoleBinding \
                  `<fullname>-metrics-reader` to the ClusterRole `<fullname>-metrics-reader`, which \
                  secure metrics require. Empty: no binding (bind the role yourself).",
                    json!([]),
                    json!({"type": "array", "items": {"type": "object"}}),
                ),
            ],
        ),
        group(
            "healthProbe",
            "/livez and /readyz for the kubelet's probes (container port `health`).",
            vec![
                leaf(
                    "bindAddress",
                    "The address they listen on, without the port.",
                    json!(health_host),
                    string(),
                ),
                leaf("port", "Their port.", json!(health_port), port()),
            ],
        ),
        leaf(
            "extraArgs",
            "More arguments of `capi-lb run` (see `capi-lb run --help`), e.g. \
              `--address-deny=10.96.0.0/12` or `--dns-domains={namespace}.example.com`.",
            json!([]),
            json!({"type": "array", "items": {"type": "string"}}),
        ),
        group(
            "serviceAccount",
            "The controller's ServiceAccount, which the RBAC binds.",
            vec![
                leaf(
                    "create",
                    "Create it (false: use an existing one, named below).",
                    json!(true),
                    boolean_schema(),
                ),
                leaf(
                    "name",
                    "Its name; empty: `<fullname>-manager` (or `default` when not created).",
                    json!(""),
                    string(),
                ),
                leaf("annotations", "Its annotations.", json!({}), object()),
            ],
        ),
        leaf(
            "podAnnotations",
            "Annotations of the controller's Pods.",
            json!({}),
            object(),
        ),
        leaf(
            "podLabels",
            "More labels of the controller's Pods.",
            json!({}),
            object(),
        ),
        leaf(
            "podSecurityContext",
            "The Pods' security context (default: config/'s).",
            field(pod, "/securityContext")?.clone(),
            object(),
        ),
        leaf(
            "securityContext",
            "The container's security context (default: config/'s: \
              non-root, read-only root filesystem, no privilege escalation, no capabilities).",
            field(container, "/securityContext")?.clone(),
            object(),
        ),
        leaf(
            "resources",
            "The container's requests and limits (Helm merges your map into this one: \
             `limits: null` removes the default limit).",
            field(container, "/resources")?.clone(),
            object(),
        ),
        leaf(
            "terminationGracePeriodSeconds",
            "Seconds a stopping Pod has to finish the reconciles \
              in flight.",
            field(pod, "/terminationGracePeriodSeconds")?.clone(),
            json!({"type": "integer", "minimum": 0}),
        ),
        leaf(
            "nodeSelector",
            "Node selector of the Pods.",
            json!({}),
            object(),
        ),
        leaf(
            "tolerations",
            "Tolerations of the Pods.",
            json!([]),
            json!({"type": "array"}),
        ),
        leaf("affinity", "Affinity of the Pods.", json!({}), object()),
        leaf(
            "priorityClassName",
            "Priority class of the Pods.",
            json!(""),
            string(),
        ),
        group(
            "podDisruptionBudget",
            "A PodDisruptionBudget for the controller's Pods.",
            vec![
                leaf(
                    "enabled",
                    "Create it: true, false, or null for when replicaCount is over 1.",
                    Value::Null,
                    json!({"type": ["boolean", "null"]}),
                ),
                leaf(
                    "maxUnavailable",
                    "Pods that may be unavailable at once (a number or a percentage).",
                    json!(1),
                    json!({"type": ["integer", "string"]}),
                ),
            ],
        ),
        group(
            "monitoring",
            "Objects of the Prometheus Operator (monitoring.coreos.com/v1): its CRDs \
               must be installed to enable them.",
            vec![group(
                "serviceMonitor",
                "A ServiceMonitor scraping the metrics Service (metrics.enabled \
                   and metrics.service.enabled). With secure metrics it sends the scraper's own \
                   ServiceAccount token: bind it with metrics.readerSubjects.",
                vec![
                    leaf("enabled", "Create it.", json!(false), boolean_schema()),
                    leaf("interval", "Scrape interval.", json!("30s"), string()),
                    leaf(
                        "labels",
                        "More labels (e.g. the one your Prometheus selects ServiceMonitors by).",
                        json!({}),
                        object(),
                    ),
                    leaf(
                        "tlsConfig",
                        "TLS settings of the scrape (secure metrics: a self-signed \
                      certificate unless --metrics-cert-dir is given in extraArgs).",
                        json!({"insecureSkipVerify": true}),
                        object(),
                    ),
                ],
            )],
        ),
    ])
}

/// The defaults as one JSON object (what `values.yaml` parses to).
pub fn defaults(nodes: &[Node]) -> Value {
    let mut out = Map::new();
    for node in nodes {
        match node {
            Node::Leaf { key, default, .. } => out.insert(key.to_string(), default.clone()),
            Node::Group { key, children, .. } => out.insert(key.to_string(), defaults(children)),
        };
    }
    Value::Object(out)
}

/// The JSON schema of the values: every key known (a misspelt value is refused), with its
/// comment and default.
pub fn schema(nodes: &[Node]) -> Value {
    let mut properties = Map::new();
    for node in nodes {
        let (key, value) = match node {
            Node::Leaf {
                key,
                doc,
                default,
                schema,
            } => {
                let mut schema = schema.clone();
                schema["description"] = json!(doc);
                schema["default"] = default.clone();
                (key, schema)
            }
            Node::Group { key, doc, children } => {
                let mut schema = schema(children);
                schema["description"] = json!(doc);
                (key, schema)
            }
        };
        properties.insert(key.to_string(), value);
    }
    json!({"type": "object", "additionalProperties": false, "properties": properties})
}

/// A comment wrapped at about 100 columns, each line indented by `pad`.
fn comment(doc: &str, pad: &str, out: &mut String) {
    let mut line = String::new();
    for word in doc.split_whitespace() {
        if !line.is_empty() && pad.len() + 2 + line.len() + 1 + word.len() > 100 {
            out.push_str(&format!("{pad}# {line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{pad}# {line}\n"));
    }
}

/// `values.yaml`: every value under its comment, groups indented.
pub fn yaml(nodes: &[Node], indent: usize) -> Result<String, ChartError> {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    for node in nodes {
        if indent == 0 && !out.is_empty() {
            out.push('\n');
        }
        match node {
            Node::Leaf {
                key, doc, default, ..
            } => {
                comment(doc, &pad, &mut out);
                let text = serde_saphyr::to_string(default)?;
                let nested = match default {
                    Value::Object(m) => !m.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    _ => false,
                };
                if nested {
                    out.push_str(&format!("{pad}{key}:\n"));
                    for line in text.lines() {
                        out.push_str(&format!("{pad}  {line}\n"));
                    }
                } else {
                    out.push_str(&format!("{pad}{key}: {}\n", text.trim_end()));
                }
            }
            Node::Group { key, doc, children } => {
                comment(doc, &pad, &mut out);
                out.push_str(&format!("{pad}{key}:\n"));
                out.push_str(&yaml(children, indent + 2)?);
            }
        }
    }
    Ok(out)
}
