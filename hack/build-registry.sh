#!/usr/bin/env bash
# Builds CNCF distribution's registry (a real OCI registry, for `make test-release`: `make push` fills one on
# loopback) from the Go module proxy into ${AIRLOCK_CACHE}/tools/registry-<version>, once per version, and
# prints its path.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dest="${AIRLOCK_CACHE}/tools/registry-${DISTRIBUTION_VERSION}"
if [[ -x "${dest}" ]]; then echo "${dest}"; exit 0; fi
log "building the registry (distribution ${DISTRIBUTION_VERSION}) into ${dest} (~8 min cold on 2 cores)"
start=${SECONDS}
_go_install() {
	local gobin
	gobin="$(mktemp -d)"
	# distribution's own go.mod pins its dependencies (no replace directives), so `go install pkg@version` works.
	GOBIN="${gobin}" CGO_ENABLED=0 go install -trimpath \
		-ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=${DISTRIBUTION_VERSION}" \
		"github.com/distribution/distribution/v3/cmd/registry@${DISTRIBUTION_VERSION}" &&
		mv -f "${gobin}/registry" "${OUT}"
	local rc=$?
	rm -rf "${gobin}"
	return ${rc}
}
atomic_build "${dest}" _go_install
log "built the registry in $((SECONDS - start))s"
echo "${dest}"
