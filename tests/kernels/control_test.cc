// Structured control flow on traced values (fori_loop, while_loop, cond, when) and debug_print.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>
#include <tuple>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ControlTest = KernelTest;

// fori_loop with a tuple of carries (a tile and a scalar) and bounds loaded from the data; the
// same trace runs again with other bounds, including an empty range.
TEST_P(ControlTest, ForiLoopTupleCarriesTracedBounds) {
  Rng rng;
  Array x = rng.normal({16, 8});
  auto make = [](const std::string& be) {
    return pl::pallas_call(
        [](Ref x_ref, Ref b_ref, Ref sum_ref, Ref count_ref) {
          Value lo = b_ref[0], hi = b_ref[1];
          auto [acc, count] = pl::fori_loop(
              lo, hi,
              [&](Value i, std::tuple<Value, Value> carry) {
                auto [a, c] = carry;
                return std::tuple{a + x_ref(i, pl::slice()), c + 1};
              },
              std::tuple{jnp::zeros({8}), Value(0)});
          sum_ref[pl::all] = acc;
          count_ref[pl::all] = count;
        },
        {ShapeDtype({8}, f32), ShapeDtype({}, i32)}, {.name = "fori_tuple", .backend = be});
  };
  Array b1 = rng.values({2}, i32, 0, 16);
  const int64_t lo1 = std::min(b1.get_int(0), b1.get_int(1)), hi1 = std::max(b1.get_int(0), b1.get_int(1)) + 1;
  for (const std::pair<int64_t, int64_t>& range : {std::pair<int64_t, int64_t>{lo1, hi1}, {0, 16}, {9, 3}}) {
    const int64_t lo = range.first, hi = range.second;
    SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
    Array bounds = from_vector<int32_t>({static_cast<int32_t>(lo), static_cast<int32_t>(hi)});
    auto outs = run(make, {x, bounds});
    EXPECT_TRUE(matches(outs[0], ref_f64({8}, [&](int64_t c) {
      double acc = 0;
      for (int64_t r = lo; r < hi; ++r) acc += x.get(r * 8 + c);
      return acc;
    }), f32));
    EXPECT_TRUE(matches(outs[1], ref_int({}, i32, [&](int64_t) { return std::max<int64_t>(hi - lo, 0); }), i32));
  }
}

// Carries as std::array and std::vector, a loop without carries that only stores, nested loops
// with a bound that depends on the outer index, and lax::fori_loop's spelling.
TEST_P(ControlTest, ForiLoopCarryKindsAndNesting) {
  Rng rng;
  Array x = rng.normal({6, 5});
  auto outs = run_kernel(
      [](Ref x_ref, Ref arr_ref, Ref vec_ref, Ref copy_ref, Ref tri_ref) {
        auto arr = pl::fori_loop(0, 6, [&](Value i, std::array<Value, 2> c) {
          Value row = x_ref(i, pl::slice());
          return std::array<Value, 2>{c[0] + row, jnp::maximum(c[1], row)};
        }, std::array<Value, 2>{jnp::zeros({5}), jnp::full({5}, -INFINITY)});
        arr_ref[pl::all] = arr[0] * arr[1];
        std::vector<Value> vec = pl::lax::fori_loop(1, 6, [&](Value i, std::vector<Value> c) {
          return std::vector<Value>{c[0] * 0.5f + x_ref(i, 0), c[1] + i};
        }, std::vector<Value>{Value(x_ref(0, 0)), Value(0)});
        vec_ref[pl::all] = vec[0] + vec[1].astype(f32);
        pl::fori_loop(0, 6, [&](Value i) { copy_ref(i, pl::slice()) = x_ref(i, pl::slice()) * 2.0f; });
        // tri[i] = sum_{j <= i} sum_{k <= j} x[k, 0]
        Value tri = pl::fori_loop(0, 6, [&](Value i, Value acc) {
          Value inner = pl::fori_loop(0, i + 1, [&](Value j, Value s) {
            return s + pl::fori_loop(0, j + 1, [&](Value k, Value t) { return t + x_ref(k, 0); }, Value(0.0f));
          }, Value(0.0f));
          tri_ref[i] = inner;
          return acc + 1;
        }, Value(0));
        (void)tri;
      },
      {ShapeDtype({5}, f32), ShapeDtype({}, f32), ShapeDtype({6, 5}, f32), ShapeDtype({6}, f32)}, {.name = "fori_kinds"}, {x});
  EXPECT_TRUE(matches(outs[0], ref_f64({5}, [&](int64_t c) {
    double s = 0, m = -INFINITY;
    for (int64_t r = 0; r < 6; ++r) s += x.get(r * 5 + c), m = std::max(m, x.get(r * 5 + c));
    return s * m;
  }), f32));
  double v = x.get(0);
  int64_t isum = 0;
  for (int64_t i = 1; i < 6; ++i) v = v * 0.5 + x.get(i * 5), isum += i;
  EXPECT_TRUE(matches(outs[1], ref_f64({}, [&](int64_t) { return v + static_cast<double>(isum); }), f32));
  EXPECT_TRUE(matches(outs[2], ref_f64({6, 5}, [&](int64_t f) { return 2 * x.get(f); }), f32));
  EXPECT_TRUE(matches(outs[3], ref_f64({6}, [&](int64_t i) {
    double s = 0;
    for (int64_t j = 0; j <= i; ++j)
      for (int64_t k = 0; k <= j; ++k) s += x.get(k * 5);
    return s;
  }), f32));
}

