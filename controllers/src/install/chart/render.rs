//! How the chart's templates are made of `config/`'s objects: placeholders put into a
//! `serde_json::Value` (strings such as `__fullname__`, and `__block_<name>__` for lines), the
//! object serialized, and each placeholder replaced by its template expression ([`render`]).

use serde_json::Value;

use super::ChartError;
use crate::install::rbac::{self, Enabled};

/// Placeholders inside strings, and the template expression each stands for.
const INLINE: &[(&str, &str)] = &[
    ("__fullname__", r#"{{ include "capi-lb.fullname" . }}"#),
    ("__namespace__", "{{ .Release.Namespace }}"),
    (
        "__serviceaccount__",
        r#"{{ include "capi-lb.serviceAccountName" . }}"#,
    ),
    ("__image__", r#"{{ include "capi-lb.image" . }}"#),
    ("__pullpolicy__", "{{ .Values.image.pullPolicy }}"),
    ("__replicas__", "{{ int .Values.replicaCount }}"),
    ("__providers__", r#"{{ join "," .Values.providers }}"#),
    ("__leaderelect__", "{{ .Values.leaderElection.enabled }}"),
    (
        "__metricsaddress__",
        r#"{{ include "capi-lb.metricsAddress" . }}"#,
    ),
    ("__metricssecure__", "{{ .Values.metrics.secure }}"),
    (
        "__healthaddress__",
        "{{ .Values.healthProbe.bindAddress }}:{{ int .Values.healthProbe.port }}",
    ),
    ("__metricsport__", "{{ int .Values.metrics.port }}"),
    ("__healthport__", "{{ int .Values.healthProbe.port }}"),
    (
        "__grace__",
        "{{ int .Values.terminationGracePeriodSeconds }}",
    ),
    (
        "__metricsservice__",
        r#"{{ include "capi-lb.metricsServiceName" . }}"#,
    ),
    (
        "__maxunavailable__",
        "{{ .Values.podDisruptionBudget.maxUnavailable }}",
    ),
    (
        "__interval__",
        "{{ .Values.monitoring.serviceMonitor.interval }}",
    ),
    (
        "__scheme__",
        "{{ if .Values.metrics.secure }}https{{ else }}http{{ end }}",
    ),
];

/// A placeholder standing for lines: as a map key (`__block_x__: null`: entries of that map), a
/// list item (`- __block_x__`: items of that list) or a value (`key: __block_x__`).
pub(super) fn block_token(name: &str) -> String {
    format!("__block_{name}__")
}

pub(super) fn block_entry(name: &str) -> (String, Value) {
    (block_token(name), Value::Null)
}

/// `toYaml` of a value at indentation `n`.
fn to_yaml(value: &str, pad: &str, n: usize) -> String {
    format!("{pad}{{{{- toYaml {value} | nindent {n} }}}}")
}

/// `{{- with value }}` around a key whose content is the value, as YAML.
fn with_key(value: &str, key: &str, pad: &str, n: usize) -> String {
    format!(
        "{pad}{{{{- with {value} }}}}\n{pad}{key}:\n{}\n{pad}{{{{- end }}}}",
        to_yaml(".", &format!("{pad}  "), n + 2)
    )
}

/// The lines of block `name` at indentation `n` (`pad` is `n` spaces).
fn block(name: &str, pad: &str, n: usize) -> Result<String, ChartError> {
    let include =
        |helper: &str| format!("{pad}{{{{- include \"capi-lb.{helper}\" . | nindent {n} }}}}");
    Ok(match name {
        "labels" => include("labels"),
        "selectorLabels" => include("selectorLabels"),
        "podLabels" => format!(
            "{pad}{{{{- with .Values.podLabels }}}}\n{}\n{pad}{{{{- end }}}}",
            to_yaml(".", pad, n)
        ),
        "podAnnotations" => with_key(".Values.podAnnotations", "annotations", pad, n),
        "serviceAccountAnnotations" => {
            with_key(".Values.serviceAccount.annotations", "annotations", pad, n)
        }
        "serviceMonitorLabels" => format!(
            "{}\n{pad}{{{{- with .Values.monitoring.serviceMonitor.labels }}}}\n{}\n{pad}{{{{- end }}}}",
            include("labels"),
            to_yaml(".", pad, n)
        ),
        "podSecurityContext" => to_yaml(".Values.podSecurityContext", pad, n),
        "securityContext" => to_yaml(".Values.securityContext", pad, n),
        "resources" => to_yaml(".Values.resources", pad, n),
        "readerSubjects" => to_yaml(".Values.metrics.readerSubjects", pad, n),
        "tlsConfig" => to_yaml(".Values.monitoring.serviceMonitor.tlsConfig", pad, n),
        "parts" => to_yaml(
            &format!("(prepend .Values.providers \"{}\")", rbac::CONTROLLER_PART),
            pad,
            n,
        ),
        "controllerRules" => controller_rules(pad)?,
        "scheduling" => [
            with_key(".Values.imagePullSecrets", "imagePullSecrets", pad, n),
            with_key(".Values.nodeSelector", "nodeSelector", pad, n),
            with_key(".Values.tolerations", "tolerations", pad, n),
            with_key(".Values.affinity", "affinity", pad, n),
            format!(
                "{pad}{{{{- with .Values.priorityClassName }}}}\n{pad}priorityClassName: {{{{ . }}}}\n{pad}{{{{- end }}}}"
            ),
        ]
        .join("\n"),
        "runArgs" => run_args(pad),
        other => {
            return Err(ChartError::Generator(format!("no block {other}")));
        }
    })
}

/// The optional arguments of `run`, from the values (after config/'s arguments).
fn run_args(pad: &str) -> String {
    let with = |value: &str, arg: &str| {
        format!(
            "{pad}{{{{- with {value} }}}}\n{pad}- {{{{ printf \"{arg}=%v\" . | quote }}}}\n{pad}{{{{- end }}}}"
        )
    };
    let number = |value: &str, arg: &str| {
        format!(
            "{pad}{{{{- with {value} }}}}\n{pad}- {{{{ printf \"{arg}=%d\" (int .) | quote }}}}\n{pad}{{{{- end }}}}"
        )
    };
    [
        with(".Values.watchNamespace", "--namespace"),
        with(".Values.watchFilter", "--watch-filter"),
        number(".Values.resyncSeconds", "--resync-seconds"),
        number(".Values.driftCheckSeconds", "--drift-check-seconds"),
        number(".Values.concurrency", "--concurrency"),
        format!(
            "{pad}{{{{- if not .Values.externalEndpoints.enabled }}}}\n{pad}- --external-endpoints=false\n{pad}{{{{- end }}}}"
        ),
        with(".Values.logFormat", "--log-format"),
        format!("{pad}{{{{- range .Values.extraArgs }}}}\n{pad}- {{{{ . | quote }}}}\n{pad}{{{{- end }}}}"),
    ]
    .join("\n")
}

/// The controller part's rules, which depend on the `-ext` publisher and secure metrics: each
/// combination generated by [`rbac::parts`], the values choosing one.
fn controller_rules(pad: &str) -> Result<String, ChartError> {
    let mut out = String::new();
    let external = ".Values.externalEndpoints.enabled";
    let secure = "(and .Values.metrics.enabled .Values.metrics.secure)";
    let when = |on: bool, value: &str| {
        if on {
            value.to_string()
        } else {
            format!("(not {value})")
        }
    };
    for (i, (external_endpoints, secure_metrics)) in
        [(true, true), (true, false), (false, true), (false, false)]
            .into_iter()
            .enumerate()
    {
        let enabled = Enabled {
            providers: Vec::new(),
            external_endpoints,
            secure_metrics,
        };
        let rules = rbac::parts(&enabled)
            .into_iter()
            .find(|(part, _)| part == rbac::CONTROLLER_PART)
            .map(|(_, rules)| rules)
            .ok_or_else(|| ChartError::Generator("no controller part".into()))?;
        let condition = format!(
            "and {} {}",
            when(external_endpoints, external),
            when(secure_metrics, secure)
        );
        let keyword = if i == 0 { "if" } else { "else if" };
        out.push_str(&format!("{pad}{{{{- {keyword} {condition} }}}}\n"));
        for line in serde_saphyr::to_string(&serde_json::to_value(rules)?)?.lines() {
            out.push_str(&format!("{pad}{line}\n"));
        }
    }
    out.push_str(&format!("{pad}{{{{- end }}}}"));
    Ok(out)
}

/// The YAML of `object` with its placeholders replaced by template expressions.
pub(super) fn render(object: &Value) -> Result<String, ChartError> {
    let text = serde_saphyr::to_string(object)?;
    let mut out = String::new();
    for line in text.lines() {
        let Some(at) = line.find("__block_") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let name_start = at + "__block_".len();
        let name_end = line[name_start..]
            .find("__")
            .map(|i| name_start + i)
            .ok_or_else(|| ChartError::Generator(format!("a broken placeholder: {line}")))?;
        let name = &line[name_start..name_end];
        let n = line.len() - line.trim_start().len();
        let pad = &line[..n];
        let rest = line.trim_start();
        if rest.starts_with("- __block_") && rest.contains("__: ") {
            return Err(ChartError::Generator(format!(
                "a block as the first key of a list item would lose its dash: {line}"
            )));
        }
        if rest.starts_with("- __block_") || rest.starts_with("__block_") {
            // List items, or map entries, at this indentation.
            out.push_str(&block(name, pad, n)?);
        } else {
            // A value: the key stays, the block goes below it.
            let key = rest.split(": ").next().unwrap_or_default();
            out.push_str(&format!("{pad}{key}:\n"));
            out.push_str(&block(name, &format!("{pad}  "), n + 2)?);
        }
        out.push('\n');
    }
    for (token, expression) in INLINE {
        out = out.replace(token, expression);
    }
    if let Some(at) = out.find("__") {
        let end = (at + 40).min(out.len());
        return Err(ChartError::Generator(format!(
            "a placeholder is left: {}",
            out.get(at..end).unwrap_or_default()
        )));
    }
    Ok(out)
}
