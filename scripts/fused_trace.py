#!/usr/bin/env python3
"""Reads the file NVLLM_FUSED_TRACE writes (one line per CTA of each fused batch-1 kernel:
kernel, cta, sm, start, waited, weights, end, three attention phase marks, inputs read, in ns;
then SM clock cycles from start to end; kernel = layer * 5 + its slot, q/k/v (split plans only),
attention, o_proj, gate_up, down) and says where a step's time goes: per kernel kind, averaged
over the kernels after the first,
  span     its last CTA's end minus the previous kernel's last end (its share of the chain)
  launch   its first CTA's start minus the previous kernel's last end (negative: launched early)
  resolve  its first CTA past the PDL wait minus the previous kernel's last end
  weights  the latest CTA's weights landing minus its wait (positive: the copy was late)
  work     its last end minus its first CTA past the wait
  inputs   the latest CTA's activations read, minus its wait (an L2 round trip or two)
  MHz      SM clock cycles over nanoseconds, all CTAs
and, per kind, its late CTAs: those that start after the previous kernel's last end (no room on
an SM earlier; for the attention kernel a whole cluster), with their median start-to-wait time
and the median end of late and of early CTAs after the previous kernel's end: a kernel ends with
its late CTAs when they end last.
Under tensor parallelism each rank writes FILE.rank0, FILE.rank1, ...: a rank's o_proj and down
run as the gemv that pushes its rows, with the sum over the ranks after each, outside the trace;
their slots stay empty, and gate_up's and the next q/k/v's spans include them."""
import collections
import sys

KINDS = ["qkv", "attention", "o_proj", "gate_up", "down"]  # a layer's slots in chain order


def main():
    try:
        lines = open(sys.argv[1]).readlines()
    except FileNotFoundError:
        sys.exit(f"{sys.argv[1]}: no trace was written: the traced step did not take the fused kernels "
                 "(nvllm's log says why)")
    ks = collections.defaultdict(list)
    for line in lines:
        k, cta, sm, s, w, g, e, p1, p2, p3, inp, cyc = map(int, line.split())
        ks[k].append((s, w, g, e, sm, p1, p2, p3, inp, cyc))
    order = sorted(ks)
    stats = collections.defaultdict(lambda: collections.defaultdict(list))
    late_ctas = collections.defaultdict(lambda: collections.defaultdict(list))
    prev_end = None
    for k in order:
        rows = ks[k]
        first_start = min(r[0] for r in rows)
        first_wait = min(r[1] for r in rows)
        last_end = max(r[3] for r in rows)
        late = max(r[2] - r[1] for r in rows)
        if prev_end is not None and k >= 1:
            st = stats[KINDS[k % 5]]
            st["span"].append(last_end - prev_end)
            st["launch"].append(first_start - prev_end)
            st["resolve"].append(first_wait - prev_end)
            st["weights"].append(late)
            st["work"].append(last_end - first_wait)
            st["ctas"].append(len(rows))
            st["sms"].append(len(set(r[4] for r in rows)))
            st["inputs"].append(max(r[8] - r[1] for r in rows))
            st["MHz"].append(1e3 * sum(r[9] for r in rows) / max(1, sum(r[3] - r[0] for r in rows)))
            for r in rows:
                if r[0] > prev_end:
                    late_ctas[KINDS[k % 5]]["to_wait"].append(r[1] - r[0])
                    late_ctas[KINDS[k % 5]]["end"].append(r[3] - prev_end)
                else:
                    late_ctas[KINDS[k % 5]]["early_end"].append(r[3] - prev_end)
            late_ctas[KINDS[k % 5]]["ctas"].append(len(rows))
        prev_end = last_end
    total = max(max(r[3] for r in ks[k]) for k in order) - min(min(r[0] for r in ks[k]) for k in order)
    print(f"{len(order)} kernels, {total / 1000:.1f} us from the first CTA start to the last end")
    print(f"{'kernel':10s} {'span':>7s} {'launch':>7s} {'resolve':>7s} {'weights':>7s} {'work':>7s} {'ctas':>5s} {'sms':>5s} {'inputs':>7s} {'MHz':>6s}   (us, mean over kernels after the first)")
    # Inside the attention kernel: weights -> qkv dots + cluster sync (split plans: the q/k/v rows
    # read, the cluster sync) -> gather, RoPE, cache write -> attention over the split, merges,
    # cluster sync -> final merge, cluster sync.
    att = [k for k in order if k % 5 == 1 and k >= 5]
    if att and ks[att[0]][0][5] >= 0:
        ph = [0.0] * 4
        for k in att:
            rows = ks[k]
            n = len(rows)
            ph[0] += sum(r[5] - r[2] for r in rows) / n
            ph[1] += sum(r[6] - r[5] for r in rows) / n
            ph[2] += sum(r[7] - r[6] for r in rows) / n
            ph[3] += sum(r[3] - r[7] for r in rows) / n
        ph = [p / len(att) / 1e3 for p in ph]
        print(f"attention after its weights (us): dots + sync {ph[0]:.2f}, gather + rope + cache {ph[1]:.2f}, "
              f"attention + merge + sync {ph[2]:.2f}, final merge + sync {ph[3]:.2f}")
    for kind in KINDS:
        st = stats[kind]
        if not st["span"]:
            continue  # no q/k/v kernel: the attention kernel holds its rows
        mean = lambda key: sum(st[key]) / len(st[key]) if st[key] else float("nan")
        print(f"{kind:10s} {mean('span') / 1e3:7.2f} {mean('launch') / 1e3:7.2f} {mean('resolve') / 1e3:7.2f} "
              f"{mean('weights') / 1e3:7.2f} {mean('work') / 1e3:7.2f} {mean('ctas'):5.0f} {mean('sms'):5.0f} "
              f"{mean('inputs') / 1e3:7.2f} {mean('MHz'):6.0f}")
    median = lambda v: sorted(v)[len(v) // 2] / 1e3 if v else float("nan")
    for kind in KINDS:
        lt = late_ctas[kind]
        if not lt["ctas"]:
            continue
        share = len(lt["to_wait"]) / max(1, sum(lt["ctas"]))
        if not lt["to_wait"]:
            print(f"{kind:10s} late CTAs none (CTAs end {median(lt['early_end']):.2f} us after the previous kernel)")
            continue
        print(f"{kind:10s} late CTAs {100 * share:4.1f}%: start to wait {median(lt['to_wait']):.2f} us, "
              f"end {median(lt['end']):.2f} us after the previous kernel (early CTAs {median(lt['early_end']):.2f})")


if __name__ == "__main__":
    main()
