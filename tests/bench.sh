#!/usr/bin/env bash
# tests/bench.sh — boot memboot's memmap modes (and, with --linux, stock
# Linux kernels) on the same virtual machine, in one run, in a fair order, and
# print where the time went. A benchmark, not a test: it asserts nothing but
# that each boot succeeded.
#
#   tests/bench.sh --host-memory prefault|cold [--sizes "64G 1T"] [--smp N]
#                  [--nodes N] [--modes "deferred regions perpfn touch ondemand ..."]
#                  [--linux] [--rounds N] [--json FILE] [--svg DIR] [--keep DIR]
#                  [--profile] [--counted N] [--baseline FILE [--baseline-margin PCT]]
#                  [--qemu PATH] [-- EXTRA_RUN_QEMU_ARGS...]
#
# --host-memory: the host-memory state every boot starts in (run-qemu.sh
# --host-memory; README "Host memory"). Whether the host memory a boot
# writes is still backed decides memmap times more than the code does on a
# host that reports free pages to its hypervisor, so a run names one state,
# applied the same way to every boot, memboot's and Linux's alike.
# Every size runs N rounds (default 2) in ABBA order: the entries in order,
# then reversed, and so on. The table shows every round, the means, and the
# ratios of means to each Linux peer and to memmap=touch; compare rows of
# one run only.
#
# A mode may carry kernel options: ondemand+ondemand_drain=on boots
# `memmap=ondemand ondemand_drain=on`. Linux's huge-page parameters mean
# the same to both kernels: deferred+hugepagesz=1G+hugepages=13 and
# linux-6.12+hugepagesz=1G+hugepages=13 reserve 13 pages of 1 GiB each (add
# +hugetlb_free_vmemmap=on for HVO); a Linux entry with only such words is
# a peer of its own in the ratio columns (memboot-bench, bench/entries.rs). Any entry (Linux's too) may end in
# `@` words that say how it runs, not what boots: `@qemu-SERIES` boots it
# with the QEMU tests/qemu-peer.sh unpacks (`qemu-10.0`) instead of the
# run's, `@profile` under the memboot-profile plugin, as --profile does for
# every entry, `@smp-N` and `@nodes-N` give it N vCPUs or N nodes instead
# of --smp's and --nodes': `deferred deferred@qemu-10.0 deferred@qemu-10.0@profile`
# compares two QEMUs and the profile's cost in one ABBA run,
# `regions@smp-2 regions@smp-16` two machines.
# --qemu PATH: every boot with that QEMU (run-qemu.sh --qemu).
# Entries whose struct pages cannot fit this host at a size are not booted
# (run-qemu.sh refuses them; the table says why). memboot boots run with
# verify=off so the times are boot work only.
#
# --linux: stock Debian kernels (Debian 12's 6.1, Debian 13's 6.12, and
# trixie-backports' when newer) and busybox-static, fetched with apt-get
# download into target/linux-peer (tests/linux-peer.sh), booted with
# run-qemu.sh --linux: the same QEMU machine arguments as memboot's; adds one
# entry per kernel, named by its series: `linux-6.1 linux-6.12 ...`. The
# ratio columns divide by each of them. --modes may also name Linux entries
# (see boot_args below), to compare ways of booting one:
# --modes "linux-6.12-bzimage linux-6.12-bzimage+nokaslr linux-6.12".
# --profile: every boot under the memboot-profile TCG plugin (run-qemu.sh
# --profile; Linux peers with their real System.map, tests/linux-peer.sh
# --symbols), and the tables of guest instructions, stores and bytes per
# struct page with each phase's top functions (README "Instruction
# profile"). Its times are the plugin's, not the kernels': read the profile
# tables of such a run, not its time table.
# --counted N (default 2; 0: none): after the timed rounds, every entry not
# already profiled boots N more times under the plugin, SIZE-ENTRY-counted-K
# (.log, .profile.json), and the report adds the counted verdict: each
# memmap phase's instructions, stores and bytes per struct page, each
# boot's beside the other, × each Linux peer, and deferred init by node with
# its critical path (README "The counted verdict"). Counts, unlike times,
# are the same on any host; the counted boots' times are not reported.
# --baseline FILE [--baseline-margin PCT]: each counted boot of a memboot
# entry is checked against the profile FILE (run-qemu.sh --baseline, README
# "A regression check on counts"); the bench still finishes its report, then
# exits 5 naming each boot and phase that counted more per struct page than
# FILE by more than PCT (default 1).
# --json FILE: every boot's figures (memboot-bench's schema, for history).
# Every boot's log LOG gets its trace-event file beside it, LOG without
# .log plus .trace.json (run-qemu.sh --trace).
# --svg DIR: DIR/bench.md (the table), DIR/bench.json, DIR/scaling.svg.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# --seeds: issue 21's seeds table instead (tests/seeds.sh --help).
if [ "${1:-}" = --seeds ]; then shift; exec "$ROOT/tests/seeds.sh" "$@"; fi
bench_args=("$@")
sizes="64G 1T" smp=2 nodes=1 modes="deferred regions perpfn touch ondemand" rounds=2
linux=0 json="" svg_dir="" keep="" host_memory="" profile=0 counted=2
baseline=() exceeded=()
extra=() extra_qemu=()
# The header comment above, whatever its length.
usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --linux) linux=1; shift ;;
        --rounds) rounds=$2; shift 2 ;;
        --json) json=$2; shift 2 ;;
        --svg) svg_dir=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        --host-memory) host_memory=$2; shift 2 ;;
        --profile) profile=1; shift ;;
        --counted) counted=$2; shift 2 ;;
        --baseline) baseline+=(--baseline "$2"); shift 2 ;;
        --baseline-margin) baseline+=(--baseline-margin "$2"); shift 2 ;;
        --qemu) extra_qemu=(--qemu "$2"); shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --rounds must be a positive integer" >&2; exit 64; }
