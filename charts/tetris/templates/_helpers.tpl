{{/*
_helpers.tpl - names, labels and the pieces every workload of the chart
shares (image, API credentials, size checks).
*/}}

{{/* The namespace tetris' components run in. */}}
{{- define "tetris.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The namespace of the model manifest ConfigMaps. */}}
{{- define "tetris.manifestNamespace" -}}
{{- default (include "tetris.namespace" .) .Values.manifestNamespace -}}
{{- end -}}

{{/* Labels of every object; "tetris.labels" with a component name. */}}
{{- define "tetris.labels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: tetris
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* What a workload's selector matches: stable across upgrades. */}}
{{- define "tetris.selectorLabels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/*
Cluster-scoped objects are shared by every release: their names carry the
release's namespace and name unless the release is the usual one.
*/}}
{{- define "tetris.clusterName" -}}
{{- if and (eq .root.Release.Name "tetris") (eq (include "tetris.namespace" .root) "tetris-system") -}}
{{- .name -}}
{{- else -}}
{{- printf "%s-%s-%s" .name (include "tetris.namespace" .root) .root.Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The project image. */}}
{{- define "tetris.image" -}}
image: {{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{/* The kube-scheduler image: the cluster's version unless a tag is given. */}}
{{- define "tetris.schedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag | toString -}}
{{- if not $tag -}}
{{- $tag = regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{- end -}}
image: {{ printf "%s:%s" .Values.scheduler.image.repository $tag | quote }}
imagePullPolicy: {{ .Values.scheduler.image.pullPolicy }}
{{- end -}}

{{/* Pod-level settings every pod of the chart shares: its own API
credentials replace the automatic token; image pull secrets. */}}
{{- define "tetris.podCommon" -}}
{{- if .Values.apiAccess.secretName }}
automountServiceAccountToken: false
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/*
The security context of a container that needs no privilege at all
(docs/SECURITY.md, "Privileges"): an unprivileged uid, no capabilities,
the runtime's default seccomp profile, a read-only root filesystem and no
way to gain privileges (setuid files, file capabilities).
*/}}
{{- define "tetris.unprivileged" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/*
A service-account token for one container of a pod that mounts none
(automountServiceAccountToken: false): the three files Kubernetes would put
in every container (a token the kubelet rotates, the cluster's CA, the
namespace), as a volume of its own.
*/}}
{{- define "tetris.tokenVolume" -}}
- name: api-token
  projected:
    sources:
    - serviceAccountToken:
        path: token
        expirationSeconds: 3607
    - configMap:
        name: kube-root-ca.crt
        items:
        - key: ca.crt
          path: ca.crt
    - downwardAPI:
        items:
        - path: namespace
          fieldRef:
            fieldPath: metadata.namespace
{{- end -}}

{{/* Environment of a container that talks to the API. */}}
{{- define "tetris.apiEnv" -}}
{{- if and .Values.apiAccess.secretName .Values.apiAccess.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiAccess.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiAccess.port | toString | quote }}
{{- end }}
{{- end -}}

{{/* Volume mount and volume of the API credentials Secret. */}}
{{- define "tetris.apiVolumeMount" -}}
{{- if .Values.apiAccess.secretName }}
- name: api-credentials
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end }}
{{- end -}}
{{- define "tetris.apiVolume" -}}
{{- $a := .root.Values.apiAccess -}}
{{- if $a.secretName }}
- name: api-credentials
  secret:
    secretName: {{ ternary (printf "%s-%s" $a.secretName .serviceAccount) $a.secretName $a.perServiceAccount }}
{{- end }}
{{- end -}}

{{/*
tetris.bytes: a size (Kubernetes quantity or the daemon's size syntax, an
integer with an optional k/M/G/T or Ki/Mi/Gi/Ti suffix) in bytes.
*/}}
{{- define "tetris.bytes" -}}
{{- $s := toString . -}}
{{- if not (regexMatch "^[0-9]+(k|K|M|G|T|Ki|Mi|Gi|Ti)?$" $s) -}}
{{- fail (printf "size %q: want an integer with an optional k, M, G, T, Ki, Mi, Gi or Ti suffix" $s) -}}
{{- end -}}
{{- $n := regexFind "^[0-9]+" $s | atoi -}}
{{- $unit := trimPrefix (regexFind "^[0-9]+" $s) $s -}}
{{- $mult := dict "" 1 "k" 1000 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- mul $n (get $mult $unit) -}}
{{- end -}}

{{/*
The store's pages are charged to the daemon's memory cgroup: a memory limit
below the capacity would get it OOM-killed once the store fills.
*/}}
{{- define "tetris.checkReclaimerMemory" -}}
{{- $limit := dig "limits" "memory" "" (.Values.reclaimer.resources | default dict) -}}
{{- if $limit -}}
{{- $cap := include "tetris.bytes" .Values.reclaimer.capacity | atoi -}}
{{- if eq $cap 0 -}}
{{- fail "reclaimer.resources.limits.memory is set but reclaimer.capacity is 0 (unlimited): the store's pages are charged to the daemon's memory cgroup, so a limit caps the store and gets the daemon OOM-killed; set a capacity below the limit or remove the limit" -}}
{{- end -}}
{{- if lt (include "tetris.bytes" $limit | atoi) $cap -}}
{{- fail (printf "reclaimer.resources.limits.memory (%s) is below reclaimer.capacity (%s): the store's pages are charged to the daemon's memory cgroup; raise the limit above the capacity or remove it" (toString $limit) (toString .Values.reclaimer.capacity)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The reclaimer's listen address (flag value). */}}
{{- define "tetris.reclaimerListen" -}}
{{- if .Values.reclaimer.listenHost -}}
{{- printf "%s:%d" .Values.reclaimer.listenHost (int .Values.reclaimer.port) -}}
{{- else -}}
{{- printf "$(HOST_IP):%d" (int .Values.reclaimer.port) -}}
{{- end -}}
{{- end -}}

{{/* The CSI driver's name (protocol/names.h TETRIS_CSI_DRIVER). */}}
{{- define "tetris.csiDriver" -}}
csi.tetris.io
{{- end -}}

{{/*
The CSI plugin's settings, checked before anything renders: a mapped tenant
must be a store the daemons serve, a rule must say one thing, and tenants
bound to uids refuse the plugin's loads (docs/programs/tetris-csi.md).
*/}}
{{- define "tetris.checkCsi" -}}
{{- $seen := dict -}}
{{- range .Values.csi.tenantMap -}}
{{- $key := printf "%s %s" .namespace (.serviceAccount | default "*") -}}
{{- if hasKey $seen $key -}}
{{- fail (printf "csi.tenantMap: two rules for namespace %s, service account %s" .namespace (.serviceAccount | default "*")) -}}
{{- end -}}
{{- $_ := set $seen $key true -}}
{{- if and .tenant (or (eq (int $.Values.reclaimer.maxTenants) 0) (not (has .tenant $.Values.tenants))) -}}
{{- fail (printf "csi.tenantMap maps namespace %s to tenant %s, which is not in tenants (or reclaimer.maxTenants is 0): the node daemons serve no store for it" .namespace .tenant) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.csi.tenantMap .Values.reclaimer.tenantUids -}}
{{- fail "csi.tenantMap with reclaimer.tenantUids: a tenant's socket then serves its uids only, and tetris-csi (root) loads its volumes' models through it; use one or the other" -}}
{{- end -}}
{{- end -}}
