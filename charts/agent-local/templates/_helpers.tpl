{{- define "drover.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "drover.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Environment variables the chart owns; extraEnv may not set them. */}}
{{- define "drover.reservedEnv" -}}
DROVER_URL DROVER_TOKEN DROVER_TOKEN_FILE DROVER_AGENT_DRIVER DROVER_AGENT_CONCURRENCY DROVER_AGENT_NAME DROVER_AGENT_WORKER_ON_STOP_ACTION DROVER_AGENT_GRACE_PERIOD_SECONDS DROVER_AGENT_DATA_DIR DROVER_AGENT_CACHE_DIR DROVER_AGENT_PROVIDER_CACHE_ENABLED DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB DROVER_AGENT_MODULE_CACHE_ENABLED DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB DROVER_AGENT_ENGINE_PATH_FALLBACK DROVER_AGENT_TERRAFORM_RELEASES_URL DROVER_AGENT_TOFU_RELEASES_URL DROVER_AGENT_TOFU_VERSIONS_URL DROVER_AGENT_ENGINE_SIGNING_KEYS DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS DROVER_AGENT_HEALTH_PORT DROVER_AGENT_LOG_FORMAT DROVER_AGENT_DEBUG DROVER_CA_CERT DROVER_AGENT_KUBERNETES_TASK_TEMPLATE DROVER_AGENT_KUBERNETES_NAMESPACE DROVER_AGENT_STATUS_FILE DROVER_AGENT_VCS_CONNECTIONS_FILE DROVER_AGENT_VCS_CONCURRENCY DROVER_AGENT_VCS_WEBHOOK_PORT HTTP_PROXY HTTPS_PROXY NO_PROXY
{{- end -}}

{{/*
The Deployment strategy: rollingUpdate only with type RollingUpdate (the API refuses it next to
Recreate). A cache on a ReadWriteOnce claim can be attached by one node at a time, so a second
replica, or a new pod started before the old one stops, would wait for it forever: such a
claim gets Recreate, and more than one replica is refused.
*/}}
{{- define "drover.strategy" -}}
{{- $type := .Values.strategy.type | default "RollingUpdate" -}}
{{- $p := .Values.persistence -}}
{{- if and $p.enabled (has $p.persistentVolumeClaim.accessMode (list "ReadWriteOnce" "ReadWriteOncePod")) -}}
{{- $most := ternary (int .Values.autoscaling.keda.maxReplicaCount) (int .Values.replicaCount) .Values.autoscaling.keda.enabled -}}
{{- if gt $most 1 -}}
{{- fail (printf "persistence on a %s claim can be mounted by one pod only, but up to %d agent pods would run: use accessMode ReadWriteMany (a RWX StorageClass, e.g. EFS, Filestore, Azure Files, NFS) or one replica" $p.persistentVolumeClaim.accessMode $most) -}}
{{- end -}}
{{- $type = "Recreate" -}}
{{- end -}}
type: {{ $type }}
{{- if eq $type "RollingUpdate" }}
{{- with .Values.strategy.rollingUpdate }}
rollingUpdate:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}
