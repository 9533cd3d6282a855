{{- define "ratelimit.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ratelimit.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ratelimit.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ratelimit.region" -}}
{{- required "region is required: this release's region, 1-48 printable characters (UNKEY_REGION)" .Values.region -}}
{{- end -}}

{{/*
What a release needs, checked in this order at the top of every template
(Helm renders worker.yaml before api-deployment.yaml, and stops at the first
failure): the region first, then what the worker needs if it is enabled.
*/}}
{{- define "ratelimit.validate" -}}
{{- $_ := include "ratelimit.region" . -}}
{{- if .Values.worker.enabled -}}
{{- $_ = required "worker.restate.adminURL is required with worker.enabled: restate-server's admin API, e.g. http://restate:9070" .Values.worker.restate.adminURL -}}
{{- $_ = required "worker.restate.ingressURL is required with worker.enabled: restate-server's ingress, e.g. http://restate:8080" .Values.worker.restate.ingressURL -}}
{{- if not (or .Values.mysql.dsn .Values.mysql.existingSecret.name) -}}
{{- fail "worker.enabled needs mysql.dsn or mysql.existingSecret: the worker cleans up MySQL's tables" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A setting from a value, or from a Secret's key when one is named. */}}
{{- define "ratelimit.fromValueOrSecret" -}}
{{- if .secret.name }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef: {name: {{ .secret.name | quote }}, key: {{ .secret.key | quote }}}
{{- else if .value }}
- name: {{ .env }}
  value: {{ .value | quote }}
{{- end }}
{{- end -}}

{{- define "ratelimit.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
