#!/usr/bin/env bash
# The GPU tests under compute-sanitizer, one tool a run, for the GPU machine (issue 24). Binaries
# come from the full CUDA build carried in .device/bin, as for scripts/gpu_session.sh; each tool's
# whole log goes to $OUT/cs_<tool>.log, and one summary line a tool to stdout and $OUT/summary.txt:
#   gpu_sanitize: memcheck: 0 errors; leaks: 0 bytes in 0 allocations | doctest: 18 passed, 0 failed | exit 0 | 212 s
# Usage: scripts/gpu_sanitize.sh [TOOL...]     TOOL: memcheck racecheck synccheck (default: all three)
#   PARALLEL=1 runs the tools at the same time (one device call for all three).
#   BIN (.device/bin), OUT (/tmp/nvllm_out), COMPUTE_SANITIZER, MEMCHECK_API_ERRORS (below), and per tool <TOOL>_TC / <TOOL>_TCE / <TOOL>_TIME_S
#   (e.g. RACECHECK_TC='gpu.kernels.gemv*' RACECHECK_TIME_S=300) override the defaults below;
#   <TOOL>_SC narrows the cases to their doctest subcases of those names (the fused decode cases
#   name one a layer shape: RACECHECK_TC='*decode_fused streams*' RACECHECK_SC='TinyLlama'), so that
#   a case too slow for one run under racecheck goes in pieces, each with its own OUT.
# Exit status: 0 when every tool ran to the end with no error, hazard or failed test; 1 otherwise.
#
# Which test cases each tool runs (doctest -tc / -tce filters), and why:
#   memcheck   every GPU test but the timing cases (bench.*, gpu.bench.*), with --leak-check full:
#              out-of-bounds and misaligned accesses, uninitialised reads, leaked device memory.
#   racecheck  the kernel tests only: gpu.kernels.* and gpu.sampling.* (each kernel on its own,
#              shared-memory hazards). Racecheck instruments every shared-memory access and runs
#              the runner tests' thousands of launches of the same kernels 100x slower for nothing
#              new, so gpu.cuda_runner.* is left out. Cluster (distributed) shared memory of the
#              fused decode kernels is outside what racecheck tracks; memcheck and the runner
#              tests' comparisons against the CPU runner cover those.
#   synccheck  every GPU test but the timing cases: __syncthreads / cluster barriers reached by
#              only part of a block, and invalid barrier use.
# Time limits: each tool stops after <TOOL>_TIME_S seconds (default 420: one tool fits one
# device-tool call of 600 s with the start-up; run the tools in separate calls), which counts as a
# failure ("timed out") with the log so far kept.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/nvllm_out}
bin=${BIN:-.device/bin}
mkdir -p "$out"
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[[ -x $cs ]] || { echo "gpu_sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 1; }
[[ -x $bin/nvllm_gpu_tests ]] || { echo "gpu_sanitize: $bin/nvllm_gpu_tests not found (set BIN)" >&2; exit 1; }

# The sanitizer's own summary lines ("ERROR SUMMARY: 0 errors", memcheck's "LEAK SUMMARY: ...",
# racecheck's "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"), joined by "; ".
tool_counts() {
  local found
  found=$(grep -oE '(ERROR|LEAK|RACECHECK) SUMMARY: .*' "$1" | paste -sd ';' | sed 's/;/; /g')
  echo "${found:-no SUMMARY line from compute-sanitizer}"
}

# "[doctest] test cases: 18 | 18 passed | 0 failed | 3 skipped" -> "18 passed, 0 failed".
doctest_counts() {
  grep -E '^\[doctest\] test cases:' "$1" | tail -1 |
    sed -E 's/.*\| *([0-9]+) passed *\| *([0-9]+) failed.*/\1 passed, \2 failed/' | grep . || echo "no doctest result"
}

run_tool() {
  local tool=$1 upper extra=() tc tce="bench.*,gpu.bench.*" limit log start rc
  upper=$(echo "$tool" | tr a-z A-Z)
  case $tool in
    memcheck)
      tc="gpu.*"
      extra=(--leak-check full)
      # MEMCHECK_API_ERRORS=no: leave out the report of CUDA calls that returned an error. The
      # tensor-parallel cases need it: NCCL probes kernels built for other GPUs and enables peer
      # access that the peer-memory sum enabled first, and handles both (3,240 such reports, no
      # memory error). Our own calls are checked by CUDA_CHECK: one that fails fails its test.
      [[ -n ${MEMCHECK_API_ERRORS:-} ]] && extra+=(--report-api-errors "$MEMCHECK_API_ERRORS")
      ;;
    racecheck) tc="gpu.kernels.*,gpu.sampling.*" ;;
    synccheck) tc="gpu.*" ;;
    *) echo "gpu_sanitize: unknown tool $tool (memcheck, racecheck, synccheck)" >&2; return 1 ;;
  esac
  local tc_var="${upper}_TC" tce_var="${upper}_TCE" time_var="${upper}_TIME_S" sc_var="${upper}_SC" sc=()
  tc=${!tc_var:-$tc}
  tce=${!tce_var:-$tce}
  [[ -n ${!sc_var:-} ]] && sc=(-sc="${!sc_var}")
  limit=${!time_var:-420}
  log="$out/cs_$tool.log"
  start=$(date +%s)
  timeout -k 15 "$limit" "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 \
    "$bin/nvllm_gpu_tests" -tc="$tc" -tce="$tce" "${sc[@]}" >"$log" 2>&1
  rc=$?
  local how="exit $rc"
  ((rc == 124 || rc == 137)) && how="timed out after $limit s (exit $rc)"
  local tests
  tests=$(doctest_counts "$log")
  echo "gpu_sanitize: $tool ($tc${sc:+ ${sc[*]}}): $(tool_counts "$log") | doctest: $tests | $how | $(($(date +%s) - start)) s" |
    tee -a "$out/summary.txt"
  ((rc == 0)) && [[ $tests =~ ^[1-9][0-9]*\ passed,\ 0\ failed$ ]]
}

tools=("$@")
((${#tools[@]})) || tools=(memcheck racecheck synccheck)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$out/summary.txt" 2>&1
status=0
if [[ ${PARALLEL:-0} == 1 ]]; then
  # All tools at once on the one GPU (each test binary takes little of its memory; the sanitizers
  # are bound by the host's cores): one device call instead of one a tool.
  pids=()
  for tool in "${tools[@]}"; do
    run_tool "$tool" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
else
  for tool in "${tools[@]}"; do
    run_tool "$tool" || status=1
  done
fi
exit $status
