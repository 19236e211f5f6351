#!/usr/bin/env bash
# The project's own single-node Kubernetes cluster, built from sources (see docs/local-cluster.md).
#   hack/local-cluster.sh up      build what is missing, contain pod traffic, start every daemon, wait until Ready
#   hack/local-cluster.sh down    stop what `up` started (by pidfile), remove its pods, mounts, links, rules,
#                                 chains, ipsets, cgroups and directories, restore the sysctls it changed
#                                 (`down --purge` also drops certificates and the imported images)
#   hack/local-cluster.sh status  daemons, node, pods
#   hack/local-cluster.sh env     `eval "$(hack/local-cluster.sh env)"` for kubectl, crictl and ctr
#   hack/local-cluster.sh kill D  SIGKILL one daemon (etcd, kube-apiserver, kubelet, containerd, ...) by its pidfile
#   hack/local-cluster.sh start D start it again with the arguments `up` gives it (fault tests: test/e2e)
# Needs root. Network probes only ever target this machine: loopback, the node IP and pods.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${HACK_DIR}/node-lib.sh"

NODE_NAME="${AIRLOCK_NODE_NAME:-airlock-node}"
NODE_IP=10.123.0.1          # on a veth pair: dummy links cannot be created on these VMs
NODE_LINK=airlock-node      # holds NODE_IP; its peer is airlock-nodep
BRIDGE=airlock0             # the CNI bridge, created by `up` so that containment exists before any pod
POD_CIDR=10.244.0.0/24      # this node's pod range (the controller-manager allocates the same from CLUSTER_CIDR)
POD_GATEWAY=10.244.0.1
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
DNS_IP=10.96.0.10
ROUTE_TABLE=4242            # policy-routing table for traffic arriving from the pod bridge
RULE_PRIO=100               # after the local table (0), before main (32766)
APISERVER="https://${NODE_IP}:6443"
COREDNS_IMAGE="localhost/airlock/coredns:${COREDNS_VERSION}"

# Cluster traffic never goes through a proxy: every daemon, kubectl, curl and test client started from here or
# from `env` bypasses any HTTP(S)_PROXY for loopback, the node, and the pod, service and cluster ranges (Go and
# curl both accept CIDRs in NO_PROXY). Whatever the caller had in NO_PROXY is kept.
CLUSTER_NO_PROXY="127.0.0.0/8,localhost,::1,${NODE_IP},${POD_CIDR},${CLUSTER_CIDR},${SERVICE_CIDR},.svc,.cluster.local"
NO_PROXY="${CLUSTER_NO_PROXY}${NO_PROXY:+,${NO_PROXY}}"
no_proxy="${CLUSTER_NO_PROXY}${no_proxy:+,${no_proxy}}"
export NO_PROXY no_proxy

PKI="${CLUSTER_DIR}/pki"
KCFG="${CLUSTER_DIR}/kubeconfig"
CFG="${CLUSTER_DIR}/config"
PIDS="${CLUSTER_DIR}/pids"
LOGS="${CLUSTER_DIR}/log"
HOSTSNAP="${CLUSTER_DIR}/host"   # what the host looked like before `up`, so that `down` restores exactly that
ADMIN_KUBECONFIG="${CLUSTER_DIR}/admin.kubeconfig"
KUBECTL=("${K8S_BIN_DIR}/kubectl" --kubeconfig "${ADMIN_KUBECONFIG}")
CRICTL=("${CRICTL_DIR}/crictl" --config "${CLUSTER_RUN_DIR}/crictl.yaml" --runtime-endpoint "unix://${CONTAINERD_SOCK}" --timeout 60s)
CTR=("${CONTAINERD_DIR}/ctr" --address "${CONTAINERD_SOCK}")

# Start order; `down` stops in reverse (kubelet before containerd, see stop_all).
DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy kube-router)
# Sysctls the kubelet, CNI, kube-proxy or kube-router may change: restored by `down` when they differ.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
	kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.ipv6.conf.all.forwarding
	net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal)
# Host paths the daemons create despite being pointed at our own dirs: removed by `down` if `up` made them.
HOST_PATHS=(/var/log/containers /var/log/pods /var/lib/kubelet /var/lib/cni /var/lib/containerd /run/containerd
	/run/netns /run/runc /run/nri /var/run/nri /etc/cni /opt/cni /opt/containerd /var/run/kubernetes /run/kubernetes
	/etc/kubernetes /var/lib/kube-proxy /var/lib/kube-router /run/xtables.lock /etc/cdi /var/run/cdi /run/cdi
	/var/lib/dockershim /run/runsc /var/lib/etcd)
IPTABLES_BACKENDS=(iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy)

daemon_bin() {
	case "$1" in
		etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy) echo "${K8S_BIN_DIR}/$1" ;;
		containerd) echo "${CONTAINERD_DIR}/containerd" ;;
		kube-router) echo "${KUBE_ROUTER_DIR}/kube-router" ;;
		*) die "unknown daemon $1" ;;
	esac
}

# ---------------------------------------------------------------- processes (pidfile-only, never by name)

# pid_of NAME prints the daemon's PID if its pidfile names a live process running NAME's binary; else fails.
# Checking /proc/PID/exe guards against a stale pidfile whose PID was reused by something else.
pid_of() {
	local f="${PIDS}/$1.pid" pid exe
	[[ -s "${f}" ]] || return 1
	pid="$(<"${f}")"
	[[ "${pid}" =~ ^[0-9]+$ ]] || return 1
	exe="$(readlink "/proc/${pid}/exe" 2>/dev/null)" || return 1
	[[ "${exe}" == "$(daemon_bin "$1")" || "${exe}" == "$(daemon_bin "$1") (deleted)" ]] || return 1
	echo "${pid}"
}

