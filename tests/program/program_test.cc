// The program level on the host backends: Array ops against float64 references, jit, grad against
// float64 finite differences, custom_vjp, vmap, control flow, and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "palladium/device.h"
#include "palladium/palladium.h"
#include "ops/indrnn.h"
#include "tests/support/program_support.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::Shape;

namespace {

using palladium::test_support::error_message;

using palladium::test_support::count_of;
using palladium::test_support::host_backends;
using palladium::test_support::optimized_part;

class Program : public palladium::test_support::OnBackend {};

using palladium::test_support::randn;

// Element-by-element float64 reference of a unary or binary function, with NumPy broadcasting
// restricted to equal shapes or a scalar second operand.
Array reference(const Array& a, const std::function<double(double)>& f) {
  Array r(a.shape(), pl::f64);
  for (int64_t i = 0; i < a.size(); ++i) r.set(i, f(a.get(i)));
  return r;
}

// Central finite differences of a scalar function, in float64 on a float64 copy of x.
Array finite_difference(const std::function<Array(const Array&)>& f, const Array& x) {
  Array x64 = x.astype(pl::f64);
  Array g(x.shape(), pl::f64);
  const double h = 1e-6;
  for (int64_t i = 0; i < x.size(); ++i) {
    Array up = x64.copy(), down = x64.copy();
    up.set(i, x64.get(i) + h);
    down.set(i, x64.get(i) - h);
    g.set(i, (pl::to_host(f(up)).get(0) - pl::to_host(f(down)).get(0)) / (2 * h));
  }
  return g;
}

TEST_P(Program, ElementwiseOpsMatchFloat64) {
  Array x = randn({5, 7}, 1), y = randn({7}, 2);
  EXPECT_LT(pl::rel_error(pl::jnp::exp(x), reference(x, [](double v) { return std::exp(v); })), 1e-6);
  EXPECT_LT(pl::rel_error(pl::jnp::tanh(x), reference(x, [](double v) { return std::tanh(v); })), 1e-6);
  Array z = x * 2.0 + y;  // broadcasting (7,) against (5, 7), a weak scalar
  Array ref(x.shape(), pl::f64);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 7; ++j) ref.set(i * 7 + j, 2.0 * x.get(i * 7 + j) + y.get(j));
  EXPECT_LT(pl::rel_error(z, ref), 1e-6);
  EXPECT_EQ(z.dtype(), pl::f32);
  Array cmp = pl::jnp::where(x > 0.0, x, -x);
  EXPECT_LT(pl::rel_error(cmp, reference(x, [](double v) { return std::fabs(v); })), 1e-7);
  Array i = pl::arange(6) * 2.5;  // int32 * float literal is float32, as in JAX
  EXPECT_EQ(i.dtype(), pl::f32);
  EXPECT_DOUBLE_EQ(i.get(5), 12.5);
}

// Reductions whose reduced extent exceeds one block run in two passes (partial results per block,
// float32 for 16-bit floats, then their reduction): over everything, over trailing axes beside a
// kept one, over a leading axis, with max and min, and in bfloat16; against float64.
TEST_P(Program, LargeReductionsInTwoPasses) {
  Array x = randn({40, 30, 70}, 11);  // 84000 elements: more than a block on every backend
  auto ref = [&](std::vector<int64_t> axes, int op) {
    Shape kept;
    for (int64_t d = 0; d < 3; ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(x.shape()[static_cast<size_t>(d)]);
    Array out(kept, pl::f64);
    std::vector<double> acc(static_cast<size_t>(out.size()), op == 0 ? 0.0 : op == 1 ? -INFINITY : INFINITY);
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c[3] = {i / 2100, i / 70 % 30, i % 70};
      int64_t o = 0;
      for (int64_t d = 0; d < 3; ++d)
        if (std::find(axes.begin(), axes.end(), d) == axes.end()) o = o * x.shape()[static_cast<size_t>(d)] + c[d];
      double& a = acc[static_cast<size_t>(o)];
      a = op == 0 ? a + x.get(i) : op == 1 ? std::max(a, x.get(i)) : std::min(a, x.get(i));
    }
    for (int64_t i = 0; i < out.size(); ++i) out.set(i, acc[static_cast<size_t>(i)]);
    return out;
  };
  EXPECT_LT(pl::rel_error(pl::jnp::sum(x), ref({0, 1, 2}, 0)), 1e-5);
  EXPECT_LT(pl::rel_error(pl::jnp::sum(x, {1, 2}), ref({1, 2}, 0)), 1e-5);
  EXPECT_LT(pl::rel_error(pl::jnp::sum(x, {0}), ref({0}, 0)), 1e-5);
  EXPECT_EQ(pl::rel_error(pl::jnp::max(x), ref({0, 1, 2}, 1)), 0.0);
  EXPECT_EQ(pl::rel_error(pl::jnp::min(x, {0, 2}), ref({0, 2}, 2)), 0.0);
  Array xb = x.astype(pl::bf16);
  Array sb = pl::jnp::sum(xb);
  EXPECT_EQ(sb.dtype(), pl::bf16);
  EXPECT_LT(pl::rel_error(sb.astype(pl::f64), pl::jnp::sum(xb.astype(pl::f64))), 1e-2);
}

