{{/* Names: <release>-zstack-ovn, or the release name when it already says zstack-ovn. */}}
{{- define "zovn.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "zovn.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "ctx" . "component" "controller") */}}
{{- define "zovn.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image of a component: (dict "ctx" . "override" .Values.controller.image) */}}
{{- define "zovn.image" -}}
{{- $o := .override | default dict -}}
{{- $repo := $o.repository | default .ctx.Values.image.repository -}}
{{- $tag := $o.tag | default .ctx.Values.image.tag | default .ctx.Chart.AppVersion -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* imagePullPolicy of a component: its image override's pullPolicy, else image.pullPolicy
     (dict "ctx" . "override" .Values.controller.image) */}}
{{- define "zovn.pullPolicy" -}}
{{- dig "pullPolicy" "" (.override | default dict) | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{/* "true" when the chart's own PKI secures OVN (standalone mode, ovn.standalone.tls) */}}
{{- define "zovn.pki" -}}
{{- if and (eq .Values.ovn.mode "standalone") .Values.ovn.standalone.tls.enabled -}}
{{- if .Values.ovn.ssl.enabled -}}
{{- fail "ovn.ssl is the platform's TLS material (external mode); standalone mode makes its own PKI (ovn.standalone.tls.enabled): set ovn.standalone.tls.enabled=false to use ovn.ssl instead" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The name OVN central's certificate holds (clients dial ClusterIPs and check this). */}}
{{- define "zovn.centralServerName" -}}zstack-ovn-central{{- end -}}

{{/* tcp or ssl */}}
{{- define "zovn.proto" -}}
{{- if or .Values.ovn.ssl.enabled (include "zovn.pki" .) }}ssl{{ else }}tcp{{ end -}}
{{- end -}}

{{/* The env var kubelet sets to a Service's ClusterIP (service links). Clients reach OVN
     central through ClusterIPs, not DNS names: cluster DNS runs in pods, which need this
     network plugin first. */}}
{{- define "zovn.svcHost" -}}
{{- printf "$(%s_SERVICE_HOST)" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/* OVN remote list of one database: (dict "ctx" . "db" "nb"|"sb") */}}
{{- define "zovn.remote" -}}
{{- $v := .ctx.Values -}}
{{- $port := ternary 6641 6642 (eq .db "nb") -}}
{{- if eq $v.ovn.mode "external" -}}
{{- ternary $v.ovn.nbdbAddress $v.ovn.sbdbAddress (eq .db "nb") -}}
{{- else if eq $v.ovn.standalone.haMode "ha" -}}
{{- $dbv := ternary $v.ovn.standalone.nbdb $v.ovn.standalone.sbdb (eq .db "nb") -}}
{{- $out := list -}}
{{- range $i := until (int $dbv.replicas) -}}
{{- $svc := printf "%s-%sdb-%d" (include "zovn.fullname" $.ctx) $.db $i -}}
{{- $out = append $out (printf "%s:%s:%d" (include "zovn.proto" $.ctx) (include "zovn.svcHost" $svc) $port) -}}
{{- end -}}
{{- join "," $out -}}
{{- else -}}
{{- $svc := printf "%s-%sdb" (include "zovn.fullname" .ctx) .db -}}
{{- printf "%s:%s:%d" (include "zovn.proto" .ctx) (include "zovn.svcHost" $svc) $port -}}
{{- end -}}
{{- end -}}

{{- define "zovn.tlsSecret" -}}
{{- .Values.ovn.ssl.secretName | default (printf "%s-ovn-tls" (include "zovn.fullname" .)) -}}
{{- end -}}

{{/* Where TLS material is mounted in every container that talks to OVN. */}}
{{- define "zovn.tlsDir" -}}/etc/zstack-ovn/tls{{- end -}}

{{/* The TLS volume of a component: (dict "ctx" . "component" "central"|"controller"|"node").
     ovn.ssl: the one Secret, everywhere. The chart's PKI: central gets its server
     certificate, the controller its client certificate and the chassis CA; the node pods
     get nothing secret (an agent asks for its own chassis certificate). */}}
{{- define "zovn.tlsVolume" -}}
{{- $ctx := .ctx -}}
{{- if $ctx.Values.ovn.ssl.enabled }}
- name: ovn-tls
  secret:
    secretName: {{ include "zovn.tlsSecret" $ctx }}
    defaultMode: 256  # 0400 (decimal: YAML 1.1 and 1.2 parsers agree)
{{- else if and (include "zovn.pki" $ctx) (has .component (list "central" "controller")) }}
- name: ovn-tls
  secret:
    secretName: {{ include "zovn.fullname" $ctx }}-ovn-{{ .component }}-tls
    defaultMode: 256  # 0400
{{- end }}
{{- end -}}

{{- define "zovn.tlsMount" -}}
{{- $ctx := .ctx -}}
{{- if or $ctx.Values.ovn.ssl.enabled (and (include "zovn.pki" $ctx) (has .component (list "central" "controller"))) }}
- name: ovn-tls
  mountPath: {{ include "zovn.tlsDir" $ctx }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "zovn.scriptsMount" -}}
- name: scripts
  mountPath: /zovn/scripts
  readOnly: true
{{- end -}}

{{- define "zovn.scriptsVolume" -}}
- name: scripts
  configMap:
    name: {{ include "zovn.fullname" . }}-scripts
    defaultMode: 365  # 0555 (decimal: YAML 1.1 and 1.2 parsers agree)
{{- end -}}

{{/* POD_IP / POD_UID / NODE_NAME from the downward API */}}
{{- define "zovn.downwardEnv" -}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: POD_UID
  valueFrom: {fieldRef: {fieldPath: metadata.uid}}
- name: HOST_IP
  valueFrom: {fieldRef: {fieldPath: status.hostIP}}
- name: OVN_SSL
  value: {{ eq (include "zovn.proto" .) "ssl" | quote }}
- name: TLS_DIR
  value: {{ include "zovn.tlsDir" . }}
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT from kubernetes.apiServer
     (https://HOST:PORT, HOST an IPv6 address in brackets or a name/IPv4), for the containers
     whose process talks to the Kubernetes API (the controller, the agent); nothing when
     empty. They replace what kubelet sets (the `kubernetes` Service's ClusterIP), which a
     host-network pod cannot reach when the cluster has no kube-proxy or before this plugin
     runs. The client (kube-rs Config::infer, in-cluster) reads exactly these two. */}}
{{- define "zovn.apiServerEnv" -}}
{{- with .Values.kubernetes.apiServer }}
{{- $hostport := (urlParse .).host -}}
{{- $host := regexReplaceAll "^\\[?(.*?)\\]?:[0-9]+$" $hostport "${1}" -}}
{{- $port := regexReplaceAll "^.*:([0-9]+)$" $hostport "${1}" -}}
- name: KUBERNETES_SERVICE_HOST
  value: {{ $host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $port | quote }}
{{- end }}
{{- end -}}

{{/*
The nodes OVN central is pinned to when its databases live on hostPath and
ovn.standalone.nodeSelector is empty, comma-separated (dict "ctx" . "object" <kind/name of
the central workload> "count" <members>): an upgrade keeps the nodes the install chose (the
annotation network.zstack.io/central-nodes on that object, read with lookup); the install
chooses control-plane nodes first, then the others, by name. Empty where the chart is only
rendered (helm template: no cluster to look at).
*/}}
{{- define "zovn.centralNodes" -}}
{{- $ns := .ctx.Release.Namespace -}}
{{- $kind := index (splitList "/" .object) 0 -}}
{{- $name := index (splitList "/" .object) 1 -}}
{{- $prev := lookup "apps/v1" $kind $ns $name -}}
{{- $kept := "" -}}
{{- if $prev -}}
{{- $kept = index ($prev.metadata.annotations | default dict) "network.zstack.io/central-nodes" | default "" -}}
{{- end -}}
{{- if $kept -}}
{{- $kept -}}
{{- else -}}
{{- $cp := list -}}
{{- $other := list -}}
{{- range $n := (lookup "v1" "Node" "" "").items | default list -}}
{{- $labels := $n.metadata.labels | default dict -}}
{{- $host := index $labels "kubernetes.io/hostname" | default $n.metadata.name -}}
{{- if or (hasKey $labels "node-role.kubernetes.io/control-plane") (hasKey $labels "node-role.kubernetes.io/master") -}}
{{- $cp = append $cp $host -}}
{{- else -}}
{{- $other = append $other $host -}}
{{- end -}}
{{- end -}}
{{- $all := concat (sortAlpha $cp) (sortAlpha $other) -}}
{{- if ge (len $all) (int .count) -}}
{{- join "," (slice $all 0 (int .count)) -}}
{{- end -}}
{{- end -}}
{{- end -}}


{{/* nodeAffinity pinning pods to the hostnames in . (comma-separated), under `affinity:` */}}
{{- define "zovn.pinnedNodes" -}}
nodeAffinity:
  # the nodes holding the databases' files (network.zstack.io/central-nodes)
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - {key: kubernetes.io/hostname, operator: In, values: {{ splitList "," . | toJson }}}
{{- end -}}

{{/* The controller's Northbound flags: its Deployment's and the uninstall hook's NB step
(external mode). The mode, the remote, its TLS material, the cluster id. */}}
{{- define "zovn.controllerNbArgs" -}}
- --mode={{ .Values.ovn.mode }}
- --nb={{ include "zovn.remote" (dict "ctx" . "db" "nb") }}
{{- if or .Values.ovn.ssl.enabled (include "zovn.pki" .) }}
- --nb-ca={{ include "zovn.tlsDir" . }}/ca.crt
- --nb-cert={{ include "zovn.tlsDir" . }}/tls.crt
- --nb-key={{ include "zovn.tlsDir" . }}/tls.key
{{- end }}
{{- with .Values.ovn.clusterId }}
- --cluster-id={{ . }}
{{- end }}
{{- end -}}

{{/* The CPU ovs-vswitchd of a DPDK pool asks for ({dp: the pool's datapath config, v:
  .Values}): one core per PMD CPU when pmdCpus dedicates cores (they busy-poll: "2-3,6" is
  3), pmdCount cores when pmdMaxSleep is 0 (busy polling by choice), else the adaptive-sleep
  figure of ovs.resources.vswitchd. */}}
{{- define "zovn.vswitchdCpu" -}}
{{- $dp := .dp -}}
{{- $base := ((.v.ovs.resources.vswitchd | default dict).requests | default dict).cpu | default "100m" -}}
{{- if $dp.pmdCpus -}}
{{- $n := 0 -}}
{{- range splitList "," (toString $dp.pmdCpus) -}}
{{- $r := splitList "-" (trim .) -}}
{{- if eq (len $r) 2 -}}
{{- $a := atoi (trim (index $r 0)) -}}
{{- $b := atoi (trim (index $r 1)) -}}
{{- if lt $b $a -}}
{{- fail (printf "datapathConfig.pmdCpus %q: range %s is reversed" (toString $dp.pmdCpus) (trim .)) -}}
{{- end -}}
{{- $n = add $n (add1 (sub $b $a)) -}}
{{- else if trim . -}}
{{- $n = add1 $n -}}
{{- end -}}
{{- end -}}
{{- $n -}}
{{- else if and (hasKey $dp "pmdMaxSleep") (eq (toString $dp.pmdMaxSleep) "0") -}}
{{- $dp.pmdCount | default 1 -}}
{{- else -}}
{{- $base -}}
{{- end -}}
{{- end -}}
