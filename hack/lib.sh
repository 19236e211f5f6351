# Shared helpers for hack/ scripts. Source it; it sets strict mode and loads pinned versions.
set -euo pipefail
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT_DIR="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source=versions.env
source "${HACK_DIR}/versions.env"
AIRLOCK_CACHE="${AIRLOCK_CACHE:-${HOME}/.cache/airlock}"
# AIRLOCK_K8S_VERSION=${K8S_COMPAT_VERSION} runs everything (the local cluster, its e2e) on the oldest Kubernetes
# Airlock supports instead; hack/build-k8s.sh builds either.
K8S_VERSION="${AIRLOCK_K8S_VERSION:-${K8S_VERSION}}"
K8S_BIN_DIR="${AIRLOCK_CACHE}/k8s/${K8S_VERSION}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# atomic_build DEST CMD... runs CMD with $OUT set to a temporary path and moves it to DEST on success,
# so that an interrupted build never leaves a half-written binary that a later run would trust.
atomic_build() {
	local dest="$1"; shift
	mkdir -p "$(dirname "${dest}")"
	local tmp="${dest}.tmp.$$"
	OUT="${tmp}" "$@" || { rm -f "${tmp}"; return 1; }
	mv -f "${tmp}" "${dest}"
}
