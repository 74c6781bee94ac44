{{/* The name of the release's objects. */}}
{{- define "stubvisor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the release's pods. */}}
{{- define "stubvisor.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "stubvisor.labels" -}}
{{ include "stubvisor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The name of the model repository's claim. */}}
{{- define "stubvisor.claimName" -}}
{{- if .Values.modelRepository.pvc.create -}}
{{ include "stubvisor.fullname" . }}-models
{{- else -}}
{{ .Values.modelRepository.pvc.claimName }}
{{- end -}}
{{- end -}}

{{/* The container securityContext of the server and the init container. */}}
{{- define "stubvisor.securityContext" -}}
runAsUser: 1000
runAsGroup: 1000
runAsNonRoot: true
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}
