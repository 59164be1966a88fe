#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/x2-pack.sh - on the CPU machine: what scripts/device/x2-round.sh needs on the GPU machine,
# packed into .x2/ (ignored by git; name it in `carry`). Run from the repository root of the checkout the
# device calls send (docs/RUNBOOK-x2.md):
#   .x2/build.tar.gz      BUILD (default build-x2, Release, sm_90): bin/ without the unit-test binaries,
#                         lib/, the CTest files and CMakeCache.txt (x2-round.sh reads the paths it was
#                         configured at)
#   .x2/prefix.tar.gz     `cmake --install BUILD`: libtpscope, headers, the CMake package (llama-server links it)
#   .x2/llama-src.tar.gz  the pinned llama.cpp source (src/ of scripts/llama/build-llama-server's cache)
# Builds BUILD first (JOBS, default 2). Prints what would travel: the working tree and .x2 together must
# stay under the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-x2}
JOBS=${JOBS:-2}
CACHE=${TPSCOPE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tpscope}
mkdir -p .x2
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  launch=()
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${launch[@]}"
fi
cmake --build "$BUILD" -j"$JOBS"

# The build: everything the gpu and multigpu labels, the bench, tp, arms and meter_accuracy run.
(
  find "$BUILD/bin" -type f ! -name 'tpscope_unit_tests' ! -name 'tpscope_core_tests' \
    ! -name 'tpscope_allreduce_tests' ! -name 'tpscope_meter_tests' ! -name 'tpscope_study_tests'
  [ -d "$BUILD/lib" ] && find "$BUILD/lib" \( -type f -o -type l \)
  echo "$BUILD/CMakeCache.txt"
  find "$BUILD" -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' | grep -v '/_deps/'
) | sort -u >.x2/build.files
tar czf .x2/build.tar.gz -T .x2/build.files
rm -f .x2/build.files

prefix=$(mktemp -d)
cmake --install "$BUILD" --prefix "$prefix" >/dev/null
tar czf .x2/prefix.tar.gz -C "$prefix" .
rm -rf "$prefix"

src=$CACHE/llama.cpp-0c1e570
[ -f "$src/src/.tpscope-extracted" ] || scripts/llama/build-llama-server --source-only >/dev/null
tar czf .x2/llama-src.tar.gz -C "$src" src

tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
x2=$(du -cb .x2/*.tar.gz | tail -n 1 | cut -f1)
ls -l .x2/
echo "x2-pack.sh: working tree $((tree >> 20)) MiB + .x2 $((x2 >> 20)) MiB = $(((tree + x2) >> 20)) MiB of the 64 MiB a call carries"
[ $((tree + x2)) -lt $((62 << 20)) ] || { echo "x2-pack.sh: too large to carry" >&2; exit 1; }
