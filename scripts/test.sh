#!/usr/bin/env bash
# Sets up (packages + build), then runs every test through CTest. GPU tests report
# "skipped" on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@"
