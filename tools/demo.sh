#!/usr/bin/env bash
# Builds Palladium and runs the demo: every Pallas quickstart example, then the seed attention,
# IndRNN and the partitioned programs, on the default backend (the GPU where there is one, else the CPU). BUILD_DIR picks the
# build folder (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPALLADIUM_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target quickstart attention indrnn indrnn_blog sharding
echo "== quickstart =="
"$build/quickstart"
echo
echo "== fused attention (seed) =="
"$build/attention"
echo
echo "== IndRNN =="
"$build/indrnn"
echo
echo "== IndRNN three ways: naive loop, scan, kernel; eager and jit (program level) =="
"$build/indrnn_blog"
echo
echo "== partitioned programs: sharded_jit, data parallel, attention over heads (8 virtual CPU devices without a GPU) =="
"$build/sharding"
