// Sharding on the GPUs of this machine, through the NCCL engine: every collective, and partitioned
// programs with each kind of inserted collective, against the same calls on as many virtual CPU
// devices (the in-process engine, which the rest of the suite checks against float64 references)
// and against float64 references. Skipped without GPUs; PALLADIUM_REQUIRE_NCCL=1 makes a missing
// NCCL a failure instead of a fall-back to host staging. The engine is the default between GPUs
// (PALLADIUM_NCCL=0 turns it off). On two H100s they hung at stop 22 before the engine queued its
// operations inside a window that all members enter and leave together (docs/sharding.md, "GPUs").
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "palladium/palladium.h"
#include "sharding/communicator.h"
#include "sharding/distributed.h"
#include "sharding/nccl_api.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::P;
using pl::PartitionSpec;
using pl::Shape;

namespace {

using palladium::test_support::ScopedEnv;

using palladium::test_support::randn;
using palladium::test_support::contains;


bool nccl_required() {
  const char* e = std::getenv("PALLADIUM_REQUIRE_NCCL");
  return e && std::string(e) == "1";
}

// f's result (a sharded Array) on a mesh of `n` devices of `platform`, gathered to the host, with
// the device kind of its first piece.
Array on(const char* platform, int n, const std::function<Array(const pl::Mesh&)>& f, pl::Device* first = nullptr) {
  ScopedEnv p("PALLADIUM_PLATFORM", platform);
  ScopedEnv c("PALLADIUM_CPU_DEVICES", std::to_string(n));
  const pl::Mesh mesh = pl::make_mesh({n}, {"d"});
  Array out = f(mesh);
  if (first) *first = out.is_sharded() ? out.sharded()->pieces.at(0).device() : out.device();
  return pl::to_host(out);
}

// GPUs, with the NCCL engine (the default; set here so that a caller's PALLADIUM_NCCL=0 does not hide it).
#define NEED_GPUS()                                          \
  const int n = pl::cuda_device_count();                     \
  if (n == 0) GTEST_SKIP() << "no GPU here";                 \
  ScopedEnv cuda_platform_env_("PALLADIUM_PLATFORM", "cuda"); \
  ScopedEnv nccl_env_("PALLADIUM_NCCL", "1")

TEST(ShardingNccl, TheEngineBetweenGpusIsNccl) {
  std::string why;
  const pl::sharding::NcclApi* api = pl::sharding::nccl(&why);
  if (!api) {
    EXPECT_TRUE(contains(why, "NCCL could not be loaded")) << why;
    EXPECT_TRUE(contains(why, "PALLADIUM_NCCL_LIBRARY")) << why;
  }
  if (nccl_required()) {
    ASSERT_NE(api, nullptr) << why;
    ASSERT_GT(pl::cuda_device_count(), 0);
  }
  NEED_GPUS();
  const pl::Mesh mesh = pl::make_mesh({n}, {"d"});
  const std::string engine = pl::sharding::make_communicator(mesh)->name();
  if (api) EXPECT_EQ(engine, "nccl (over in-process)");
  else EXPECT_EQ(engine, "in-process");
  ScopedEnv off("PALLADIUM_NCCL", "0");
  EXPECT_EQ(pl::sharding::make_communicator(mesh)->name(), "in-process");
  ScopedEnv unset("PALLADIUM_NCCL", "");
  EXPECT_EQ(pl::sharding::make_communicator(mesh)->name(), api ? "nccl (over in-process)" : "in-process");  // the default
}

// Every collective of shard_map on the GPUs equals the same call on virtual CPU devices: exactly
// for those that only move data, to float rounding for sums (NCCL adds in its own order).
TEST(ShardingNccl, ShardMapCollectivesMatchTheCpuDevices) {
  NEED_GPUS();
  const Array rows = randn({4 * n, 6}, 101), wide = randn({4, 6 * n}, 102), stacked = randn({n, 5}, 103);
  struct Case {
    const char* name;
    std::function<Array(const pl::Mesh&)> f;
    bool exact;
  };
  std::vector<Case> cases = {
      {"psum", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::psum(b, "d"); }, m, {P("d")}, {P("d")})(rows);
       }, n <= 2},
      {"pmax", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::pmax(b, "d"); }, m, {P("d")}, {P("d")})(rows);
       }, true},
      {"all_gather rows", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::all_gather(b, "d", 0, true); }, m, {P("d")}, {P()})(rows);
       }, true},
      {"all_gather columns", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::all_gather(b, "d", 1, true); }, m, {P(pl::None, "d")},
                              {P()})(wide);
       }, true},
      {"all_gather stacked", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::all_gather(b, "d", 1, false); }, m, {P("d")},
                              {P()})(rows);
       }, true},
      {"psum_scatter columns", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::psum_scatter(b, "d", 1, true); }, m, {P()},
                              {P(pl::None, "d")})(wide);
       }, n <= 2},
      {"psum_scatter stacked", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::psum_scatter(b, "d", 0, false); }, m, {P()},
                              {P("d")})(stacked);
       }, n <= 2},
      {"ppermute ring", [&](const pl::Mesh& m) {
         std::vector<std::pair<int64_t, int64_t>> ring;
         for (int64_t i = 0; i < n; ++i) ring.push_back({i, (i + 1) % n});
         return pl::shard_map([ring](const Array& b) { return pl::ppermute(b, "d", ring); }, m, {P("d")},
                              {P("d")})(rows);
       }, true},
      {"psum bfloat16", [&](const pl::Mesh& m) {
         return pl::shard_map([](const Array& b) { return pl::psum(b, "d"); }, m, {P("d")}, {P("d")})(
             rows.astype(pl::bf16));
       }, n <= 2},
  };
  if (n >= 2)
    cases.push_back({"ppermute to one", [&](const pl::Mesh& m) {
                       return pl::shard_map([](const Array& b) { return pl::ppermute(b, "d", {{0, 1}}); }, m, {P("d")},
                                            {P("d")})(rows);
                     }, true});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    pl::Device where;
    const Array gpu = on("cuda", n, c.f, &where);
    const Array cpu = on("cpu", n, c.f);
    EXPECT_EQ(where.kind, pl::Device::cuda);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    if (c.exact) EXPECT_TRUE(pl::array_equal(gpu, cpu));
    else EXPECT_LT(pl::rel_error(gpu, cpu.astype(pl::f64)), gpu.dtype() == pl::bf16 ? 8e-3 : 1e-6);
  }
}

