"""Per size: memory ready (each log's allocatable_ns) of each kernel over the ABBA
boots of ab.sh: median, min, max, and boots over 20 ms.
Usage: python3 table.py DIR  (DIR/logs/SIZE-NN-{old,new}.log)"""
import glob, os, re, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(d, 'logs', '*.log'))):
    m = re.match(r'(\w+)-(\d+)-(old|new)\.log', os.path.basename(f))
    ns = re.search(r'"allocatable_ns":(\d+)', open(f).read())
    rows.setdefault(m.group(1), {}).setdefault(m.group(3), []).append(int(ns.group(1)) / 1e6)
print('| size | kernel | boots | median ms | min | max | boots over 20 ms |')
print('|---|---|---|---|---|---|---|')
for size, k in rows.items():
    for kernel in ('old', 'new'):
        v = k[kernel]
        print(f'| {size} | {kernel} | {len(v)} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} | {sum(x > 20 for x in v)} |')
