// Fusion of reductions with the elementwise equations around them (src/transforms/fusion.cc): a
// row softmax, a column mean and a reduction to a scalar each become one kernel; a matmul heads a
// kernel with what follows it (bias, activation, a softmax over rows one tile holds). Every fused
// result equals a float64 reference, on every host backend. Programs where the kernel's shapes
// would broadcast differently from the program's, or blocks would differ, stay unfused there.
#include <gtest/gtest.h>

#include <cmath>

#include "palladium/palladium.h"
#include "tests/support/program_support.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::Shape;

namespace {

using palladium::test_support::count_of;
using palladium::test_support::host_backends;

class Fusion : public palladium::test_support::OnBackend {};

using palladium::test_support::randn;

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

// Softmax over the last axis of an array of any rank.
Array softmax_rows_last(const Array& x) {
  const int64_t last = static_cast<int64_t>(x.shape().size()) - 1;
  Array e = pl::jnp::exp(x - pl::jnp::max(x, {last}, true));
  return e / pl::jnp::sum(e, {last}, true);
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

// a @ b in float64, batched over leading dimensions.
Array matmul_reference(const Array& a, const Array& b) {
  const size_t r = a.shape().size();
  const int64_t m = a.shape()[r - 2], k = a.shape()[r - 1], n = b.shape()[r - 1];
  const int64_t batch = a.size() / (m * k);
  Shape out = a.shape();
  out.back() = n;
  Array c(out, pl::f64);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += a.get(t * m * k + i * k + q) * b.get(t * k * n + q * n + j);
        c.set(t * m * n + i * n + j, s);
      }
  return c;
}

TEST_P(Fusion, MatmulWithBiasAndActivationIsOneKernel) {
  // 70 x 90 results: the matmul's row and column tiles do not divide them. The bias is a row
  // broadcast over the result's rows.
  auto f = pl::jit([](const Array& a, const Array& b, const Array& bias) {
    return pl::jnp::tanh(pl::jnp::matmul(a, b) * 0.5 + bias);
  });
  Array a = randn({70, 50}, 11), b = randn({50, 90}, 12), bias = randn({90}, 13);
  Array ref = matmul_reference(a, b);
  for (int64_t i = 0; i < 70; ++i)
    for (int64_t j = 0; j < 90; ++j) ref.set(i * 90 + j, std::tanh(ref.get(i * 90 + j) * 0.5 + bias.get(j)));
  EXPECT_LT(pl::rel_error(f(a, b, bias), ref), 1e-5);
  EXPECT_EQ(kernels_of(f.lower(a, b, bias)), 1u) << f.lower(a, b, bias);
}

TEST_P(Fusion, BatchedMatmulEpilogueAndRowSoftmax) {
  // Batched: one program per batch index. 24 result columns fit one tile, so the row softmax
  // after the matmul joins its kernel.
  auto f = pl::jit([](const Array& a, const Array& b) { return softmax_rows_last(pl::jnp::matmul(a, b)); });
  Array a = randn({3, 20, 16}, 14), b = randn({3, 16, 24}, 15);
  Array s = matmul_reference(a, b), ref({3, 20, 24}, pl::f64);
  for (int64_t r = 0; r < 60; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < 24; ++j) mx = std::max(mx, s.get(r * 24 + j));
    for (int64_t j = 0; j < 24; ++j) sum += std::exp(s.get(r * 24 + j) - mx);
    for (int64_t j = 0; j < 24; ++j) ref.set(r * 24 + j, std::exp(s.get(r * 24 + j) - mx) / sum);
  }
  EXPECT_LT(pl::rel_error(f(a, b), ref), 1e-5);
  EXPECT_EQ(kernels_of(f.lower(a, b)), 1u) << f.lower(a, b);
}