TEST_P(Program, LargeArgReductionsInTwoPasses) {
  // 70000 positions along the reduced axis: more than a block on every backend. Ties across blocks
  // and NaN go to the first position, as jnp.argmax / argmin do.
  Array y = randn({3, 70000}, 12);
  for (int64_t at : {20000, 60000}) y.set(at, 100.0);           // row 0: a tie for the maximum
  for (int64_t at : {50000, 65000}) y.set(at, -100.0);          // row 0: a tie for the minimum
  for (int64_t at : {70000 + 45000, 70000 + 30000}) y.set(at, NAN);  // row 1: NaN wins both
  auto first = [&](int64_t row, bool is_max) {
    int64_t best = 0;
    for (int64_t i = 0; i < 70000; ++i) {
      const double v = y.get(row * 70000 + i), b = y.get(row * 70000 + best);
      if (std::isnan(b)) break;
      if (std::isnan(v) || (is_max ? v > b : v < b)) best = i;
    }
    return best;
  };
  Array am = pl::jnp::argmax(y, 1), an = pl::jnp::argmin(y, 1);
  for (int64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(static_cast<int64_t>(am.get(r)), first(r, true)) << "argmax row " << r;
    EXPECT_EQ(static_cast<int64_t>(an.get(r)), first(r, false)) << "argmin row " << r;
  }
  EXPECT_EQ(am.get(0), 20000);
  EXPECT_EQ(an.get(0), 50000);
  EXPECT_EQ(am.get(1), 30000);
  // Over a whole 1-D array, and the same under jit.
  Array z = pl::lax::index(y, 2);
  EXPECT_EQ(static_cast<int64_t>(pl::jnp::argmax(z).get(0)), first(2, true));
  auto jitted = pl::jit([](const Array& a) { return pl::jnp::argmin(a); });
  EXPECT_EQ(static_cast<int64_t>(jitted(z).get(0)), first(2, false));
  EXPECT_NE(jitted.lower(z).find("kernel argmin_blocks"), std::string::npos) << jitted.lower(z);  // the first pass
}

TEST_P(Program, ReductionsMatmulAndLayout) {
  Array x = randn({4, 6}, 3), w = randn({6, 5}, 4);
  Array s = pl::jnp::sum(x, {1});
  for (int64_t r = 0; r < 4; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < 6; ++c) acc += x.get(r * 6 + c);
    EXPECT_NEAR(s.get(r), acc, 1e-5);
  }
  EXPECT_LT(pl::rel_error(pl::jnp::matmul(x, w), pl::matmul(x, w)), 1e-6);
  Array xb = randn({3, 4, 6}, 5), wb = randn({3, 6, 5}, 6);
  EXPECT_LT(pl::rel_error(pl::jnp::matmul(xb, wb), pl::matmul(xb, wb)), 1e-6);
  EXPECT_TRUE(pl::array_equal(pl::jnp::transpose(x), pl::transpose(x)));
  Array am = pl::jnp::argmax(x, 1);
  for (int64_t r = 0; r < 4; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < 6; ++c) if (x.get(r * 6 + c) > x.get(r * 6 + best)) best = c;
    EXPECT_EQ(am.get_int(r), best);
  }
  Array lse = pl::jnp::logsumexp(x, {1});
  for (int64_t r = 0; r < 4; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < 6; ++c) acc += std::exp(x.get(r * 6 + c));
    EXPECT_NEAR(lse.get(r), std::log(acc), 1e-5);
  }
  EXPECT_TRUE(pl::array_equal(pl::jnp::stack({x, x}), pl::stack({x, x})));
  Array sl = pl::lax::slice(x, {1, 0}, {4, 6}, {2, 3});
  ASSERT_EQ(sl.shape(), (Shape{2, 2}));
  EXPECT_EQ(sl.get(3), x.get(3 * 6 + 3));
  Array p = pl::jnp::pad(x, {{1, 0}, {0, 2}}, -1.0);
  ASSERT_EQ(p.shape(), (Shape{5, 8}));
  EXPECT_EQ(p.get(0), -1.0);
  EXPECT_EQ(p.get(8 + 1), x.get(1));
  EXPECT_EQ(p.get(8 + 7), -1.0);
  Array start = pl::lax::full({}, 9, pl::i32);  // clamped to 6 - 2 = 4, as lax.dynamic_slice
  Array ds = pl::lax::dynamic_slice(x, {pl::lax::full({}, 1, pl::i32), start}, {2, 2});
  EXPECT_EQ(ds.get(0), x.get(6 + 4));
  Array up = pl::lax::dynamic_update_slice(x, pl::jnp::ones_like(ds), {pl::lax::full({}, 1, pl::i32), start});
  EXPECT_EQ(up.get(6 + 4), 1.0);
  EXPECT_EQ(up.get(0), x.get(0));
}

