// Fusion of reductions with the elementwise equations around them (src/transforms/fusion.cc): a
// row softmax, a column mean and a reduction to a scalar each become one kernel, and every fused
// result equals the unfused program's and a float64 reference, on every host backend. Programs
// where the kernel's shapes would broadcast differently from the program's stay unfused there.
#include <gtest/gtest.h>

#include <cmath>

#include "palladium/palladium.h"
#include "tests/support/program_support.h"

namespace pl = palladium;
using pl::Array;
using pl::Shape;

namespace {

using palladium::test_support::count_of;
using palladium::test_support::host_backends;

class Fusion : public palladium::test_support::OnBackend {};

Array randn(Shape s, uint64_t seed) { return pl::random::normal(pl::random::key(seed), std::move(s)); }

// The number of kernels in jit(f).lower(...)'s steps.
size_t kernels_of(const std::string& lowered) {
  const size_t at = lowered.find("--- steps (");
  return at == std::string::npos ? 0 : std::stoul(lowered.substr(at + 11));
}

Array softmax_rows(const Array& x) {
  Array s = x - pl::jnp::max(x, {1}, true);
  Array e = pl::jnp::exp(s);
  return e / pl::jnp::sum(e, {1}, true);
}

// Row softmax of a float32 [m, n] in float64.
Array softmax_reference(const Array& x) {
  const int64_t m = x.shape()[0], n = x.shape()[1];
  Array r(x.shape(), pl::f64);
  for (int64_t i = 0; i < m; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x.get(i * n + j));
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x.get(i * n + j) - mx);
    for (int64_t j = 0; j < n; ++j) r.set(i * n + j, std::exp(x.get(i * n + j) - mx) / sum);
  }
  return r;
}

TEST_P(Fusion, RowSoftmaxIsOneKernel) {
  // 37 rows: the row blocks do not divide them, so the last block holds rows past the end.
  for (Shape shape : {Shape{37, 50}, Shape{4, 1000}, Shape{300, 3}}) {
    Array x = randn(shape, 1 + static_cast<uint64_t>(shape[1]));
    auto f = pl::jit(softmax_rows);
    EXPECT_LT(pl::rel_error(f(x), softmax_reference(x)), 1e-6) << shape[0] << "x" << shape[1];
    EXPECT_EQ(kernels_of(f.lower(x)), 1u) << f.lower(x);
  }
}

TEST_P(Fusion, ColumnMeanWithWhatFollowsIsOneKernel) {
  // mean over axis 0 broadcast back over the rows, after an elementwise producer: the group's
  // whole axis is the first one.
  auto f = pl::jit([](const Array& a, const Array& b) {
    Array o = a * 0.5 + b;
    return pl::jnp::tanh(o) + pl::jnp::mean(o, {0}, true);
  });
  Array a = randn({45, 19}, 2), b = randn({45, 19}, 3);
  Array ref({45, 19}, pl::f64);
  for (int64_t j = 0; j < 19; ++j) {
    double mean = 0;
    for (int64_t i = 0; i < 45; ++i) mean += 0.5 * a.get(i * 19 + j) + b.get(i * 19 + j);
    mean /= 45;
    for (int64_t i = 0; i < 45; ++i) ref.set(i * 19 + j, std::tanh(0.5 * a.get(i * 19 + j) + b.get(i * 19 + j)) + mean);
  }
  EXPECT_LT(pl::rel_error(f(a, b), ref), 1e-6);
  EXPECT_EQ(kernels_of(f.lower(a, b)), 1u) << f.lower(a, b);
}

TEST_P(Fusion, ReductionsReturnedBesideTheirConsumers) {
  // The row maximum is a result of its own (stored [m, 1] by the kernel, returned as [m]), and a
  // sum over both axes to a scalar joins the same group.
  auto f = pl::jit([](const Array& x) {
    Array mx = pl::jnp::max(x, {1});
    Array centred = x - pl::jnp::expand_dims(mx, 1);
    return std::make_tuple(mx, centred, pl::jnp::sum(centred * centred));
  });
  Array x = randn({23, 31}, 4);
  auto [mx, centred, total] = f(x);
  ASSERT_EQ(mx.shape(), (Shape{23}));
  ASSERT_EQ(total.shape(), (Shape{}));
  Array ref_mx({23}, pl::f64), ref_c({23, 31}, pl::f64), ref_t({}, pl::f64);
  double t = 0;
  for (int64_t i = 0; i < 23; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < 31; ++j) m = std::max(m, x.get(i * 31 + j));
    ref_mx.set(i, m);
    for (int64_t j = 0; j < 31; ++j) {
      ref_c.set(i * 31 + j, x.get(i * 31 + j) - m);
      t += (x.get(i * 31 + j) - m) * (x.get(i * 31 + j) - m);
    }
  }
  ref_t.set(0, t);
  EXPECT_LT(pl::rel_error(mx, ref_mx), 1e-7);
  EXPECT_LT(pl::rel_error(centred, ref_c), 1e-6);
  EXPECT_LT(pl::rel_error(total, ref_t), 1e-5);
  EXPECT_EQ(kernels_of(f.lower(x)), 1u) << f.lower(x);
}

