// Program-level kernels on the cuda backend: the two-pass arg-reduction and the rerolled naive
// IndRNN loop (one fused scan kernel) are generated and compiled by NVRTC for sm_90a here, and on a
// GPU their results are the GPU's; both are checked against host references.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/indrnn.h"
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

}  // namespace
}  // namespace palladium::cudatest
