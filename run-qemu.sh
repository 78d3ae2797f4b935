#!/usr/bin/env bash
# run-qemu.sh — build what is stale, boot memboot under QEMU, map the result
# to an exit code. See README.md ("Running", "Exit codes") for the details.
#
#   ./run-qemu.sh -m SIZE [--smp N] [--nodes N] [--accel tcg|kvm] [--bios|--uefi]
#                 [--timeout S] [--log FILE] [--print-cmd] [--dry-run]
#                 [--build-only|--no-build] [--svg FILE] [--default-devices]
#                 [--calibrate-tsc] [--host-memory prefault|cold]
#                 [--profile FILE] [--trace FILE] [-- KERNEL_OPTIONS...]
#   ./run-qemu.sh --linux KERNEL --initrd INITRD -m SIZE [same machine options]
#                 [--trace FILE] [-- EXTRA_LINUX_CMDLINE...]  (KERNEL: a
#                 bzImage, or a vmlinux with a PVH note, booted through its
#                 PVH entry)
# memboot boots through its PVH entry (QEMU's -kernel) unless --bios or
# --uefi boots its disk image through rust-osdev/bootloader instead.
# --profile FILE: count guest instructions with the memboot-profile TCG
# plugin (README "Instruction profile"); FILE gets the profile as JSON, the
# log's tail its phase figures. Slower: never a timing.
# --trace FILE: after the boot, its phases per CPU (--linux: its initcalls
# per PID and its memmap phases) as a Chrome trace-event file for Perfetto
# UI or chrome://tracing, written by memboot-plot trace (README "Trace").
#
# Exit codes: 0 kernel reported success; 1 kernel reported failure;
# 2 QEMU failed (could not start, or stopped without the kernel's exit code,
# e.g. a triple fault); 3 timeout; 4 build or setup failure; 64 usage error,
# or a guest whose host-memory need would not fit this host ("Large guests").
# --linux boots a stock Linux kernel on the same virtual machine (tests/bench.sh
# --linux); exit 0 when it powered the machine off, 1 when it panicked,
# 2 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXIT_OK=0 EXIT_KERNEL=1 EXIT_QEMU=2 EXIT_TIMEOUT=3 EXIT_SETUP=4 EXIT_USAGE=64
# QEMU's isa-debug-exit status is (value << 1) | 1; kernel/src/hw/exit.rs writes
# 0x10 for success and 0x11 for failure.
QEMU_KERNEL_OK=33 QEMU_KERNEL_FAIL=35
# Guests above this many MiB take the large-guest lock: their struct pages
# alone are 1/64 of guest RAM in host memory (16 GiB at 1 TiB).
LARGE_GUEST_MIB=$((64 * 1024))

usage() {
    # The header comment from its usage lines on, whatever its length.
    awk 'NR < 4 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
    exit "$EXIT_USAGE"
}
die_usage() { echo "run-qemu.sh: $*" >&2; exit "$EXIT_USAGE"; }
die_setup() { echo "run-qemu.sh: $*" >&2; exit "$EXIT_SETUP"; }
note() { echo "run-qemu.sh: $*" >&2; }

# The command as given, for the provenance lines of every boot's log.
invocation=$(printf '%q ' "$0" "$@"); invocation=${invocation% }
mem=1G smp=2 nodes=1 accel=tcg boot_path=pvh timeout_s=900 log="" print_cmd=0 dry_run=0 build_only=0 no_build=0
linux_kernel="" linux_initrd="" svg="" trace="" default_devices=0 calibrate_tsc=0 host_memory="" profile=""
kernel_opts=()
# once FLAG [VALUE]: a flag given twice is a usage error, not "the last one
# wins": which of the two values was meant is ambiguous (-m 1G -m 2G).
declare -A given=()
once() {
    if [ -n "${given[$1]+set}" ]; then
        [ -n "${2:-}${given[$1]}" ] && die_usage "$1 given twice ($1 ${given[$1]}, then $1 ${2:-}): give it once"
        die_usage "$1 given twice: give it once"
    fi
    given[$1]=${2:-}
}
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--mem) [ $# -ge 2 ] || die_usage "$1 needs a size"; once -m "$2"; mem=$2; shift 2 ;;
        --smp) [ $# -ge 2 ] || die_usage "--smp needs a count"; once "$1" "$2"; smp=$2; shift 2 ;;
        --nodes) [ $# -ge 2 ] || die_usage "--nodes needs a count"; once "$1" "$2"; nodes=$2; shift 2 ;;
        --accel) [ $# -ge 2 ] || die_usage "--accel needs tcg or kvm"; once "$1" "$2"; accel=$2; shift 2 ;;
        --bios|--uefi)
            once "$1"
            [ "$boot_path" = pvh ] || die_usage "--$boot_path and $1: give one (the PVH entry is the default)"
            boot_path=${1#--}; shift ;;
        --timeout) [ $# -ge 2 ] || die_usage "--timeout needs seconds"; once "$1" "$2"; timeout_s=$2; shift 2 ;;
        --log) [ $# -ge 2 ] || die_usage "--log needs a file"; once "$1" "$2"; log=$2; shift 2 ;;
        --print-cmd) once "$1"; print_cmd=1; shift ;;
        --dry-run) once "$1"; dry_run=1; print_cmd=1; shift ;;
        --build-only) once "$1"; build_only=1; shift ;;
        --linux) [ $# -ge 2 ] || die_usage "--linux needs a kernel image"; once "$1" "$2"; linux_kernel=$2; shift 2 ;;
        --initrd) [ $# -ge 2 ] || die_usage "--initrd needs an initramfs"; once "$1" "$2"; linux_initrd=$2; shift 2 ;;
        --svg) [ $# -ge 2 ] || die_usage "--svg needs a file"; once "$1" "$2"; svg=$2; shift 2 ;;
        --trace) [ $# -ge 2 ] || die_usage "--trace needs a file"; once "$1" "$2"; trace=$2; shift 2 ;;
        --no-build) once "$1"; no_build=1; shift ;;
        --default-devices) once "$1"; default_devices=1; shift ;;
        --calibrate-tsc) once "$1"; calibrate_tsc=1; shift ;;
        --host-memory) [ $# -ge 2 ] || die_usage "--host-memory needs prefault or cold"; once "$1" "$2"; host_memory=$2; shift 2 ;;
        --profile) [ $# -ge 2 ] || die_usage "--profile needs a file"; once "$1" "$2"; profile=$2; shift 2 ;;
        -h|--help) usage ;;
        --) shift; kernel_opts=("$@"); break ;;
        *) die_usage "unknown argument '$1' (see --help)" ;;
    esac
