"""Per line of stretches.c's output (one 400-run series, after a 200 ms
sleep): the fastest run in µs, the share of time in slow runs (over 1.5
times the fastest), and the slow stretches over 2 ms.
Usage: python3 stretches.py FILE"""
import sys
print('| series | runs | fastest µs | slow share % | slow stretches ms |')
print('|---|---|---|---|---|')
for i, l in enumerate(open(sys.argv[1])):
    v = [int(x) for x in l.split()]
    fast = min(v)
    runs, cur = [], 0
    for x in v:
        if x > 1.5 * fast:
            cur += x
        elif cur:
            runs.append(cur)
            cur = 0
    if cur:
        runs.append(cur)
    slow = sum(x for x in v if x > 1.5 * fast)
    print(f'| {i + 1} | {len(v)} | {fast} | {100 * slow / sum(v):.0f} | {", ".join(f"{r / 1000:.1f}" for r in runs if r > 2000) or "–"} |')
