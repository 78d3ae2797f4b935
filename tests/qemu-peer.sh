#!/usr/bin/env bash
# tests/qemu-peer.sh — fetch QEMU 10.0 for Debian 12 from bookworm-backports
# and unpack it, with the libraries this machine lacks for it, under the
# cache directory: a second QEMU beside the machine's (Debian 12's 7.2) that
# changes nothing on the system. run-qemu.sh --qemu PATH (or MEMBOOT_QEMU)
# boots with it; the boot tests' QEMU 10.0 set and tests/bench.sh --qemu use
# it.
#
#   tests/qemu-peer.sh [CACHE_DIR]  (default: target/qemu-peer)
#
# The packages come through a private apt configuration in CACHE_DIR/apt
# (APT_CONFIG, read before any of the machine's apt configuration: its own
# sources list with bookworm and bookworm-backports, lists and cache), so
# the machine's apt sources and state are never changed. Which packages
# are fetched is what `apt-get install --simulate` of qemu-system-x86,
# qemu-system-common, qemu-system-data and seabios of that QEMU would
# install on this machine: apt reads the machine's dpkg status for that,
# and only reads it. Nothing is installed: each package is unpacked with
# dpkg-deb into CACHE_DIR/qemu-VERSION/root. QEMU_PEER_MIRROR overrides the
# mirror (default http://deb.debian.org/debian, the host the machine's own
# sources name).
#
# The QEMU picked is bookworm-backports' qemu-system-x86 of the 10.0
# series, by exact version; it is recorded in CACHE_DIR/resolved once its
# packages are downloaded, and later runs reuse it without apt (delete
# CACHE_DIR/resolved to look again).
#
# CACHE_DIR/qemu-VERSION/qemu-system-x86_64 is the QEMU to run: a wrapper
# that runs the unpacked binary with the unpacked libraries first on the
# library path and `-L` for each unpacked firmware directory (qboot,
# SeaBIOS, iPXE), so a boot finds the firmware of its own QEMU by name.
#
# Prints `qemu-SERIES PATH` (SERIES: 10.0), the wrapper.
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "qemu-peer.sh: $*" >&2; exit 4; }
say() { echo "qemu-peer.sh: $*" >&2; }
SERIES=10.0
PACKAGES=(qemu-system-x86 qemu-system-common qemu-system-data)
cache=
for arg in "$@"; do
    case "$arg" in
    -*) die "unknown option $arg (usage: tests/qemu-peer.sh [CACHE_DIR])" ;;
    *) [ -z "$cache" ] || die "one CACHE_DIR only, not $cache and $arg"; cache=$arg ;;
    esac
done
cache=${cache:-$ROOT/target/qemu-peer}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
    || die "needs apt-get and dpkg-deb (a Debian host)"
