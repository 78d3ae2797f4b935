#!/usr/bin/env bash
# tests/cold-idle.sh — how long must the host idle before a boot pays for
# every page it first touches? (README "Host memory": the cold state.)
#
#   tests/cold-idle.sh [--size 16G] [--idles "0 1 2 4 8 15 30 60"] [--rounds 2]
#                      [--out DIR] [-- EXTRA_RUN_QEMU_ARGS...]
#
# For each idle time, in rounds: one boot that writes as much host memory as
# the measured one (the same boot), then the idle, then the measured boot;
# memmap=deferred verify=off alloc_test=0. Prints, per idle, the measured
# boots' deferred init (the phase that writes most struct pages) and QEMU's
# minor page faults; DIR keeps the logs. A benchmark: asserts nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
size=16G idles="0 1 2 4 8 15 30 60" rounds=2 out="" extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --size) size=$2; shift 2 ;;
        --idles) idles=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "cold-idle.sh: unknown argument $1" >&2; exit 64 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
"$ROOT/run-qemu.sh" --build-only >&2
opts=(memmap=deferred verify=off alloc_test=0)
boot() { # boot LOG
    "$ROOT/run-qemu.sh" --no-build -m "$size" --log "$1" "${extra[@]}" -- "${opts[@]}" >/dev/null 2>&1 \
        || { echo "cold-idle.sh: boot failed, see $1" >&2; exit 1; }
}
summary_key() { # summary_key LOG KEY
    grep -o "\"$2\":[0-9]*" "$1" | tail -n 1 | cut -d: -f2
}
printf '%s\n' "# cold-idle: -m $size ${opts[*]}, $rounds rounds; host $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    | tee "$out/table.md"
printf '| idle s | deferred init ms (each round) | QEMU minor faults (each round) |\n|---|---|---|\n' \
    | tee -a "$out/table.md"
for idle in $idles; do
    ms=() faults=()
    for ((r = 1; r <= rounds; r++)); do
        boot "$out/before-$idle-$r.log"
        sleep "$idle"
        boot "$out/idle-$idle-$r.log"
        ms+=("$(awk -v ns="$(summary_key "$out/idle-$idle-$r.log" deferred_ns)" 'BEGIN { printf "%.1f", ns / 1e6 }')")
        faults+=("$(sed -n 's/^run-qemu.sh: host minor page faults \([0-9]*\).*/\1/p' "$out/idle-$idle-$r.log")")
    done
    printf '| %s | %s | %s |\n' "$idle" "${ms[*]}" "${faults[*]}" | tee -a "$out/table.md"
done
