#!/usr/bin/env bash
# Builds Kubernetes and etcd binaries from the Go module proxy into ${AIRLOCK_CACHE}/k8s/<version>/,
# skipping any binary that is already there. Usage: hack/build-k8s.sh [--version VERSION] [NAME...]
# (default: the envtest set etcd, kube-apiserver, kubectl; "all" adds the node and control-plane daemons).
# VERSION (default: K8S_VERSION, or AIRLOCK_K8S_VERSION when set) is the current release or
# K8S_COMPAT_VERSION, the oldest Airlock supports (make test-compat); each is pinned, with its etcd, by a
# wrapper module of its own (hack/tools/k8s, hack/tools/k8s-compat).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ "${1:-}" == --version ]]; then
	[[ $# -ge 2 ]] || die "--version needs a value"
	K8S_VERSION="$2"
	K8S_BIN_DIR="${AIRLOCK_CACHE}/k8s/${K8S_VERSION}"
	shift 2
fi
# shellcheck source=versions.env
current="$(source "${HACK_DIR}/versions.env" && echo "${K8S_VERSION}")"
case "${K8S_VERSION}" in
	"${current}") module_dir="${HACK_DIR}/tools/k8s" ;;
	"${K8S_COMPAT_VERSION}") module_dir="${HACK_DIR}/tools/k8s-compat" ;;
	*) die "no wrapper module pins Kubernetes ${K8S_VERSION}: hack/versions.env pins ${current} (K8S_VERSION) and ${K8S_COMPAT_VERSION} (K8S_COMPAT_VERSION)" ;;
esac

envtest_set=(kube-apiserver etcd kubectl)
all_set=("${envtest_set[@]}" kube-controller-manager kube-scheduler kubelet kube-proxy)
if [[ $# -eq 0 ]]; then names=("${envtest_set[@]}")
elif [[ "$1" == all ]]; then names=("${all_set[@]}")
else names=("$@"); fi

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"

build_one() {
	local name="$1" pkg
	case "${name}" in
		etcd) pkg=go.etcd.io/etcd/server/v3 ;;
		kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl) pkg="k8s.io/kubernetes/cmd/${name}" ;;
		*) die "unknown binary ${name}" ;;
	esac
	if [[ -x "${K8S_BIN_DIR}/${name}" ]]; then return 0; fi
	log "building ${name} (${pkg}) into ${K8S_BIN_DIR}; the first Kubernetes build takes 15-20 min on 2 cores"
	local start=${SECONDS}
	_go_build() { (cd "${module_dir}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${OUT}" "${pkg}"); }
	atomic_build "${K8S_BIN_DIR}/${name}" _go_build
	log "built ${name} in $((SECONDS - start))s"
}

for n in "${names[@]}"; do build_one "${n}"; done
