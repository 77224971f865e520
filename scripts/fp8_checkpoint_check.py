#!/usr/bin/env python3
"""An FP8 checkpoint as published, on the GPU machine (issue 21): a block-scaled E4M3 checkpoint
written with torch and safetensors the way Qwen3-*-FP8 are (`F8_E4M3` projection weights, a
float32 `weight_scale_inv` for every 128 x 128 block, `quantization_config` {quant_method fp8,
weight_block_size [128, 128]} in config.json; embedding, norms and LM head bf16), and its
dequantised reference: the same model with each projection weight replaced by codes * scale
(float32) rounded to bf16, saved as an ordinary bf16 checkpoint.

  1. `nvllm generate --device cuda` on both, greedy, 64 tokens for each of N prompts with the
     top-20 log-probabilities. The CUDA runner holds the FP8 file's projections as E4M3 with one
     scale per output channel, re-quantised on the GPU from the dequantised bf16 weights (it has no
     block-scaled kernels), which is what `--quantization fp8` does to the reference: those two
     runs must agree in every token and every log-probability (the file is read as its dequantised
     weights, then takes the FP8 path), and the log must say it re-quantised.
  2. Quality of that second rounding (issue 21's bar for FP8 weights: greedy continuations equal to
     the bf16 run's on >= 85% of the prompts): the FP8 file against the reference in bf16, and
     against transformers in fp32 on the reference's weights.

The checkpoints are hf_parity.py's random-weight models with a planted signal (fixed strength).
Usage (GPU machine): python3 scripts/fp8_checkpoint_check.py --nvllm build/bin/nvllm --out DIR
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_parity  # noqa: E402  (the checkpoint builder and runners)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BLOCK = 128
E4M3_MAX = 448.0


def quantize_block(w):
    """E4M3 codes of w [out, in] with one float32 scale per 128 x 128 block (the last ones
    partial), as fp8 checkpoints hold them: scale = amax(block) / 448, code = e4m3(w / scale)."""
    import torch
    rows, cols = w.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    padded = torch.zeros(br * BLOCK, bc * BLOCK, dtype=torch.float32, device=w.device)
    padded[:rows, :cols] = w.float()
    blocks = padded.view(br, BLOCK, bc, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    expanded = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    codes = (w.float() / expanded).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, scale.contiguous(), codes.float() * expanded


def build(arch, strength, args):
    """Writes <work>/<arch>_fp8 and <work>/<arch>_ref; returns the reference model (bf16 weights)."""
    import torch
    from safetensors.torch import save_file
    model, embed, head, perm = hf_parity.build_base(arch, args.init_std, args.logit_scale, args.seed)
    hf_parity.plant(model, embed, head, perm, strength)
    model = model.to(torch.bfloat16)
    scales = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.split(".")[-1] in PROJECTIONS:
                codes, scale, dequantised = quantize_block(module.weight)
                module.weight.copy_(dequantised.to(torch.bfloat16))
                scales[name] = (codes, scale)
    ref_dir = os.path.join(args.work, f"{arch}_ref")
    fp8_dir = os.path.join(args.work, f"{arch}_fp8")
    for d in (ref_dir, fp8_dir):
        shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(ref_dir, safe_serialization=True)
    tok_dir = hf_parity.tokenizer_dir(args.testdata, arch)
    for d in (ref_dir, fp8_dir):
        os.makedirs(d, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, f), d)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    for name, (codes, scale) in scales.items():
        state[f"{name}.weight"] = codes.cpu()
        state[f"{name}.weight_scale_inv"] = scale.cpu()
    save_file(state, os.path.join(fp8_dir, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(ref_dir, "config.json")))
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK], "fmt": "e4m3"}
    json.dump(config, open(os.path.join(fp8_dir, "config.json"), "w"), indent=1)
    return model, fp8_dir, ref_dir


def check(arch, strength, args, log):
    import torch
    model, fp8_dir, ref_dir = build(arch, strength, args)
    prompts = hf_parity.make_prompts(args.num_prompts, args.seed + 1)
    start = log.tell()
    fp8, _ = hf_parity.run_nvllm(args.nvllm, fp8_dir, prompts, args.max_tokens, [], log)
    log.flush()
    with open(log.name) as f:
        f.seek(start)
        requantised = "re-quantised on the GPU" in f.read()
    ref_q, _ = hf_parity.run_nvllm(args.nvllm, ref_dir, prompts, args.max_tokens, ["--quantization", "fp8"], log)
    ref, _ = hf_parity.run_nvllm(args.nvllm, ref_dir, prompts, args.max_tokens, [], log)
    reference = model.to(torch.float32).eval()
    hf_tokens = hf_parity.hf_greedy(reference, prompts, args.max_tokens)
    return {"arch": arch, "planted": strength, "num_prompts": len(prompts), "max_tokens": args.max_tokens,
            "log_says_requantised": requantised,
            "fp8_file_equals_reference_quantization_fp8_tokens":
                sum(a["token_ids"] == b["token_ids"] for a, b in zip(fp8, ref_q)),
            "fp8_file_equals_reference_quantization_fp8_logprobs":
                sum(a.get("logprobs") == b.get("logprobs") for a, b in zip(fp8, ref_q)),
            "fp8_file_equals_reference_bf16_tokens": sum(a["token_ids"] == b["token_ids"] for a, b in zip(fp8, ref)),
            "fp8_file_equals_transformers_fp32": sum(a["token_ids"] == b for a, b in zip(fp8, hf_tokens))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    hf_parity.add_common_args(ap)
    ap.add_argument("--work", default="/tmp/nvllm_fp8_ckpt")
    ap.add_argument("--arch", default="qwen3:64", help="arch:strength pairs (hf_parity's choices)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    results = []
    with open(os.path.join(args.out or args.work, "fp8_checkpoint_log.txt"), "w") as log:
        for pair in args.arch.split(","):
            arch, strength = pair.split(":")
            r = check(arch, float(strength), args, log)
            results.append(r)
            print(json.dumps(r), flush=True)
    if args.out:
        with open(os.path.join(args.out, "fp8_checkpoint.json"), "w") as f:
            json.dump(results, f, indent=1)
    ok = all(r["log_says_requantised"]
             and r["fp8_file_equals_reference_quantization_fp8_tokens"] == r["num_prompts"]
             and r["fp8_file_equals_reference_quantization_fp8_logprobs"] == r["num_prompts"]
             and r["fp8_file_equals_reference_bf16_tokens"] >= 0.85 * r["num_prompts"]
             and r["fp8_file_equals_transformers_fp32"] >= 0.85 * r["num_prompts"] for r in results)
    print("FP8 CHECKPOINT", "PASS" if ok else "FAIL",
          "(the FP8 file = its dequantised weights with --quantization fp8 in every token and log-probability;"
          " >= 85% of greedy continuations = the bf16 run and transformers fp32)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
