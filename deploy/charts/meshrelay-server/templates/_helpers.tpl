{{/*
meshrelay-server.name is the chart name, or nameOverride.
*/}}
{{- define "meshrelay-server.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
meshrelay-server.fullname names every resource of the release: fullnameOverride,
else RELEASE-NAME, or RELEASE when it already contains the chart name.
*/}}
{{- define "meshrelay-server.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
meshrelay-server.labels are the common labels of every resource.
*/}}
{{- define "meshrelay-server.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "meshrelay-server.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: server
app.kubernetes.io/part-of: meshrelay
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
meshrelay-server.selectorLabels select the server's pods; they never change
across upgrades.
*/}}
{{- define "meshrelay-server.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshrelay-server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
meshrelay-server.serviceAccountName is the ServiceAccount the server runs as.
*/}}
{{- define "meshrelay-server.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "meshrelay-server.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
meshrelay-server.image renders an image reference from a map with repository,
tag and digest; the tag defaults to the chart's appVersion.
Usage: include "meshrelay-server.image" (list .Values.image .Chart.AppVersion)
*/}}
{{- define "meshrelay-server.image" -}}
{{- $img := index . 0 }}
{{- $appVersion := index . 1 }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default $appVersion $img.tag) }}
{{- end }}
{{- end }}

{{/*
meshrelay-server.adminTokenSecret is the Secret holding the admin API token.
*/}}
{{- define "meshrelay-server.adminTokenSecret" -}}
{{- default (printf "%s-admin-token" (include "meshrelay-server.fullname" .)) .Values.adminToken.existingSecret }}
{{- end }}

{{/*
meshrelay-server.caKeyEncryptionKeySecret is the Secret holding the secret
that seals CA keys in the store.
*/}}
{{- define "meshrelay-server.caKeyEncryptionKeySecret" -}}
{{- default (printf "%s-ca-key-encryption-key" (include "meshrelay-server.fullname" .)) .Values.caKeyEncryptionKey.existingSecret }}
{{- end }}

{{/*
meshrelay-server.storeURL is the value of --store. Kubernetes replaces
$(REDIS_PASSWORD) with the variable the container gets from
redis.passwordSecret.
*/}}
{{- define "meshrelay-server.storeURL" -}}
{{- if eq .Values.store.type "memory" }}
{{- "memory" }}
{{- else if .Values.redis.url }}
{{- .Values.redis.url }}
{{- else }}
{{- $r := .Values.redis }}
{{- $userinfo := "" }}
{{- if $r.passwordSecret.name }}
{{- $userinfo = printf "%s:$(REDIS_PASSWORD)@" $r.username }}
{{- else if $r.username }}
{{- $userinfo = printf "%s@" $r.username }}
{{- end }}
{{- $url := printf "%s://%s%s/%d" (ternary "rediss" "redis" $r.tls) $userinfo $r.address (int $r.db) }}
{{- if $r.prefix }}
{{- $url = printf "%s?prefix=%s" $url (urlquery $r.prefix) }}
{{- end }}
{{- $url }}
{{- end }}
{{- end }}

{{/*
meshrelay-server.sans are the names the server certificate is valid for: the
Service's in-cluster names, localhost (for `meshrelay cluster register` run
inside the pod with kubectl exec), then extraSANs.
*/}}
{{- define "meshrelay-server.sans" -}}
{{- $svc := include "meshrelay-server.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $sans := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" }}
{{- concat $sans .Values.extraSANs | uniq | join "," }}
{{- end }}

{{/*
meshrelay-server.validate fails the render on values that cannot work.
*/}}
{{- define "meshrelay-server.validate" -}}
{{- if not (has .Values.store.type (list "memory" "redis")) }}
{{- fail (printf "store.type must be memory or redis, not %q" .Values.store.type) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (ne .Values.store.type "redis") }}
{{- fail (printf "replicaCount %d needs store.type=redis: replicas share the fleet, the CA and the registrations through Redis" (int .Values.replicaCount)) }}
{{- end }}
{{- if and (eq .Values.store.type "redis") (not .Values.redis.address) (not .Values.redis.url) }}
{{- fail "store.type=redis needs redis.address (host:port) or redis.url" }}
{{- end }}
{{- if not (has .Values.mode (list "mtls" "tls")) }}
{{- fail (printf "mode must be mtls or tls, not %q" .Values.mode) }}
{{- end }}
{{- if not (or (eq .Values.configSource "kube") (hasPrefix "dir:" .Values.configSource)) }}
{{- fail (printf "configSource must be kube or dir:PATH, not %q" .Values.configSource) }}
{{- end }}
{{- if and .Values.persistence.enabled (gt (int .Values.replicaCount) 1) }}
{{- fail "persistence.enabled with replicaCount > 1: replicas cannot share one ReadWriteOnce claim; with store.type=redis the CA is kept in Redis, so leave persistence off" }}
{{- end }}
{{- end }}

{{/*
The flags of the init containers that install plugins from OCI registries.
*/}}
{{- define "meshrelay-server.ociPluginFlags" -}}
{{- $oci := .Values.plugins.oci -}}
{{- if or $oci.trustedKeys $oci.existingConfigMap }}
- --verify-key=/etc/meshrelay/plugin-lock/trusted-keys
{{- end }}
{{- if $oci.plainHTTP }}
- --plain-http
{{- end }}
{{- if $oci.insecureSkipVerify }}
- --insecure-skip-verify
{{- end }}
- --log-format={{ .Values.logFormat }}
{{- end }}

{{/*
What the init containers that install plugins from OCI registries share
after their args: environment, security context, resources and mounts.
*/}}
{{- define "meshrelay-server.ociPluginContainer" -}}
{{- with .Values.plugins.oci.registrySecret }}
env:
  - name: DOCKER_CONFIG
    value: /etc/meshrelay/plugin-registry
{{- end }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
resources:
  {{- toYaml .Values.plugins.resources | nindent 2 }}
volumeMounts:
  - name: plugins
    mountPath: /var/run/meshrelay/plugins
  - name: tmp
    mountPath: /tmp
  - name: plugin-lock
    mountPath: /etc/meshrelay/plugin-lock
    readOnly: true
  {{- if .Values.plugins.oci.registrySecret }}
  - name: plugin-registry
    mountPath: /etc/meshrelay/plugin-registry
    readOnly: true
  {{- end }}
{{- end }}
