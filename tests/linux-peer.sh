#!/usr/bin/env bash
# tests/linux-peer.sh — fetch a stock Debian Linux kernel and a static busybox
# with the package manager and build the initramfs the bench boots beside
# memboot (tests/bench.sh --linux). Nothing is installed into the host: the
# packages are unpacked with `dpkg -x` into the cache directory.
#
#   tests/linux-peer.sh [CACHE_DIR]    (default: target/linux-peer)
#
# Prints three lines: `kernel PATH` (the bzImage), `vmlinux PATH` (the same
# kernel uncompressed, an ELF with a PVH entry note that QEMU's -kernel boots
# directly, without the bzImage's decompressor and its KASLR) and `initrd PATH`. The initramfs's /init
# mounts /proc, prints a marker with the uptime, prints the kernel log
# between markers (dmesg), and powers the machine off, so QEMU exits 0.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${1:-$ROOT/target/linux-peer}
mkdir -p "$cache/debs"
cache=$(cd "$cache" && pwd)
die() { echo "linux-peer.sh: $*" >&2; exit 4; }

fetch() { # fetch PACKAGE: download its .deb into the cache once
    ls "$cache/debs/$1"_*.deb >/dev/null 2>&1 && return
    (cd "$cache/debs" && apt-get download "$1" >&2) \
        || die "apt-get download $1 failed (run apt-get update, or check the network)"
}
if ! ls "$cache"/debs/linux-image-[0-9]*.deb >/dev/null 2>&1; then
    # linux-image-amd64 is the distribution's metapackage: the kernel is the
    # versioned package it depends on.
    command -v apt-cache >/dev/null || die "needs apt-get/apt-cache (a Debian or Ubuntu host)"
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    if [ -z "$pkg" ]; then
        apt-get update -qq >&2 || die "apt-get update failed"
        pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    fi
    [ -n "$pkg" ] || die "apt-cache knows no kernel behind linux-image-amd64"
    fetch "$pkg"
fi
fetch busybox-static

root=$cache/root
if [ ! -x "$root/bin/busybox" ] || ! ls "$root"/boot/vmlinuz-* >/dev/null 2>&1; then
    rm -rf "$root"
    for deb in "$cache"/debs/linux-image-[0-9]*.deb "$cache"/debs/busybox-static_*.deb; do
        dpkg -x "$deb" "$root" || die "dpkg -x $deb failed"
    done
fi
kernel=$(ls "$root"/boot/vmlinuz-* | head -n 1)

# The uncompressed kernel: the payload of the bzImage, found by its
# compression's magic (what the kernel's scripts/extract-vmlinux does).
vmlinux=$cache/vmlinux
if [ ! -f "$vmlinux" ] || [ "$kernel" -nt "$vmlinux" ]; then
    python3 - "$kernel" "$vmlinux.tmp" <<'PY' || die "cannot extract the uncompressed kernel from $kernel"
import lzma, sys
data = open(sys.argv[1], "rb").read()
for magic, make in ((b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ)),):
    at = data.find(magic)
    while at >= 0:
        try:
            out = make().decompress(data[at:])
        except lzma.LZMAError:
            out = b""
        if out.startswith(b"\x7fELF"):
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
        at = data.find(magic, at + 1)
sys.exit("no XZ payload that decompresses to an ELF (CONFIG_KERNEL_XZ is Debian's)")
PY
    mv "$vmlinux.tmp" "$vmlinux"
fi

initrd=$cache/initramfs.cpio
if [ ! -f "$initrd" ] || [ "${BASH_SOURCE[0]}" -nt "$initrd" ]; then
    tree=$cache/initramfs
    rm -rf "$tree"
    mkdir -p "$tree/bin" "$tree/proc" "$tree/dev"
    cp "$root/bin/busybox" "$tree/bin/busybox"
    cat >"$tree/init" <<'INIT'
#!/bin/busybox sh
# memboot's Linux peer: report when userspace started, dump the kernel log,
# power off (QEMU then exits with status 0).
/bin/busybox mount -t proc proc /proc
echo "linux-peer: /init started at uptime $(/bin/busybox cut -d' ' -f1 /proc/uptime) s"
echo "linux-peer: dmesg begin"
/bin/busybox dmesg
echo "linux-peer: dmesg end"
/bin/busybox poweroff -f
INIT
    chmod +x "$tree/init"
    (cd "$tree" && find . | "$root/bin/busybox" cpio -o -H newc >"$initrd" 2>/dev/null) \
        || die "building the initramfs failed"
fi
echo "kernel $kernel"
echo "vmlinux $vmlinux"
echo "initrd $initrd"