// (batch, m, k) x (k, n) is one GEMM over the batch folded into rows, and w's gradient one
// contraction: no copy of w per batch element, no sum of per-element products afterwards.
TEST_P(Program, MatmulOfABatchByAMatrixIsOneGemm) {
  Array xb = randn({3, 4, 6}, 70), w = randn({6, 5}, 71), v = randn({6}, 72);
  const Array rows64 = xb.astype(pl::f64).reshape({12, 6});
  EXPECT_LT(pl::rel_error(pl::jnp::matmul(xb, w), pl::matmul(rows64, w.astype(pl::f64)).reshape({3, 4, 5})), 1e-6);
  const Array xv = pl::jnp::matmul(xb, v);
  ASSERT_EQ(xv.shape(), (Shape{3, 4}));
  EXPECT_LT(pl::rel_error(xv, pl::matmul(rows64, v.astype(pl::f64).reshape({6, 1})).reshape({3, 4})), 1e-6);
  const Array empty = pl::jnp::matmul(pl::ones({2, 3, 0}), pl::ones({0, 5}));  // k = 0: zeros
  ASSERT_EQ(empty.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(pl::jnp::sum(pl::jnp::abs(empty)).get(0), 0.0);
  auto loss = [xb](const Array& w_) { return pl::jnp::sum(pl::jnp::sin(pl::jnp::matmul(xb, w_))); };
  EXPECT_LT(pl::rel_error(pl::grad(loss)(w), finite_difference(loss, w)), 1e-4);
  const std::string opt = optimized_part(pl::jit(pl::grad(loss)).lower(w));
  EXPECT_EQ(count_of(opt, "matmul("), 2u) << opt;  // the forward, and w's gradient
  EXPECT_EQ(count_of(opt, "broadcast["), 0u) << opt;
  EXPECT_EQ(count_of(opt, "reduce_sum["), 0u) << opt;
}

// Slice's gradient pads one dimension at a time; a pad of nothing is its operand, not a copy.
TEST_P(Program, PadOfNothingIsItsOperand) {
  const Array x = randn({4, 6}, 73);
  const Array same = pl::jnp::pad(x, {{0, 0}, {0, 0}});
  EXPECT_EQ(same.data(), x.data());
  auto f = [](const Array& a) { return pl::jnp::sum(pl::jnp::sin(pl::lax::slice(a, {0, 1}, {4, 5}))); };
  const std::string opt = optimized_part(pl::jit(pl::grad(f)).lower(x));
  EXPECT_EQ(count_of(opt, "= pad["), 1u) << opt;  // columns only: the rows are whole
}

TEST_P(Program, ConcatenateCopiesEveryOperandToItsPlace) {
  // Operands of different extents along the axis (1 to 70000): the tiles of the largest operand
  // overhang the smaller ones, whose programs copy only what is inside them.
  Array a = randn({2, 3, 5}, 30), b = randn({2, 7, 5}, 31), c = randn({2, 1, 5}, 32);
  Array cat = pl::jnp::concatenate({a, b, c}, 1);
  ASSERT_EQ(cat.shape(), (Shape{2, 11, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 11; ++j)
      for (int64_t k = 0; k < 5; ++k) {
        const double want = j < 3 ? a.get((i * 3 + j) * 5 + k) : j < 10 ? b.get((i * 7 + j - 3) * 5 + k) : c.get(i * 5 + k);
        ASSERT_EQ(cat.get((i * 11 + j) * 5 + k), want) << i << "," << j << "," << k;
      }
  Array big = randn({2, 70000}, 33), small = randn({2, 5}, 34);
  Array wide = pl::jnp::concatenate({small, big, small}, 1);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 70010; j += j < 10 || j > 69995 ? 1 : 997) {
      const double want = j < 5 ? small.get(i * 5 + j) : j < 70005 ? big.get(i * 70000 + j - 5) : small.get(i * 5 + j - 70005);
      ASSERT_EQ(wide.get(i * 70010 + j), want) << i << "," << j;
    }
  // 40 rows: more operands than one kernel takes, stacked as a tree; integers and bools too.
  std::vector<Array> rows, flags;
  for (int i = 0; i < 40; ++i) {
    rows.push_back(pl::random::uniform(pl::random::key(100 + static_cast<uint64_t>(i)), {6}, pl::i32, -1000, 1000));
    flags.push_back(rows.back() > 0);
  }
  EXPECT_TRUE(pl::array_equal(pl::jnp::stack(rows), pl::stack(rows)));
  EXPECT_TRUE(pl::array_equal(pl::jnp::stack(flags, 1), pl::stack(flags, 1)));
}

TEST_P(Program, JitTracesOncePerSignatureAndFuses) {
  int calls = 0;
  auto f = pl::jit([&calls](const Array& x, const Array& y) {
    ++calls;
    Array h = x;
    for (int i = 0; i < 8; ++i) h = pl::jnp::tanh(h * y + 0.5);
    return h;
  });
  Array x = randn({64, 33}, 7), y = randn({64, 33}, 8);
  Array eager = x;
  for (int i = 0; i < 8; ++i) eager = pl::jnp::tanh(eager * y + 0.5);
  EXPECT_LT(pl::rel_error(f(x, y), eager), 1e-6);
  f(randn({64, 33}, 9), y);
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_EQ(calls, 1);
  f(randn({8, 33}, 9), randn({8, 33}, 10));
  EXPECT_EQ(f.trace_count(), 2);
  const std::string lowered = f.lower(x, y);
  EXPECT_NE(lowered.find("--- optimized ---"), std::string::npos);
  EXPECT_NE(lowered.find("(1 kernels)"), std::string::npos) << lowered;  // 24 ops, one fused kernel
}

TEST_P(Program, JitLowerBeforeTheFirstCall) {
  // lower() traces the entry a call then reuses: the call must still find its result's structure
  // (without it the call fails an internal assertion).
  auto f = pl::jit([](const Array& a, const Array& b) { return std::make_tuple(a + b, a * b); });
  Array x = randn({5}, 14), y = randn({5}, 15);
  EXPECT_NE(f.lower(x, y).find("--- optimized ---"), std::string::npos);
  auto [s, p] = f(x, y);
  EXPECT_LT(pl::rel_error(s, x + y), 1e-7);
  EXPECT_LT(pl::rel_error(p, x * y), 1e-7);
  EXPECT_EQ(f.trace_count(), 1);
}

TEST_P(Program, JitRemovesCommonSubexpressionsAndDeadCode) {
  auto f = pl::jit([](const Array& x) {
    Array unused = pl::jnp::exp(x);
    (void)unused;
    return pl::jnp::sum(x * 3.0) + pl::jnp::sum(x * 3.0);
  });
  Array x = randn({16}, 11);
  const std::string lowered = f.lower(x);
  const size_t from = lowered.find("--- optimized ---");
  const std::string opt = lowered.substr(from, lowered.find("--- steps") - from);
  EXPECT_EQ(opt.find("exp("), std::string::npos) << opt;
  EXPECT_EQ(opt.find("reduce_sum") , opt.rfind("reduce_sum")) << opt;  // one sum left
  EXPECT_NEAR(f(x).get(0), 2 * 3 * pl::jnp::sum(x).get(0), 1e-4);
}

TEST_P(Program, JitDropsProductsWithOne) {
  // x * ones (a full of one, broadcast) is x exactly; a product with ones that broadcasts x is not
  // dropped (the result's shape is not x's), and neither is a product with 1.5.
  auto f = pl::jit([](const Array& x) {
    Array ones = pl::lax::full({4, 6}, 1.0);
    return std::make_tuple(x * ones, pl::lax::full({3, 4, 6}, 1.0) * x, x * 1.5);
  });
  Array x = randn({4, 6}, 13);
  const std::string opt = optimized_part(f.lower(x));
  EXPECT_EQ(count_of(opt, "mul("), 2u) << opt;
  auto [a, b, c] = f(x);
  EXPECT_EQ(pl::rel_error(a, x), 0.0);
  EXPECT_EQ(pl::rel_error(pl::lax::index(b, 2), x), 0.0);
  EXPECT_LT(pl::rel_error(c, x * 1.5), 1e-7);
}

TEST_P(Program, GradMatchesFiniteDifferences) {
  Array x = randn({3, 4}, 12), w = randn({4, 2}, 13);
  auto loss = [](const Array& a, const Array& b) {
    Array h = pl::jnp::tanh(pl::jnp::matmul(a, b));
    return pl::jnp::mean(h * h) + pl::jnp::logsumexp(a) + pl::jnp::sum(pl::jnp::exp(a) / (1.0 + a * a));
  };
  auto [gx, gw] = pl::grad<0, 1>(loss)(x, w);
  EXPECT_LT(pl::rel_error(gx, finite_difference([&](const Array& a) { return loss(a, w.astype(pl::f64)); }, x)), 1e-5);
  EXPECT_LT(pl::rel_error(gw, finite_difference([&](const Array& b) { return loss(x.astype(pl::f64), b); }, w)), 1e-5);
  auto jitted = pl::jit(pl::grad(loss));
  EXPECT_LT(pl::rel_error(jitted(x, w), gx), 1e-6);
  auto [value, g0] = pl::value_and_grad(loss)(x, w);
  EXPECT_NEAR(value.get(0), loss(x, w).get(0), 1e-5);
  EXPECT_LT(pl::rel_error(g0, gx), 1e-7);
}

TEST_P(Program, GradOfGradAndJvp) {
  Array x = randn({5}, 14);
  auto f = [](const Array& v) { return pl::jnp::sum(pl::jnp::sin(v) * v); };
  // d/dx sum(d/dx_i (sin x_i x_i)) = sum over i of (2 cos x_i - x_i sin x_i)
  Array gg = pl::grad([&](const Array& v) { return pl::jnp::sum(pl::grad(f)(v)); })(x);
  EXPECT_LT(pl::rel_error(gg, reference(x, [](double v) { return 2 * std::cos(v) - v * std::sin(v); })), 1e-5);
  Array t = randn({5}, 15);
  auto [out, tan] = pl::jvp([](const Array& v) { return pl::jnp::exp(v) * 2.0; }, std::make_tuple(x), std::make_tuple(t));
  Array ref(x.shape(), pl::f64);
  for (int64_t i = 0; i < 5; ++i) ref.set(i, 2 * std::exp(x.get(i)) * t.get(i));
  EXPECT_LT(pl::rel_error(tan, ref), 1e-6);
}

TEST_P(Program, CustomVjpCallsTheUsersBackward) {
  int bwd_calls = 0;
  // A deliberately different backward (3x instead of 2x) shows that bwd, not autodiff, is used.
  auto sq = pl::custom_vjp(
      "square", [](const Array& v) { return v * v; }, [](const Array& v) { return std::make_pair(v * v, v); },
      [&bwd_calls](const Array& r, const Array& g) {
        ++bwd_calls;
        return std::make_tuple(g * 3.0 * r);
      });
  Array x = randn({6}, 16);
  EXPECT_LT(pl::rel_error(sq(x), x * x), 1e-7);
  Array g = pl::grad([&](const Array& v) { return pl::jnp::sum(sq(v)); })(x);
  EXPECT_LT(pl::rel_error(g, reference(x, [](double v) { return 3 * v; })), 1e-6);
  EXPECT_EQ(bwd_calls, 1);
}

TEST_P(Program, VmapBatchesOpsAndKernels) {
  Array xs = randn({3, 4, 5}, 17), w = randn({5, 2}, 18);
  auto per_example = [](const Array& a, const Array& b) { return pl::jnp::sum(pl::nn::relu(pl::jnp::matmul(a, b)), {0}); };
  Array batched = pl::vmap(per_example, {0, pl::None})(xs, w);
  ASSERT_EQ(batched.shape(), (Shape{3, 2}));
  for (int64_t b = 0; b < 3; ++b)
    EXPECT_LT(pl::rel_error(pl::lax::index(batched, b), per_example(pl::lax::index(xs, b), w)), 1e-6);
  // A pallas_call inside keeps Pallas's batching rule (a new grid axis).
  auto double_it = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f; }, pl::ShapeDtype({5}, pl::f32),
                                   {.backend = GetParam()});
  Array v = randn({4, 5}, 19);
  Array out = pl::vmap([&](const Array& r) { return double_it(r) + 1.0; })(v);
  EXPECT_LT(pl::rel_error(out, v * 2.0 + 1.0), 1e-7);
  // vmap of grad and grad of vmap agree.
  auto f = [](const Array& r) { return pl::jnp::sum(pl::jnp::sin(r) * r); };
  Array g1 = pl::vmap(pl::grad(f))(v);
  Array g2 = pl::grad([&](const Array& m) { return pl::jnp::sum(pl::vmap(f)(m)); })(v);
  EXPECT_LT(pl::rel_error(g1, g2), 1e-6);
}

