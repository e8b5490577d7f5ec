#!/usr/bin/env bash
# The sanitizer run (CI runs it after the tests): AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer over the core, kernels, errors, ops, program, sharding and interop suites on the
# interpreter and cpu backends, with the cpu backend's generated kernels compiled with the same
# sanitizers. Any finding stops the run. BUILD_DIR picks the build folder (default: build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-asan}
sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPALLADIUM_BUILD_BENCH=OFF \
      "-DCMAKE_CXX_FLAGS=$sanitizers" "-DCMAKE_EXE_LINKER_FLAGS=$sanitizers" "-DCMAKE_SHARED_LINKER_FLAGS=$sanitizers" \
      >/dev/null
suites=(test_core test_kernels test_errors test_ops test_program test_sharding)
[[ -f tests/interop/dlpack_test.cc && -f /usr/include/dlpack/dlpack.h ]] && suites+=(test_interop)
cmake --build "$build" --target "${suites[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PALLADIUM_CPU_CXXFLAGS="$sanitizers"
for suite in "${suites[@]}"; do
  echo "== $suite under ASan + UBSan =="
  # The NumPy exchange runs in an uninstrumented Python: it is covered by the plain test run.
  "$build/tests/$suite" --gtest_brief=1 --gtest_filter=-DLPackNumPy.*
done