// sharded_jit on the GPUs: a split contraction (all_reduce), a split moved between dimensions
// (all_to_all) and a gather of the result, against float64 and the CPU devices.
TEST(ShardingNccl, PartitionedProgramOnGpusMatchesFloat64) {
  NEED_GPUS();
  auto f = [n](const Array& x, const Array& w) {
    Array h = pl::jnp::tanh(pl::jnp::matmul(x, w));  // contracting dimension split
    Array moved = pl::with_sharding_constraint(h * 2.0, PartitionSpec(n, 1));
    return pl::with_sharding_constraint(pl::jnp::sin(moved), PartitionSpec(1, n));
  };
  const Array x = randn({8 * n, 16 * n}, 111), w = randn({16 * n, 4 * n}, 112);
  pl::ShardedJitOptions o;
  o.num_partitions = n;
  auto run = [&](const pl::Mesh&) {
    return pl::sharded_jit(f, {PartitionSpec(1, n), PartitionSpec(n, 1)}, PartitionSpec(1, n), o)(x, w);
  };
  pl::Device where;
  const Array gpu = on("cuda", n, run, &where);
  EXPECT_EQ(where.kind, pl::Device::cuda);
  const Array ref = pl::jnp::sin(pl::jnp::tanh(pl::matmul(x.astype(pl::f64), w.astype(pl::f64))) * 2.0);
  EXPECT_LT(pl::rel_error(gpu, ref), 1e-5);
  EXPECT_LT(pl::rel_error(gpu, on("cpu", n, run).astype(pl::f64)), 1e-5);
  if (n > 1) {
    const std::string low = pl::sharded_jit(f, {PartitionSpec(1, n), PartitionSpec(n, 1)}, PartitionSpec(1, n), o)
                                .lower(x, w);
    EXPECT_TRUE(contains(low, "all_reduce") || contains(low, "reduce_scatter")) << low;
  }
}

