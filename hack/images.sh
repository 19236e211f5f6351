#!/usr/bin/env bash
# Container images for the local cluster, built without a registry and imported into its containerd.
#   hack/images.sh pause                 the pod sandbox (infra) image localhost/airlock/pause:${PAUSE_IMAGE_VERSION}
#   hack/images.sh sandbox [RECIPE_DIR]  a Debian sandbox image from a recipe (default hack/images/sandbox-python), with
#                                        this tree's airlock-init at /airlock/bin/airlock-init (templates' init: Image)
#                                        (AIRLOCK_IMAGE_ARCH=arm64: for another architecture, under qemu-user; never
#                                        imported. AIRLOCK_IMAGE_OUT=FILE: also copy its tarball and .digest to FILE)
#   hack/images.sh binary NAME:TAG /path/to/static-binary [ENTRYPOINT ARGS...]
#                                        one static binary in a minimal non-root (65532) image
#                                        (AIRLOCK_IMAGE_OUT=FILE: also copy its tarball and .digest to FILE)
#   hack/images.sh all                   pause + sandbox (with the cluster down: built now, imported by `up`)
#   hack/images.sh import-pending        import what was built while the cluster was down (`up` runs it)
#   hack/images.sh ref pause|sandbox     print the image reference the cluster uses
# Images are cached as OCI tarballs under ${AIRLOCK_CACHE}/images/<name>/<recipe hash>/image.tar and imported
# with `ctr -n k8s.io images import` when the cluster's containerd runs (skipped if the same digest is there).
# With AIRLOCK_IMAGES_NO_IMPORT=1 only the tarballs are built.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${HACK_DIR}/node-lib.sh"

# Bump when the packing logic below changes, so cached tarballs are rebuilt.
RECIPE_VERSION=3
# What airlock-init reports as its release: the Makefile's VERSION unless the caller set one.
VERSION="${VERSION:-$(sed -n 's/^VERSION ?= //p' "${ROOT_DIR}/Makefile")}"
IMAGES_CACHE="${AIRLOCK_CACHE}/images"
# The architecture of sandbox images (Debian's name, the same as Go's for amd64 and arm64).
HOST_ARCH="$(dpkg --print-architecture)"
IMAGE_ARCH="${AIRLOCK_IMAGE_ARCH:-${HOST_ARCH}}"
[[ "${IMAGE_ARCH}" == amd64 || "${IMAGE_ARCH}" == arm64 ]] || die "AIRLOCK_IMAGE_ARCH=${IMAGE_ARCH}: want amd64 or arm64"
CTR=("${CONTAINERD_DIR}/ctr" --address "${CONTAINERD_SOCK}" -n k8s.io)

# Temporary work directories, removed (after unmounting anything left below them) when the script exits.
WORK_DIRS=()
cleanup_work_dirs() { local d; for d in "${WORK_DIRS[@]}"; do unmount_under "${d}"; rm -rf "${d}"; done; }
trap cleanup_work_dirs EXIT
# new_work_dir [PARENT]: sets WORK (not echoed: a command substitution's subshell would lose WORK_DIRS).
new_work_dir() { WORK="$(mktemp -d "${1:-${TMPDIR:-/tmp}}/airlock-image.XXXXXX")"; WORK_DIRS+=("${WORK}"); }

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# new_layout DIR TAG: an empty OCI image layout with one empty linux/amd64 image tagged TAG.
new_layout() {
	umoci init --layout "$1"
	umoci new --image "$1:$2"
}

# Images built while the cluster was down, one "TAR NAME TAG" a line; imported by `import-pending`.
PENDING="${AIRLOCK_CACHE}/images/pending-imports"

# import_pending imports what was built while the cluster was down (and still exists), then forgets it.
import_pending() {
	[[ -s "${PENDING}" ]] || return 0
	local tar name tag
	while read -r tar name tag; do
		[[ -f "${tar}" && -f "${tar}.digest" ]] && import_tar "${tar}" "${name}" "${tag}"
	done <"${PENDING}"
	rm -f "${PENDING}"
}

# finish_layout LAYOUT TAG OUT_TAR: tar the layout (what `ctr images import` reads), record the manifest digest.
finish_layout() {
	local lay="$1" tag="$2" out="$3"
	umoci gc --layout "${lay}"
	tar -C "${lay}" -cf "${out}.tmp" oci-layout index.json blobs
	sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "${lay}/index.json" | head -1 >"${out}.digest"
	mv -f "${out}.tmp" "${out}"
}

