{{/*
The node side: two DaemonSets per node pool (docs/install.md, "Upgrading").
- "zovn.ovsDaemonSet", <fullname>-ovs[-<pool>]: ovsdb-server, ovs-vswitchd, ovn-controller
  and the uplink keeper. updateStrategy OnDelete: `helm upgrade` never restarts the
  datapath; the operator applies a new spec node by node by deleting that node's pod. Not
  rendered with ovs.hostManaged (the host runs OVS).
- "zovn.nodeDaemonSet", <fullname>-node[-<pool>]: the agent (and the CNI shim's init
  container) with its datapath ConfigMap, RollingUpdate: an upgrade of the agent restarts
  only the agent, which reconciles without touching running pods' ports.
Arguments of both: (dict "ctx" $ "suffix" "node" | "node-<pool>" "pool" <pool or empty
dict> "exclude" <terms or nil>). One image; one daemon per container, so kubelet restarts
each on its own and its logs stay separate.
*/}}
{{- define "zovn.ovsDaemonSet" -}}
{{- $ := .ctx -}}
{{- $v := $.Values -}}
{{- $p := .pool -}}
{{- $fn := include "zovn.fullname" $ -}}
{{- $img := include "zovn.image" (dict "ctx" $ "override" $v.node.image) -}}
{{- $pull := include "zovn.pullPolicy" (dict "ctx" $ "override" $v.node.image) -}}
{{- $dp := $p.datapathConfig | default $v.node.datapathConfig | default dict -}}
{{- $dpdk := false -}}
{{- if and $p.name (has ($dp.datapath | default "auto") (list "dpdk" "auto")) -}}{{- $dpdk = true -}}{{- end -}}
{{- $hp := $p.hugepages | default dict -}}
{{- $vhostRoot := $p.vhostSocketRoot | default $v.vhost.socketRoot -}}
{{- $tunnelIf := $p.tunnelInterface | default (include "zovn.tunnelInterface" $) -}}
{{- $comp := replace "node" "ovs" .suffix -}}
{{- $name := printf "%s-%s" $fn $comp -}}
{{- $sel := dict "ctx" $ "component" $comp -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ $name }}
  labels: {{- include "zovn.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ $comp }}
    {{- with $p.name }}
    network.zstack.io/node-pool: {{ . }}
    {{- end }}
spec:
  selector:
    matchLabels: {{- include "zovn.selector" $sel | nindent 6 }}
  # never rolled by `helm upgrade` (that would cut every pod's traffic on every node): a
  # node's pod deleted by the operator comes back with the new spec (docs/install.md)
  updateStrategy: {type: OnDelete}
  template:
    metadata:
      labels: {{- include "zovn.selector" $sel | nindent 8 }}
      annotations:
        # the start scripts this pod ran (OnDelete: a change applies when the pod is deleted)
        checksum/scripts: {{ include (print $.Template.BasePath "/scripts-configmap.yaml") $ | sha256sum }}
    spec:
      serviceAccountName: {{ $fn }}-node
      # no Kubernetes API: no token
      automountServiceAccountToken: false
      # the node pods build the host's network (br-int, tunnels, pod veths): host namespace
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      priorityClassName: system-node-critical
      {{- with $v.imagePullSecrets }}
      imagePullSecrets: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $p.nodeSelector }}
      nodeSelector: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .exclude }}
      affinity:
        nodeAffinity:
          # nodes of no node pool (each pool runs its own DaemonSet): see docs/install.md
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: {{- toYaml . | nindent 14 }}
      {{- end }}
      {{- with $v.node.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      # ovs-vswitchd saves its OpenFlow tables at SIGTERM for the next start (node-vswitchd.sh)
      terminationGracePeriodSeconds: 30
      containers:
        - name: ovsdb-server
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/bin/bash, /zovn/scripts/node-ovsdb.sh]
          env:
            {{- include "zovn.downwardEnv" $ | nindent 12 }}
          readinessProbe:
            exec: {command: [ovs-appctl, -t, /var/run/openvswitch/ovsdb-server.ctl, version]}
            periodSeconds: 10
          {{- with $v.ovs.resources.ovsdbServer }}
          resources: {{- toYaml . | nindent 12 }}
          {{- end }}
          # only unix sockets and files: no capability
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          volumeMounts:
            {{- include "zovn.scriptsMount" $ | nindent 12 }}
            - {name: ovs-run, mountPath: /var/run/openvswitch}
            - {name: ovs-etc, mountPath: /etc/openvswitch}
        - name: ovs-vswitchd
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/bin/bash, /zovn/scripts/node-vswitchd.sh]
          env:
            {{- include "zovn.downwardEnv" $ | nindent 12 }}
            - name: VSWITCHD
              value: {{ ternary "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk" "/usr/lib/openvswitch-switch/ovs-vswitchd" $dpdk }}
            # each AF_XDP queue's umem (64 MiB) is faulted in while ovs-vswitchd adds the
            # port, blocking every other port: at a restart, port after port. glibc's malloc
            # then madvises its mmap'd chunks for transparent huge pages (THP "madvise", the
            # Debian default; no host setting changed): 512 times fewer page faults.
            # scripts/bench-afxdp-restart.sh: restart with 8 AF_XDP ports 1.88 → 1.03 s
            - {name: GLIBC_TUNABLES, value: glibc.malloc.hugetlb=1}
            {{- if $dpdk }}
            # PMD and hugepage memory stays resident
            - {name: VSWITCHD_OPTS, value: "--mlockall"}
            {{- end }}
          readinessProbe:
            exec: {command: [ovs-appctl, -t, /var/run/openvswitch/ovs-vswitchd.ctl, version]}
            periodSeconds: 10
          {{- if $dpdk }}
          resources:
            # hugepages need requests == limits and a memory request beside them; no memory
            # limit: ovs-vswitchd grows with its AF_XDP pod ports (the agent's budget caps
            # them), and an OOM kill would cut every pod of the node. CPU: the PMD cores
            # pmdCpus dedicates (busy polling), else what an adaptive-sleep node uses.
            requests:
              memory: {{ $p.memory | default "1Gi" }}
              cpu: {{ include "zovn.vswitchdCpu" (dict "dp" $dp "v" $v) }}
              {{- if $hp.size }}
              hugepages-{{ $hp.size }}: {{ $hp.amount }}
              {{- end }}
            {{- if $hp.size }}
            limits:
              hugepages-{{ $hp.size }}: {{ $hp.amount }}
            {{- end }}
          securityContext:
            # DPDK PMDs bind NICs through VFIO (/dev/vfio) and need physical addresses of
            # hugepages: not expressible with capabilities alone
            privileged: true
          {{- else }}
          {{- with $v.ovs.resources.vswitchd }}
          resources: {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            capabilities:
              drop: [ALL]
              # NET_ADMIN: datapath ports, netlink; NET_RAW: raw sockets (AF_XDP, tap);
              # SYS_NICE: handler/revalidator priorities; IPC_LOCK: --mlockall (AF_XDP umem);
              # SYS_ADMIN: AF_XDP ports — OVS 3.1 loads the XSK program and map with calls
              # that CAP_BPF does not cover (measured: with NET_ADMIN, NET_RAW and BPF, adding
              # an afxdp port fails with EINVAL; with SYS_ADMIN it works).
              # No SYS_MODULE: br-int is always a userspace (netdev) bridge, so the
              # openvswitch kernel module is never needed.
              add: [NET_ADMIN, NET_RAW, SYS_NICE, IPC_LOCK, SYS_ADMIN]
          {{- end }}
          volumeMounts:
            {{- include "zovn.scriptsMount" $ | nindent 12 }}
            - {name: ovs-run, mountPath: /var/run/openvswitch}
            - {name: ovs-etc, mountPath: /etc/openvswitch}
            {{- if $dpdk }}
            - {name: hugepages, mountPath: /dev/hugepages}
            - {name: vhost-root, mountPath: /var/run/zstack-ovn/vhost}
            {{- else }}
            # the userspace bridges' internal ports (br-int, br-phy) are tap devices
            - {name: dev-tun, mountPath: /dev/net/tun}
            {{- end }}
        - name: ovn-controller
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/bin/bash, /zovn/scripts/node-ovn-controller.sh]
          env:
            {{- include "zovn.downwardEnv" $ | nindent 12 }}
          readinessProbe:
            exec: {command: [ovn-appctl, -t, ovn-controller, version]}
            periodSeconds: 10
          {{- with $v.ovs.resources.ovnController }}
          resources: {{- toYaml . | nindent 12 }}
          {{- end }}
          # OVSDB and OpenFlow over unix sockets, SB over TCP: no capability
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          volumeMounts:
            {{- include "zovn.scriptsMount" $ | nindent 12 }}
            {{- include "zovn.tlsMount" (dict "ctx" $ "component" "node") | nindent 12 }}
            - {name: ovs-run, mountPath: /var/run/openvswitch}
            - {name: ovn-run, mountPath: /var/run/ovn}
        {{- if $tunnelIf }}
        # keeps br-phy holding the tunnel NIC, its addresses and routes (re-adds them when
        # ovs-vswitchd restarts and recreates the bridge's port) and the node's
        # ovn-bridge-mappings; on uninstall only, puts them back on the NIC (node-uplink.sh)
        - name: uplink
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/bin/bash, /zovn/scripts/node-uplink.sh]
          env:
            - {name: TUNNEL_INTERFACE, value: {{ $tunnelIf | quote }}}
            # tunnel.interface=auto: the NIC holding this address
            - name: HOST_IP
              valueFrom: {fieldRef: {fieldPath: status.hostIP}}
            # the node's ovn-bridge-mappings (VLAN Subnets); empty: left to the operator
            - {name: BRIDGE_MAPPINGS, value: {{ $v.tunnel.bridgeMappings | default "" | quote }}}
            # written by the agent only when `helm uninstall` asked it (its pre-delete hook):
            # then, and only then, SIGTERM gives the NIC its address and routes back
            - {name: UNINSTALL_FLAG, value: /var/lib/zstack-ovn/uninstall-requested}
            # br-phy's keeper is the newest pod: an older one still terminating leaves it be
            - name: POD_UID
              valueFrom: {fieldRef: {fieldPath: metadata.uid}}
          readinessProbe:
            exec: {command: [test, -e, /var/run/zstack-ovn/uplink-ready]}
            periodSeconds: 5
          {{- with $v.ovs.resources.uplink }}
          resources: {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            capabilities:
              drop: [ALL]
              # NET_ADMIN: move the address between the NIC and br-phy
              add: [NET_ADMIN]
          volumeMounts:
            {{- include "zovn.scriptsMount" $ | nindent 12 }}
            - {name: ovs-run, mountPath: /var/run/openvswitch}
            - {name: zovn-run, mountPath: /var/run/zstack-ovn}
            - {name: zovn-state, mountPath: /var/lib/zstack-ovn, readOnly: true}
        {{- end }}
      volumes:
        {{- include "zovn.scriptsVolume" $ | nindent 8 }}
        {{- include "zovn.tlsVolume" (dict "ctx" $ "component" "node") | nindent 8 }}
        - {name: ovs-run, hostPath: {path: /var/run/openvswitch, type: DirectoryOrCreate}}
        - {name: ovs-etc, hostPath: {path: /etc/openvswitch, type: DirectoryOrCreate}}
        - {name: ovn-run, hostPath: {path: /var/run/ovn, type: DirectoryOrCreate}}
        - {name: zovn-run, hostPath: {path: /var/run/zstack-ovn, type: DirectoryOrCreate}}
        - {name: zovn-state, hostPath: {path: /var/lib/zstack-ovn/node, type: DirectoryOrCreate}}
        {{- if not $dpdk }}
        - {name: dev-tun, hostPath: {path: /dev/net/tun, type: CharDevice}}
        {{- end }}
        {{- if $dpdk }}
        - {name: vhost-root, hostPath: {path: {{ $vhostRoot }}, type: DirectoryOrCreate}}
        {{- end }}
        {{- if and $dpdk $hp.size }}
        - name: hugepages
          emptyDir: {medium: HugePages-{{ $hp.size }}}
        {{- else if $dpdk }}
        - {name: hugepages, hostPath: {path: /dev/hugepages, type: Directory}}
        {{- end }}
{{- end -}}

{{- define "zovn.nodeDaemonSet" -}}
{{- $ := .ctx -}}
{{- $v := $.Values -}}
{{- $p := .pool -}}
{{- $fn := include "zovn.fullname" $ -}}
{{- $img := include "zovn.image" (dict "ctx" $ "override" $v.node.image) -}}
{{- $pull := include "zovn.pullPolicy" (dict "ctx" $ "override" $v.node.image) -}}
{{- $dp := $p.datapathConfig | default $v.node.datapathConfig | default dict -}}
{{- $dpdk := false -}}
{{- if and $p.name (has ($dp.datapath | default "auto") (list "dpdk" "auto")) -}}{{- $dpdk = true -}}{{- end -}}
{{- $hp := $p.hugepages | default dict -}}
{{- $vhostRoot := $p.vhostSocketRoot | default $v.vhost.socketRoot -}}
{{- $tunnelIf := $p.tunnelInterface | default (include "zovn.tunnelInterface" $) -}}
{{- $comp := .suffix -}}
{{- $name := printf "%s-%s" $fn $comp -}}
{{- $sel := dict "ctx" $ "component" $comp -}}
{{- /* OVN central's files on hostPath (standalone, no PVC): removed by the agent on uninstall */ -}}
{{- $st := $v.ovn.standalone -}}
{{- $centralData := and (eq $v.ovn.mode "standalone") (not (and $st.nbdb.storage.enabled (or (eq $st.haMode "single") $st.sbdb.storage.enabled))) -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}-datapath
  labels: {{- include "zovn.labels" $ | nindent 4 }}
data:
  # the agent's --datapath-config (docs/datapath.md); a Node annotation overrides keys per node
  datapath.yaml: |
    {{- toYaml $dp | nindent 4 }}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ $name }}
  labels: {{- include "zovn.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ $comp }}
    {{- with $p.name }}
    network.zstack.io/node-pool: {{ . }}
    {{- end }}
spec:
  selector:
    matchLabels: {{- include "zovn.selector" $sel | nindent 6 }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  template:
    metadata:
      labels: {{- include "zovn.selector" $sel | nindent 8 }}
      annotations:
        checksum/datapath: {{ toYaml $dp | sha256sum }}
    spec:
      serviceAccountName: {{ $fn }}-node
      # the API token comes from the projected volume below: bound to this pod, so the
      # API server records which pod (and so which node) asks for a chassis certificate
      automountServiceAccountToken: false
      # the node pods build the host's network (br-int, tunnels, pod veths): host namespace
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      priorityClassName: system-node-critical
      {{- with $v.imagePullSecrets }}
      imagePullSecrets: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $p.nodeSelector }}
      nodeSelector: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .exclude }}
      affinity:
        nodeAffinity:
          # nodes of no node pool (each pool runs its own DaemonSet): see docs/install.md
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: {{- toYaml . | nindent 14 }}
      {{- end }}
      {{- with $v.node.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      initContainers:
        # the CNI shim into the host's cni.binDir before the agent writes the conflist
        - name: install-cni
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/bin/sh, -c, "cp -f /usr/local/bin/zstack-ovn-cni /host/cni-bin/.zstack-ovn-cni.tmp && mv -f /host/cni-bin/.zstack-ovn-cni.tmp /host/cni-bin/zstack-ovn-cni"]
          securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
          volumeMounts:
            - {name: cni-bin, mountPath: /host/cni-bin}
      containers:
        - name: agent
          image: {{ $img }}
          imagePullPolicy: {{ $pull }}
          command: [/usr/local/bin/zstack-ovnkube-node]
          args:
            - --node-name=$(NODE_NAME)
            - --pods=kube
            - --sb={{ include "zovn.remote" (dict "ctx" $ "db" "sb") }}
            - --encap-type={{ $v.tunnel.type }}
            {{- if and $tunnelIf (not $v.ovs.hostManaged) }}
            - --encap-ip-interface=br-phy
            {{- else }}
            - --encap-ip=$(HOST_IP)
            {{- end }}
            {{- if $v.network.mtu }}
            - --mtu={{ $v.network.mtu }}
            {{- end }}
            - --cni-conf-dir=/host/cni-conf
            - --cni-bin-dir=/host/cni-bin
            - --cni-shim=/usr/local/bin/zstack-ovn-cni
            # the node's address only (not every address of the host: pods reach some)
            - --metrics-addr=$(HOST_IP):{{ $v.node.metricsPort }}
            - --pinger-interval-ms={{ $v.node.pinger.intervalMs }}
            - --pinger-pods-per-node={{ $v.node.pinger.podsPerNode }}
            - --pinger-max-rate={{ $v.node.pinger.maxRate }}
            - --datapath-config=/etc/zstack-ovn/datapath.yaml
            - --gateway-mode={{ $v.gateway.mode }}
            - --service-external-ip-cidrs={{ join "," $v.services.externalIPs.allowedCIDRs }}
            {{- if include "zovn.pki" $ }}
            # the node's own OVN certificate (CN = its chassis): key made here, certificate
            # from the controller's signer; ovn-controller reads both through the OVS SSL row
            - --chassis-cert-dir=/var/run/ovn/zovn-chassis
            - --ovn-ca=/etc/zstack-ovn/ovn-ca/ca.crt
            - --chassis-ca=/etc/zstack-ovn/ovn-ca/chassis-ca.crt
            {{- end }}
            {{- if eq $v.gateway.mode "shared" }}
            {{- if not (or $tunnelIf $v.ovs.hostManaged) }}
            {{- fail "gateway.mode=shared needs tunnel.interface (br-phy must hold the node's uplink and address, which its gateway router shares)" }}
            {{- end }}
            - --gateway-interface=br-phy
            {{- with $v.gateway.nextHop }}
            - --gateway-next-hop={{ . }}
            {{- end }}
            {{- with $v.gateway.nextHopV6 }}
            - --gateway-next-hop-v6={{ . }}
            {{- end }}
            {{- end }}
            {{- if eq $v.logging.format "json" }}
            - --log-json
            {{- end }}
            {{- if not $v.ovs.hostManaged }}
            - --vswitchd-ctl=/var/run/openvswitch/ovs-vswitchd.ctl
            # saves the OpenFlow tables, then ovs-vswitchd exits; its container's script starts
            # it again at once with the new start-time settings and the saved tables
            - --vswitchd-restart-cmd=/bin/bash /zovn/scripts/vswitchd-restart.sh
            {{- end }}
            # helm uninstall only: its pre-delete hook creates this marker (uninstall-hook.yaml);
            # the agent acknowledges it and writes uninstall-requested here (the uplink keeper
            # reads it too); at SIGTERM, with the marker seen and this DaemonSet gone or going,
            # it removes the conflist, the shim, the nft table, the datapath's taps and these
            # directories' contents. Nothing else (404, 401, 403, no API) ever cleans the node.
            - --uninstall-marker={{ $fn }}-uninstalling
            - --uninstall-flag-dir=/var/lib/zstack-ovn
            - --uninstall-daemonset={{ $name }}
            - --uninstall-empty-dir=/var/run/zstack-ovn
            - --uninstall-empty-dir=/var/lib/zstack-ovn
            {{- if $centralData }}
            # OVN central's database files, on the node(s) that held them
            - --uninstall-empty-dir=/var/lib/zstack-ovn-central
            {{- end }}
            {{- if not $v.ovs.hostManaged }}
            - --uninstall-ovs-in-pod
            - --uninstall-empty-dir=/etc/openvswitch
            - --uninstall-empty-dir=/var/run/openvswitch
            - --uninstall-empty-dir=/var/run/ovn
            {{- end }}
          env:
            {{- include "zovn.downwardEnv" $ | nindent 12 }}
            {{- include "zovn.apiServerEnv" $ | nindent 12 }}
            - name: RUST_LOG
              value: {{ $v.logging.level | quote }}
          ports:
            - {name: metrics, containerPort: {{ $v.node.metricsPort }}}
          livenessProbe:
            httpGet: {path: /healthz, port: {{ $v.node.metricsPort }}}
            initialDelaySeconds: 10
            periodSeconds: 10
            failureThreshold: 6
          readinessProbe:
            httpGet: {path: /readyz, port: {{ $v.node.metricsPort }}}
            periodSeconds: 5
          {{- with $v.node.resources }}
          resources: {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- if $p.vhost }}
            # vhost-user sockets are bind-mounted into pods' volumes (Bidirectional
            # propagation into /var/lib/kubelet/pods requires a privileged container)
            privileged: true
            {{- else }}
            capabilities:
              drop: [ALL]
              # NET_ADMIN: veths, addresses, routes, nftables (host Service NAT);
              # NET_RAW: gratuitous ARP / ND; SYS_ADMIN: setns into pod network namespaces;
              # SYS_PTRACE: open /proc/<pid>/ns/net of pod processes
              add: [NET_ADMIN, NET_RAW, SYS_ADMIN, SYS_PTRACE]
            {{- end }}
          volumeMounts:
            {{- include "zovn.tlsMount" (dict "ctx" $ "component" "node") | nindent 12 }}
            - {name: kube-api-access, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
            {{- if include "zovn.pki" $ }}
            - {name: ovn-ca, mountPath: /etc/zstack-ovn/ovn-ca, readOnly: true}
            {{- end }}
            - {name: datapath, mountPath: /etc/zstack-ovn/datapath.yaml, subPath: datapath.yaml, readOnly: true}
            # OVS database and vswitchd control sockets (the pod's or the host's OVS)
            - {name: ovs-run, mountPath: /var/run/openvswitch}
            {{- if not $v.ovs.hostManaged }}
            # vswitchd-restart.sh (--vswitchd-restart-cmd)
            {{- include "zovn.scriptsMount" $ | nindent 12 }}
            # emptied on uninstall only (the OVS database, ovn-controller's sockets)
            - {name: ovs-etc, mountPath: /etc/openvswitch}
            {{- end }}
            # ovn-controller's sockets; the node's chassis certificate (zovn-chassis/)
            - {name: ovn-run, mountPath: /var/run/ovn}
            # CNI server socket the host's shim connects to; vhost-user sockets under vhost/
            - {name: zovn-run, mountPath: /var/run/zstack-ovn}
            # per-sandbox state that survives agent restarts
            - {name: zovn-state, mountPath: /var/lib/zstack-ovn}
            {{- if $centralData }}
            # emptied on uninstall only
            - {name: central-data, mountPath: /var/lib/zstack-ovn-central}
            {{- end }}
            # pod network namespaces created by the runtime (mounted after the pod starts)
            - {name: netns, mountPath: /var/run/netns, mountPropagation: HostToContainer}
            - {name: cni-conf, mountPath: /host/cni-conf}
            - {name: cni-bin, mountPath: /host/cni-bin}
            {{- if $p.vhost }}
            - {name: vhost-root, mountPath: /var/run/zstack-ovn/vhost}
            - {name: kubelet-pods, mountPath: /var/lib/kubelet/pods, mountPropagation: Bidirectional}
            {{- end }}
      volumes:
        {{- include "zovn.tlsVolume" (dict "ctx" $ "component" "node") | nindent 8 }}
        # the service-account token bound to this pod (what kubelet mounts by default from
        # Kubernetes 1.21 on), the cluster's CA and the namespace
        - name: kube-api-access
          projected:
            sources:
              - serviceAccountToken: {path: token, expirationSeconds: 3607}
              - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
              - downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}
        {{- if include "zovn.pki" $ }}
        - name: ovn-ca
          configMap: {name: {{ $fn }}-ovn-ca}
        {{- end }}
        - name: datapath
          configMap: {name: {{ $name }}-datapath}
        - {name: ovs-run, hostPath: {path: /var/run/openvswitch, type: DirectoryOrCreate}}
        - {name: ovn-run, hostPath: {path: /var/run/ovn, type: DirectoryOrCreate}}
        {{- if not $v.ovs.hostManaged }}
        - {name: ovs-etc, hostPath: {path: /etc/openvswitch, type: DirectoryOrCreate}}
        {{- include "zovn.scriptsVolume" $ | nindent 8 }}
        {{- end }}
        - {name: zovn-run, hostPath: {path: /var/run/zstack-ovn, type: DirectoryOrCreate}}
        - {name: zovn-state, hostPath: {path: /var/lib/zstack-ovn/node, type: DirectoryOrCreate}}
        - {name: netns, hostPath: {path: /var/run/netns, type: DirectoryOrCreate}}
        - {name: cni-conf, hostPath: {path: {{ $v.cni.confDir }}, type: DirectoryOrCreate}}
        - {name: cni-bin, hostPath: {path: {{ $v.cni.binDir }}, type: DirectoryOrCreate}}
        {{- if $centralData }}
        - {name: central-data, hostPath: {path: {{ $v.ovn.standalone.hostPath }}, type: DirectoryOrCreate}}
        {{- end }}
        {{- if $p.vhost }}
        - {name: vhost-root, hostPath: {path: {{ $vhostRoot }}, type: DirectoryOrCreate}}
        - {name: kubelet-pods, hostPath: {path: /var/lib/kubelet/pods, type: Directory}}
        {{- end }}
{{- end -}}
