{{- /*
  What every agent chart (agent-local, agent-job, agent-k8s) defines alike. Each chart holds a copy
  of this library under charts/drover-common, written by scripts/chart-copies.mjs.
*/ -}}

{{- define "drover.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "drover.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "drover.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "drover.labels" -}}
app.kubernetes.io/name: {{ include "drover.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "drover.selectorLabels" -}}
app.kubernetes.io/name: {{ include "drover.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
An image reference moved under global.imageRegistry when that is set: the reference's own
registry host (its first part, when it has a dot or a colon or is localhost) is replaced.
*/}}
{{- define "drover.withRegistry" -}}
{{- $ref := .ref -}}
{{- with .registry -}}
{{- $parts := splitList "/" $ref -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq "localhost" $first)) -}}
{{- $ref = join "/" (rest $parts) -}}
{{- end -}}
{{- $ref = printf "%s/%s" (trimSuffix "/" .) $ref -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "drover.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $.Values.image.repository . }}{{ end -}}
{{ include "drover.withRegistry" (dict "ref" $ref "registry" .Values.global.imageRegistry) }}
{{- end -}}

{{/* Labels of one kind of pod: its own (`labels`) over global.podLabels; the chart's selector labels cannot be overridden. */}}
{{- define "drover.podLabels" -}}
{{- $all := merge (deepCopy (.labels | default dict)) (deepCopy (.root.Values.global.podLabels | default dict)) -}}
{{- with omit $all "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* Annotations of one kind of pod: its own (`annotations`) over global.podAnnotations. */}}
{{- define "drover.podAnnotations" -}}
{{- with merge (deepCopy (.annotations | default dict)) (deepCopy (.root.Values.global.podAnnotations | default dict)) -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* The token Secret: an existing one, or the chart's own. */}}
{{- define "drover.tokenSecretName" -}}
{{- default (printf "%s-token" (include "drover.fullname" .)) .Values.agent.tokenExistingSecret.name -}}
{{- end -}}

{{/* Fails rendering with a clear message when the grace period is too short for the stop mode. */}}
{{- define "drover.validateShutdown" -}}
{{- $min := dict "graceful" 30 "drain" 120 "force" 10 -}}
{{- $mode := .Values.agent.shutdownMode -}}
{{- if not (hasKey $min $mode) -}}
{{- fail (printf "agent.shutdownMode must be graceful, drain or force, not %q" $mode) -}}
{{- end -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int (get $min $mode)) -}}
{{- fail (printf "terminationGracePeriodSeconds %d is too short for agent.shutdownMode %s: it needs at least %d" (int .Values.terminationGracePeriodSeconds) $mode (int (get $min $mode))) -}}
{{- end -}}
{{- end -}}

{{- define "drover.validateExtraEnv" -}}
{{- $reserved := splitList " " (include "drover.reservedEnv" .) -}}
{{- /* Every clash is named in one message: a user fixes them all in one go, not one render at a time. */ -}}
{{- $clashes := list -}}
{{- range $name, $_ := .Values.extraEnv -}}
{{- if has $name $reserved -}}
{{- $clashes = append $clashes (printf "extraEnv.%s is set by the chart itself" $name) -}}
{{- end -}}
{{- end -}}
{{- /* Run pods (the controller charts): what the chart and the controller set in the worker and runner containers. */ -}}
{{- if .Values.task -}}
{{- $task := dict "worker" (list "HTTP_PROXY" "HTTPS_PROXY" "NO_PROXY" "DROVER_AGENT_HEALTH_PORT" "DROVER_CA_CERT" "DROVER_URL" "DROVER_EXEC_DIR" "DROVER_WORKER_RUN_DIR" "DROVER_WORKER_SECRET_DIR" "DROVER_AGENT_WORKER_ON_STOP_ACTION" "DROVER_AGENT_GRACE_PERIOD_SECONDS" "DROVER_AGENT_CACHE_DIR" "DROVER_AGENT_PROVIDER_CACHE_ENABLED" "DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB" "DROVER_AGENT_MODULE_CACHE_ENABLED" "DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB" "DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB" "DROVER_AGENT_ENGINE_PATH_FALLBACK" "DROVER_AGENT_TERRAFORM_RELEASES_URL" "DROVER_AGENT_TOFU_RELEASES_URL" "DROVER_AGENT_TOFU_VERSIONS_URL" "DROVER_AGENT_ENGINE_SIGNING_KEYS" "DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS") "runner" (list "HTTP_PROXY" "HTTPS_PROXY" "NO_PROXY" "HOME" "SSL_CERT_FILE" "DROVER_EXEC_DIR") -}}
{{- range $container, $names := $task -}}
{{- range $name, $_ := (get $.Values.task $container).extraEnv -}}
{{- if has $name $names -}}
{{- $clashes = append $clashes (printf "task.%s.extraEnv.%s is set by the chart or the controller itself" $container $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $clashes -}}
{{- fail (printf "%s; use the matching chart values instead" (join "; " $clashes)) -}}
{{- end -}}
{{- end -}}

{{- define "drover.validateToken" -}}
{{- if and (not .Values.agent.token) (not .Values.agent.tokenExistingSecret.name) -}}
{{- fail "set agent.token or agent.tokenExistingSecret.name: the agent needs a pool token (drover token create --pool <pool>)" -}}
{{- end -}}
{{- end -}}

{{/* Env shared by agent containers: token by reference, proxy, CA bundle, stop settings. */}}
{{- define "drover.commonEnv" -}}
- name: DROVER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "drover.tokenSecretName" . }}
      key: {{ .Values.agent.tokenExistingSecret.key | default "token" }}
{{- with .Values.agent.url }}
- name: DROVER_URL
  value: {{ . | quote }}
{{- end }}
{{- /* A VCS agent (agent-local's mode vcs) has no stop action: it refuses the variable. */}}
{{- if ne (toString .Values.mode) "vcs" }}
- name: DROVER_AGENT_WORKER_ON_STOP_ACTION
  value: {{ .Values.agent.shutdownMode | quote }}
{{- end }}
- name: DROVER_AGENT_GRACE_PERIOD_SECONDS
  value: {{ .Values.terminationGracePeriodSeconds | quote }}
- name: DROVER_AGENT_HEALTH_PORT
  value: {{ .Values.agent.healthPort | quote }}
- name: DROVER_AGENT_LOG_FORMAT
  value: {{ .Values.agent.logFormat | quote }}
- name: DROVER_AGENT_DEBUG
  value: {{ .Values.agent.debug | quote }}
{{- if or .Values.agent.caBundle .Values.agent.caBundleSecret.name }}
- name: DROVER_CA_CERT
  value: /etc/drover/ca/{{ .Values.agent.caBundleSecret.key | default "ca.crt" }}
{{- end }}
{{- with .Values.proxy.httpProxy }}
- name: HTTP_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with .Values.proxy.httpsProxy }}
- name: HTTPS_PROXY
  value: {{ . | quote }}
{{- end }}
{{- with .Values.proxy.noProxy }}
- name: NO_PROXY
  value: {{ . | quote }}
{{- end }}
{{- range $name, $value := .Values.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{- define "drover.caSecretName" -}}
{{- default (printf "%s-ca" (include "drover.fullname" .)) .Values.agent.caBundleSecret.name -}}
{{- end -}}

{{/*
PodDisruptionBudget spec lines (minAvailable or maxUnavailable) for `replicas` pods, or nothing
when no pod could ever be evicted under them (a drain would wait forever). Percentages round
up, as Kubernetes rounds them.
*/}}
{{- define "drover.pdbSpec" -}}
{{- $replicas := int .replicas -}}
{{- $min := toString (.pdb.minAvailable | default "") -}}
{{- $max := toString .pdb.maxUnavailable -}}
{{- $field := "maxUnavailable" -}}
{{- $value := $max -}}
{{- if ne $min "" -}}
{{- $field = "minAvailable" -}}
{{- $value = $min -}}
{{- end -}}
{{- $n := 0 -}}
{{- if hasSuffix "%" $value -}}
{{- $n = div (add (mul $replicas (int (trimSuffix "%" $value))) 99) 100 -}}
{{- else -}}
{{- $n = int $value -}}
{{- end -}}
{{- $allowed := ternary (sub $replicas $n) $n (eq $field "minAvailable") -}}
{{- if gt (int $allowed) 0 -}}
{{ $field }}: {{ if hasSuffix "%" $value }}{{ $value | quote }}{{ else }}{{ int $value }}{{ end }}
{{- end -}}
{{- end -}}

{{/* A claim's storageClassName: unset uses the cluster default, "-" asks for no class at all (""). */}}
{{- define "drover.storageClassName" -}}
{{- if eq . "-" -}}
storageClassName: ""
{{- else if . -}}
storageClassName: {{ . | quote }}
{{- end -}}
{{- end -}}

{{/* Pod annotations that change with the chart's token and CA Secrets, so `helm upgrade` with a new one restarts the pods. */}}
{{- define "drover.secretChecksums" -}}
checksum/secrets: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- with .Values.agent.tokenExistingSecret.name }}
checksum/token-secret-ref: {{ printf "%s/%s" . $.Values.agent.tokenExistingSecret.key | sha256sum | trunc 16 }}
{{- end }}
{{- end -}}

{{/*
The policy that keeps pods from the cloud metadata services while everything else stays
reachable. `selector`: the matchLabels (YAML) of the pods it holds. With flavor kubernetes, a
NetworkPolicy: ipBlock selects external addresses only on some CNIs (Cilium matches neither pods
nor nodes nor the API server by ipBlock), so the pods of every namespace and DNS on any address
(CoreDNS, NodeLocal DNS's 169.254.20.10) are allowed by their own rules. With flavor cilium, a
CiliumNetworkPolicy: every entity (the API server and nodes too) except the metadata addresses.
*/}}
{{- define "drover.metadataPolicy" -}}
{{- $v4 := list "169.254.169.254/32" "100.100.100.200/32" "168.63.129.16/32" -}}
{{- $v6 := list "fd00:ec2::254/128" "fd20:ce::254/128" "fe80::a9fe:a9fe/128" -}}
{{- if eq .root.Values.networkPolicy.flavor "cilium" }}
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata:
  name: {{ .name }}
  labels:
    {{- include "drover.labels" .root | nindent 4 }}
spec:
  endpointSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  egress:
    - toEntities: [world, cluster]
  # A deny wins over every allow.
  egressDeny:
    - toCIDR: {{ concat $v4 $v6 | toJson }}
{{- else }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}
  labels:
    {{- include "drover.labels" .root | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  policyTypes: [Egress]
  egress:
    # AWS (IPv4, IPv6 on Nitro), GCE (IPv6), Alibaba Cloud, OpenStack (IPv6) and Azure's WireServer.
    - to:
        - ipBlock:
            cidr: 0.0.0.0/0
            except: {{ $v4 | toJson }}
        - ipBlock:
            cidr: ::/0
            except: {{ $v6 | toJson }}
    # Pods of every namespace (an in-cluster Drover server, a proxy, CoreDNS) by selector.
    - to:
        - namespaceSelector: {}
    - ports:
        - { port: 53, protocol: UDP }
        - { port: 53, protocol: TCP }
{{- end }}
{{- end -}}

{{/* The /metrics endpoint of a ServiceMonitor or PodMonitor. */}}
{{- define "drover.scrapeEndpoint" -}}
- port: health
  path: /metrics
  interval: {{ .Values.serviceMonitor.interval }}
  {{- with .Values.serviceMonitor.scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  {{- with .Values.serviceMonitor.relabelings }}
  relabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
