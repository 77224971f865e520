#!/usr/bin/env python3
"""Summarises the SASS page of one ncu report (`ncu --import R --page source --csv --print-source
sass > F`, as scripts/gpu_session.sh ncuattn writes it): where a kernel's warps stall.

  ncu_sass_summary.py F [--hot N] [--gap N] [--regions N] [--lines N]

Prints the stall reasons over all samples; the hot regions (runs of instructions that run at
least N times a warp, default 3: the loops), each with its samples, instructions a warp and the
opcodes they are; the lines with the most samples; and the shared-memory lines with excess
wavefronts (bank conflicts). A warp count is the first instruction's count (it runs once a warp)."""
import argparse
import collections
import csv
import re

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
EXCESS = "L1 Wavefronts Shared Excessive"


def number(text):
    return int(text) if text not in ("", "-") else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--hot", type=float, default=3.0, help="a hot instruction runs at least this many times a warp")
    ap.add_argument("--gap", type=int, default=64, help="cold instructions a hot region may hold in a row")
    ap.add_argument("--regions", type=int, default=3, help="how many hot regions to print, most sampled first")
    ap.add_argument("--lines", type=int, default=15, help="how many of the most-sampled lines to print")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header = next(i for i, r in enumerate(rows) if SAMPLES in r)
    col = {name: i for i, name in enumerate(rows[header])}
    data = [r for r in rows[header + 1:] if len(r) == len(rows[header])]
    stalls = [h for h in rows[header] if h.startswith("stall_") and "Not Issued" not in h]
    samples = [number(r[col[SAMPLES]]) for r in data]
    executed = [number(r[col[EXECUTED]]) for r in data]
    source = [r[col["Source"]].strip() for r in data]
    total = sum(samples)
    warps = executed[0] if executed and executed[0] > 0 else 1  # the first instruction runs once a warp

    def reasons(lo, hi, top=8):
        c = collections.Counter()
        for r in data[lo:hi]:
            for s in stalls:
                c[s[len("stall_"):]] += number(r[col[s]])
        return ", ".join(f"{k} {v}" for k, v in c.most_common(top) if v)

    print(f"{len(data)} instructions, {warps} warps, {total} stall samples")
    print(f"all: {reasons(0, len(data), 12)}")
    hot = [i for i, e in enumerate(executed) if e >= args.hot * warps]
    regions = []  # runs of hot instructions, gaps of up to `args.gap` cold ones inside
    for i in hot:
        if regions and i - regions[-1][1] <= args.gap:
            regions[-1][1] = i + 1
        else:
            regions.append([i, i + 1])
    regions.sort(key=lambda r: -sum(samples[r[0]:r[1]]))
    for lo, hi in regions[:args.regions]:
        spent = sum(executed[lo:hi])
        print(f"hot region: lines {lo}-{hi - 1}, {sum(samples[lo:hi])} samples "
              f"({100 * sum(samples[lo:hi]) / max(total, 1):.0f}%), {spent / warps:.0f} instructions a warp")
        print(f"  stalls: {reasons(lo, hi)}")
        ops = collections.Counter()
        for i in range(lo, hi):
            op = re.sub(r"^@!?U?P\w+\s+", "", source[i]).split()
            if op:
                ops[op[0].split(".")[0]] += executed[i]
        print("  opcodes a warp: " + ", ".join(f"{k} {v / warps:.0f}" for k, v in ops.most_common(12)))
    print("most-sampled lines (line, executed a warp, samples, source, stalls):")
    for i in sorted(range(len(data)), key=lambda i: -samples[i])[:args.lines]:
        why = " ".join(f"{s[len('stall_'):]}={data[i][col[s]]}" for s in stalls if number(data[i][col[s]]))
        print(f"  {i:5d} {executed[i] / warps:5.1f} {samples[i]:5d}  {source[i][:56]:56s} {why}")
    if EXCESS in col:
        excess = [(number(r[col[EXCESS]]), i) for i, r in enumerate(data) if number(r[col[EXCESS]])]
        shared = sum(number(r[col["L1 Wavefronts Shared"]]) for r in data) if "L1 Wavefronts Shared" in col else 0
        print(f"excess shared wavefronts: {sum(e for e, _ in excess)} of {shared}")
        for e, i in sorted(excess, reverse=True)[:6]:
            print(f"  {i:5d} {e:8d}  {source[i][:56]}")


if __name__ == "__main__":
    main()