# start_daemon NAME ARGS...: run NAME's binary in its own session, logging to LOGS/NAME.log. The inner shell
# writes its own PID and then execs the daemon, so the pidfile holds the daemon's real PID (not setsid's).
start_daemon() {
	local name="$1"; shift
	local bin pidfile="${PIDS}/${name}.pid"
	bin="$(daemon_bin "${name}")"
	if pid_of "${name}" >/dev/null; then return 0; fi
	rm -f "${pidfile}"
	mkdir -p "${PIDS}" "${LOGS}"
	# Daemons get stdin/stdout/stderr only: an inherited descriptor (a caller's `flock` lock, a pipe) would
	# otherwise stay open for the daemon's whole life.
	setsid bash -c 'echo $$ >"$0"; for fd in /proc/$$/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec ${fd}>&-"; done; exec "$@"' \
		"${pidfile}" "${bin}" "$@" >>"${LOGS}/${name}.log" 2>&1 </dev/null &
	local i
	for i in $(seq 50); do pid_of "${name}" >/dev/null && return 0; sleep 0.1; done
	tail -20 "${LOGS}/${name}.log" >&2 || true
	die "${name} did not start (log: ${LOGS}/${name}.log)"
}

# alive PID: the process exists and has not exited. A daemon whose launcher is gone is reparented to PID 1,
# which may take a second to reap it: a zombie counts as stopped.
alive() {
	local st
	st="$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null)" || return 1
	[[ -n "${st}" && "${st:0:1}" != Z ]]
}

# stop_pid PID NAME TIMEOUT: SIGTERM, wait, then SIGKILL.
stop_pid() {
	local pid="$1" name="$2" timeout="${3:-20}" i
	kill -TERM "${pid}" 2>/dev/null || return 0
	kill -CONT "${pid}" 2>/dev/null || true   # a paused daemon (an e2e test stops kube-router) must see it
	for i in $(seq $((timeout * 20))); do alive "${pid}" || return 0; sleep 0.05; done
	log "${name} (pid ${pid}) ignored SIGTERM for ${timeout}s: SIGKILL"
	kill -KILL "${pid}" 2>/dev/null || true
	for i in $(seq 100); do alive "${pid}" || return 0; sleep 0.05; done
}

stop_daemon() {
	local pid
	if pid="$(pid_of "$1")"; then stop_pid "${pid}" "$1" "${2:-20}"; log "stopped $1 (pid ${pid})"; fi
	rm -f "${PIDS}/$1.pid"
}

# wait_for DESCRIPTION SECONDS CMD...: poll CMD every 0.2 s.
wait_for() {
	local what="$1" secs="$2"; shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "timed out after ${secs}s waiting for ${what}"
		sleep 0.2
	done
}

# ---------------------------------------------------------------- host baseline and containment

# Record the host before the first change. Kept until `down` has restored it (so it survives a crash).
snapshot_host() {
	[[ -f "${HOSTSNAP}/complete" ]] && return 0
	rm -rf "${HOSTSNAP}" && mkdir -p "${HOSTSNAP}"
	local k p b v
	for k in "${SYSCTLS[@]}"; do
		if v="$(sysctl -n "${k}" 2>/dev/null)"; then printf '%s=%s\n' "${k}" "${v}"; fi
	done >"${HOSTSNAP}/sysctls"
	for p in "${HOST_PATHS[@]}"; do [[ -e "${p}" ]] && echo "${p}"; done >"${HOSTSNAP}/paths"
	for b in "${IPTABLES_BACKENDS[@]}"; do
		if command -v "${b}-save" >/dev/null; then "${b}-save" >"${HOSTSNAP}/${b}.rules" 2>/dev/null || rm -f "${HOSTSNAP}/${b}.rules"; fi
	done
	nft list tables >"${HOSTSNAP}/nft-tables" 2>/dev/null || true
	ipset list -n >"${HOSTSNAP}/ipsets" 2>/dev/null || true
	cgroup_children >"${HOSTSNAP}/cgroups"
	touch "${HOSTSNAP}/complete"
}

# The sysctls as the cluster left them once it was up: `down` restores only values nobody changed since.
record_sysctls_up() {
	local k v
	for k in "${SYSCTLS[@]}"; do
		if v="$(sysctl -n "${k}" 2>/dev/null)"; then printf '%s=%s\n' "${k}" "${v}"; fi
	done >"${HOSTSNAP}/sysctls.up"
}

