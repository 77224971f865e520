#!/usr/bin/env bash
# Runs the libFuzzer targets of a -DNVLLM_FUZZ=ON build, each for SECONDS, JOBS at a time, from a
# copy of its seed corpus in testdata/fuzz/<target>/ (the seeds are not changed). Exits non-zero
# when a target crashes, leaks, times out or runs out of memory; the input that did it is left in
# OUT_DIR (default BUILD_DIR/fuzz-out/) with the target's log.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]      (JOBS, OUT_DIR, CORPUS_DIR from the environment;
#        CORPUS_DIR keeps each target's growing corpus in CORPUS_DIR/<target> across runs)
#   CI smoke:  SMOKE=1 scripts/fuzz.sh build-asan 60   (SMOKE=1: seed 1 and a fixed number of runs a
#              target, about SECONDS each at ASan speed, SECONDS x 2 at most: the same inputs on every
#              machine, so CI passes or fails on the code, not on the luck of the draw)
#   long run:  JOBS=1 scripts/fuzz.sh build-asan 3600 request_fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in fuzz/*_fuzz.cpp; do
    t=$(basename "$f" .cpp)
    # Only chat_template_fuzz may be missing: CMake leaves it out until lib/chat has its engine.
    if [[ $t == chat_template_fuzz && ! -x $build_dir/bin/$t ]]; then
      echo "fuzz: $t skipped (no chat template engine in this tree)"
      continue
    fi
    targets+=("$t")
  done
fi
jobs=${JOBS:-$(nproc)}
out=$(realpath -m "${OUT_DIR:-$build_dir/fuzz-out}")
mkdir -p "$out"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/nvllm-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# Runs a target makes in about 60 s under ASan on one core of the CI machine (measured rates).
smoke_runs() {
  case $1 in
    config_fuzz) echo 1000000 ;; tokenizer_fuzz) echo 500000 ;; request_fuzz) echo 300000 ;;
    chat_template_fuzz) echo 250000 ;; checkpoint_fuzz) echo 200000 ;; *) echo 100000 ;;
  esac
}

run_one() {
  local t=$1 bin="$build_dir/bin/$1"
  local limits=(-max_total_time="$seconds")
  [[ ${SMOKE:-0} == 1 ]] && limits=(-seed=1 -runs="$(smoke_runs "$t")" -max_total_time="$((seconds * 2))")
  [[ -x $bin ]] || { echo "fuzz: $bin not built (cmake -DNVLLM_FUZZ=ON, build target nvllm_fuzz)" >&2; return 1; }
  local corpus=${CORPUS_DIR:-$scratch}/$t
  mkdir -p "$corpus"
  cp -r "testdata/fuzz/$t/." "$corpus/"
  # TMPDIR: the targets that read files write their inputs there (fuzz/fuzz_util.h).
  if TMPDIR=$scratch "$bin" "$corpus" "${limits[@]}" -timeout=20 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$out/$t-" >"$out/$t.log" 2>&1; then
    echo "fuzz: $t ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" | grep -o '[0-9]*$') runs"
  else
    echo "fuzz: $t FAILED; see $out/$t.log and $out/$t-*" >&2
    tail -40 "$out/$t.log" >&2
    return 1
  fi
}

export build_dir seconds out scratch CORPUS_DIR SMOKE
export -f run_one smoke_runs
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}
