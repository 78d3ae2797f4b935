#!/usr/bin/env bash
# tests/apt-install.sh PACKAGE... — install Debian packages that memboot's
# scripts need (run-qemu.sh: QEMU, OVMF, GNU time; .ci/run the same), and
# never remove one silently.
#
# apt-get is first asked what it would do (--simulate). When installing
# would remove packages — on this fleet's machine image, Debian 12's QEMU
# 7.2 conflicts with the backported qemu-utils 10.0 it carries — the removal
# goes ahead only under CI=true or MEMBOOT_APT_ALLOW_REMOVE=1, and is named
# either way. Otherwise nothing is changed: the script names the packages,
# prints the command that would install anyway, and exits 3, so its caller
# can take another way (run-qemu.sh then uses the QEMU that
# tests/qemu-peer.sh unpacks, which changes nothing on the system).
#
# Exit: 0 installed; 3 refused because of removals; 4 apt failed.
set -uo pipefail
die() { echo "apt-install.sh: $*" >&2; exit 4; }
say() { echo "apt-install.sh: $*" >&2; }
[ $# -gt 0 ] || die "usage: tests/apt-install.sh PACKAGE..."
command -v apt-get >/dev/null || die "no apt-get: install $* with this system's package manager"

say "installing $* (apt-get)"
apt-get update -qq >&2 || die "apt-get update failed (check the network); install $* by hand"
plan=$(apt-get install --simulate -q "$@" 2>&1) || die "apt-get cannot install $*: $plan"
removals=$(awk '$1 == "Remv" { printf "%s%s", sep, $2; sep = " " }' <<<"$plan")
if [ -n "$removals" ]; then
    if [ "${CI:-}" = true ] || [ "${MEMBOOT_APT_ALLOW_REMOVE:-}" = 1 ]; then
        say "installing $* removes $removals (they conflict with it); going ahead: $([ "${CI:-}" = true ] && echo CI=true || echo MEMBOOT_APT_ALLOW_REMOVE=1)"
    else
        say "installing $* would remove $removals (they conflict with it): not done. To install anyway: MEMBOOT_APT_ALLOW_REMOVE=1 (or: apt-get install $*)"
        exit 3
    fi
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 || die "apt-get install $* failed; install it by hand"