[[ "$counted" =~ ^[0-9]+$ ]] || { echo "bench.sh: --counted must be a number of boots (0: none)" >&2; exit 64; }
if [ ${#baseline[@]} -gt 0 ] && { [ "$counted" = 0 ] || [[ " ${baseline[*]} " != *" --baseline "* ]]; }; then
    echo "bench.sh: --baseline FILE checks the counted boots: give it with --counted N > 0" >&2; exit 64
fi
case "$host_memory" in
    prefault|cold) ;;
    "") echo "bench.sh: --host-memory prefault|cold is required: the state every boot starts in (README \"Host memory\")" >&2; exit 64 ;;
    *) echo "bench.sh: --host-memory '$host_memory': expected prefault or cold" >&2; exit 64 ;;
esac
say() { echo "bench: $*" >&2; }

"$ROOT/run-qemu.sh" --build-only >&2
(cd "$ROOT" && cargo build -q --release -p memboot-tools --bin memboot-bench --bin memboot-plot) >&2
tools=$ROOT/target/release
entries=$modes
# The Linux peers, by series (6.1, 6.12, …), as tests/linux-peer.sh prints
# them: `vmlinux-SERIES PATH`, `kernel-SERIES PATH`, …, `initrd PATH`.
peer="" peer_series=()
peer_file() { awk -v k="$1" '$1 == k { print $2 }' <<<"$peer"; }
if [ "$linux" = 1 ] || [[ " $entries" == *" linux"* ]]; then
    peer_args=()
    if [ "$profile" = 1 ] || [ "$counted" -gt 0 ] || [[ "$entries@" == *@profile[@\ ]* ]]; then peer_args=(--symbols); fi
    peer=$("$ROOT/tests/linux-peer.sh" "${peer_args[@]}")
    mapfile -t peer_series < <(awk '$1 ~ /^vmlinux-/ { print substr($1, 9) }' <<<"$peer")
    [ ${#peer_series[@]} -gt 0 ] || { say "tests/linux-peer.sh printed no vmlinux-SERIES line"; exit 1; }
    initrd=$(peer_file initrd)
    if [ "$linux" = 1 ]; then
        for s in "${peer_series[@]}"; do entries="$entries linux-$s"; done
    fi
fi
if [ -n "$keep" ]; then out=$keep; mkdir -p "$out"; else out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
# The QEMUs tests/qemu-peer.sh unpacks (`qemu-SERIES PATH`), for entries
# that name one.
qemu_peer=""
if [[ " $entries" == *@qemu-* ]]; then qemu_peer=$("$ROOT/tests/qemu-peer.sh"); fi
extra=("${extra_qemu[@]}" "${extra[@]}")

# run_args ENTRY: the run-qemu.sh arguments (one a line) of ENTRY's `@`
# words but @profile, which boot() reads (the profile file is its own),
# and the machine's --smp and --nodes (the run's unless a word says).
run_args() {
    local word path cpus=$smp nodes_of=$nodes
    for word in $(tr '@' ' ' <<<"${1#*@}"); do
        [[ "$1" == *@* ]] || break
        case "$word" in
            profile) ;;
            smp-[1-9]*) cpus=${word#smp-} ;;
            nodes-[1-9]*) nodes_of=${word#nodes-} ;;
            qemu-*)
                path=$(awk -v k="$word" '$1 == k { print $2 }' <<<"$qemu_peer")
                [ -n "$path" ] || { say "entry '$1': tests/qemu-peer.sh has no $word (it has: $(awk '{ printf "%s ", $1 }' <<<"$qemu_peer"))"; exit 64; }
                printf '%s\n' --qemu "$path" ;;
            *) say "entry '$1': unknown word @$word (@qemu-SERIES, @smp-N, @nodes-N, @profile)"; exit 64 ;;
        esac
    done
    printf '%s\n' --smp "$cpus" --nodes "$nodes_of"
}
# profiled ENTRY: does it boot under the plugin (--profile, or @profile)?
profiled() { [ "$profile" = 1 ] || [[ "$1@" == *@profile@* ]]; }

