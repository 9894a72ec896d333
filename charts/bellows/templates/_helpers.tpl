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

{{/* The Secret with the bundled NATS users' passwords: the admin's, or the generated one. */}}
{{- define "bellows.natsAuthSecretName" -}}
{{- default (printf "%s-nats-auth" (include "bellows.fullname" .)) .Values.nats.bundled.auth.existingSecret -}}
{{- end -}}

{{/* The NATS user of one component on the bundled server; call with (dict "root" $ "component" "x"). */}}
{{- define "bellows.natsUser" -}}
{{- printf "bellows-%s" .component -}}
{{- end -}}

{{/* The namespaces whose pods report progress to the bundled NATS, as JSON: those listed in
nats.bundled.progress.namespaces, else the namespaces Bellows manages (watchNamespaces). */}}
{{- define "bellows.progressNamespaces" -}}
{{- toJson (.Values.nats.bundled.progress.namespaces | default .Values.watchNamespaces) -}}
{{- end -}}

{{/* The env var of the bundled NATS that holds the password of one namespace's progress user. */}}
{{- define "bellows.progressPasswordEnv" -}}
{{- printf "NATS_PROGRESS_%s_PASSWORD" (upper (replace "-" "_" .)) -}}
{{- end -}}

{{/* The reply-subject prefix of one component (its NATS permissions allow only its own). */}}
{{- define "bellows.inboxPrefix" -}}
{{- printf "%s.%s" .root.Values.nats.inboxPrefix .component -}}
{{- end -}}

{{/* The key of one component's `.creds` file in nats.credentials.existingSecret. */}}
{{- define "bellows.credentialsKey" -}}
{{- $credentials := .root.Values.nats.credentials -}}
{{- default $credentials.key (index $credentials (printf "%sKey" .component)) -}}
{{- end -}}

{{/* The port of a NATS URL: the one written, else the scheme's default. */}}
{{- define "bellows.urlPort" -}}
{{- $hostport := regexReplaceAll "^[a-z]+://([^/]*).*$" . "${1}" -}}
{{- if regexMatch ":[0-9]+$" $hostport -}}
{{- regexFind "[0-9]+$" $hostport -}}
{{- else -}}
{{- get (dict "nats" "4222" "tls" "4222" "ws" "80" "wss" "443") (regexFind "^[a-z]+" .) -}}
{{- end -}}
{{- end -}}

{{/* A NATS size ("1G", "512M": powers of 1000, as nats-server reads them) in bytes. */}}
{{- define "bellows.natsSizeBytes" -}}
{{- $unit := get (dict "K" 1000 "M" 1000000 "G" 1000000000) (regexFind "[KMG]$" .) -}}
{{- mul (trimSuffix (regexFind "[KMG]$" .) . | int64) $unit -}}
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
{{- if or (eq (int .Values.controller.capacity.gpus) 0) (eq .Values.controller.placement "nodes") -}}true{{- end -}}
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
{{- if and .Values.nats.bundled.enabled .Values.nats.credentials.existingSecret -}}
{{- fail "nats.credentials.existingSecret is for your own NATS: the bundled server has its own users (nats.bundled.auth)" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.nats.bundled.enabled) -}}
{{- $allowed := list -}}
{{- range .Values.networkPolicy.nats.ports -}}
{{- $allowed = append $allowed (int . | toString) -}}
{{- end -}}
{{- range .Values.nats.servers -}}
{{- $port := include "bellows.urlPort" . -}}
{{- if not (has $port $allowed) -}}
{{- fail (printf "nats.servers has %s, whose port %s is not in networkPolicy.nats.ports %v: the NetworkPolicy would block it" . $port $allowed) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.nats.bundled.enabled -}}
{{- $limits := .Values.nats.limits -}}
{{- /* the bridge's KV bucket takes up to 16 MiB (bellows.bus.streams.KV_MAX_BYTES), the
controller's learned bucket up to 64 MiB (LEARNED_MAX_BYTES) */ -}}
{{- $needed := add (int64 $limits.maxBytes) (int64 $limits.deadLetterMaxBytes) 16777216 67108864 -}}
{{- $store := include "bellows.natsSizeBytes" .Values.nats.bundled.maxFileStore | int64 -}}
{{- if gt $needed $store -}}
{{- fail (printf "nats.limits.maxBytes + deadLetterMaxBytes + 16 MiB for the bridge's bucket + 64 MiB for the controller's learned bucket = %d bytes do not fit in nats.bundled.maxFileStore=%s (%d bytes): JetStream would refuse the streams" $needed .Values.nats.bundled.maxFileStore $store) -}}
{{- end -}}
{{- end -}}
{{- if ge (int .Values.leaderElection.renewDeadlineSeconds) (int .Values.leaderElection.leaseDurationSeconds) -}}
{{- fail (printf "leaderElection.renewDeadlineSeconds=%d must be less than leaseDurationSeconds=%d" (int .Values.leaderElection.renewDeadlineSeconds) (int .Values.leaderElection.leaseDurationSeconds)) -}}
{{- end -}}
{{- end -}}
