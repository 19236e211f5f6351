#!/usr/bin/env bash
# Builds kwok (simulated nodes and pods, for make bench-scale) from the Go module proxy into
# ${AIRLOCK_CACHE}/tools/kwok-<version>, once per version.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dest="${AIRLOCK_CACHE}/tools/kwok-${KWOK_VERSION}"
if [[ -x "${dest}" ]]; then echo "${dest}"; exit 0; fi
log "building kwok ${KWOK_VERSION} into ${dest} (a few minutes on 2 cores)"
start=${SECONDS}
_go_install() {
	local gobin
	gobin="$(mktemp -d)"
	# kwok's own go.mod pins its Kubernetes libraries; nothing of ours is compiled in.
	GOBIN="${gobin}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" &&
		mv -f "${gobin}/kwok" "${OUT}"
	local rc=$?
	rm -rf "${gobin}"
	return ${rc}
}
atomic_build "${dest}" _go_install
log "built kwok in $((SECONDS - start))s"
echo "${dest}"
