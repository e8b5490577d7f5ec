// Program-level kernels on the cuda backend: the two-pass arg-reduction and the rerolled naive
// IndRNN loop (one fused scan kernel) are generated and compiled by NVRTC for sm_90a here, and on a
// GPU their results are the GPU's; both are checked against host references.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/indrnn.h"
#include "palladium/stream.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/indrnn_naive.h"

namespace palladium::cudatest {
namespace {

// Device arrays on a GPU; host arrays where the kernels are only compiled (the interpreter runs them).
Array on_backend(const Array& a) { return results_are_real() ? to_device(a, Device{Device::cuda, 0}) : a; }

TEST(CudaProgram, LargeArgReductionsInTwoPasses) {
  PL_REQUIRE_NVRTC();
  Array y = normal(21, {2, 70000});
  y.set(20000, 50.0);
  y.set(60000, 50.0);  // a tie across blocks: the first wins
  auto f = jit([](const Array& a) { return std::make_pair(jnp::argmax(a, 1), jnp::argmin(a, 1)); }, {.backend = "cuda"});
  auto [am, an] = f(on_backend(y));
  const Array hm = to_host(am), hn = to_host(an);
  for (int64_t r = 0; r < 2; ++r) {
    int64_t best_max = 0, best_min = 0;
    for (int64_t i = 0; i < 70000; ++i) {
      if (y.get(r * 70000 + i) > y.get(r * 70000 + best_max)) best_max = i;
      if (y.get(r * 70000 + i) < y.get(r * 70000 + best_min)) best_min = i;
    }
    EXPECT_EQ(static_cast<int64_t>(hm.get(r)), best_max) << "row " << r;
    EXPECT_EQ(static_cast<int64_t>(hn.get(r)), best_min) << "row " << r;
  }
  EXPECT_EQ(hm.get(0), 20000);
}

TEST(CudaProgram, RerolledNaiveLoopIsOneScanKernel) {
  PL_REQUIRE_NVRTC();
  Array x = normal(22, {64, 96}), u = random::uniform(random::key(23), {96}, f32, 0.5, 1.0), h0 = normal(24, {96});
  auto f = jit(test_support::indrnn_naive_loop, {.backend = "cuda"});
  Array out = f(on_backend(x), on_backend(u), on_backend(h0));
  EXPECT_LT(rel_error(to_host(out), ops::indrnn_reference(x, u, h0)), 1e-6);
  EXPECT_NE(f.lower(on_backend(x), on_backend(u), on_backend(h0)).find("kernel scan_fused"), std::string::npos);
}

// A row softmax and a column mean, each fused with its reductions into one kernel (fusion.cc):
// the reductions over a whole block's rows or columns on the GPU, against float64.
TEST(CudaProgram, FusedReductionsWithTheirElementwiseOps) {
  PL_REQUIRE_NVRTC();
  auto softmax = jit([](const Array& x) {
    Array e = jnp::exp(x - jnp::max(x, {1}, true));
    return e / jnp::sum(e, {1}, true);
  }, {.backend = "cuda"});
  auto centred = jit([](const Array& x) { return jnp::tanh(x) - jnp::mean(x, {0}, true); }, {.backend = "cuda"});
  Array x = normal(26, {77, 200});
  const Array p = to_host(softmax(on_backend(x))), c = to_host(centred(on_backend(x)));
  Array ref_p({77, 200}, f64), ref_c({77, 200}, f64);
  for (int64_t i = 0; i < 77; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < 200; ++j) mx = std::max(mx, x.get(i * 200 + j));
    for (int64_t j = 0; j < 200; ++j) sum += std::exp(x.get(i * 200 + j) - mx);
    for (int64_t j = 0; j < 200; ++j) ref_p.set(i * 200 + j, std::exp(x.get(i * 200 + j) - mx) / sum);
  }
  for (int64_t j = 0; j < 200; ++j) {
    double mean = 0;
    for (int64_t i = 0; i < 77; ++i) mean += x.get(i * 200 + j) / 77;
    for (int64_t i = 0; i < 77; ++i) ref_c.set(i * 200 + j, std::tanh(x.get(i * 200 + j)) - mean);
  }
  EXPECT_LT(rel_error(p, ref_p), 1e-6);
  EXPECT_LT(rel_error(c, ref_c), 1e-6);
  EXPECT_NE(softmax.lower(on_backend(x)).find("--- steps (1 kernels)"), std::string::npos) << softmax.lower(on_backend(x));
  EXPECT_NE(centred.lower(on_backend(x)).find("--- steps (1 kernels)"), std::string::npos) << centred.lower(on_backend(x));
}

// A matmul heading a fused kernel on the GPU: bias, activation and a row softmax over 48 columns
// (one tile) computed on the dot's accumulator layout; float32 (SIMT dot), against float64.
TEST(CudaProgram, MatmulEpilogueAndSoftmaxInOneKernel) {
  PL_REQUIRE_NVRTC();
  auto f = jit([](const Array& a, const Array& b, const Array& bias) {
    Array s = jnp::tanh(jnp::matmul(a, b) + bias);
    Array e = jnp::exp(s - jnp::max(s, {1}, true));
    return e / jnp::sum(e, {1}, true);
  }, {.backend = "cuda"});
  Array a = normal(27, {100, 40}), b = normal(28, {40, 48}), bias = normal(29, {48});
  const Array got = to_host(f(on_backend(a), on_backend(b), on_backend(bias)));
  Array ref({100, 48}, f64);
  for (int64_t i = 0; i < 100; ++i) {
    double s[48], mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < 48; ++j) {
      double d = bias.get(j);
      for (int64_t q = 0; q < 40; ++q) d += a.get(i * 40 + q) * b.get(q * 48 + j);
      s[j] = std::tanh(d);
      mx = std::max(mx, s[j]);
    }
    for (int64_t j = 0; j < 48; ++j) sum += std::exp(s[j] - mx);
    for (int64_t j = 0; j < 48; ++j) ref.set(i * 48 + j, std::exp(s[j] - mx) / sum);
  }
  EXPECT_LT(rel_error(got, ref), 1e-5);
  const std::string lowered = f.lower(on_backend(a), on_backend(b), on_backend(bias));
  EXPECT_NE(lowered.find("--- steps (1 kernels)"), std::string::npos) << lowered;
}

