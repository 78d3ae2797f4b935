#!/usr/bin/env bash
# tests/seeds.sh (also `tests/bench.sh --seeds ...`): issue 21's seeds,
# reproduced and fixed, in one table. One row per problem this project
# exists for: memboot's pathology and memboot's fix, measured in this run,
# next to the figures the original report gave (tools/src/seeds.rs).
#
#   tests/seeds.sh [--svg DIR | --keep DIR] [--rounds N] [--quick]
#                  [--host-memory prefault|cold] [--only SEED]
#                  [--counted N] [--qemu PATH]
#
#   1 vmware-5.8      1T, one node: memmap=regions vs memmap=deferred
#   2 power-16-nodes  1T over 16 nodes with 16 vCPUs, one per node:
#                     memmap=regions vs memmap=deferred (the deferred phase
#                     end to end, every node's deferred init)
#   3 arm64-sparse    96 GB in 8192 regions with holes between, made with
#                     Linux memmap= forms (memboot-seeds sparse-boot):
#                     memmap=perpfn vs memmap=regions, verify on
#   4 x86-2t-blocks   2T, memmap=ondemand: 128M blocks with
#                     memory_block_lookup=linear vs indexed, and 2G blocks
#
# Two runs beside seed 3, only with --only (their tables are not rows):
#   arm64-sparse-linux    the first 100 regions of seed 3's map in one
#                         comma-joined memmap= word (sparse-boot 100 --joined,
#                         within Linux's 2048-byte command line) on the same
#                         108G guest: memmap=perpfn, memmap=regions and
#                         Linux 6.1, ABBA
#   arm64-sparse-profile  one round under the instruction profile
#                         (run-qemu.sh --profile): seed 3's 8192-region map
#                         (perpfn, regions) and the short map (perpfn,
#                         regions, Linux 6.1 with its real System.map);
#                         notes.md: the boot-CPU memmap phase's instructions
#                         per struct page and perpfn over regions, per map
#
# Boots run through tests/bench.sh (its host-memory state, default cold,
# ABBA rounds, refusals and logs), one bench run per seed into DIR/SEED
# (DIR/SEED/bench.md, logs/);
# the table goes to stdout and DIR/seeds.md. --svg and --keep both name
# DIR; without either, a temporary directory is used and removed.
# --rounds: rounds per bench run (default 2). --quick: every boot at 4G,
# one round, a 64-region sparse map (a 4G guest): checks the pipeline end to end in a
# few minutes; its table says so (the sizes come from the logs).
# --counted N (default 2; 0: none): after each seed's timed rounds, every
# entry boots N more times under the instruction profile
# (SIZE-ENTRY-counted-K.log and .profile.json, as tests/bench.sh
# --counted), and the table's counted column compares their guest
# instructions, the same on any host. --qemu PATH: the QEMU every boot
# uses (tests/qemu-peer.sh prints a 10.0 whose plugin API counts inline,
# so counted boots take about twice a plain boot's time, not 6-8 times).
# --only SEED: run that seed alone into DIR, then the table of DIR (the
# other seeds' runs must be there already, e.g. the committed ones).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seeds_args=("$@")
out="" rounds=2 quick=0 host_memory=cold only="" counted=2 qemu=()
while [ $# -gt 0 ]; do
    case "$1" in
        --svg|--keep) out=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --only) only=$2; shift 2 ;;
        --host-memory) host_memory=$2; shift 2 ;;
        --counted) counted=$2; shift 2 ;;
        --qemu) qemu=(--qemu "$2"); shift 2 ;;
        -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "seeds.sh: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "seeds.sh: --rounds must be a positive integer" >&2; exit 64; }
[[ "$counted" =~ ^[0-9]+$ ]] || { echo "seeds.sh: --counted must be a number of boots (0: none)" >&2; exit 64; }
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

