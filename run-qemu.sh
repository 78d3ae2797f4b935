#!/usr/bin/env bash
# run-qemu.sh — boot memboot (or a stock Linux kernel) under QEMU and map the
# result to an exit code: ./run-qemu.sh -m SIZE [FLAGS...] [-- KERNEL_OPTIONS...]
# (./run-qemu.sh --help lists the flags and exit codes; README "Running").
#
# This script builds what is stale and installs what is missing; the host
# side (flags, the host-memory refusal, QEMU's command line, the boot and its
# exit code) is memboot-run (tools/), which it runs with the same flags. That
# tool first checks the flags and names the build steps they need
# (`memboot-run build-steps`), so a usage error or a guest this host cannot
# hold is refused before anything is built, and --dry-run, --linux and PVH
# boots never wait for the disk-image builder.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXIT_SETUP=4
die_setup() { echo "run-qemu.sh: $*" >&2; exit "$EXIT_SETUP"; }
note() { echo "run-qemu.sh: $*" >&2; }

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
[ -n "$toolchain" ] || die_setup "cannot read the toolchain channel from rust-toolchain.toml"
tools_dir=$ROOT/target/release
run_tool=$tools_dir/memboot-run

# --- the host tool: built first, unless --no-build ----------------------------
# --no-build (tests, the bench: boots of what --build-only built) runs no
# cargo at all; the tool reads every other flag.
no_build=0
for arg in "$@"; do
    [ "$arg" = -- ] && break
    [ "$arg" = --no-build ] && no_build=1
done
if [ "$no_build" = 1 ]; then
    [ -x "$run_tool" ] || die_setup "--no-build: no $run_tool (run with --build-only first)"
else
    (cd "$ROOT" && RUSTUP_TOOLCHAIN=$toolchain cargo build -q --release -p memboot-tools --bin memboot-run) \
        || die_setup "host tool build failed (memboot-run)"
fi
# The flags checked, the refusal decided, and the build steps they need.
steps=$("$run_tool" build-steps "$@") || exit
steps=" $steps "
wants() { [[ "$steps" == *" $1 "* ]]; }

# --- setup: rustup pieces and QEMU, installed when missing -------------------
ensure_rust() {
    command -v rustup >/dev/null || die_setup "rustup not found: install Rust via rustup first"
    local components targets
    components=$(rustup component list --installed --toolchain "$toolchain" 2>/dev/null) \
        || die_setup "toolchain $toolchain is not installed (rustup toolchain list)"
    for c in rust-src llvm-tools; do
        grep -q "^$c" <<<"$components" || rustup component add "$c" --toolchain "$toolchain" >&2 \
            || die_setup "rustup component add $c --toolchain $toolchain failed"
    done
    targets=$(rustup target list --installed --toolchain "$toolchain" 2>/dev/null)
    grep -qx x86_64-unknown-none <<<"$targets" || rustup target add x86_64-unknown-none --toolchain "$toolchain" >&2 \
        || die_setup "rustup target add x86_64-unknown-none failed"
}
# apt_install PACKAGE...: tests/apt-install.sh, which removes no package
# silently (it refuses, exit 3, unless CI=true or MEMBOOT_APT_ALLOW_REMOVE=1).
apt_install() { "$ROOT/tests/apt-install.sh" "$@"; }
ensure_qemu() {
    # GNU time reports QEMU's peak RSS (wait4's ru_maxrss).
    [ -x /usr/bin/time ] || apt_install time || die_setup "GNU time is missing (/usr/bin/time)"
    if wants ovmf && [ ! -f /usr/share/OVMF/OVMF_CODE_4M.fd ]; then
        apt_install ovmf || die_setup "OVMF is missing (/usr/share/OVMF), which --uefi boots"
    fi
    # `qemu`: no --qemu and no MEMBOOT_QEMU, so the machine's QEMU; a QEMU
    # already there is used as it is (memboot-run checks that it is 7.2
    # or newer).
    wants qemu || return 0
    command -v qemu-system-x86_64 >/dev/null && return 0
    # Once apt refused (it would remove packages), later boots go straight
    # to the unpacked QEMU instead of asking apt again.
    local refused=$ROOT/target/qemu-peer/apt-refused
    if [ ! -f "$refused" ]; then
        apt_install qemu-system-x86
        case $? in
        0) return 0 ;;
        3) mkdir -p "${refused%/*}" && date -u +%FT%TZ >"$refused" ;;
        *) die_setup "QEMU is missing and could not be installed (see above)" ;;
        esac
    fi
    note "no qemu-system-x86_64 here, and installing Debian's would remove packages (see $refused's first run; MEMBOOT_APT_ALLOW_REMOVE=1 and deleting that file installs it anyway): using QEMU 10.0 as tests/qemu-peer.sh unpacks it, which changes nothing on the system"
    MEMBOOT_QEMU=$("$ROOT/tests/qemu-peer.sh" | awk '$1 ~ /^qemu-/ { print $2 }') && [ -n "$MEMBOOT_QEMU" ] \
        || die_setup "tests/qemu-peer.sh failed: install QEMU by hand (apt-get install qemu-system-x86)"
    export MEMBOOT_QEMU
}