// while_loop with a data-dependent trip count: Collatz steps of each program's number.
TEST_P(ControlTest, WhileLoopCollatz) {
  Rng rng;
  Array x = rng.values({24}, i32, 1, 60);
  BlockSpec one({pl::None}, [](Index i) { return i; });
  Array o = run1(
      [](Ref x_ref, Ref o_ref) {
        auto [n, steps] = pl::while_loop([](std::tuple<Value, Value> c) { return std::get<0>(c) != 1; },
                                         [](std::tuple<Value, Value> c) {
                                           auto [m, s] = c;
                                           return std::tuple{jnp::where(m % 2 == 0, m / 2, 3 * m + 1), s + 1};
                                         },
                                         std::tuple{Value(x_ref[pl::all]), Value(0)});
        o_ref[pl::all] = steps * 1000 + n;
      },
      ShapeDtype({24}, i32), {.grid = {24}, .in_specs = {one}, .out_specs = {one}, .name = "collatz"}, {x});
  EXPECT_TRUE(matches(o, ref_int({24}, i32, [&](int64_t i) {
    int64_t m = x.get_int(i), s = 0;
    while (m != 1) m = m % 2 == 0 ? m / 2 : 3 * m + 1, ++s;
    return s * 1000 + 1;
  }), i32));
}

