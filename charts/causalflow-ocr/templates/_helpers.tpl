{{/* Chart name, truncated to 63 characters (DNS label). */}}
{{- define "causalflow-ocr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release name, plus the chart name unless the release name already contains it. */}}
{{- define "causalflow-ocr.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "causalflow-ocr.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable across upgrades (a Deployment's selector is immutable). The name ends in
-operator so that no OcrService's selector (app.kubernetes.io/name=causalflow-ocr plus its own
name as instance) can ever match the operator pod, whatever the release is called.
*/}}
{{- define "causalflow-ocr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "causalflow-ocr.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "causalflow-ocr.labels" -}}
helm.sh/chart: {{ include "causalflow-ocr.chart" . }}
{{ include "causalflow-ocr.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: causalflow-ocr
{{- end }}

{{- define "causalflow-ocr.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "causalflow-ocr.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "causalflow-ocr.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The namespaces that get a Role + RoleBinding in namespaced RBAC mode: the watched namespaces,
or the release namespace when the operator watches "everything" it is allowed to.
*/}}
{{- define "causalflow-ocr.roleNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- toJson .Values.watchNamespaces }}
{{- else }}
{{- toJson (list .Release.Namespace) }}
{{- end }}
{{- end }}

{{/*
Namespaces the operator process is told to watch. In namespaced RBAC mode an empty list means
the release namespace (it may not watch others).
*/}}
{{- define "causalflow-ocr.watchArgs" -}}
{{- if .Values.watchNamespaces }}
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- else if .Values.rbac.namespaced }}
- --namespace={{ .Release.Namespace }}
{{- else }}
- --all-namespaces
{{- end }}
{{- end }}

{{/* Comma-separated namespaces the operator watches; empty when it watches every namespace. */}}
{{- define "causalflow-ocr.watchedNamespaceList" -}}
{{- if .Values.watchNamespaces }}
{{- join "," .Values.watchNamespaces }}
{{- else if .Values.rbac.namespaced }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/* The NetworkPolicy egress rule to the API server (networkPolicy.apiServer). */}}
{{- define "causalflow-ocr.apiServerEgress" -}}
- ports:
    {{- range .Values.networkPolicy.apiServer.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  {{- with .Values.networkPolicy.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- end }}
