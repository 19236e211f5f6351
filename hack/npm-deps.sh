#!/usr/bin/env bash
# Installs the npm dependencies of the project's Node packages (sdk/typescript, examples/typescript) from their
# committed package-lock.json, as on a clean clone: `npm ci` runs once per lockfile into the machine-wide cache,
# ${AIRLOCK_CACHE}/npm/<key> (key: hash of package-lock.json and package.json, and Node's major version), and
# each checkout gets a copy of that node_modules. A checkout whose copy has the right key is left alone.
# Usage: hack/npm-deps.sh DIR...
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -gt 0 ]] || die "usage: hack/npm-deps.sh DIR..."
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed (Node.js >= 18.18; Debian: apt-get install nodejs npm)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
((node_major >= 18)) || die "Node.js $(node --version) is too old: the SDK needs >= 18.18"

npm_cache="${AIRLOCK_CACHE}/npm"
mkdir -p "${npm_cache}"

for dir in "$@"; do
	dir="$(cd "${dir}" && pwd)"
	[[ -f "${dir}/package-lock.json" ]] || die "${dir}/package-lock.json is missing: run 'npm install --package-lock-only' there and commit it"
	# package.json is in the key too: npm ci refuses a package.json out of step with its lockfile, and a cache
	# hit must not skip that check.
	key="$(cat "${dir}/package-lock.json" "${dir}/package.json" | sha256sum | cut -c1-16)-node${node_major}"
	stamp="${dir}/node_modules/.airlock-npm-key"
	if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${key}" ]]; then
		continue
	fi
	cached="${npm_cache}/${key}"
	if [[ ! -d "${cached}/node_modules" ]]; then
		# Another run may be installing the same lockfile: one at a time; the loser finds it done.
		exec {lock}>"${npm_cache}/.lock-${key}"
		flock "${lock}"
		if [[ ! -d "${cached}/node_modules" ]]; then
			log "npm ci for ${dir#"${ROOT_DIR}"/} (cache ${cached})"
			stage="$(mktemp -d "${npm_cache}/.stage-${key}.XXXXXX")"
			cp "${dir}/package.json" "${dir}/package-lock.json" "${stage}/"
			# No install scripts: none of these packages needs one, and none may run code at install.
			(cd "${stage}" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --cache "${npm_cache}/_cacache") ||
				{ rm -rf "${stage}"; die "npm ci failed for ${dir}"; }
			mv -T "${stage}" "${cached}"
		fi
		exec {lock}>&-
	fi
	# Links to local packages (file:../../sdk/typescript) are relative, so the copy resolves them in the
	# checkout.
	rm -rf "${dir}/node_modules"
	tmp="${dir}/.node_modules.tmp.$$"
	rm -rf "${tmp}"
	cp -a "${cached}/node_modules" "${tmp}"
	echo "${key}" >"${tmp}/.airlock-npm-key"
	mv -T "${tmp}" "${dir}/node_modules"
done