// cond with results (a Value and a tuple), on the program id and on the data; cond with void
// branches that store.
TEST_P(ControlTest, CondWithResults) {
  Rng rng;
  Array x = rng.normal({6, 8});
  BlockSpec row({pl::None, 8}, [](Index i) { return pl::idx(i, 0); });
  auto outs = run_kernel(
      [](Ref x_ref, Ref a_ref, Ref b_ref, Ref c_ref) {
        Value pid = pl::program_id(0);
        a_ref[pl::all] = pl::cond(pid % 3 == 0, [&] { return x_ref[pl::all] * 2.0f; },
                                  [&] { return Value(x_ref[pl::all]) - 1.0f; });
        Value v = x_ref[pl::all];
        auto [s, k] = pl::lax::cond(v.sum() > 0, [&] { return std::tuple{v.max(), pid}; },
                                    [&] { return std::tuple{v.min(), Value(-1)}; });
        b_ref[pl::all] = s + k.astype(f32) * 100.0f;
        pl::cond(pid < 2, [&] { c_ref[pl::all] = v + 1.0f; }, [&] { c_ref[pl::all] = -v; });
      },
      {ShapeDtype({6, 8}, f32), ShapeDtype({6}, f32), ShapeDtype({6, 8}, f32)},
      {.grid = {6}, .in_specs = {row}, .out_specs = {row, BlockSpec({pl::None}, [](Index i) { return i; }), row},
       .name = "cond"},
      {x});
  EXPECT_TRUE(matches(outs[0], ref_f64({6, 8}, [&](int64_t f) { return (f / 8) % 3 == 0 ? 2 * x.get(f) : x.get(f) - 1; }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({6}, [&](int64_t r) {
    double s = 0, mx = -INFINITY, mn = INFINITY;
    for (int64_t c = 0; c < 8; ++c) s += x.get(r * 8 + c), mx = std::max(mx, x.get(r * 8 + c)), mn = std::min(mn, x.get(r * 8 + c));
    return s > 0 ? mx + 100.0 * static_cast<double>(r) : mn - 100.0;
  }), f32));
  EXPECT_TRUE(matches(outs[2], ref_f64({6, 8}, [&](int64_t f) { return f / 8 < 2 ? x.get(f) + 1 : -x.get(f); }), f32));
}

// pl.when: only the programs where the predicate holds run the body.
TEST_P(ControlTest, When) {
  Rng rng;
  Array x = rng.any({5}, i16).astype(i32), init = rng.any({5}, i16).astype(i32);
  BlockSpec one({pl::None}, [](Index i) { return i; });
  Array o = run1(
      [](Ref x_ref, Ref init_ref, Ref o_ref) {
        (void)init_ref;
        Value pid = pl::program_id(0);
        pl::when(pid % 2 == 1, [&] { o_ref[pl::all] = x_ref[pl::all] * 3; });
        pl::when((Value(x_ref[pl::all]) > 0) & (pid == 0), [&] { o_ref[pl::all] = Value(7); });
      },
      ShapeDtype({5}, i32),
      {.grid = {5}, .in_specs = {one, one}, .out_specs = {one}, .input_output_aliases = {{1, 0}}, .name = "when"},
      {x, init});
  EXPECT_TRUE(matches(o, ref_int({5}, i32, [&](int64_t i) {
    if (i % 2 == 1) return 3 * x.get_int(i);
    if (i == 0 && x.get_int(0) > 0) return int64_t{7};
    return init.get_int(i);
  }), i32));
}

// debug_print: one line per program, "[name program (ids)] text" with the values in NumPy's
// format (order-insensitive, so that parallel backends pass too).
TEST_P(ControlTest, DebugPrint) {
  Rng rng;
  Array x = rng.values({3, 4}, i32, -50, 50);
  BlockSpec row({pl::None, 4}, [](Index i) { return pl::idx(i, 0); });
  ::testing::internal::CaptureStdout();
  Array o;
  try {
    o = run1(
        [](Ref x_ref, Ref o_ref) {
          Value v = x_ref[pl::all];
          pl::debug_print("pid {} row {} sum {}", pl::program_id(0), v, v.sum());
          o_ref[pl::all] = v;
        },
        ShapeDtype({3, 4}, i32), {.grid = {3}, .in_specs = {row}, .out_specs = {row}, .name = "printer"}, {x});
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  const std::string out = ::testing::internal::GetCapturedStdout();
  std::multiset<std::string> lines;
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);) lines.insert(line);
  const int runs = is_interpreter() ? 1 : 2;  // a compiled backend's run is followed by the interpreter's
  for (int64_t p = 0; p < 3; ++p) {
    int64_t s = 0;
    for (int64_t c = 0; c < 4; ++c) s += x.get_int(p * 4 + c);
    const std::string expect = "[printer program (" + std::to_string(p) + ")] pid " + std::to_string(p) + " row " +
                               take(x, p).str() + " sum " + std::to_string(s);
    EXPECT_EQ(lines.count(expect), static_cast<size_t>(runs)) << "missing line: " << expect << "\nstdout was:\n" << out;
  }
  EXPECT_EQ(lines.size(), static_cast<size_t>(3 * runs)) << out;
  EXPECT_TRUE(exactly_equal(o, x));
}

PL_INSTANTIATE_BACKENDS(ControlTest);

}  // namespace
}  // namespace palladium::ktest
