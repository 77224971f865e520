#!/usr/bin/env bash
# nvllm over several hosts with GNU parallel and ssh: one shard per line of HOSTS (an ssh
# login such as gpu-node-3 or user@host, or ":" for this machine), run as `--shard K/N` on a
# host that is free; a failed shard is retried (possibly elsewhere) and continues its own
# output with --resume; then the shards are merged and checked. MODEL, INPUT and OUTDIR must be
# at the same paths on every host (a shared filesystem), and nvllm on each host's PATH (or
# NVLLM set to its path).
#
#   scripts/examples/parallel_hosts.sh HOSTS MODEL INPUT OUTDIR [generate flags...]
set -euo pipefail
hosts=${1:?usage: parallel_hosts.sh HOSTS MODEL INPUT OUTDIR [generate flags...]}
model=${2:?model folder}
input=${3:?input JSONL}
outdir=${4:?output folder}
shift 4
nvllm=${NVLLM:-nvllm}
n=$(grep -c '[^[:space:]]' "$hosts")
mkdir -p "$outdir"
# -j1: one shard at a time per host. -q: the command's words reach nvllm exactly as given here.
seq 0 $((n - 1)) | parallel --sshloginfile "$hosts" -j1 --retries 3 --halt soon,fail=1 -q \
  "$nvllm" generate --model "$model" --input "$input" --output "$outdir/out.jsonl" --shard "{}/$n" --resume "$@"
"$nvllm" merge --input "$input" --output "$outdir/merged.jsonl" "$outdir"/out.*-of-"$n".jsonl
