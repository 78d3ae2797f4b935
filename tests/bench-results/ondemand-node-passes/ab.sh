#!/bin/bash
# ab.sh OUT_DIR OLD_ELF NEW_ELF ROUNDS SIZE NODES: `memmap=ondemand` boots of
# two kernel ELFs swapped into target/images in ABBA order (old new, new
# old, ...), each boot's log in OUT_DIR/logs/SIZE-NN-{old,new}.log; the
# built ELF is put back at the end. Run from anywhere in the repository.
set -euo pipefail
out=$1 old=$2 new=$3 rounds=$4 size=$5 nodes=$6
root=$(cd "$(dirname "$0")" && git rev-parse --show-toplevel)
mkdir -p "$out/logs"
img=$root/target/images/memboot-kernel.elf
cp "$img" "$out/.saved.elf"
n=0
for r in $(seq 1 "$rounds"); do
  for k in $([ $((r % 2)) -eq 1 ] && echo "old new" || echo "new old"); do
    n=$((n + 1))
    src=$old; [ "$k" = new ] && src=$new
    cp "$src" "$img"
    log=$(printf '%s/logs/%s-%02d-%s.log' "$out" "$size" "$n" "$k")
    (cd "$root" && ./run-qemu.sh --no-build -m "$size" --nodes "$nodes" -- memmap=ondemand alloc_test=0 verify=off) > "$log" 2>&1
    echo "$(basename "$log") $(grep -o '"allocatable_ns":[0-9]*' "$log")"
  done
done
cp "$out/.saved.elf" "$img"; rm "$out/.saved.elf"
