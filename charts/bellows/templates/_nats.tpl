{{/*
The bundled NATS server's configuration. `nats.conf` is the server; `auth.conf`, which it
includes, holds the users and what each may do (the layout of docs/security.md, and what
tests/hostile/test_secure_nats.py runs a real nats-server with):

* bellows-bridge publishes events and keeps its place in its KV bucket;
* bellows-controller consumes events through its durable consumer, acks them and publishes
  dead letters;
* both may read, create and update the two streams (each provisions them at start), and
  receive replies only on their own inbox prefix;
* neither may purge or delete a stream, publish what the other publishes, or read the
  other's replies;
* the controller also reads the progress stream (`<stream>_PROGRESS`, which it creates)
  through ephemeral consumers, and acks what it read;
* the training pods of each namespace in nats.bundled.progress.namespaces publish progress
  reports on their own namespace's subjects only (user `bellows-progress-<namespace>`), and
  receive the stream's acks on their own inbox prefix (`_INBOX_progress_<namespace>`);
  nobody else may log in.

Passwords are `$NATS_*_PASSWORD` references: nats-server reads them from its environment,
which the Deployment fills from the Secret, so no secret is in this ConfigMap.
*/}}
{{- define "bellows.natsServerConfig" -}}
port: 4222
http_port: 8222
# Bellows' two components, a few spare for restarts and rollouts, and the training pods that
# publish progress reports (nats.bundled.progress).
max_connections: {{ add 64 (.Values.nats.bundled.progress.maxConnections | int) }}
include ./auth.conf
jetstream {
  store_dir: /data
  max_memory_store: 64M
  max_file_store: {{ .Values.nats.bundled.maxFileStore }}
}
{{- end -}}

{{- define "bellows.natsAuthConfig" -}}
{{- $prefix := .Values.nats.subjectPrefix -}}
{{- $stream := .Values.nats.stream -}}
{{- $durable := .Values.nats.durable -}}
{{- $progress := printf "%s_PROGRESS" $stream -}}
{{- /* NatsSettings defaults (not chart values): bellows.bus.settings */ -}}
{{- $deadLetters := "BELLOWS_DEADLETTER" -}}
{{- $bucket := "bellows-bridge" -}}
{{- $learned := "bellows-learned" -}}
{{- $bridge := dict "root" . "component" "bridge" -}}
{{- $controller := dict "root" . "component" "controller" -}}
authorization {
  users = [
    {
      user: "{{ include "bellows.natsUser" $bridge }}"
      password: $NATS_BRIDGE_PASSWORD
      permissions: {
        publish: {
          allow: [
            "{{ $prefix }}.events.>",
            {{- range $name := list $stream $deadLetters }}
            "$JS.API.STREAM.INFO.{{ $name }}", "$JS.API.STREAM.CREATE.{{ $name }}", "$JS.API.STREAM.UPDATE.{{ $name }}",
            {{- end }}
            "$JS.API.STREAM.INFO.KV_{{ $bucket }}", "$JS.API.STREAM.CREATE.KV_{{ $bucket }}",
            "$JS.API.DIRECT.GET.KV_{{ $bucket }}", "$JS.API.DIRECT.GET.KV_{{ $bucket }}.>",
            "$JS.API.STREAM.MSG.GET.KV_{{ $bucket }}",
            "$KV.{{ $bucket }}.>"
          ]
        }
        subscribe: {
          allow: ["{{ include "bellows.inboxPrefix" $bridge }}.>"]
        }
      }
    },
    {
      user: "{{ include "bellows.natsUser" $controller }}"
      password: $NATS_CONTROLLER_PASSWORD
      permissions: {
        publish: {
          allow: [
            "{{ $prefix }}.deadletter.>",
            {{- range $name := list $stream $deadLetters }}
            "$JS.API.STREAM.INFO.{{ $name }}", "$JS.API.STREAM.CREATE.{{ $name }}", "$JS.API.STREAM.UPDATE.{{ $name }}",
            {{- end }}
            "$JS.API.CONSUMER.CREATE.{{ $stream }}.{{ $durable }}",
            "$JS.API.CONSUMER.CREATE.{{ $stream }}.{{ $durable }}.>",
            "$JS.API.CONSUMER.DURABLE.CREATE.{{ $stream }}.{{ $durable }}",
            "$JS.API.CONSUMER.INFO.{{ $stream }}.{{ $durable }}",
            "$JS.API.CONSUMER.MSG.NEXT.{{ $stream }}.{{ $durable }}",
            "$JS.ACK.{{ $stream }}.{{ $durable }}.>",
            "$JS.API.STREAM.INFO.{{ $progress }}", "$JS.API.STREAM.CREATE.{{ $progress }}", "$JS.API.STREAM.UPDATE.{{ $progress }}",
            "$JS.API.CONSUMER.CREATE.{{ $progress }}.>",
            "$JS.API.CONSUMER.MSG.NEXT.{{ $progress }}.*",
            "$JS.ACK.{{ $progress }}.>",
            "$JS.API.STREAM.INFO.KV_{{ $learned }}", "$JS.API.STREAM.CREATE.KV_{{ $learned }}",
            "$JS.API.DIRECT.GET.KV_{{ $learned }}", "$JS.API.DIRECT.GET.KV_{{ $learned }}.>",
            "$JS.API.STREAM.MSG.GET.KV_{{ $learned }}",
            "$JS.API.CONSUMER.CREATE.KV_{{ $learned }}", "$JS.API.CONSUMER.CREATE.KV_{{ $learned }}.>",
            "$JS.API.CONSUMER.INFO.KV_{{ $learned }}.>", "$JS.API.CONSUMER.DELETE.KV_{{ $learned }}.>",
            "$JS.FC.KV_{{ $learned }}.>",
            "$KV.{{ $learned }}.>"
          ]
        }
        subscribe: {
          allow: ["{{ include "bellows.inboxPrefix" $controller }}.>"]
        }
      }
    }
    {{- range $namespace := include "bellows.progressNamespaces" . | fromJsonArray }},
    {
      user: "bellows-progress-{{ $namespace }}"
      password: ${{ include "bellows.progressPasswordEnv" $namespace }}
      permissions: {
        publish: {
          allow: ["{{ $prefix }}.progress.v1.{{ $namespace }}.*"]
        }
        subscribe: {
          allow: ["_INBOX_progress_{{ $namespace }}.>"]
        }
      }
    }
    {{- end }}
  ]
}
{{- end -}}
