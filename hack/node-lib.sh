# Where the node components live; sourced after lib.sh by build-node.sh, images.sh and local-cluster.sh.
# Each component is cached machine-wide under ${AIRLOCK_CACHE}/<component>/<version-or-recipe-hash>/.
CONTAINERD_DIR="${AIRLOCK_CACHE}/containerd/${CONTAINERD_VERSION}"
CRICTL_DIR="${AIRLOCK_CACHE}/crictl/${CRI_TOOLS_VERSION}"
GVISOR_PATCH="${HACK_DIR}/patches/gvisor-shim-oom-score-adj.sed"
# Keyed by version + patch hash: changing the patch rebuilds the shim instead of trusting a stale binary.
GVISOR_DIR="${AIRLOCK_CACHE}/gvisor/${GVISOR_VERSION}-$(sha256sum <"${GVISOR_PATCH}" | cut -c1-12)"
KUBE_ROUTER_DIR="${AIRLOCK_CACHE}/kube-router/${KUBE_ROUTER_VERSION}"
COREDNS_DIR="${AIRLOCK_CACHE}/coredns/${COREDNS_VERSION}"

# Debian packages the node needs (installed only when missing).
NODE_APT_PACKAGES=(runc containernetworking-plugins umoci debootstrap iptables ipset nftables iproute2 openssl
	conntrack util-linux procps)
CNI_BIN_DIR=/usr/lib/cni

# The local cluster's state (certs, etcd data, containerd images, logs, pidfiles) and its runtime dir.
CLUSTER_DIR="${AIRLOCK_CLUSTER_DIR:-/var/lib/airlock-cluster}"
CLUSTER_RUN_DIR="${AIRLOCK_CLUSTER_RUN_DIR:-/run/airlock-cluster}"
CONTAINERD_SOCK="${CLUSTER_RUN_DIR}/containerd/containerd.sock"

# Image tags the cluster pins (hack/versions.env sets them; defaults keep older checkouts working).
PAUSE_IMAGE_VERSION="${PAUSE_IMAGE_VERSION:-0.1.0}"
SANDBOX_IMAGE_VERSION="${SANDBOX_IMAGE_VERSION:-0.1.0}"
