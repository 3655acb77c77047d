//! The chart's text files: `Chart.yaml`, `_helpers.tpl` (names and labels: `config/`'s, Helm's and
//! the release's) and `NOTES.txt`.

use super::{CHART, HEADER, TEMPLATE_HEADER};
use crate::install::manifests::{self, SERVICE_ACCOUNT};

/// `_helpers.tpl`: names, labels (config/'s, plus Helm's and the release's), the image.
pub(super) fn helpers() -> String {
    let mut selector = String::new();
    for (key, value) in manifests::labels().as_object().into_iter().flatten() {
        if key == "app.kubernetes.io/name" {
            selector.push_str(&format!("{key}: {{{{ include \"capi-lb.name\" . }}}}\n"));
        } else {
            selector.push_str(&format!("{key}: {}\n", value.as_str().unwrap_or_default()));
        }
    }
    let account_suffix = SERVICE_ACCOUNT.trim_start_matches(CHART);
    format!(
        r#"{TEMPLATE_HEADER}
{{{{- define "capi-lb.name" -}}}}
{{{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}}}
{{{{- end }}}}

{{{{- /* The prefix of every object's name: unique per release, so cluster-scoped objects of two
releases never collide. */}}}}
{{{{- define "capi-lb.fullname" -}}}}
{{{{- if .Values.fullnameOverride }}}}
{{{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}}}
{{{{- else }}}}
{{{{- $name := default .Chart.Name .Values.nameOverride }}}}
{{{{- if contains $name .Release.Name }}}}
{{{{- .Release.Name | trunc 63 | trimSuffix "-" }}}}
{{{{- else }}}}
{{{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}}}
{{{{- end }}}}
{{{{- end }}}}
{{{{- end }}}}

{{{{- define "capi-lb.selectorLabels" -}}}}
{selector}app.kubernetes.io/instance: {{{{ .Release.Name }}}}
{{{{- end }}}}

{{{{- define "capi-lb.labels" -}}}}
{{{{ include "capi-lb.selectorLabels" . }}}}
helm.sh/chart: {{{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}}}
app.kubernetes.io/version: {{{{ .Chart.AppVersion | quote }}}}
app.kubernetes.io/managed-by: {{{{ .Release.Service }}}}
{{{{- end }}}}

{{{{- define "capi-lb.serviceAccountName" -}}}}
{{{{- if .Values.serviceAccount.create }}}}
{{{{- default (printf "%s{account_suffix}" (include "capi-lb.fullname" .)) .Values.serviceAccount.name }}}}
{{{{- else }}}}
{{{{- default "default" .Values.serviceAccount.name }}}}
{{{{- end }}}}
{{{{- end }}}}

{{{{- define "capi-lb.image" -}}}}
{{{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (printf "v%s" .Chart.AppVersion)) }}}}
{{{{- end }}}}

{{{{- define "capi-lb.metricsAddress" -}}}}
{{{{- if .Values.metrics.enabled }}}}
{{{{- printf "%s:%d" .Values.metrics.bindAddress (int .Values.metrics.port) }}}}
{{{{- else }}}}off{{{{- end }}}}
{{{{- end }}}}

{{{{- define "capi-lb.metricsServiceName" -}}}}
{{{{- printf "%s-metrics" (include "capi-lb.fullname" .) | trunc 63 | trimSuffix "-" }}}}
{{{{- end }}}}
"#
    )
}

pub(super) const NOTES: &str = r#"capi-lb {{ .Chart.AppVersion }} is installed: release {{ .Release.Name }} in namespace {{ .Release.Namespace }}.

Providers: {{ join ", " .Values.providers }} (the ClusterRole {{ include "capi-lb.fullname" . }}-manager-role aggregates the controller's and their permissions).
Watching: {{ .Values.watchNamespace | default "every namespace" }}.
{{- if has "inmemory" .Values.providers }}

The in-memory provider is enabled: it is for tests and demos (its addresses are whatever a tenant
writes), and its CRD is not in this chart: `capi-lb crds --all | kubectl apply --server-side -f -`.
{{- end }}

  kubectl -n {{ .Release.Namespace }} rollout status deployment/{{ include "capi-lb.fullname" . }}-controller-manager

CRDs: Helm installed those of the chart's crds/ folder that were missing, and never upgrades or
deletes them. After `helm upgrade` to a new version, upgrade them with that version's binary:

  capi-lb crds | kubectl apply --server-side --force-conflicts -f -
{{- if and .Values.metrics.enabled .Values.metrics.secure }}

Metrics: HTTPS on port {{ .Values.metrics.port }}, only for a token bound to the ClusterRole
{{ include "capi-lb.fullname" . }}-metrics-reader (metrics.readerSubjects binds it).
{{- end }}
"#;

pub(super) fn chart_yaml() -> String {
    let version = env!("CARGO_PKG_VERSION");
    format!(
        "{HEADER}apiVersion: v2\nname: {CHART}\ndescription: Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints\ntype: application\n# The chart's version and capi-lb's are one.\nversion: {version}\nappVersion: \"{version}\"\nkubeVersion: \">=1.33.0-0\"\nkeywords:\n- cluster-api\n- load-balancer\n"
    )
}
