#!/usr/bin/env bash
# The hardening half of CI (issue 24), run by scripts/test.sh after the normal tests:
#   1. the CPU test suite (unit tests and CLI scripts) built with ASan + UBSan in build-asan/
#      (clang, CPU only; any sanitizer report fails the test that triggered it);
#   2. a smoke run of every libFuzzer target (fuzz/*_fuzz.cpp) from the same build,
#      FUZZ_SECONDS each (default 60), both cores in parallel.
# Usage: scripts/test_hardening.sh   (ASAN_BUILD_DIR, FUZZ_SECONDS, JOBS from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ASAN_BUILD_DIR:-build-asan}
jobs=${JOBS:-$(nproc)}

# -g makes ccache hash the build folder unless told not to: a clean clone (CI) then reuses what
# an earlier build of the same sources compiled.
export CCACHE_NOHASHDIR=true
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DNVLLM_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNVLLM_SANITIZE=ON -DNVLLM_FUZZ=ON >/dev/null
cmake --build "$build_dir" -j "$jobs" --target nvllm nvllm_tests nvllm_fuzz

# detect_leaks: a leak is a bug too. halt_on_error: the first report ends the test, non-zero.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
command -v llvm-symbolizer >/dev/null || export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-14
# The unit tests in one process: under ASan, ctest's process per test case reloads the 11 MB
# tokenizer.json files in each (983 s of ctest for everything, against 99 s in one process here).
"$build_dir/bin/nvllm_tests"
# The CLI scripts, but the two longest (many generate runs each, 842 of those 983 s), which run in
# the normal build only.
(cd "$build_dir" && ctest --output-on-failure -j "$jobs" -R '^cli\.' -E 'cli\.(generate_kill_test|inspect_cache_test)')

SMOKE=1 JOBS=$jobs OUT_DIR="$build_dir/fuzz-out" scripts/fuzz.sh "$build_dir" "${FUZZ_SECONDS:-60}"
echo "test_hardening: sanitizer tests and fuzz smoke runs passed"