mirror=${QEMU_PEER_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# One run at a time per cache (parallel boot tests may start together);
# the lock also makes an interrupted run's temporary files safe to remove.
exec 9>"$cache/.lock"
flock 9
rm -rf "$cache"/.tmp.*
scratch=$cache/.tmp.$$
mkdir -p "$scratch" "$cache/debs" "$cache/resolved"
trap 'rm -rf "$scratch"' EXIT

apt=$cache/apt
private() { APT_CONFIG=$apt/apt.conf "$@"; }
private_update() {
    [ -r "$keyring" ] || die "$keyring is missing: install debian-archive-keyring"
    mkdir -p "$apt/empty" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/state" "$apt/log"
    printf 'deb [signed-by=%s] %s %s main\n' \
        "$keyring" "$mirror" bookworm "$keyring" "$mirror" bookworm-backports >"$apt/sources.list"
    # Every file apt would otherwise read or write under /etc/apt and
    # /var/{lib,cache,log}/apt, here. The dpkg status stays the machine's,
    # read only: what the machine has installed is not fetched again.
    cat >"$apt/apt.conf" <<CONF
Dir::Etc::main "$apt/empty/apt.conf";
Dir::Etc::parts "$apt/empty";
Dir::Etc::sourcelist "$apt/sources.list";
Dir::Etc::sourceparts "$apt/empty";
Dir::Etc::preferences "$apt/empty/preferences";
Dir::Etc::preferencesparts "$apt/empty";
Dir::Etc::trusted "$apt/empty/trusted.gpg";
Dir::Etc::trustedparts "$apt/empty";
Dir::Etc::netrc "$apt/empty/auth.conf";
Dir::Etc::netrcparts "$apt/empty";
Dir::State "$apt/state";
Dir::State::Lists "$apt/lists";
Dir::Cache "$apt/cache";
Dir::Log "$apt/log";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
CONF
    say "apt-get update of bookworm and bookworm-backports from $mirror (private lists in $apt)"
    private apt-get -q update >&2 \
        || die "apt-get update through $apt/apt.conf failed: check the network, or set QEMU_PEER_MIRROR"
}

# resolve: the packages to fetch, as name=version lines: QEMU SERIES from
# bookworm-backports, seabios at the version it wants, and every library
# apt would install beside them on this machine.
resolve() {
    private_update
    local version want=() p seabios
    version=$(private apt-cache madison qemu-system-x86 \
        | awk -v s="$SERIES" '/ bookworm-backports\// { v = $3; sub(/^[0-9]+:/, "", v); if (index(v, s ".") == 1) { print $3; exit } }')
    [ -n "$version" ] || die "bookworm-backports has no qemu-system-x86 of the $SERIES series (apt-cache madison qemu-system-x86 through $apt/apt.conf)"
    for p in "${PACKAGES[@]}"; do want+=("$p=$version"); done
    # qemu-system-x86 of a backport wants the backported SeaBIOS.
    seabios=$(private apt-cache madison seabios | awk '/ bookworm-backports\// { print $3; exit }')
    [ -z "$seabios" ] || want+=("seabios=$seabios")
    # `Inst NAME [INSTALLED] (VERSION SUITE [ARCH])`: the version is the
    # first word in parentheses (an upgrade names the installed one first).
    private apt-get install --simulate --no-install-recommends "${want[@]}" 2>"$scratch/apt.err" \
        | sed -n 's/^Inst \([^ ]*\) \(\[[^]]*\] \)\{0,1\}(\([^ ]*\) .*/\1=\3/p' >"$scratch/inst" \
        || die "apt-get install --simulate ${want[*]} failed: $(cat "$scratch/apt.err")"
    grep -q "^qemu-system-x86=" "$scratch/inst" \
        || die "apt would not install qemu-system-x86=$version here: $(cat "$scratch/apt.err")"
    cat "$scratch/inst"
}

# deb_of NAME=VERSION: the downloaded .deb (apt writes an epoch's ':' as %3a).
deb_of() {
    local name=${1%%=*} version=${1#*=} deb
    for deb in "$cache/debs/${name}_${version/:/%3a}_"*.deb; do
        [ -f "$deb" ] && { echo "$deb"; return; }
    done
}

record=$cache/resolved/qemu-$SERIES
if [ ! -f "$record" ]; then
    resolve >"$scratch/record"
    missing=()
    while read -r p; do [ -n "$(deb_of "$p")" ] || missing+=("$p"); done <"$scratch/record"
    if [ ${#missing[@]} -gt 0 ]; then
        mkdir -p "$scratch/download"
        # Run as root, apt downloads as its sandbox user, who cannot write
        # here: ask for root outright.
        (cd "$scratch/download" && private apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >&2) \
            || die "apt-get download ${missing[*]} failed: check the network"
        mv "$scratch/download"/*.deb "$cache/debs/"
    fi
    mv "$scratch/record" "$record"
fi
mapfile -t packages <"$record"
qemu=$(grep '^qemu-system-x86=' "$record")
version=${qemu#*=}
dir=$cache/qemu-${version#*:}
if [ ! -x "$dir/qemu-system-x86_64" ]; then
    rm -rf "$scratch/root"
    mkdir -p "$scratch/root"
    for p in "${packages[@]}"; do
        deb=$(deb_of "$p")
        [ -n "$deb" ] || die "no .deb for $p in $cache/debs: delete $cache/resolved and run again"
        dpkg-deb -x "$deb" "$scratch/root" || die "unpacking $deb failed"
    done
    [ -x "$scratch/root/usr/bin/qemu-system-x86_64" ] || die "qemu-system-x86=$version has no usr/bin/qemu-system-x86_64"
    [ -f "$scratch/root/usr/share/qemu/qboot.rom" ] || die "qemu-system-data=$version has no usr/share/qemu/qboot.rom (run-qemu.sh's firmware for -kernel)"
    cat >"$scratch/qemu-system-x86_64" <<'WRAPPER'
#!/bin/sh
# QEMU unpacked by tests/qemu-peer.sh: its own libraries first, its own
# firmware by name (-L).
root=$(dirname "$(readlink -f "$0")")/root
LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "$root/usr/bin/qemu-system-x86_64" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" \
    -L "$root/usr/lib/ipxe/qemu" "$@"
WRAPPER
    chmod +x "$scratch/qemu-system-x86_64"
    rm -rf "$dir"
    mkdir -p "$dir"
    mv "$scratch/root" "$dir/root"
    mv "$scratch/qemu-system-x86_64" "$dir/qemu-system-x86_64"
fi
# Every library it links is found: the unpacked ones or the machine's.
LD_LIBRARY_PATH=$dir/root/usr/lib/x86_64-linux-gnu:$dir/root/lib/x86_64-linux-gnu \
    ldd "$dir/root/usr/bin/qemu-system-x86_64" >"$scratch/ldd" 2>&1 || true
if grep -q 'not found' "$scratch/ldd"; then
    die "the unpacked QEMU misses libraries ($(grep 'not found' "$scratch/ldd" | awk '{ printf "%s ", $1 }')): the machine's packages changed since it was fetched; delete $cache/resolved and $dir and run again"
fi
"$dir/qemu-system-x86_64" --version >"$scratch/version" 2>&1 \
    || die "$dir/qemu-system-x86_64 --version failed: $(cat "$scratch/version")"
grep -q "^QEMU emulator version $SERIES\." "$scratch/version" \
    || die "$dir/qemu-system-x86_64 is not QEMU $SERIES: $(head -n 1 "$scratch/version")"
echo "qemu-$SERIES $dir/qemu-system-x86_64"
