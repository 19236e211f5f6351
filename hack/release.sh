#!/usr/bin/env bash
# Release artifacts into dist/ and their push to an OCI registry (docs/release.md).
#   hack/release.sh build            `make release`: everything below, from the Go module proxy, Debian and npm
#   hack/release.sh push REGISTRY    `make push`: images and the chart, pinned by digest, into REGISTRY
#                                    (HOST[:PORT]/PATH); digests into dist/digests.json
# dist/ after build:
#   images/<name>/    OCI image layouts (manager, gateway, init, egress-proxy: linux/amd64 and linux/arm64;
#                     sandbox-python: the SANDBOX_ARCHS, default amd64)
#   airlock-<version>.tgz                the Helm chart (values schema included)
#   python/  npm/  cli/                  the Python wheel and sdist, the npm tarball, the airlock CLI binaries
#   SHA256SUMS                           checksums of all of the above but the image layouts (content-addressed)
#   images.txt                           each image's index digest
# Environment: VERSION (the Makefile's), IMAGE_REPO (linked into the binaries as the default image prefix),
# SANDBOX_ARCHS ("amd64" or "amd64 arm64"; arm64 runs under qemu-user: hack/binfmt.sh), PLAIN_HTTP=1 (push
# over plain HTTP; loopback registries get it anyway), AIRLOCK_DIST (default dist).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION="${VERSION:-$(sed -n 's/^VERSION ?= //p' "${ROOT_DIR}/Makefile")}"
IMAGE_REPO="${IMAGE_REPO:-localhost/airlock}"
SANDBOX_ARCHS="${SANDBOX_ARCHS:-amd64}"
DIST="${AIRLOCK_DIST:-${ROOT_DIR}/dist}"
HELM="${HELM:-${AIRLOCK_CACHE}/tools/helm-${HELM_VERSION}}"
# Airlock's own images: name, cmd directory, binary name.
IMAGES=("manager manager manager" "gateway gateway gateway" "init airlock-init airlock-init" "egress-proxy egress-proxy egress-proxy")
IMAGE_ARCHS=(amd64 arm64)
CLI_PLATFORMS=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
PROJECT_SOURCE=https://airlock.dev/airlock
# Debian's ca-certificates bundle, as the local images carry it (hack/images.sh binary).
CA_CERTS=/etc/ssl/certs/ca-certificates.crt

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

# release_tool: hack/tools/release (go-containerregistry), built for this run.
release_tool() {
	[[ -x "${WORK}/release" ]] || (cd "${HACK_DIR}/tools/release" && go build -o "${WORK}/release" .)
	"${WORK}/release" "$@"
}

go_static() { # GOOS GOARCH OUT PKG
	mkdir -p "$(dirname "$3")"
	(cd "${ROOT_DIR}" && CGO_ENABLED=0 GOOS="$1" GOARCH="$2" go build -trimpath \
		-ldflags "-s -w -X airlock.dev/airlock/internal/version.Version=${VERSION} -X airlock.dev/airlock/internal/version.ImageRepository=${IMAGE_REPO}" \
		-o "$3" "$4")
}

build_images() {
	local revision created entry name cmd bin arch
	revision="$(git -C "${ROOT_DIR}" rev-parse HEAD)"
	# File and image times are the commit's: the same commit always gives the same digests.
	created="$(git -C "${ROOT_DIR}" log -1 --format=%ct)"
	for entry in "${IMAGES[@]}"; do
		read -r name cmd bin <<<"${entry}"
		local platforms=()
		for arch in "${IMAGE_ARCHS[@]}"; do
			go_static linux "${arch}" "${WORK}/linux-${arch}/${bin}" "./cmd/${cmd}"
			platforms+=(--binary "linux/${arch}=${WORK}/linux-${arch}/${bin}")
		done
		release_tool image --name "${name}" --binary-name "${bin}" --version "${VERSION}" --revision "${revision}" \
			--source "${PROJECT_SOURCE}" --created "${created}" --ca-certs "${CA_CERTS}" \
			--out "${DIST}/images/${name}" "${platforms[@]}"
		log "image ${name}: ${IMAGE_ARCHS[*]}"
	done
}

