{{- /*
  The cache helpers of every agent chart.
*/ -}}

{{- /*
  A size as a whole number of MiB (rounded down), from any form of a Kubernetes quantity: plain
  bytes, decimal suffixes (k, M, G, T, P, E), binary ones (Ki, Mi, Gi, Ti, Pi, Ei), an exponent
  (5e9) and a fraction (1.5Gi). A size under 1Mi or anything else fails the render.
*/ -}}
{{- define "drover.sizeMb" -}}
{{- $v := toString .value -}}
{{- $form := `^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$` -}}
{{- if not (regexMatch $form $v) -}}
{{- fail (printf "%s must be a Kubernetes quantity such as 20Gi, 10G or 1.5Gi, got %q" .name $v) -}}
{{- end -}}
{{- $suffix := regexReplaceAll $form $v "${2}" -}}
{{- $factors := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $bytes := 0.0 -}}
{{- if hasKey $factors $suffix -}}
{{- $bytes = mulf (float64 (regexReplaceAll $form $v "${1}")) (get $factors $suffix) -}}
{{- else -}}
{{- /* An exponent: the whole text is a float. */ -}}
{{- $bytes = float64 (trimPrefix "+" $v) -}}
{{- end -}}
{{- $mb := floor (divf $bytes 1048576) -}}
{{- if lt $mb 1.0 -}}
{{- fail (printf "%s must be at least 1Mi, got %q" .name $v) -}}
{{- end -}}
{{- int64 $mb -}}
{{- end -}}

{{- /*
  The size in MiB of the cache's emptyDir, or "" when the cache is on a claim (onEmptyDir false):
  its sizeLimit is only read when that emptyDir is the one used.
*/ -}}
{{- define "drover.cacheEmptyDirMb" -}}
{{- if .onEmptyDir -}}
{{- include "drover.sizeMb" (dict "value" .Values.persistence.cache.emptyDir.sizeLimit "name" "persistence.cache.emptyDir.sizeLimit") -}}
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
