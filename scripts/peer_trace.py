#!/usr/bin/env python3
"""Reads the files NVLLM_PEER_TRACE=FILE writes (FILE.rank0, FILE.rank1, ...: one line per pushed
sum of the run's last 2,048: its slot, then kind, entry, waited, ready, end, gemv_last, tokens, -,
in %globaltimer ns) and says where a tensor-parallel decode step's sums and the time between them
go, as medians over the batch-1 calls (tokens == 1) found on every rank.

Each GPU's %globaltimer has its own offset (hundreds of us apart), so the ranks' clocks are first
aligned on the sums' ends, which every rank reaches within a poll of the others; the offsets are
printed. Then, per kind of sum:

  kind 1 (peer_reduce_push_kernel: the projection, then the pushed sum; the embedding's sum)
    wait        waited - entry: the sum's block resident before the kernel before it ended
    last->end   end - the slowest rank's `waited`: pushes out, the peers' rows in, sum and norm
  kind 2 (gemv_push, then peer_reduce_pushed_kernel, which only polls)
    lead        entry - gemv_last: the sum launched before (negative) or after the projection's last push
    last->end   end - the slowest rank's gemv_last (its last push): the trip, the sum and the norm
  both
    skew        the spread of those marks over the ranks (aligned clocks)

and per step (a step's sums are found between the gaps over 3x the median gap: the LM head, the
logits' gather, sampling, the host's turn and the embedding lie there): the sums a step, the
median gaps between consecutive sums' ends at even and odd places (the halves of a layer), and the
tail: from a step's last sum's end to the next step's first sum entering.

Usage: scripts/peer_trace.py FILE (the prefix given to NVLLM_PEER_TRACE)."""
import glob
import statistics
import sys

FIELDS = ["kind", "entry", "waited", "ready", "end", "gemv_last", "tokens", "unused"]


def load(path):
    calls = {}
    for line in open(path):
        v = [int(x) for x in line.split()]
        calls[v[0]] = dict(zip(FIELDS, v[1:]))
    return calls


def us(ns):
    return ns / 1e3


def med(values):
    return statistics.median(values) if values else float("nan")


def per_sum(ranks, slots, offsets):
    spans = {1: {"wait": [], "last->end": [], "skew": []}, 2: {"lead": [], "last->end": [], "skew": []}}
    for s in slots:
        rows = [r[s] for r in ranks]
        kind = rows[0]["kind"]
        if kind not in spans or any(x["kind"] != kind or x["tokens"] != 1 for x in rows):
            continue
        d = spans[kind]
        mark = "waited" if kind == 1 else "gemv_last"
        marks = [x[mark] - o for x, o in zip(rows, offsets)]
        end = max(x["end"] - o for x, o in zip(rows, offsets))
        for x in rows:
            if kind == 1:
                d["wait"].append(x["waited"] - x["entry"])
            else:
                d["lead"].append(x["entry"] - x["gemv_last"])
        d["last->end"].append(end - max(marks))
        d["skew"].append(max(marks) - min(marks))
    for kind, d in spans.items():
        n = len(d["skew"])
        if n == 0:
            continue
        what = "projection, then the pushed sum" if kind == 1 else "gemv_push, then the polling sum"
        print(f"kind {kind} ({what}): {n} batch-1 calls; medians in us")
        for name, v in d.items():
            print(f"  {name:10} {us(med(v)):8.2f}")


def per_step(rank0):
    """Rank 0's sums in time order, split into steps at the long gaps."""
    calls = sorted((c for c in rank0.values() if c["tokens"] == 1), key=lambda c: c["end"])
    if len(calls) < 3:
        return
    gaps = [b["end"] - a["end"] for a, b in zip(calls, calls[1:])]
    long_gap = 3 * med(gaps)
    starts = [0] + [i + 1 for i, g in enumerate(gaps) if g > long_gap]
    steps = [calls[a:b] for a, b in zip(starts, starts[1:])]  # whole steps only (the last may be cut)
    steps = steps[1:]  # the first may be cut too
    if not steps:
        print("steps: no whole step between two long gaps")
        return
    sizes = [len(s) for s in steps]
    even, odd = [], []
    for step in steps:
        for i, (a, b) in enumerate(zip(step, step[1:])):
            (even if i % 2 == 0 else odd).append(b["end"] - a["end"])
    tails = [b[0]["entry"] - a[-1]["end"] for a, b in zip(steps, steps[1:])]
    firsts = [s[0]["end"] - (s[0]["waited"] or s[0]["entry"]) for s in steps]
    print(f"steps: {len(steps)} whole ones of {med(sizes):.0f} sums (rank 0); medians in us")
    print(f"  sum to sum, even places {us(med(even)):8.2f}, odd places {us(med(odd)):8.2f}")
    print(f"  tail       {us(med(tails)):8.2f}  (a step's last sum's end to the next step's first sum entering)")
    print(f"  first sum  {us(med(firsts)):8.2f}  (its wait, or entry, to its end)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    paths = sorted(glob.glob(sys.argv[1] + ".rank*"), key=lambda p: int(p.rsplit("rank", 1)[1]))
    if not paths:
        sys.exit(f"no {sys.argv[1]}.rank* files")
    ranks = [load(p) for p in paths]
    slots = sorted(set.intersection(*(set(r) for r in ranks)))
    if not slots:
        sys.exit("no call found on every rank")
    offsets = [med([r[s]["end"] - ranks[0][s]["end"] for s in slots]) for r in ranks]
    print(f"{len(paths)} ranks, {len(slots)} calls on every rank; clock offsets vs rank 0 (us): "
          + ", ".join(f"{us(o):.1f}" for o in offsets))
    per_sum(ranks, slots, offsets)
    per_step(ranks[0])


if __name__ == "__main__":
    main()
