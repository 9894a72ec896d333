{{/*
RBAC rules. Only the verbs the code calls (bellows.kube.client.KubeApi; docs/security.md
lists them): the bridge reads jobs; the controller also suspends, patches and resumes them
(JSON merge patches only: never update, and the status subresource is never read apart),
gets and deletes the MPIJob launcher batch Job while a job is suspended (the launcher is
not refreshed on resume otherwise), gets profile ConfigMaps and creates core Events (never
patches one, never through events.k8s.io).
With trainer.enabled both also read TrainJobs, and the controller patches, creates and
deletes them (a resize re-creates one: spec.trainer is immutable; it never updates one).
Its re-creation records are ConfigMaps in the release namespace (the controller's
trainer.recordsNamespace), and only there may it list, create, update and delete
ConfigMaps: a Role of that namespace (bellows.recordsRbac), never a ClusterRole, so that
no ConfigMap of a tenant's (or of kube-system) is ever writable by the controller.
With controller.placement nodes the controller also lists and watches the pods of the
watched namespaces (its node view: where their pods hold GPUs).
With kueue.enabled the controller also reads LocalQueues and ClusterQueues (its pools) and
reads and patches Workloads (spec.active); ClusterQueues are cluster-scoped, so with
watchNamespaces they come from a ClusterRole of their own (rbac-kueue.yaml).
*/}}
{{- define "bellows.rules.bridge" -}}
- apiGroups: ["kubeflow.org"]
  resources: ["pytorchjobs", "mpijobs"]
  verbs: ["get", "list", "watch"]
{{- if .Values.trainer.enabled }}
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end -}}

{{- define "bellows.rules.controller" -}}
- apiGroups: ["kubeflow.org"]
  resources: ["pytorchjobs", "mpijobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if eq .Values.controller.placement "nodes" }}
# the node view: where the pods of the watched namespaces hold GPUs (read only)
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}
{{- if .Values.trainer.enabled }}
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["get", "list", "watch", "patch", "create", "delete"]
{{- end }}
{{- if .Values.kueue.enabled }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "patch"]
{{- if empty .Values.watchNamespaces }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["clusterqueues"]
  verbs: ["get", "list", "watch"]
# which flavors have a topology: Kueue's topology-aware scheduling places those jobs
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["resourceflavors"]
  verbs: ["get", "list", "watch"]
# the namespaces' labels: a ClusterQueue admits only those its namespaceSelector matches
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}
{{- end -}}

{{/*
The job permissions of one component: a ClusterRole when every namespace is watched, else
a Role and RoleBinding in each watched namespace. Call with (dict "root" $ "component" "x").
*/}}
{{- define "bellows.jobRbac" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $ctx := dict "root" $root "component" $component -}}
{{- $name := printf "%s-%s" (include "bellows.fullname" $root) $component -}}
{{- $rules := include (printf "bellows.rules.%s" $component) $root -}}
{{- if empty $root.Values.watchNamespaces }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
rules:
  {{- $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "bellows.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- else }}
{{- range $i, $namespace := $root.Values.watchNamespaces }}
{{- if $i }}
---
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
rules:
  {{- $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "bellows.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Leader election of one component: a Role in the release namespace. Creating a Lease
cannot be limited to a name, reading and renewing can: each component may only touch
its own Lease.
*/}}
{{- define "bellows.leaderElectionRbac" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $ctx := dict "root" $root "component" $component -}}
{{- $name := printf "%s-%s" (include "bellows.fullname" $root) $component -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ $name | quote }}]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-leader-election
subjects:
  - kind: ServiceAccount
    name: {{ include "bellows.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- end -}}


{{/*
The TrainJob re-creation records (with trainer.enabled): a Role in the release namespace,
the one namespace where the controller may read and write ConfigMaps beyond the job
profiles' get (docs/security.md, "Kubernetes permissions"). Its config's
controller.trainer.recordsNamespace names the same namespace (bellows.config).
*/}}
{{- define "bellows.recordsRbac" -}}
{{- $root := .root -}}
{{- $ctx := dict "root" $root "component" "controller" -}}
{{- $name := printf "%s-controller-records" (include "bellows.fullname" $root) -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "create", "update", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "bellows.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- end -}}
