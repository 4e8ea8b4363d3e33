{{/*
Cluster-scoped reads: whether the ServiceMonitor CRD exists (monitoring toggle), and kopf's
discovery of the OcrService resource.
*/}}
{{- define "causalflow-ocr.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
{{- end }}

{{/* Rules for the namespaces the operator watches. */}}
{{- define "causalflow-ocr.namespacedRules" -}}
# The OcrServices themselves: kopf watches them and patches its annotations and finalizer.
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrservices]
  verbs: [get, list, watch, patch]
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrservices/status]
  verbs: [get, patch]
# Children, written with server-side apply (patch; create for the first apply) and deleted when
# a feature is switched off.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services, configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors]
  verbs: [get, list, watch, create, patch, delete]
# Observed only: the rollout judges new pods from what Kubernetes reports.
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Events on every status transition.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}
