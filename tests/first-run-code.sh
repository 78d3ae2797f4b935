#!/usr/bin/env bash
# tests/first-run-code.sh — how much kernel code the CPUs run for the
# first time before memory is ready (or between two functions), per
# function. Under TCG each first run of an instruction is a translation
# (about a microsecond each here), so with `memmap=ondemand` this count, not
# memory work, is what the memory-ready time is made of (docs/results.md,
# "`ondemand` from 1G to 59T"), and in the timed memmap phases it is a cost
# `memmap=touch` runs little of.
#
#   tests/first-run-code.sh [-m SIZE] [--nodes N] [--top N] [--from FN] [--until FN]
#                           [-- KERNEL_OPTIONS...]
#
# Boots the built image (run-qemu.sh --no-build: build it first) with QEMU's
# `-d in_asm,nochain` log, takes the kernel's instructions in the order QEMU
# translated them (any CPU) from the first one of function FN (`--from`; the
# boot's start without it) up to the first one of `--until`'s (default
# `Facts::memory_ready`, what stamps memory ready; a generic function
# matches any of its instances), and prints the number of distinct
# instructions, then the functions (symbols of the kernel ELF, inlined code
# counted in its caller) with the most. Defaults: -m 64G --nodes 16, the
# top 25, options `memmap=ondemand alloc_test=0 verify=off`. A measurement,
# not a test.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
size=64G nodes=16 top=25 from_sym= stop_sym='memboot_kernel::pipeline::facts::Facts::memory_ready'
while [ $# -gt 0 ]; do
    case "$1" in
        -m) size=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --top) top=$2; shift 2 ;;
        --from) from_sym=$2; shift 2 ;;
        --until) stop_sym=$2; shift 2 ;;
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
sym_addr() { # sym_addr NAME: the addresses of the symbols so named (16 hex digits), comma-separated
    nm -C --defined-only "$elf" | awk -v s="$1" '{ sym=$0; sub(/^[0-9a-f]+ [a-zA-Z] /, "", sym) } sym == s { printf "%s%s", sep, $1; sep = "," }'
}
stop=$(sym_addr "$stop_sym") text_start=$(sym_addr __text_start) text_end=$(sym_addr __text_end)
[ -n "$stop" ] || { echo "first-run-code.sh: no symbol $stop_sym in $elf" >&2; exit 4; }
from=
if [ -n "$from_sym" ]; then
    from=$(sym_addr "$from_sym")
    [ -n "$from" ] || { echo "first-run-code.sh: no symbol $from_sym in $elf" >&2; exit 4; }
fi
[ -n "$text_start" ] && [ -n "$text_end" ] || { echo "first-run-code.sh: no __text_start/__text_end in $elf" >&2; exit 4; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmd=$("$ROOT/run-qemu.sh" --no-build --print-cmd --dry-run -m "$size" --nodes "$nodes" -- "${opts[@]}" 2>&1 | grep '^qemu-system') \
    || { echo "first-run-code.sh: run-qemu.sh printed no QEMU command for -m $size --nodes $nodes" >&2; exit 4; }
# run-qemu.sh prints the command shell-quoted; the log goes to a file. Its
# run directory (pid file, marks socket) is gone after a dry run: the pid
# file goes to this script's directory, the marks to nowhere.
cmd=$(printf '%s' "$cmd" | sed -e "s#/tmp/memboot-run\.[A-Za-z0-9]*#$work#g" \
    -e 's#socket\\,id=marks\\,path=[^ ]*#null\\,id=marks#')
eval "$cmd -d in_asm,nochain -D $work/in_asm.log" > "$work/boot.log" 2>&1 || true
grep -q 'memboot-summary: .*"status":"ok"' "$work/boot.log" \
    || { echo "first-run-code.sh: the boot did not end ok; its log:" >&2; tail -20 "$work/boot.log" >&2; exit 2; }

# Distinct kernel instructions (offsets from __text_start), in translation
# order, from the first instruction of a `--from` symbol up to the first of
# a stop symbol.
awk -v lo_hex="$text_start" -v hi_hex="$text_end" -v stop_hex="$stop" -v from_hex="$from" '
    function hex(s,   i, c, v) { v = 0; s = tolower(s); sub(/^0x/, "", s)
        for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; v = v * 16 + c }
        return v }
    function low32(s) { sub(/^0x/, "", s); return length(s) == 16 && substr(s, 1, 8) == "ffffffff" ? hex(substr(s, 9)) : -1 }
    function offsets(list, set,   n, a, i) { n = split(list, a, ","); for (i = 1; i <= n; i++) set[low32(a[i]) - lo] = 1; return n }
    BEGIN { lo = low32(lo_hex); text_bytes = low32(hi_hex) - lo; offsets(stop_hex, stops)
            started = offsets(from_hex, froms) == 0 }
    /^0x[0-9a-f]+:/ { a = low32(substr($1, 1, length($1) - 1))
        if (a < lo) next
        off = a - lo
        if (off >= text_bytes) next
        if (off in froms) started = 1
        if (off in stops) done = 1
        if (done || !started) next
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
echo "first-run-code: -m $size --nodes $nodes ${opts[*]}: $total distinct kernel instructions run${from_sym:+ from $from_sym} up to $stop_sym"
# Merge the two sorted lists: each offset to the symbol that contains it.
awk 'NR == FNR { s[NR] = $1; l[NR] = $2; $1 = ""; $2 = ""; n[NR] = substr($0, 3); ns = NR; next }
     { while (i < ns && s[i + 1] <= $1) i++
       name = (i > 0 && $1 < s[i] + l[i]) ? n[i] : "(outside any symbol)"
       count[name]++ }
     END { for (k in count) printf "%7d %s\n", count[k], k }' "$work/syms" "$work/offsets" \
    | sort -rn | awk -v n="$top" 'NR <= n'