# Top-level cgroups of every mounted hierarchy (the kubelet adds kubepods/ to each).
cgroup_children() {
	local h
	for h in /sys/fs/cgroup/*/; do
		[[ -d "${h}" ]] && { find "${h}" -mindepth 1 -maxdepth 1 -type d || true; }
	done 2>/dev/null | sort
}

default_dev() { ip -4 route show default | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }'; }

# Containment before any pod runs: the pod and service ranges route to the bridge, and everything that arrives
# from the bridge is routed by a table that knows only the pod range and a blackhole default. Local addresses
# (the node IP for the API server, the bridge gateway) are still reached: the local table comes first.
setup_network() {
	if ! ip link show "${NODE_LINK}" >/dev/null 2>&1; then
		ip link add "${NODE_LINK}" type veth peer name "${NODE_LINK}p"
	fi
	ip addr replace "${NODE_IP}/32" dev "${NODE_LINK}"
	ip link set "${NODE_LINK}p" up && ip link set "${NODE_LINK}" up
	if ! ip link show "${BRIDGE}" >/dev/null 2>&1; then ip link add "${BRIDGE}" type bridge; fi
	ip addr replace "${POD_GATEWAY}/${POD_CIDR#*/}" dev "${BRIDGE}"
	ip link set "${BRIDGE}" up
	ip route replace "${SERVICE_CIDR}" dev "${BRIDGE}"
	ip route replace "${POD_CIDR}" dev "${BRIDGE}" table "${ROUTE_TABLE}"
	ip route replace blackhole default table "${ROUTE_TABLE}"
	# (Pattern tests on captured output: `cmd | grep -q` fails under pipefail when grep exits early.)
	[[ "$(ip rule show priority "${RULE_PRIO}")" == *"iif ${BRIDGE} "* ]] ||
		ip rule add priority "${RULE_PRIO}" iif "${BRIDGE}" lookup "${ROUTE_TABLE}"
	if [[ -d /proc/sys/net/ipv6 ]]; then
		ip -6 route replace blackhole default table "${ROUTE_TABLE}"
		[[ "$(ip -6 rule show priority "${RULE_PRIO}")" == *"iif ${BRIDGE} "* ]] ||
			ip -6 rule add priority "${RULE_PRIO}" iif "${BRIDGE}" lookup "${ROUTE_TABLE}"
	fi
	# The CNI bridge turns on ip_forward: keep the outside network from routing into pods or services.
	local dev; dev="$(default_dev)"
	if [[ -n "${dev}" ]]; then
		local net
		for net in "${POD_CIDR}" "${SERVICE_CIDR}"; do
			[[ "$(ip rule show priority $((RULE_PRIO + 1)))" == *"to ${net} iif ${dev} "* ]] ||
				ip rule add priority $((RULE_PRIO + 1)) iif "${dev}" to "${net}" blackhole
		done
		echo "${dev}" >"${HOSTSNAP}/uplink"
	fi
}

