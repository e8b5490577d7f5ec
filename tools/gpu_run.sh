#!/usr/bin/env bash
# Runs the CUDA backend's checks on a machine with an NVIDIA GPU, in one go:
#   tests    the test binaries (cuda tests, the shared kernel suite on every available backend,
#            ops, core) and the examples, with PALLADIUM_BACKEND=cuda;
#   bench    bench/cuda_bench (Palladium vs cuBLASLt, copy bandwidth, attention, compile, launch);
#   peers    the peer scripts (../shared/peers copied to .peers/): torch, then JAX attention;
#   report   every benchmark row with its peers from this job and the ratio (tools/bench_table.py);
#   sanitize compute-sanitizer memcheck, racecheck and synccheck over the CUDA tests of the attention
#            forward and backward (wgmma and mma.sync) and the matmuls, at the tests' small shapes;
#   multigpu on a machine with several GPUs: the sharding tests on them through NCCL (one process,
#            and two under mpirun), then bench/multi_gpu_bench (NCCL called directly, one GPU).
# Usage: tools/gpu_run.sh [tests] [quicktests] [bench] [profile] [peers] [sanitize] [multigpu]
#        (default: bench peers report, the benchmark table; `tests` runs the GPU suites)
# Binaries come from $PL_BIN (default .peers/gpu/bin, prebuilt on the development machine);
# when that folder is absent they are built here with the project's CMake into build-gpu/.
# Logs go to $OUT (default /tmp/pl-gpu-out); each stage runs under its own time limit.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pl-gpu-out}
mkdir -p "$OUT"
BIN=${PL_BIN:-.peers/gpu/bin}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
# A cache of cubins compiled ahead (compile-only mode on the development machine) when present.
if [ -d .peers/gpu/cache ]; then
  export PALLADIUM_CACHE_DIR=${PALLADIUM_CACHE_DIR:-/tmp/pl-cache}
  mkdir -p "$PALLADIUM_CACHE_DIR" && cp -r .peers/gpu/cache/. "$PALLADIUM_CACHE_DIR"/
fi
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(bench peers report)

if [ ! -x "$BIN/cuda_bench" ]; then
  # Only what the parts run: the benchmark alone builds in under a minute on the GPU machine.
  targets=(cuda_bench)
  for part in "${parts[@]}"; do
    case $part in
      tests) targets+=(test_cuda test_kernels test_ops test_core quickstart attention indrnn) ;;
      quicktests|sanitize) targets+=(test_cuda test_ops) ;;
      multigpu) targets+=(test_sharding multi_gpu_bench) ;;
    esac
  done
  echo "=== building ${targets[*]} with CMake (no prebuilt binaries in $BIN)"
  t0=$SECONDS
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 &&
    ninja -C build-gpu "${targets[@]}" >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "=== built in $((SECONDS - t0)) s"
  BIN=$PWD/build-gpu/bin-links
  mkdir -p "$BIN"
  ln -sf "$PWD"/build-gpu/tests/test_* "$PWD"/build-gpu/bench/cuda_bench "$PWD"/build-gpu/quickstart \
    "$PWD"/build-gpu/attention "$PWD"/build-gpu/indrnn "$PWD"/build-gpu/bench/multi_gpu_bench "$BIN"/ 2>/dev/null
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader

# stage NAME SECONDS COMMAND...: runs under a time limit, log to $OUT/NAME.log, prints a summary;
# a non-zero exit is remembered and makes the script fail at the end.
failed_stages=()
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\] .* ran|tests? failed|FAILED TEST" "$OUT/$name.log" | head -40
  [ $rc -ne 0 ] && failed_stages+=("$name")
  return 0
}

