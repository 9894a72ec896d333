{{/* Names, labels and small computed values shared by every template. */}}

{{- define "bellows.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name alone when it already holds the chart name. */}}
{{- define "bellows.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "bellows.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "bellows.labels" -}}
helm.sh/chart: {{ include "bellows.chart" . }}
app.kubernetes.io/name: {{ include "bellows.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: bellows
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "controller"). */}}
{{- define "bellows.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bellows.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every label of one component's objects. */}}
{{- define "bellows.componentLabels" -}}
{{ include "bellows.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "bellows.serviceAccountName" -}}
{{- $values := index .root.Values .component -}}
{{- if $values.serviceAccount.create -}}
{{- default (printf "%s-%s" (include "bellows.fullname" .root) .component) $values.serviceAccount.name -}}
{{- else -}}
{{- default "default" $values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: a digest pins it, else the tag (default: appVersion). */}}
{{- define "bellows.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "bellows.configMapName" -}}
{{- printf "%s-config" (include "bellows.fullname" .) -}}
{{- end -}}

{{- define "bellows.natsName" -}}
{{- printf "%s-nats" (include "bellows.fullname" .) -}}
{{- end -}}

{{/* NATS URLs the components connect to: the bundled server when enabled. */}}
{{- define "bellows.natsServers" -}}
{{- if .Values.nats.bundled.enabled -}}
{{- list (printf "nats://%s.%s.svc:4222" (include "bellows.natsName" .) .Release.Namespace) | toJson -}}
{{- else -}}
{{- .Values.nats.servers | toJson -}}
{{- end -}}
{{- end -}}

{{/* Whether the controller counts GPUs on the nodes (and so needs to list them). */}}
{{- define "bellows.readsNodes" -}}
{{- if eq (int .Values.controller.capacity.gpus) 0 -}}true{{- end -}}
{{- end -}}

{{/* Fail early on combinations the schema cannot express. */}}
{{- define "bellows.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.controller.replicas) 1) -}}
{{- fail (printf "controller.replicas=%d needs leaderElection.enabled=true: two controllers would both rescale the same jobs" (int .Values.controller.replicas)) -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.bridge.replicas) 1) -}}
{{- fail (printf "bridge.replicas=%d needs leaderElection.enabled=true: two bridges would publish every event twice" (int .Values.bridge.replicas)) -}}
{{- end -}}
{{- if and (not .Values.nats.bundled.enabled) (empty .Values.nats.servers) -}}
{{- fail "nats.servers is empty: list your NATS URLs or set nats.bundled.enabled=true" -}}
{{- end -}}
{{- if ge (int .Values.leaderElection.renewDeadlineSeconds) (int .Values.leaderElection.leaseDurationSeconds) -}}
{{- fail (printf "leaderElection.renewDeadlineSeconds=%d must be less than leaseDurationSeconds=%d" (int .Values.leaderElection.renewDeadlineSeconds) (int .Values.leaderElection.leaseDurationSeconds)) -}}
{{- end -}}
{{- end -}}
