// Layout ops, reductions and scans on the cpu backend against the interpreter.
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
namespace jnp = pl::jnp;

TEST(CpuLayout, BroadcastReshapeTransposeIota) {
  Random rng;
  pl::Array as = rng.normal({6, 1, 5}), bs = rng.normal({4, 6});
  auto kernel = [](pl::Refs r) {
    Value a = r[0][pl::all], b = r[1][pl::all];
    r[2][pl::all] = jnp::broadcast_to(a, {6, 7, 5}) + jnp::iota(pl::f32, {6, 7, 5}, 1);
    r[3][pl::all] = jnp::transpose(b) * 2.0f + jnp::reshape(b, {6, 4});
    r[4][pl::all] = jnp::transpose(jnp::broadcast_to(a, {6, 7, 5}), {2, 0, 1});
    Value s = jnp::reshape(b.sum(1).max(0), {});  // rank 0 from a tile
    r[5][pl::all] = jnp::reshape(s * 3.0f, {1, 1}) + jnp::reshape(b.min(), {1, 1});
    r[6][pl::all] = jnp::iota(pl::i32, {3, 9}, 0) * 10 + jnp::iota(pl::i32, {3, 9}, 1);
    r[7][pl::all] = jnp::iota(pl::f16, {4, 3000}, 1);  // past 2048 float16 rounds
    r[8][pl::all] = b(pl::slice(), pl::None) + b(pl::None);
  };
  auto [cpu, interp] = run_both(
      kernel,
      {pl::ShapeDtype({6, 7, 5}, pl::f32), pl::ShapeDtype({6, 4}, pl::f32), pl::ShapeDtype({5, 6, 7}, pl::f32),
       pl::ShapeDtype({1, 1}, pl::f32), pl::ShapeDtype({3, 9}, pl::i32), pl::ShapeDtype({4, 3000}, pl::f16),
       pl::ShapeDtype({4, 4, 6}, pl::f32)},
      {.name = "layout"}, {as, bs});
  for (size_t k = 0; k < cpu.size(); ++k)
    if (k != 3) {
      EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
    }
  EXPECT_NEAR(cpu[3].get(0), interp[3].get(0), 1e-5);  // from sums of O(1) values: order differs
}

TEST(CpuLayout, ReductionsOverEveryAxis) {
  Random rng;
  pl::Array xs = rng.normal({5, 6, 7});
  xs.set(17, NAN);  // max/min propagate it, argmax/argmin point at it
  pl::Array ns = rng.uniform({5, 6, 7}, -1000, 1000, pl::i32);
  for (int axis = 0; axis < 3; ++axis) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    auto kernel = [axis](pl::Refs r) {
      Value x = r[0][pl::all], n = r[1][pl::all];
      r[2][pl::all] = x.sum(axis);
      r[3][pl::all] = x.max(axis);
      r[4][pl::all] = x.min(axis);
      r[5][pl::all] = x.argmax(axis);
      r[6][pl::all] = x.argmin(axis);
      r[7][pl::all] = n.sum(axis) + n.max(axis) - n.min(axis);
      r[8][pl::all] = n.argmax(axis) * 100 + n.argmin(axis);
      r[9][pl::all] = (n > 0).max(axis);
      r[10][pl::all] = x.astype(pl::f16).sum(axis);
    };
    pl::Shape s = {5, 6, 7};
    s.erase(s.begin() + axis);
    auto [cpu, interp] = run_both(
        kernel,
        {pl::ShapeDtype(s, pl::f32), pl::ShapeDtype(s, pl::f32), pl::ShapeDtype(s, pl::f32), pl::ShapeDtype(s, pl::i32),
         pl::ShapeDtype(s, pl::i32), pl::ShapeDtype(s, pl::i32), pl::ShapeDtype(s, pl::i32), pl::ShapeDtype(s, pl::bool_),
         pl::ShapeDtype(s, pl::f16)},
        {.name = "reduce_axis" + std::to_string(axis)}, {xs, ns});
    EXPECT_TRUE(close(cpu[0], interp[0], 1e-6));  // summation order differs
    for (size_t k = 1; k < 8; ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
    EXPECT_TRUE(close(cpu[8], interp[8], 2e-3));
  }
}

TEST(CpuLayout, ScalarReductionsAndCumsum) {
  Random rng;
  pl::Array xs = rng.normal({300}), ms = rng.normal({8, 33});
  auto kernel = [](pl::Refs r) {
    Value x = r[0][pl::all], m = r[1][pl::all];
    r[2][pl::all] = jnp::broadcast_to(x.sum(), {1});
    r[3][pl::all] = jnp::broadcast_to(x.max(), {1}) - jnp::broadcast_to(x.min(), {1});
    r[4][pl::all] = jnp::cumsum(m, 1);
    r[5][pl::all] = jnp::cumsum(m, 0);
    r[6][pl::all] = jnp::cumsum(jnp::iota(pl::i32, {8, 33}, 1), 1);
    r[7][pl::all] = jnp::cumsum(m.astype(pl::bf16), 1);
  };
  auto [cpu, interp] = run_both(kernel,
                                {pl::ShapeDtype({1}, pl::f32), pl::ShapeDtype({1}, pl::f32), pl::ShapeDtype({8, 33}, pl::f32),
                                 pl::ShapeDtype({8, 33}, pl::f32), pl::ShapeDtype({8, 33}, pl::i32),
                                 pl::ShapeDtype({8, 33}, pl::bf16)},
                                {.name = "scalar_reduce_cumsum"}, {xs, ms});
  // A sum of 300 normal values may cancel: its error is bounded by the sum of magnitudes.
  double magnitude = 0;
  for (int64_t i = 0; i < xs.size(); ++i) magnitude += std::fabs(xs.get(i));
  EXPECT_NEAR(cpu[0].get(0), interp[0].get(0), 1e-6 * magnitude);
  EXPECT_TRUE(same(cpu[1], interp[1]));
  EXPECT_TRUE(close(cpu[2], interp[2], 1e-5));
  EXPECT_TRUE(close(cpu[3], interp[3], 1e-5));
  EXPECT_TRUE(same(cpu[4], interp[4]));
  EXPECT_TRUE(close(cpu[5], interp[5], 2e-2));
}

}  // namespace
}  // namespace palladium::cpu_test
