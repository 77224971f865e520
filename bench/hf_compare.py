#!/usr/bin/env python3
"""nvllm bench throughput against Hugging Face transformers on the same workload, in one run
(GPU machine: torch + transformers, no network).

Makes a random-weight checkpoint of an architecture with transformers (default: the Qwen3-0.6B
shape), writes a workload of random-token prompts as JSONL (lengths uniform in the given
ranges, ignore_eos, fixed output lengths per request), runs `nvllm bench throughput --input` on
it, then transformers' generate() on the same prompts in batches (left padding, greedy or
sampled like the workload, each batch generating its longest request; only the tokens each
request asked for are counted), and prints both throughputs and their ratio.

Example:
  python3 bench/hf_compare.py --nvllm build/bin/nvllm --num-prompts 256 --input-len 100:1024 \\
      --output-len 100:1024 --hf-batch 64
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch


def qwen3_0_6b():
    import transformers
    cfg = transformers.Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=151643, eos_token_id=151645)
    return cfg, transformers.Qwen3ForCausalLM


def length(spec, rng):
    lo, _, hi = spec.partition(":")
    return rng.randint(int(lo), int(hi or lo))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvllm", default="build/bin/nvllm")
    ap.add_argument("--work", default="/tmp/nvllm_hf_compare")
    ap.add_argument("--tokenizer", default="testdata/tokenizers/qwen3")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", default="100:1024")
    ap.add_argument("--output-len", default="100:1024")
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--hf-batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="folder for compare.json")
    args = ap.parse_args()

    os.makedirs(args.work, exist_ok=True)
    cfg, cls = qwen3_0_6b()
    torch.manual_seed(args.seed)
    model = cls(cfg).to(torch.bfloat16)
    model.save_pretrained(args.work, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(args.tokenizer, f), "rb") as src, open(os.path.join(args.work, f), "wb") as dst:
            dst.write(src.read())

    rng = random.Random(args.seed)
    requests = []
    for _ in range(args.num_prompts):
        n_in = length(args.input_len, rng)
        n_out = length(args.output_len, rng)
        requests.append({"prompt_token_ids": [rng.randrange(10000) for _ in range(n_in)], "max_tokens": n_out,
                         "ignore_eos": True, "temperature": args.temperature, "seed": rng.randrange(1 << 30)})
    workload = os.path.join(args.work, "workload.jsonl")
    with open(workload, "w") as f:
        for i, r in enumerate(requests):
            f.write(json.dumps({"id": i, **r}) + "\n")
    output_tokens = sum(r["max_tokens"] for r in requests)

    report = os.path.join(args.work, "nvllm_bench.json")
    cmd = [args.nvllm, "bench", "throughput", "--model", args.work, "--input", workload, "--output-json", report]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    ours = json.load(open(report))

    model = model.cuda().eval()
    order = sorted(range(len(requests)), key=lambda i: len(requests[i]["prompt_token_ids"]))
    torch.cuda.synchronize()
    start = time.time()
    with torch.no_grad():
        for b in range(0, len(order), args.hf_batch):
            chunk = [requests[i] for i in order[b:b + args.hf_batch]]
            width = max(len(r["prompt_token_ids"]) for r in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(chunk):
                p = r["prompt_token_ids"]
                ids[i, width - len(p):] = torch.tensor(p)
                mask[i, width - len(p):] = 1
            new = max(r["max_tokens"] for r in chunk)
            model.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), do_sample=args.temperature > 0,
                           temperature=args.temperature if args.temperature > 0 else None, top_k=None, top_p=None,
                           max_new_tokens=new, min_new_tokens=new, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize()
    hf_seconds = time.time() - start
    hf_tps = output_tokens / hf_seconds
    result = {"device": torch.cuda.get_device_name(), "num_prompts": args.num_prompts, "input_len": args.input_len,
              "output_len": args.output_len, "output_tokens": output_tokens,
              "nvllm_output_tokens_per_s": ours["output_tokens_per_s"], "nvllm_seconds": ours["elapsed_s"],
              "hf_output_tokens_per_s": hf_tps, "hf_seconds": hf_seconds, "hf_batch": args.hf_batch,
              "ratio": ours["output_tokens_per_s"] / hf_tps, "nvllm_command": " ".join(cmd)}
    print(json.dumps(result, indent=1))
    print(f"nvllm {ours['output_tokens_per_s']:.0f} tok/s, transformers {hf_tps:.0f} tok/s: "
          f"{result['ratio']:.1f}x")
    if args.out:
        with open(os.path.join(args.out, "compare.json"), "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