TEST_P(Program, ScanForiWhileCond) {
  Array xs = randn({6, 4}, 20), u = randn({4}, 21);
  auto [h, ys] = pl::scan([&](const Array& c, const Array& x) {
    Array n = pl::nn::relu(u * c + x);
    return std::make_pair(n, n);
  }, pl::jnp::zeros_like(u), xs);
  Array ref = pl::ops::indrnn_reference(xs, u, pl::zeros({4}));
  EXPECT_LT(pl::rel_error(ys, ref), 1e-6);
  EXPECT_LT(pl::rel_error(h, pl::lax::index(ref, 5)), 1e-6);
  Array total = pl::fori_loop(2, 7, [](const Array& i, const Array& c) { return c + i.astype(pl::f32); }, pl::lax::full({}, 0.0));
  EXPECT_EQ(total.get(0), 2 + 3 + 4 + 5 + 6);
  Array w = pl::while_loop([](const Array& c) { return c < 100.0; }, [](const Array& c) { return c * 3.0; }, pl::lax::full({}, 1.0));
  EXPECT_EQ(w.get(0), 243.0);
  Array c = pl::cond(pl::jnp::sum(u) > 0.0, [](const Array& a) { return a + 1.0; }, [](const Array& a) { return a - 1.0; }, u);
  EXPECT_LT(pl::rel_error(c, pl::jnp::sum(u).get(0) > 0 ? u + 1.0 : u - 1.0), 1e-7);
  // The same under jit: the loops are programs, not unrolled.
  auto jitted = pl::jit([&](const Array& x) {
    return pl::scan([&](const Array& cc, const Array& xt) { Array n = pl::nn::relu(u * cc + xt); return std::make_pair(n, n); },
                    pl::jnp::zeros_like(u), x).second;
  });
  EXPECT_LT(pl::rel_error(jitted(xs), ref), 1e-6);
  EXPECT_NE(jitted.lower(xs).find("scan"), std::string::npos);
}

