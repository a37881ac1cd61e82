{{- /* The chart's own token and CA Secrets (the task CA of the controller charts too). */ -}}
{{- define "drover.secrets" -}}
{{- include "drover.validateToken" . -}}
{{- if and .Values.agent.token (not .Values.agent.tokenExistingSecret.name) }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "drover.tokenSecretName" . }}
  labels:
    {{- include "drover.labels" . | nindent 4 }}
    {{- with .Values.secret.labels }}{{ toYaml . | nindent 4 }}{{ end }}
  {{- with .Values.secret.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
type: Opaque
stringData:
  token: {{ .Values.agent.token | quote }}
{{- end }}
{{- if and .Values.agent.caBundle (not .Values.agent.caBundleSecret.name) }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "drover.caSecretName" . }}
  labels:
    {{- include "drover.labels" . | nindent 4 }}
    {{- with .Values.secret.labels }}{{ toYaml . | nindent 4 }}{{ end }}
  {{- with .Values.secret.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
type: Opaque
stringData:
  {{ .Values.agent.caBundleSecret.key | default "ca.crt" }}: {{ .Values.agent.caBundle | quote }}
{{- end }}
{{- if and .Values.task .Values.task.caBundle (not .Values.task.caBundleSecret.name) }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "drover.taskCaSecretName" . }}
  labels:
    {{- include "drover.labels" . | nindent 4 }}
    {{- with .Values.secret.labels }}{{ toYaml . | nindent 4 }}{{ end }}
  {{- with .Values.secret.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
type: Opaque
stringData:
  {{ .Values.task.caBundleSecret.key | default "ca.crt" }}: {{ .Values.task.caBundle | quote }}
{{- end }}
{{- end -}}
