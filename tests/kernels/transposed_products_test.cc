// The rewrite that computes products read only transposed by dots in transposed form
// (backends/common/transposed_products.h): the attention backward's dK/dV step, its transposes
// gone, run on the interpreter and the cpu backend against float64; and the groups it must leave.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/common/transposed_products.h"
#include "ir_run_util.h"
#include "kernel_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kRows = 32, kDim = 16;

// One step of the attention backward's dK/dV scan over a block of queries (the seed's shape):
// p = exp(q k^T * scale - lse), ds = p * (dout v^T - di) * scale, dv = p^T dout, dk = ds^T q;
// with `causal`, the scores are masked by query >= key position first.
void dkdv_step(Ref q, Ref k, Ref v, Ref dout, Ref lse, Ref di, Ref dk_out, Ref dv_out, bool causal) {
  const float scale = 0.25f;
  Value qv = q[pl::all], kv = k[pl::all], vv = v[pl::all], dov = dout[pl::all];
  Value s = pl::dot(qv, kv.T()) * scale;
  if (causal) {
    Value rows = jnp::arange(kRows), cols = jnp::arange(kRows);
    s = jnp::where(rows(pl::slice(), pl::None) >= cols(pl::None, pl::slice()), s, -1e30f);
  }
  Value p = jnp::exp(s - lse[pl::all](pl::slice(), pl::None));
  Value dp = pl::dot(dov, vv.T()) - di[pl::all](pl::slice(), pl::None);
  Value ds = p * dp * scale;
  dv_out[pl::all] = pl::dot(p.T(), dov);
  dk_out[pl::all] = pl::dot(ds.T(), qv);
}

Callable<std::vector<Array>> dkdv_call(bool causal, DType t) {
  return pallas_call(
      [causal](Ref q, Ref k, Ref v, Ref dout, Ref lse, Ref di, Ref dk, Ref dv) { dkdv_step(q, k, v, dout, lse, di, dk, dv, causal); },
      std::vector<ShapeDtype>{{{kRows, kDim}, t}, {{kRows, kDim}, t}}, CallOptions{.name = "dkdv_step"});
}

std::vector<ShapeDtype> dkdv_inputs(DType t) {
  return {{{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows}, t}, {{kRows}, t}};
}

void expect_transposed_step_matches(bool causal) {
  const ir::Kernel kernel = traced(dkdv_call(causal, f32), dkdv_inputs(f32));
  const ir::Kernel rewritten = backend::transpose_register_products(kernel);
  ir::verify(rewritten);
  const std::string before = ir::print(kernel), after = ir::print(rewritten);
  // The transposes of p and ds are gone; the products are computed as k q^T and v dout^T.
  EXPECT_EQ(test_support::count_of(before, "transpose"), 4u) << before;
  EXPECT_EQ(test_support::count_of(after, "transpose"), 2u) << after;  // k^T and v^T, read by dots as B
  EXPECT_THAT(after, HasSubstr("trans_a trans_b")) << after;
  expect_step_matches_float64(rewritten, traced(dkdv_call(causal, f64), dkdv_inputs(f64)), kRows, kDim);
}

TEST(TransposedProducts, AttentionBackwardStepComputesPAndDsTransposed) { expect_transposed_step_matches(false); }

TEST(TransposedProducts, CausalMaskTransposesWithItsPositions) { expect_transposed_step_matches(true); }

// p is also stored untransposed: computing it transposed would need both forms, so the kernel is
// left as it is.
TEST(TransposedProducts, GroupReadElsewhereIsLeftAlone) {
  auto call = pallas_call(
      [](Ref q, Ref k, Ref dout, Ref dv, Ref p_out) {
        Value p = jnp::exp(pl::dot(q[pl::all], k[pl::all].T()));
        p_out[pl::all] = p;
        dv[pl::all] = pl::dot(p.T(), dout[pl::all]);
      },
      std::vector<ShapeDtype>{{{kRows, kDim}, f32}, {{kRows, kRows}, f32}}, CallOptions{.name = "p_kept"});
  const ir::Kernel kernel =
      traced(call, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}, {{kRows, kDim}, f32}});
  EXPECT_EQ(ir::print(backend::transpose_register_products(kernel)), ir::print(kernel));
}

// A transpose of a loaded tile (no product behind it) and one read by something other than a dot.
TEST(TransposedProducts, LoadsAndOtherReadersKeepTheirTransposes) {
  auto loaded = pallas_call([](Ref a, Ref b, Ref out) { out[pl::all] = pl::dot(a[pl::all].T(), b[pl::all]); },
                            ShapeDtype({kDim, kDim}, f32), CallOptions{.name = "loaded_t"});
  const ir::Kernel k1 = traced(loaded, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}});
  EXPECT_EQ(ir::print(backend::transpose_register_products(k1)), ir::print(k1));
  auto stored = pallas_call(
      [](Ref a, Ref b, Ref out) {
        Value s = pl::dot(a[pl::all], b[pl::all].T());
        out[pl::all] = s.T() * 2.0f;
      },
      ShapeDtype({kRows, kRows}, f32), CallOptions{.name = "stored_t"});
  const ir::Kernel k2 = traced(stored, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}});
  EXPECT_THAT(ir::print(backend::transpose_register_products(k2)), HasSubstr("transpose"));
  EXPECT_EQ(ir::print(backend::transpose_register_products(k2)), ir::print(k2));
}

}  // namespace
}  // namespace palladium::ktest