TEST_P(Program, GradThroughScanAndForiLoop) {
  Array xs = randn({5, 3}, 22), u = randn({3}, 23);
  auto loss = [](const Array& uu, const Array& xx) {
    auto r = pl::scan([&](const Array& c, const Array& x) {
      Array n = pl::jnp::tanh(uu * c + x);
      return std::make_pair(n, n * n);
    }, pl::jnp::ones_like(uu), xx);
    return pl::jnp::sum(r.second) + pl::jnp::sum(r.first);
  };
  auto [gu, gx] = pl::grad<0, 1>(loss)(u, xs);
  EXPECT_LT(pl::rel_error(gu, finite_difference([&](const Array& a) { return loss(a, xs.astype(pl::f64)); }, u)), 1e-5);
  EXPECT_LT(pl::rel_error(gx, finite_difference([&](const Array& b) { return loss(u.astype(pl::f64), b); }, xs)), 1e-5);
  auto fl = [](const Array& a) {
    return pl::jnp::sum(pl::fori_loop(0, 4, [&](const Array&, const Array& c) { return pl::jnp::sin(c) * a; }, a));
  };
  EXPECT_LT(pl::rel_error(pl::grad(fl)(u), finite_difference(fl, u)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Backends, Program, ::testing::ValuesIn(host_backends()),
                         [](const auto& param_info) { return param_info.param; });

// ---- errors: each names the op or program and what was wrong ----

// grad through cond: the taken branch's derivative, checked against float64 finite differences
// on inputs that take each branch.
TEST_P(Program, GradOfCond) {
  auto f = [](const Array& x) {
    Array y = pl::cond(pl::jnp::sum(x) > 0.0, [](const Array& a) { return a * a * pl::jnp::sin(a); },
                       [](const Array& a) { return pl::jnp::exp(a) * 3.0; }, x);
    return pl::jnp::sum(y);
  };
  for (double shift : {2.0, -2.0}) {
    Array x = randn({5}, 60) * 0.3 + shift;
    Array g = pl::grad(f)(x);
    EXPECT_LT(pl::rel_error(g, finite_difference(f, x)), 1e-4) << shift;
    EXPECT_LT(pl::rel_error(pl::jit(pl::grad(f))(x), g.astype(pl::f64)), 1e-6) << shift;
  }
}

// vmap of while_loop: each example loops until its own condition fails (the others wait).
TEST_P(Program, VmapOfWhileLoop) {
  auto doubling = [](const Array& x) {
    return pl::while_loop([](const Array& c) { return pl::jnp::sum(c) < 100.0; }, [](const Array& c) { return c * 2.0; },
                          x);
  };
  Array xs = pl::jnp::abs(randn({5, 2}, 61)) * 10.0 + 0.5;
  Array got = pl::vmap(doubling)(xs);
  Array ref(xs.shape(), pl::f64);
  for (int64_t r = 0; r < 5; ++r) {
    double a = xs.get(r * 2), b = xs.get(r * 2 + 1);
    while (a + b < 100.0) a *= 2, b *= 2;
    ref.set(r * 2, a);
    ref.set(r * 2 + 1, b);
  }
  EXPECT_LT(pl::rel_error(got, ref), 1e-6);
  EXPECT_LT(pl::rel_error(pl::jit(pl::vmap(doubling))(xs), ref), 1e-6);
}

// grad through strided slices, against float64 finite differences.
TEST_P(Program, GradOfStridedSlice) {
  auto f = [](const Array& x) {
    Array s = pl::lax::slice(x, {1, 0}, {7, 5}, {2, 3});  // rows 1, 3, 5; columns 0, 3
    return pl::jnp::sum(pl::jnp::sin(s) * s);
  };
  Array x = randn({8, 5}, 62);
  EXPECT_LT(pl::rel_error(pl::grad(f)(x), finite_difference(f, x)), 1e-4);
}

// vmap of dynamic_slice / dynamic_update_slice whose start indices differ per example.
TEST_P(Program, VmapOfDynamicSliceWithBatchedIndices) {
  Array xs = randn({4, 10}, 63);
  Array starts = pl::array({0, 3, 6, 9}, pl::i32);  // the last one is clamped to 7, as lax.dynamic_slice does
  auto window = [](const Array& x, const Array& s) { return pl::lax::dynamic_slice(x, {s}, {3}); };
  Array got = pl::vmap(window)(xs, starts);
  auto put = [](const Array& x, const Array& s) { return pl::lax::dynamic_update_slice(x, pl::ones({2}), {s}); };
  Array upd = pl::vmap(put)(xs, starts);
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t s = std::min<int64_t>(starts.get_int(r), 7), u = std::min<int64_t>(starts.get_int(r), 8);
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(got.get(r * 3 + c), xs.get(r * 10 + s + c)) << r;
    for (int64_t c = 0; c < 10; ++c)
      EXPECT_EQ(upd.get(r * 10 + c), c >= u && c < u + 2 ? 1.0 : xs.get(r * 10 + c)) << r << "," << c;
  }
}

TEST(ProgramErrors, BranchingOnATracer) {
  auto f = pl::jit([](const Array& x) { return x.get(0) > 0 ? x : -x; });
  PL_EXPECT_ERROR(f(pl::ones({3})), "ConcretizationTypeError");
  PL_EXPECT_ERROR(f(pl::ones({3})), "pl::cond");
}

TEST(ProgramErrors, ShapeMismatchAtTraceTime) {
  auto f = pl::jit([](const Array& a, const Array& b) { return pl::jnp::exp(a) + b; }, {.name = "adder"});
  PL_EXPECT_ERROR(f(pl::ones({3}), pl::ones({4})), "add: shapes (3,) and (4,) do not broadcast (while tracing 'adder', at equation 1)");
  PL_EXPECT_ERROR(pl::jnp::matmul(pl::ones({2, 3}), pl::ones({4, 5})), "matmul: contracting dimensions differ");
}

// zeros_like and company of the undefined (none) Array name themselves instead of making a scalar;
// of a host array, with x's dtype or the one asked for, traced or not.
TEST(ProgramErrors, FullLikeOfAnUndefinedArray) {
  PL_EXPECT_ERROR(pl::jnp::zeros_like(Array()), "zeros_like: its argument is an undefined (none) Array");
  PL_EXPECT_ERROR(pl::jnp::ones_like(Array()), "ones_like: its argument is an undefined (none) Array");
  PL_EXPECT_ERROR(pl::jnp::full_like(Array(), 2.0, pl::f32), "full_like: its argument is an undefined (none) Array");
  const Array x = pl::random::normal(pl::random::key(29), {2, 3}).astype(pl::bf16);
  const Array h = pl::jnp::full_like(x, 0.5, pl::f32);
  EXPECT_EQ(h.dtype(), pl::f32);
  EXPECT_EQ(h.shape(), x.shape());
  const Array traced = pl::jit([](const Array& a) { return pl::jnp::ones_like(a) + a; })(x);
  EXPECT_EQ(traced.dtype(), pl::bf16);
  for (int64_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h.get(i), 0.5);
    const double want = x.get(i) + 1.0;  // float64; the result is rounded once to bfloat16 (2^-9)
    EXPECT_NEAR(traced.get(i), want, std::abs(want) * 0x1p-9) << "element " << i;
  }
}

