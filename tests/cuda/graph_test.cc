// Jitted programs on a CUDA device replay as one CUDA graph from their third call (executor_graph.cc):
// every call's result against the same program run eagerly, earlier results untouched by later
// replays, inputs at one address, outputs that are inputs or views, and the programs that keep
// running step by step.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"

namespace palladium::cudatest {
namespace {

const Device kGpu{Device::cuda, 0};

// Matmuls, reductions, a transpose and elementwise chains: several kernels, and a reshape view.
Array mixed(const Array& a, const Array& b) {
  Array s = jnp::matmul(a, b);
  s = s - jnp::max(s, {1}, true);
  Array e = jnp::exp(s);
  Array p = e / jnp::sum(e, {1}, true);
  Array o = jnp::matmul(jnp::transpose(p, {1, 0}), a) * 0.5 + b;
  return jnp::tanh(o) + jnp::mean(o, {0}, true);
}

std::string status_of(const std::string& lowered) {
  const size_t at = lowered.rfind("  (");
  return at == std::string::npos ? "" : lowered.substr(at);
}

TEST(CudaGraph, JittedProgramReplaysAsOneGraph) {
  PL_REQUIRE_GPU();
  auto j = jit(mixed);
  std::vector<Array> got, want;
  for (uint64_t i = 0; i < 6; ++i) {
    Array a = to_device(normal(100 + i, {32, 32}), kGpu), b = to_device(normal(200 + i, {32, 32}), kGpu);
    got.push_back(j(a, b));
    want.push_back(mixed(a, b));
    if (i == 0) {
      EXPECT_NE(status_of(j.lower(a, b)).find("recorded as a CUDA graph"), std::string::npos) << j.lower(a, b);
    }
  }
  Array a = to_device(normal(7, {32, 32}), kGpu);
  EXPECT_NE(status_of(j.lower(a, a)).find("replayed as a CUDA graph of"), std::string::npos) << j.lower(a, a);
  // Every result is its own: later replays did not write over earlier ones.
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].device(), kGpu);
    EXPECT_LT(rel_error(to_host(got[i]), to_host(want[i])), 1e-5) << "call " << i;
  }
  // One array passed twice (recorded with two): the graph is not used, the result is right.
  EXPECT_LT(rel_error(to_host(j(a, a)), to_host(mixed(a, a))), 1e-5);
  // Host inputs are placed on the device first, as without graphs.
  Array ha = normal(8, {32, 32}), hb = normal(9, {32, 32});
  EXPECT_LT(rel_error(to_host(j(ha, hb)), to_host(mixed(ha, hb))), 1e-5);
}

TEST(CudaGraph, OutputsThatAreInputsOrViews) {
  PL_REQUIRE_GPU();
  auto f = [](const Array& x, const Array& y) {
    Array h = jnp::tanh(jnp::matmul(x, y));
    return std::make_tuple(x, jnp::reshape(h * 2.0, {16, 64}), jnp::sum(h, {0}));
  };
  auto j = jit(f);
  for (uint64_t i = 0; i < 5; ++i) {
    Array x = to_device(normal(300 + i, {32, 16}), kGpu), y = to_device(normal(400 + i, {16, 32}), kGpu);
    auto [a, b, c] = j(x, y);
    auto [ea, eb, ec] = f(x, y);
    EXPECT_EQ(a.data(), x.data());
    EXPECT_EQ(b.shape(), (Shape{16, 64}));
    EXPECT_LT(rel_error(to_host(b), to_host(eb)), 1e-5) << "call " << i;
    EXPECT_LT(rel_error(to_host(c), to_host(ec)), 1e-5) << "call " << i;
  }
}

TEST(CudaGraph, ProgramsWithHostLoopsRunStepByStep) {
  PL_REQUIRE_GPU();
  // A while_loop reads its predicate on the host: the program cannot be one graph.
  auto f = [](const Array& x) {
    return while_loop([](const Array& c) { return jnp::sum(c) < 1000.0; }, [](const Array& c) { return c * 2.0 + 1.0; }, x);
  };
  auto j = jit(f);
  Array x = to_device(jnp::abs(normal(10, {8})) + 0.5, kGpu);
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_error(to_host(j(x)), to_host(f(x))), 1e-6);
  EXPECT_NE(status_of(j.lower(x)).find("launched kernel by kernel: it runs while_loop from the host"), std::string::npos)
      << j.lower(x);
}

}  // namespace
}  // namespace palladium::cudatest
