{{- /* The prefix of every object's name: the release name (as the chart has
always named them), or fullnameOverride. */ -}}
{{- define "nudge.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- /* The app.kubernetes.io/name label: nudge, or nameOverride. */ -}}
{{- define "nudge.name" -}}
{{- default "nudge" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* The labels that select nudge's pods (fixed for the life of a release). */ -}}
{{- define "nudge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nudge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* The labels of every object the chart renders. */ -}}
{{- define "nudge.labels" -}}
{{ include "nudge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "nudge.serviceAccountName" -}}
{{- default (include "nudge.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- /* registry/repository:tag@digest; the tag defaults to appVersion. */ -}}
{{- define "nudge.image" -}}
{{- $image := .Values.image }}
{{- if $image.registry }}{{ $image.registry }}/{{ end }}{{ $image.repository }}
{{- printf ":%s" (default .Chart.AppVersion $image.tag) }}
{{- with $image.digest }}@{{ . }}{{ end }}
{{- end }}

{{- /* Where a Secret named by an existingSecret value is mounted. */ -}}
{{- define "nudge.secretsDir" -}}/etc/nudge/secrets{{- end }}

{{- /* Every Secret the chart mounts for a secret-bearing setting, as a list of
{value, volume, secret, dir, files: {configKey: fileName}, at: [path in config]} (YAML;
given the root context). The config keys get the file's path, never its
content. */ -}}
{{- define "nudge.secretMounts" -}}
{{- $dir := include "nudge.secretsDir" . }}
{{- $mounts := list }}
{{- $clusters := dict "" (dict "settings" .Values.consul "at" (list "sources" "consul")) }}
{{- range $name, $settings := .Values.consul.instances }}
{{- /* An instance's keys default as the default cluster's do. */}}
{{- $settings = mergeOverwrite (dict "token" (dict "key" "token") "tls" (dict "caKey" "ca.crt")) (deepCopy $settings) }}
{{- $_ := set $clusters $name (dict "settings" $settings "at" (list "sources" "consul" "instances" $name)) }}
{{- end }}
{{- range $name, $cluster := $clusters }}
{{- $suffix := ternary "" (printf "-%s" $name) (eq $name "") }}
{{- $values := ternary "consul" (printf "consul.instances.%s" $name) (eq $name "") }}
{{- with $cluster.settings.token }}
{{- if .existingSecret }}
{{- $mounts = append $mounts (dict "value" (printf "%s.token" $values) "volume" (printf "consul-token%s" $suffix) "secret" .existingSecret "dir" (printf "%s/consul-token%s" $dir $suffix) "files" (dict "token_file" .key) "at" $cluster.at) }}
{{- end }}
{{- end }}
{{- with $cluster.settings.tls }}
{{- if .existingSecret }}
{{- $value := printf "%s.tls" $values }}
{{- if not (or .caKey .certKey .keyKey) }}
{{- fail (printf "%s.existingSecret is set, but none of caKey, certKey, keyKey names a key of it" $value) }}
{{- end }}
{{- if ne (empty .certKey) (empty .keyKey) }}
{{- fail (printf "%s.certKey and %s.keyKey: set both (a client certificate and its key) or neither" $value $value) }}
{{- end }}
{{- $files := dict }}
{{- if .caKey }}{{ $_ := set $files "ca_file" .caKey }}{{ end }}
{{- if .certKey }}{{ $_ := set $files "cert_file" .certKey }}{{ end }}
{{- if .keyKey }}{{ $_ := set $files "key_file" .keyKey }}{{ end }}
{{- $mounts = append $mounts (dict "value" $value "volume" (printf "consul-tls%s" $suffix) "secret" .existingSecret "dir" (printf "%s/consul-tls%s" $dir $suffix) "files" $files "at" (append $cluster.at "tls")) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.notify.url }}
{{- if .existingSecret }}
{{- $mounts = append $mounts (dict "value" "notify.url" "volume" "notify-url" "secret" .existingSecret "dir" (printf "%s/notify-url" $dir) "files" (dict "url_file" .key) "at" (list "notify")) }}
{{- end }}
{{- end }}
{{- toYaml $mounts }}
{{- end }}

{{- /* Fails when a secret value is written into config: it would be rendered
into the ConfigMap in plain text. */ -}}
{{- define "nudge.refuseSecretsInConfig" -}}
{{- $config := .Values.config }}
{{- $consul := dig "sources" "consul" dict $config }}
{{- if $consul.token }}
{{- fail "config.sources.consul.token would be written into a ConfigMap in plain text: put the token in a Secret and set consul.token.existingSecret (and consul.token.key)" }}
{{- end }}
{{- range $name, $instance := ($consul.instances | default dict) }}
{{- if $instance.token }}
{{- fail (printf "config.sources.consul.instances.%s.token would be written into a ConfigMap in plain text: put the token in a Secret and set consul.instances.%s.token.existingSecret" $name $name) }}
{{- end }}
{{- end }}
{{- if dig "notify" "url" "" $config }}
{{- fail "config.notify.url would be written into a ConfigMap in plain text (it embeds a token): put it in a Secret and set notify.url.existingSecret (and notify.url.key)" }}
{{- end }}
{{- range $name, $_ := .Values.consul.instances }}
{{- if not (hasKey ($consul.instances | default dict) $name) }}
{{- fail (printf "consul.instances.%s: config.sources.consul.instances.%s is not configured (it needs at least its address)" $name $name) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* nudge's config.toml: config, with the paths of the mounted secrets and
the release's namespace-independent settings merged in. */ -}}
{{- define "nudge.configToml" -}}
{{- include "nudge.refuseSecretsInConfig" . }}
{{- $config := deepCopy .Values.config }}
{{- if hasKey ($config.engine | default dict) "snapshots" }}
{{- fail "config.engine.snapshots: set snapshots.enabled (and snapshots.allWorkloads) instead, which also grant the RBAC snapshots need" }}
{{- end }}
{{- if .Values.snapshots.enabled }}
{{- if not (hasKey $config "engine") }}{{ $_ := set $config "engine" dict }}{{ end }}
{{- $_ := set $config.engine "snapshots" (ternary "all" "opt-in" .Values.snapshots.allWorkloads) }}
{{- end }}
{{- range (include "nudge.secretMounts" . | fromYamlArray) }}
{{- $section := $config }}
{{- range .at }}
{{- if not (hasKey $section .) }}{{ $_ := set $section . dict }}{{ end }}
{{- $section = index $section . }}
{{- end }}
{{- $mount := . }}
{{- range $key, $file := .files }}
{{- if index $section $key }}
{{- fail (printf "config.%s.%s and %s.existingSecret both set it: set one of the two" (join "." $mount.at) $key $mount.value) }}
{{- end }}
{{- $_ := set $section $key (printf "%s/%s" $mount.dir $file) }}
{{- end }}
{{- end }}
{{- if not (hasKey $config "leader_election") }}{{ $_ := set $config "leader_election" dict }}{{ end }}
{{- $_ := set $config.leader_election "lease_name" (include "nudge.leaseName" .) }}
{{- toToml $config }}
{{- end }}

{{- /* The leader election Lease: the release's own unless named, so that two
releases in one namespace each elect a leader. */ -}}
{{- define "nudge.leaseName" -}}
{{- default (include "nudge.fullname" .) (dig "leader_election" "lease_name" "" .Values.config) }}
{{- end }}

{{- /* The Secret of the webhook's certificate: the release's own unless named,
so that two releases in one namespace do not overwrite each other's. */ -}}
{{- define "nudge.webhookTlsSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "nudge.fullname" .)) .Values.webhook.tlsSecretName }}
{{- end }}

{{- /* The MutatingWebhookConfiguration (cluster-scoped): the release's own
unless named, so that a second release can be installed. */ -}}
{{- define "nudge.webhookConfigurationName" -}}
{{- default (include "nudge.fullname" .) .Values.webhook.configurationName }}
{{- end }}

{{- /* PromQL label matchers selecting nudge's own series. */ -}}
{{- define "nudge.metricsSelector" -}}
{{- default (printf "job=%q,namespace=%q" (printf "%s-metrics" (include "nudge.fullname" .)) .Release.Namespace) .Values.prometheusRule.selector }}
{{- end }}