build_sandbox() {
	local arch start tars=()
	for arch in ${SANDBOX_ARCHS}; do
		start=${SECONDS}
		AIRLOCK_IMAGES_NO_IMPORT=1 AIRLOCK_IMAGE_ARCH="${arch}" AIRLOCK_IMAGE_OUT="${WORK}/sandbox-${arch}.tar" VERSION="${VERSION}" \
			"${HACK_DIR}/images.sh" sandbox
		tars+=(--image "linux/${arch}=${WORK}/sandbox-${arch}.tar")
		log "sandbox image ${arch} in $((SECONDS - start))s"
	done
	release_tool wrap --name sandbox-python --version "${VERSION}" --out "${DIST}/images/sandbox-python" "${tars[@]}"
}

build_chart() {
	local app
	app="$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "${ROOT_DIR}/charts/airlock/Chart.yaml")"
	[[ "${app}" == "${VERSION}" ]] || die "charts/airlock/Chart.yaml appVersion is ${app}, the release ${VERSION}: bump it"
	"${HELM}" lint --strict "${ROOT_DIR}/charts/airlock" >/dev/null
	"${HELM}" package "${ROOT_DIR}/charts/airlock" -d "${DIST}" >/dev/null
	log "chart $(basename "$(ls "${DIST}"/airlock-*.tgz)")"
}

# The SDKs build from copies with the LICENSE added, so the tree gets no build/, egg-info or dist/.
build_python() {
	local stage="${WORK}/python"
	cp -r "${ROOT_DIR}/sdk/python" "${stage}" && cp "${ROOT_DIR}/LICENSE" "${stage}/"
	rm -rf "${stage}/tests" && find "${stage}" -name __pycache__ -prune -exec rm -rf {} +
	/usr/bin/python3 -m build --no-isolation --sdist --wheel --outdir "${DIST}/python" "${stage}" >"${WORK}/python-build.log" 2>&1 ||
		{ tail -20 "${WORK}/python-build.log" >&2; die "python3 -m build failed"; }
	log "python: $(cd "${DIST}/python" && echo *)"
}

build_npm() {
	local stage="${WORK}/typescript"
	mkdir -p "${stage}"
	(cd "${ROOT_DIR}/sdk/typescript" && tar --exclude=./node_modules --exclude=./dist --exclude=./build -cf - .) | tar -C "${stage}" -xf -
	cp "${ROOT_DIR}/LICENSE" "${stage}/"
	"${HACK_DIR}/npm-deps.sh" "${stage}"
	mkdir -p "${DIST}/npm"
	(cd "${stage}" && npm pack --silent --pack-destination "${DIST}/npm" >/dev/null) || die "npm pack failed"
	log "npm: $(cd "${DIST}/npm" && echo *)"
}

build_cli() {
	local p
	for p in "${CLI_PLATFORMS[@]}"; do
		go_static "${p%/*}" "${p#*/}" "${DIST}/cli/airlock-${p%/*}-${p#*/}" ./cmd/airlock
	done
	log "cli: ${CLI_PLATFORMS[*]}"
}