TEST_P(Fusion, MatmulOperandsReadAgainStayOutsideItsKernel) {
  // x @ x + x: the sum reads the matmul's operand, which the matmul's kernel holds in other blocks.
  auto f = pl::jit([](const Array& x) { return pl::jnp::matmul(x, x) + x; });
  Array x = randn({40, 40}, 16);
  Array ref = matmul_reference(x, x);
  for (int64_t i = 0; i < 1600; ++i) ref.set(i, ref.get(i) + x.get(i));
  EXPECT_LT(pl::rel_error(f(x), ref), 1e-5);
  EXPECT_EQ(kernels_of(f.lower(x)), 2u) << f.lower(x);
}

// x transposed over its last two axes, in float64.
Array transposed(const Array& x) {
  const size_t r = x.shape().size();
  const int64_t m = x.shape()[r - 2], n = x.shape()[r - 1], batch = x.size() / (m * n);
  Shape s = x.shape();
  std::swap(s[r - 2], s[r - 1]);
  Array t(s, pl::f64);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) t.set(b * m * n + j * m + i, x.get(b * m * n + i * n + j));
  return t;
}

TEST_P(Fusion, TransposedOperandsAreReadInPlace) {
  // x @ w.T + b: the transpose is folded into the matmul's kernel (one kernel, no copy of w).
  // K = 1024 walks the contraction in steps, through the transposed blocks.
  auto xwt = pl::jit([](const Array& x, const Array& w, const Array& b) {
    return pl::jnp::matmul(x, pl::jnp::transpose(w, {1, 0})) + b;
  });
  Array x = randn({33, 1024}, 19), w = randn({70, 1024}, 20), b = randn({70}, 21);
  Array ref = matmul_reference(x, transposed(w));
  for (int64_t i = 0; i < 33; ++i)
    for (int64_t j = 0; j < 70; ++j) ref.set(i * 70 + j, ref.get(i * 70 + j) + b.get(j));
  EXPECT_LT(pl::rel_error(xwt(x, w, b), ref), 1e-5);
  EXPECT_EQ(kernels_of(xwt.lower(x, w, b)), 1u) << xwt.lower(x, w, b);
  // The left operand transposed, batched; and one array on both sides (q @ q^T).
  auto tl = pl::jit([](const Array& a, const Array& c) { return pl::jnp::matmul(pl::jnp::transpose(a, {0, 2, 1}), c); });
  Array a = randn({2, 40, 30}, 22), c = randn({2, 40, 25}, 23);
  EXPECT_LT(pl::rel_error(tl(a, c), matmul_reference(transposed(a), c)), 1e-5);
  EXPECT_EQ(kernels_of(tl.lower(a, c)), 1u) << tl.lower(a, c);
  auto gram = pl::jit([](const Array& q) { return pl::jnp::matmul(q, pl::jnp::transpose(q, {1, 0})); });
  Array q = randn({50, 20}, 24);
  EXPECT_LT(pl::rel_error(gram(q), matmul_reference(q, transposed(q))), 1e-5);
  EXPECT_EQ(kernels_of(gram.lower(q)), 1u) << gram.lower(q);
}

TEST_P(Fusion, ATransposeReadTwiceIsComputed) {
  // w.T is also returned: it is computed once, and the matmul reads the computed array.
  auto f = pl::jit([](const Array& x, const Array& w) {
    Array wt = pl::jnp::transpose(w, {1, 0});
    return std::make_tuple(pl::jnp::matmul(x, wt), wt);
  });
  Array x = randn({12, 9}, 25), w = randn({14, 9}, 26);
  auto [y, wt] = f(x, w);
  EXPECT_LT(pl::rel_error(y, matmul_reference(x, transposed(w))), 1e-5);
  EXPECT_LT(pl::rel_error(wt, transposed(w)), 1e-7);
}

