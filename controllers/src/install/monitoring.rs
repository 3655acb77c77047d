//! Monitoring capi-lb: the Prometheus alerts (`monitoring/alerts.yaml`, a rules file as
//! `promtool` reads it) and the Grafana dashboard, built here from a list of rows and panels. Both
//! use only the metrics capi-lb exports ([`crate::telemetry`]) and Prometheus' own `up`; the tests
//! check that every name they use is in a running controller's `/metrics` and the alerts with
//! `promtool`. `capi-lb manifests` writes them under `config/monitoring/` (see
//! [`crate::install::manifests`]); a Helm chart takes them from [`rules_yaml`], [`prometheus_rule`]
//! and [`dashboard_json`].
//!
//! The alerts select the scrape job with `job=~"capi-lb.*"` (`up` only): a ServiceMonitor or scrape
//! job whose name starts with `capi-lb`. The dashboard has a `${datasource}` variable and `job` and
//! `namespace` variables (all by default).

use serde_json::{Value, json};

/// The alerts: the groups of a Prometheus rules file.
const ALERTS: &str = include_str!("monitoring/alerts.yaml");

/// The dashboard's uid (its address in Grafana: `/d/capi-lb`).
pub const DASHBOARD_UID: &str = "capi-lb";

/// The name of the PrometheusRule and of the dashboard's ConfigMap.
pub const NAME: &str = "capi-lb";

/// The alerts as a Prometheus rules file (`promtool check rules`, `rule_files:`).
pub fn rules_yaml() -> &'static str {
    ALERTS
}

/// The alerts as a `monitoring.coreos.com/v1` PrometheusRule (prometheus-operator): the rules
/// file's groups as its `spec`, text for text.
pub fn prometheus_rule() -> String {
    let mut out = format!(
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: {NAME}\n  labels:\n    app.kubernetes.io/name: capi-lb\n    app.kubernetes.io/component: monitoring\nspec:\n"
    );
    for line in ALERTS.lines() {
        if !line.is_empty() {
            out.push_str("  ");
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The dashboard as a ConfigMap that Grafana's dashboard sidecar loads (label
/// `grafana_dashboard: "1"`).
pub fn dashboard_config_map() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{NAME}-dashboard"),
            "labels": {
                "grafana_dashboard": "1",
                "app.kubernetes.io/name": "capi-lb",
                "app.kubernetes.io/component": "monitoring",
            },
        },
        "data": {"capi-lb.json": dashboard_json()},
    })
}

/// The Grafana dashboard (JSON model, Grafana 10 and 11), pretty-printed.
pub fn dashboard_json() -> String {
    // A `Value` always serialises.
    let mut text = serde_json::to_string_pretty(&dashboard()).unwrap_or_default();
    text.push('\n');
    text
}

/// A panel's kind.
#[derive(Clone, Copy)]
enum Kind {
    /// One number (the last value).
    Stat,
    /// Lines over time.
    Series,
}