teardown_network() {
	local l
	# Host ends of pod veths normally vanish with the pods' netns; a crash can leave some on the bridge.
	for l in $(ip -o link show master "${BRIDGE}" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		ip link del "${l}" 2>/dev/null || true
	done
	ip link del "${BRIDGE}" 2>/dev/null || true
	ip link del "${NODE_LINK}" 2>/dev/null || true
	while ip rule del priority "${RULE_PRIO}" iif "${BRIDGE}" lookup "${ROUTE_TABLE}" 2>/dev/null; do :; done
	while ip -6 rule del priority "${RULE_PRIO}" iif "${BRIDGE}" lookup "${ROUTE_TABLE}" 2>/dev/null; do :; done
	local dev net; dev="$(cat "${HOSTSNAP}/uplink" 2>/dev/null || default_dev)"
	for net in "${POD_CIDR}" "${SERVICE_CIDR}"; do
		while ip rule del priority $((RULE_PRIO + 1)) iif "${dev}" to "${net}" blackhole 2>/dev/null; do :; done
	done
	ip route flush table "${ROUTE_TABLE}" 2>/dev/null || true
	ip -6 route flush table "${ROUTE_TABLE}" 2>/dev/null || true
	ip route del "${SERVICE_CIDR}" 2>/dev/null || true
}

# What counts as ours on the host: names the daemons `up` starts give to what they create (kubelet and kube-proxy:
# KUBE-*, kube-router: KUBE-* chains and KUBE-*/kube-router-* ipsets, CNI plugins: CNI-*), and only if it was not
# there before `up`. `down` removes exactly those; anything else that appeared meanwhile belongs to another
# program and is left alone (and reported).
OUR_CHAINS_RE='^(KUBE-|CNI-)'
OUR_IPSETS_RE='^(KUBE-|kube-router-|inet6:KUBE-|inet6:kube-router-)'
OUR_CGROUPS=(kubepods kubepods.slice)
IPTABLES_NFT_TABLES="filter nat mangle raw security"   # the tables iptables-nft creates on first use
# Values the cluster's components set on their own schedule (the CNI bridge turns forwarding on at the first
# pod, after `up` has returned; the kubelet sets its kernel defaults): `down` restores these too.
declare -A CLUSTER_SYSCTLS=([net.ipv4.ip_forward]=1 [net.ipv4.conf.all.forwarding]=1 [vm.overcommit_memory]=1
	[kernel.panic]=10 [kernel.panic_on_oops]=1 [net.bridge.bridge-nf-call-iptables]=1)

# Undo our iptables changes: delete rules that were not there before (exact iptables-save lines, counting
# duplicates) and that live in one of our new chains or jump to one, then flush and delete our new chains.
restore_iptables() {
	local b="$1" before="${HOSTSNAP}/$1.rules"
	command -v "${b}-save" >/dev/null && [[ -f "${before}" ]] || return 0
	local now; now="$("${b}-save" 2>/dev/null)" || return 0
	[[ -n "${now}" ]] || return 0
	local script
	script="$(awk -v before="${before}" -v ours="${OUR_CHAINS_RE}" -v backend="${b}" '
		BEGIN { while ((getline l < before) > 0) { if (l ~ /^\*/) t = substr(l, 2); else if (l ~ /^:/) { split(substr(l, 2), a, " "); oldchain[t SUBSEP a[1]] = 1 } else if (l ~ /^-A /) oldrule[t SUBSEP l]++ } }
		/^\*/ { t = substr($0, 2); tables[++nt] = t; next }
		/^:/ { c = substr($1, 2); if (c ~ ours && !((t SUBSEP c) in oldchain)) { mine[t SUBSEP c] = 1; newchains[t] = newchains[t] " " c }; next }
		/^-A / { rules[t] = rules[t] "\n" $0; next }
		END { for (i = 1; i <= nt; i++) { t = tables[i]; n = split(substr(rules[t], 2), rs, "\n"); dels = ""
				for (j = 1; j <= n; j++) { r = rs[j]; na = split(r, a, " ")
					if (oldrule[t SUBSEP r] > 0) { oldrule[t SUBSEP r]--; continue }
					if ((t SUBSEP a[2]) in mine) continue   # flushed with its chain
					target = ""; for (k = 3; k < na; k++) if (a[k] == "-j" || a[k] == "-g") target = a[k + 1]
					if ((t SUBSEP target) in mine) dels = dels "\n-D" substr(r, 3)
					else printf "not ours, left alone (%s %s): %s\n", backend, t, r > "/dev/stderr" }
			if (dels == "" && newchains[t] == "") continue
			print "*" t; if (dels != "") print substr(dels, 2)
			m = split(newchains[t], cs, " "); for (j = 1; j <= m; j++) print "-F " cs[j]; for (j = 1; j <= m; j++) print "-X " cs[j]
			print "COMMIT" } }' <<<"${now}" 2> >(while read -r l; do log "${l}"; done))"
	[[ -n "${script}" ]] || return 0
	"${b}-restore" --noflush <<<"${script}" || log "warning: ${b}-restore could not undo everything (see ${b}-save)"
}

# nft_table_empty FAMILY NAME: the table holds no rule, set or map (iptables-nft leaves its base chains).
nft_table_empty() {
	local out; out="$(nft list table "$1" "$2" 2>/dev/null)" || return 1
	! grep -qE '^\s+(set|map|flowtable) |^\s+(ip|ip6|meta|tcp|udp|ct|counter|jump|goto|accept|drop|reject|iifname|oifname|mark|fib)\b' <<<"${out}"
}

restore_host() {
	[[ -f "${HOSTSNAP}/complete" ]] || return 0
	local b
	for b in "${IPTABLES_BACKENDS[@]}"; do restore_iptables "${b}"; done
	# nft tables that appeared: kube-proxy's own by name; iptables-nft's (ip filter/nat/...) only if nothing is
	# left in them once our rules are gone (another program may have put rules there meanwhile); others never.
	local fam name
	while read -r _ fam name; do
		[[ -n "${name}" ]] || continue
		grep -qxF "table ${fam} ${name}" "${HOSTSNAP}/nft-tables" && continue
		if [[ "${name}" == kube-proxy ]] || { [[ " ${IPTABLES_NFT_TABLES} " == *" ${name} "* ]] && nft_table_empty "${fam}" "${name}"; }; then
			nft delete table "${fam}" "${name}" || log "warning: could not delete nft table ${fam} ${name}"
		else
			log "nft table ${fam} ${name} appeared but holds rules that are not ours: left alone"
		fi
	done < <(nft list tables 2>/dev/null)
	local s
	while read -r s; do
		[[ -n "${s}" ]] && ! grep -qxF "${s}" "${HOSTSNAP}/ipsets" || continue
		if [[ "${s}" =~ ${OUR_IPSETS_RE} ]]; then
			ipset destroy "${s}" 2>/dev/null || log "warning: ipset ${s} is still in use"
		else
			log "ipset ${s} appeared but is not ours: left alone"
		fi
	done < <(ipset list -n 2>/dev/null)
	# Sysctls: put back the value from before `up` only while it still holds what the cluster set (recorded
	# once the node was Ready, or one of CLUSTER_SYSCTLS); a value someone else changed since is theirs.
	local kv k v set cur
	while IFS= read -r kv; do
		k="${kv%%=*}" v="${kv#*=}"
		cur="$(sysctl -n "${k}" 2>/dev/null)" || continue
		[[ "${cur}" == "${v}" ]] && continue
		set="$(sed -n "s|^${k}=||p" "${HOSTSNAP}/sysctls.up" 2>/dev/null || true)"
		if [[ ! -f "${HOSTSNAP}/sysctls.up" || "${cur}" == "${set}" || "${cur}" == "${CLUSTER_SYSCTLS[${k}]:-}" ]]; then
			sysctl -qw "${k}=${v}" || log "warning: could not restore ${k}"
		else
			log "sysctl ${k} changed to ${cur} by something else since the cluster set ${set}: left alone"
		fi
	done <"${HOSTSNAP}/sysctls"
	local c
	while read -r c; do
		grep -qxF "${c}" "${HOSTSNAP}/cgroups" && continue
		if [[ " ${OUR_CGROUPS[*]} " == *" $(basename "${c}") "* ]]; then
			find "${c}" -depth -type d -exec rmdir {} + 2>/dev/null || log "warning: cgroup ${c} is not empty"
		else
			log "cgroup ${c} appeared but is not ours: left alone"
		fi
	done < <(cgroup_children)
	local p
	for p in "${HOST_PATHS[@]}"; do
		[[ -e "${p}" ]] && ! grep -qxF "${p}" "${HOSTSNAP}/paths" && remove_tree "${p}"
	done
	return 0
}

# The e2e suite's own test hosts (netns + veth named airlock-e2e-*): a test killed by `go test -timeout` has
# no chance to remove them.
sweep_e2e_leftovers() {
	local l n
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1 | grep '^airlock-e2e-' || true); do
		ip link del "${l}" 2>/dev/null && log "removed e2e leftover link ${l}"
	done
	for n in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep '^airlock-e2e-' || true); do
		ip netns del "${n}" 2>/dev/null && log "removed e2e leftover netns ${n}"
	done
	return 0
}

# ---------------------------------------------------------------- mounts and leftovers

