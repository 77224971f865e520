#!/usr/bin/env python3
"""One decode step's kernels from `nsys stats --report cuda_gpu_trace --format csv`: each kernel's
start (relative to the step's first kernel), duration and the gap since the previous kernel
ended, then per-kernel-name totals. A step is the run of kernels from the last `embedding`
kernel up to (not including) the next one; pass --step K to take the K-th from the end."""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step", type=int, default=2, help="which step from the end (1 = last)")
    ap.add_argument("--rows", type=int, default=40, help="rows of the timeline to print")
    a = ap.parse_args()
    lines = open(a.csv).read().splitlines()
    head = next(i for i, l in enumerate(lines) if "Start" in l and "Name" in l)
    rows = list(csv.DictReader(lines[head:]))
    start_key = next(k for k in rows[0] if k.startswith("Start"))
    dur_key = next(k for k in rows[0] if k.startswith("Duration"))
    kernels = [(int(float(r[start_key])), int(float(r[dur_key])), r["Name"]) for r in rows
               if r.get("Name") and "memcpy" not in r["Name"].lower() and "memset" not in r["Name"].lower()]
    kernels.sort()
    firsts = [i for i, k in enumerate(kernels) if "embedding" in k[2]]
    if len(firsts) < a.step + 1:
        sys.exit("not enough steps in the trace")
    lo, hi = firsts[-a.step - 1], firsts[-a.step]
    step = kernels[lo:hi]
    t0 = step[0][0]
    end = max(s + d for s, d, _ in step)
    print(f"step: {len(step)} kernels, {(end - t0) / 1000:.1f} us from the first start to the last end")
    by = collections.defaultdict(lambda: [0, 0.0, 0.0])
    prev_end = None
    for i, (s, d, n) in enumerate(step):
        short = n.split("(")[0].split("<")[0].split("::")[-1][:40]
        gap = (s - prev_end) / 1000 if prev_end is not None else 0.0
        if i < a.rows:
            print(f"{(s - t0) / 1000:9.2f} us  {d / 1000:7.2f} us  gap {gap:7.2f}  {short}")
        by[short][0] += 1
        by[short][1] += d / 1000
        by[short][2] += gap
        prev_end = max(prev_end or 0, s + d)
    print(f"{'kernel':40s} {'count':>5s} {'sum us':>9s} {'mean us':>8s} {'gaps us':>8s}")
    for n, (c, t, g) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:40s} {c:5d} {t:9.1f} {t / c:8.2f} {g:8.1f}")


if __name__ == "__main__":
    main()