# --- build: kernel ELF, its stripped copy, disk images, host tools -----------
# All incremental. The kernel ELF keeps its debug info for symbols and
# backtraces (tests/first-run-code.sh reads it); what boots is the stripped
# copy: QEMU's -kernel loads it (PVH), and the disk images carry it, since
# the BIOS stages read the image through int 13h, about 0.5 MB/s under TCG.
kernel_elf=$ROOT/target/kernel/x86_64-unknown-none/release/memboot-kernel
image_tool=$ROOT/target/runner/release/memboot-image
image_dir=$ROOT/target/images
boot_elf=$image_dir/memboot-kernel.elf
build_kernel() {
    # `cargo kbuild` is the alias in .cargo/config.toml (target, profile, target dir).
    (cd "$ROOT" && cargo kbuild -q) || die_setup "kernel build failed"
    # The copy records which ELF it was made from (inode, size, mtime): cargo
    # can hand back an artifact it built earlier (a change reverted), older
    # than the copy, so "is the ELF newer" alone would boot a stale kernel.
    local from
    from=$(stat -c '%i %s %Y' "$kernel_elf") || die_setup "no kernel ELF at $kernel_elf after the build"
    if [ ! -f "$boot_elf" ] || [ "$(cat "$boot_elf.from" 2>/dev/null)" != "$from" ]; then
        local objcopy
        objcopy="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-objcopy"
        "$objcopy" --strip-debug "$kernel_elf" "$boot_elf.tmp" && mv "$boot_elf.tmp" "$boot_elf" \
            && printf '%s\n' "$from" > "$boot_elf.from" \
            || die_setup "stripping the kernel ELF failed ($objcopy, from the llvm-tools component)"
    fi
}
build_images() {
    [ -x "$image_tool" ] \
        || note "building the disk-image tool (bootloader 0.11.15 boot stages; first time takes ~3 min)"
    # bootloader's build script compiles its stages with -Zbuild-std:
    # allow it on stable for this build only (as Linux's Rust build does).
    (cd "$ROOT/runner" && RUSTC_BOOTSTRAP=1 cargo build -q --release --target-dir "$ROOT/target/runner") \
        || die_setup "disk-image tool build failed"
    "$image_tool" "$boot_elf" "$image_dir" || die_setup "disk image creation failed"
}
# build_tools: the host tools the boot runs: the serial tap, the timeline
# (memboot-plot), both in tools/; --profile's TCG plugin and its report
# tool (profile/, GPL: QEMU's API).
build_tools() {
    local bins=()
    wants tap && bins+=(--bin memboot-tap)
    wants plot && bins+=(--bin memboot-plot)
    if [ ${#bins[@]} -gt 0 ]; then
        (cd "$ROOT" && cargo build -q --release -p memboot-tools "${bins[@]}") \
            || die_setup "host tool build failed (${bins[*]})"
    fi
    if wants profiler; then
        (cd "$ROOT" && cargo build -q --release -p memboot-profile) || die_setup "memboot-profile build failed"
    fi
}

wants time && ensure_qemu
if wants kernel || wants tap; then
    # One build at a time: parallel test boots share these outputs.
    mkdir -p "$image_dir"
    exec 8>"$ROOT/target/.run-qemu-build.lock"
    flock 8
    export RUSTUP_TOOLCHAIN=$toolchain
    if wants kernel; then
        ensure_rust
        build_kernel
    fi
    wants images && build_images
    build_tools
    exec 8>&-
fi

# The boot itself, under run-qemu.sh's name (the log records the command).
exec -a "$0" "$run_tool" "$@"
