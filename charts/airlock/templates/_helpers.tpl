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
{{- define "airlock.managerTenantRole" -}}{{ include "airlock.componentName" (dict "ctx" . "component" "manager-tenant") }}{{- end -}}
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

{{/* Images: one repository and tag for all of Airlock's own images; a digest in image.digests pins one. */}}
{{- define "airlock.tag" -}}{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{- define "airlock.image" -}}
{{- $repo := trimSuffix "/" .ctx.Values.image.repository -}}
{{- $digest := index (default dict .ctx.Values.image.digests) .name | default "" -}}
{{- if $digest -}}
{{- printf "%s/%s@%s" $repo .name $digest -}}
{{- else -}}
{{- printf "%s/%s:%s" $repo .name (include "airlock.tag" .ctx) -}}
{{- end -}}
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

{{/*
airlock.managerRoles: the rules of files/manager-role.yaml (controller-gen's two ClusterRoles), as YAML
{name: rules}. Fails when a role is missing, so a stale copy cannot render a manager without permissions.
*/}}
{{- define "airlock.managerRoles" -}}
{{- $out := dict -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.Files.Get "files/manager-role.yaml") -1 -}}
{{- $role := fromYaml $doc -}}
{{- if and $role $role.metadata -}}{{- $_ := set $out $role.metadata.name $role.rules -}}{{- end -}}
{{- end -}}
{{- range $name := list "airlock-manager" "airlock-manager-tenant" -}}
{{- if not (index $out $name) -}}{{- fail (printf "files/manager-role.yaml has no rules for %s: run `make chart-sync`" $name) -}}{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
(dict "ctx" $ "name" NAME): fails unless NAME may be a tenant. A tenant lets the gateway exec into every pod
and read and create Secrets there, and the manager create pods: never Kubernetes' own namespaces (kube-*),
default, nor Airlock's own (the release's, the API keys'). The CLI refuses the same (admin.SystemNamespaceError).
*/}}
{{- define "airlock.checkTenantName" -}}
{{- $n := .name -}}
{{- if eq $n "default" -}}
{{- fail (printf "tenants: %s cannot be a tenant: it is Kubernetes' default namespace, where any workload may run; pick another name" $n) -}}
{{- else if hasPrefix "kube-" $n -}}
{{- fail (printf "tenants: %s cannot be a tenant: kube-* namespaces are Kubernetes' own (the gateway could exec into its system pods); pick another name" $n) -}}
{{- else if or (eq $n .ctx.Release.Namespace) (eq $n (include "airlock.keyNamespace" .ctx)) -}}
{{- fail (printf "tenants: %s cannot be a tenant: it is Airlock's own (the release's or the API keys' namespace); pick another name" $n) -}}
{{- end -}}
{{- end -}}

{{/*
The API keys' namespace (gateway.keyNamespace): a namespace of its own, so that the gateway's Secret
permission there reaches no other Secret (the release namespace holds the exec guard's certificate).
*/}}
{{- define "airlock.keyNamespace" -}}
{{- $ns := .Values.gateway.keyNamespace -}}
{{- if or (eq $ns "default") (hasPrefix "kube-" $ns) -}}
{{- fail (printf "gateway.keyNamespace %s: the gateway may read every Secret in it, so it must be a namespace of Airlock's own, not Kubernetes'" $ns) -}}
{{- else if eq $ns .Release.Namespace -}}
{{- fail (printf "gateway.keyNamespace must not be the release namespace %s: the gateway could then read every Secret there, the exec guard's certificate included" $ns) -}}
{{- end -}}
{{- $ns -}}
{{- end -}}
