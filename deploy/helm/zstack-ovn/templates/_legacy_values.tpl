{{/*
Values files of zstack-ovn-kubernetes, the predecessor (docs/install.md, "Coming from
zstack-ovn-kubernetes"). Its values-standalone.yaml, values-standalone-ha.yaml,
values-external.yaml, and files written from its values.yaml carry keys this chart does not
otherwise have. values.schema.json accepts each of them by name (description
"zstack-ovn-kubernetes key; ...": a typo is still refused) and this file turns them into this
chart's settings. A template reads a setting that a legacy key can change through its helper
here, never from .Values:

  zovn.tunnelInterface   tunnel.interface          <- gateway.interface
  zovn.nodePools         nodePools (JSON list)     <- dpdk.enabled, dpdk.socketDir
  zovn.centralResources  ovn.standalone.resources  <- ovn.standalone.{nbdb,sbdb,northd}.resources
                         (JSON)

and "zovn.legacy.check" (node.yaml: every install renders it) refuses what has no
equivalent. ovn.standalone.image and the per-component `pullPolicy` are keys of this chart
too (the central image override, "zovn.pullPolicy"): they need no mapping.

The rules:
- A legacy key at a value that asks for nothing (false, "", {}; for the OVSDB client tuning
  knobs, the predecessor's defaults, which every one of its files carries) is ignored.
- A key of this chart counts as set when it differs from this chart's default (values.yaml:
  a template cannot tell a default from the same value given again). When it and the legacy
  key are both set and disagree, rendering fails naming both: neither silently wins, since
  either may be the one the operator meant. When they agree, either is fine.
- A legacy key without an equivalent fails rendering, naming the key and what to use instead.
Legacy keys are read with dig/index: they are absent from values.yaml.
*/}}

{{/* this chart's defaults of the keys a legacy key maps to (values.yaml) */}}
{{- define "zovn.legacy.default.tunnelInterface" -}}auto{{- end -}}
{{- define "zovn.legacy.default.vhostRoot" -}}/var/run/zstack-ovn/vhost{{- end -}}
{{/* zstack-ovn-kubernetes' default dpdk.socketDir: OVS's own run directory, which this
chart keeps apart from the vhost-user sockets it bind-mounts into pods */}}
{{- define "zovn.legacy.default.socketDir" -}}/var/run/openvswitch{{- end -}}

{{/* tunnel.interface, or gateway.interface where only that one is set */}}
{{- define "zovn.tunnelInterface" -}}
{{- $new := dig "interface" "" .Values.tunnel -}}
{{- $old := dig "interface" "" .Values.gateway -}}
{{- if not $old -}}
{{- $new -}}
{{- else if or (eq $new (include "zovn.legacy.default.tunnelInterface" .)) (eq $new $old) -}}
{{- $old -}}
{{- else -}}
{{- fail (printf "gateway.interface %q (a zstack-ovn-kubernetes key) and tunnel.interface %q are the same setting and disagree: keep tunnel.interface and delete gateway.interface" $old $new) -}}
{{- end -}}
{{- end -}}