// x @ w.T with the transpose folded into the matmul's kernel: the dot reads w's blocks transposed,
// through the contraction's steps (K = 1024), against float64.
TEST(CudaProgram, MatmulReadsATransposedOperandInPlace) {
  PL_REQUIRE_NVRTC();
  auto f = jit([](const Array& x, const Array& w) { return jnp::matmul(x, jnp::transpose(w, {1, 0})); }, {.backend = "cuda"});
  Array x = normal(30, {48, 1024}), w = normal(31, {80, 1024});
  const Array got = to_host(f(on_backend(x), on_backend(w)));
  Array ref({48, 80}, f64);
  for (int64_t i = 0; i < 48; ++i)
    for (int64_t j = 0; j < 80; ++j) {
      double d = 0;
      for (int64_t q = 0; q < 1024; ++q) d += x.get(i * 1024 + q) * w.get(j * 1024 + q);
      ref.set(i * 80 + j, d);
    }
  EXPECT_LT(rel_error(got, ref), 1e-5);
  const std::string lowered = f.lower(on_backend(x), on_backend(w));
  EXPECT_NE(lowered.find("--- steps (1 kernels)"), std::string::npos) << lowered;
}

// bfloat16 matmuls of at least a tile each way take the tensor cores' tiles (128 x 128, k by 64,
// 8 warps: plan_matmul): partial row and column blocks, an operand transposed in place on either
// side, and an epilogue fused in, against float64 products of the same bfloat16 inputs (one
// bfloat16 rounding of the result: 2^-8).
TEST(CudaProgram, Bfloat16MatmulsTakeTheTensorCoreTiles) {
  PL_REQUIRE_NVRTC();
  auto f = jit([](const Array& x, const Array& w, const Array& y, const Array& v) {
    return std::make_tuple(jnp::matmul(x, w), jnp::matmul(jnp::transpose(x, {1, 0}), y) * 2.0,
                           jnp::matmul(x, jnp::transpose(v, {1, 0})));
  }, {.backend = "cuda"});
  const Array x = normal(32, {200, 192}).astype(bf16), w = normal(33, {192, 320}).astype(bf16),
              y = normal(34, {200, 256}).astype(bf16), v = normal(35, {136, 192}).astype(bf16);
  auto [xw, xty, xvt] = f(on_backend(x), on_backend(w), on_backend(y), on_backend(v));
  const Array x64 = x.astype(f64), w64 = w.astype(f64), y64 = y.astype(f64), v64 = v.astype(f64);
  EXPECT_LT(rel_error(to_host(xw).astype(f64), matmul(x64, w64)), 1.0 / 256);
  EXPECT_LT(rel_error(to_host(xty).astype(f64), matmul(jnp::transpose(x64, {1, 0}), y64) * 2.0), 1.0 / 256);
  EXPECT_LT(rel_error(to_host(xvt).astype(f64), matmul(x64, jnp::transpose(v64, {1, 0}))), 1.0 / 256);
}

