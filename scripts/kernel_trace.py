#!/usr/bin/env python3
"""Where a step's time goes, from bench/tools/kernel_trace.cpp's CSV (every kernel's GPU start and end).

    python3 scripts/kernel_trace.py trace.csv [--steps N] [--step-kernel SUBSTRING] [--device D] [--layers L]

Steps begin at each kernel whose name holds --step-kernel (default "embedding": every forward pass
starts with the token lookup). Of the last N whole steps (default 20) with the run's most common
kernel count (its decode steps) on one device (--device, default the first kernel's: a tensor-
parallel run's ranks are its devices) it prints each kernel kind's
calls a step, its mean duration (start to end) and its share of the step: the step's end-to-end time
split by kernel in start order, each kernel owning the time from the previous kernel's end (or its own
start, if later) to its own end. With PDL a kernel starts before the one ahead of it ends, so its
duration overlaps its neighbour's; its share does not, and the shares add up to the step. "idle" is
time inside a step with no kernel running. With --layers L, a kernel kind called a multiple of L
times a step is split by its place in the layer ("gemv_kernel #2": the third call of each layer). A share is not what removing the kernel would save: while a
small kernel (a norm, RoPE) runs, the next projection's blocks are already streaming their weights
(bench/NOTES.md, thirty-fourth session: releasing them later cost 2-4% of the step).
"""
import argparse
import collections
import csv
import re
import shutil
import subprocess
import sys


def short_names(names):
    """Demangled names without template arguments or parameters ('nvllm::kernels::gemv_kernel')."""
    names = sorted(set(names))
    demangled = names
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
        if len(out) == len(names):
            demangled = out
    short = {}
    for raw, d in zip(names, demangled):
        s = d
        depth, cut = 0, []
        for ch in s:  # drop <...> and (...) nests
            if ch in "<(":
                depth += 1
            elif ch in ">)":
                depth = max(0, depth - 1)
            elif depth == 0:
                cut.append(ch)
        s = "".join(cut).strip()
        s = re.sub(r"^(void|auto)\s+", "", s)
        s = re.sub(r"^nvllm::kernels::(\(anonymous namespace\)::)?", "", s)
        s = s.replace("(anonymous namespace)::", "")
        short[raw] = s[:60] or raw[:60]
    return short


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--step-kernel", default="embedding")
    ap.add_argument("--device", type=int, default=None)
    ap.add_argument("--layers", type=int, default=0, help="split kinds called a multiple of L times a step by place")
    args = ap.parse_args()
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            device = int(r.get("device", 0))
            if args.device is None:
                args.device = device
            if device == args.device:
                rows.append((int(r["start_ns"]), int(r["end_ns"]), r["name"]))
    if not rows:
        sys.exit("no kernels in the trace")
    rows.sort()
    short = short_names([r[2] for r in rows])
    starts = [i for i, r in enumerate(rows) if args.step_kernel in short[r[2]]]
    if len(starts) < 2:
        sys.exit(f"fewer than two kernels named like '{args.step_kernel}': no whole step")
    # The steps of the run's most common kernel count (decode steps; prompt steps launch others),
    # the last N of them.
    all_steps = list(zip(starts[:-1], starts[1:]))
    modal = collections.Counter(b - a for a, b in all_steps).most_common(1)[0][0]
    steps = [(a, b) for a, b in all_steps if b - a == modal][-args.steps:]
    calls = collections.Counter()
    duration = collections.defaultdict(float)
    share = collections.defaultdict(float)
    span_total = idle_total = 0.0
    per_step = collections.Counter(short[name] for _, _, name in rows[steps[0][0]:steps[0][1]]) if steps else {}
    for a, b in steps:
        ks = rows[a:b]
        seen = collections.Counter()
        t0, prev_end = ks[0][0], ks[0][0]
        for s, e, name in ks:
            k = short[name]
            if args.layers and per_step[k] % args.layers == 0 and per_step[k] > args.layers:
                place = seen[k] % (per_step[k] // args.layers)
                seen[k] += 1
                k = f"{k} #{place}"
            calls[k] += 1
            duration[k] += e - s
            share[k] += max(0, e - max(prev_end, s))  # the time this kernel adds past the ones before
            idle_total += max(0, s - prev_end)
            prev_end = max(prev_end, e)
        span_total += prev_end - t0
    n = len(steps)
    print(f"{n} steps, mean span {span_total / n / 1e3:.1f} us, idle {idle_total / n / 1e3:.1f} us a step")
    print(f"{'kernel':60s} {'calls':>6s} {'mean us':>8s} {'share us':>9s} {'share %':>7s}")
    for k in sorted(share, key=lambda k: -share[k]):
        print(f"{k:60s} {calls[k] / n:6.1f} {duration[k] / calls[k] / 1e3:8.2f} {share[k] / n / 1e3:9.1f} "
              f"{100 * share[k] / span_total:7.1f}")


if __name__ == "__main__":
    main()
