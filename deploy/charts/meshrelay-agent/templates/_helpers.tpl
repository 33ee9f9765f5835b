{{/*
meshrelay-agent.name is the chart name, or nameOverride.
*/}}
{{- define "meshrelay-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
meshrelay-agent.fullname names every resource of the release: fullnameOverride,
else RELEASE-NAME, or RELEASE when it already contains the chart name.
*/}}
{{- define "meshrelay-agent.fullname" -}}
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
meshrelay-agent.labels are the common labels of every resource.
*/}}
{{- define "meshrelay-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "meshrelay-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: meshrelay
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
meshrelay-agent.selectorLabels select the server's pods; they never change
across upgrades.
*/}}
{{- define "meshrelay-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshrelay-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
meshrelay-agent.serviceAccountName is the ServiceAccount the server runs as.
*/}}
{{- define "meshrelay-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "meshrelay-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
meshrelay-agent.image renders an image reference from a map with repository,
tag and digest; the tag defaults to the chart's appVersion.
Usage: include "meshrelay-agent.image" (list .Values.image .Chart.AppVersion)
*/}}
{{- define "meshrelay-agent.image" -}}
{{- $img := index . 0 }}
{{- $appVersion := index . 1 }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default $appVersion $img.tag) }}
{{- end }}
{{- end }}


{{/*
meshrelay-agent.relaySecret is the Secret with the relay identity token and
the CA bundle.
*/}}
{{- define "meshrelay-agent.relaySecret" -}}
{{- default (printf "%s-relay" (include "meshrelay-agent.fullname" .)) .Values.relay.existingSecret }}
{{- end }}

{{/*
meshrelay-agent.leaseName is the name of the leader election Lease.
*/}}
{{- define "meshrelay-agent.leaseName" -}}
{{- default (include "meshrelay-agent.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
meshrelay-agent.validate fails the render on values that cannot work.
*/}}
{{- define "meshrelay-agent.validate" -}}
{{- if not .Values.cluster }}
{{- fail "cluster is required: the name the cluster was registered with (meshrelay cluster register NAME)" }}
{{- end }}
{{- if not .Values.server.address }}
{{- fail "server.address is required: the management server's relay address, host:port" }}
{{- end }}
{{- if and (not .Values.relay.existingSecret) (or (not .Values.relay.token) (not .Values.relay.caBundle)) }}
{{- fail "relay.existingSecret, or relay.token and relay.caBundle, are required: the relay identity token and the CA bundle of the management server" }}
{{- end }}
{{- if not (has .Values.mode (list "mtls" "tls")) }}
{{- fail (printf "mode must be mtls or tls, not %q" .Values.mode) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount %d needs leaderElection.enabled: without a leader every replica would apply" (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