// Concatenate on the GPU: each program copies one tile of one operand into the whole-array result.
TEST(CudaProgram, ConcatenateOfOperandsOfDifferentWidths) {
  PL_REQUIRE_NVRTC();
  auto f = jit([](const Array& a, const Array& b) { return jnp::concatenate({a, b, a}, 1); }, {.backend = "cuda"});
  Array a = normal(32, {30, 9}), b = normal(33, {30, 10000});
  const Array got = to_host(f(on_backend(a), on_backend(b)));
  ASSERT_EQ(got.shape(), (Shape{30, 10018}));
  for (int64_t i = 0; i < 30; ++i)
    for (int64_t j = 0; j < 10018; ++j) {
      const double want = j < 9 ? a.get(i * 9 + j) : j < 10009 ? b.get(i * 10000 + j - 9) : a.get(i * 9 + j - 10009);
      ASSERT_EQ(got.get(i * 10018 + j), want) << i << "," << j;
    }
}

// Eager ops on device arrays with host scalar operands: the device copy of each scalar is reused
// across ops (relu's 0 every iteration), so each value must still reach its own op, also after the
// cache of copies has filled up and started over.
TEST(CudaProgram, EagerHostScalarsReachTheirOps) {
  PL_REQUIRE_GPU();
  const Array x = normal(25, {1000});
  const Array dx = on_backend(x);
  std::vector<double> scales;
  for (int i = 0; i < 600; ++i) scales.push_back(0.5 + 0.01 * (i % 300));  // 300 values, each twice
  for (size_t i = 0; i < scales.size(); i += 37) {
    const Array r = to_host(nn::relu(dx * scales[i]) - 1.25);
    double worst = 0;
    for (int64_t k = 0; k < x.size(); ++k) {
      const double want = std::max(x.get(k) * scales[i], 0.0) - 1.25;
      worst = std::max(worst, std::abs(r.get(k) - want) / (1.0 + std::abs(want)));
    }
    EXPECT_LT(worst, 1e-6) << "scale " << scales[i];
  }
  for (double s : scales) (void)(dx * s);  // 300 distinct scalars: more than the cache holds
  EXPECT_LT(rel_error(to_host(dx * 3.5), palladium::multiply(x, full({1}, 3.5, f32))), 1e-6);
  EXPECT_LT(rel_error(to_host(jnp::maximum(dx, 0) + 0), palladium::relu(x)), 1e-6);
}

