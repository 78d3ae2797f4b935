#!/usr/bin/env bash
# tests/bench.sh — boot every memmap strategy and the touch floor side by
# side, in one run, and print where the time went. A benchmark, not a test:
# it asserts nothing but that each boot succeeded.
#
#   tests/bench.sh [--sizes "64G 1T"] [--smp N] [--modes "deferred regions perpfn touch"]
#                  [--rounds N] [-- EXTRA_RUN_QEMU_ARGS...]
#
# Each boot runs with verify=off so that `total` measures boot work only.
# Host first-touch of guest memory dominates at 1T and depends on what the
# host did just before (measured: touch-then-deferred and deferred-then-touch
# swap which one looks 1.5x slower). So every size runs N rounds (default 2)
# with the mode order reversed in every other round, and the table shows the
# mean and the best of the rounds; compare rows of one run, not across runs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sizes="64G 1T" smp=2 modes="deferred regions perpfn touch" rounds=2
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument $1" >&2; exit 64 ;;
    esac
done
"$ROOT/run-qemu.sh" --build-only >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: --rounds must be a positive integer" >&2; exit 64; }
for size in $sizes; do
    for ((round = 1; round <= rounds; round++)); do
        order=$modes
        (( round % 2 == 0 )) && order=$(tr ' ' '\n' <<<"$modes" | tac | tr '\n' ' ')
        for mode in $order; do
            echo "bench: round $round: booting -m $size --smp $smp memmap=$mode" >&2
            log=$out/$size-$mode-$round.log
            if ! "$ROOT/run-qemu.sh" --no-build -m "$size" --smp "$smp" "${extra[@]}" \
                    -- "memmap=$mode" verify=off >"$log" 2>&1; then
                tail -n 20 "$log" >&2
                echo "bench: boot -m $size memmap=$mode failed" >&2
                exit 1
            fi
        done
    done
done
python3 - "$out" "$sizes" "$modes" "$smp" "$rounds" <<'PY'
import json, sys, os
out, sizes, modes, smp, rounds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], int(sys.argv[5])
def summary(size, mode, r):
    for line in open(os.path.join(out, f"{size}-{mode}-{r}.log")):
        if line.startswith("memboot-summary: "):
            return json.loads(line[len("memboot-summary: "):])
    raise SystemExit(f"no summary for {size} {mode} round {r}")
memmap = lambda s: s["memmap_boot_ns"] + s["buddy_eager_ns"] + s["deferred_ns"]
mean = lambda xs: sum(xs) / len(xs)
ms = lambda ns: f"{ns / 1e6:.1f}"
print(f"memboot bench: TCG, {smp} vCPUs, 1 node, {rounds} rounds (mode order reversed every other round); "
      f"times in ms, mean (best); TSC {summary(sizes[0], modes[0], 1)['tsc_mhz']} MHz")
hdr = ["size", "mode", "pages", "eager", "memmap_boot", "deferred", "memmap", "total", "x touch"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for size in sizes:
    runs = {m: [summary(size, m, r) for r in range(1, rounds + 1)] for m in modes}
    floor = mean([memmap(s) for s in runs["touch"]]) if "touch" in runs else None
    for m in modes:
        rs = runs[m]
        col = lambda f: f"{ms(mean([f(s) for s in rs]))} ({ms(min(f(s) for s in rs))})"
        ratio = f"{mean([memmap(s) for s in rs]) / floor:.2f}" if floor else ""
        print(f"| {size} | {m} | {rs[0]['present_pages']} | {rs[0]['eager_pages']} | "
              f"{col(lambda s: s['memmap_boot_ns'])} | {col(lambda s: s['deferred_ns'])} | {col(memmap)} | "
              f"{col(lambda s: s['total_ns'])} | {ratio} |")
print()
print("memmap = boot-CPU memmap phase + hand-off of its free pages to the buddy + deferred phase;")
print("x touch = mean memmap / mean memmap of memmap=touch (64-byte store per page, same CPUs, same split).")
PY