// Data parallel: the batch split over the GPUs, the gradient all-reduced by NCCL, equal to the
// gradient of the whole batch on one device.
TEST(ShardingNccl, DataParallelGradientMatchesOneDevice) {
  NEED_GPUS();
  auto loss = palladium::test_support::tanh_regression_loss;
  const Array w = randn({32, 8}, 121), x = randn({64 * n, 32}, 122), y = randn({64 * n, 8}, 123);
  pl::ShardedJitOptions o;
  o.num_partitions = n;
  auto step = [loss](const Array& w_, const Array& x_, const Array& y_) { return pl::grad(loss)(w_, x_, y_); };
  auto g = pl::sharded_jit(step, {pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o);
  const Array grad = g(w, x, y);
  pl::BackendScope host("cpu");
  const Array ref = pl::grad(loss)(w.astype(pl::f64), x.astype(pl::f64), y.astype(pl::f64));
  EXPECT_LT(pl::rel_error(pl::to_host(grad), ref), 1e-5);
}

// From its third call a partitioned program on the GPUs replays as CUDA graphs between its
// collectives (executor_graph.cc), the collectives run between them by the engine: every call, on
// fresh inputs, equals float64, through NCCL and through host staging. The data-parallel program
// has an all-reduce that later kernels read (the target's scale) and two whose results are the
// program's outputs. With a constraint that splits the hidden layer, the partitioner slices the
// replicated weights (views of the inputs): that program runs step by step, and is right too.
TEST(ShardingNccl, PartitionedProgramsReplayAsCudaGraphsAroundCollectives) {
  NEED_GPUS();
  if (n < 2) GTEST_SKIP() << "one GPU: no collectives";
  auto model = [n](bool constrained) {
    return [n, constrained](const Array& w1, const Array& w2, const Array& x, const Array& y) {
      Array h = pl::jnp::tanh(pl::jnp::matmul(x, w1));
      if (constrained) h = pl::with_sharding_constraint(h, PartitionSpec(1, n));
      const Array scale = pl::jnp::mean(pl::jnp::abs(y));
      return pl::jnp::mean(pl::jnp::square(pl::jnp::matmul(h, w2) - y)) / scale;
    };
  };
  pl::ShardedJitOptions o;
  o.num_partitions = n;
  const Array w1 = randn({32, 16 * n}, 131), w2 = randn({16 * n, 8}, 132);
  for (bool constrained : {false, true})
    for (const char* engine : {"1", "0"}) {
      ScopedEnv nccl("PALLADIUM_NCCL", engine);
      const std::string where = std::string(constrained ? "constrained" : "data parallel") + ", PALLADIUM_NCCL=" + engine;
      auto step = [loss = model(constrained)](const Array& a, const Array& b, const Array& x, const Array& y) {
        return pl::grad<0, 1>(loss)(a, b, x, y);
      };
      auto split = pl::sharded_jit(step, {pl::None, pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o);
      for (int call = 0; call < 4; ++call) {
        const Array x = randn({16 * n, 32}, 140 + call), y = randn({16 * n, 8}, 150 + call);
        auto [g1, g2] = split(w1, w2, x, y);
        pl::BackendScope host("cpu");
        auto [r1, r2] = pl::grad<0, 1>(model(false))(w1.astype(pl::f64), w2.astype(pl::f64), x.astype(pl::f64),
                                                     y.astype(pl::f64));
        EXPECT_LT(pl::rel_error(pl::to_host(g1), r1), 1e-5) << where << ", call " << call;
        EXPECT_LT(pl::rel_error(pl::to_host(g2), r2), 1e-5) << where << ", call " << call;
      }
      const std::string low = split.lower(w1, w2, randn({16 * n, 32}, 160), randn({16 * n, 8}, 161));
      if (constrained) {
        EXPECT_TRUE(contains(low, "launched kernel by kernel: a collective's result shares memory")) << where << low;
        continue;
      }
      EXPECT_TRUE(contains(low, "replayed as a CUDA graph of")) << where << low;
      int collectives = 0;  // the steps that run a collective: each a break between two graphs
      for (size_t at = low.find("\n  collective "); at != std::string::npos; at = low.find("\n  collective ", at + 1))
        ++collectives;
      EXPECT_GE(collectives, 3) << low;  // the target's scale and the two gradients
      EXPECT_TRUE(contains(low, "around " + std::to_string(collectives) + " collectives)")) << where << low;
      ScopedEnv off("PALLADIUM_GRAPHS", "0");
      const std::string stepwise =
          pl::sharded_jit(step, {pl::None, pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o)
              .lower(w1, w2, randn({16 * n, 32}, 162), randn({16 * n, 8}, 163));
      EXPECT_TRUE(contains(stepwise, "launched kernel by kernel: PALLADIUM_GRAPHS=0")) << where << stepwise;
    }
}

}  // namespace