done

# Numbers are read as decimal, whatever their leading zeros (bash arithmetic
# would take 010 for octal 8 and fail on 08), and bounded by their digits
# before any arithmetic: bash's integers are 64-bit and wrap silently.
MAX_DIGITS=18 # every 18-digit number fits in bash's signed 64 bits
# decimal_digits VALUE: VALUE's digits without leading zeros (at least one
# digit) in `digits`; fails unless VALUE is all decimal digits.
decimal_digits() {
    [[ "$1" =~ ^0*([0-9]+)$ ]] || return 1
    digits=${BASH_REMATCH[1]}
}
# parse_count VAR FLAG MAX WHAT: the count in $VAR (a flag's value) checked to
# be 1..MAX and written back without leading zeros.
parse_count() {
    local var=$1 flag=$2 max=$3 what=$4 value=${!1} digits
    decimal_digits "$value" || die_usage "$flag '$value' is not a positive integer"
    (( ${#digits} <= MAX_DIGITS )) || die_usage "$flag $value: too large (at most $max $what)"
    (( 10#$digits <= max )) || die_usage "$flag $value: too large (at most $max $what)"
    (( 10#$digits >= 1 )) || die_usage "$flag $value: must be at least 1"
    printf -v "$var" '%d' "$((10#$digits))"
}
parse_count smp --smp 255 vCPUs
parse_count nodes --nodes 64 "nodes (memboot's limit)"
parse_count timeout_s --timeout 999999999999999999 seconds
case "$accel" in tcg|kvm) ;; *) die_usage "--accel '$accel': expected tcg or kvm" ;; esac
case "$host_memory" in
    ""|prefault|cold) ;;
    *) die_usage "--host-memory '$host_memory': expected prefault or cold (README \"Host memory\")" ;;
esac
if [ -n "$linux_kernel" ]; then
    [ -f "$linux_kernel" ] || die_usage "--linux $linux_kernel: no such file"
    [ -n "$linux_initrd" ] && [ -f "$linux_initrd" ] || die_usage "--linux needs --initrd FILE (an initramfs whose /init powers off)"
    [ "$boot_path" = pvh ] || die_usage "--linux boots through QEMU's -kernel; drop --$boot_path"
    [ -z "$svg" ] || die_usage "--svg draws memboot's boot timeline; it cannot read a Linux log"
elif [ -n "$linux_initrd" ]; then
    die_usage "--initrd is for --linux"
fi
[ -z "$profile" ] || [ "$accel" = tcg ] || die_usage "--profile counts instructions with a TCG plugin: drop --accel $accel"

# parse_size VAR VALUE UNIT_SHIFT: VALUE, a decimal number with an optional
# K/M/G/T suffix (B: bytes; no suffix: units of 1 << UNIT_SHIFT bytes), into
# VAR in bytes. Status 1: VALUE is not such a size; 2: it is above 2^62 bytes
# (checked on the digits, then against the suffix's bound, before multiplying).
# One reader for -m and for the kernel's alloc_test=.
MAX_SIZE_BYTES=$((1 << 62))
parse_size() {
    local var=$1 digits unit suffix
    [[ "$2" =~ ^([0-9]+)([KkMmGgTtBb]?)$ ]] || return 1
    suffix=${BASH_REMATCH[2]^^}
    decimal_digits "${BASH_REMATCH[1]}"
    case "$suffix" in
        "") unit=$3 ;; B) unit=0 ;; K) unit=10 ;; M) unit=20 ;; G) unit=30 ;; T) unit=40 ;;
    esac
    (( ${#digits} <= MAX_DIGITS )) || return 2
    (( 10#$digits <= MAX_SIZE_BYTES >> unit )) || return 2
    printf -v "$var" '%d' "$(( 10#$digits << unit ))"
}
# -m in QEMU's syntax: no suffix = MiB; a B after the suffix (1GB) is allowed.
mem_size=$mem
[[ "$mem_size" =~ ^(.*[KkMmGgTt])[Bb]$ ]] && mem_size=${BASH_REMATCH[1]}
parse_size mem_bytes "$mem_size" 20
case $? in
    1) die_usage "-m '$mem': expected a size like 512M, 64G or 1T (decimal)" ;;
    2) die_usage "-m $mem: too large (at most 59T)" ;;
esac
(( mem_bytes % (1 << 20) == 0 )) || die_usage "-m $mem: not a whole number of MiB"
mem_mib=$((mem_bytes >> 20))
(( mem_mib >= 128 )) || die_usage "-m $mem: memboot needs at least 128M"
# QEMU 7.2 builds its SMBIOS tables and then asserts in smbios_get_tables()
# from 60T on, whatever the entry point (checked: 59T starts, 60T aborts); see the README ("Large guests").
MAX_MEM_MIB=$((59 * 1024 * 1024))
(( mem_mib <= MAX_MEM_MIB )) || die_usage "-m $mem: at most 59T: QEMU 7.2 fails an assertion in smbios_get_tables() from 60T (its SMBIOS memory-device tables outgrow their fixed area)"
# split_nodes: node_mib[i], the RAM of NUMA node i, split the way QEMU split
# it by itself when no node was given a size (numa_default_auto_assign_ram()
# in hw/core/numa.c, gone since QEMU 5.2, where every node needs a memdev):
# every node but the last gets RAM / nodes rounded down to 8 MiB
# (numa_mem_align_shift 23: Linux wants node borders 8 MiB-aligned), the last
# node the rest. So any -m and --nodes QEMU once took boot, with one backend
# per node of exactly that size.
NODE_ALIGN_MIB=8
split_nodes() {
    local i part=$(( mem_mib / nodes / NODE_ALIGN_MIB * NODE_ALIGN_MIB ))
    node_mib=()
    if (( nodes > 1 && part == 0 )); then
        # QEMU 7.2 refuses a memory-backend-ram of size 0 ("property 'size' of
        # memory-backend-ram doesn't take value '0'").
        die_usage "-m $mem over $nodes nodes leaves nodes empty: QEMU's split gives every node but the last RAM / nodes rounded down to 8 MiB, 0 here, and QEMU refuses a memory backend of size 0. Give -m at least $(( nodes * NODE_ALIGN_MIB ))M for $nodes nodes, or at most $(( mem_mib / NODE_ALIGN_MIB )) nodes at -m $mem."
    fi
    for ((i = 0; i < nodes - 1; i++)); do node_mib+=("$part"); done
    node_mib+=("$(( mem_mib - part * (nodes - 1) ))")
}
split_nodes

# --- kernel options, read as the kernel reads them ---------------------------
# kernel/src/options.rs gets the words after -- joined by spaces into one
# command line (memboot_boot_args passes exactly that) and splits it on ASCII
# whitespace (Rust's split_ascii_whitespace: space, \t, \n, \f, \r), each
# token key=value; so one word "verify=off ondemand_drain=on" is two
# options there, and here. kopt[KEY] is KEY's value. A repeated key is a
# usage error here (the kernel would fail the boot with bad_option). A token
# without =, an unknown key or a bad value is left to the kernel, which
# rejects the command line (bad_option, exit 1) before it writes any struct
# page. --linux does not read them: they are Linux's, where repeats are legal.
declare -A kopt=()
read_kernel_options() {
    local line="${kernel_opts[*]}" token key
    local -a tokens=()
    line=${line//[$'\f\r']/ }
    IFS=$' \t\n' read -r -d '' -a tokens <<<"$line"
    for token in "${tokens[@]}"; do
        key=${token%%=*}
        # Not key=value, or a key no option has: the kernel's to reject.
        [[ "$token" == *=* && "$key" =~ ^[A-Za-z0-9_]+$ ]] || continue
        [ -z "${kopt[$key]+set}" ] || die_usage "kernel option '$key' given twice ($key=${kopt[$key]}, then $token): the kernel would refuse the command line (bad_option); give it once"
        kopt[$key]=${token#*=}
    done
}
[ -n "$linux_kernel" ] || read_kernel_options

# --- host memory: refuse a boot that cannot fit this host --------------------
# QEMU backs every guest byte the boot writes with host memory, on top of its
# own. So the need is QEMU's own + the struct pages the boot writes (64 bytes
# per 4 KiB page, RAM/64; 32 with struct_page=32, RAM/128; Linux's are 64)
# + for --linux what Linux writes besides them, in MiB, and a
# boot that needs more than MemAvailable is refused before QEMU starts
# rather than let the host run out of memory. Every constant is an upper
# bound of what this host measured: host peak RSS (host_rss_mib) of every
# boot in tests/bench-results/1-node/bench.json and 16-nodes/bench.json, and
# the 48T and 59T ondemand boots of the README ("Large guests"); the dry-run
# test checks the model against both bench.json files.
#
# QEMU's own, QEMU_BASE_MIB + QEMU_PER_TIB_MIB per TiB of guest RAM: QEMU,
# its TCG code buffer, the firmware, the kernel's page tables and heap.
# The base covers the small guests, RSS minus the RAM/64 they wrote: 64G
# deferred 1097 - 1024 = 73 MiB (1 node), 1099 - 1024 = 75 MiB (16 nodes).
QEMU_BASE_MIB=192
# Per TiB, covering (with the base) 1T deferred 16551 - 16384 = 167 MiB (1
# node), 16583 - 16384 = 199 MiB (16 nodes), and the large ondemand guests
# over 16 nodes less their ~354 MiB of struct pages and the base: 32T
# 3639 MiB (~97 MiB per TiB), 48T 5.3 GiB and 59T 6.4 GiB (~102 per TiB).
QEMU_PER_TIB_MIB=112
# Linux 6.1's own (--linux), LINUX_BASE_MIB + LINUX_PER_TIB_MIB per TiB:
# what it writes beyond struct pages, Linux's RSS minus memboot deferred's
# on the same machine. The base covers 64G: 1434 - 1097 = 337 MiB (1 node),
# 1556 - 1099 = 457 MiB (16 nodes).
LINUX_BASE_MIB=512
# Per TiB, covering (with the base) 1T: 17189 - 16551 = 638 MiB (1 node),
# 17311 - 16583 = 728 MiB (16 nodes). Measured up to 1T only.
LINUX_PER_TIB_MIB=384
# What plain memmap=ondemand writes eagerly, at most: the low zones below
# 4 GiB and one 128 MiB section per node (the rest of each node is the pool);
# and per CPU per node, the 4 MiB block window the allocation test may have
# claimed beyond what it allocated.
LOW_ZONES_MIB=4096 SECTION_MIB=128 WINDOW_MIB=4
# alloc_test='s default (kernel/src/options.rs ALLOC_TEST_DEFAULT_BYTES).
ALLOC_TEST_DEFAULT=1G

ceil_div() { echo $(( ($1 + $2 - 1) / $2 )); }
# per_tib MIB_PER_TIB: that many MiB per TiB of this guest's RAM, rounded up.
per_tib() { ceil_div $(( $1 * mem_mib )) $(( 1 << 20 )); }

# alloc_test_ram_mib: guest RAM the allocation test of plain memmap=ondemand
# initialises, in MiB: alloc_test=SIZE on every node (read like -m, but no
# suffix = bytes, as the kernel reads it), at most half of each node (the
# kernel caps it there), plus a block window per CPU per node. A value the
# kernel cannot read fails the boot before any struct page: nothing.
alloc_test_ram_mib() {
    local value=${kopt[alloc_test]-$ALLOC_TEST_DEFAULT} bytes=0 per_node_mib i total=0
    parse_size bytes "$value" 0
    case $? in
        0) per_node_mib=$(ceil_div "$bytes" $(( 1 << 20 ))) ;;
        1) echo 0; return ;;
        2) per_node_mib=$mem_mib ;; # above 2^62 bytes: the kernel's cap decides
    esac
    (( per_node_mib > 0 )) || { echo 0; return; }
    for i in "${node_mib[@]}"; do
        total=$(( total + (per_node_mib < i / 2 ? per_node_mib : i / 2) ))
    done
    echo $(( total + smp * nodes * WINDOW_MIB ))
}

memmap_mode=${kopt[memmap]-deferred}
drain=${kopt[ondemand_drain]-off}
# What the boot is, for messages.
what="memmap=$memmap_mode"
[ -n "${kopt[memmap]+set}" ] || what="memmap=deferred (the default)"
[ "$memmap_mode" = ondemand ] && [ "$drain" = on ] && what="memmap=ondemand ondemand_drain=on"
[ -n "$linux_kernel" ] && what="Linux"
# Guest RAM per MiB of struct pages: 4096 / bytes per struct page. A value
# the kernel does not take is its to reject (before any struct page); the
# estimate then stays at Linux's 64 bytes.
struct_page_bytes=64
[ -z "$linux_kernel" ] && [ "${kopt[struct_page]-64}" = 32 ] && struct_page_bytes=32
ram_per_struct=$(( 4096 / struct_page_bytes ))
all_struct_mib=$(ceil_div "$mem_mib" "$ram_per_struct")
qemu_own_mib=$(( QEMU_BASE_MIB + $(per_tib "$QEMU_PER_TIB_MIB") ))
linux_own_mib=0
[ -n "$linux_kernel" ] && linux_own_mib=$(( LINUX_BASE_MIB + $(per_tib "$LINUX_PER_TIB_MIB") ))
# Every faithful mode (deferred, regions, perpfn, touch), ondemand with
# ondemand_drain=on, and Linux write every struct page: RAM/64 (RAM/128 at
# struct_page=32).
# ondemand_struct_mib: the struct pages plain memmap=ondemand writes, in
# struct_mib: its eager part (eager_mib) and what its allocation test
# initialises (alloc_mib), each that RAM / ram_per_struct rounded up; at
# most all of them.
ondemand_struct_mib() {
    local eager_ram_mib=$(( mem_mib < LOW_ZONES_MIB ? mem_mib : LOW_ZONES_MIB )) i
    for i in "${node_mib[@]}"; do eager_ram_mib=$(( eager_ram_mib + (i < SECTION_MIB ? i : SECTION_MIB) )); done
    eager_mib=$(ceil_div "$eager_ram_mib" "$ram_per_struct")
    alloc_mib=$(ceil_div "$(alloc_test_ram_mib)" "$ram_per_struct")
    struct_mib=$(( eager_mib + alloc_mib < all_struct_mib ? eager_mib + alloc_mib : all_struct_mib ))
}
writes_all_struct_pages=1 eager_mib=0 alloc_mib=0 struct_mib=$all_struct_mib
if [ -z "$linux_kernel" ] && [ "$memmap_mode" = ondemand ] && [ "$drain" != on ]; then
    writes_all_struct_pages=0
    ondemand_struct_mib
fi
need_mib=$(( struct_mib + qemu_own_mib + linux_own_mib ))
need_parts="$struct_mib MiB of struct pages + $qemu_own_mib MiB for QEMU itself"
[ -n "$linux_kernel" ] && need_parts+=" + $linux_own_mib MiB for Linux's own"
# --host-memory prefault backs all guest RAM before the boot: what the
# kernel writes is inside it.
if [ "$host_memory" = prefault ]; then
    need_mib=$(( mem_mib + qemu_own_mib ))
    need_parts="$mem_mib MiB of guest RAM, all backed before the boot (--host-memory prefault), + $qemu_own_mib MiB for QEMU itself"
fi
# ondemand_need_mib: what plain memmap=ondemand with the default allocation
# test would need instead, for the refusal's suggestion.
ondemand_need_mib() {
    (unset 'kopt[alloc_test]'; ondemand_struct_mib; echo $(( struct_mib + qemu_own_mib )))
}
available_mib=${MEMBOOT_HOST_AVAILABLE_MIB:-$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)}
decimal_digits "$available_mib" && (( ${#digits} <= MAX_DIGITS )) \
    || die_setup "cannot read MemAvailable from /proc/meminfo, or MEMBOOT_HOST_AVAILABLE_MIB is not a number of MiB"
available_mib=$((10#$digits))
if (( need_mib > available_mib )); then
    have="this host has $available_mib MiB available ($([ -n "${MEMBOOT_HOST_AVAILABLE_MIB:-}" ] && echo MEMBOOT_HOST_AVAILABLE_MIB || echo MemAvailable))"
    if [ "$host_memory" = prefault ]; then
        die_usage "-m $mem with --host-memory prefault: the boot needs $need_mib MiB of host memory ($need_parts) and $have. Boot a smaller -m, or in another host-memory state (cold backs only what the boot writes)."
    elif [ -n "$linux_kernel" ]; then
        die_usage "-m $mem with Linux writes every struct page: the boot needs $need_mib MiB of host memory ($need_parts) and $have. Boot a smaller -m, or memboot with memmap=ondemand (struct pages initialised when first allocated; it would need $(ondemand_need_mib) MiB)."
    elif [ "$writes_all_struct_pages" = 1 ]; then
        die_usage "-m $mem with $what writes every struct page: the boot needs $need_mib MiB of host memory ($struct_mib MiB of struct pages, RAM/$ram_per_struct, + $qemu_own_mib MiB for QEMU itself) and $have. Boot it with memmap=ondemand (struct pages initialised when first allocated; it would need $(ondemand_need_mib) MiB), or a smaller -m."
    elif (( alloc_mib > 0 )); then
        die_usage "-m $mem with memmap=ondemand alloc_test=${kopt[alloc_test]-$ALLOC_TEST_DEFAULT} initialises the struct pages of what the allocation test allocates on $nodes node(s): the boot needs $need_mib MiB of host memory ($struct_mib MiB of struct pages: $eager_mib MiB eager, $alloc_mib MiB for alloc_test; + $qemu_own_mib MiB for QEMU itself) and $have. Give a smaller alloc_test= per node (alloc_test=0 skips the test), or a smaller -m."
    else
        die_usage "-m $mem with memmap=ondemand and no allocation test: the boot needs $need_mib MiB of host memory ($struct_mib MiB of struct pages + $qemu_own_mib MiB for QEMU itself) and $have. Boot a smaller -m."
    fi
fi

# --- setup: rustup pieces and QEMU, installed when missing -------------------
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
[ -n "$toolchain" ] || die_setup "cannot read the toolchain channel from rust-toolchain.toml"
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
apt_install() {
    note "installing $* (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2 \
        || die_setup "apt-get install $* failed; install it by hand"
}
ensure_qemu() {
    command -v qemu-system-x86_64 >/dev/null || apt_install qemu-system-x86
    # GNU time reports QEMU's peak RSS (wait4's ru_maxrss).
    [ -x /usr/bin/time ] || apt_install time
    if [ "$boot_path" = uefi ] && [ ! -f /usr/share/OVMF/OVMF_CODE_4M.fd ]; then apt_install ovmf; fi
}

# --- build: kernel ELF, its stripped copy, host tools, disk images ------------
# All incremental. The kernel ELF keeps its debug info for symbols and
# backtraces (tests/first-run-code.sh reads it); what boots is the stripped
# copy: QEMU's -kernel loads it (PVH), and the disk images carry it, since
# the BIOS stages read the image through int 13h, about 0.5 MB/s under TCG.
kernel_elf=$ROOT/target/kernel/x86_64-unknown-none/release/memboot-kernel
image_tool=$ROOT/target/runner/release/memboot-image
image_dir=$ROOT/target/images
boot_elf=$image_dir/memboot-kernel.elf
tools_dir=$ROOT/target/release
tap_tool=$tools_dir/memboot-tap
plot_tool=$tools_dir/memboot-plot
# --profile's TCG plugin and its report tool (profile/, GPL: QEMU's API).
profile_plugin=$tools_dir/libmemboot_profile.so
profile_tool=$tools_dir/memboot-profile
build_profiler() {
    (cd "$ROOT" && RUSTUP_TOOLCHAIN=$toolchain cargo build -q --release -p memboot-profile) \
        || die_setup "memboot-profile build failed"
}
# build_tools BIN...: the host tools, from the tests crate.
build_tools() {
    local bins=() b
    for b in "$@"; do bins+=(--bin "$b"); done
    (cd "$ROOT" && RUSTUP_TOOLCHAIN=$toolchain cargo build -q --release -p memboot-tests "${bins[@]}") \
        || die_setup "host tool build failed ($*)"
}
build() {
    mkdir -p "$image_dir"
    # One build at a time: parallel test boots share these outputs.
    exec 8>"$ROOT/target/.run-qemu-build.lock"
    flock 8
    export RUSTUP_TOOLCHAIN=$toolchain
    # `cargo kbuild` is the alias in .cargo/config.toml (target, profile, target dir).
    (cd "$ROOT" && cargo kbuild -q) || die_setup "kernel build failed"
    if [ ! "$boot_elf" -nt "$kernel_elf" ]; then
        local objcopy
        objcopy="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-objcopy"
        "$objcopy" --strip-debug "$kernel_elf" "$boot_elf.tmp" && mv "$boot_elf.tmp" "$boot_elf" \
            || die_setup "stripping the kernel ELF failed ($objcopy, from the llvm-tools component)"
    fi
    if [ "$boot_path" != pvh ] || [ "$build_only" = 1 ]; then
        [ -x "$image_tool" ] \
            || note "building the disk-image tool (bootloader 0.11.15 boot stages; first time takes ~3 min)"
        # bootloader's build script compiles its stages with -Zbuild-std:
        # allow it on stable for this build only (as Linux's Rust build does).
        (cd "$ROOT/runner" && RUSTC_BOOTSTRAP=1 cargo build -q --release --target-dir "$ROOT/target/runner") \
            || die_setup "disk-image tool build failed"
        "$image_tool" "$boot_elf" "$image_dir" || die_setup "disk image creation failed"
    fi
    # The timeline and trace tool: for --svg and --trace, and with
    # --build-only so that later --no-build boots (the tests, the bench)
    # can draw too.
    if [ -n "$svg$trace" ] || [ "$build_only" = 1 ]; then
        build_tools memboot-tap memboot-plot
    else
        build_tools memboot-tap
    fi
    [ -z "$profile" ] && [ "$build_only" = 0 ] || build_profiler
    exec 8>&-
}
# draw_timeline: the boot timeline of this boot's serial log (--svg FILE).
draw_timeline() {
    [ -x "$plot_tool" ] || { note "--svg: $plot_tool is missing (it is built unless --no-build)"; svg_failed=1; return; }
    if "$plot_tool" timeline "$log" "$svg"; then
        note "boot timeline written to $svg"
    else
        note "--svg: could not draw the timeline from this boot's log"
        svg_failed=1
    fi
}
# write_trace KIND: this boot's trace-event file (--trace FILE); KIND is
# memboot-plot's subcommand, trace or linux-trace.
write_trace() {
    [ -x "$plot_tool" ] || { note "--trace: $plot_tool is missing (it is built unless --no-build)"; trace_failed=1; return; }
    if "$plot_tool" "$1" "$log" "$trace"; then
        note "trace written to $trace"
    else
        note "--trace: could not write the trace from this boot's log"
        trace_failed=1
    fi
}

if [ "$dry_run" = 0 ]; then
    ensure_qemu
    if [ "$no_build" = 1 ]; then
        [ -x "$tap_tool" ] || die_setup "--no-build: no $tap_tool (run with --build-only first)"
        [ -z "$profile" ] || [ -x "$profile_tool" ] || die_setup "--no-build: no $profile_tool (run with --build-only first)"
        if [ -z "$linux_kernel" ]; then
            booted=$boot_elf
            [ "$boot_path" = pvh ] || booted=$image_dir/memboot-$boot_path.img
            [ -f "$booted" ] || die_setup "--no-build: no $booted (run with --build-only first)"
        fi
    elif [ -n "$linux_kernel" ]; then
        # A stock kernel: nothing of memboot's to build.
        if [ -n "$trace" ]; then build_tools memboot-tap memboot-plot; else build_tools memboot-tap; fi
        [ -z "$profile" ] || build_profiler
    else
        ensure_rust
        build
    fi
fi
[ "$build_only" = 1 ] && { note "built $boot_elf, $image_dir/memboot-bios.img and memboot-uefi.img"; exit "$EXIT_OK"; }

# --- QEMU command line ----------------------------------------------------------
# The guest's physical address width. QEMU puts RAM above 4 GiB, moved up to
# 1 TiB when it would cross the HyperTransport hole below 1 TiB, and the
# 64-bit PCI hole after it: 44 bits (the Linux 6.1 reference runs' value)
# covers up to ~15 TiB; larger guests get the smallest width that covers
# 1 TiB + RAM + 64 GiB.
phys_bits_for() {
    local need_mib=$(( $1 + (1 << 20) + (64 << 10) )) bits=44
    while (( (1 << (bits - 20)) < need_mib )); do bits=$((bits + 1)); done
    echo "$bits"
}
# qemu_machine_args SMP ACCEL NODE_MIB...: appends to the `qemu` array
# everything that defines the virtual machine (accelerator, CPU, RAM, NUMA,
# SMBIOS) but not what it boots, so every guest of the same shape gets the
# same machine. One NODE_MIB per NUMA node: its RAM in MiB (split_nodes).
qemu_machine_args() {
    local smp=$1 accel=$2 node_mib=("${@:3}") mem_mib=0 nodes=$(($# - 2)) machine=pc i first next cpus
    for i in "${node_mib[@]}"; do mem_mib=$((mem_mib + i)); done
    # --default-devices keeps QEMU's default devices (VGA, NIC, IDE,
    # floppy, …), as a QEMU started by hand has them: only for comparing
    # with such runs.
    if [ "$default_devices" = 1 ]; then
        qemu+=(-display none -no-reboot -smp "$smp")
    else
        qemu+=(-nodefaults -display none -no-reboot -smp "$smp")
    fi
    if [ "$accel" = tcg ]; then
        # split-wx=on: TCG's translation cache is a memfd mapped twice
        # (writable, executable) instead of anonymous memory that QEMU asks
        # to back with transparent huge pages. With huge pages, the first
        # translation into each fresh 2 MiB of the cache stops the vCPU for
        # a huge-page fault, ~3 ms on the nested hosts this was measured
        # on, and where that falls in the boot is chance (1G ondemand,
        # memory ready 16.1 -> 13.1 ms; deferred init at 64G and 1T within
        # the host's spread: tests/bench-results/split-wx/). The emulator's
        # own cost then no longer lands in the guest's timings.
        qemu+=(-accel tcg,thread=multi,tb-size=512,split-wx=on -cpu "max,phys-bits=$(phys_bits_for "$mem_mib")")
    else
        qemu+=(-accel kvm -cpu host)
    fi
    # The SMBIOS 2.1 entry point caps the tables at 64 KiB, which QEMU's
    # memory-device entries exceed from ~24T ("SMBIOS 2.1 table length ...
    # exceeds 65535"); the 3.0 (64-bit) entry point has no such cap.
    (( mem_mib > (8 << 20) )) && machine+=",smbios-entry-point-type=64"
    # Guest RAM from memory backends with reserve=off: hosts without overcommit
    # refuse a plain `-m 1T`. --host-memory prefault backs it all before the
    # guest starts instead (prealloc=on; QEMU refuses it with reserve=off).
    # One backend per NUMA node, of its NODE_MIB.
    local backing=reserve=off
    [ "$host_memory" = prefault ] && backing=prealloc=on
    if [ "$nodes" = 1 ]; then
        qemu+=(-object "memory-backend-ram,id=mem0,size=${mem_mib}M,$backing"
               -machine "$machine,memory-backend=mem0" -m "${mem_mib}M")
        return
    fi
    qemu+=(-machine "$machine" -m "${mem_mib}M")
    for ((i = 0; i < nodes; i++)); do
        # vCPUs spread evenly, contiguous per node, earlier nodes first; with
        # fewer vCPUs than nodes the last nodes are memory-only.
        first=$(( (i * smp + nodes - 1) / nodes ))
        next=$(( ((i + 1) * smp + nodes - 1) / nodes ))
        cpus=""
        (( next > first )) && cpus=",cpus=$first-$((next - 1))"
        qemu+=(-object "memory-backend-ram,id=mem$i,size=${node_mib[i]}M,$backing"
               -numa "node,nodeid=$i,memdev=mem$i$cpus")
    done
}
# Firmware for a -kernel boot (memboot's PVH entry, and --linux): qboot,
# QEMU's minimal firmware (qemu-system-data), which hands over to the
# kernel in milliseconds where SeaBIOS takes tens (README "What it runs").
# The disk images keep what they need: SeaBIOS (QEMU's default) for
# --bios, OVMF for --uefi.
DIRECT_BOOT_FIRMWARE=qboot.rom
# memboot_boot_args: the kernel or disk image, the serial port and exit
# device the kernel reports through, and the kernel options (fw_cfg).
memboot_boot_args() {
    qemu+=(-serial stdio -device isa-debug-exit,iobase=0xf4,iosize=0x04)
    # The disk images' bootloader sets a graphics mode, so they get a VGA
    # device; snapshot=on opens them read-only, so parallel boots share them.
    case "$boot_path" in
        pvh) qemu+=(-bios "$DIRECT_BOOT_FIRMWARE" -kernel "$boot_elf") ;;
        bios) qemu+=(-vga std -drive "format=raw,file=$image_dir/memboot-bios.img,snapshot=on") ;;
        uefi)
            cp /usr/share/OVMF/OVMF_VARS_4M.fd "$tmpdir/vars.fd"
            qemu+=(-vga std -drive if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
                   -drive "if=pflash,format=raw,file=$tmpdir/vars.fd"
                   -drive "format=raw,file=$image_dir/memboot-uefi.img,snapshot=on") ;;
    esac
    # Under TCG, the TSC rate Linux gets as tsc_early_khz=, unless the
    # options give one: memboot then calibrates nothing, as Linux does not.
    local opts=("${kernel_opts[@]}") khz
    if [ "$accel" = tcg ] && [ "$calibrate_tsc" = 0 ] && [ -z "${kopt[tsc_khz]+set}" ]; then
        khz=$(host_tsc_khz)
        [ -n "$khz" ] && opts+=("tsc_khz=$khz")
    fi
    if [ ${#opts[@]} -gt 0 ]; then
        local cmdline="${opts[*]}"
        qemu+=(-fw_cfg "name=opt/memboot/cmdline,string=${cmdline//,/,,}")
    fi
}
# The guest's TSC rate in kHz for Linux's tsc_early_khz=: under TCG the
# guest reads the host's TSC, whose rate the host kernel knows ("cpu MHz"
# of a constant-TSC CPU); without it Linux's early timestamps are zero
# until its own calibration.
host_tsc_khz() {
    awk -F: '/^cpu MHz/ { printf "%d\n", $2 * 1000; exit }' /proc/cpuinfo
}
# linux_boot_args: a stock Linux kernel and initramfs through QEMU's -kernel
# on the same serial port. The command line asks for what the bench parses:
# timestamps, every message, initcall timings; and panic=-1, so a panic
# reboots at once and -no-reboot ends the boot instead of the timeout.
linux_boot_args() {
    local cmdline="console=ttyS0 printk.time=1 ignore_loglevel initcall_debug panic=-1" khz
    if [ "$accel" = tcg ]; then
        khz=$(host_tsc_khz)
        [ -n "$khz" ] && cmdline+=" tsc_early_khz=$khz"
    fi
    [ ${#kernel_opts[@]} -gt 0 ] && cmdline+=" ${kernel_opts[*]}"
    qemu+=(-serial stdio -bios "$DIRECT_BOOT_FIRMWARE" -kernel "$linux_kernel" -initrd "$linux_initrd" -append "$cmdline")
}
tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/memboot-run.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT
qemu=(qemu-system-x86_64)
qemu_machine_args "$smp" "$accel" "${node_mib[@]}"
if [ -n "$linux_kernel" ]; then linux_boot_args; else memboot_boot_args; fi
# profile_args: the plugin on QEMU's command line, its entry addresses from
# the kernel's symbols: memboot's unstripped ELF (it runs where it is
# linked on every entry path; the boot logs its text address, checked
# after the boot), or the System.map beside the Linux image
# (tests/linux-peer.sh --symbols puts each peer's real one there).
profile_args() {
    profile_kind=memboot profile_map=$tmpdir/memboot.map
    if [ -n "$linux_kernel" ]; then
        profile_kind=linux profile_map=$(dirname "$linux_kernel")/System.map
        [ -f "$profile_map" ] || die_setup "--profile: no $profile_map beside the Linux image (tests/linux-peer.sh --symbols fetches it)"
    elif [ "$dry_run" = 0 ]; then
        nm -n -C "$kernel_elf" >"$profile_map" || die_setup "--profile: nm could not read $kernel_elf"
    else
        profile_map=$kernel_elf.map # --dry-run reads nothing
    fi
    local args
    if [ "$dry_run" = 1 ]; then
        args="out=$tmpdir/profile.raw,..."
    else
        args=$("$profile_tool" plugin-args --kernel "$profile_kind" --map "$profile_map" --out "$tmpdir/profile.raw") \
            || die_setup "--profile: no plugin arguments for this kernel (see above)"
    fi
    qemu+=(-plugin "$profile_plugin,$args")
}
[ -z "$profile" ] || profile_args

if [ "$print_cmd" = 1 ]; then
    printf '%q ' "${qemu[@]}" >&2
    echo >&2
fi
if [ "$dry_run" = 1 ]; then
    # Does this boot write every struct page, RAM/64 of host memory?
    if [ "$writes_all_struct_pages" = 1 ]; then
        echo "run-qemu.sh: struct pages: every one written ($struct_mib MiB of host memory)" >&2
    else
        echo "run-qemu.sh: struct pages: initialised when first allocated" >&2
    fi
    echo "run-qemu.sh: host memory: the boot needs $need_mib MiB ($need_parts), $available_mib MiB available" >&2
    exit "$EXIT_OK"
fi

# --- run ---------------------------------------------------------------------
if (( mem_mib > LARGE_GUEST_MIB )); then
    lock=${MEMBOOT_LOCK_FILE:-/tmp/memboot-large-guest.lock}
    exec 9>"$lock"
    if ! flock -n 9; then
        note "another guest above 64G is running; waiting for $lock"
        flock 9
    fi
fi
# The serial output is always logged: the tap writes it there, and --svg
# reads it back.
[ -z "$log" ] && log=$tmpdir/serial.log
: >"$log"

# --- host memory: the state the boot starts in (README "Host memory") -------
# This host may itself be a VM whose free page reporting hands memory a
# process freed back to its hypervisor, after which touching it again costs
# a fault in the hypervisor: how much of what a boot writes is still backed
# decides memmap times more than the code does. The state is chosen
# (--host-memory) and every log records it, with what the host did before.
LAST_EXIT_FILE=${MEMBOOT_LAST_EXIT_FILE:-/tmp/memboot-last-guest-exit}
# cold: the boot waits until the last guest exited at least COLD_IDLE_S
# ago and, where the host's kernel counts what it reported (REPORTED_KIB),
# until its reporting is quiet: less than COLD_QUIET_MIB in COLD_QUIET_S.
# Measured here (tests/bench-results/host-memory/): at 16G, 10 s of idle is
# the shortest whose deferred init is within 5 % of a 60 s idle's; after a
# 1T guest (16.5 GiB freed) reporting takes about 33 s, in passes of up to
# ~1.5 GiB every ~2.6 s, then a few tens of MiB per 5 s.
# MEMBOOT_COLD_IDLE_S overrides the idle (the quiet check stays).
COLD_IDLE_S=${MEMBOOT_COLD_IDLE_S:-10} COLD_QUIET_MIB=512 COLD_QUIET_S=5 COLD_MAX_WAIT_S=300
REPORTED_KIB=/sys/module/page_reporting/parameters/reported_kib
# free_page_reporting: whether this host reports free pages to its
# hypervisor, and how that was found.
free_page_reporting() {
    local f bits
    for f in /sys/bus/virtio/drivers/virtio_balloon/virtio*/features; do
        [ -r "$f" ] || continue
        bits=$(<"$f")
        # VIRTIO_BALLOON_F_REPORTING is feature bit 5 (virtio spec 5.5.3).
        if [ "${bits:5:1}" = 1 ]; then
            echo "on (virtio-balloon free page reporting: feature bit 5 of ${f%/features})"
            return
        fi
    done
    echo "off (no virtio-balloon device with free page reporting, feature bit 5)"
}
# idle_s: seconds since the last guest run-qemu.sh started exited ("" if unknown).
idle_s() {
    local last now
    last=$(cat "$LAST_EXIT_FILE" 2>/dev/null) || return 0
    [[ "$last" =~ ^[0-9]+$ ]] || return 0
    now=$(date +%s%N)
    echo $(( (now - last) / 1000000000 )).$(( (now - last) / 100000000 % 10 ))
}
host_memory_lines=()
case "$host_memory" in
    prefault) host_memory_lines+=("prefault: all guest RAM backed before the guest starts (memory-backend-ram prealloc=on)") ;;
    cold)
        waited_from=$SECONDS
        idle=$(idle_s)
        if [ -n "$idle" ] && (( ${idle%.*} < COLD_IDLE_S )); then
            note "host memory cold: waiting $(( COLD_IDLE_S - ${idle%.*} ))s (the last guest exited ${idle}s ago)"
            sleep $(( COLD_IDLE_S - ${idle%.*} ))
        fi
        quiet="its reporting progress is not exposed ($REPORTED_KIB)"
        if [ -r "$REPORTED_KIB" ]; then
            before=$(<"$REPORTED_KIB")
            while sleep "$COLD_QUIET_S"; do
                after=$(<"$REPORTED_KIB")
                quiet="free page reporting quiet: $(( (after - before) >> 10 )) MiB reported in the last ${COLD_QUIET_S} s"
                (( (after - before) >> 10 < COLD_QUIET_MIB )) && break
                if (( SECONDS - waited_from > COLD_MAX_WAIT_S )); then
                    quiet="free page reporting still busy after ${COLD_MAX_WAIT_S} s: $(( (after - before) >> 10 )) MiB in the last ${COLD_QUIET_S} s"
                    note "host memory cold: $quiet; booting anyway"
                    break
                fi
                before=$after
            done
        fi
        host_memory_lines+=("cold: waited $(( SECONDS - waited_from )) s: ${COLD_IDLE_S} s since the last guest exited, then $quiet") ;;
    "") host_memory_lines+=("as the host left it (no --host-memory)") ;;
esac
idle=$(idle_s)
host_memory_lines+=("idle ${idle:-unknown} s since the last guest exited ($LAST_EXIT_FILE)")
host_memory_lines+=("free page reporting $(free_page_reporting)")
# Provenance, so that a committed log says what produced it: the command,
# the host (CPU model, TSC rate, free memory at the start) and QEMU's
# command line. On stderr, and at the head of --log.
provenance() {
    echo "run-qemu.sh: command: $invocation"
    echo "run-qemu.sh: host: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), TSC $(host_tsc_khz) kHz, $(nproc) CPUs, MemAvailable $available_mib MiB at start"
    printf 'run-qemu.sh: host memory: %s\n' "${host_memory_lines[@]}"
    echo "run-qemu.sh: qemu: $(printf '%q ' "${qemu[@]}")"
}
provenance >&2
provenance >>"$log"
booted_as="PVH entry (-kernel)"
[ -n "$linux_kernel" ] && booted_as="Linux (-kernel)"
[ "$boot_path" = pvh ] || booted_as="${boot_path^^} disk image"
note "booting: -m ${mem_mib}M, $smp vCPUs, $nodes node(s)$( ((nodes > 1)) && printf ' of %s' "$(printf '%sM ' "${node_mib[@]}" | sed 's/ $//')"), $accel, $booted_as, timeout ${timeout_s}s"
# GNU time outside timeout: wait4() reports the largest RSS among timeout and
# its waited-for child, i.e. QEMU's own peak resident memory, and QEMU's
# minor page faults (its first touches of guest RAM among them). The tap
# around it passes the serial output on and times it from QEMU's start
# (entry latency, QEMU start to memory ready: the log's last lines).
run=(/usr/bin/time -f '%M %R' -o "$tmpdir/time" timeout --kill-after=10 "$timeout_s" "${qemu[@]}")
"$tap_tool" --log "$log" -- "${run[@]}" </dev/null
status=$?
date +%s%N >"$LAST_EXIT_FILE" 2>/dev/null || note "cannot write $LAST_EXIT_FILE (the next boot's idle time)"
# GNU time writes "Command exited with non-zero status N" before the figures.
read -r maxrss_kib minor_faults < <(tail -n 1 "$tmpdir/time" 2>/dev/null) || true
if [[ "${maxrss_kib:-}" =~ ^[0-9]+$ ]]; then
    note "host peak RSS $((maxrss_kib / 1024)) MiB"
    echo "run-qemu.sh: host peak RSS $((maxrss_kib / 1024)) MiB" >>"$log"
fi
if [[ "${minor_faults:-}" =~ ^[0-9]+$ ]]; then
    note "host minor page faults $minor_faults (QEMU's)"
    echo "run-qemu.sh: host minor page faults $minor_faults (QEMU's)" >>"$log"
fi
# The profile: written when QEMU exits (the plugin's at-exit callback),
# named by function here; its figures go to the log's tail.
if [ -n "$profile" ]; then
    if [ -f "$tmpdir/profile.raw" ] \
        && "$profile_tool" report --kernel "$profile_kind" --map "$profile_map" --raw "$tmpdir/profile.raw" \
            --log "$log" --out "$profile" >"$tmpdir/profile.lines"; then
        cat "$tmpdir/profile.lines" >&2
        cat "$tmpdir/profile.lines" >>"$log"
        note "profile written to $profile"
    else
        note "--profile: no profile from this boot (QEMU did not run the plugin's exit, or the report failed)"
        # A boot that failed says so by its own code; one that did not, by this.
        if [ "$status" = "$QEMU_KERNEL_OK" ] || { [ -n "$linux_kernel" ] && [ "$status" = 0 ]; }; then
            exit "$EXIT_SETUP"
        fi
    fi
fi
trace_failed=0
if [ -n "$linux_kernel" ]; then
    [ -n "$trace" ] && write_trace linux-trace
    case "$status" in
        0) if grep -q "Kernel panic - not syncing" "$log"; then
               note "Linux panicked (see its 'Kernel panic' line above)"; exit "$EXIT_KERNEL"
           fi
           note "Linux powered the machine off"
           [ "$trace_failed" = 0 ] || exit "$EXIT_SETUP"
           exit "$EXIT_OK" ;;
        124|137) note "timeout after ${timeout_s}s: guest killed"; exit "$EXIT_TIMEOUT" ;;
        *) note "QEMU exited with status $status: Linux did not power off"; exit "$EXIT_QEMU" ;;
    esac
fi
svg_failed=0
[ -n "$svg" ] && draw_timeline
[ -n "$trace" ] && write_trace trace
case "$status" in
    "$QEMU_KERNEL_OK") note "kernel reported success"
       [ "$svg_failed$trace_failed" = 00 ] || exit "$EXIT_SETUP"
       exit "$EXIT_OK" ;;
    "$QEMU_KERNEL_FAIL") note "kernel reported failure (see its log above)"; exit "$EXIT_KERNEL" ;;
    124|137) note "timeout after ${timeout_s}s: guest killed"; exit "$EXIT_TIMEOUT" ;;
    *) note "QEMU exited with status $status without the kernel's exit code (QEMU error or triple fault)"
       exit "$EXIT_QEMU" ;;
esac