TEST(ProgramErrors, GradOfNonScalarAndIntegerInputs) {
  PL_EXPECT_ERROR(pl::grad([](const Array& x) { return x * 2.0; })(pl::ones({3})),
                    "grad: the function must return a float scalar, got f32[3]");
  PL_EXPECT_ERROR(pl::grad([](const Array& x) { return pl::jnp::sum(x).astype(pl::f32); })(pl::arange(3)),
                    "grad: argument leaf 0 has dtype int32");
}

TEST(ProgramErrors, CustomVjpBackwardWithWrongCotangents) {
  auto bad_count = pl::custom_vjp(
      "twice", [](const Array& v) { return v * 2.0; }, [](const Array& v) { return std::make_pair(v * 2.0, v); },
      [](const Array&, const Array& g) { return std::make_tuple(g, g); });
  PL_EXPECT_ERROR(pl::grad([&](const Array& v) { return pl::jnp::sum(bad_count(v)); })(pl::ones({3})),
                    "custom_vjp 'twice': bwd returned 2 cotangents for a function of 1 arguments");
  auto bad_shape = pl::custom_vjp(
      "twice", [](const Array& v) { return v * 2.0; }, [](const Array& v) { return std::make_pair(v * 2.0, v); },
      [](const Array&, const Array& g) { return std::make_tuple(pl::jnp::sum(g)); });
  PL_EXPECT_ERROR(pl::grad([&](const Array& v) { return pl::jnp::sum(bad_shape(v)); })(pl::ones({3})),
                    "custom_vjp 'twice': bwd's cotangent 0 is f32[] but argument 0 is f32[3]");
}

TEST(ProgramErrors, GradOfAKernelWithoutRule) {
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f; }, pl::ShapeDtype({3}, pl::f32),
                           {.name = "doubler", .interpret = true});
  PL_EXPECT_ERROR(pl::grad([&](const Array& v) { return pl::jnp::sum(k(v)); })(pl::ones({3})),
                    "grad of pallas_call 'doubler': a kernel has no derivative rule");
}

TEST(ProgramErrors, EscapedTracerAndMissingRules) {
  Array leaked;
  auto f = pl::jit([&leaked](const Array& x) { leaked = x * 2.0; return x; });
  f(pl::ones({2}));
  PL_EXPECT_ERROR(leaked + 1.0, "escaped the function that was traced");
  auto doubling = [](const Array& x) {
    Array r = pl::while_loop([](const Array& c) { return pl::jnp::sum(c) < 10.0; }, [](const Array& c) { return c * 2.0; }, x);
    return pl::jnp::sum(r);
  };
  PL_EXPECT_ERROR(pl::grad(doubling)(pl::ones({3})),
                    "while_loop: no VJP rule (transformation: vjp)");
}

}  // namespace
