#!/usr/bin/env bash
# tests/linux-peer.sh — fetch stock Debian Linux kernels and a static busybox
# with the package manager and build the initramfs the bench boots beside
# memboot (tests/bench.sh --linux). Nothing is installed into the host: the
# packages are unpacked with `dpkg-deb` into the cache directory.
#
#   tests/linux-peer.sh [--symbols] [CACHE_DIR]  (default: target/linux-peer)
#
# The peers, one per kernel series (major.minor), oldest first:
#   - Debian 12 (bookworm): the kernel linux-image-amd64 depends on, through
#     the machine's own apt sources (Linux 6.1);
#   - Debian 13 (trixie, with trixie-updates and trixie-security, as the
#     machine's own sources have Debian 12's): the same, through a private
#     apt configuration (Linux 6.12, the LTS kernel of Debian 13);
#   - trixie-backports: the same, when it is a newer series than trixie's.
# The private configuration lives in CACHE_DIR/apt (APT_CONFIG, read before
# any of the machine's apt configuration: its own sources list, lists,
# cache and an empty dpkg status), so the machine's apt configuration,
# sources and state are neither read nor changed. Its sources are signed
# with the machine's Debian archive keyring (Debian 12's holds Debian 13's
# keys). LINUX_PEER_MIRROR and LINUX_PEER_SECURITY_MIRROR override its
# mirrors (default http://deb.debian.org/debian and …/debian-security, the
# host the machine's own sources name).
#
# Each kernel is picked by exact name and version: the linux-image-VERSION
# package that linux-image-amd64 depends on with `(= version)`, plus its
# linux-binary-/linux-base- packages where Debian splits the kernel out of
# it (the 7.x backports). What was picked is recorded in CACHE_DIR/resolved
# once its packages are downloaded, and later runs reuse it without apt;
# delete CACHE_DIR/resolved to look for newer kernels.
#
# --symbols: also each peer's real System.map. Debian's kernel packages ship
# a stub; the real map is in linux-image-RELEASE-dbg (for the split 7.x
# kernels too), a ~1 GB package of debug symbols. It is fetched at exactly
# the peer's version with the apt that resolved the peer, only the map is
# streamed out of it into CACHE_DIR/linux-RELEASE/System.map, checked (a
# `T start_kernel` or `T _stext` line, over 10000 lines), and the .deb is
# deleted; the map's presence is the record, so later runs skip it. A peer
# whose -dbg apt has no trace of is an error, except the trixie-backports
# one, which keeps its stub.
#
# Prints, per peer (SERIES: 6.1, 6.12, …, in the order above):
#   kernel-SERIES PATH      the distribution's bzImage
#   vmlinux-SERIES PATH     the same kernel uncompressed: an ELF with a PVH
#                           entry note that QEMU's -kernel boots directly,
#                           without the bzImage's decompressor and its KASLR
#   system-map-SERIES PATH  the real System.map when --symbols fetched it
#                           (this run or an earlier one), else the package's
#                           stub (naming the -dbg package with the real one)
#   config-SERIES PATH      the kernel's build configuration
# and last `initrd PATH`, one initramfs for all: its /init mounts /proc,
# prints a marker with the uptime, a `linux-peer: 1 GiB huge page at pfn
# 0xPFN` line per 1 GiB huge page the boot reserved, the kernel log between
# markers (dmesg), and powers the machine off, so QEMU exits 0.
#
# Every file is written under a temporary name and renamed when whole, so an
# interrupted run leaves nothing half-written that a later run would trust.
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "linux-peer.sh: $*" >&2; exit 4; }
say() { echo "linux-peer.sh: $*" >&2; }
symbols=0 cache=
for arg in "$@"; do
    case "$arg" in
    --symbols) symbols=1 ;;
    -*) die "unknown option $arg (usage: tests/linux-peer.sh [--symbols] [CACHE_DIR])" ;;
    *) [ -z "$cache" ] || die "one CACHE_DIR only, not $cache and $arg"; cache=$arg ;;
    esac