/// A panel: a title, what it shows, its unit and width, and its queries (expression, legend).
struct Panel {
    title: &'static str,
    description: &'static str,
    kind: Kind,
    unit: &'static str,
    width: u32,
    queries: Vec<(String, &'static str)>,
}

fn panel(
    kind: Kind,
    title: &'static str,
    unit: &'static str,
    width: u32,
    description: &'static str,
    queries: Vec<(String, &'static str)>,
) -> Panel {
    Panel {
        title,
        description,
        kind,
        unit,
        width,
        queries,
    }
}

/// `metric{<the dashboard's job and namespace>, extra}`.
fn m(metric: &str, extra: &str) -> String {
    let scope = r#"job=~"$job", namespace=~"$namespace""#;
    if extra.is_empty() {
        format!("{metric}{{{scope}}}")
    } else {
        format!("{metric}{{{scope}, {extra}}}")
    }
}

/// The quantiles `qs` of histogram `metric` (its `_bucket` series) by `by`, over `range`.
fn quantiles(
    metric: &str,
    by: &str,
    range: &str,
    qs: &[(&str, &'static str)],
) -> Vec<(String, &'static str)> {
    let by = if by.is_empty() {
        "le".to_string()
    } else {
        format!("le, {by}")
    };
    qs.iter()
        .map(|(q, legend)| {
            (
                format!(
                    "histogram_quantile({q}, sum by ({by}) (rate({}[{range}])))",
                    m(&format!("{metric}_bucket"), "")
                ),
                *legend,
            )
        })
        .collect()
}

const WRITES: &str = r#"verb=~"create|update|patch|delete""#;
const RATE: &str = "$__rate_interval";

fn rows() -> Vec<(&'static str, Vec<Panel>)> {
    use Kind::{Series, Stat};
    let rate = |metric: &str, extra: &str, by: &str| {
        format!("sum by ({by}) (rate({}[{RATE}]))", m(metric, extra))
    };
    vec![
        (
            "Overview",
            vec![
                panel(
                    Stat,
                    "Leading replicas",
                    "none",
                    4,
                    "Replicas that hold the leader Lease: exactly 1 when all is well (alerts CapiLbNoLeader, CapiLbSeveralLeaders).",
                    vec![(format!("sum({})", m("capi_lb_leader", "")), "leading")],
                ),
                panel(
                    Stat,
                    "LoadBalancers",
                    "none",
                    4,
                    "LoadBalancers in capi-lb's cache.",
                    vec![(
                        format!(
                            "sum({})",
                            m("capi_lb_managed_objects", r#"kind="loadbalancers""#)
                        ),
                        "LoadBalancers",
                    )],
                ),
                panel(
                    Stat,
                    "Not Ready",
                    "none",
                    4,
                    "LoadBalancers whose Ready condition is not True (kubectl get loadbalancers -A shows which).",
                    vec![(
                        format!(
                            "sum({})",
                            m(
                                "capi_lb_loadbalancers",
                                r#"condition="Ready", status!="True""#
                            )
                        ),
                        "not Ready",
                    )],
                ),
                panel(
                    Stat,
                    "Longest not Ready",
                    "s",
                    4,
                    "How long the LoadBalancer not Ready the longest (paused ones left out) has been so; the alert CapiLbLoadBalancerNotReady fires over 10 minutes.",
                    vec![(
                        format!("max({})", m("capi_lb_longest_not_ready_seconds", "")),
                        "longest",
                    )],
                ),
                panel(
                    Stat,
                    "Machines held by deletion hooks",
                    "none",
                    4,
                    "Machines being deleted that capi-lb's deletion hooks hold while their members drain.",
                    vec![(
                        format!("sum({})", m("capi_lb_deletion_hook_held_machines", "")),
                        "held",
                    )],
                ),
                panel(
                    Stat,
                    "Drift repairs (24 h)",
                    "none",
                    4,
                    "Load balancers found gone behind capi-lb's back and created again (Warning Event LoadBalancerLost).",
                    vec![(
                        format!(
                            "sum(increase({}[24h]))",
                            m("capi_lb_drift_repairs_total", "")
                        ),
                        "repairs",
                    )],
                ),
                panel(
                    Series,
                    "LoadBalancers by condition",
                    "none",
                    24,
                    "LoadBalancers by condition type and status. A converged fleet has every one Ready=True, InfrastructureReady=True, TargetsReady=True, EndpointPublished=True.",
                    vec![(
                        format!(
                            "sum by (condition, status) ({})",
                            m("capi_lb_loadbalancers", "")
                        ),
                        "{{condition}}={{status}}",
                    )],
                ),
            ],
        ),
        (
            "Reconciles",
            vec![
                panel(
                    Series,
                    "Reconciles",
                    "ops",
                    8,
                    "Reconciles per second by controller and result.",
                    vec![(
                        rate("capi_lb_reconciles_total", "", "controller, result"),
                        "{{controller}} {{result}}",
                    )],
                ),
                panel(
                    Series,
                    "Reconcile errors",
                    "percentunit",
                    8,
                    "Share of reconciles that failed, by controller (alert CapiLbReconcileErrors over 10% for 15 minutes).",
                    vec![(
                        format!(
                            "{} / {}",
                            rate(
                                "capi_lb_reconciles_total",
                                r#"result="error""#,
                                "controller"
                            ),
                            rate("capi_lb_reconciles_total", "", "controller")
                        ),
                        "{{controller}}",
                    )],
                ),
                panel(
                    Series,
                    "Reconcile duration",
                    "s",
                    8,
                    "Reconcile duration quantiles by controller.",
                    quantiles(
                        "capi_lb_reconcile_duration_seconds",
                        "controller",
                        RATE,
                        &[
                            ("0.5", "p50 {{controller}}"),
                            ("0.99", "p99 {{controller}}"),
                        ],
                    ),
                ),
                panel(
                    Series,
                    "Reconciles in flight",
                    "none",
                    8,
                    "Reconciles running now, working or waiting on a provider.",
                    vec![(
                        format!(
                            "sum by (controller) ({})",
                            m("capi_lb_reconciles_in_flight", "")
                        ),
                        "{{controller}}",
                    )],
                ),
                panel(
                    Series,
                    "Time to Ready",
                    "s",
                    8,
                    "Seconds from a LoadBalancer's creation (or the change that made it not Ready) to Ready, quantiles over the last hour.",
                    quantiles(
                        "capi_lb_time_to_ready_seconds",
                        "",
                        "1h",
                        &[("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99")],
                    ),
                ),
                panel(
                    Series,
                    "Drift repairs",
                    "none",
                    8,
                    "Load balancers created again after they were lost, per hour, by provider.",
                    vec![(
                        format!(
                            "sum by (provider) (increase({}[1h]))",
                            m("capi_lb_drift_repairs_total", "")
                        ),
                        "{{provider}}",
                    )],
                ),
            ],
        ),
        (
            "Providers",
            vec![
                panel(
                    Series,
                    "Provider calls",
                    "ops",
                    8,
                    "Calls to the providers per second by provider and operation.",
                    vec![(
                        rate("capi_lb_provider_calls_total", "", "provider, operation"),
                        "{{provider}} {{operation}}",
                    )],
                ),
                panel(
                    Series,
                    "Provider errors",
                    "ops",
                    8,
                    "Failed and timed-out provider calls per second (alert CapiLbProviderFailing over 20% of the calls for 15 minutes).",
                    vec![(
                        rate(
                            "capi_lb_provider_calls_total",
                            r#"result=~"transient_error|timed_out|permanent_error""#,
                            "provider, operation, result",
                        ),
                        "{{provider}} {{operation}} {{result}}",
                    )],
                ),
                panel(
                    Series,
                    "Provider call duration (p99)",
                    "s",
                    8,
                    "99th percentile of provider call durations.",
                    quantiles(
                        "capi_lb_provider_call_duration_seconds",
                        "provider, operation",
                        RATE,
                        &[("0.99", "{{provider}} {{operation}}")],
                    ),
                ),
                panel(
                    Series,
                    "OpenStack requests by status",
                    "ops",
                    12,
                    "Requests of the Octavia provider to Keystone, Octavia and Neutron, by service and HTTP status (none: no answer).",
                    vec![(
                        rate("capi_lb_openstack_requests_total", "", "service, status"),
                        "{{service}} {{status}}",
                    )],
                ),
                panel(
                    Series,
                    "OpenStack request duration (p99)",
                    "s",
                    12,
                    "99th percentile of OpenStack request durations by service.",
                    quantiles(
                        "capi_lb_openstack_request_duration_seconds",
                        "service",
                        RATE,
                        &[("0.99", "{{service}}")],
                    ),
                ),
            ],
        ),
        (
            "Targets",
            vec![
                panel(
                    Series,
                    "Targets by state",
                    "none",
                    12,
                    "Targets (Machines) by the state their LoadBalancers wrote on them, one per target and LoadBalancer: adding, active, disabling, disabled, removing, removed, failing, unhealthy.",
                    vec![(
                        format!("sum by (state) ({})", m("capi_lb_targets", "")),
                        "{{state}}",
                    )],
                ),
                panel(
                    Series,
                    "Deletion hooks",
                    "s",
                    12,
                    "How long capi-lb's deletion hooks have held the Machine held the longest, and the most one is held beyond its LoadBalancer's drainSeconds (alert CapiLbDeletionHookHeldTooLong over 10 minutes).",
                    vec![
                        (
                            format!(
                                "max({})",
                                m("capi_lb_deletion_hook_longest_held_seconds", "")
                            ),
                            "longest held",
                        ),
                        (
                            format!("max({})", m("capi_lb_deletion_hook_overdue_seconds", "")),
                            "beyond the drain",
                        ),
                    ],
                ),
            ],
        ),
        (
            "Kubernetes API",
            vec![
                panel(
                    Series,
                    "Requests by verb and code",
                    "reqps",
                    8,
                    "Requests of capi-lb to the Kubernetes API by verb and status class.",
                    vec![(
                        rate("capi_lb_kube_requests_total", "", "verb, code"),
                        "{{verb}} {{code}}",
                    )],
                ),
                panel(
                    Series,
                    "Writes",
                    "reqps",
                    8,
                    "Writes by verb and resource: a converged controller writes nothing, so a steady rate while nothing changes is a write loop.",
                    vec![(
                        rate("capi_lb_kube_requests_total", WRITES, "verb, resource"),
                        "{{verb}} {{resource}}",
                    )],
                ),
                panel(
                    Series,
                    "Failed requests",
                    "reqps",
                    8,
                    "Refused or failed requests (403: RBAC too narrow; 409: another writer; none: no answer).",
                    vec![(
                        rate(
                            "capi_lb_kube_requests_total",
                            r#"code=~"4xx|5xx|none""#,
                            "verb, resource, code",
                        ),
                        "{{verb}} {{resource}} {{code}}",
                    )],
                ),
            ],
        ),
        (
            "Process",
            vec![
                panel(
                    Series,
                    "Leader",
                    "none",
                    8,
                    "1 on the replica that leads.",
                    vec![(
                        format!("max by (instance) ({})", m("capi_lb_leader", "")),
                        "{{instance}}",
                    )],
                ),
                panel(
                    Series,
                    "Memory",
                    "bytes",
                    8,
                    "Resident memory of each replica, now and at its peak.",
                    vec![
                        (
                            format!(
                                "max by (instance) ({})",
                                m("capi_lb_process_resident_memory_bytes", "")
                            ),
                            "{{instance}}",
                        ),
                        (
                            format!(
                                "max by (instance) ({})",
                                m("capi_lb_process_peak_resident_memory_bytes", "")
                            ),
                            "{{instance}} peak",
                        ),
                    ],
                ),
                panel(
                    Series,
                    "CPU",
                    "percentunit",
                    8,
                    "CPU time per second of each replica (1 = one core).",
                    vec![(
                        rate("capi_lb_process_cpu_seconds", "", "instance"),
                        "{{instance}}",
                    )],
                ),
            ],
        ),
    ]
}

fn datasource() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

/// A panel's height in grid units.
fn height(kind: Kind) -> u32 {
    match kind {
        Kind::Stat => 4,
        Kind::Series => 8,
    }
}

fn panel_json(id: u32, p: &Panel, x: u32, y: u32) -> Value {
    let height = height(p.kind);
    let targets: Vec<Value> = p
        .queries
        .iter()
        .zip('A'..='Z')
        .map(|((expr, legend), ref_id)| {
            json!({
                "datasource": datasource(),
                "expr": expr,
                "legendFormat": legend,
                "range": true,
                "refId": ref_id.to_string(),
            })
        })
        .collect();
    let (kind, options) = match p.kind {
        Kind::Stat => (
            "stat",
            json!({
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": false},
                "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                "orientation": "auto", "textMode": "auto",
            }),
        ),
        Kind::Series => (
            "timeseries",
            json!({
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
                "tooltip": {"mode": "multi", "sort": "desc"},
            }),
        ),
    };
    json!({
        "id": id,
        "type": kind,
        "title": p.title,
        "description": p.description,
        "datasource": datasource(),
        "gridPos": {"h": height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": options,
        "targets": targets,
    })
}

/// The dashboard's JSON model.
pub fn dashboard() -> Value {
    let mut panels = Vec::new();
    let (mut id, mut y) = (1, 0);
    for (title, row) in rows() {
        panels.push(json!({
            "id": id, "type": "row", "title": title, "collapsed": false,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
        }));
        id += 1;
        y += 1;
        let (mut x, mut line_height) = (0, 0);
        for p in &row {
            if x + p.width > 24 {
                (x, y) = (0, y + line_height);
            }
            panels.push(panel_json(id, p, x, y));
            line_height = height(p.kind);
            id += 1;
            x += p.width;
        }
        y += line_height;
    }
    let variable = |name: &str, label: &str, query: &str| {
        json!({
            "name": name, "label": label, "type": "query", "datasource": datasource(),
            "query": {"query": query, "refId": format!("{name}-values")},
            "definition": query, "refresh": 2, "includeAll": true, "allValue": ".*",
            "multi": true, "sort": 1, "current": {"selected": true, "text": ["All"], "value": ["$__all"]},
        })
    };
    json!({
        "title": "capi-lb",
        "uid": DASHBOARD_UID,
        "description": "capi-lb, the Cluster API load-balancer controller: LoadBalancers, reconciles, providers, targets and deletion hooks, Kubernetes API requests, the process. See docs/operations.md#monitoring.",
        "tags": ["capi-lb", "cluster-api"],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "includeAll": false, "multi": false, "refresh": 1, "regex": ""},
            variable("job", "Job", "label_values(capi_lb_leader, job)"),
            variable("namespace", "Namespace", r#"label_values(capi_lb_leader{job=~"$job"}, namespace)"#),
        ]},
        "panels": panels,
    })
}
