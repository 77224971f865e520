#!/usr/bin/env python3
"""Reads the files NVLLM_PEER_TRACE=FILE writes (FILE.rank0, FILE.rank1, ...: one line per pushed
sum of the run's last 2,048: its slot, then kind, entry, waited, ready, end, gemv_last, tokens, -,
in %globaltimer ns) and says where a tensor-parallel decode sum's time goes, per kind, as medians
over the batch-1 calls (tokens == 1) found on every rank:

  kind 1 (the projection, then peer_reduce_push_kernel: down on cuBLASLt, or NVLLM_GEMV_PUSH=0)
    wait     waited - entry: the sum's block resident before the projection ended
    trip     ready - waited: its pushes out, the peers' rows in (the slowest rank's)
  kind 2 (gemv_push, then peer_reduce_pushed_kernel)
    lead     entry - gemv_last: the sum launched before (negative) or after the projection's last push
    trip     ready - gemv_last: this rank's last push to every rank's rows here
  both
    norm     end - ready: the sum and norm of row 0 once its data is in
    skew     the spread of gemv_last (kind 2) or waited (kind 1) over the ranks, if their clocks
             agree (each GPU's %globaltimer: compare with the same spread of `end`, which every
             rank reaches within a poll of the others)

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


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    paths = sorted(glob.glob(sys.argv[1] + ".rank*"), key=lambda p: int(p.rsplit("rank", 1)[1]))
    if not paths:
        sys.exit(f"no {sys.argv[1]}.rank* files")
    ranks = [load(p) for p in paths]
    slots = set.intersection(*(set(r) for r in ranks))
    spans = {1: {"wait": [], "trip": [], "norm": [], "skew": [], "end skew": []},
             2: {"lead": [], "trip": [], "norm": [], "skew": [], "end skew": []}}
    for s in slots:
        rows = [r[s] for r in ranks]
        kind = rows[0]["kind"]
        if kind not in spans or any(x["kind"] != kind or x["tokens"] != 1 for x in rows):
            continue
        d = spans[kind]
        for x in rows:
            if kind == 1:
                d["wait"].append(x["waited"] - x["entry"])
                d["trip"].append(x["ready"] - x["waited"])
            else:
                d["lead"].append(x["entry"] - x["gemv_last"])
                d["trip"].append(x["ready"] - x["gemv_last"])
            d["norm"].append(x["end"] - x["ready"])
        mark = "waited" if kind == 1 else "gemv_last"
        d["skew"].append(max(x[mark] for x in rows) - min(x[mark] for x in rows))
        d["end skew"].append(max(x["end"] for x in rows) - min(x["end"] for x in rows))
    print(f"{len(paths)} ranks, {len(slots)} calls on every rank")
    for kind, d in spans.items():
        n = len(d["norm"]) // len(paths)
        if n == 0:
            continue
        what = "projection, then the pushed sum" if kind == 1 else "gemv_push, then the polling sum"
        print(f"kind {kind} ({what}): {n} batch-1 calls; medians in us")
        for name, v in d.items():
            print(f"  {name:9} {statistics.median(v) / 1e3:8.2f}")


if __name__ == "__main__":
    main()