done
cache=${cache:-$ROOT/target/linux-peer}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
command -v apt-get >/dev/null && command -v dpkg >/dev/null \
    || die "needs apt-get and dpkg (a Debian host)"
mirror=${LINUX_PEER_MIRROR:-http://deb.debian.org/debian}
security=${LINUX_PEER_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# One run at a time per cache (two benches may start together); the lock
# also makes the temporary files of an interrupted run safe to remove.
exec 9>"$cache/.lock"
flock 9
rm -rf "$cache"/.tmp.*
# What the single-peer script before this one left (Debian 12's kernel with
# all its modules, unpacked whole): superseded by linux-RELEASE/.
rm -rf "$cache/root" "$cache/vmlinux" "$cache/initramfs"
scratch=$cache/.tmp.$$
mkdir -p "$scratch" "$cache/debs" "$cache/resolved"
trap 'rm -rf "$scratch"' EXIT

# The two package managers: the machine's own, and the private one.
machine() { "$@"; }
private() { APT_CONFIG=$cache/apt/apt.conf "$@"; }
private_updated=0
private_update() {
    [ "$private_updated" = 1 ] && return
    [ -r "$keyring" ] || die "$keyring is missing: install debian-archive-keyring (Debian 12's signs Debian 13 too)"
    local apt=$cache/apt
    mkdir -p "$apt/empty" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/state" "$apt/log"
    : >"$apt/status"
    # trixie-backports is NotAutomatic: apt's candidate stays trixie's.
    printf 'deb [signed-by=%s] %s %s main\n' \
        "$keyring" "$mirror" trixie "$keyring" "$mirror" trixie-updates \
        "$keyring" "$security" trixie-security "$keyring" "$mirror" trixie-backports >"$apt/sources.list"
    # Every file apt would otherwise read or write under /etc/apt and
    # /var/{lib,cache,log}/apt, here; the dpkg status is empty, so nothing
    # counts as installed and nothing of the host's is consulted.
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
Dir::State::status "$apt/status";
Dir::Cache "$apt/cache";
Dir::Log "$apt/log";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
CONF
    say "apt-get update of trixie from $mirror and $security (private lists in $apt)"
    private apt-get -q update >&2 \
        || die "apt-get update through $apt/apt.conf failed: check the network, or set LINUX_PEER_MIRROR and LINUX_PEER_SECURITY_MIRROR"
    private_updated=1
}

# candidate APT PACKAGE: the version apt would pick.
candidate() {
    { $1 apt-cache policy "$2" 2>/dev/null || true; } | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'
}
# pinned_deps APT PACKAGE=VERSION|PACKAGE/SUITE: that one version's
# dependencies pinned with `(= version)`, as name=version lines; nothing
# when there is no such package.
pinned_deps() {
    { $1 apt-cache show "$2" 2>/dev/null || true; } | awk '
        /^Depends: / && !done {
            n = split(substr($0, 10), dep, /, /)
            for (i = 1; i <= n; i++)
                if (dep[i] ~ /^[^ |]+ \(= [^)]+\)$/) { split(dep[i], w, /[ ()=]+/); print w[1] "=" w[2] }
            done = 1
        }'
}
# kernel_of APT SPEC: the kernel the metapackage SPEC (linux-image-amd64=V
# or linux-image-amd64/SUITE) depends on, exact name=version lines: its
# linux-image-RELEASE, and the linux-binary-RELEASE and linux-base-RELEASE
# that hold the kernel and System.map where the image package is itself
# only a metapackage. Nothing when SPEC does not exist.
kernel_of() {
    local image release p
    image=$(pinned_deps "$1" "$2" | awk '/^linux-image-[0-9]/ && !done { print; done = 1 }')
    [ -n "$image" ] || return 0
    echo "$image"
    release=${image%%=*}
    release=${release#linux-image-}
    for p in $(pinned_deps "$1" "$image"); do
        case "${p%%=*}" in "linux-binary-$release" | "linux-base-$release") echo "$p" ;; esac
    done
}
# refresh APT: APT's lists updated, once a run, before concluding that
# they lack a package.
machine_updated=0
refresh() {
    if [ "$1" = private ]; then
        private_update
    elif [ "$machine_updated" = 0 ]; then
        apt-get update -qq >&2 || die "apt-get update failed (check the network)"
        machine_updated=1
    fi
}
# resolve_machine PACKAGE: PACKAGE=candidate from the machine's sources,
# after the machine's apt-get update if its lists have none.
resolve_machine() {
    local version
    version=$(candidate machine "$1")
    if [ -z "$version" ]; then
        refresh machine
        version=$(candidate machine "$1")
    fi
    [ -n "$version" ] || die "the machine's apt sources have no $1"
    echo "$1=$version"
}

# deb_of NAME=VERSION: the downloaded .deb (apt writes an epoch's ':' as %3a).
deb_of() {
    local name=${1%%=*} version=${1#*=} deb
    for deb in "$cache/debs/${name}_${version/:/%3a}_"*.deb; do
        [ -f "$deb" ] && { echo "$deb"; return; }
    done
}
# download APT NAME=VERSION...: each .deb into CACHE_DIR/debs, once.
download() {
    local apt=$1 p missing=()
    shift
    for p in "$@"; do [ -n "$(deb_of "$p")" ] || missing+=("$p"); done
    [ ${#missing[@]} -gt 0 ] || return 0
    local tmp=$scratch/download
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # Run as root, apt downloads as its sandbox user, who cannot write
    # here, and falls back to root with a warning: ask for root outright.
    (cd "$tmp" && $apt apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >&2) \
        || die "apt-get download ${missing[*]} failed: check the network, or delete $cache/resolved to pick again"
    mv "$tmp"/*.deb "$cache/debs/"
    for p in "${missing[@]}"; do [ -n "$(deb_of "$p")" ] || die "apt-get download $p left no ${p%%=*}_*.deb"; done
}
# resolved NAME APT RESOLVER ARGS...: sets `packages` to the packages
# recorded as NAME, one name=version a word; the first time, to RESOLVER's
# name=version lines, recorded once downloaded. (RESOLVER runs in this
# shell, not a subshell, so the private lists are updated once a run.)
resolved() {
    local apt=$2 record=$cache/resolved/$1
    shift 2
    if [ ! -f "$record" ]; then
        "$@" >"$scratch/record"
        # shellcheck disable=SC2046 # one package a word
        download "$apt" $(cat "$scratch/record")
        mv "$scratch/record" "$record"
    fi
    packages=$(cat "$record")
}
# unpack DIR NAME=VERSION...: the packages' files in DIR, once, less the
# kernel modules (tens of MB per kernel that the peer, booting from a
# module-less initramfs, never loads).
unpack() {
    local dir=$1 p deb
    shift
    [ -d "$dir" ] && return
    rm -rf "$scratch/root"
    mkdir -p "$scratch/root"
    for p in "$@"; do
        deb=$(deb_of "$p")
        [ -n "$deb" ] || die "no .deb for $p in $cache/debs: delete $cache/resolved and run again"
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$scratch/root" --exclude='./*lib/modules/*/kernel' \
            || die "unpacking $deb failed"
    done
    mv "$scratch/root" "$dir"
}

# zstd_tool: sets `zstd` to the decompressor for kernels built with
# CONFIG_KERNEL_ZSTD (Debian 13's): the host's, or Debian's zstd package
# unpacked into the cache.
# Python's standard library has no zstd (before 3.14), and a Python module
# from Debian would not reach a python3 that is not Debian's.
zstd_tool() {
    zstd=$(command -v zstd || true)
    [ -z "$zstd" ] || return 0
    resolved zstd machine resolve_machine zstd
    # shellcheck disable=SC2086 # one package a word
    unpack "$cache/zstd" $packages
    zstd=$cache/zstd/usr/bin/zstd
    [ -x "$zstd" ] || die "Debian's zstd package has no usr/bin/zstd"
}

# extract_vmlinux BZIMAGE OUT: the uncompressed kernel, found where the x86
# boot protocol's header says its payload is (Documentation/arch/x86/boot.rst),
# decompressed, checked against the size the build appended and for the PVH
# entry note QEMU boots it by.
extract_vmlinux() {
    zstd_tool
    python3 - "$1" "$2" "$zstd" <<'PY' || die "cannot extract the uncompressed kernel from $1"
import lzma, struct, subprocess, sys

image, out, zstd = sys.argv[1:4]
data = open(image, "rb").read()
# Setup header: "HdrS" at 0x202, the protocol version at 0x206;
# payload_offset/payload_length (protocol 2.08+) at 0x248/0x24c, from the
# protected-mode code, which follows setup_sects (0x1f1; 0 means 4) sectors
# of real-mode setup and the boot sector.
if data[0x202:0x206] != b"HdrS" or struct.unpack_from("<H", data, 0x206)[0] < 0x208:
    sys.exit(f"{image}: not a bzImage of boot protocol 2.08 or later")
setup_sects = data[0x1F1] or 4
offset, length = struct.unpack_from("<II", data, 0x248)
start = (setup_sects + 1) * 512 + offset
payload = data[start : start + length]
# The build appends the uncompressed size, 32-bit little-endian
# (scripts/Makefile.lib's *_with_size compressors).
packed, size = payload[:-4], struct.unpack("<I", payload[-4:])[0]
if packed.startswith(b"\xfd7zXZ\x00"):  # CONFIG_KERNEL_XZ (Debian 12)
    vmlinux = lzma.decompress(packed, format=lzma.FORMAT_XZ)
elif packed.startswith(b"\x28\xb5\x2f\xfd"):  # CONFIG_KERNEL_ZSTD (Debian 13)
    vmlinux = subprocess.run([zstd, "-dcq"], input=packed, stdout=subprocess.PIPE, check=True).stdout
else:
    sys.exit(f"{image}: payload magic {packed[:6].hex()} is neither XZ nor zstd")
if not vmlinux.startswith(b"\x7fELF\x02") or len(vmlinux) != size:
    sys.exit(f"{image}: the payload is not a {size}-byte ELF64")

def notes(elf):
    """(name, type) of every ELF note of the program headers."""
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        at, end = p_offset, p_offset + p_filesz
        while p_type == 4 and at + 12 <= end:  # PT_NOTE
            namesz, descsz, n_type = struct.unpack_from("<III", elf, at)
            yield elf[at + 12 : at + 12 + namesz].rstrip(b"\0"), n_type
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4

# XEN_ELFNOTE_PHYS32_ENTRY (18): the PVH entry (CONFIG_PVH).
if (b"Xen", 18) not in notes(vmlinux):
    sys.exit(f"{image}: the kernel has no PVH entry note (CONFIG_PVH): QEMU cannot boot it uncompressed")
open(out, "wb").write(vmlinux)
PY
}

# kernel_file ROOT RELEASE NAME: /boot/NAME-RELEASE, or where Debian's split
# packages put it, /usr/lib/modules/RELEASE/NAME.
kernel_file() {
    local f
    for f in "$1/boot/$3-$2" "$1/usr/lib/modules/$2/$3"; do
        [ -f "$f" ] && { echo "$f"; return; }
    done
    die "no $3 for $2 in $1 (/boot/$3-$2 or /usr/lib/modules/$2/$3)"
}

# dbg_of APT NAME=VERSION...: sets `dbg` to NAME-dbg=VERSION for the
# first of the peer's packages that APT has a -dbg package of at exactly
# that version (linux-image-RELEASE-dbg, the one the stubs name, also where
# linux-binary-RELEASE holds the kernel), looking again after updating
# APT's lists; to nothing when there is none.
dbg_of() {
    local apt=$1 p try
    shift
    dbg=
    for try in 1 2; do
        for p in "$@"; do
            if $apt apt-cache show "${p%%=*}-dbg=${p#*=}" >/dev/null 2>&1; then
                dbg=${p%%=*}-dbg=${p#*=}
                return
            fi
        done
        [ "$try" = 2 ] || refresh "$apt"
    done
}
# real_map DIR RELEASE APT NAME=VERSION...: DIR/System.map, the real map
# out of the peer's -dbg package (dbg_of), which is deleted once the map is
# checked; the map's presence records that. No map when APT has no such
# package.
real_map() {
    local dir=$1 release=$2 apt=$3 deb start st=0 lines
    shift 3
    [ -f "$dir/System.map" ] && return
    dbg_of "$apt" "$@"
    [ -n "$dbg" ] || return 0
    download "$apt" "$dbg"
    deb=$(deb_of "$dbg")
    start=$EPOCHREALTIME
    # Only the map, streamed: it comes early in the archive, and tar stops
    # at its first match (--occurrence); dpkg-deb, cut off, fails (SIGPIPE).
    { dpkg-deb --fsys-tarfile "$deb" 2>"$scratch/dpkg-deb.err" || :; } \
        | tar -x -O --occurrence=1 --wildcards './usr/lib/debug/*System.map*' \
            >"$scratch/System.map" 2>"$scratch/tar.err" || st=$?
    [ "$st" = 0 ] || die "no ./usr/lib/debug/*System.map* in $deb ($(cat "$scratch/tar.err" "$scratch/dpkg-deb.err")): look where it is with dpkg-deb -c"
    lines=$(awk '$2 == "T" && ($3 == "start_kernel" || $3 == "_stext") { real = 1 }
        END { if (real && NR > 10000) print NR }' "$scratch/System.map")
    [ -n "$lines" ] || die "the System.map in $deb is not a real one (no T start_kernel or T _stext line, or 10000 lines or fewer): look at it with dpkg-deb -c"
    mv "$scratch/System.map" "$dir/System.map"
    say "$release: the real System.map, $lines lines, out of ${deb##*/} in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s; the .deb is deleted"
    rm -f "$deb"
}

# Every peer's packages first, then the files made from them.
peers=()
add_peer() { # add_peer SOURCE APT PACKAGE=VERSION...: a kernel of a series not yet listed
    local source=$1 apt=$2 image=$3 release series p
    shift 2
    release=${image%%=*}
    release=${release#linux-image-}
    [[ "$release" =~ ^([0-9]+\.[0-9]+)[.+-] ]] || die "$source: cannot read a kernel series from ${image%%=*}"
    series=${BASH_REMATCH[1]}
    for p in "${peers[@]}"; do
        if [ "${p%% *}" = "$series" ]; then
            say "$source: Linux $series again (${image%%=*}); listed once"
            return
        fi
    done
    peers+=("$series $release $source $apt $*")
}
resolve_bookworm() {
    local meta
    meta=$(resolve_machine linux-image-amd64)
    kernel_of machine "$meta"
}
resolve_trixie() {
    private_update
    local version
    version=$(candidate private linux-image-amd64)
    [ -n "$version" ] || die "trixie has no linux-image-amd64 (see $cache/apt/sources.list)"
    kernel_of private "linux-image-amd64=$version"
}
resolve_backports() { private_update; kernel_of private linux-image-amd64/trixie-backports; }

resolved bookworm machine resolve_bookworm
[ -n "$packages" ] || die "the machine's linux-image-amd64 depends on no versioned linux-image package"
# shellcheck disable=SC2086 # one package a word
add_peer bookworm machine $packages
resolved trixie private resolve_trixie
[ -n "$packages" ] || die "trixie's linux-image-amd64 depends on no versioned linux-image package"
# shellcheck disable=SC2086
add_peer trixie private $packages
resolved trixie-backports private resolve_backports
if [ -n "$packages" ]; then
    # shellcheck disable=SC2086
    add_peer trixie-backports private $packages
else
    say "trixie-backports has no linux-image-amd64: no newer peer"
fi
resolved busybox machine resolve_machine busybox-static
busybox=$packages

out=()
for p in "${peers[@]}"; do
    read -r series release source apt packages <<<"$p"
    dir=$cache/linux-$release
    # shellcheck disable=SC2086
    unpack "$dir" $packages
    if [ "$symbols" = 1 ]; then
        # shellcheck disable=SC2086
        real_map "$dir" "$release" "$apt" $packages
    fi
    if [ "$symbols" = 1 ] && [ ! -f "$dir/System.map" ]; then
        [ "$source" = trixie-backports ] \
            || die "$source: apt has no -dbg package of $packages (linux-image-$release-dbg at that version): delete $cache/resolved to pick a kernel that has one"
        say "$source: apt has no -dbg package of $packages (linux-image-$release-dbg at that version): Linux $series keeps its stub System.map"
    fi
    map=$dir/System.map
    [ -f "$map" ] || map=$(kernel_file "$dir" "$release" System.map)
    kernel=$(kernel_file "$dir" "$release" vmlinuz)
    vmlinux=$dir/vmlinux
    if [ ! -f "$vmlinux" ] || [ "$kernel" -nt "$vmlinux" ]; then
        extract_vmlinux "$kernel" "$scratch/vmlinux"
        mv "$scratch/vmlinux" "$vmlinux"
    fi
    out+=("kernel-$series $kernel" "vmlinux-$series $vmlinux"
        "system-map-$series $map"
        "config-$series $(kernel_file "$dir" "$release" config)")
done

root=$cache/busybox-${busybox#*=}
root=${root//:/%3a}
# shellcheck disable=SC2086
unpack "$root" $busybox
initrd=$cache/initramfs.cpio
# Rebuilt when this script or the busybox picked changed.
if [ ! -f "$initrd" ] || [ "${BASH_SOURCE[0]}" -nt "$initrd" ] || [ "$cache/resolved/busybox" -nt "$initrd" ]; then
    tree=$scratch/initramfs
    mkdir -p "$tree/bin" "$tree/proc" "$tree/dev"
    cp "$root/bin/busybox" "$tree/bin/busybox"
    cat >"$tree/init" <<'INIT'
#!/bin/busybox sh
# memboot's Linux peer: report when userspace started (and where the 1 GiB
# huge pages lie), dump the kernel log, power off (QEMU then exits with
# status 0).
/bin/busybox mount -t proc proc /proc
echo "linux-peer: /init started at uptime $(/bin/busybox cut -d' ' -f1 /proc/uptime) s"
# The 1 GiB huge pages the boot reserved, by first PFN: a compound head
# (KPF_COMPOUND_HEAD, bit 15) of a huge page (KPF_HUGE, bit 17) in
# /proc/kpageflags at each 1 GiB-aligned frame of System RAM. Where they
# lie decides which of their struct pages memory init wrote (the bench's
# account, tools/src/hugetlb_log.rs); Linux prints no address of them.
# Scanned only when hugetlb holds a GiB or more (`Hugetlb:`, all sizes).
hugetlb_kib=$(/bin/busybox awk '$1 == "Hugetlb:" { print $2 }' /proc/meminfo)
if [ "${hugetlb_kib:-0}" -ge 1048576 ]; then
    /bin/busybox grep ' : System RAM$' /proc/iomem | while IFS='- ' read -r start end _; do
        pfn=$(( (0x$start + 0x3fffffff) / 0x40000000 * 262144 )) last=$(( (0x$end + 1) >> 12 ))
        while [ $((pfn + 262144)) -le "$last" ]; do
            flags=$(/bin/busybox dd if=/proc/kpageflags bs=8 skip=$pfn count=1 2>/dev/null | /bin/busybox od -An -tu8)
            if [ $(( (flags >> 17) & (flags >> 15) & 1 )) = 1 ]; then
                /bin/busybox printf 'linux-peer: 1 GiB huge page at pfn 0x%x\n' "$pfn"
            fi
            pfn=$((pfn + 262144))
        done
    done
fi
echo "linux-peer: dmesg begin"
/bin/busybox dmesg
echo "linux-peer: dmesg end"
/bin/busybox poweroff -f
INIT
    chmod +x "$tree/init"
    (cd "$tree" && find . | "$root/bin/busybox" cpio -o -H newc >"$scratch/initramfs.cpio" 2>/dev/null) \
        || die "building the initramfs failed"
    mv "$scratch/initramfs.cpio" "$initrd"
fi
printf '%s\n' "${out[@]}" "initrd $initrd"