# import_tar TAR NAME TAG: import into the cluster's containerd unless that exact manifest is already there.
import_tar() {
	local tar="$1" name="$2" tag="$3" want have
	[[ "${AIRLOCK_IMAGES_NO_IMPORT:-}" == 1 ]] && { log "built ${tar} (not imported)"; return 0; }
	if [[ ! -S "${CONTAINERD_SOCK}" ]]; then
		[[ "${AIRLOCK_IMAGES_DEFER_IMPORT:-}" == 1 ]] || die "the local cluster's containerd is not running (${CONTAINERD_SOCK}): run hack/local-cluster.sh up, or set AIRLOCK_IMAGES_NO_IMPORT=1"
		# Built while the cluster is down: `hack/local-cluster.sh up` imports it (import-pending).
		mkdir -p "$(dirname "${PENDING}")"
		grep -qxF "${tar} ${name} ${tag}" "${PENDING}" 2>/dev/null || echo "${tar} ${name} ${tag}" >>"${PENDING}"
		log "built ${tar}; the local cluster is down, so it is imported when it comes up"
		return 0
	fi
	want="$(cat "${tar}.digest")"
	have="$("${CTR[@]}" images ls "name==${name}:${tag}" 2>/dev/null | awk 'NR > 1 { print $3 }')"
	if [[ "${have}" == "${want}" ]]; then log "${name}:${tag} already imported (${want:0:19})"; return 0; fi
	local start=${SECONDS}
	# ctr warns about cgroup v1 on every call: show its output only when the import fails.
	local out; out="$("${CTR[@]}" images import --base-name "${name}" "${tar}" 2>&1)" || { echo "${out}" >&2; die "import of ${tar} failed"; }
	log "imported ${name}:${tag} (${want:0:19}) in $((SECONDS - start))s"
}

build_pause() {
	local name=localhost/airlock/pause tag="${PAUSE_IMAGE_VERSION}"
	local key dir
	key="$(hash_of "${ROOT_DIR}/hack/tools/pause/main.go" <(go version) <(echo "${RECIPE_VERSION} ${tag}"))"
	dir="${IMAGES_CACHE}/pause/${key}"
	if [[ ! -f "${dir}/image.tar" ]]; then
		new_work_dir; local work="${WORK}"
		(cd "${ROOT_DIR}" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "${work}/pause" ./hack/tools/pause)
		pack_binary "${work}/oci" "${tag}" "${work}/pause" pause 65535 "${name}" "Airlock pod sandbox (pause) container" --
		mkdir -p "${dir}" && finish_layout "${work}/oci" "${tag}" "${dir}/image.tar"
	fi
	import_tar "${dir}/image.tar" "${name}" "${tag}"
}

# pack_binary LAYOUT TAG BINARY NAME_IN_IMAGE UID IMAGE_NAME DESCRIPTION -- [ENTRYPOINT ARGS...]
# Layer: /usr/local/bin/NAME, /etc/passwd and /etc/group with the non-root user, /tmp, CA certificates.
pack_binary() {
	local lay="$1" tag="$2" bin="$3" base="$4" uid="$5" name="$6" desc="$7"; shift 8
	local root; root="$(mktemp -d)"
	install -D -m 0755 "${bin}" "${root}/usr/local/bin/${base}"
	mkdir -p "${root}/etc" "${root}/tmp" && chmod 1777 "${root}/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' "${uid}" "${uid}" >"${root}/etc/passwd"
	printf 'root:x:0:\nnonroot:x:%s:\n' "${uid}" >"${root}/etc/group"
	mkdir -p "${root}/home/nonroot" && chown "${uid}:${uid}" "${root}/home/nonroot"
	if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
		install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "${root}/etc/ssl/certs/ca-certificates.crt"
	fi
	new_layout "${lay}" "${tag}"
	umoci insert --image "${lay}:${tag}" --history.created_by "hack/images.sh binary" "${root}" / >/dev/null
	rm -rf "${root}"
	local cfg=(--config.user "${uid}:${uid}" --config.workingdir /home/nonroot --config.entrypoint "/usr/local/bin/${base}"
		--config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env HOME=/home/nonroot
		--config.label "org.opencontainers.image.title=${name##*/}" --config.label "org.opencontainers.image.version=${tag}"
		--config.label "org.opencontainers.image.description=${desc}" --config.label "org.opencontainers.image.vendor=Airlock"
		--config.label "org.opencontainers.image.revision=$(git -C "${ROOT_DIR}" rev-parse HEAD 2>/dev/null || echo unknown)"
		--config.label "org.opencontainers.image.ref.name=${name}:${tag}")
	local a; for a in "$@"; do cfg+=(--config.entrypoint "${a}"); done
	umoci config --image "${lay}:${tag}" --no-history --clear=config.cmd "${cfg[@]}" >/dev/null
}

