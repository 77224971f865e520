#!/usr/bin/env bash
# Sets up (packages + build), then runs every test through CTest. GPU tests report
# "skipped" on a machine without a GPU. Then scripts/test_hardening.sh: the CPU tests again under
# ASan + UBSan and a smoke run of every fuzz target (NVLLM_SKIP_HARDENING=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
(cd "$build_dir" && ctest --output-on-failure -j "$(nproc)" "$@")
[[ ${NVLLM_SKIP_HARDENING:-0} == 1 ]] || scripts/test_hardening.sh
