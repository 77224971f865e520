#!/usr/bin/env python3
"""Quality of FP8 against bf16, on the GPU machine (issue 21): the same random-weight checkpoints
with a planted signal that scripts/hf_parity.py builds (fixed strength S, no search), run by
`nvllm generate --device cuda` in bf16 and with one FP8 switch: `--what kv` the FP8 KV cache
(--kv-cache-dtype fp8; bound: mean KL <= 0.01 nats), `--what weights` FP8 weights
(--quantization fp8; bound: mean KL <= 0.03 nats); both need >= 85% identical continuations.

  1. Greedy agreement: 64 greedy tokens for each of N prompts with each setting; the prompts
     whose continuations are identical.
  2. Teacher-forced KL: along the bf16 run's continuation, the next-token distribution of both
     settings at every position k, given the prompt + the bf16 tokens before k (one request per
     position, max_tokens 1, top-20 log-probabilities; the prefix cache makes the shared prefixes
     cheap, and an FP8 run reuses FP8 blocks, as it would in use). Mean over positions of
     KL(bf16 || fp8) = sum_i p_i (log p_i - log q_i) over the bf16 run's top 20 tokens; a token
     missing from the fp8 run's top 20 gets its 20th log-probability (an upper bound on q_i, so
     that term is under-counted). The top-20 mass of the bf16 run is reported beside it: when it
     is ~1 the truncation does not matter.

Usage (GPU machine): python3 scripts/fp8_quality.py --nvllm build/bin/nvllm --what kv,weights --out DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (the checkpoint builder)


# What each --what compares with bf16: its flags and its bound on the mean KL (nats a token).
SETTINGS = {"kv": (["--kv-cache-dtype", "fp8"], 0.01), "weights": (["--quantization", "fp8"], 0.03)}


def run(nvllm, model_dir, rows, setting, name, log, extra=()):
    flags = (SETTINGS[setting][0] if setting != "bf16" else []) + list(extra)
    return hf_parity.run_requests(nvllm, model_dir, rows, f"{name}.jsonl", f"{name}_{setting}_out.jsonl", flags, log)


def top(row):
    """The first generated token's top-20 as {token id: logprob}."""
    return {t["token_id"]: t["logprob"] for t in row["logprobs"]["top_logprobs"][0]}


def kl_top20(p_top, q_top):
    floor = min(q_top.values())
    kl = 0.0
    for tok, lp in p_top.items():
        kl += math.exp(lp) * (lp - q_top.get(tok, floor))
    return kl, sum(math.exp(lp) for lp in p_top.values())


def check(arch, strength, what, args, log):
    work = os.path.join(args.work, arch)
    os.makedirs(work, exist_ok=True)
    model, embed, head, perm = hf_parity.build_base(arch, args.init_std, args.logit_scale, args.seed)
    hf_parity.plant(model, embed, head, perm, strength)
    import torch
    model.to(torch.bfloat16).save_pretrained(work, safe_serialization=True)
    del model, embed, head
    torch.cuda.empty_cache()
    tok_dir = hf_parity.tokenizer_dir(args.testdata, arch)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        subprocess.run(["cp", os.path.join(tok_dir, f), work], check=True)

    prompts = hf_parity.make_prompts(args.num_prompts, args.seed + 1)
    greedy = [{"id": i, "prompt_token_ids": p, "max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0}
              for i, p in enumerate(prompts)]
    out = {}
    secs = {}
    for dt in ("bf16", what):
        out[dt], secs[dt] = run(args.nvllm, work, greedy, dt, "greedy", log, args.greedy_flags.split())
    tokens = {dt: [r["token_ids"] for r in out[dt]] for dt in out}
    identical = sum(a == b for a, b in zip(tokens["bf16"], tokens[what]))
    same_tokens = sum(x == y for a, b in zip(tokens["bf16"], tokens[what]) for x, y in zip(a, b))

    # Teacher forcing along the bf16 continuations.
    forced, i = [], 0
    for p, cont in zip(prompts, tokens["bf16"]):
        for k in range(len(cont)):
            forced.append({"id": i, "prompt_token_ids": p + cont[:k], "max_tokens": 1, "ignore_eos": True,
                           "temperature": 0, "logprobs": 20})
            i += 1
    tf = {}
    for dt in ("bf16", what):
        tf[dt], secs[f"forced_{dt}"] = run(args.nvllm, work, forced, dt, "forced", log)
    kls, masses, agree = [], [], 0
    for a, b in zip(tf["bf16"], tf[what]):
        kl, mass = kl_top20(top(a), top(b))
        kls.append(kl)
        masses.append(mass)
        agree += a["token_ids"][0] == b["token_ids"][0]
    return {"what": what, "arch": arch, "planted": strength, "greedy_flags": args.greedy_flags, "num_prompts": len(prompts), "max_tokens": args.max_tokens,
            "greedy_identical": identical, "greedy_tokens_equal": same_tokens,
            "greedy_tokens_total": sum(len(t) for t in tokens["bf16"]),
            "teacher_forced_positions": len(kls), "kl_mean": sum(kls) / len(kls), "kl_max": max(kls),
            "top20_mass_min": min(masses), "top20_mass_mean": sum(masses) / len(masses),
            "teacher_forced_argmax_equal": agree, "seconds": {k: round(v, 2) for k, v in secs.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    hf_parity.add_common_args(ap)
    ap.add_argument("--work", default="/tmp/nvllm_fp8")
    ap.add_argument("--arch", default="qwen3:64,llama:16", help="arch:strength pairs (hf_parity's choices)")
    ap.add_argument("--what", default="kv,weights", help="kv (FP8 KV cache), weights (FP8 weights), or both")
    ap.add_argument("--greedy-flags", default="",
                    help="nvllm flags for both greedy runs: '--max-num-seqs 1' sends every decode step "
                         "through the batch-1 (fused) kernels")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    results = []
    with open(os.path.join(args.out or args.work, "fp8_quality_log.txt"), "w") as log:
        for what in args.what.split(","):
            for pair in args.arch.split(","):
                arch, strength = pair.split(":")
                r = check(arch, float(strength), what, args, log)
                r["kl_bound"] = SETTINGS[what][1]
                results.append(r)
                print(json.dumps(r), flush=True)
    if args.out:
        with open(os.path.join(args.out, "fp8_quality.json"), "w") as f:
            json.dump(results, f, indent=1)
    ok = all(r["kl_mean"] <= r["kl_bound"] and r["greedy_identical"] >= 0.85 * r["num_prompts"] for r in results)
    print("FP8 QUALITY", "PASS" if ok else "FAIL",
          "(mean KL <= 0.01 nats for the KV cache, 0.03 for weights; >= 85% identical continuations)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