mounts_under() {
	local d; d="$(realpath -m "$1")"
	awk -v d="${d}/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

unmount_under() {
	local d="$1" m pass
	for pass in 1 2 3; do
		while read -r m; do [[ -n "${m}" ]] && { umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || true; }; done < <(mounts_under "${d}")
		[[ -z "$(mounts_under "${d}")" ]] && return 0
	done
	log "warning: still mounted under ${d}: $(mounts_under "${d}" | tr '\n' ' ')"
	return 1
}

# Remove a directory tree only when nothing is mounted below it (never delete through a bind mount).
remove_tree() {
	[[ -e "$1" ]] || return 0
	unmount_under "$1" || { log "warning: kept $1 (mounts remain)"; return 0; }
	rm -rf --one-file-system "$1"
}

# Containers whose shims outlived containerd (a crash): kill the shims by the PIDs their own pidfiles record,
# and force-delete whatever runsc and runc still know about under our roots.
kill_leftover_containers() {
	local f pid exe
	while IFS= read -r f; do
		pid="$(<"${f}")"; exe="$(readlink "/proc/${pid}/exe" 2>/dev/null)" || continue
		case "${exe}" in
			"${CONTAINERD_DIR}/containerd-shim-runc-v2"*|"${GVISOR_DIR}/containerd-shim-runsc-v1"*) stop_pid "${pid}" shim 5 ;;
		esac
	done < <(find "${CLUSTER_RUN_DIR}/containerd" -name shim.pid 2>/dev/null)
	local id
	if [[ -d "${CLUSTER_RUN_DIR}/runsc" ]]; then
		for id in $("${GVISOR_DIR}/runsc" --root "${CLUSTER_RUN_DIR}/runsc" list -q 2>/dev/null); do
			"${GVISOR_DIR}/runsc" --root "${CLUSTER_RUN_DIR}/runsc" delete -force "${id}" 2>/dev/null || true
		done
		find "${CLUSTER_RUN_DIR}/runsc" -mindepth 1 -maxdepth 1 -type d | while read -r f; do
			for id in $("${GVISOR_DIR}/runsc" --root "${f}" list -q 2>/dev/null); do
				"${GVISOR_DIR}/runsc" --root "${f}" delete -force "${id}" 2>/dev/null || true
			done
		done
	fi
	if [[ -d "${CLUSTER_RUN_DIR}/runc" ]]; then
		find "${CLUSTER_RUN_DIR}/runc" -mindepth 1 -maxdepth 1 -type d | while read -r f; do
			for id in $(runc --root "${f}" list -q 2>/dev/null); do runc --root "${f}" delete --force "${id}" 2>/dev/null || true; done
		done
	fi
}

# Remove every pod and container of our containerd (images stay). Needs containerd; after a crash `down`
# starts it just for this, so that CNI DEL and unmounting happen the normal way.
remove_containers() {
	if ! pid_of containerd >/dev/null; then
		# Only when a previous run left runtime state behind (a crash): the image store alone needs nothing.
		[[ -d "${CLUSTER_RUN_DIR}/containerd" ]] || return 0
		render_configs
		start_containerd || { log "warning: containerd would not start for cleanup"; return 0; }
	fi
	"${CRICTL[@]}" rm -af >/dev/null 2>&1 || true
	"${CRICTL[@]}" rmp -af >/dev/null 2>&1 || log "warning: crictl rmp -af failed"
	local ns id
	for ns in $("${CTR[@]}" namespaces ls -q 2>/dev/null); do
		for id in $("${CTR[@]}" -n "${ns}" tasks ls -q 2>/dev/null); do
			"${CTR[@]}" -n "${ns}" tasks kill -s KILL "${id}" >/dev/null 2>&1 || true
			"${CTR[@]}" -n "${ns}" tasks rm -f "${id}" >/dev/null 2>&1 || true
		done
		for id in $("${CTR[@]}" -n "${ns}" containers ls -q 2>/dev/null); do
			"${CTR[@]}" -n "${ns}" containers rm "${id}" >/dev/null 2>&1 || true
		done
	done
}

# ---------------------------------------------------------------- certificates, kubeconfigs, configs

openssl_cnf() { printf '[req]\ndistinguished_name = dn\n[dn]\n[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign,digitalSignature\nsubjectKeyIdentifier = hash\n'; }

# leaf_cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
leaf_cert() {
	local n="$1" subj="$2" eku="$3" san="${4:-}"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${PKI}/${n}.key" 2>/dev/null
	openssl req -new -key "${PKI}/${n}.key" -subj "${subj}" -config <(openssl_cnf) -out "${PKI}/${n}.csr"
	{
		printf 'basicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,keyEncipherment\n'
		printf 'extendedKeyUsage = %s\nauthorityKeyIdentifier = keyid\n' "${eku}"
		[[ -n "${san}" ]] && printf 'subjectAltName = %s\n' "${san}"
	} >"${PKI}/${n}.ext"
	openssl x509 -req -in "${PKI}/${n}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
		-days 3650 -extfile "${PKI}/${n}.ext" -out "${PKI}/${n}.crt" 2>/dev/null
	rm -f "${PKI}/${n}.csr" "${PKI}/${n}.ext"
}

# write_kubeconfig FILE CERT_NAME: a kubeconfig with embedded credentials (copyable anywhere on this host).
write_kubeconfig() {
	local f="$1" n="$2"
	mkdir -p "$(dirname "${f}")"
	cat >"${f}.tmp" <<-EOF
	apiVersion: v1
	kind: Config
	clusters:
	- name: airlock-local
	  cluster:
	    server: ${APISERVER}
	    certificate-authority-data: $(base64 -w0 <"${PKI}/ca.crt")
	users:
	- name: ${n}
	  user:
	    client-certificate-data: $(base64 -w0 <"${PKI}/${n}.crt")
	    client-key-data: $(base64 -w0 <"${PKI}/${n}.key")
	contexts:
	- name: airlock-local
	  context: {cluster: airlock-local, user: ${n}}
	current-context: airlock-local
	EOF
	chmod 600 "${f}.tmp" && mv -f "${f}.tmp" "${f}"
}