# boot_args ENTRY: run-qemu.sh arguments after the machine ones. A memboot
# entry is MODE[+OPTION=VALUE...], e.g. ondemand+ondemand_drain=on. A Linux
# entry is linux-SERIES[-WAY][+WORD...]: SERIES one of the peers (6.1, 6.12,
# … as fetched), the words added to Linux's command line, WAY how it boots:
#   (none)         the peer as the bench compares with it: the uncompressed
#                  kernel through its PVH entry (no decompressor, no KASLR),
#                  Linux's fastest stock configuration here (docs/results.md,
#                  "How to boot Linux fairly"); the ratio columns divide by these entries
#   -pvh           the same
#   -bzimage       the distribution's bzImage through QEMU's -kernel (KASLR on),
#                  e.g. linux-6.12-bzimage+nokaslr
#   -pvh-qemu-defaults  -pvh with QEMU's default devices
#                  (run-qemu.sh --default-devices), as a hand-run QEMU has them
# Without -SERIES (linux, linux-pvh, linux-bzimage+nokaslr, …): the names
# of the runs committed when Debian 12's kernel was the only peer, Linux 6.1.
LEGACY_SERIES=6.1
boot_args() {
    local entry=${1%%@*}
    local kernel=${entry%%+*} opts=()
    [[ "$entry" == *+* ]] && IFS=+ read -ra opts <<<"${entry#*+}"
    if [[ "$kernel" != linux && "$kernel" != linux-* ]]; then
        printf '%s\n' -- "memmap=$kernel" "${opts[@]}" verify=off
        return
    fi
    local way=${kernel#linux} series=$LEGACY_SERIES vmlinux bzimage
    if [[ "$way" =~ ^-([0-9]+\.[0-9]+)(.*)$ ]]; then series=${BASH_REMATCH[1]} way=${BASH_REMATCH[2]}; fi
    vmlinux=$(peer_file "vmlinux-$series") bzimage=$(peer_file "kernel-$series")
    if [ -z "$vmlinux" ]; then
        say "entry '$1': no Linux $series among the peers (${peer_series[*]}: tests/linux-peer.sh)"
        exit 64
    fi
    case "$way" in
        "" | -pvh) printf '%s\n' --linux "$vmlinux" ;;
        -pvh-qemu-defaults) printf '%s\n' --default-devices --linux "$vmlinux" ;;
        -bzimage) printf '%s\n' --linux "$bzimage" ;;
        *) say "unknown Linux entry '$1' (linux-SERIES[-pvh|-bzimage|-pvh-qemu-defaults][+WORD...])"; exit 64 ;;
    esac
    printf '%s\n' --initrd "$initrd" -- "${opts[@]}"
}
# Every entry's arguments once here, where a bad entry stops the bench
# (boot_args runs in a subshell below, whose exit would not).
for e in $entries; do boot_args "$e" >/dev/null; run_args "$e" >/dev/null; done

