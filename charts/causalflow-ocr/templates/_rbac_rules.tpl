{{/*
Cluster-scoped reads, both kopf's: it watches CustomResourceDefinitions to notice the OcrService
CRD (and others) appearing after it started, and Namespaces to learn which of the watched ones
exist (even with exact --namespace names it lists them, and retries until allowed). Whether
ServiceMonitors exist is read from API discovery, which every authenticated user may read.
*/}}
{{- define "causalflow-ocr.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}

{{/*
Rules for the namespaces the operator watches: exactly what operator/ocr_operator does. The
children and pods come from one table, operator/ocr_operator/ocrservice/children.py (KINDS);
tests/unit/chart/test_rbac_rules.py checks these rules against it.
*/}}
{{- define "causalflow-ocr.namespacedRules" -}}
# OcrServices: kopf watches them (@kopf.on.event only: no kopf finalizer or annotations).
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrservices]
  verbs: [get, list, watch]
# The status is written with one merge patch when it changed.
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrservices/status]
  verbs: [patch]
# Children carry an ownerReference with blockOwnerDeletion, which clusters that enable the
# OwnerReferencesPermissionEnforcement admission plugin allow only with this.
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrservices/finalizers]
  verbs: [update]
# Children: read for the snapshot, watched (whole: every taken name) to wake the owner's reconcile,
# written with server-side apply (patch; create when it does not exist yet), deleted when a
# feature is switched off.
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
# Only when prometheus-operator's CRD exists (kopf starts the watch when it appears).
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors, prometheusrules]
  verbs: [get, list, watch, create, patch, delete]
# Pods are read (the rollout judges new pods from what Kubernetes reports); only an OcrBatch's
# stalled worker is deleted (spec.stallSeconds).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
# The Deployments' ReplicaSets are read (watched by label, never a GET): a pod counts for a rollout
# only when its controller is a ReplicaSet of the OcrService's own Deployment.
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [list, watch]
# The quality gate's readiness condition (spec.rollout.qualityGate), and an OcrBatch's stalled
# worker on a lost node marked Failed: a patch of pods' status only.
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# The quality gate's own key Secret with spec.auth (ocrservice/gatekey.py): created, and patched
# with a JSON patch that first tests its ownerReference is the OcrService (never read, never
# listed); OcrBatches read Secrets by name (get, below).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# OcrBatches (operator/ocr_operator/ocrbatch/kinds.py, checked against its table like the children):
# watched, their status patched, their Jobs created once, watched and deleted on cancel, the
# workers' last progress line read from their log, PVCs looked up before a Job starts, and
# Secrets read by name only (the S3 credentials' presence, the callback's HMAC key), never listed.
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrbatches]
  verbs: [get, list, watch, delete]
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrbatches/status]
  verbs: [patch]
- apiGroups: [ocr.causalflow.dev]
  resources: [ocrbatches/finalizers]
  verbs: [update]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# Events on status transitions (kopf's own event posting is off); a repeat of the same event
# bumps the count of the one already posted (patch). An OcrBatch's Job's Events are listed (by
# the Job's uid) while it lacks pods: a pod the API server refuses (a ResourceQuota, a webhook) is
# only the Job controller's FailedCreate Event, which the batch's status then quotes.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, list]
{{- end }}

{{/*
Leader election (operator/ocr_operator/runtime/leader.py, election.py): the Lease, in the release
namespace only, by its own Role (never cluster-wide: a right on every Lease could take over other
controllers' leader elections, kube-controller-manager's included). `create` cannot be limited to
a name (the authorizer sees none before the object exists); get and update are limited to the
one Lease, named after the release. The kind and verbs come from runtime/kinds.py (LEASE);
tests/unit/chart/test_rbac_rules.py checks them.
*/}}
{{- define "causalflow-ocr.leaderElectionRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ include "causalflow-ocr.fullname" . }}]
  verbs: [get, update]
{{- end }}