# Certificates are made once and kept across down/up (`down --purge` drops them).
make_pki() {
	[[ -f "${PKI}/complete" ]] && return 0
	rm -rf "${PKI}" "${KCFG}" && mkdir -p "${PKI}" && chmod 700 "${PKI}"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "${PKI}/ca.key" 2>/dev/null
	openssl req -x509 -new -key "${PKI}/ca.key" -subj "/CN=airlock-local-cluster-ca" -days 3650 \
		-config <(openssl_cnf) -extensions v3_ca -out "${PKI}/ca.crt"
	leaf_cert apiserver "/CN=kube-apiserver" serverAuth \
		"IP:${NODE_IP},IP:${KUBERNETES_SVC_IP},IP:127.0.0.1,DNS:localhost,DNS:${NODE_NAME},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	leaf_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	leaf_cert admin "/O=system:masters/CN=airlock-admin" clientAuth
	leaf_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
	leaf_cert scheduler "/CN=system:kube-scheduler" clientAuth
	leaf_cert kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" clientAuth
	leaf_cert kubelet-serving "/O=system:nodes/CN=system:node:${NODE_NAME}" serverAuth "IP:${NODE_IP},DNS:${NODE_NAME}"
	leaf_cert kube-proxy "/CN=system:kube-proxy" clientAuth
	leaf_cert kube-router "/CN=airlock:kube-router" clientAuth
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${PKI}/sa.key" 2>/dev/null
	openssl pkey -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub"
	write_kubeconfig "${ADMIN_KUBECONFIG}" admin
	local n
	for n in controller-manager scheduler kubelet kube-proxy kube-router; do write_kubeconfig "${KCFG}/${n}.kubeconfig" "${n}"; done
	touch "${PKI}/complete"
}

# render TEMPLATE DEST: fill {{VAR}} from this script's variables; fail on any placeholder left.
render() {
	local s v; s="$(<"$1")"
	for v in CLUSTER_DIR CLUSTER_RUN_DIR CONTAINERD_SOCK PAUSE_IMAGE GVISOR_DIR CNI_BIN_DIR BRIDGE POD_CIDR \
		POD_GATEWAY NODE_IP NODE_NAME DNS_IP CLUSTER_CIDR COREDNS_IMAGE; do
		s="${s//\{\{${v}\}\}/${!v}}"
	done
	[[ "${s}" != *"{{"* ]] || die "unfilled placeholder in $1"
	mkdir -p "$(dirname "$2")" && printf '%s\n' "${s}" >"$2"
}

render_configs() {
	PAUSE_IMAGE="$("${HACK_DIR}/images.sh" ref pause)"
	render "${HACK_DIR}/cluster/containerd.toml" "${CFG}/containerd.toml"
	render "${HACK_DIR}/cluster/runsc.toml" "${CFG}/runsc.toml"
	render "${HACK_DIR}/cluster/runsc-managed.toml" "${CFG}/runsc-managed.toml"
	render "${HACK_DIR}/cluster/runsc-seccomp.toml" "${CFG}/runsc-seccomp.toml"
	render "${HACK_DIR}/cluster/cni.conflist" "${CLUSTER_DIR}/cni/net.d/10-airlock.conflist"
	render "${HACK_DIR}/cluster/kubelet.yaml" "${CFG}/kubelet.yaml"
	render "${HACK_DIR}/cluster/kube-proxy.yaml" "${CFG}/kube-proxy.yaml"
	render "${HACK_DIR}/cluster/coredns.yaml" "${CFG}/coredns.yaml"
	cp "${HACK_DIR}/cluster/admission.yaml" "${CFG}/admission.yaml"
}

# Cluster DNS as a pod (kube-system/coredns behind kube-dns 10.96.0.10), when the CoreDNS binary was built.
start_dns() {
	[[ -x "${COREDNS_DIR}/coredns" ]] || { log "no CoreDNS binary (hack/build-node.sh coredns): cluster DNS skipped"; return 0; }
	"${HACK_DIR}/images.sh" binary "${COREDNS_IMAGE}" "${COREDNS_DIR}/coredns" >/dev/null
	"${KUBECTL[@]}" apply -f "${CFG}/coredns.yaml" >/dev/null
}

# ---------------------------------------------------------------- daemons

port_free() { [[ -z "$(ss -Hltn "sport = :$1")" ]]; }

start_etcd() {
	pid_of etcd >/dev/null || port_free 2379 || die "port 2379 is taken by another process: not starting etcd"
	# Loopback only, plain HTTP; no fsync: the data is thrown away by `down` anyway.
	start_daemon etcd --name airlock --data-dir "${CLUSTER_DIR}/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster airlock=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
	wait_for "etcd /health" 30 curl -sf http://127.0.0.1:2379/health
}

apiserver_ready() {
	curl -sf --cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" --key "${PKI}/admin.key" "${APISERVER}/readyz"
}

start_apiserver() {
	pid_of kube-apiserver >/dev/null || port_free 6443 || die "port 6443 is taken by another process"
	# Listens on the node IP only: pods reach it there (kubernetes Service -> NODE_IP:6443), the outside does not.
	start_daemon kube-apiserver --advertise-address="${NODE_IP}" --bind-address="${NODE_IP}" --secure-port=6443 \
		--etcd-servers=http://127.0.0.1:2379 --service-cluster-ip-range="${SERVICE_CIDR}" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--admission-control-config-file="${CFG}/admission.yaml" --allow-privileged=true \
		--client-ca-file="${PKI}/ca.crt" --tls-cert-file="${PKI}/apiserver.crt" --tls-private-key-file="${PKI}/apiserver.key" \
		--kubelet-client-certificate="${PKI}/apiserver-kubelet-client.crt" --kubelet-client-key="${PKI}/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="${PKI}/ca.crt" --kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="${PKI}/sa.pub" --service-account-signing-key-file="${PKI}/sa.key" \
		--cert-dir="${CLUSTER_DIR}/apiserver-certs" --profiling=false --v=0
	wait_for "kube-apiserver /readyz" 90 apiserver_ready
}

