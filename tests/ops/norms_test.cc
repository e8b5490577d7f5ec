// Layer norm, RMS norm and softmax kernels (ops/norms.h) on every available backend: forward
// against float64 formulas, and grad (which runs the backward kernels through the custom VJPs)
// against grad of the same formulas written with Array ops in float64.
#include <gtest/gtest.h>

#include "backends/backend.h"
#include "ops/norms.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;

namespace {

class Norms : public ::testing::TestWithParam<std::string> {};

Array randn(pl::Shape s, uint64_t seed, pl::DType t = pl::f32) {
  return pl::random::normal(pl::random::key(seed), std::move(s), t);
}

// The formulas, with Array ops (differentiated by the program level, itself checked against finite
// differences in tests/program).
Array layer_norm_ref(const Array& x, const Array& w, const Array& b, double eps) {
  Array centered = x - pl::jnp::mean(x, {1}, true);
  return centered * pl::jnp::rsqrt(pl::jnp::mean(centered * centered, {1}, true) + eps) * w + b;
}
Array rms_norm_ref(const Array& x, const Array& w, double eps) {
  return x * pl::jnp::rsqrt(pl::jnp::mean(x * x, {1}, true) + eps) * w;
}
Array softmax_ref(const Array& x) { return pl::nn::softmax(x, -1); }

Array f64(const Array& a) { return a.astype(pl::f64); }

TEST_P(Norms, LayerNormForwardAndGradients) {
  pl::ops::NormOptions o{.eps = 1e-5, .block_rows = 8, .backend = GetParam()};
  for (int64_t rows : {24, 12, 7}) {  // 12 and 7 rows: blocks of 6 and 7
    SCOPED_TRACE(rows);
    Array x = randn({rows, 40}, 1 + rows) * 2.0 + 0.5, w = randn({40}, 2), b = randn({40}, 3), c = randn({rows, 40}, 4);
    EXPECT_LT(pl::rel_error(pl::ops::layer_norm(x, w, b, o), layer_norm_ref(f64(x), f64(w), f64(b), o.eps)), 1e-5);
    auto loss = [&](const Array& x_, const Array& w_, const Array& b_) {
      return pl::jnp::sum(pl::ops::layer_norm(x_, w_, b_, o) * c);
    };
    auto loss_ref = [&](const Array& x_, const Array& w_, const Array& b_) {
      return pl::jnp::sum(layer_norm_ref(x_, w_, b_, o.eps) * f64(c));
    };
    auto [dx, dw, db] = pl::grad<0, 1, 2>(loss)(x, w, b);
    auto [rx, rw, rb] = pl::grad<0, 1, 2>(loss_ref)(f64(x), f64(w), f64(b));
    EXPECT_LT(pl::rel_error(dx, rx), 1e-4);
    EXPECT_LT(pl::rel_error(dw, rw), 1e-4);
    EXPECT_LT(pl::rel_error(db, rb), 1e-5);
  }
  // float64 inputs compute in float64.
  Array x = randn({16, 24}, 5, pl::f64), w = randn({24}, 6, pl::f64), b = randn({24}, 7, pl::f64);
  EXPECT_LT(pl::rel_error(pl::ops::layer_norm(x, w, b, o), layer_norm_ref(x, w, b, o.eps)), 1e-12);
}

TEST_P(Norms, RmsNormForwardAndGradients) {
  pl::ops::NormOptions o{.eps = 1e-6, .block_rows = 4, .backend = GetParam()};
  Array x = randn({20, 32}, 8), w = randn({32}, 9), c = randn({20, 32}, 10);
  EXPECT_LT(pl::rel_error(pl::ops::rms_norm(x, w, o), rms_norm_ref(f64(x), f64(w), o.eps)), 1e-5);
  auto loss = [&](const Array& x_, const Array& w_) { return pl::jnp::sum(pl::ops::rms_norm(x_, w_, o) * c); };
  auto loss_ref = [&](const Array& x_, const Array& w_) { return pl::jnp::sum(rms_norm_ref(x_, w_, o.eps) * f64(c)); };
  auto [dx, dw] = pl::grad<0, 1>(loss)(x, w);
  auto [rx, rw] = pl::grad<0, 1>(loss_ref)(f64(x), f64(w));
  EXPECT_LT(pl::rel_error(dx, rx), 1e-4);
  EXPECT_LT(pl::rel_error(dw, rw), 1e-4);
}

TEST_P(Norms, SoftmaxForwardAndGradient) {
  pl::ops::NormOptions o{.block_rows = 8, .backend = GetParam()};
  Array x = randn({16, 50}, 11) * 4.0, c = randn({16, 50}, 12);
  EXPECT_LT(pl::rel_error(pl::ops::softmax(x, o), softmax_ref(f64(x))), 1e-5);
  Array g = pl::grad([&](const Array& x_) { return pl::jnp::sum(pl::ops::softmax(x_, o) * c); })(x);
  Array r = pl::grad([&](const Array& x_) { return pl::jnp::sum(softmax_ref(x_) * f64(c)); })(f64(x));
  EXPECT_LT(pl::rel_error(g, r), 1e-4);
}

TEST_P(Norms, BadInputsNameTheOp) {
  pl::ops::NormOptions o{.backend = GetParam()};
  Array x = randn({4, 8}, 13);
  PL_EXPECT_ERROR(pl::ops::layer_norm(x, randn({7}, 1), randn({8}, 2), o), "layer_norm: weight must have shape (8,), got (7,)");
  PL_EXPECT_ERROR(pl::ops::rms_norm(randn({8}, 3), randn({8}, 4), o), "rms_norm: expects x of shape (rows, features), got (8,)");
  PL_EXPECT_ERROR(pl::ops::softmax(pl::arange(8).reshape({2, 4}), o), "softmax: expects a floating-point x, got int32");
  o.block_rows = -2;
  PL_EXPECT_ERROR(pl::ops::rms_norm(x, randn({8}, 5), o), "rms_norm: block_rows must be positive (or 0: chosen by the backend), got -2");
}

// The default block (0: chosen for the backend) gives the same results as an explicit one.
TEST_P(Norms, DefaultRowsPerProgramMatchFloat64) {
  Array x = randn({24, 40}, 17), w = randn({40}, 18);
  Array x64 = x.astype(pl::f64);
  Array want = x64 * pl::jnp::rsqrt(pl::jnp::mean(x64 * x64, {1}, true) + 1e-5) * w.astype(pl::f64);
  pl::ops::NormOptions o{.backend = GetParam()};
  EXPECT_LT(pl::rel_error(pl::to_host(pl::ops::rms_norm(x, w, o)), want), 1e-5);
}

std::vector<std::string> backends() {
  std::vector<std::string> r;
  for (const std::string& b : pl::backend::available_names()) r.push_back(b);
  return r;
}
INSTANTIATE_TEST_SUITE_P(Ops, Norms, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
