#!/usr/bin/env python3
"""Mutation testing: how many small plausible bugs do the CPU tests catch?

Each mutant replaces one exact snippet of one source file (an off-by-one, a dropped check, a
flipped comparison, a skipped update), rebuilds only the test binary of the CPU build
(incremental: one object file and the link), runs the test cases of that area, and restores
the file. A mutant is caught when the tests fail (or time out); it survives when they pass.
A mutant that does not compile is reported as such and not counted.

Usage (from anywhere; the CPU build must exist and be up to date):
  scripts/mutate.py [--build-dir build-cpu] [--only NAME...] [--list] [--check]
The file is restored after every mutant, also on Ctrl-C; do not edit sources while it runs.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Test subsets per area (doctest -tc patterns).
ENGINE = "scheduler*,block manager*,engine*,cpu_runner + engine*,greedy output*,feeder*"
SAMPLER = "cpu_sampler*,a seeded*"
TOKENIZER = "tokenizer*,sentencepiece*,IncrementalDetokenizer*"
REQUEST = "request*,feeder*"
CONFIG = "config*"
SAFETENSORS = "safetensors*,checkpoint*,weights*"
WRITER = "writer*,resume*"
CHAT = "jinja*,chat*"

S = "lib/engine/scheduler.cpp"
B = "lib/engine/block_manager.cpp"
BH = "lib/engine/block_manager.h"
E = "lib/engine/engine.cpp"
CS = "lib/runtime/cpu_sampler.cpp"
BPE = "lib/tokenizer/bpe.cpp"
DT = "lib/tokenizer/detokenizer.cpp"
HF = "lib/tokenizer/hf_tokenizer.cpp"
RQ = "lib/io/request.cpp"
ST = "lib/model/safetensors.cpp"
JW = "lib/io/jsonl_writer.cpp"
RF = "lib/io/request_feeder.cpp"
JO = "lib/chat/jinja_operators.cpp"
JV = "lib/chat/jinja_value.cpp"
JF = "lib/chat/jinja_format.cpp"

# (name, file, snippet, replacement, tests)
MUTANTS = [
    # scheduler
    ("sched-preempt-still-admits", S, "if (!out.preempted) admit_waiting(out, budget);", "admit_waiting(out, budget);", ENGINE),
    ("sched-budget-gt", S, "running_.size() && budget > 0;)", "running_.size() && budget >= 0;)", ENGINE),
    ("sched-prompt-over-budget", S, "if (num_new > budget) {", "if (num_new >= budget) {", ENGINE),
    ("sched-max-num-seqs-le", S, "static_cast<int>(running_.size()) < config_.max_num_seqs", "static_cast<int>(running_.size()) <= config_.max_num_seqs", ENGINE),
    ("sched-no-budget-update", S, "    budget -= num_new;\n  }\n}\n\nvoid Scheduler::preempt", "  }\n}\n\nvoid Scheduler::preempt", ENGINE),
    ("sched-cap-off-by-one", S, "const int cap = (seq.num_tokens() - 1) / bs * bs;", "const int cap = seq.num_tokens() / bs * bs;", ENGINE),
    ("sched-capacity-ge", S, "if (seq->num_tokens() > capacity) {  // cannot", "if (seq->num_tokens() >= capacity) {  // cannot", ENGINE),
    ("sched-free-blocks-ge", S, "} else if (cost > blocks_.num_free_blocks()) {", "} else if (cost >= blocks_.num_free_blocks()) {", ENGINE),
    ("sched-preempt-no-reset", S, "  victim->num_computed = 0;\n", "", ENGINE),
    ("sched-chunk-off-whole", S, "if (!config_.chunked_prefill && num_new <= config_.max_num_batched_tokens) break;", "if (!config_.chunked_prefill && num_new < config_.max_num_batched_tokens) break;", ENGINE),
    ("sched-fork-wait-le", S, "parent->num_computed + parent->num_new < (seq->prompt_len - 1) / bs * bs", "parent->num_computed + parent->num_new <= (seq->prompt_len - 1) / bs * bs", ENGINE),
    # block manager
    ("bm-blocks-for-floor", BH, "return (num_tokens + block_size_ - 1) / block_size_;", "return num_tokens / block_size_;", ENGINE),
    ("bm-can-append-lt", BH, "static_cast<int>(table.blocks.size()) <= num_free_;", "static_cast<int>(table.blocks.size()) < num_free_;", ENGINE),
    ("bm-no-parent-check", B, "if (b.parent_hash != hit.last_hash || !std::equal(", "if (!std::equal(", ENGINE),
    ("bm-cost-shared-free", B, "cost += blocks_[b].ref == 0 ? 1 : 0;", "cost += 0;", ENGINE),
    ("bm-no-evict-uncache", B, "    cached_.erase(b.hash);\n    b.cached = false;", "    b.cached = false;", ENGINE),
    ("bm-hash-count-skip", B, "    table.num_hashed = k + 1;\n", "", ENGINE),
    ("bm-free-ref", B, "if (--b.ref == 0) {", "if (--b.ref <= 1) {", ENGINE),
    # engine
    ("eng-model-len-off", E, "NVLLM_CHECK(prompt_len + 1 <= config.max_model_len,", "NVLLM_CHECK(prompt_len <= config.max_model_len,", ENGINE),
    ("eng-min-tokens-stop-strings", E, "if (reason.empty() && may_stop) {", "if (reason.empty()) {", ENGINE),
    ("eng-min-tokens-gt", E, "const bool may_stop = seq.num_output() >= p.min_tokens;", "const bool may_stop = seq.num_output() > p.min_tokens;", ENGINE),
    ("eng-suppress-le", E, "seq.num_output() < seq.params->min_tokens ? 1 : 0", "seq.num_output() <= seq.params->min_tokens ? 1 : 0", ENGINE),
    ("eng-max-tokens-gt", E, "if (reason.empty() && seq.num_output() >= p.max_tokens) reason", "if (reason.empty() && seq.num_output() > p.max_tokens) reason", ENGINE),
    ("eng-stop-from-off", E, "before >= stop.size() - 1 ? before - (stop.size() - 1) : 0", "before >= stop.size() - 1 ? before - (stop.size() - 2) : 0", ENGINE),
    ("eng-include-stop", E, "seq.text.resize(cut + (p.include_stop_str_in_output ? cut_len : 0));", "seq.text.resize(cut);", ENGINE),
    ("eng-ignore-eos", E, "const bool eos = !p.ignore_eos && contains(config.eos_token_ids, token);", "const bool eos = contains(config.eos_token_ids, token);", ENGINE),
    ("eng-context-cap", E, "p.max_tokens = std::min(p.max_tokens, config.max_model_len - prompt_len);", "p.max_tokens = std::min(p.max_tokens, config.max_model_len - prompt_len + 1);", ENGINE),
    ("eng-cache-limit", E, "NVLLM_CHECK(need <= blocks.num_blocks(), who,", "NVLLM_CHECK(need <= blocks.num_blocks() + 1, who,", ENGINE),
    # sampler
    ("samp-top-p-eq", CS, "if (sum >= target) return order_key(x[id]);", "if (sum > target) return order_key(x[id]);", SAMPLER),
    ("samp-top-k-gt", CS, "d.keep[i] = scaled_logits[i] >= kth;", "d.keep[i] = scaled_logits[i] > kth;", SAMPLER),
    ("samp-min-p-gt", CS, "d.keep[i] = d.keep[i] && d.prob[i] >= floor;", "d.keep[i] = d.keep[i] && d.prob[i] > floor;", SAMPLER),
    ("samp-top-p-skip", CS, "  if (top_p < 1.0f) {  // on exp(x - m)", "  if (top_p < 0.0f) {  // on exp(x - m)", SAMPLER),
    ("samp-argmax-ties", CS, "if (values[i] > values[best]) best", "if (values[i] >= values[best]) best", SAMPLER),
    ("samp-top-k-off-by-one", CS, "tmp.begin() + (top_k - 1), tmp.end()", "tmp.begin() + top_k, tmp.end()", SAMPLER),
    ("samp-rep-penalty-sign", CS, "logits[i] > 0.0f ? logits[i] / r : logits[i] * r", "logits[i] > 0.0f ? logits[i] * r : logits[i] / r", SAMPLER),
    # tokenizers
    ("bpe-merge-rank-order", BPE, "if (a.rank != b.rank) return a.rank > b.rank;", "if (a.rank != b.rank) return a.rank < b.rank;", TOKENIZER),
    ("bpe-merge-pos-order", BPE, "return a.pos > b.pos;", "return a.pos < b.pos;", TOKENIZER),
    ("bpe-last-pair", BPE, "for (size_t i = 0; i + 1 < sym.size(); ++i) {", "for (size_t i = 0; i + 2 < sym.size(); ++i) {", TOKENIZER),
    ("bpe-stale-merge", BPE, "if (now == nullptr || now->result != top.result) continue;", "if (now == nullptr) continue;", TOKENIZER),
    ("detok-replacement", DT, "if (new_text.size() <= prefix_text.size() || ends_with_replacement_char(new_text)) return {};", "if (new_text.size() <= prefix_text.size()) return {};", TOKENIZER),
    ("hf-strip-stop", HF, "for (size_t i = 0; i < stop && end >= begin + c.size()", "for (size_t i = 0; i + 1 < stop && end >= begin + c.size()", TOKENIZER),
    ("hf-added-longest", HF, "return spec_.added[a].content.size() > spec_.added[b].content.size();", "return spec_.added[a].content.size() < spec_.added[b].content.size();", TOKENIZER),
    # parsers
    ("req-top-p-zero", RQ, "if (!(x > 0 && x <= 1)) bad_field(c, \"top_p\"", "if (!(x >= 0 && x <= 1)) bad_field(c, \"top_p\"", REQUEST),
    ("req-min-p-range", RQ, "if (!(x >= 0 && x <= 1)) bad_field(c, \"min_p\"", "if (!(x >= 0 && x < 1)) bad_field(c, \"min_p\"", REQUEST),
    ("req-min-tokens-ge", RQ, "if (r.params.min_tokens > r.params.max_tokens) {", "if (r.params.min_tokens >= r.params.max_tokens) {", REQUEST),
    ("req-empty-stop", RQ, "    if (s.empty()) bad_field(c, \"stop\", kExpected, v);\n", "", REQUEST),
    ("req-int-range", RQ, "if (i < lo || i > hi) bad_field(c, name, expected, v);", "if (i < lo || i > hi + 1) bad_field(c, name, expected, v);", REQUEST),
    ("req-bom", RQ, "if (line_no_ == 1 && text.starts_with(\"\\xEF\\xBB\\xBF\")) text.erase(0, 3);", "", REQUEST),
    ("req-dup-id", RQ, "if (first > 0 && parsed.request) {", "if (false && first > 0 && parsed.request) {", REQUEST),
    ("st-header-len", ST, "NVLLM_CHECK(header_len <= size - 8, file,", "NVLLM_CHECK(header_len <= size, file,", SAFETENSORS),
    ("st-range-check", ST, "NVLLM_CHECK(begin + t.nbytes <= data_size, file,", "NVLLM_CHECK(begin + t.nbytes <= data_size + 1, file,", SAFETENSORS),
    ("st-overlap", ST, "NVLLM_CHECK(a.data + a.nbytes <= b.data, file,", "NVLLM_CHECK(a.data < b.data + 1, file,", SAFETENSORS),
    ("st-nbytes", ST, "NVLLM_CHECK(end - begin == expected, where,", "NVLLM_CHECK(end - begin >= expected, where,", SAFETENSORS),
    ("jw-torn-line", JW, "    if (in.eof()) break;  // no newline after it: an unfinished last line\n", "", WRITER),
    ("jw-ordered-release", JW, "    ++next_index_;\n    write_line(record);\n  }\n}", "    write_line(record);\n  }\n}", WRITER),
    ("feeder-refill-lt", RF, "waiting <= options_.window / 2;", "waiting < options_.window / 2;", REQUEST),
    # the chat template engine's limits
    ("jinja-repeat-empty-loops", JO, "if (n <= 0 || size == 0) {", "if (n <= 0) {", CHAT),
    ("jinja-repeat-cap-off-by-one", JO, "if (static_cast<uint64_t>(n) > kMaxStringBytes / size) {", "if (static_cast<uint64_t>(n) > kMaxStringBytes / size + 1) {", CHAT),
    ("jinja-repeat-drops-safe", JO, "return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));", "return Value(std::move(out));", CHAT),
    ("jinja-string-budget-le", JV, "if (b->bytes_left_ < 0) {", "if (b->bytes_left_ < -1) {", CHAT),
    ("jinja-list-budget-le", JV, "if (b->items_left_ < 0) {", "if (b->items_left_ <= 0) {", CHAT),
    ("jinja-list-uncounted", JV, "  charge_list_items(items.size());\n", "", CHAT),
    ("jinja-in-walk-uncounted", JO, "      charge_list_items(container.size());  // a walk, as iterate's copy\n", "", CHAT),
    ("jinja-hash-float-apart", JF, "    const double d = v.as_float();", "    const double d = v.kind() == Kind::kFloat ? v.as_float() + 0.5 : v.as_float();", CHAT),
]


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def write(path, text):
    with open(os.path.join(ROOT, path), "w") as f:
        f.write(text)


def check(mutants):
    ok = True
    for name, path, find, _, _ in mutants:
        n = read(path).count(find)
        if n != 1:
            print(f"{name}: snippet found {n} times in {path} (must be exactly once)")
            ok = False
    return ok


def build(build_dir):
    r = subprocess.run(["cmake", "--build", build_dir, "--target", "nvllm_tests", "-j2"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def run_tests(build_dir, pattern, timeout):
    try:
        r = subprocess.run([os.path.join(build_dir, "bin", "nvllm_tests"), f"-tc={pattern}", "--minimal"],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        return "caught" if r.returncode != 0 else "SURVIVED"
    except subprocess.TimeoutExpired:
        return "caught (timeout)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build-cpu")
    ap.add_argument("--only", nargs="*", help="mutant names to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--check", action="store_true", help="check that every snippet matches once, and exit")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for one mutant's tests")
    args = ap.parse_args()
    build_dir = os.path.join(ROOT, args.build_dir)
    mutants = [m for m in MUTANTS if not args.only or m[0] in args.only]
    if args.list:
        for name, path, *_ in mutants:
            print(f"{name:32} {path}")
        return 0
    if not check(mutants):
        return 2
    if args.check:
        print(f"{len(mutants)} mutants, every snippet matches once")
        return 0
    ok, log = build(build_dir)
    if not ok:
        print("the unmutated build fails:\n" + log[-3000:])
        return 2
    # Without this every mutant would count as caught.
    patterns = ",".join(sorted({m[4] for m in mutants}))
    if run_tests(build_dir, patterns, args.timeout) != "SURVIVED":
        print(f"the unmutated tests fail: {build_dir}/bin/nvllm_tests -tc='{patterns}'")
        return 2

    current = {}  # path -> original text, while a mutant is applied

    def restore(*_):
        for path, text in current.items():
            write(path, text)
        current.clear()

    signal.signal(signal.SIGINT, lambda *a: (restore(), sys.exit(130)))
    signal.signal(signal.SIGTERM, lambda *a: (restore(), sys.exit(143)))
    results = []
    for name, path, find, replace, tests in mutants:
        start = time.time()
        original = read(path)
        current[path] = original
        try:
            write(path, original.replace(find, replace, 1))
            ok, log = build(build_dir)
            outcome = run_tests(build_dir, tests, args.timeout) if ok else "does not compile"
        finally:
            restore()
        results.append((name, path, outcome))
        print(f"{name:32} {outcome:18} {time.time() - start:5.0f} s", flush=True)
    build(build_dir)  # leave the build matching the sources

    counted = [r for r in results if r[2] != "does not compile"]
    caught = [r for r in counted if r[2].startswith("caught")]
    survivors = [r for r in counted if r[2] == "SURVIVED"]
    print(f"\nmutation score: {len(caught)}/{len(counted)} caught"
          f" ({100.0 * len(caught) / max(1, len(counted)):.1f}%), {len(results) - len(counted)} did not compile")
    for name, path, _ in survivors:
        print(f"  survived: {name} ({path})")
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
