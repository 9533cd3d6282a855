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
