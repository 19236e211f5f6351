#!/usr/bin/env bash
# End-to-end check of a running local cluster (hack/local-cluster.sh up), printing measured numbers:
#  - restricted-PSS pods (uid 1000, RuntimeDefault seccomp, drop ALL, no token) run the sandbox image under
#    gVisor and runc; `uname -r` tells which kernel answers;
#  - pod start latency per runtime (create -> Ready, N runs each);
#  - a pod reaches another pod and https://kubernetes.default:443; after a deny-all egress NetworkPolicy the
#    same probes fail, and the failure mode (refused or timeout) is reported.
# Probes only target this cluster's pods and services. Usage: hack/cluster-verify.sh [RUNS]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${HACK_DIR}/node-lib.sh"

RUNS="${1:-3}"
NS=airlock-verify
IMAGE="$("${HACK_DIR}/images.sh" ref sandbox)"
eval "$("${HACK_DIR}/local-cluster.sh" env)"
k() { kubectl -n "${NS}" "$@"; }

# pod_yaml NAME RUNTIMECLASS [COMMAND...]
pod_yaml() {
	local name="$1" rc="$2"; shift 2
	local cmd='["sleep", "infinity"]'
	[[ $# -gt 0 ]] && cmd="$(printf '"%s", ' "$@")" && cmd="[${cmd%, }]"
	cat <<-EOF
	apiVersion: v1
	kind: Pod
	metadata: {name: ${name}, labels: {app: ${name}}}
	spec:
	  runtimeClassName: ${rc}
	  automountServiceAccountToken: false
	  terminationGracePeriodSeconds: 0
	  securityContext:
	    runAsNonRoot: true
	    runAsUser: 1000
	    runAsGroup: 1000
	    seccompProfile: {type: RuntimeDefault}
	  containers:
	  - name: main
	    image: ${IMAGE}
	    imagePullPolicy: Never
	    command: ${cmd}
	    securityContext:
	      allowPrivilegeEscalation: false
	      capabilities: {drop: [ALL]}
	EOF
}

# start_pod NAME RUNTIMECLASS [COMMAND...]: create and wait for Ready; prints milliseconds taken.
start_pod() {
	local t0 t1
	t0="$(date +%s%N)"
	pod_yaml "$@" | k apply -f - >/dev/null
	k wait --for=condition=Ready "pod/$1" --timeout=120s >/dev/null
	t1="$(date +%s%N)"
	echo $(((t1 - t0) / 1000000))
}

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# probe POD HOST PORT: one TCP connect with a 3 s timeout, from inside POD with its own python3.
probe() {
	k exec "$1" -- python3 -c '
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close(); r = "connected"
except socket.timeout: r = "timeout"
except ConnectionRefusedError: r = "refused"
except OSError as e: r = "error:" + (e.strerror or str(e)).replace(" ", "_")
print(r, "%dms" % ((time.monotonic() - t) * 1000))' "$2" "$3"
}

# A test host in a network namespace of our own (198.18.0.2, benchmarking range, never routed outside):
# reachable from the node, so a pod reaching it would prove that pod traffic can leave the node.
TH_NS=airlock-verify-th TH_IP=198.18.0.2 TH_PID=
had_netns_dir=0; [[ -d /run/netns ]] && had_netns_dir=1
cleanup() {
	[[ -n "${TH_PID}" ]] && kill "${TH_PID}" 2>/dev/null
	ip link del airlock-vth0 2>/dev/null || true
	ip netns del "${TH_NS}" 2>/dev/null || true
	# `ip netns add` bind-mounts /run/netns onto itself; undo that if it was ours.
	if ((!had_netns_dir)) && [[ -d /run/netns && -z "$(ls -A /run/netns)" ]]; then umount /run/netns 2>/dev/null; rmdir /run/netns; fi
}
trap cleanup EXIT
make_test_host() {
	ip netns add "${TH_NS}"
	ip link add airlock-vth0 type veth peer name airlock-vth1
	ip link set airlock-vth1 netns "${TH_NS}"
	ip addr add 198.18.0.1/30 dev airlock-vth0 && ip link set airlock-vth0 up
	ip -n "${TH_NS}" addr add "${TH_IP}/30" dev airlock-vth1
	ip -n "${TH_NS}" link set airlock-vth1 up && ip -n "${TH_NS}" link set lo up
	ip -n "${TH_NS}" route add default via 198.18.0.1
	ip netns exec "${TH_NS}" python3 -m http.server 8080 --bind "${TH_IP}" >/dev/null 2>&1 &
	TH_PID=$!
	for _ in $(seq 150); do curl --noproxy '*' -s -m 1 -o /dev/null "http://${TH_IP}:8080/" && return 0; sleep 0.1; done
	die "test host ${TH_IP} did not come up"
}

kubectl delete namespace "${NS}" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "${NS}" >/dev/null
kubectl label namespace "${NS}" pod-security.kubernetes.io/enforce=restricted >/dev/null
wait_sa() { k get serviceaccount default >/dev/null 2>&1; }
for _ in $(seq 50); do wait_sa && break; sleep 0.2; done

log "pod start (create -> Ready), ${RUNS} runs per runtime"
for rc in runc gvisor; do
	ms=()
	for i in $(seq "${RUNS}"); do
		ms+=("$(start_pod "start-${rc}-${i}" "${rc}")")
		k delete pod "start-${rc}-${i}" --wait=false >/dev/null
	done
	printf 'start %-6s ms: %s (median %s)\n' "${rc}" "${ms[*]}" "$(printf '%s\n' "${ms[@]}" | median)"
done

log "restricted pods under each runtime"
start_pod client-gvisor gvisor >/dev/null
start_pod client-runc runc >/dev/null
start_pod target gvisor python3 -m http.server 8080 >/dev/null
printf 'uname -r gvisor: %s\n' "$(k exec client-gvisor -- uname -r)"
printf 'uname -r runc:   %s\n' "$(k exec client-runc -- uname -r)"
printf 'id gvisor:       %s\n' "$(k exec client-gvisor -- id)"
printf 'dmesg gvisor:    %s\n' "$(k exec client-gvisor -- dmesg 2>/dev/null | head -1)"
target_ip="$(k get pod target -o jsonpath='{.status.podIP}')"
for _ in $(seq 50); do [[ "$(probe client-runc "${target_ip}" 8080)" == connected* ]] && break; sleep 0.2; done

log "probes before any NetworkPolicy"
for c in client-gvisor client-runc; do
	printf '%-14s -> target pod %s:8080: %s\n' "${c}" "${target_ip}" "$(probe "${c}" "${target_ip}" 8080)"
	printf '%-14s -> kubernetes.default:443: %s\n' "${c}" "$(k exec "${c}" -- curl -sk -m 5 -o /dev/null -w '%{http_code} %{time_total}s' https://kubernetes.default:443/version || echo failed)"
done

log "containment: a test host in our own netns, reachable from the node, must not be reachable from pods"
make_test_host
printf 'node           -> test host %s:8080: %s\n' "${TH_IP}" "$(curl --noproxy '*' -s -m 3 -o /dev/null -w 'http %{http_code}' "http://${TH_IP}:8080/")"
for c in client-gvisor client-runc; do
	printf '%-14s -> test host %s:8080: %s\n' "${c}" "${TH_IP}" "$(probe "${c}" "${TH_IP}" 8080)"
done

log "deny-all egress NetworkPolicy"
t0="$(date +%s%N)"
k apply -f - >/dev/null <<-EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all-egress}
spec:
  podSelector: {}
  policyTypes: [Egress]
EOF
until [[ "$(probe client-runc "${target_ip}" 8080)" != connected* ]]; do
	(($(date +%s%N) - t0 < 30000000000)) || die "the deny-all policy was not enforced within 30 s"
	sleep 0.1
done
printf 'deny-all enforced after ~%d ms\n' $((($(date +%s%N) - t0) / 1000000))
for c in client-gvisor client-runc; do
	printf '%-14s -> target pod %s:8080: %s\n' "${c}" "${target_ip}" "$(probe "${c}" "${target_ip}" 8080)"
	printf '%-14s -> kubernetes service %s:443: %s\n' "${c}" 10.96.0.1 "$(probe "${c}" 10.96.0.1 443)"
	printf '%-14s -> node %s:10250: %s\n' "${c}" 10.123.0.1 "$(probe "${c}" 10.123.0.1 10250)"
	printf '%-14s -> DNS kubernetes.default: %s\n' "${c}" "$(k exec "${c}" -- timeout 5 getent hosts kubernetes.default >/dev/null 2>&1 && echo resolved || echo blocked)"
done

if [[ "${AIRLOCK_VERIFY_KEEP:-}" != 1 ]]; then kubectl delete namespace "${NS}" --wait=false >/dev/null; fi
log "verify done"
