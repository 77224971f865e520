#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel name: total, count, mean."""
import collections
import csv
import re
import sys

rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    sys.exit(f"{sys.argv[1]}: no ncu rows")
head, rows = rows[0], rows[1:]
name, unit, value = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
total, count = collections.Counter(), collections.Counter()
for r in rows:
    m = re.search(r"(\w+)[<(]", r[name])
    k = m.group(1) if m else r[name][:60]
    total[k] += float(r[value].replace(",", "")) * scale[r[unit]]
    count[k] += 1
print(f"{len(rows)} kernels, {sum(total.values()):.0f} us (each alone, caches flushed)")
for k, t in total.most_common():
    print(f"{t:8.1f} us  {count[k]:4d} x {t / count[k]:7.2f} us  {k}")