TEST_P(Fusion, AReducedValueReadWithoutItsAxisIsNotFused) {
  // x - max(x, 1) on a square x: NumPy broadcasts the [n] maximum along the rows' last axis, so it
  // is subtracted column-wise. Inside a fused kernel the maximum is held as [n, 1]; fusing the
  // subtraction would subtract it row-wise. The result must be the column-wise one.
  auto f = pl::jit([](const Array& x) { return x - pl::jnp::max(x, {1}); });
  Array x = randn({9, 9}, 5);
  Array ref({9, 9}, pl::f64);
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 9; ++j) {
      double m = -INFINITY;
      for (int64_t k = 0; k < 9; ++k) m = std::max(m, x.get(j * 9 + k));
      ref.set(i * 9 + j, x.get(i * 9 + j) - m);
    }
  EXPECT_LT(pl::rel_error(f(x), ref), 1e-7);
  EXPECT_EQ(kernels_of(f.lower(x)), 2u) << f.lower(x);
}

TEST_P(Fusion, SumOfABroadcastValue) {
  // The broadcast row is held as [1, n] in the kernel; its sum over the rows counts every row.
  auto f = pl::jit([](const Array& row, const Array& x) {
    Array b = pl::jnp::broadcast_to(pl::jnp::exp(row), {12, 7});
    return pl::jnp::sum(b, {0}, true) + x;
  });
  Array row = randn({1, 7}, 6), x = randn({1, 7}, 7);
  Array ref({1, 7}, pl::f64);
  for (int64_t j = 0; j < 7; ++j) ref.set(j, 12 * std::exp(row.get(j)) + x.get(j));
  EXPECT_LT(pl::rel_error(f(row, x), ref), 1e-6);
}

TEST_P(Fusion, ReductionsLargerThanABlockStayApart) {
  // A row of 2^21 elements is larger than any backend's block: its sum runs as its own two-pass
  // reduction, and the rest still gets the right answer.
  const int64_t n = int64_t{1} << 21;
  auto f = pl::jit([](const Array& x) { return pl::jnp::exp(x) / pl::jnp::sum(pl::jnp::exp(x), {1}, true); });
  Array x = randn({2, n}, 8) * 0.1;
  Array r = f(x);
  double worst = 0;
  for (int64_t i = 0; i < 2; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x.get(i * n + j));
    for (int64_t j = 0; j < n; j += 4099) worst = std::max(worst, std::abs(r.get(i * n + j) - std::exp(x.get(i * n + j)) / sum) * sum);
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GE(kernels_of(f.lower(x)), 2u) << f.lower(x);
}

TEST_P(Fusion, GradOfASoftmaxLoss) {
  // The backward pass of a softmax holds reductions over the rows between elementwise equations too.
  auto loss = [](const Array& x) { return pl::jnp::sum(softmax_rows(x) * softmax_rows(x)); };
  Array x = randn({6, 10}, 9);
  Array g = pl::jit(pl::grad(loss))(x);
  Array eager = pl::grad(loss)(x);
  EXPECT_LT(pl::rel_error(g, eager), 1e-6);
  // d/dx sum(p^2) = 2 p * (p - sum(p^2)) row-wise, from softmax's Jacobian.
  Array p = softmax_reference(x), ref({6, 10}, pl::f64);
  for (int64_t i = 0; i < 6; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 10; ++j) s += p.get(i * 10 + j) * p.get(i * 10 + j);
    for (int64_t j = 0; j < 10; ++j) ref.set(i * 10 + j, 2 * p.get(i * 10 + j) * (p.get(i * 10 + j) - s));
  }
  EXPECT_LT(pl::rel_error(g, ref), 1e-5);
}

TEST_P(Fusion, HalfPrecisionRowSums) {
  // bfloat16 rows summed inside a fused kernel round as the standalone reduction does.
  auto f = pl::jit([](const Array& x) { return pl::jnp::sum(x * 2.0, {1}, true) + 1.0; });
  auto unfused = pl::jit([](const Array& x) { return pl::jnp::sum(x * 2.0, {1}, true) + 1.0; }, {.fuse = false});
  Array x = randn({16, 64}, 10).astype(pl::bf16);
  EXPECT_EQ(pl::rel_error(f(x).astype(pl::f64), unfused(x).astype(pl::f64)), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Backends, Fusion, ::testing::ValuesIn(host_backends()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