# boot SIZE ENTRY LOG [counted]: one boot (counted: under the profile,
# and a memboot entry against --baseline); fails the bench if the boot
# fails, notes it in `exceeded` if it only counted more than the baseline.
boot() {
    local args profiled=() how rc=0
    mapfile -t args < <(boot_args "$2")
    mapfile -t how < <(run_args "$2")
    if profiled "$2" || [ "${4:-}" = counted ]; then profiled=(--profile "${3%.log}.profile.json"); fi
    if [ "${4:-}" = counted ] && [[ "$2" != linux* ]]; then profiled+=("${baseline[@]}"); fi
    "$ROOT/run-qemu.sh" --no-build -m "$1" --host-memory "$host_memory" \
        --trace "${3%.log}.trace.json" "${profiled[@]}" "${how[@]}" "${extra[@]}" "${args[@]}" >"$3" 2>&1 || rc=$?
    if [ "$rc" = 5 ] && [ ${#baseline[@]} -gt 0 ] && [ "${4:-}" = counted ]; then
        while read -r line; do exceeded+=("-m $1 $2 (${3##*/}): ${line#memboot-profile: baseline: }"); done \
            < <(grep '^memboot-profile: baseline: .*EXCEEDS' "$3")
        return 0
    fi
    if [ "$rc" != 0 ]; then
        tail -n 20 "$3" >&2
        say "boot -m $1 $2 failed (log: $3)"
        exit 1
    fi
}
# fits SIZE ENTRY: can this host hold the boot? (run-qemu.sh refuses with 64)
fits() {
    local args how
    mapfile -t args < <(boot_args "$2")
    mapfile -t how < <(run_args "$2")
    if "$ROOT/run-qemu.sh" --dry-run -m "$1" --host-memory "$host_memory" \
            "${how[@]}" "${extra[@]}" "${args[@]}" >/dev/null 2>"$out/fit.err"; then
        return 0
    fi
    sed 's/^run-qemu.sh: //' "$out/fit.err" >"$out/$1-$2.skip"
    return 1
}

rm -f "$out"/*.skip
order_log=()
for size in $sizes; do
    booted=()
    for e in $entries; do fits "$size" "$e" && booted+=("$e") || say "-m $size $e: $(cat "$out/$size-$e.skip")"; done
    [ ${#booted[@]} -gt 0 ] || continue # every entry refused at this size
    for ((round = 1; round <= rounds; round++)); do
        order=("${booted[@]}")
        (( round % 2 == 0 )) && mapfile -t order < <(printf '%s\n' "${booted[@]}" | tac)
        for e in "${order[@]}"; do
            say "round $round: -m $size $(run_args "$e" | grep -A1 -E '^--(smp|nodes)$' | paste -sd ' ') --host-memory $host_memory $e"
            boot "$size" "$e" "$out/$size-$e-$round.log"
            order_log+=("$size/$e/$round")
        done
    done
    # The counted boots, after the timed ones: the plugin's times are not
    # the kernels', and an entry profiled already has its counts.
    for e in "${booted[@]}"; do
        profiled "$e" && continue
        for ((k = 1; k <= counted; k++)); do
            say "counted $k: -m $size $e"
            boot "$size" "$e" "$out/$size-$e-counted-$k.log" counted
        done
    done
done

tsc=$(grep -ho 'tsc: Detected [0-9.]* MHz' "$out"/*-1.log 2>/dev/null | head -n 1 | awk '{ print $3 }')
# The accelerator actually used (run-qemu.sh's default unless the extra
# arguments say otherwise) and the host the run came from: results move
# with the host's CPU (docs/results.md).
accel=tcg
for ((i = 0; i < ${#extra[@]}; i++)); do [ "${extra[i]}" = --accel ] && accel=${extra[i + 1]:-tcg}; done
host_cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
host_mhz=$(awk -F': ' '/^cpu MHz/ { print $2; exit }' /proc/cpuinfo)
profile_note=""
if [ "$profile" = 1 ]; then
    profile_note=", every boot under the memboot-profile plugin (times are the plugin's)"
elif [[ "$entries@" == *@profile[@\ ]* ]]; then
    profile_note=", entries @profile under the memboot-profile plugin (their times are the plugin's)"
fi
[ "$profile" = 0 ] && [ "$counted" -gt 0 ] && profile_note="$profile_note, each entry counted $counted times under the memboot-profile plugin after its rounds"
# Every QEMU the boots ran, as their logs name it.
qemus=$(grep -ho '^run-qemu.sh: qemu version: QEMU emulator version [0-9.]*' "$out"/*.log 2>/dev/null \
    | awk '{ print $NF }' | sort -uV | paste -sd / -)
machine="$smp vCPUs, $nodes node(s)"
[[ "$entries" == *@smp-* || "$entries" == *@nodes-* ]] && machine="$machine unless the entry says (@smp-N, @nodes-N)"
heading="bench: ${accel^^}${profile_note}, QEMU ${qemus:-?}, host $host_cpu at ${host_mhz:-?} MHz ($(nproc) CPUs), host memory $host_memory, $machine, $rounds rounds in ABBA order; times in ms; guest TSC ${tsc:-?} MHz; order: ${order_log[*]}"
[ -n "$svg_dir" ] && { mkdir -p "$svg_dir"; [ -n "$json" ] || json=$svg_dir/bench.json; }
report=("$tools/memboot-bench" report "$out" --sizes "$sizes" --entries "$entries" --rounds "$rounds" --heading "$heading")
[ -n "$json" ] && report+=(--json "$json")
"${report[@]}" | tee "$out/bench.md"
cat <<'NOTE'

memmap = struct-page work before memory is ready: memboot's boot-CPU phase + hand-off to the buddy +
deferred init; Linux's free_area_init() block + its slowest node's deferred init. boot-CPU memmap = the first part.
memory ready (allocatable) = kernel entry until memory init stops blocking the boot and every present,
non-reserved page can be had from the allocator, initialised or claimable by growth (memboot: allocatable_ns;
Linux: page_alloc_init_late() returning, its `devtmpfs: initialized` line). struct pages written: by then, and by
the end of the boot, with their share of the present pages. drain = ondemand_drain=on's drain after ready.
growth step = one block window of struct pages initialised by an allocation (ondemand's allocation test).
memmap × Linux S memmap, ready × Linux S ready = ratios of means to the entry linux-S, each Linux peer of the run
through its PVH entry (runs named before there were several peers: × Linux = × linux, Linux 6.1);
memmap × touch memmap = ratio of means to memmap=touch (same machine, same run).
NOTE
if [ -n "$svg_dir" ]; then
    cp "$out/bench.md" "$svg_dir/bench.md"
    # Every boot's serial log (with run-qemu.sh's command, host, host-memory
    # and QEMU lines) and the refusals: what the tables are made of.
    rm -rf "$svg_dir/logs"; mkdir -p "$svg_dir/logs"
    cp "$out"/*.log "$svg_dir/logs/"
    cp "$out"/*.skip "$svg_dir/logs/" 2>/dev/null || true
    cp "$out"/*.profile.json "$svg_dir/logs/" 2>/dev/null || true
    cp "$out"/*.trace.json "$svg_dir/logs/"
    printf '%q ' "$0" "${bench_args[@]}" >"$svg_dir/logs/command"; echo >>"$svg_dir/logs/command"
    # What memboot-bench report was given, one `key value` a line, so the
    # table can be rebuilt from the logs alone (tests/tests/readme_figures.rs).
    printf 'sizes %s\nentries %s\nrounds %s\nheading %s\n' "$sizes" "$entries" "$rounds" "$heading" \
        >"$svg_dir/logs/report"
    "$tools/memboot-plot" scaling "$json" "$svg_dir/scaling.svg"
    say "wrote $svg_dir/bench.md, $json and $svg_dir/scaling.svg"
fi
if [ ${#exceeded[@]} -gt 0 ]; then
    for e in "${exceeded[@]}"; do say "baseline exceeded: $e"; done
    exit 5
fi
