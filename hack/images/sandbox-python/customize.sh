#!/bin/sh
# Runs inside the image root (chroot) after debootstrap, as root, before trimming. No network needed.
set -eu
groupadd --gid "${SANDBOX_UID}" "${SANDBOX_USER}"
useradd --uid "${SANDBOX_UID}" --gid "${SANDBOX_UID}" --create-home --home-dir "/home/${SANDBOX_USER}" \
	--shell /bin/bash "${SANDBOX_USER}"
# Agents run `pip install x` as the sandbox user: without this marker pip refuses (PEP 668) instead of
# installing into ~/.local. System site-packages stay root-owned, so this cannot modify the image's Python.
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
# Keep later layers slim too: a platform team's `apt-get install` in a derived image skips docs and locales.
cat >/etc/dpkg/dpkg.cfg.d/airlock-slim <<'CFG'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
# A non-empty /tmp: on an empty one runsc mounts its own tmpfs, in memory and sized at half the node's RAM,
# so a big file there would OOM-kill the sandbox. Kept, /tmp is part of the root filesystem, whose overlay the
# manager sizes per sandbox (docs/runtimes.md). A dot file: hack/images.sh empties /tmp/* when trimming.
chmod 1777 /tmp
echo "/tmp is on the sandbox's disk, not in memory: see Airlock's docs/runtimes.md" >/tmp/.airlock-disk
# Code written for other sandboxes uses /workspace: make it the working directory (the pod mounts its volume
# at /home/sandbox), so both paths name the same files and count against the same disk limit.
ln -s "/home/${SANDBOX_USER}" /workspace