// zeros_like, ones_like and full_like of an eager device array land on its device (the scalar
// is uploaded once and broadcast there), with x's dtype or the one asked for; of a host array on
// the host.
TEST(CudaProgram, FullLikeFollowsItsArgumentsDevice) {
  PL_REQUIRE_GPU();
  const Array x = normal(27, {3, 50}).astype(bf16);
  const Array dx = on_backend(x);
  struct Case {
    Array got;
    double value;
    DType dtype;
  };
  for (const Case& c : {Case{jnp::zeros_like(dx), 0.0, bf16}, Case{jnp::ones_like(dx), 1.0, bf16},
                        Case{jnp::full_like(dx, -2.5), -2.5, bf16}, Case{jnp::full_like(dx, 0.75, f32), 0.75, f32}}) {
    EXPECT_EQ(c.got.device().str(), dx.device().str());
    EXPECT_EQ(c.got.dtype(), c.dtype);
    EXPECT_EQ(c.got.shape(), x.shape());
    const Array h = to_host(c.got);
    for (int64_t k = 0; k < h.size(); ++k) ASSERT_EQ(h.get(k), c.value) << "element " << k;
  }
  EXPECT_EQ(jnp::full_like(x, 3.0, f32).device().kind, Device::cpu);
}

// Eager slices of device arrays: contiguous ones are views of the parent's buffer (no kernel), the
// others are copied; each equals the host's slice, also once the parent Array is gone and when the
// view is read on another stream.
TEST(CudaProgram, EagerSlicesOfDeviceArrays) {
  PL_REQUIRE_GPU();
  const Array x = normal(26, {6, 8, 10});
  struct Case {
    std::vector<int64_t> lo, hi, step;
    int64_t view_at;  // the first element's offset in the parent when it is a view; -1: a copy
  };
  const std::vector<Case> cases = {
      {{2, 0, 0}, {3, 8, 10}, {}, 160},   // one row
      {{1, 0, 0}, {4, 8, 10}, {}, 80},    // rows 1..3
      {{2, 3, 0}, {3, 5, 10}, {}, 190},   // inside one row
      {{2, 3, 4}, {3, 4, 9}, {}, 194},    // a run inside one line
      {{0, 0, 0}, {6, 8, 10}, {}, 0},     // everything
      {{0, 1, 0}, {6, 3, 10}, {}, -1},    // strided over the first axis
      {{1, 0, 2}, {3, 8, 7}, {}, -1},     // partial last axis over rows
      {{0, 0, 0}, {6, 8, 10}, {2, 1, 1}, -1},  // a step
  };
  for (const Case& c : cases) {
    Array dx = on_backend(x);
    const Array got = lax::slice(dx, c.lo, c.hi, c.step);
    const Array want = lax::slice(x, c.lo, c.hi, c.step);
    const std::ptrdiff_t at = static_cast<const char*>(got.data()) - static_cast<const char*>(dx.data());
    if (c.view_at >= 0) EXPECT_EQ(at, c.view_at * 4) << shape_str(want.shape());
    else EXPECT_TRUE(at < 0 || at >= static_cast<std::ptrdiff_t>(dx.nbytes())) << shape_str(want.shape());
    dx = Array();  // the view keeps the parent's buffer alive
    Array twice = got * 2.0;
    {
      Stream other = new_stream(Device{Device::cuda, 0});
      StreamScope scope(other);
      twice = twice + got;  // read on another stream
    }
    EXPECT_EQ(max_abs_diff(to_host(got), want), 0.0) << shape_str(want.shape());
    EXPECT_LT(max_abs_diff(to_host(twice), palladium::multiply(want, full({1}, 3.0, f32))), 1e-5);
  }
  // The naive IndRNN loop eagerly (x[t] a view per step) matches the float64 loop.
  Array xs = normal(27, {50, 64}), u = random::uniform(random::key(28), {64}, f32, 0.5, 1.0), h0 = normal(29, {64});
  EXPECT_LT(rel_error(to_host(test_support::indrnn_naive_loop(on_backend(xs), on_backend(u), on_backend(h0))),
                      ops::indrnn_reference(xs, u, h0)),
            1e-6);
}

}  // namespace
}  // namespace palladium::cudatest