start_controllers() {
	start_daemon kube-controller-manager --kubeconfig="${KCFG}/controller-manager.kubeconfig" \
		--authentication-kubeconfig="${KCFG}/controller-manager.kubeconfig" \
		--authorization-kubeconfig="${KCFG}/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file="${PKI}/sa.key" --root-ca-file="${PKI}/ca.crt" \
		--cluster-signing-cert-file="${PKI}/ca.crt" --cluster-signing-key-file="${PKI}/ca.key" \
		--allocate-node-cidrs=true --cluster-cidr="${CLUSTER_CIDR}" --node-cidr-mask-size=24 \
		--service-cluster-ip-range="${SERVICE_CIDR}" --profiling=false \
		--resource-quota-sync-period=15s
	# The quota sync period (default 5m) bounds how soon a tenant quota created right after the Sandbox CRD
	# gets its usage filled; until then quota admission refuses creates. 15s keeps fresh test clusters usable.
	start_daemon kube-scheduler --kubeconfig="${KCFG}/scheduler.kubeconfig" \
		--authentication-kubeconfig="${KCFG}/scheduler.kubeconfig" --authorization-kubeconfig="${KCFG}/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false
}

start_containerd() {
	mkdir -p "${CLUSTER_RUN_DIR}" "${CLUSTER_DIR}/containerd"
	# For crictl (also via CRI_CONFIG_FILE from `env`): without it, crictl warns about /etc/crictl.yaml.
	printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n' "${CONTAINERD_SOCK}" "${CONTAINERD_SOCK}" >"${CLUSTER_RUN_DIR}/crictl.yaml"
	# Our shims first on PATH: Debian's older containerd-shim-runc-v2 in /usr/bin must never be picked.
	PATH="${CONTAINERD_DIR}:${GVISOR_DIR}:${PATH}" start_daemon containerd --config "${CFG}/containerd.toml"
	wait_for "containerd socket" 30 "${CTR[@]}" version
}

