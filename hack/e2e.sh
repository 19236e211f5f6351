#!/usr/bin/env bash
# Runs the end-to-end tests (test/e2e) on the local cluster: brings it up if it is not (building what is
# missing), builds and imports Airlock's images, runs the tests with the real manager binary, and brings the
# cluster down again if this script brought it up (AIRLOCK_KEEP_CLUSTER=1 keeps it).
# Usage: hack/e2e.sh [go test flags, e.g. -run TestNetworkIsolation]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION="${VERSION:-$(sed -n 's/^VERSION ?= //p' "${ROOT_DIR}/Makefile")}"
cluster="${HACK_DIR}/local-cluster.sh"

was_up=0
if "${cluster}" status >/dev/null 2>&1; then was_up=1; fi
finish() {
	local rc=$?
	if [[ ${was_up} -eq 0 && "${AIRLOCK_KEEP_CLUSTER:-0}" != 1 ]]; then
		log "bringing the local cluster down (set AIRLOCK_KEEP_CLUSTER=1 to keep it)"
		# Objects of "another program" planted first must survive `down`: it removes only what `up` made.
		local planted=0
		if "${cluster}" status >/dev/null 2>&1; then
			if "${HACK_DIR}/cluster-down-check.sh" plant; then planted=1; else "${HACK_DIR}/cluster-down-check.sh" remove; rc=1; fi
		fi
		"${cluster}" down || rc=1
		if ((planted)); then "${HACK_DIR}/cluster-down-check.sh" verify || rc=1; fi
	fi
	exit "${rc}"
}
trap finish EXIT

start=${SECONDS}
"${cluster}" up
log "cluster up in $((SECONDS - start))s"

cd "${ROOT_DIR}"
mkdir -p bin
ldflags="-s -w -X airlock.dev/airlock/internal/version.Version=${VERSION}"
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/manager ./cmd/manager
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/airlock-init ./cmd/airlock-init
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/gateway ./cmd/gateway
CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o bin/egress-proxy ./cmd/egress-proxy
init_image="localhost/airlock/init:${VERSION}"
"${HACK_DIR}/images.sh" binary "${init_image}" bin/airlock-init >/dev/null
egress_proxy_image="localhost/airlock/egress-proxy:${VERSION}"
"${HACK_DIR}/images.sh" binary "${egress_proxy_image}" bin/egress-proxy >/dev/null
"${HACK_DIR}/images.sh" sandbox >/dev/null
sandbox_image="$("${HACK_DIR}/images.sh" ref sandbox)"

eval "$("${cluster}" env)"
export AIRLOCK_E2E_MANAGER="${ROOT_DIR}/bin/manager" AIRLOCK_E2E_GATEWAY="${ROOT_DIR}/bin/gateway" AIRLOCK_E2E_INIT_IMAGE="${init_image}"
export AIRLOCK_E2E_SANDBOX_IMAGE="${sandbox_image}" AIRLOCK_E2E_KUBECTL="${K8S_BIN_DIR}/kubectl" AIRLOCK_E2E_EGRESS_PROXY_IMAGE="${egress_proxy_image}"
log "running end-to-end tests (sandbox image ${sandbox_image}, init image ${init_image})"
go test ./test/e2e/ -count=1 -v -timeout 45m "$@"

# The chart installs the manager and gateway in-cluster: run it after the suite above, whose out-of-cluster
# manager is gone by now. Skipped when the caller selected tests or benchmarks (-run/-bench).
if [[ $# -eq 0 ]]; then
	log "installing Airlock with Helm into the local cluster (in-cluster manager and gateway)"
	make -s -C "${ROOT_DIR}" images-airlock VERSION="${VERSION}" >/dev/null
	AIRLOCK_E2E_HELM="${AIRLOCK_E2E_HELM:?set by make test-e2e}" go test ./test/helm/ -count=1 -v -timeout 15m
fi