for part in "${parts[@]}"; do
  case $part in
    tests)
      # On the GPU machine a test that would skip for want of the GPU fails instead. test_cuda ran
      # past 150 s with no failure on an H100 at stop 40 (job 1); hence 300.
      export PALLADIUM_BACKEND=cuda PALLADIUM_REQUIRE_GPU=1
      stage test_cuda ${PL_T_CUDA:-300} "$BIN/test_cuda" --gtest_brief=1
      stage test_kernels ${PL_T_KERNELS:-100} "$BIN/test_kernels" --gtest_brief=1
      stage test_ops ${PL_T_OPS:-120} "$BIN/test_ops" --gtest_brief=1
      stage test_core 20 "$BIN/test_core" --gtest_brief=1
      for e in quickstart attention indrnn; do
        [ -x "$BIN/$e" ] && stage "example_$e" 25 "$BIN/$e"
      done
      unset PALLADIUM_BACKEND PALLADIUM_REQUIRE_GPU
      cat "$OUT"/example_*.log >"$OUT/examples.log" 2>/dev/null
      rm -f "$OUT"/example_*.log
      ;;
    bench)
      # A cold compile in a fresh cache directory, then the same kernel from that disk cache in a
      # second process. The attention forward and backward run as stages of their own, so that one
      # running out of time leaves the others' rows.
      export PL_BENCH_CACHE_DIR=/tmp/pl-bench-cache-$$
      rm -rf "$PL_BENCH_CACHE_DIR"
      # The autotuner's report (each candidate's time and its pick) goes into the log: stop 39 job 2
      # saw jit(jnp::matmul) at 8192^3 pick a tiling slower than its best candidate.
      stage cuda_bench ${PL_T_BENCH:-150} env PALLADIUM_AUTOTUNE_VERBOSE=1 "$BIN/cuda_bench" ${PL_BENCH_PARTS:-compile add matmul indrnn launch}
      if [ -z "${PL_BENCH_PARTS:-}" ]; then
        stage cuda_bench_attention ${PL_T_ATTN:-120} "$BIN/cuda_bench" attention
        stage cuda_bench_attention_bwd ${PL_T_ATTN_BWD:-150} "$BIN/cuda_bench" attention-bwd
      fi
      stage cuda_bench_disk 60 "$BIN/cuda_bench" compile-disk
      grep -hE "^ROW" "$OUT"/cuda_bench*.log
      grep -hE "^CHECK|^FAIL" "$OUT"/cuda_bench*.log
      ;;
    report)
      # Every benchmark row beside its peers from this job, with the ratio (peer time / ours).
      python3 tools/bench_table.py "$OUT"/cuda_bench*.log "$OUT"/torch_peers.log "$OUT"/jax_peers.log \
        2>&1 | tee "$OUT/table.md"
      ;;
    profile)
      # Instruction mix of the matmul kernel, then Nsight Compute on one matmul and one attention launch.
      PL_BENCH_DEBUG=1 PALLADIUM_DEBUG_DIR=/tmp/pl-dbg timeout 60 "$BIN/cuda_bench" matmul >/dev/null 2>&1
      for f in /tmp/pl-dbg/*.cubin; do
        echo "== $f"; cuobjdump -sass "$f" | grep -oE "^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+" | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25
      done >"$OUT/sass.log" 2>&1
      # One launch each (cuda_bench profile-launches): the matmul 4096^3 at 128 x 256 tiles, the
      # attention forward d128 s2048 and its forward+backward; the tensor pipes, issue slots, stalls.
      PL_BENCH_ATTN_D=${PL_BENCH_ATTN_D:-128} PL_BENCH_ATTN_SEQ=${PL_BENCH_ATTN_SEQ:-2048} \
        stage ncu_kernels 240 ncu --clock-control none -k regex:'pl_matmul|pl_mha' --launch-count 5 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --section Occupancy --section ComputeWorkloadAnalysis \
        "$BIN/cuda_bench" profile-launches
      grep -E "^  pl_|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Issued Warp|No Eligible|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Occ|Block Limit (Reg|Shared)|Pipe|Tensor|Stall" \
        "$OUT/ncu_kernels.log" | head -120
      ;;
    quicktests)
      # The cuda-only tests and the ops on cuda: a short check before benchmarks. A failure stays
      # visible; the benchmarks then still measure the default (wgmma) path.
      # On the GPU machine a test that would skip for want of the GPU fails instead.
      export PALLADIUM_BACKEND=cuda PALLADIUM_REQUIRE_GPU=1
      stage test_cuda ${PL_T_CUDA:-300} "$BIN/test_cuda" --gtest_brief=1
      stage test_ops ${PL_T_OPS:-120} "$BIN/test_ops" --gtest_brief=1
      unset PALLADIUM_BACKEND
      ;;
    sanitize)
      # Each tool over the attention and matmul tests; any report fails the stage
      # (--error-exitcode). The tests compare against float64 as usual, so a wrong result fails too.
      export PALLADIUM_BACKEND=cuda PALLADIUM_REQUIRE_GPU=1 PATH=/usr/local/cuda/bin:$PATH
      filter='CudaTma.*:CudaWgmma.*Attention*:CudaWgmma.*Matmul*:CudaDot.Attention*:CudaDot.*Matmul*'
      for tool in memcheck racecheck synccheck; do
        stage "sanitize_$tool" ${PL_T_SANITIZE:-150} compute-sanitizer --tool "$tool" --error-exitcode 1 \
          "$BIN/test_cuda" --gtest_brief=1 --gtest_filter="$filter"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid" "$OUT/sanitize_$tool.log" | sort | uniq -c | head -10
      done
      unset PALLADIUM_BACKEND PALLADIUM_REQUIRE_GPU
      ;;
    multigpu)
      # The sharding tests on the GPUs through NCCL (the default engine; a missing NCCL fails them),
      # in one process and as two processes sharing the GPUs, then the bench. NVLink multicast
      # stays off.
      export NCCL_NVLS_ENABLE=0
      PALLADIUM_REQUIRE_NCCL=1 stage sharding_gpus ${PL_T_SHARDING:-120} "$BIN/test_sharding" \
        --gtest_filter='ShardingNccl*:ShardingGpu*'
      if [ -x "$BIN/test_mpi" ] && command -v mpirun >/dev/null; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
          PALLADIUM_COLLECTIVE_TIMEOUT_S=60 stage mpi_gpus 120 mpirun -np 2 -x NCCL_NVLS_ENABLE \
          -x PALLADIUM_COLLECTIVE_TIMEOUT_S "$BIN/test_mpi" --gtest_filter='MpiGpu*'
      fi
      stage multi_gpu_bench ${PL_T_MULTI:-300} "$BIN/multi_gpu_bench"
      grep -E "^(ROW|CHECK|FAIL|NOTE)" "$OUT/multi_gpu_bench.log"
      ;;
    peers)
      [ -f .peers/jax_peers.py ] || { mkdir -p .peers && cp ../shared/peers/*.py .peers/; }
      stage torch_peers 120 python3 .peers/torch_peers.py
      grep -E "^ROW|^FAIL" "$OUT/torch_peers.log"
      stage jax_peers 240 python3 .peers/jax_peers.py attention indrnn
      grep -E "^ROW|^CHECK|^FAIL" "$OUT/jax_peers.log"
      ;;
  esac
done
if [ ${#failed_stages[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed_stages[*]}"
  exit 1
fi