{{/* The node pools, as JSON: nodePools, and with dpdk.enabled and no pools, one pool
`dpdk` on the nodes labelled network.zstack.io/datapath=dpdk (zstack-ovn-kubernetes ran
DPDK on every node; this chart needs the DPDK nodes named, since their ovs-vswitchd is
another build with hugepages) with vhost-user ports, its sockets under dpdk.socketDir. */}}
{{- define "zovn.nodePools" -}}
{{- $v := .Values -}}
{{- $pools := $v.nodePools | default list -}}
{{- $dpdk := index $v "dpdk" | default dict -}}
{{- $dir := dig "socketDir" "" $dpdk -}}
{{- if eq $dir (include "zovn.legacy.default.socketDir" .) -}}{{- $dir = "" -}}{{- end -}}
{{- $root := dig "socketRoot" "" $v.vhost -}}
{{- if dig "enabled" false $dpdk -}}
{{- if and $dir (ne $root (include "zovn.legacy.default.vhostRoot" .)) (ne $root $dir) -}}
{{- fail (printf "dpdk.socketDir %q (a zstack-ovn-kubernetes key) and vhost.socketRoot %q disagree: keep vhost.socketRoot (or a pool's vhostSocketRoot) and delete dpdk.socketDir" $dir $root) -}}
{{- end -}}
{{- if $pools -}}
{{- $any := false -}}
{{- range $p := $pools -}}
{{- $dp := $p.datapathConfig | default $v.node.datapathConfig | default dict -}}
{{- if has (dig "datapath" "auto" $dp) (list "dpdk" "auto") -}}
{{- $any = true -}}
{{- $proot := dig "vhostSocketRoot" "" $p | default $root -}}
{{- if and $dir (ne $proot $dir) -}}
{{- fail (printf "dpdk.socketDir %q (a zstack-ovn-kubernetes key) and the vhost socket root %q of node pool %s disagree: keep nodePools[].vhostSocketRoot and delete dpdk.socketDir" $dir $proot $p.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $any -}}
{{- fail "dpdk.enabled (a zstack-ovn-kubernetes key) asks for DPDK, and no pool of nodePools runs it (datapathConfig.datapath dpdk): add one (docs/install.md, \"Node pools (DPDK)\") or delete dpdk.enabled" -}}
{{- end -}}
{{- else -}}
{{- $dp := deepCopy ($v.node.datapathConfig | default dict) -}}
{{- if not (has (dig "datapath" "dpdk" $dp) (list "dpdk" "auto")) -}}
{{- fail (printf "dpdk.enabled (a zstack-ovn-kubernetes key) and node.datapathConfig.datapath %q disagree: delete dpdk.enabled, or describe the DPDK nodes in nodePools" $dp.datapath) -}}
{{- end -}}
{{- $_ := set $dp "datapath" "dpdk" -}}
{{- $pool := dict "name" "dpdk" "nodeSelector" (dict "network.zstack.io/datapath" "dpdk") "datapathConfig" $dp "vhost" true -}}
{{- with $dir -}}{{- $_ := set $pool "vhostSocketRoot" . -}}{{- end -}}
{{- $pools = list $pool -}}
{{- end -}}
{{- end -}}
{{- toJson $pools -}}
{{- end -}}

{{/* ovn.standalone.resources as JSON, or the one the legacy per-database resources agree on */}}
{{- define "zovn.centralResources" -}}
{{- $st := .Values.ovn.standalone -}}
{{- $eff := dig "resources" dict $st -}}
{{- $from := "ovn.standalone.resources" -}}
{{- range $k := list "nbdb" "sbdb" "northd" -}}
{{- $r := dig $k "resources" dict $st -}}
{{- if $r -}}
{{- $key := printf "ovn.standalone.%s.resources" $k -}}
{{- if not $eff -}}
{{- $eff = $r -}}
{{- $from = $key -}}
{{- else if ne (toJson $eff) (toJson $r) -}}
{{- fail (printf "%s (a zstack-ovn-kubernetes key) and %s disagree: this chart gives every OVN central container the same ovn.standalone.resources; set that and delete the per-database resources" $key $from) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $eff -}}
{{- end -}}

{{/* zstack-ovn-kubernetes' images, which this chart must not run */}}
{{- define "zovn.legacy.images" -}}zstack-ovnkube-controller,zstack-ovnkube-node,zstack-ovn-cni{{- end -}}

{{/* Fails on a legacy key without an equivalent (the rules above). Prints nothing. */}}
{{- define "zovn.legacy.check" -}}
{{- $v := .Values -}}
{{- $st := $v.ovn.standalone -}}
{{- if hasKey $v.network "nodeSubnetSize" -}}
{{- fail (printf "network.nodeSubnetSize (a zstack-ovn-kubernetes key, /%v per node) has no equivalent: nodes get no subnet of their own here; a pod on any node takes its address from a Subnet (the default one: network.clusterCIDR; docs/subnets.md). Delete network.nodeSubnetSize" $v.network.nodeSubnetSize) -}}
{{- end -}}
{{- with dig "controlPlaneIP" "" $st -}}
{{- fail (printf "ovn.standalone.controlPlaneIP %q (a zstack-ovn-kubernetes key) has no equivalent: every client reaches OVN central through its Services' ClusterIPs, without DNS; to choose central's nodes set ovn.standalone.nodeSelector. Delete ovn.standalone.controlPlaneIP" .) -}}
{{- end -}}
{{- $northd := dig "northd" "replicas" 1 $st -}}
{{- if and (gt (int $northd) 1) (eq $st.haMode "single") -}}
{{- fail (printf "ovn.standalone.northd.replicas %v (a zstack-ovn-kubernetes key) needs ovn.standalone.haMode=ha: single mode runs one ovn-northd; ha runs one beside each database member, one of them active" $northd) -}}
{{- end -}}
{{- range $k, $def := dict "connectTimeout" "30s" "reconnectInterval" "1s" "maxReconnectInterval" "60s" -}}
{{- $val := dig $k "" $v.ovn | toString -}}
{{- if and $val (ne $val $def) -}}
{{- fail (printf "ovn.%s %s (a zstack-ovn-kubernetes key) has no equivalent: the controller and the agents reconnect to OVN by themselves. Delete ovn.%s (its zstack-ovn-kubernetes default, %s, is accepted and ignored)" $k $val $k $def) -}}
{{- end -}}
{{- end -}}
{{- range $c := list "controller" "node" -}}
{{- $repo := dig "image" "repository" "" (index $v $c) -}}
{{- if has (regexReplaceAll ".*/" $repo "") (splitList "," (include "zovn.legacy.images" $)) -}}
{{- fail (printf "%s.image.repository %q is a zstack-ovn-kubernetes image, another program: this chart runs its one image (image.repository, `make images`) in every component. Delete %s.image" $c $repo $c) -}}
{{- end -}}
{{- $sa := dig "serviceAccount" dict (index $v $c) -}}
{{- if or (dig "name" "" $sa) (dig "annotations" dict $sa) -}}
{{- fail (printf "%s.serviceAccount (a zstack-ovn-kubernetes key) has no equivalent: the chart makes its own ServiceAccounts with the RBAC they need (docs/install.md, \"RBAC\"). Delete %s.serviceAccount" $c $c) -}}
{{- end -}}
{{- end -}}
{{- with dig "image" "repository" "" $v.cni -}}
{{- fail (printf "cni.image.repository %q (a zstack-ovn-kubernetes key) has no equivalent: the node pods install this chart's CNI shim from their own image (node.image). Delete cni.image" .) -}}
{{- end -}}
{{- $ssl := $v.ovn.ssl -}}
{{- if and $ssl.enabled (not $ssl.secretName) -}}
{{- range $k := list "caCert" "clientCert" "clientKey" -}}
{{- $pem := dig $k "" $ssl -}}
{{- if and $pem (not (contains "-----BEGIN" $pem)) -}}
{{- fail (printf "ovn.ssl.%s %q is not PEM text: zstack-ovn-kubernetes read files on the nodes; this chart takes the PEM (helm --set-file ovn.ssl.%s=%s) or a Secret (ovn.ssl.secretName)" $k $pem $k $pem) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
