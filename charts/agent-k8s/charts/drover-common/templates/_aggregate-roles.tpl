{{- /* The controller charts' ClusterRoles that extend admin, edit and view to agenttasks. */ -}}
{{- define "drover.aggregateRoles" -}}
{{- if .Values.rbac.aggregateClusterRoles }}
{{- /*
The built-in admin, edit and view roles do not cover custom resources. Aggregated into them, a
namespace admin holds what the controller's Role grants on agenttasks, so may create that Role
(RBAC refuses to grant what the granter lacks), and users see the task templates.
*/}}
{{- range $role, $verbs := dict "admin" (list "get" "list" "watch" "create" "update" "patch" "delete" "deletecollection") "edit" (list "get" "list" "watch" "create" "update" "patch" "delete" "deletecollection") "view" (list "get" "list" "watch") }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: drover-agenttasks-{{ $role }}
  labels:
    {{- include "drover.labels" $ | nindent 4 }}
    rbac.authorization.k8s.io/aggregate-to-{{ $role }}: "true"
rules:
  - apiGroups: ["drover.dev"]
    resources: ["agenttasks"]
    verbs: {{ toJson $verbs }}
{{- end }}
{{- end }}
{{- end -}}
