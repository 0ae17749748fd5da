{{/* The `dbexporter` container of an OVN central pod (ovn.standalone.metricsPort, 0: none):
     zstack-ovn-dbexporter from the chart's own image (central's image may be overridden by
     one without our binaries), reading the pod's ovsdb-servers (`dbs`) and, with `northd`,
     its ovn-northd through their control sockets (the `run` volume) and the database
     files (`data`), serving /metrics on the node's address (hostNetwork): port
     metricsPort, or metricsPort+1 for an HA SB member (an NB and an SB member may share a
     node). docs/reference/metrics.md.
     (dict "ctx" $ "dbs" (list "nb" "sb") "northd" true) */}}
{{- define "zovn.dbexporter" -}}
{{- $ctx := .ctx -}}
{{- $base := int $ctx.Values.ovn.standalone.metricsPort -}}
{{- if gt $base 0 }}
{{- $port := ternary (add $base 1) $base (eq (list "sb" | toJson) (.dbs | toJson)) -}}
- name: dbexporter
  image: {{ include "zovn.image" (dict "ctx" $ctx) }}
  imagePullPolicy: {{ include "zovn.pullPolicy" (dict "ctx" $ctx) }}
  command: [zstack-ovn-dbexporter]
  args:
    - --listen=$(HOST_IP):{{ $port }}
    {{- range $db := .dbs }}
    - --{{ $db }}-ctl=/var/run/ovn/ovn{{ $db }}_db.ctl
    - --{{ $db }}-file=/var/lib/ovn/ovn{{ $db }}_db.db
    {{- end }}
    {{- if .northd }}
    - --northd-ctl=/var/run/ovn/ovn-northd.ctl
    {{- end }}
  env:
    - name: HOST_IP
      valueFrom: {fieldRef: {fieldPath: status.hostIP}}
  ports:
    - {name: db-metrics, containerPort: {{ $port }}, protocol: TCP}
  readinessProbe:
    httpGet: {path: /readyz, port: {{ $port }}}
    periodSeconds: 10
  resources: {requests: {cpu: 10m, memory: 16Mi}}
  securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumeMounts:
    - {name: data, mountPath: /var/lib/ovn, readOnly: true}
    - {name: run, mountPath: /var/run/ovn}
{{- end }}
{{- end -}}
