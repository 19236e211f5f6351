#!/usr/bin/env bash
# Builds and installs what the local cluster's node runs besides Kubernetes itself:
#   apt         Debian packages (runc, CNI plugins, umoci, debootstrap, iptables, ipset, ...) if missing
#   containerd  containerd, ctr, containerd-shim-runc-v2   -> ${AIRLOCK_CACHE}/containerd/<version>/
#   crictl      crictl                                    -> ${AIRLOCK_CACHE}/crictl/<version>/
#   gvisor      runsc, containerd-shim-runsc-v1 (patched) -> ${AIRLOCK_CACHE}/gvisor/<version>-<patch hash>/
#   kube-router kube-router (NetworkPolicy enforcer)      -> ${AIRLOCK_CACHE}/kube-router/<version>/
#   coredns     coredns (cluster DNS)                     -> ${AIRLOCK_CACHE}/coredns/<version>/
# Usage: hack/build-node.sh [all|NAME...] (default: all). Present binaries are skipped; builds are atomic.
# Everything comes from the Go module proxy through the wrapper modules in hack/tools/<name>/.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${HACK_DIR}/node-lib.sh"

# Static binaries: runsc must be (its umounter re-executes /proc/self/exe in an empty mount namespace), and
# static everything keeps the node independent of the host's libc.
export CGO_ENABLED=0

# go_build MODULE_DIR PKG DEST [LDFLAGS [GO BUILD ARGS...]]: build one command of a wrapper module, atomically.
go_build() {
	local mod="$1" pkg="$2" dest="$3" ldflags="${4:-}"; shift 4 || shift $#
	local extra=("$@")
	[[ -x "${dest}" ]] && return 0
	log "building $(basename "${dest}") (${pkg})"
	local start=${SECONDS}
	_build() { (cd "${mod}" && go build -trimpath "${extra[@]}" -ldflags "-s -w ${ldflags}" -o "${OUT}" "${pkg}"); }
	atomic_build "${dest}" _build
	log "built $(basename "${dest}") in $((SECONDS - start))s"
}

build_apt() {
	local missing=() p
	for p in "${NODE_APT_PACKAGES[@]}"; do
		[[ "$(dpkg-query -W -f='${Status}' "${p}" 2>/dev/null)" == "install ok installed" ]] || missing+=("${p}")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	log "installing Debian packages: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_containerd() {
	local mod="${HACK_DIR}/tools/containerd" v="${CONTAINERD_VERSION}"
	local ld="-X github.com/containerd/containerd/v2/version.Version=${v} -X github.com/containerd/containerd/v2/version.Revision=module-proxy"
	# no_btrfs/no_devmapper/no_zfs: snapshotters the local node never uses (btrfs needs cgo anyway).
	local tags=(-tags "no_btrfs no_devmapper no_zfs")
	go_build "${mod}" github.com/containerd/containerd/v2/cmd/containerd "${CONTAINERD_DIR}/containerd" "${ld}" "${tags[@]}"
	go_build "${mod}" github.com/containerd/containerd/v2/cmd/ctr "${CONTAINERD_DIR}/ctr" "${ld}" "${tags[@]}"
	go_build "${mod}" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		"${CONTAINERD_DIR}/containerd-shim-runc-v2" "${ld}" "${tags[@]}"
}

build_crictl() {
	go_build "${HACK_DIR}/tools/crictl" sigs.k8s.io/cri-tools/cmd/crictl "${CRICTL_DIR}/crictl" \
		"-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION}"
}

# gVisor: runsc and the shim are built from one copy of the pinned module source with the shim patch applied
# (hack/patches/), through a temporary modfile whose replace directive points at that copy.
build_gvisor() {
	[[ -x "${GVISOR_DIR}/runsc" && -x "${GVISOR_DIR}/containerd-shim-runsc-v1" ]] && return 0
	local mod="${HACK_DIR}/tools/gvisor" src="${GVISOR_DIR}/src"
	if [[ ! -f "${src}/.airlock-patched" ]]; then
		local orig
		orig="$(cd "${mod}" && go mod download -json "gvisor.dev/gvisor@${GVISOR_VERSION}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
		[[ -d "${orig}" ]] || die "gvisor.dev/gvisor@${GVISOR_VERSION} not in the module cache"
		rm -rf "${src}.tmp" && mkdir -p "${GVISOR_DIR}"
		cp -r "${orig}" "${src}.tmp" && chmod -R u+w "${src}.tmp"
		sed -i -f "${GVISOR_PATCH}" "${src}.tmp/pkg/shim/v1/manager.go"
		grep -q 'airlock: tolerate EPERM' "${src}.tmp/pkg/shim/v1/manager.go" ||
			die "the gVisor shim patch no longer applies to ${GVISOR_VERSION}: update ${GVISOR_PATCH}"
		touch "${src}.tmp/.airlock-patched"
		rm -rf "${src}" && mv "${src}.tmp" "${src}"
	fi
	cp "${mod}/go.mod" "${GVISOR_DIR}/build.mod" && cp "${mod}/go.sum" "${GVISOR_DIR}/build.sum"
	(cd "${mod}" && go mod edit -modfile="${GVISOR_DIR}/build.mod" -replace "gvisor.dev/gvisor=${src}")
	local ld="-X gvisor.dev/gvisor/runsc/version.version=${GVISOR_VERSION}"
	go_build "${mod}" gvisor.dev/gvisor/runsc "${GVISOR_DIR}/runsc" "${ld}" -modfile="${GVISOR_DIR}/build.mod"
	go_build "${mod}" gvisor.dev/gvisor/shim "${GVISOR_DIR}/containerd-shim-runsc-v1" "${ld}" -modfile="${GVISOR_DIR}/build.mod"
	# The patched source is only needed to build; drop its ~100 MB once both binaries exist.
	rm -rf "${src}" "${GVISOR_DIR}/build.mod" "${GVISOR_DIR}/build.sum"
}

build_kube_router() {
	go_build "${HACK_DIR}/tools/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
		"${KUBE_ROUTER_DIR}/kube-router" "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=${KUBE_ROUTER_VERSION}"
}

build_coredns() {
	go_build "${HACK_DIR}/tools/coredns" github.com/coredns/coredns "${COREDNS_DIR}/coredns" \
		"-X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_VERSION}"
}

all=(apt containerd crictl gvisor kube-router coredns)
if [[ $# -eq 0 || "$1" == all ]]; then names=("${all[@]}"); else names=("$@"); fi
for n in "${names[@]}"; do
	case "${n}" in
		apt) build_apt ;; containerd) build_containerd ;; crictl) build_crictl ;; gvisor) build_gvisor ;;
		kube-router) build_kube_router ;; coredns) build_coredns ;;
		*) die "unknown component ${n} (one of: ${all[*]})" ;;
	esac
done
