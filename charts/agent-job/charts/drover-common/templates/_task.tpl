{{- /* The run pods of the controller charts (agent-job, agent-k8s). */ -}}

{{- define "drover.runnerImage" -}}
{{ include "drover.withRegistry" (dict "ref" .Values.task.runner.image "registry" .Values.global.imageRegistry) }}
{{- end -}}

{{/* The task CA bundle (runs only): set when task.caBundle or task.caBundleSecret.name is. */}}
{{- define "drover.taskCaSecretName" -}}
{{- default (printf "%s-task-ca" (include "drover.fullname" .)) .Values.task.caBundleSecret.name -}}
{{- end -}}

{{/* Proxy settings of task pods. */}}
{{- define "drover.taskEnv" -}}
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
{{- end -}}