(cd "$ROOT" && cargo build -q --release -p memboot-tools --bin memboot-seeds --bin memboot-bench) >&2
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
bench() { # bench SEED ARGS...: one bench.sh run into $out/SEED; its table to stderr
    local seed=$1; shift
    want "$seed" || return 0
    say "seed $seed: tests/bench.sh $*"
    "$ROOT/tests/bench.sh" --host-memory "$host_memory" "${qemu[@]}" --counted "$counted" "$@" \
        --rounds "$rounds" --svg "$out/$seed" >&2
}
bench vmware-5.8 --sizes "$big" --nodes 1 --modes "regions deferred"
# One vCPU per node, as the reported machine had CPUs on every node: with
# fewer, the memory-only nodes' deferred init runs one node after another.
bench power-16-nodes --sizes "$big" --nodes 16 --smp 16 --modes "regions deferred"
sparse_seed() { # the sparse map as boots: perpfn vs regions, ABBA, verify on
    want arm64-sparse || return 0
    local dir=$out/arm64-sparse/logs size forms order=() r e
    mapfile -t forms < <("$ROOT/target/release/memboot-seeds" sparse-boot "$regions")
    size=${forms[0]} forms=("${forms[@]:1}")
    say "seed arm64-sparse: $size, ${#forms[@]} memmap= forms (memboot-seeds sparse-boot $regions)"
    mkdir -p "$dir"
    sparse_boot() { # sparse_boot ENTRY LOG [RUN-QEMU OPTIONS...]
        local e=$1 log=$2
        shift 2
        "$ROOT/run-qemu.sh" --no-build -m "$size" --host-memory "$host_memory" "${qemu[@]}" "$@" \
            -- "memmap=$e" "${forms[@]}" >"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; say "arm64-sparse: $e failed"; exit 1; }
    }
    for ((r = 1; r <= rounds; r++)); do
        if ((r % 2)); then order=(perpfn regions); else order=(regions perpfn); fi
        for e in "${order[@]}"; do sparse_boot "$e" "$dir/$size-$e-$r.log"; done
    done
    for ((r = 1; r <= counted; r++)); do
        for e in perpfn regions; do
            say "arm64-sparse: counted $r: $e"
            sparse_boot "$e" "$dir/$size-$e-counted-$r.log" --profile "$dir/$size-$e-counted-$r.profile.json"
        done
    done
    printf '%s\n' "sizes $size" "entries perpfn regions" "rounds $rounds" \
        "heading sparse boots: TCG$([ ${#qemu[@]} -gt 0 ] && echo ", $("${qemu[1]}" --version | head -n 1)"), host memory $host_memory, $rounds round(s) in ABBA order$([ "$counted" -gt 0 ] && echo ", each entry counted $counted times under the memboot-profile plugin after its rounds"), commit $(git -C "$ROOT" rev-parse --short HEAD)" \
        >"$dir/report"
    "$ROOT/target/release/memboot-bench" report "$dir" --sizes "$size" --entries "perpfn regions" \
        --rounds "$rounds" --heading "$(sed -n 's/^heading //p' "$dir/report")" >"$out/arm64-sparse/bench.md"
}
sparse_seed
# sparse_run DIR SIZE PROFILE ENTRIES -- FORMS...: ABBA rounds (one when
# profiled) of memboot modes and linux-SERIES entries on one memmap= map.
sparse_run() {
    local dir=$1 size=$2 profile=$3 entries=($4) n=$rounds r e i order=() args prof=()
    shift 5
    [ "$profile" = 1 ] && n=1
    mkdir -p "$dir"
    for ((r = 1; r <= n; r++)); do
        order=("${entries[@]}")
        if ! ((r % 2)); then for ((i = 0; i < ${#entries[@]}; i++)); do order[i]=${entries[-1 - i]}; done; fi
        for e in "${order[@]}"; do
            [ "$profile" = 1 ] && prof=(--profile "$dir/$size-$e-$r.profile.json")
            if [[ "$e" == linux-* ]]; then
                args=(--linux "$(awk -v k="vmlinux-${e#linux-}" '$1 == k { print $2 }' <<<"$peer")"
                    --initrd "$(awk '$1 == "initrd" { print $2 }' <<<"$peer")" -- "$@")
            else
                args=(-- "memmap=$e" "$@")
            fi
            say "$dir: -m $size $e, round $r"
            "$ROOT/run-qemu.sh" --no-build -m "$size" --host-memory "$host_memory" "${prof[@]}" \
                "${args[@]}" >"$dir/$size-$e-$r.log" 2>&1 ||
                { tail -n 20 "$dir/$size-$e-$r.log" >&2; say "$dir: $e failed"; exit 1; }
        done
    done
    printf '%s\n' "sizes $size" "entries ${entries[*]}" "rounds $n" \
        "heading sparse boots$([ "$profile" = 1 ] && echo ", profiled"): TCG, host memory $host_memory, $n round(s) in ABBA order, commit $(git -C "$ROOT" rev-parse --short HEAD)" \
        >"$dir/report"
    "$ROOT/target/release/memboot-bench" report "$dir" --sizes "$size" --entries "${entries[*]}" \
        --rounds "$n" --heading "$(sed -n 's/^heading //p' "$dir/report")" >"${dir%/logs}/bench.md"
}
short_regions=100
# profile_notes DIR: the boot-CPU memmap phase of each profiled log under
# DIR/*/logs (its memboot-profile: line), per struct page, and perpfn's
# instructions per struct page over regions' on each map.
profile_notes() {
    echo "boot-CPU memmap phase under the instruction profile (memboot-profile), from the logs' \`memboot-profile: phase boot_cpu_memmap\` lines"
    echo
    echo "| map | entry | instructions | struct pages | instructions per struct page |"
    echo "|---|---|---|---|---|"
    local log map e
    for log in "$1"/*/logs/*-1.log; do
        map=${log#"$1"/} map=${map%%/*} e=${log##*/} e=${e#*-} e=${e%-1.log}
        awk -v map="$map" -v e="$e" '/^memboot-profile: phase boot_cpu_memmap:/ {
            n = $4; pages = "–"; per = "–"
            if (match($0, /per struct page \([0-9]+ pages\): [0-9.]+ instructions/)) {
                split(substr($0, RSTART, RLENGTH), f, /[( ]/); pages = f[5]; per = f[7]
            }
            printf "| %s | %s | %s | %s | %s |\n", map, e, n, pages, per }' "$log"
    done | tee "$1/notes.rows"
    echo
    echo "perpfn's instructions per struct page over regions', per map:"
    echo
    awk -F' [|] ' '$4 != "–" { per[$1 " " $2] = $3 / $4 }
        END { for (k in per) if (k ~ / perpfn$/) { m = k; sub(/ perpfn$/, "", m); r = per[m " regions"]
            if (r > 0) printf "- %s: %.1f / %.1f = %.1f×\n", substr(m, 3), per[k], r, per[k] / r } }' "$1/notes.rows" | sort
    rm -f "$1/notes.rows"
}
extra_seeds() {
    local forms short size peer
    case "$only" in arm64-sparse-linux | arm64-sparse-profile) ;; *) return 0 ;; esac
    peer=$("$ROOT/tests/linux-peer.sh" --symbols)
    mapfile -t short < <("$ROOT/target/release/memboot-seeds" sparse-boot "$short_regions" --joined)
    mapfile -t forms < <("$ROOT/target/release/memboot-seeds" sparse-boot "$regions")
    size=${forms[0]} forms=("${forms[@]:1}")
    say "short map: ${#short[1]} bytes of memmap= on -m $size (memboot-seeds sparse-boot $short_regions --joined)"
    if [ "$only" = arm64-sparse-linux ]; then
        sparse_run "$out/arm64-sparse-linux/logs" "$size" 0 "perpfn regions linux-6.1" -- "${short[1]}"
    else
        sparse_run "$out/arm64-sparse-profile/short/logs" "$size" 1 "perpfn regions linux-6.1" -- "${short[1]}"
        sparse_run "$out/arm64-sparse-profile/map-$regions/logs" "$size" 1 "perpfn regions" -- "${forms[@]}"
        profile_notes "$out/arm64-sparse-profile" >"$out/arm64-sparse-profile/notes.md"
    fi
}
extra_seeds
case "$only" in arm64-sparse-linux | arm64-sparse-profile) exit 0 ;; esac
bench x86-2t-blocks --sizes "$huge" --nodes 1 --modes "${blocks# }"

printf '%q ' "$0" "${seeds_args[@]}" >"$out/command"; echo >>"$out/command"
"$ROOT/target/release/memboot-seeds" table "$out" | tee "$out/seeds.md"
say "wrote $out/seeds.md"
