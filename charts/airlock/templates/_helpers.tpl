{{/*
Names. Kubernetes names and label values stop at 63 characters; a suffixed component name is made by cutting
the prefix first, so "<prefix>-manager" and "<prefix>-gateway" can never truncate into the same name.
*/}}
{{- define "airlock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "airlock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* airlock.componentName: (dict "ctx" $ "component" "manager") → "<fullname cut to fit>-manager". */}}
{{- define "airlock.componentName" -}}
{{- $suffix := printf "-%s" .component -}}
{{- $prefix := include "airlock.fullname" .ctx | trunc (int (sub 63 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s%s" $prefix $suffix -}}
{{- end -}}

{{- define "airlock.managerName" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "manager") }}{{- end -}}
{{- define "airlock.gatewayName" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "gateway") }}{{- end -}}

{{- define "airlock.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "airlock.labels" -}}
helm.sh/chart: {{ include "airlock.chart" . }}
{{ include "airlock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: airlock
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "airlock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* (dict "ctx" $ "component" "manager"): labels and selector labels of one component. */}}
{{- define "airlock.componentLabels" -}}
{{ include "airlock.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "airlock.componentSelectorLabels" -}}
{{ include "airlock.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Images: one repository and tag for all of Airlock's own images. */}}
{{- define "airlock.tag" -}}{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{- define "airlock.image" -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .ctx.Values.image.repository) .name (include "airlock.tag" .ctx) -}}
{{- end -}}
{{- define "airlock.initImage" -}}
{{- default (include "airlock.image" (dict "ctx" . "name" "init")) .Values.manager.initImage -}}
{{- end -}}

{{/*
The manager's default runtime class: the value if set, else the first runtime class this chart installs.
Failing here beats a manager that creates pods naming a runtime class that does not exist.
*/}}
{{- define "airlock.defaultRuntimeClass" -}}
{{- if .Values.manager.defaultRuntimeClass -}}
{{- .Values.manager.defaultRuntimeClass -}}
{{- else if .Values.runtimeClasses.gvisor.enabled -}}
gvisor
{{- else if .Values.runtimeClasses.kata.enabled -}}
kata
{{- else -}}
{{- fail "manager.defaultRuntimeClass must be set when neither runtimeClasses.gvisor nor runtimeClasses.kata is enabled" -}}
{{- end -}}
{{- end -}}

{{/* Pod and container security contexts that pass the "restricted" Pod Security Standard. */}}
{{- define "airlock.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "airlock.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* (dict "ctx" $ "tenant" . "key" KEY): a tenant's setting KEY, else tenantDefaults' ("hasKey" keeps an explicit 0). */}}
{{- define "airlock.tenantSetting" -}}
{{- if hasKey .tenant .key -}}{{ index .tenant .key }}{{- else -}}{{ index .ctx.Values.tenantDefaults .key }}{{- end -}}
{{- end -}}

{{/* airlock.seconds "1m30s" → 90. Durations are limited to h/m/s by the schema. */}}
{{- define "airlock.seconds" -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[hms]" . -1 -}}
{{- $n := int (trimSuffix "h" (trimSuffix "m" (trimSuffix "s" .))) -}}
{{- if hasSuffix "h" . -}}{{- $total = add $total (mul $n 3600) -}}
{{- else if hasSuffix "m" . -}}{{- $total = add $total (mul $n 60) -}}
{{- else -}}{{- $total = add $total $n -}}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The exec guard (manager.execWebhook) guards the gateway's identity, so it exists only with the gateway.
Names of its objects, shared by the webhook objects and the manager's flags.
*/}}
{{- define "airlock.execWebhook" -}}{{ if and .Values.manager.execWebhook.enabled .Values.gateway.enabled }}true{{ end }}{{- end -}}
{{- define "airlock.execWebhookConfig" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "exec-guard") }}{{- end -}}
{{- define "airlock.execWebhookService" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "manager-webhook") }}{{- end -}}
{{- define "airlock.execWebhookSecret" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "manager-webhook-cert") }}{{- end -}}

{{/* The token Secret of the metrics scraper ServiceAccount (metrics-rbac.yaml), referenced by the ServiceMonitor. */}}
{{- define "airlock.metricsScraperSecret" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "metrics-scraper-token") }}{{- end -}}
{{- define "airlock.egressProxyName" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "egress-proxy") }}{{- end -}}
