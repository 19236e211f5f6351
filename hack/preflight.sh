#!/usr/bin/env bash
# Checks, before `make demo` or `make test` spends an hour building, that this machine has what they need,
# and installs the Debian packages that are missing (as root; otherwise it says which to install).
#   hack/preflight.sh          check and install
#   hack/preflight.sh --check  check only: exit 1 and name what is missing
# Go itself is not installed here: the machine's Go must be at least the version go.mod asks for.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# command -> Debian package. make is listed for completeness: without it `make` never got here, but running
# this script directly installs it.
declare -A NEEDED=(
	[make]=make [git]=git [curl]=curl [python3]=python3 [jq]=jq [readelf]=binutils
	[openssl]=openssl [ip]=iproute2 [ss]=iproute2 [sha256sum]=coreutils [flock]=util-linux
	[node]=nodejs [npm]=npm
)

check_only=0
[[ "${1:-}" == --check ]] && check_only=1

missing=()
for cmd in "${!NEEDED[@]}"; do
	command -v "${cmd}" >/dev/null 2>&1 || missing+=("${NEEDED[${cmd}]}")
done
# Python modules the SDK tests import and `make release` builds the SDK with (python3 -m build
# --no-isolation), from Debian's python3, as the package index may be unreachable.
declare -A PY_MODULES=([httpx]=python3-httpx [pytest]=python3-pytest [setuptools]=python3-setuptools [venv]=python3-venv
	[build]=python3-build [wheel]=python3-wheel)
for mod in "${!PY_MODULES[@]}"; do
	/usr/bin/python3 -c "import ${mod}" >/dev/null 2>&1 || missing+=("${PY_MODULES[${mod}]}")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')

problems=()
want_go="$(sed -n 's/^go //p' "${ROOT_DIR}/go.mod")"
if ! command -v go >/dev/null 2>&1; then
	problems+=("go is not on PATH: install Go ${want_go} or newer")
else
	have_go="$(go env GOVERSION 2>/dev/null)"; have_go="${have_go#go}"
	if [[ "$(printf '%s\n%s\n' "${want_go}" "${have_go}" | sort -V | head -1)" != "${want_go}" ]]; then
		problems+=("go ${have_go} is older than the ${want_go} that go.mod needs")
	fi
fi

if [[ ${#missing[@]} -gt 0 ]]; then
	if ((check_only)) || [[ ${EUID} -ne 0 ]]; then
		problems+=("missing Debian packages: ${missing[*]} (as root: apt-get install ${missing[*]}, or run hack/preflight.sh)")
	else
		log "installing Debian packages: ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
fi

if [[ ${#problems[@]} -gt 0 ]]; then
	for p in "${problems[@]}"; do log "preflight: ${p}"; done
	exit 1
fi
