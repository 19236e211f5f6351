#!/usr/bin/env bash
# make demo: Airlock end to end, as an agent service would use it. Brings up the built-in local cluster (unless
# KUBECONFIG is set: then that cluster is used), installs Airlock with its Helm chart, creates a tenant and an
# API key, and runs the agent loop through the gateway: create a sandbox, write a Python file, run it, read the
# failure, fix it, run it again, delete the sandbox. The cluster and the installation are left running.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${ROOT_DIR}"

VERSION="${VERSION:-$(sed -n 's/^VERSION ?= //p' Makefile)}"
HELM="${AIRLOCK_CACHE}/tools/helm-${HELM_VERSION}"
NS=airlock-system
KEY_NS=airlock-keys # the chart's gateway.keyNamespace
TENANT=team-a
local_cluster=0

step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

if [[ -n "${KUBECONFIG:-}" ]]; then
	step "Using the cluster of KUBECONFIG=${KUBECONFIG} (unset it to use the built-in local cluster)"
	log "the images localhost/airlock/{manager,gateway,init}:${VERSION} and the sandbox image must be available to its nodes"
else
	step "Starting the built-in local cluster (hack/local-cluster.sh up)"
	log "the first time this builds Kubernetes, etcd, containerd, gVisor, kube-router and CoreDNS from source and a"
	log "Debian sandbox image: about an hour on 2 cores (later: under a minute); progress is logged below"
	hack/local-cluster.sh up
	eval "$(hack/local-cluster.sh env)"
	local_cluster=1
fi
KUBECTL="${K8S_BIN_DIR}/kubectl"

step "Building Airlock's images and installing the Helm chart into ${NS}"
make -s "${HELM}" >/dev/null
make -s images-airlock VERSION="${VERSION}" >/dev/null
values=()
if [[ ${local_cluster} -eq 1 ]]; then
	hack/images.sh sandbox >/dev/null
	values=(-f charts/airlock/ci/local-cluster-values.yaml)
else
	values=(--set "tenants[0].name=${TENANT}")
fi
"${HELM}" upgrade --install airlock charts/airlock -n "${NS}" --create-namespace "${values[@]}" --wait --timeout 5m >/dev/null
"${KUBECTL}" -n "${NS}" get deploy

step "Creating an API key for tenant ${TENANT}"
KEY="$(go run ./cmd/airlock keys create --tenant "${TENANT}" --key-namespace "${KEY_NS}" --name demo)"
log "key: ${KEY:0:12}... (shown once; stored hashed in a Secret in ${KEY_NS})"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
svc="$("${KUBECTL}" -n "${NS}" get svc -l app.kubernetes.io/component=gateway -o jsonpath='{.items[0].metadata.name}')"
"${KUBECTL}" -n "${NS}" port-forward --address 127.0.0.1 "svc/${svc}" "${port}:80" >/dev/null 2>&1 &
pf_pid=$!
trap 'kill "${pf_pid}" 2>/dev/null || true' EXIT
GW="http://127.0.0.1:${port}"
for _ in $(seq 1 100); do curl -sf "${GW}/healthz" >/dev/null && break; sleep 0.2; done

api() { # METHOD PATH [JSON]
	curl -sS -X "$1" -H "Authorization: Bearer ${KEY}" -H 'Content-Type: application/json' ${3:+--data "$3"} "${GW}$2"
}
show() { # prints what the model would see of an exec result
	python3 -c 'import json,sys; r=json.load(sys.stdin)
print("  exit_code:", r["exit_code"], " outcome:", r["outcome"], " duration_ms:", r["duration_ms"], " truncated:", r["truncated"])
for s in ("stdout", "stderr"):
    if r[s]: print("  " + s + ":\n" + "".join("    | " + l + "\n" for l in r[s].rstrip("\n").split("\n")))'
}

step "Agent: create a sandbox  (POST /v1/sandboxes {\"size\":\"small\",\"timeout_minutes\":30})"
# A tenant created moments after the CRDs has a quota the cluster is still initialising: the gateway answers
# 503 with a retry hint then, and an agent service retries, as here.
for _ in $(seq 1 60); do
	created="$(api POST /v1/sandboxes '{"size":"small","timeout_minutes":30}')"
	[[ "${created}" == *'"cluster_unavailable"'* ]] || break
	log "the tenant's quota is still initialising; retrying in 5 s"
	sleep 5
done
echo "  ${created}"
ID="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"${created}")"

step "Agent: write solve.py  (PUT /v1/sandboxes/${ID}/files?path=solve.py)"
printf 'prices = {"apple": 3, "pear": 5}\ntotal = sum(prices[f] for f in ["apple", "pear", "plum"])\nprint("total", total)\n' |
	curl -sS -X PUT -H "Authorization: Bearer ${KEY}" --data-binary @- "${GW}/v1/sandboxes/${ID}/files?path=solve.py" >/dev/null
api POST "/v1/sandboxes/${ID}/exec" '{"command":"cat -n solve.py"}' | show

step "Agent: run it  (POST /v1/sandboxes/${ID}/exec {\"command\":\"python3 solve.py\"})"
api POST "/v1/sandboxes/${ID}/exec" '{"command":"python3 solve.py"}' | show

step "Agent: the traceback says KeyError: 'plum'; fix it and run again"
api POST "/v1/sandboxes/${ID}/exec" '{"command":"sed -i \"s/prices\\[f\\]/prices.get(f, 0)/\" solve.py && python3 solve.py"}' | show

step "Agent: state persists — the fixed file is still there; the network is not"
api POST "/v1/sandboxes/${ID}/exec" '{"command":"ls -l solve.py; python3 -c \"import socket; socket.create_connection((\\\"203.0.113.10\\\", 80), 3)\" 2>&1 | tail -1","timeout_ms":20000}' | show

step "Agent: delete the sandbox  (DELETE /v1/sandboxes/${ID})"
api DELETE "/v1/sandboxes/${ID}"
echo

step "Done"
log "Airlock stays installed: kubectl get sandboxes -A; hack/local-cluster.sh down stops the local cluster"