# binary NAME:TAG BINARY [ARGS...]: the lead's images (airlock-init, manager, gateway). Rebuilt every time.
build_binary() {
	[[ $# -ge 2 ]] || die "usage: hack/images.sh binary NAME:TAG /path/to/static-binary [ENTRYPOINT ARGS...]"
	local ref="$1" bin="$2"; shift 2
	[[ "${ref}" == */*:* ]] || die "give a fully qualified NAME:TAG such as localhost/airlock/manager:dev (got ${ref})"
	[[ -x "${bin}" ]] || die "${bin} is not an executable file"
	# The image has no libc: a program interpreter (PT_INTERP) means a dynamically linked binary.
	if [[ "$(readelf -lW "${bin}" 2>/dev/null)" == *"INTERP"* ]]; then die "${bin} is dynamically linked: build it with CGO_ENABLED=0"; fi
	local name="${ref%:*}" tag="${ref##*:}" key out
	# Keyed by the binary and the arguments: an unchanged binary is neither repacked nor reimported.
	key="$(hash_of "${bin}" <(printf '%s\n' "${RECIPE_VERSION}" "${ref}" "$@"))"
	out="${IMAGES_CACHE}/binary/${name//\//_}/${key}/image.tar"
	if [[ ! -f "${out}" ]]; then
		new_work_dir; local work="${WORK}"
		pack_binary "${work}/oci" "${tag}" "${bin}" "$(basename "${bin}")" 65532 "${name}" "Airlock ${name##*/}" -- "$@"
		mkdir -p "$(dirname "${out}")" && finish_layout "${work}/oci" "${tag}" "${out}"
	fi
	if [[ -n "${AIRLOCK_IMAGE_OUT:-}" ]]; then
		mkdir -p "$(dirname "${AIRLOCK_IMAGE_OUT}")"
		cp -f "${out}" "${AIRLOCK_IMAGE_OUT}" && cp -f "${out}.digest" "${AIRLOCK_IMAGE_OUT}.digest"
	fi
	import_tar "${out}" "${name}" "${tag}"
	echo "${ref}"
}

# sandbox [RECIPE_DIR]: debootstrap --variant=minbase + packages + customize.sh, trimmed, one layer (cached by
# recipe); then add_init puts this tree's airlock-init on top.
build_sandbox() {
	local recipe="${1:-${HACK_DIR}/images/sandbox-python}"
	recipe="$(cd "${recipe}" && pwd)"
	local IMAGE_NAME IMAGE_DESCRIPTION SUITE SANDBOX_UID SANDBOX_USER
	# shellcheck source=images/sandbox-python/image.env
	source "${recipe}/image.env"
	local tag="${SANDBOX_IMAGE_VERSION}" mirror key dir
	mirror="$(debian_mirror)"
	key="$(hash_of "${recipe}"/* <(echo "${RECIPE_VERSION} ${tag} ${mirror} ${IMAGE_ARCH}") <(cat /etc/apt/sources.list.d/debian.sources 2>/dev/null))"
	dir="${IMAGES_CACHE}/${IMAGE_NAME##*/}/${key}"
	if [[ ! -f "${dir}/image.tar" ]]; then
		[[ "${IMAGE_ARCH}" == "${HOST_ARCH}" ]] || check_foreign_arch "${IMAGE_ARCH}"
		local start=${SECONDS} work pkgs
		pkgs="$(grep -v '^\s*#' "${recipe}/packages" | grep -v '^\s*$' | paste -sd, -)"
		# Work next to the cache (same filesystem, and /tmp may be small).
		mkdir -p "${dir}" && new_work_dir "${dir}" && work="${WORK}"
		new_layout "${work}/oci" "${tag}"
		umoci unpack --image "${work}/oci:${tag}" "${work}/bundle" >/dev/null
		local rootfs="${work}/bundle/rootfs"
		# debootstrap only lays down the minimal base: its own resolver cannot handle virtual packages, so the
		# recipe's packages come from apt inside the new root.
		log "debootstrap --variant=minbase --arch=${IMAGE_ARCH} ${SUITE} from ${mirror}"
		debootstrap --variant=minbase --arch="${IMAGE_ARCH}" "${SUITE}" "${rootfs}" "${mirror}" >"${work}/debootstrap.log" 2>&1 ||
			{ tail -20 "${work}/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
		log "debootstrap done in $((SECONDS - start))s; apt-get install ${pkgs//,/ }"
		if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
			# The same suites as this machine (updates and security too), as in the recipe hash.
			cp /etc/apt/sources.list.d/debian.sources "${rootfs}/etc/apt/sources.list.d/debian.sources"
			rm -f "${rootfs}/etc/apt/sources.list"
		fi
		cp -L /etc/resolv.conf "${rootfs}/etc/resolv.conf"
		# Nothing may start services inside the image root.
		printf '#!/bin/sh\nexit 101\n' >"${rootfs}/usr/sbin/policy-rc.d" && chmod 0755 "${rootfs}/usr/sbin/policy-rc.d"
		{
			chroot "${rootfs}" apt-get update -qq &&
				DEBIAN_FRONTEND=noninteractive chroot "${rootfs}" apt-get install -y -qq --no-install-recommends ${pkgs//,/ } &&
				chroot "${rootfs}" apt-get clean
		} >"${work}/apt.log" 2>&1 || { tail -30 "${work}/apt.log" >&2; die "apt-get install in the image root failed"; }
		rm -f "${rootfs}/usr/sbin/policy-rc.d" "${rootfs}/etc/resolv.conf"
		log "packages installed after $((SECONDS - start))s"
		install_npm_runtimes "${recipe}" "${rootfs}" "${work}"
		install -m 0755 "${recipe}/customize.sh" "${rootfs}/tmp/customize.sh"
		SANDBOX_UID="${SANDBOX_UID}" SANDBOX_USER="${SANDBOX_USER}" chroot "${rootfs}" /tmp/customize.sh
		local runtimes; runtimes="$(runtime_versions "${rootfs}")" || die "the image's runtimes do not run (above)"
		trim_rootfs "${rootfs}"
		log "rootfs $(du -sh "${rootfs}" | cut -f1) after trimming (${runtimes}); packing"
		umoci repack --image "${work}/oci:${tag}" --history.created_by "hack/images.sh sandbox ${recipe##*/}" "${work}/bundle" >/dev/null
		local home="/home/${SANDBOX_USER}"
		local labels=() kv; for kv in ${runtimes}; do labels+=(--config.label "dev.airlock.runtime.${kv}"); done
		umoci config --image "${work}/oci:${tag}" --no-history --os linux --architecture "${IMAGE_ARCH}" \
			--config.user "${SANDBOX_UID}:${SANDBOX_UID}" "${labels[@]}" \
			--config.workingdir "${home}" --config.env "HOME=${home}" --config.env LANG=C.UTF-8 \
			--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			--config.cmd sleep --config.cmd infinity \
			--config.label "org.opencontainers.image.title=${IMAGE_NAME##*/}" \
			--config.label "org.opencontainers.image.version=${tag}" \
			--config.label "org.opencontainers.image.description=${IMAGE_DESCRIPTION}" \
			--config.label "org.opencontainers.image.vendor=Airlock" \
			--config.label "org.opencontainers.image.base.name=debian:${SUITE}" \
			--config.label "dev.airlock.recipe.hash=${key}" >/dev/null
		finish_layout "${work}/oci" "${tag}" "${dir}/image.tar"
		log "sandbox image ${IMAGE_NAME}:${tag} built in $((SECONDS - start))s: $(du -h "${dir}/image.tar" | cut -f1) tarball"
	fi
	add_init "${dir}" "${tag}"
	if [[ -n "${AIRLOCK_IMAGE_OUT:-}" ]]; then
		mkdir -p "$(dirname "${AIRLOCK_IMAGE_OUT}")"
		cp -f "${dir}/init/image.tar" "${AIRLOCK_IMAGE_OUT}" && cp -f "${dir}/init/image.tar.digest" "${AIRLOCK_IMAGE_OUT}.digest"
	fi
	# The local cluster's node runs the host's architecture: an image for another is for a registry only.
	if [[ "${IMAGE_ARCH}" != "${HOST_ARCH}" ]]; then log "${IMAGE_NAME}:${tag} for ${IMAGE_ARCH} built (not imported)"; return 0; fi
	import_tar "${dir}/init/image.tar" "${IMAGE_NAME}" "${tag}"
}

# check_foreign_arch ARCH: building for ARCH runs its binaries (debootstrap's second stage, apt, the runtime
# checks) through qemu-user, which the kernel starts by binfmt_misc. Refuse clearly when that is not set up.
check_foreign_arch() {
	local qemu="qemu-aarch64"
	[[ "$1" == arm64 ]] || die "no emulation known for $1"
	[[ -f "/proc/sys/fs/binfmt_misc/${qemu}" ]] && grep -qx enabled "/proc/sys/fs/binfmt_misc/${qemu}" ||
		die "building a $1 image needs qemu-user-static registered with binfmt_misc (${qemu} is not): run hack/binfmt.sh"
}

# install_npm_runtimes RECIPE ROOTFS WORK: the runtimes RECIPE/runtimes.lock lists for this architecture,
# downloaded with npm, checked against the integrity the lock records, unpacked under ROOTFS/usr/local as the
# official Node.js tarball lays them out (bin/node, include/node; npm in lib/node_modules/npm with npm and npx
# linked into bin); RECIPE/npmrc becomes npm's global config.
install_npm_runtimes() {
	local lock="$1/runtimes.lock" rootfs="$2" work="$3" spec arch want file got
	mkdir -p "${work}/npm"
	while read -r spec arch want; do
		[[ -z "${spec}" || "${spec}" == \#* ]] && continue
		[[ "${arch}" == all || "${arch}" == "${IMAGE_ARCH}" ]] || continue
		file="$(cd "${work}/npm" && npm pack "${spec}" --silent --pack-destination "${work}/npm" --cache "${AIRLOCK_CACHE}/npm/_cacache")" ||
			die "npm pack ${spec} failed"
		file="${work}/npm/${file##*/}"
		got="sha512-$(openssl dgst -sha512 -binary "${file}" | base64 -w0)"
		[[ "${got}" == "${want}" ]] || die "${spec}: integrity ${got} is not the ${want} that ${lock##*/} records"
		rm -rf "${work}/npm/package" && tar -C "${work}/npm" --no-same-owner -xzf "${file}"
		case "${spec%@*}" in
			node-linux-*)
				install -D -m 0755 "${work}/npm/package/bin/node" "${rootfs}/usr/local/bin/node"
				mkdir -p "${rootfs}/usr/local/include" && cp -r "${work}/npm/package/include/node" "${rootfs}/usr/local/include/"
				install -D -m 0644 "${work}/npm/package/LICENSE" "${rootfs}/usr/local/share/doc/node/LICENSE" ;;
			npm)
				mkdir -p "${rootfs}/usr/local/lib/node_modules" && rm -rf "${rootfs}/usr/local/lib/node_modules/npm"
				mv "${work}/npm/package" "${rootfs}/usr/local/lib/node_modules/npm"
				chmod 0755 "${rootfs}/usr/local/lib/node_modules/npm/bin/npm-cli.js" "${rootfs}/usr/local/lib/node_modules/npm/bin/npx-cli.js"
				ln -sf ../lib/node_modules/npm/bin/npm-cli.js "${rootfs}/usr/local/bin/npm"
				ln -sf ../lib/node_modules/npm/bin/npx-cli.js "${rootfs}/usr/local/bin/npx" ;;
			*) die "${lock##*/}: no rule to install ${spec}" ;;
		esac
		log "installed ${spec} (${arch}, ${want:0:19}...)"
	done <"${lock}"
	[[ ! -f "$1/npmrc" ]] || install -D -m 0644 "$1/npmrc" "${rootfs}/usr/local/etc/npmrc"
	chmod -R go-w "${rootfs}/usr/local"
}

# runtime_versions ROOTFS prints python=X node=Y npm=Z as the image's own binaries report them (run in the
# image root, so a binary that cannot run there fails the build).
runtime_versions() {
	local r="$1" py node npm
	py="$(chroot "${r}" /usr/bin/python3 -c 'import platform; print(platform.python_version())')" || return 1
	node="$(chroot "${r}" /usr/local/bin/node -p 'process.versions.node')" || return 1
	npm="$(chroot "${r}" /usr/bin/env PATH=/usr/local/bin:/usr/bin:/bin npm --version)" || return 1
	echo "python=${py} node=${node} npm=${npm}"
}

# add_init DIR TAG: DIR/image.tar (the cached Debian base) plus one layer with this tree's airlock-init at
# /airlock/bin/airlock-init, into DIR/init/image.tar, so that templates with `init: Image` run the manager's own
# airlock-init without mounting the init image (docs/runtimes.md). Rebuilt when the binary changes: the base is
# not, and only the newest such image is kept.
add_init() {
	local dir="$1" tag="$2" work bin sum
	new_work_dir; work="${WORK}"
	bin="${work}/root/airlock/bin/airlock-init"
	mkdir -p "$(dirname "${bin}")"
	(cd "${ROOT_DIR}" && CGO_ENABLED=0 GOARCH="${IMAGE_ARCH}" go build -trimpath -ldflags "-s -w -X airlock.dev/airlock/internal/version.Version=${VERSION}" \
		-o "${bin}" ./cmd/airlock-init)
	chmod 0755 "${work}/root/airlock" "${work}/root/airlock/bin" "${bin}"
	sum="$(hash_of "${dir}/image.tar.digest" "${bin}")"
	if [[ -f "${dir}/init/image.tar" && "$(cat "${dir}/init/key" 2>/dev/null)" == "${sum}" ]]; then return 0; fi
	mkdir -p "${work}/oci" && tar -C "${work}/oci" -xf "${dir}/image.tar"
	umoci insert --image "${work}/oci:${tag}" --history.created_by "hack/images.sh sandbox: airlock-init" "${work}/root" / >/dev/null
	umoci config --image "${work}/oci:${tag}" --no-history --config.label "dev.airlock.init.protocol=$(init_protocol)" >/dev/null
	mkdir -p "${dir}/init" && finish_layout "${work}/oci" "${tag}" "${dir}/init/image.tar"
	echo "${sum}" >"${dir}/init/key"
	log "sandbox image ${tag}: airlock-init layer added ($(du -h "${dir}/init/image.tar" | cut -f1) tarball)"
}

# init_protocol is version.InitProtocol, which the image's label states.
init_protocol() { sed -n 's/^const InitProtocol = \([0-9]*\)$/\1/p' "${ROOT_DIR}/internal/version/version.go"; }

# The Debian mirror this machine's apt uses (deb822 sources), so debootstrap works wherever apt does.
debian_mirror() {
	local f=/etc/apt/sources.list.d/debian.sources
	if [[ -f "${f}" ]]; then
		awk '/^URIs:/ { uri = $2 } /^Suites:/ && / bookworm( |$)/ { print uri; exit }' "${f}"
	else
		awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list
	fi
}

# Drop what a sandbox never needs at run time; the apt lists are refetched by `apt-get update` if wanted.
trim_rootfs() {
	local r="$1"
	rm -rf "${r}"/var/lib/apt/lists/* "${r}"/var/cache/apt/* "${r}"/var/cache/debconf/*-old \
		"${r}"/usr/share/doc/* "${r}"/usr/share/man/* "${r}"/usr/share/info/* "${r}"/usr/share/lintian \
		"${r}"/var/log/* "${r}"/tmp/* "${r}"/root/.cache "${r}"/root/.npm "${r}"/var/lib/dpkg/*-old
	find "${r}/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
	find "${r}/usr/lib" -name '__pycache__' -type d -prune -exec rm -rf {} +
	# The runtime provides /dev; device nodes in an image layer are noise at best.
	find "${r}/dev" -mindepth 1 -delete
	: >"${r}/etc/machine-id"
}

# Unmount anything left mounted below DIR (debootstrap mounts /proc and /sys in its target and can leave
# them behind when it fails), deepest first.
unmount_under() {
	local d; d="$(realpath -m "$1")"
	awk -v d="${d}/" 'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		umount "${m}" 2>/dev/null || umount -l "${m}"
	done
}

ref_of() {
	case "$1" in
		pause) echo "localhost/airlock/pause:${PAUSE_IMAGE_VERSION}" ;;
		sandbox) echo "localhost/airlock/sandbox-python:${SANDBOX_IMAGE_VERSION}" ;;
		*) die "unknown image $1" ;;
	esac
}

[[ $# -ge 1 ]] || die "usage: hack/images.sh pause|sandbox [RECIPE_DIR]|binary NAME:TAG BINARY [ARGS...]|all|import-pending|ref NAME"
cmd="$1"; shift
case "${cmd}" in
	pause) build_pause ;;
	sandbox) build_sandbox "$@" ;;
	binary) build_binary "$@" ;;
	all) AIRLOCK_IMAGES_DEFER_IMPORT=1; build_pause; build_sandbox ;;
	import-pending) import_pending ;;
	ref) ref_of "$1" ;;
	*) die "unknown command ${cmd}" ;;
esac
