{{/*
The configuration file both components read (`--config /etc/bellows/config/config.yaml`).
Its schema is the controller's own (plugin/bellows/service/config.py); the pods carry a
checksum of it so that changing any of these values rolls them. What differs per component
(its NATS user, password and reply prefix) comes as BELLOWS_NATS_* env instead.
*/}}
{{- define "bellows.config" -}}
{{- $fullname := include "bellows.fullname" . -}}
{{- $nats := dict
  "servers" (include "bellows.natsServers" . | fromJsonArray)
  "stream" .Values.nats.stream
  "subjectPrefix" .Values.nats.subjectPrefix
  "durable" .Values.nats.durable
  "maxBytes" (int64 .Values.nats.limits.maxBytes)
  "maxMessages" (int64 .Values.nats.limits.maxMessages)
  "maxAgeSeconds" .Values.nats.limits.maxAgeSeconds
  "deadLetterMaxBytes" (int64 .Values.nats.limits.deadLetterMaxBytes)
  "deadLetterMaxMessages" (int64 .Values.nats.limits.deadLetterMaxMessages)
-}}
{{- /* With the bundled server each component logs in with its own user and password, given
     as env from the Secret; the file both read holds no secret. */ -}}
{{- if and .Values.nats.credentials.existingSecret (not .Values.nats.bundled.enabled) -}}
{{- /* each component's own key is mounted under this one name */ -}}
{{- $_ := set $nats "credentialsFile" "/etc/bellows/nats-credentials/nats.creds" -}}
{{- end -}}
{{- if .Values.nats.tls.existingSecret -}}
{{- $tls := dict "caFile" "/etc/bellows/nats-tls/ca.crt" -}}
{{- if .Values.nats.tls.clientCertificate -}}
{{- $_ := set $tls "certFile" "/etc/bellows/nats-tls/tls.crt" -}}
{{- $_ := set $tls "keyFile" "/etc/bellows/nats-tls/tls.key" -}}
{{- end -}}
{{- $_ := set $nats "tls" $tls -}}
{{- end -}}
{{- $controller := dict
  "mode" .Values.controller.mode
  "policy" .Values.controller.policy
  "deltaSeconds" .Values.controller.deltaSeconds
  "queue" .Values.controller.queue
  "earlyShare" .Values.controller.earlyShare
  "restartCostSeconds" .Values.controller.restartCostSeconds
  "minRuntimeSeconds" .Values.controller.minRuntimeSeconds
  "maxMinRuntimeSeconds" .Values.controller.maxMinRuntimeSeconds
  "objective" .Values.controller.objective
  "remainingExponent" .Values.controller.remainingExponent
  "hysteresis" .Values.controller.hysteresis
  "backfill" .Values.controller.backfill
  "haltTimeoutSeconds" .Values.controller.haltTimeoutSeconds
  "placement" .Values.controller.placement
  "placementTopologyKey" .Values.controller.placementTopologyKey
  "learnProgress" .Values.controller.learnProgress
  "stallAfterSeconds" .Values.controller.stallAfterSeconds
  "progress" .Values.controller.progress
  "optimizer" .Values.controller.optimizer
  "capacity" .Values.controller.capacity
  "kueue" (dict "enabled" .Values.kueue.enabled)
  "trainer" (dict "enabled" .Values.trainer.enabled "recordsNamespace" .Release.Namespace)
-}}
{{- if .Values.controller.clusterProfile -}}
{{- $_ := set $controller "clusterProfileFile" "/etc/bellows/config/cluster-profile.json" -}}
{{- end -}}
{{- $leader := dict
  "enabled" .Values.leaderElection.enabled
  "namespace" .Release.Namespace
  "controllerLease" (printf "%s-controller" $fullname)
  "bridgeLease" (printf "%s-bridge" $fullname)
  "leaseDurationSeconds" .Values.leaderElection.leaseDurationSeconds
  "renewDeadlineSeconds" .Values.leaderElection.renewDeadlineSeconds
  "retryPeriodSeconds" .Values.leaderElection.retryPeriodSeconds
  "stopGraceSeconds" .Values.leaderElection.stopGraceSeconds
-}}
{{- $config := dict
  "apiVersion" "bellows.io/v1alpha1"
  "kind" "BellowsConfig"
  "namespaces" .Values.watchNamespaces
  "nats" $nats
  "controller" $controller
  "bridge" (dict "resyncSeconds" .Values.bridge.resyncSeconds)
  "leaderElection" $leader
  "metrics" (dict "port" .Values.metrics.port)
  "logging" .Values.logging
-}}
{{- toYaml $config -}}
{{- end -}}
