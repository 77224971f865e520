#!/usr/bin/env bash
# The binary is one file to copy to a node (issue 22): what it loads at start is the C library's
# parts and, in a CUDA build, cuBLAS/cuBLASLt (the toolkit here has no static archive of them).
# libstdc++, libgcc, SentencePiece (read natively) and NCCL (loaded with dlopen by tensor
# parallelism only) must not be among them (what cuBLAS itself loads, libgcc_s, comes with it).
# Also: it starts (--version).
# Usage: bash ldd_test.sh <nvllm binary> <testdata dir>. Exit 77: skipped.
set -euo pipefail

nvllm=$1
[[ -x $nvllm ]] || { echo "$nvllm is not an executable"; exit 1; }
command -v readelf > /dev/null || { echo "readelf not found: skipping"; exit 77; }

# Sanitizer builds keep the C++ runtime dynamic (NVLLM_STATIC_RUNTIME is off there): not this test's.
if grep -qa '__asan_init' "$nvllm"; then
  echo "a sanitizer build: skipping"
  exit 77
fi

# The libraries the binary itself names (readelf's NEEDED; ldd would add what cuBLAS needs in turn).
allowed='^(ld-linux-x86-64\.so|ld-linux-aarch64\.so|libc\.so|libm\.so|libpthread\.so|librt\.so|libdl\.so|libcublas\.so|libcublasLt\.so)'
status=0 count=0
while read -r lib; do
  count=$((count + 1))
  if [[ ! $lib =~ $allowed ]]; then
    echo "FAIL: $nvllm needs $lib at start; only the C library's parts and cuBLAS may be"
    status=1
  fi
done < <(readelf -d "$nvllm" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p')
"$nvllm" --version > /dev/null || { echo "FAIL: $nvllm --version did not run"; status=1; }
((status == 0)) && echo "ldd_test: $count libraries named, all allowed: passed"
exit $status