TEST_P(Fusion, ConstantMatmulOperands) {
  // Constants are recomputed inside elementwise kernels; a matmul reads its operands in blocks, so a
  // constant operand (or the constant under a folded transpose) is made an array first.
  auto f = pl::jit([](const Array& x) {
    Array y1 = pl::jnp::matmul(pl::lax::full({4, 6}, 1.0), x) * 2.0;
    Array y2 = pl::jnp::matmul(pl::jnp::transpose(pl::lax::full({5, 4}, 0.5), {1, 0}), pl::jnp::transpose(x, {1, 0}));
    return std::make_tuple(y1, y2);
  });
  Array x = randn({6, 5}, 27);
  auto [y1, y2] = f(x);
  Array r1({4, 5}, pl::f64), r2({4, 6}, pl::f64);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 6; ++k) s += x.get(k * 5 + j);
      r1.set(i * 5 + j, 2 * s);
    }
    for (int64_t j = 0; j < 6; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 5; ++k) s += 0.5 * x.get(j * 5 + k);
      r2.set(i * 6 + j, s);
    }
  }
  EXPECT_LT(pl::rel_error(y1, r1), 1e-6);
  EXPECT_LT(pl::rel_error(y2, r2), 1e-6);
}

TEST_P(Fusion, LargeMatmulWithEpilogue) {
  // Large enough for the cpu's blocks (plan_matmul: whole K, up to 1024 x 1024, split until every
  // worker has a program): 1100 columns (a partial column block), K = 700 (no slice of 512 divides
  // it), the right operand transposed in place, a bias and tanh after it in the same kernel.
  auto f = pl::jit([](const Array& x, const Array& w, const Array& b) {
    return pl::jnp::tanh(pl::jnp::matmul(x, pl::jnp::transpose(w, {1, 0})) * 0.25 + b);
  });
  Array x = randn({260, 700}, 28), w = randn({1100, 700}, 29), b = randn({1100}, 30);
  Array ref = pl::matmul(x.astype(pl::f64), pl::jnp::transpose(w.astype(pl::f64), {1, 0}));
  for (int64_t i = 0; i < 260; ++i)
    for (int64_t j = 0; j < 1100; ++j) ref.set(i * 1100 + j, std::tanh(ref.get(i * 1100 + j) * 0.25 + b.get(j)));
  EXPECT_LT(pl::rel_error(f(x, w, b), ref), 1e-5);
  EXPECT_EQ(kernels_of(f.lower(x, w, b)), 1u) << f.lower(x, w, b);
  // Batched on both sides (the batch is a grid axis beside the blocks), 16-bit operands.
  auto g = pl::jit([](const Array& p, const Array& q) { return pl::jnp::matmul(p, q); });
  Array p = randn({3, 130, 600}, 31).astype(pl::bf16), q = randn({3, 600, 1030}, 32).astype(pl::bf16);
  const Array want = pl::matmul(p.astype(pl::f64), q.astype(pl::f64));
  const Array got = g(p, q);
  ASSERT_EQ(got.dtype(), pl::bf16);
  EXPECT_LT(pl::rel_error(got, want), std::ldexp(1.0, -8));  // the result's own rounding (bfloat16: 8 bits)
}

TEST_P(Fusion, IntegerMatmulEpilogue) {
  auto f = pl::jit([](const Array& a, const Array& b) { return pl::jnp::matmul(a, b) * 3 - 1; });
  Array a = pl::random::uniform(pl::random::key(17), {9, 13}, pl::i32, -50, 50);
  Array b = pl::random::uniform(pl::random::key(18), {13, 11}, pl::i32, -50, 50);
  Array got = f(a, b), ref = matmul_reference(a, b);
  ASSERT_EQ(got.dtype(), pl::i32);
  for (int64_t i = 0; i < 99; ++i) ASSERT_EQ(got.get_int(i), static_cast<int64_t>(ref.get(i)) * 3 - 1) << i;
}

INSTANTIATE_TEST_SUITE_P(Backends, Fusion, ::testing::ValuesIn(host_backends()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
