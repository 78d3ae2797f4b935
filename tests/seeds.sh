#!/usr/bin/env bash
# tests/seeds.sh (also `tests/bench.sh --seeds ...`): issue 21's seeds,
# reproduced and fixed, in one table. One row per problem this project
# exists for: memboot's pathology and memboot's fix, measured in this run,
# next to the figures the original report gave (tests/src/seeds.rs).
#
#   tests/seeds.sh [--svg DIR | --keep DIR] [--rounds N] [--quick]
#                  [--host-memory prefault|cold]
#
#   1 vmware-5.8      1T, one node: memmap=regions vs memmap=deferred
#   2 power-16-nodes  1T over 16 nodes with 16 vCPUs, one per node:
#                     memmap=regions vs memmap=deferred (the deferred phase
#                     end to end, every node's deferred init)
#   3 arm64-sparse    host bench, not a boot: memmap's init_memmap,
#                     perpfn vs regions, on a synthetic map with many holes
#   4 x86-2t-blocks   2T, memmap=ondemand: 128M blocks with
#                     memory_block_lookup=linear vs indexed, and 2G blocks
#
# Boots run through tests/bench.sh (its host-memory state, default cold,
# ABBA rounds, refusals and logs), one bench run per seed into DIR/SEED
# (DIR/SEED/bench.md, logs/);
# the table goes to stdout and DIR/seeds.md. --svg and --keep both name
# DIR; without either, a temporary directory is used and removed.
# --rounds: rounds per bench run (default 2). --quick: every boot at 4G,
# one round, a 64-region sparse map: checks the pipeline end to end in a
# few minutes; its table says so (the sizes come from the logs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds_args=("$@")
out="" rounds=2 quick=0 host_memory=cold
while [ $# -gt 0 ]; do
    case "$1" in
        --svg|--keep) out=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --host-memory) host_memory=$2; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "seeds.sh: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "seeds.sh: --rounds must be a positive integer" >&2; exit 64; }
say() { echo "seeds: $*" >&2; }
if [ -z "$out" ]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out"

big=1T huge=2T regions=8192
if [ "$quick" = 1 ]; then big=4G huge=4G regions=64 rounds=1; fi
blocks=""
for size in 128M 2G; do
    for lookup in linear indexed; do
        blocks+=" ondemand+memory_block_size=$size+memory_block_lookup=$lookup"
    done
done

(cd "$ROOT" && cargo build -q --release -p memboot-tests --bin memboot-seeds) >&2
bench() { # bench SEED ARGS...: one bench.sh run into $out/SEED; its table to stderr
    local seed=$1; shift
    say "seed $seed: tests/bench.sh $*"
    "$ROOT/tests/bench.sh" --host-memory "$host_memory" "$@" --rounds "$rounds" --svg "$out/$seed" >&2
}
bench vmware-5.8 --sizes "$big" --nodes 1 --modes "regions deferred"
# One vCPU per node, as the reported machine had CPUs on every node: with
# fewer, the memory-only nodes' deferred init runs one node after another.
bench power-16-nodes --sizes "$big" --nodes 16 --smp 16 --modes "regions deferred"
say "seed arm64-sparse: memboot-seeds sparse $regions 7 (host bench)"
mkdir -p "$out/arm64-sparse"
{
    echo "command: target/release/memboot-seeds sparse $regions 7"
    echo "host: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) CPUs; commit $(git -C "$ROOT" rev-parse --short HEAD)"
    "$ROOT/target/release/memboot-seeds" sparse "$regions" 7
} >"$out/arm64-sparse/sparse.log"
cat "$out/arm64-sparse/sparse.log" >&2
bench x86-2t-blocks --sizes "$huge" --nodes 1 --modes "${blocks# }"

printf '%q ' "$0" "${seeds_args[@]}" >"$out/command"; echo >>"$out/command"
"$ROOT/target/release/memboot-seeds" table "$out" | tee "$out/seeds.md"
say "wrote $out/seeds.md"
