"""Per boot of this run: memory ready, what the boot vCPU did from entry to
ready, and the host CPU speed probes just before QEMU started and after it
exited (run-qemu.sh's `host CPU speed` line); then ready by how the probes
found the host CPUs: all four fast, or any slow (over 1.3 times the run's
fastest probe).
Usage: python3 table.py DIR  (DIR/logs/boot-NN.log)"""
import glob, os, re, statistics, sys
d = sys.argv[1]
rows = []
for f in sorted(glob.glob(os.path.join(d, 'logs', 'boot-*.log'))):
    text = open(f).read()
    ready = int(re.search(r'"allocatable_ns":(\d+)', text).group(1)) / 1e6
    ran = re.search(r'vCPU 0 ran ([\d.]+) ms and waited ([\d.]+) ms', text)
    faults = re.search(r'from entry to memory ready.*host page faults \[0: (\d+)', text).group(1)
    speed = re.search(r'took CPU 0 ([\d.]+) / ([\d.]+), CPU 1 ([\d.]+) / ([\d.]+) ms', text)
    rows.append((os.path.basename(f), ready, ran.group(1), ran.group(2), faults, [float(x) for x in speed.groups()]))
fastest = min(min(r[5]) for r in rows)
print('| boot | ready ms | vCPU 0 ran ms | waited ms | vCPU 0 host page faults | CPU 0 before ms | CPU 1 before ms | CPU 0 after ms | CPU 1 after ms | probes |')
print('|---|---|---|---|---|---|---|---|---|---|')
groups = {'all fast': [], 'any slow': []}
for name, ready, ran, waited, faults, s in rows:
    g = 'all fast' if max(s) <= 1.3 * fastest else 'any slow'
    groups[g].append(ready)
    print(f'| {name} | {ready:.2f} | {ran} | {waited} | {faults} | {s[0]:.2f} | {s[2]:.2f} | {s[1]:.2f} | {s[3]:.2f} | {g} |')
print()
print('| probes | boots | ready median ms | min | max | boots over 20 ms |')
print('|---|---|---|---|---|---|')
for g, v in groups.items():
    print(f'| {g} | {len(v)} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} | {sum(x > 20 for x in v)} |')
