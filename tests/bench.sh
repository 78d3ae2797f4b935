#!/usr/bin/env bash
# tests/bench.sh — boot every memmap strategy and the touch floor side by
# side, in one run, and print where the time went. A benchmark, not a test:
# it asserts nothing but that each boot succeeded.
#
#   tests/bench.sh [--sizes "64G 1T"] [--smp N] [--modes "deferred regions perpfn touch"]
#                  [-- EXTRA_RUN_QEMU_ARGS...]
#
# Each boot runs with verify=off so that `total` measures boot work only.
# Host first-touch of guest memory varies run to run (at 1T by seconds):
# compare rows of one run, not across runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sizes="64G 1T" smp=2 modes="deferred regions perpfn touch"
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 64 ;;
    esac
done
"$ROOT/run-qemu.sh" --build-only >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for size in $sizes; do
    for mode in $modes; do
        echo "bench: booting -m $size --smp $smp memmap=$mode" >&2
        if ! "$ROOT/run-qemu.sh" --no-build -m "$size" --smp "$smp" "${extra[@]}" \
                -- "memmap=$mode" verify=off >"$out/$size-$mode.log" 2>&1; then
            tail -n 20 "$out/$size-$mode.log" >&2
            echo "bench: boot -m $size memmap=$mode failed" >&2
            exit 1
        fi
    done
done
python3 - "$out" "$sizes" "$modes" "$smp" <<'PY'
import json, sys, os
out, sizes, modes, smp = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
def summary(size, mode):
    for line in open(os.path.join(out, f"{size}-{mode}.log")):
        if line.startswith("memboot-summary: "):
            return json.loads(line[len("memboot-summary: "):])
    raise SystemExit(f"no summary for {size} {mode}")
ms = lambda ns: f"{ns / 1e6:10.1f}"
print(f"memboot bench: TCG, {smp} vCPUs, 1 node; times in ms (TSC {summary(sizes[0], modes[0])['tsc_mhz']} MHz)")
print(f"{'size':>5} {'mode':>9} {'pages':>11} {'eager':>11} {'memmap_boot':>11} {'deferred':>10} {'memmap':>10} {'total':>10} {'x touch':>8}")
for size in sizes:
    rows = {m: summary(size, m) for m in modes}
    floor = rows.get("touch")
    for m in modes:
        s = rows[m]
        memmap = s["memmap_boot_ns"] + s["buddy_eager_ns"] + s["deferred_ns"]
        ratio = ""
        if floor:
            f = floor["memmap_boot_ns"] + floor["buddy_eager_ns"] + floor["deferred_ns"]
            ratio = f"{memmap / f:8.2f}" if f else ""
        print(f"{size:>5} {m:>9} {s['present_pages']:>11} {s['eager_pages']:>11} {ms(s['memmap_boot_ns']):>11} "
              f"{ms(s['deferred_ns'])} {ms(memmap)} {ms(s['total_ns'])} {ratio:>8}")
print("memmap = boot-CPU memmap phase + hand-off of its free pages to the buddy + deferred phase;")
print("x touch = memmap / the same for memmap=touch (64-byte store per page, same CPUs, same split).")
PY