build() {
	command -v umoci >/dev/null && command -v debootstrap >/dev/null || die "umoci and debootstrap are needed: run hack/build-node.sh apt"
	/usr/bin/python3 -c 'import build, setuptools, wheel' 2>/dev/null || die "python3-build, python3-setuptools and python3-wheel are needed: run hack/preflight.sh"
	[[ -x "${HELM}" ]] || die "helm ${HELM_VERSION} is not built (${HELM}): run make release, which builds it"
	[[ -f "${CA_CERTS}" ]] || die "${CA_CERTS} is missing: apt-get install ca-certificates"
	local start=${SECONDS} step t
	rm -rf "${DIST}/images" "${DIST}/python" "${DIST}/npm" "${DIST}/cli" "${DIST}/pushed" "${DIST}"/airlock-*.tgz \
		"${DIST}/SHA256SUMS" "${DIST}/images.txt" "${DIST}/digests.json"
	mkdir -p "${DIST}"
	for step in images sandbox chart python npm cli; do
		t=${SECONDS}
		"build_${step}"
		log "release step ${step}: $((SECONDS - t))s"
	done
	(cd "${DIST}" && sha256sum airlock-*.tgz python/* npm/* cli/* >SHA256SUMS)
	local d
	for d in "${DIST}"/images/*/; do
		printf '%s %s\n' "$(basename "${d}")" "$(jq -r '.manifests[0].digest' "${d}/index.json")"
	done >"${DIST}/images.txt"
	log "release ${VERSION} in ${DIST} after $((SECONDS - start))s; image index digests:"
	cat "${DIST}/images.txt"
}

# plain_http REGISTRY: loopback registries speak plain HTTP (as containerd assumes for localhost).
plain_http() {
	[[ "${PLAIN_HTTP:-}" == 1 ]] && return 0
	local host="${1%%/*}"
	[[ "${host}" == localhost || "${host}" == localhost:* || "${host}" == 127.* || "${host}" == "[::1]"* ]]
}

push() {
	local registry="${1:-}"
	[[ -n "${registry}" && "${registry}" == */* ]] || die "usage: make push REGISTRY=HOST[:PORT]/PATH (e.g. 127.0.0.1:5000/airlock)"
	registry="${registry%/}"
	local chart="${DIST}/airlock-${VERSION}.tgz"
	[[ -f "${chart}" && -d "${DIST}/images" ]] || die "no release ${VERSION} in ${DIST}: run make release first"
	local http=() helm_http=()
	if plain_http "${registry}"; then http=(--plain-http); helm_http=(--plain-http); fi
	release_tool push --images "${DIST}/images" --registry "${registry}" "${http[@]}" --out "${DIST}/digests.json"
	# The chart that is pushed names the images just pushed, by digest: a copy of the packaged one.
	rm -rf "${DIST}/pushed" && mkdir -p "${DIST}/pushed/src"
	tar -C "${DIST}/pushed/src" -xzf "${chart}"
	release_tool pin-chart --chart "${DIST}/pushed/src/airlock" --digests "${DIST}/digests.json" --out "${DIST}/pushed/airlock"
	"${HELM}" lint --strict "${DIST}/pushed/airlock" >/dev/null
	"${HELM}" package "${DIST}/pushed/airlock" -d "${DIST}/pushed" >/dev/null
	local out digest
	out="$("${HELM}" push "${DIST}/pushed/airlock-${VERSION}.tgz" "oci://${registry}/charts" "${helm_http[@]}" 2>&1)" ||
		{ echo "${out}" >&2; die "helm push failed"; }
	digest="$(sed -n 's/^Digest: \(sha256:[0-9a-f]*\)$/\1/p' <<<"${out}")"
	[[ -n "${digest}" ]] || { echo "${out}" >&2; die "helm push printed no digest"; }
	jq --arg ref "oci://${registry}/charts/airlock:${VERSION}" --arg digest "${digest}" \
		'.chart = {reference: $ref, digest: $digest}' "${DIST}/digests.json" >"${WORK}/digests.json"
	mv "${WORK}/digests.json" "${DIST}/digests.json"
	log "pushed to ${registry}; digests in ${DIST}/digests.json:"
	jq -r '(.images | to_entries[] | "\(.value.reference)@\(.value.digest)"), "\(.chart.reference)@\(.chart.digest)"' "${DIST}/digests.json"
}

case "${1:-}" in
	build) build ;;
	push) push "${2:-}" ;;
	*) die "usage: hack/release.sh build | push REGISTRY" ;;
esac
