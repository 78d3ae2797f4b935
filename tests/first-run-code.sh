#!/usr/bin/env bash
# tests/first-run-code.sh — how much kernel code the boot CPU runs for the
# first time before memory is ready, per function. Under TCG each first run
# of an instruction is a translation (about a microsecond each here), so with
# `memmap=ondemand` this count, not memory work, is what the memory-ready
# time is made of (docs/results.md, "`ondemand` from 1G to 59T").
#
#   tests/first-run-code.sh [-m SIZE] [--nodes N] [--top N] [-- KERNEL_OPTIONS...]
#
# Boots the built image (run-qemu.sh --no-build: build it first) with QEMU's
# `-d in_asm,nochain` log, takes the kernel's instructions in the order QEMU
# translated them up to the first one of `Facts::memory_ready` (what stamps
# memory ready), and prints the number of distinct instructions, then the
# functions (symbols of the kernel ELF, inlined code counted in its
# caller) with the most. Defaults: -m 64G --nodes 16, the top 25, options
# `memmap=ondemand alloc_test=0 verify=off`. A measurement, not a test.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
size=64G nodes=16 top=25
while [ $# -gt 0 ]; do
    case "$1" in
        -m) size=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --top) top=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "first-run-code.sh: unknown argument $1 (see the header)" >&2; exit 64 ;;
    esac
done
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(memmap=ondemand alloc_test=0 verify=off)

elf=$ROOT/target/kernel/x86_64-unknown-none/release/memboot-kernel
[ -f "$elf" ] || { echo "first-run-code.sh: no kernel at $elf: run ./run-qemu.sh --build-only first" >&2; exit 4; }
# The kernel runs where it is linked (kernel/linker.ld), in the top 2 GiB:
# addresses 0xffffffffXXXXXXXX, handled as offsets from __text_start (awk's
# numbers are doubles, exact only to 2^53, and some awks print %d in 32 bits).
sym_addr() { # sym_addr NAME: the symbol's address, 16 hex digits
    nm -C --defined-only "$elf" | awk -v s="$1" '{ sym=$0; sub(/^[0-9a-f]+ [a-zA-Z] /, "", sym) } !found && sym == s { print $1; found = 1 }'
}
stop_sym='memboot_kernel::pipeline::facts::Facts::memory_ready'
stop=$(sym_addr "$stop_sym") text_start=$(sym_addr __text_start) text_end=$(sym_addr __text_end)
[ -n "$stop" ] || { echo "first-run-code.sh: no symbol $stop_sym in $elf" >&2; exit 4; }
[ -n "$text_start" ] && [ -n "$text_end" ] || { echo "first-run-code.sh: no __text_start/__text_end in $elf" >&2; exit 4; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmd=$("$ROOT/run-qemu.sh" --no-build --print-cmd --dry-run -m "$size" --nodes "$nodes" -- "${opts[@]}" 2>&1 | grep '^qemu-system') \
    || { echo "first-run-code.sh: run-qemu.sh printed no QEMU command for -m $size --nodes $nodes" >&2; exit 4; }
# run-qemu.sh prints the command shell-quoted; the log goes to a file.
eval "$cmd -d in_asm,nochain -D $work/in_asm.log" > "$work/boot.log" 2>&1 || true
grep -q 'every page allocatable' "$work/boot.log" \
    || { echo "first-run-code.sh: the boot never reported memory ready; its log:" >&2; tail -20 "$work/boot.log" >&2; exit 2; }

# Distinct kernel instructions (offsets from __text_start), in translation
# order, up to the stop symbol's first instruction.
awk -v lo_hex="$text_start" -v hi_hex="$text_end" -v stop_hex="$stop" '
    function hex(s,   i, c, v) { v = 0; s = tolower(s); sub(/^0x/, "", s)
        for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; v = v * 16 + c }
        return v }
    function low32(s) { sub(/^0x/, "", s); return length(s) == 16 && substr(s, 1, 8) == "ffffffff" ? hex(substr(s, 9)) : -1 }
    BEGIN { lo = low32(lo_hex); text_bytes = low32(hi_hex) - lo; stop_off = low32(stop_hex) - lo }
    /^0x[0-9a-f]+:/ { a = low32(substr($1, 1, length($1) - 1))
        if (a < lo) next
        off = a - lo
        if (off >= text_bytes) next
        if (off == stop_off) done = 1
        if (done) next
        if (!(off in seen)) { seen[off] = 1; printf "%d\n", off } }
' "$work/in_asm.log" | sort -n > "$work/offsets"

# Symbols as (start, size, name), sorted by start, as offsets from
# __text_start (decimal: any awk).
nm -C --defined-only -S "$elf" | while read -r start len kind name; do
    case "$kind:$start" in
        [tTwW]:ffffffff*) printf '%d %d %s\n' "$(( 0x${start:8} - 0x${text_start:8} ))" "0x$len" "$name" ;;
    esac
done | sort -n > "$work/syms"

total=$(wc -l < "$work/offsets")
echo "first-run-code: -m $size --nodes $nodes ${opts[*]}: $total distinct kernel instructions run before memory is ready (up to $stop_sym)"
# Merge the two sorted lists: each offset to the symbol that contains it.
awk 'NR == FNR { s[NR] = $1; l[NR] = $2; $1 = ""; $2 = ""; n[NR] = substr($0, 3); ns = NR; next }
     { while (i < ns && s[i + 1] <= $1) i++
       name = (i > 0 && $1 < s[i] + l[i]) ? n[i] : "(outside any symbol)"
       count[name]++ }
     END { for (k in count) printf "%7d %s\n", count[k], k }' "$work/syms" "$work/offsets" \
    | sort -rn | awk -v n="$top" 'NR <= n'
