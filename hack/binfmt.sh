#!/usr/bin/env bash
# Lets this machine run arm64 programs through qemu-user, which building an arm64 sandbox image needs (its
# packages' install scripts run inside the image root: `make release SANDBOX_ARCHS="amd64 arm64"`).
#   hack/binfmt.sh          install Debian's qemu-user-static if missing, mount binfmt_misc if it is not, and
#                           register qemu-aarch64 (a machine-wide kernel setting, until reboot or `remove`)
#   hack/binfmt.sh check    exit 0 if arm64 programs run here
#   hack/binfmt.sh remove   unregister qemu-aarch64 (the package stays installed)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BINFMT=/proc/sys/fs/binfmt_misc
ENTRY="${BINFMT}/qemu-aarch64"
# Debian's registration line: flag F opens the interpreter now, so it also runs inside a chroot.
CONF=/usr/lib/binfmt.d/qemu-aarch64.conf

registered() { [[ -f "${ENTRY}" ]] && grep -qx enabled "${ENTRY}"; }

register() {
	registered && { log "qemu-aarch64 is registered already"; return 0; }
	if [[ ! -f "${CONF}" ]]; then
		log "installing qemu-user-static (Debian)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
	fi
	[[ -f "${BINFMT}/register" ]] || mount -t binfmt_misc binfmt_misc "${BINFMT}" ||
		die "cannot mount binfmt_misc on ${BINFMT} (the kernel needs CONFIG_BINFMT_MISC)"
	cat "${CONF}" >"${BINFMT}/register" || die "the kernel refused the qemu-aarch64 registration"
	registered || die "qemu-aarch64 did not register"
	log "registered qemu-aarch64: arm64 programs now run here through $(sed -n 's/^interpreter //p' "${ENTRY}")"
}

case "${1:-register}" in
	register) register ;;
	check) registered ;;
	remove) if [[ -f "${ENTRY}" ]]; then echo -1 >"${ENTRY}"; log "unregistered qemu-aarch64"; fi ;;
	*) die "usage: hack/binfmt.sh [register|check|remove]" ;;
esac
