// Control flow on the cpu backend: loops with scalar and tile carries (including carries that
// swap, which must update from the previous iteration), data-dependent trip counts, nested loops,
// cond with results, and debug_print, which prints what the interpreter prints.
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
namespace jnp = pl::jnp;

TEST(CpuControl, LoopsWithScalarAndTileCarries) {
  Random rng;
  pl::Array x = rng.normal({4, 32});
  auto kernel = [](Ref x_ref, Ref a_ref, Ref b_ref, Ref c_ref) {
    Value row = x_ref(pl::program_id(0), pl::slice());
    // Swapping carries: (a, b) <- (b, a + b), a Fibonacci on tiles.
    auto [a, b, count] = pl::fori_loop(0, pl::program_id(0) + 3, [](Value, std::tuple<Value, Value, Value> c) {
      auto [prev, cur, n] = c;
      return std::tuple{cur, prev + cur, n + 1};
    }, std::tuple{row, row * 0.5f, Value(0)});
    a_ref(pl::program_id(0), pl::slice()) = a;
    b_ref(pl::program_id(0), pl::slice()) = b + count.astype(pl::f32);
    // Nested loops: sum over i < j < 5 of i * j, plus the outer index.
    Value total = pl::fori_loop(0, 5, [](Value j, Value acc) {
      return pl::fori_loop(0, j, [&](Value i, Value inner) { return inner + i * j; }, acc) + j;
    }, Value(0));
    c_ref[pl::program_id(0)] = total;
  };
  auto [cpu, interp] = run_both(
      kernel, {pl::ShapeDtype({4, 32}, pl::f32), pl::ShapeDtype({4, 32}, pl::f32), pl::ShapeDtype({4}, pl::i32)},
      {.grid = {4}, .name = "loops"}, {x});
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
}

TEST(CpuControl, LoopAccumulatingNarrowRows) {
  // Regression: with rows this narrow the inner loops unroll completely and GCC 12 vectorised
  // the fori_loop itself, summing wrongly (see PL_SEQUENTIAL_LOOP in device/cpu/abi.h).
  Random rng;
  pl::Array x = rng.normal({16, 8});
  pl::Array bounds = pl::from_vector<int32_t>({0, 16});
  auto kernel = [](Ref x_ref, Ref b_ref, Ref plain_ref, Ref masked_ref) {
    Value lo = b_ref[0], hi = b_ref[1];
    plain_ref[pl::all] = pl::fori_loop(lo, hi, [&](Value i, Value acc) { return acc + x_ref(i, pl::slice()); },
                                       jnp::zeros({8}));
    masked_ref[pl::all] = pl::fori_loop(lo, hi, [&](Value i, Value acc) {
      Value keep = jnp::arange(8) < 6;
      return acc + pl::load(x_ref, pl::idx(i, pl::slice()), keep, 0.0f);
    }, jnp::zeros({8}));
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32)},
                                {.name = "narrow_rows"}, {x, bounds});
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-6));
  EXPECT_TRUE(close(cpu[1], interp[1], 1e-6));
}

TEST(CpuControl, WhileLoopWithDataDependentTripCount) {
  Random rng;
  pl::Array start = rng.uniform({16}, 1, 60, pl::i32);
  auto kernel = [](Ref s_ref, Ref steps_ref, Ref trace_ref) {
    Value n0 = s_ref[pl::program_id(0)];
    // Collatz steps to reach 1, with a tile carry that records the path's largest values.
    auto [n, steps, hist] = pl::while_loop(
        [](std::tuple<Value, Value, Value> c) { return std::get<0>(c) != 1; },
        [](std::tuple<Value, Value, Value> c) {
          auto [value, count, largest] = c;
          Value next = jnp::where(value % 2 == 0, value / 2, 3 * value + 1);
          return std::tuple{next, count + 1, jnp::maximum(largest, jnp::broadcast_to(next, {4}) - jnp::arange(4))};
        },
        std::tuple{n0, Value(0), jnp::zeros({4}, pl::i32)});
    (void)n;
    steps_ref[pl::program_id(0)] = steps;
    trace_ref(pl::program_id(0), pl::slice()) = hist;
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({16}, pl::i32), pl::ShapeDtype({16, 4}, pl::i32)},
                                {.grid = {16}, .name = "collatz"}, {start});
  EXPECT_TRUE(same(cpu[0], interp[0]));
  EXPECT_TRUE(same(cpu[1], interp[1]));
}

TEST(CpuControl, CondWithTileResultsInsideALoop) {
  Random rng;
  pl::Array x = rng.normal({6, 10});
  auto kernel = [](Ref x_ref, Ref o_ref, Ref flag_ref) {
    Value v = pl::fori_loop(0, 6, [&](Value i, Value acc) {
      Value row = x_ref(i, pl::slice());
      return pl::cond(row.sum() > 0.0f, [&] { return acc + row; }, [&] { return acc * 0.5f - row; });
    }, jnp::zeros({10}));
    o_ref[pl::all] = v;
    flag_ref[pl::all] = jnp::zeros({1}, pl::i32);
    pl::when(v.max() > 1.0f, [&] { flag_ref[pl::all] = jnp::ones({1}, pl::i32); });
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({10}, pl::f32), pl::ShapeDtype({1}, pl::i32)},
                                {.name = "cond_in_loop"}, {x});
  EXPECT_TRUE(same(cpu[0], interp[0]));
  EXPECT_TRUE(same(cpu[1], interp[1]));
}

TEST(CpuControl, DebugPrintMatchesTheInterpreter) {
  pl::Array x = pl::arange(6).astype(pl::f16).reshape({2, 3});
  auto make = [](const std::string& backend) {
    return pl::pallas_call(
        [](Ref x_ref, Ref o_ref) {
          Value row = x_ref(pl::program_id(0), pl::slice());
          pl::debug_print("row {} sum {} flag {}", row, row.astype(pl::f32).sum(), row > 1.0f);
          o_ref(pl::program_id(0), pl::slice()) = row;
        },
        pl::ShapeDtype({2, 3}, pl::f16), {.grid = {2}, .name = "printer", .backend = backend});
  };
  ::testing::internal::CaptureStdout();
  make("interpret")(x);
  const std::string interp = ::testing::internal::GetCapturedStdout();
  ::testing::internal::CaptureStdout();
  make("cpu")(x);
  const std::string cpu = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(cpu, interp);
  EXPECT_NE(cpu.find("[printer program (1)] row [3. 4. 5.] sum 12.0 flag [ True  True  True]"), std::string::npos) << cpu;
}

}  // namespace
}  // namespace palladium::cpu_test
