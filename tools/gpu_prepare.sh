#!/usr/bin/env bash
# Prepares what tools/gpu_run.sh carries to a GPU machine: release binaries built here (x86-64;
# the library loads CUDA at run time, so they run there as they are), the peer scripts, and a
# cache of cubins compiled ahead for sm_90a in compile-only mode (PALLADIUM_CUDA_COMPILE_ONLY=1).
# Everything goes to .peers/ (git-ignored); name `.peers` in the device tool's carry.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD" >/dev/null
mkdir -p .peers/gpu/bin .peers/gpu/cache
cp ../shared/peers/*.py .peers/ 2>/dev/null || cp /work/shared/peers/*.py .peers/
for t in test_cuda test_kernels test_ops test_core; do cp "$BUILD/tests/$t" .peers/gpu/bin/; done
cp "$BUILD/bench/cuda_bench" "$BUILD/quickstart" "$BUILD/attention" "$BUILD/indrnn" .peers/gpu/bin/
if [ "${PRECOMPILE:-1}" = 1 ]; then
  export PALLADIUM_CACHE_DIR=$PWD/.peers/gpu/cache PALLADIUM_CUDA_COMPILE_ONLY=1
  for t in test_cuda test_kernels test_ops; do "$BUILD/tests/$t" --gtest_brief=1 >/dev/null 2>&1 || true; done
  for e in quickstart attention indrnn; do "$BUILD/$e" >/dev/null 2>&1 || true; done
fi
du -sh .peers
