// The reference interpreter's speed on the quickstart's 2x2-grid 1024x1024x1024 float32 matmul
// (issue 2 asks for at least 2 GFLOP/s on one core), and on IndRNN (T=1000, F=1024).
#include <benchmark/benchmark.h>

#include "ops/indrnn.h"
#include "palladium/palladium.h"

namespace pl = palladium;

static void BM_InterpreterQuickstartMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  auto keys = pl::random::split(pl::random::key(3));
  pl::Array x = pl::random::normal(keys[0], {n, n}), y = pl::random::normal(keys[1], {n, n});
  auto matmul = pl::pallas_call(
      [](pl::Ref a, pl::Ref b, pl::Ref c) { c[pl::all] = pl::dot(a[pl::all], b[pl::all]); },
      pl::ShapeDtype({n, n}, pl::f32),
      {.grid = {2, 2},
       .in_specs = {pl::BlockSpec({n / 2, n}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                    pl::BlockSpec({n, n / 2}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({n / 2, n / 2}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
       .backend = "interpret"});
  matmul(x, y);  // trace outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(matmul(x, y).data());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK(BM_InterpreterQuickstartMatmul)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

static void BM_InterpreterIndRNN(benchmark::State& state) {
  auto keys = pl::random::split(pl::random::key(4), 3);
  pl::Array x = pl::random::normal(keys[0], {1000, 1024}), u = pl::random::uniform(keys[1], {1024});
  pl::Array h0 = pl::random::normal(keys[2], {1024});
  for (auto _ : state) benchmark::DoNotOptimize(pl::ops::indrnn(x, u, h0, state.range(0), "interpret").data());
}
BENCHMARK(BM_InterpreterIndRNN)->Arg(16)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
