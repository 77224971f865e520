#!/usr/bin/env bash
# Installs what nvllm needs (Debian packages; idempotent) and builds it in Release into build/.
# Usage: scripts/setup.sh            (BUILD_DIR and BUILD_TYPE may be set in the environment)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache git pkg-config
          libcli11-dev nlohmann-json3-dev doctest-dev libxxhash-dev libpcre2-dev
          libutf8proc-dev
          parallel python3-yaml
          clang libclang-rt-14-dev llvm)  # the last three: sanitizer and fuzz builds (scripts/test_hardening.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build_dir=${BUILD_DIR:-build}
if [[ ! -x "$(command -v nvcc)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
jobs=$(nproc)
cmake --build "$build_dir" -j "$jobs"
echo "setup: built $build_dir/bin/nvllm"
