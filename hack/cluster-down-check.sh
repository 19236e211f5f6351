#!/usr/bin/env bash
# Shows that `hack/local-cluster.sh down` removes only what `up` made: while the cluster runs, `plant` adds
# objects of the kinds `down` cleans (an iptables rule and chain, an nft table, an ipset, a sysctl change, a
# cgroup) that belong to "another program"; after `down`, `verify` checks that every one is still there and
# then removes them, restoring the sysctl. hack/e2e.sh runs it around the `down` it does.
#   hack/cluster-down-check.sh plant | verify | remove
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="${AIRLOCK_CLUSTER_DIR:-/var/lib/airlock-cluster}/down-check"
TAG=airlock-down-check
CHAIN=AIRLOCK-DOWN-CHECK
NFT_TABLE=airlock_down_check
CGROUP=/sys/fs/cgroup/pids/${TAG}
SYSCTL=net.ipv4.conf.all.route_localnet    # in the list `down` restores; the cluster leaves it alone
# 192.0.2.0/24 is TEST-NET-1: the rules match no traffic on this machine.
RULE=(FORWARD -s 192.0.2.77/32 -m comment --comment "${TAG}" -j "${CHAIN}")

plant() {
	mkdir -p "${STATE}"
	# The nft tables from before the cluster came up: `remove` drops an iptables-nft table only if it is
	# empty and was not there then (our rules may be the last in a table the cluster made).
	cp "${AIRLOCK_CLUSTER_DIR:-/var/lib/airlock-cluster}/host/nft-tables" "${STATE}/nft-tables"
	sysctl -n "${SYSCTL}" >"${STATE}/sysctl"
	iptables -N "${CHAIN}"
	iptables -A "${CHAIN}" -s 192.0.2.77/32 -j RETURN
	iptables -A "${RULE[@]}"
	nft add table inet "${NFT_TABLE}"
	ipset create "${TAG}" hash:ip
	[[ -d /sys/fs/cgroup/pids ]] && mkdir -p "${CGROUP}"
	sysctl -qw "${SYSCTL}=$((1 - $(<"${STATE}/sysctl")))"
	log "planted another program's iptables rule and chain, nft table, ipset, cgroup and ${SYSCTL} change"
}

verify() {
	local bad=()
	iptables -C "${RULE[@]}" 2>/dev/null || bad+=("iptables rule in FORWARD")
	iptables -S "${CHAIN}" >/dev/null 2>&1 || bad+=("iptables chain ${CHAIN}")
	nft list table inet "${NFT_TABLE}" >/dev/null 2>&1 || bad+=("nft table inet ${NFT_TABLE}")
	ipset list -n 2>/dev/null | grep -qxF "${TAG}" || bad+=("ipset ${TAG}")
	if [[ -d /sys/fs/cgroup/pids ]]; then [[ -d "${CGROUP}" ]] || bad+=("cgroup ${CGROUP}"); fi
	[[ "$(sysctl -n "${SYSCTL}")" == "$((1 - $(<"${STATE}/sysctl")))" ]] || bad+=("sysctl ${SYSCTL}")
	remove
	if [[ ${#bad[@]} -gt 0 ]]; then
		log "error: 'down' removed or reset what it did not create: ${bad[*]}"
		return 1
	fi
	log "'down' left another program's objects alone (iptables rule + chain, nft table, ipset, cgroup, sysctl)"
}

remove() {
	iptables -D "${RULE[@]}" 2>/dev/null || true
	iptables -F "${CHAIN}" 2>/dev/null && iptables -X "${CHAIN}" 2>/dev/null || true
	nft delete table inet "${NFT_TABLE}" 2>/dev/null || true
	ipset destroy "${TAG}" 2>/dev/null || true
	rmdir "${CGROUP}" 2>/dev/null || true
	local fam name
	while read -r _ fam name; do
		[[ -n "${name}" ]] || continue
		grep -qxF "table ${fam} ${name}" "${STATE}/nft-tables" 2>/dev/null && continue
		[[ " filter nat mangle raw security " == *" ${name} "* ]] || continue
		nft list table "${fam}" "${name}" 2>/dev/null | grep -qE '^\s+(ip|ip6|meta|counter|jump|goto|accept|drop|reject|set|map) ' && continue
		nft delete table "${fam}" "${name}" 2>/dev/null || true
	done < <(nft list tables 2>/dev/null)
	[[ -f "${STATE}/sysctl" ]] && sysctl -qw "${SYSCTL}=$(<"${STATE}/sysctl")"
	rm -rf "${STATE}"
}

case "${1:-}" in
	plant) plant ;;
	verify) verify ;;
	remove) remove ;;
	*) die "usage: hack/cluster-down-check.sh plant|verify|remove" ;;
esac