node_ready() {
	[[ "$("${KUBECTL[@]}" get node "${NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

start_kubelet() {
	start_daemon kubelet --config="${CFG}/kubelet.yaml" --kubeconfig="${KCFG}/kubelet.kubeconfig" \
		--root-dir="${CLUSTER_DIR}/kubelet" --cert-dir="${CLUSTER_DIR}/kubelet-pki" \
		--hostname-override="${NODE_NAME}" --node-ip="${NODE_IP}" --v=0
	wait_for "node ${NODE_NAME} to register" 60 "${KUBECTL[@]}" get node "${NODE_NAME}"
}

start_network_daemons() {
	start_daemon kube-proxy --config="${CFG}/kube-proxy.yaml"
	# Firewall only: kube-router enforces NetworkPolicy with iptables + ipset; routing and services stay ours.
	# KUBE_ROUTER_V=2 logs each sync's steps and each pod update (hack/kube-router-timeline.py reads them).
	start_daemon kube-router --kubeconfig="${KCFG}/kube-router.kubeconfig" --run-firewall=true --run-router=false \
		--run-service-proxy=false --hostname-override="${NODE_NAME}" --service-cluster-ip-range="${SERVICE_CIDR}" \
		--health-port=0 --metrics-port=0 --enable-ipv6=false --enable-ipv4=true --v="${KUBE_ROUTER_V:-0}"
}

# ---------------------------------------------------------------- commands

TIMINGS=()
phase_start=${SECONDS}
phase() { TIMINGS+=("$1=$((SECONDS - phase_start))s"); phase_start=${SECONDS}; }

require_root() { [[ ${EUID} -eq 0 ]] || die "run as root (the cluster changes links, routes and iptables)"; }

all_running() { local d; for d in "${DAEMONS[@]}"; do pid_of "${d}" >/dev/null || return 1; done; }

leftovers() {
	[[ -f "${HOSTSNAP}/complete" ]] && return 0
	local d; for d in "${DAEMONS[@]}"; do [[ -e "${PIDS}/${d}.pid" ]] && return 0; done
	return 1
}

cmd_up() {
	require_root
	local t0=${SECONDS}
	if all_running && node_ready; then log "cluster already up (node ${NODE_NAME} Ready)"; return 0; fi
	if leftovers; then
		log "found a partial or crashed cluster (stale pidfiles or host changes not undone): cleaning up first"
		cmd_down
		phase recover
	fi
	"${HACK_DIR}/build-node.sh" all
	"${HACK_DIR}/build-k8s.sh" all
	phase build
	mkdir -p "${CLUSTER_DIR}" "${LOGS}" "${PIDS}"
	[[ -d "${LOGS}" ]] && find "${LOGS}" -name '*.log' -size +50M -delete
	snapshot_host
	setup_network
	phase network
	make_pki
	render_configs
	phase pki
	start_etcd
	start_apiserver
	"${KUBECTL[@]}" apply -f "${HACK_DIR}/cluster/manifests.yaml" >/dev/null
	start_controllers
	phase control-plane
	start_containerd
	phase containerd
	"${HACK_DIR}/images.sh" pause
	if [[ "${AIRLOCK_CLUSTER_SANDBOX_IMAGE:-1}" == 1 ]]; then "${HACK_DIR}/images.sh" sandbox; fi
	"${HACK_DIR}/images.sh" import-pending
	phase images
	start_kubelet
	start_network_daemons
	wait_for "node ${NODE_NAME} Ready" 120 node_ready
	phase node
	start_dns
	phase dns
	record_sysctls_up
	log "cluster up in $((SECONDS - t0))s (${TIMINGS[*]}); node ${NODE_NAME} Ready at ${NODE_IP}"
	printf '%s up %s\n' "$(date -Is)" "${TIMINGS[*]}" >>"${LOGS}/timings"
	log "use it with: eval \"\$(hack/local-cluster.sh env)\""
}

cmd_down() {
	require_root
	local purge=0; [[ "${1:-}" == --purge ]] && purge=1
	local t0=${SECONDS}
	# The kubelet first, so it does not restart the pods we remove; then the pods themselves via CRI (CNI DEL,
	# unmounts); then containerd; then whatever a crash left behind.
	stop_daemon kubelet 30
	remove_containers
	stop_daemon containerd 30
	kill_leftover_containers
	local d
	for d in kube-router kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_daemon "${d}"; done
	unmount_under "${CLUSTER_RUN_DIR}" || true
	unmount_under "${CLUSTER_DIR}" || true
	local ns
	for ns in /run/netns/cni-*; do [[ -e "${ns}" ]] && { umount "${ns}" 2>/dev/null; rm -f "${ns}"; }; done
	sweep_e2e_leftovers
	teardown_network
	restore_host
	# Runtime state goes; certificates, kubeconfigs and containerd's image store stay for the next `up`.
	for d in etcd kubelet kubelet-pki cni pod-logs apiserver-certs containerd-opt config pids; do remove_tree "${CLUSTER_DIR}/${d}"; done
	remove_tree "${CLUSTER_RUN_DIR}"
	if ((purge)); then remove_tree "${CLUSTER_DIR}"; else rm -rf "${HOSTSNAP}"; fi
	log "cluster down in $((SECONDS - t0))s"
}

cmd_status() {
	local d pid rc=0
	for d in "${DAEMONS[@]}"; do
		if pid="$(pid_of "${d}")"; then
			printf '%-24s running  pid %-7s rss %s MiB\n' "${d}" "${pid}" "$(($(awk '/^VmRSS/ { print $2 }' "/proc/${pid}/status") / 1024))"
		else printf '%-24s stopped\n' "${d}"; rc=1; fi
	done
	if pid_of kube-apiserver >/dev/null; then
		"${KUBECTL[@]}" get nodes -o wide || true
		"${KUBECTL[@]}" get runtimeclasses || true
		"${KUBECTL[@]}" get pods -A -o wide || true
	fi
	return "${rc}"
}

cmd_env() {
	cat <<-EOF
	export KUBECONFIG=${ADMIN_KUBECONFIG}
	export PATH=${K8S_BIN_DIR}:${CRICTL_DIR}:${CONTAINERD_DIR}:\$PATH
	export CONTAINER_RUNTIME_ENDPOINT=unix://${CONTAINERD_SOCK}
	export CRI_CONFIG_FILE=${CLUSTER_RUN_DIR}/crictl.yaml
	export CONTAINERD_ADDRESS=${CONTAINERD_SOCK}
	export CONTAINERD_NAMESPACE=k8s.io
	export NO_PROXY=${NO_PROXY} no_proxy=${no_proxy}
	export AIRLOCK_E2E_NODE_IP=${NODE_IP} AIRLOCK_E2E_POD_CIDR=${POD_CIDR} AIRLOCK_E2E_POD_ROUTE_TABLE=${ROUTE_TABLE}
	export AIRLOCK_E2E_PIDS_DIR=${PIDS} AIRLOCK_E2E_KUBE_ROUTER_BIN=$(daemon_bin kube-router)
	EOF
}

# cmd_kill NAME: SIGKILL one daemon, found by its pidfile (fault tests in test/e2e). Everything else, and every
# host change, stays: `start NAME` brings it back.
cmd_kill() {
	require_root
	local name="${1:?usage: hack/local-cluster.sh kill DAEMON}" pid i
	daemon_bin "${name}" >/dev/null
	pid="$(pid_of "${name}")" || die "${name} is not running"
	kill -KILL "${pid}"
	for i in $(seq 100); do alive "${pid}" || return 0; sleep 0.05; done
	die "${name} (pid ${pid}) did not die"
}

# cmd_start NAME: start one stopped daemon of a cluster that is otherwise up (after `kill`), with the arguments
# `up` gives it, and wait until it serves.
cmd_start() {
	require_root
	local name="${1:?usage: hack/local-cluster.sh start DAEMON}"
	daemon_bin "${name}" >/dev/null
	[[ -f "${HOSTSNAP}/complete" ]] || die "the cluster is not up (hack/local-cluster.sh up starts all of it)"
	case "${name}" in
		etcd) start_etcd ;;
		kube-apiserver) start_apiserver ;;
		kube-controller-manager | kube-scheduler) start_controllers ;;
		containerd) start_containerd ;;
		kubelet) start_kubelet ;;
		kube-proxy | kube-router) start_network_daemons ;;
	esac
}

# Sourcing the script (for debugging single steps) defines everything and runs nothing.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
case "${1:-}" in
	up) cmd_up ;;
	down) shift; cmd_down "$@" ;;
	status) cmd_status ;;
	env) cmd_env ;;
	kill) shift; cmd_kill "$@" ;;
	start) shift; cmd_start "$@" ;;
	*) die "usage: hack/local-cluster.sh up|down [--purge]|status|env|kill DAEMON|start DAEMON" ;;
esac
