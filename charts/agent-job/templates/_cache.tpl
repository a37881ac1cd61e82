{{- /*
  The cache helpers of every agent chart. charts/agent-local, agent-job and agent-k8s hold the
  same copy of this file (test/charts/cache-values.test.ts fails when they differ): edit one,
  copy it to the others.
*/ -}}

{{/* A size in Mi, Gi or Ti as a number of MB; anything else fails the render. */}}
{{- define "drover.sizeMb" -}}
{{- $v := toString .value -}}
{{- if regexMatch "^[1-9][0-9]*Mi$" $v -}}{{ trimSuffix "Mi" $v }}
{{- else if regexMatch "^[1-9][0-9]*Gi$" $v -}}{{ mul (trimSuffix "Gi" $v | atoi) 1024 }}
{{- else if regexMatch "^[1-9][0-9]*Ti$" $v -}}{{ mul (trimSuffix "Ti" $v | atoi) 1048576 }}
{{- else -}}{{ fail (printf "%s must be a size in Mi, Gi or Ti such as 20Gi, got %q" .name $v) }}
{{- end -}}
{{- end -}}

{{- /*
  The cache settings of a process that keeps the caches (the local agent, a task pod's or a
  node's worker), from agent.providerCache, agent.moduleCache, agent.binaryCache and
  agent.engines. Called with (dict "Values" .Values "volumeMb" N): N is the size in MB of the
  emptyDir the cache lives on, or "" on a claim or hostPath. On an emptyDir the soft limits of
  the caches in use are scaled down together to fit 4/5 of it (the rest holds downloads being
  unpacked), so that eviction acts before kubelet evicts the pod for exceeding the emptyDir.
*/ -}}
{{- define "drover.cacheEnv" -}}
{{- $a := .Values.agent -}}
{{- $p := include "drover.sizeMb" (dict "value" $a.providerCache.sizeLimit "name" "agent.providerCache.sizeLimit") | atoi -}}
{{- $m := include "drover.sizeMb" (dict "value" $a.moduleCache.sizeLimit "name" "agent.moduleCache.sizeLimit") | atoi -}}
{{- $b := include "drover.sizeMb" (dict "value" $a.binaryCache.sizeLimit "name" "agent.binaryCache.sizeLimit") | atoi -}}
{{- if .volumeMb -}}
{{- $room := div (mul (atoi (toString .volumeMb)) 4) 5 -}}
{{- $sum := add (ternary $p 0 $a.providerCache.enabled) (ternary $m 0 $a.moduleCache.enabled) $b -}}
{{- if gt $sum $room -}}
{{- $p = max 1 (div (mul $p $room) $sum) -}}
{{- $m = max 1 (div (mul $m $room) $sum) -}}
{{- $b = max 1 (div (mul $b $room) $sum) -}}
{{- end -}}
{{- end }}
- name: DROVER_AGENT_PROVIDER_CACHE_ENABLED
  value: {{ $a.providerCache.enabled | quote }}
- name: DROVER_AGENT_PROVIDER_CACHE_SIZE_LIMIT_MB
  value: {{ $p | quote }}
- name: DROVER_AGENT_MODULE_CACHE_ENABLED
  value: {{ $a.moduleCache.enabled | quote }}
- name: DROVER_AGENT_MODULE_CACHE_SIZE_LIMIT_MB
  value: {{ $m | quote }}
- name: DROVER_AGENT_BINARY_CACHE_SIZE_LIMIT_MB
  value: {{ $b | quote }}
- name: DROVER_AGENT_ENGINE_PATH_FALLBACK
  value: {{ $a.engines.pathFallback | quote }}
{{- with $a.engines.terraformReleasesUrl }}
- name: DROVER_AGENT_TERRAFORM_RELEASES_URL
  value: {{ . | quote }}
{{- end }}
{{- with $a.engines.tofuReleasesUrl }}
- name: DROVER_AGENT_TOFU_RELEASES_URL
  value: {{ . | quote }}
{{- end }}
{{- with $a.engines.tofuVersionsUrl }}
- name: DROVER_AGENT_TOFU_VERSIONS_URL
  value: {{ . | quote }}
{{- end }}
{{- with $a.engines.signingKeys }}
{{- /* Public keys, passed as base64 of the armored text (the setting takes a path or that). */}}
- name: DROVER_AGENT_ENGINE_SIGNING_KEYS
  value: {{ . | b64enc | quote }}
{{- end }}
{{- with $a.engines.trustedFingerprints }}
- name: DROVER_AGENT_ENGINE_TRUSTED_FINGERPRINTS
  value: {{ . | quote }}
{{- end }}
{{- end -}}
