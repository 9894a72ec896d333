{{/*
The NetworkPolicy of the controller or the bridge; call with (dict "root" $ "component" "x").
In: only the metrics/health port, from networkPolicy.metricsFrom. Out: DNS, the Kubernetes
API server and NATS (the bundled server's client port, or your servers' ports), and
nothing else. An empty `to` means any address, on those ports only.
*/}}
{{- define "bellows.egressRule" -}}
- ports:
    {{- range $port := .ports }}
    {{- range $protocol := $.protocols }}
    - port: {{ $port }}
      protocol: {{ $protocol }}
    {{- end }}
    {{- end }}
  {{- with .to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "bellows.networkPolicy" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $policy := $root.Values.networkPolicy -}}
{{- $ctx := dict "root" $root "component" $component -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "bellows.fullname" $root }}-{{ $component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "bellows.selectorLabels" $ctx | nindent 6 }}
  policyTypes:
    - Ingress
    - Egress
  {{- if $policy.metricsFrom }}
  ingress:
    - from:
        {{- toYaml $policy.metricsFrom | nindent 8 }}
      ports:
        - port: {{ $root.Values.metrics.port }}
          protocol: TCP
  {{- else }}
  ingress: []
  {{- end }}
  egress:
    {{- include "bellows.egressRule" (dict "to" $policy.dns.to "ports" $policy.dns.ports "protocols" (list "UDP" "TCP")) | nindent 4 }}
    {{- include "bellows.egressRule" (dict "to" $policy.apiServer.to "ports" $policy.apiServer.ports "protocols" (list "TCP")) | nindent 4 }}
    {{- if $root.Values.nats.bundled.enabled }}
    {{- $nats := list (dict "podSelector" (dict "matchLabels" (include "bellows.selectorLabels" (dict "root" $root "component" "nats") | fromYaml))) }}
    {{- include "bellows.egressRule" (dict "to" $nats "ports" (list 4222) "protocols" (list "TCP")) | nindent 4 }}
    {{- else }}
    {{- include "bellows.egressRule" (dict "to" $policy.nats.to "ports" $policy.nats.ports "protocols" (list "TCP")) | nindent 4 }}
    {{- end }}
    {{- with $policy.extraEgress }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
