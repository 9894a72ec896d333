{{/*
The Deployment of one component; call with (dict "root" $ "component" "controller").
Both components run the same image, the same config file and the same hardening; they
differ in their sub-command, ServiceAccount, NATS user and the secrets they mount.
*/}}
{{- define "bellows.deployment" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $values := index $root.Values $component -}}
{{- $ctx := dict "root" $root "component" $component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "bellows.fullname" $root }}-{{ $component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "bellows.componentLabels" $ctx | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "bellows.selectorLabels" $ctx | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # Never fewer than the PDB allows, one surge pod at a time.
      maxUnavailable: 0
      maxSurge: 1
  template:
    metadata:
      labels:
        {{- include "bellows.componentLabels" $ctx | nindent 8 }}
        {{- with $values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # A changed configuration gives a new pod template, so the pods roll.
        checksum/config: {{ printf "%s%s" (include "bellows.config" $root) (toJson $root.Values.controller.clusterProfile) | sha256sum }}
        {{- with $values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "bellows.serviceAccountName" $ctx }}
      automountServiceAccountToken: true
      enableServiceLinks: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      # Long enough for an in-flight round to finish its patches and ack before exit.
      terminationGracePeriodSeconds: 30
      containers:
        - name: {{ $component }}
          image: {{ include "bellows.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ $component }}
            - --config
            - /etc/bellows/config/config.yaml
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            # Replies to this component only; its NATS permissions may allow no other.
            - name: BELLOWS_NATS_INBOX_PREFIX
              value: {{ include "bellows.inboxPrefix" $ctx | quote }}
            {{- if $root.Values.nats.bundled.enabled }}
            - name: BELLOWS_NATS_USER
              value: {{ include "bellows.natsUser" $ctx | quote }}
            - name: BELLOWS_NATS_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {{ include "bellows.natsAuthSecretName" $root }}
                  key: {{ $component }}-password
            {{- end }}
            {{- with $values.compileCache }}
            # The optimizer's compiled JAX kernels (docs/configuration.md, "Compiled kernels").
            - name: BELLOWS_JAX_CACHE
              value: {{ ternary "/var/cache/bellows/jax" "off" .enabled | quote }}
            {{- end }}
            {{- with $values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metrics.port }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            initialDelaySeconds: 10
            periodSeconds: 20
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: 10
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: /etc/bellows/config
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- if and $values.compileCache $values.compileCache.enabled }}
            - name: jax-cache
              mountPath: /var/cache/bellows/jax
            {{- end }}
            {{- if $root.Values.nats.credentials.existingSecret }}
            - name: nats-credentials
              mountPath: /etc/bellows/nats-credentials
              readOnly: true
            {{- end }}
            {{- if $root.Values.nats.tls.existingSecret }}
            - name: nats-tls
              mountPath: /etc/bellows/nats-tls
              readOnly: true
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: {{ include "bellows.configMapName" $root }}
        # The root filesystem is read-only; Python and libraries may still want scratch space.
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if and $values.compileCache $values.compileCache.enabled }}
        - name: jax-cache
          {{- if $values.compileCache.volume }}
          {{- toYaml $values.compileCache.volume | nindent 10 }}
          {{- else }}
          emptyDir:
            sizeLimit: {{ $values.compileCache.sizeLimit }}
          {{- end }}
        {{- end }}
        {{- if $root.Values.nats.credentials.existingSecret }}
        - name: nats-credentials
          secret:
            secretName: {{ $root.Values.nats.credentials.existingSecret }}
            defaultMode: 0400
            items:
              # This component's own file, under the one name the shared config gives.
              - key: {{ include "bellows.credentialsKey" $ctx }}
                path: nats.creds
        {{- end }}
        {{- if $root.Values.nats.tls.existingSecret }}
        - name: nats-tls
          secret:
            secretName: {{ $root.Values.nats.tls.existingSecret }}
            defaultMode: 0400
        {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      affinity:
        {{- if $values.affinity }}
        {{- toYaml $values.affinity | nindent 8 }}
        {{- else }}
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- include "bellows.selectorLabels" $ctx | nindent 20 }}
        {{- end }}
{{- end -}}
