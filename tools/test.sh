#!/usr/bin/env bash
# Builds Palladium with warnings as errors and runs the whole test suite through ctest, including
# the differential tests against real JAX Pallas (whose virtual environment this script makes).
# BUILD_DIR picks the build folder (default: build); CXX picks the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPALLADIUM_WERROR=ON >/dev/null
cmake --build "$build"
bash tools/setup_jax_venv.sh "$build/jax-venv"
export PALLADIUM_JAX_PYTHON="$PWD/$build/jax-venv/bin/python" PALLADIUM_REQUIRE_JAX=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
