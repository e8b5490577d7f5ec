// Sharding on virtual CPU devices: devices and meshes, sharded Arrays, the seed's sharded_jit with
// with_sharding_constraint, propagation and the inserted collectives, shard_map with its
// collectives, gradients of partitioned programs, the communicator's failure paths, and the
// seed's errors. Sharded results are compared with float64 references (relative error) and with
// the unsharded run (exactly, where no reduction is reordered).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <thread>

#include "ops/attention.h"
#include "palladium/palladium.h"
#include "sharding/communicator.h"
#include "sharding/distributed.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::P;
using pl::PartitionSpec;
using pl::Shape;

namespace {

using palladium::test_support::error_message;
using palladium::test_support::ScopedEnv;

using palladium::test_support::randn;
using palladium::test_support::contains;


// The tests run on `n` virtual CPU devices, also where there are GPUs.
#define NEED_CPU_DEVICES(n)                                                 \
  ScopedEnv cpu_devices_env_("PALLADIUM_CPU_DEVICES", std::to_string(n)); \
  ScopedEnv cpu_platform_env_("PALLADIUM_PLATFORM", "cpu")

TEST(Sharding, VirtualCpuDevicesComeFromTheEnvironment) {
  NEED_CPU_DEVICES(4);
  std::vector<pl::Device> ds = pl::devices();
  ASSERT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds[3].str(), "cpu:3");
  ScopedEnv bad("PALLADIUM_CPU_DEVICES", "lots");
  PL_EXPECT_ERROR(pl::devices(), "PALLADIUM_CPU_DEVICES='lots' is not a device count");
  ScopedEnv platform("PALLADIUM_PLATFORM", "tpu");
  PL_EXPECT_ERROR(pl::devices(), "PALLADIUM_PLATFORM='tpu' is not 'cpu' or 'cuda'");
}

TEST(Sharding, MeshAndSpecErrorsNameWhatIsWrong) {
  NEED_CPU_DEVICES(4);
  PL_EXPECT_ERROR(pl::make_mesh({4, 2}, {"x", "y"}), "needs 8 devices, but only 4 are available");
  PL_EXPECT_ERROR(pl::make_mesh({2, 2}, {"x", "x"}), "axis name 'x' is repeated");
  pl::Mesh mesh = pl::make_mesh({2, 2}, {"x", "y"});
  PL_EXPECT_ERROR(pl::NamedSharding(mesh, P("z")), "no mesh axis named 'z'; the mesh has axes ('x', 'y')");
  PL_EXPECT_ERROR(pl::NamedSharding(mesh, P("x", "x")), "mesh axis 'x' splits two dimensions");
  PL_EXPECT_ERROR(pl::NamedSharding(mesh, PartitionSpec(2, 1)), "gives partition counts");
  PL_EXPECT_ERROR(pl::device_put(randn({5, 4}, 1), pl::NamedSharding(mesh, P("x", "y"))),
                    "device_put: dimension 0 of shape (5, 4) is not divisible into 2 pieces");
  PL_EXPECT_ERROR(pl::device_put(randn({4}, 1), pl::NamedSharding(mesh, P("x", "y"))),
                    "P('x', 'y') has 2 entries for an array of rank 1");
}

TEST(Sharding, DevicePutSplitsAndToHostGathers) {
  NEED_CPU_DEVICES(8);
  pl::Mesh mesh = pl::make_mesh({4, 2}, {"x", "y"});
  Array a = randn({8, 8}, 2);
  for (const PartitionSpec& spec : {P("x", "y"), P("y", "x"), P(pl::None, "y"), P(pl::AxisNames{"x", "y"}), P()}) {
    Array s = pl::device_put(a, pl::NamedSharding(mesh, spec));
    ASSERT_TRUE(s.is_sharded());
    EXPECT_EQ(s.shape(), a.shape());
    EXPECT_TRUE(pl::array_equal(pl::to_host(s), a)) << spec.str();
    EXPECT_EQ(s.sharded()->pieces.size(), 8u);
  }
  Array s = pl::device_put(a, pl::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(s.sharded()->pieces[3].shape(), (Shape{2, 4}));
  // Device 3 sits at mesh (1, 1): rows 2:4, columns 4:8.
  EXPECT_EQ(s.sharded()->pieces[3].get(0), a.get(2 * 8 + 4));
  const std::string layout = pl::layout_str(s);
  EXPECT_TRUE(contains(layout, "cpu:3  [2:4, 4:8]")) << layout;
  PL_EXPECT_ERROR(s.data(), "the array is sharded over 8 devices");
  // Eager ops on a sharded Array see its global value.
  EXPECT_TRUE(pl::array_equal(pl::to_host(s * 2.0), pl::to_host(a * 2.0)));
  // Resharding a sharded Array.
  Array r = pl::device_put(s, pl::NamedSharding(mesh, P("y", "x")));
  EXPECT_TRUE(pl::array_equal(pl::to_host(r), a));
}

// The seed's example: a constraint inside the function, the inputs split along rows.
TEST(Sharding, SeedExampleWithShardingConstraint) {
  NEED_CPU_DEVICES(2);
  auto f = [](const Array& x, const Array& y) {
    Array z = x + y;
    z = pl::with_sharding_constraint(z, PartitionSpec(2, 1));
    return pl::jnp::sin(z) * 2.0;
  };
  auto g = pl::sharded_jit(f, {PartitionSpec(2, 1), pl::None}, PartitionSpec(2, 1));
  Array x = randn({8, 4}, 3), y = randn({8, 4}, 4);
  Array out = g(x, y);
  ASSERT_TRUE(out.is_sharded());
  auto unconstrained = [](const Array& a, const Array& b) { return pl::jnp::sin(a + b) * 2.0; };
  EXPECT_TRUE(pl::array_equal(pl::to_host(out), pl::jit(unconstrained)(x, y)));  // elementwise: bit for bit
  const std::string low = g.lower(x, y);
  EXPECT_TRUE(contains(low, "sharding_constraint")) << low;
  EXPECT_TRUE(contains(low, "per-device program (2 devices)")) << low;
  EXPECT_FALSE(contains(low, "all_gather")) << low;  // y is cut locally, nothing moves
}

// Elementwise, reductions and a matmul with a split contracting dimension, on 1, 2, 4 and 8 devices.
class DeviceCounts : public ::testing::TestWithParam<int> {};

TEST_P(DeviceCounts, PartitionedProgramMatchesFloat64AndUnsharded) {
  const int n = GetParam();
  NEED_CPU_DEVICES(n);
  auto f = [](const Array& x, const Array& w) {
    Array h = pl::nn::relu(pl::jnp::matmul(x, w));      // x split on rows; w on its rows (contracting)
    return std::make_tuple(h, pl::jnp::sum(h, {0}), pl::jnp::max(h));
  };
  Array x = randn({16, 8}, 5), w = randn({8, 24}, 6);
  pl::ShardedJitOptions o;
  o.num_partitions = n;  // with one device every spec is replicated
  auto g = pl::sharded_jit(f, {PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o);
  auto [h, colsum, top] = g(x, w);
  Array ref = pl::relu(pl::matmul(x.astype(pl::f64), w.astype(pl::f64)));
  EXPECT_LT(pl::rel_error(pl::to_host(h), ref), 1e-6);
  auto [h1, colsum1, top1] = pl::jit(f)(x, w);
  EXPECT_LT(pl::rel_error(pl::to_host(colsum), colsum1.astype(pl::f64)), 1e-6);
  EXPECT_EQ(pl::to_host(top).get(0), top1.get(0));  // a max is exact in any order
  if (n > 1) {
    const std::string low = g.lower(x, w);
    EXPECT_TRUE(contains(low, "all_gather")) << low;  // w's rows gathered (or partials reduced)
  }
}

INSTANTIATE_TEST_SUITE_P(Sharding, DeviceCounts, ::testing::Values(1, 2, 4, 8));

// A split contracting dimension: partial sums combined by an all_reduce, or a reduce_scatter
// when the result is wanted split along the same axes.
TEST(Sharding, SplitContractionInsertsAllReduceOrReduceScatter) {
  NEED_CPU_DEVICES(4);
  auto f = [](const Array& x, const Array& w) { return pl::jnp::matmul(x, w); };
  Array x = randn({8, 16}, 7), w = randn({16, 12}, 8);
  Array ref = pl::matmul(x.astype(pl::f64), w.astype(pl::f64));
  auto replicated_out = pl::sharded_jit(f, {PartitionSpec(1, 4), PartitionSpec(4, 1)}, pl::None);
  EXPECT_LT(pl::rel_error(pl::to_host(replicated_out(x, w)), ref), 1e-6);
  const std::string low = replicated_out.lower(x, w);
  EXPECT_TRUE(contains(low, "all_reduce[axes=[0] name=sum]")) << low;
  auto split_out = pl::sharded_jit(f, {PartitionSpec(1, 4), PartitionSpec(4, 1)}, PartitionSpec(4, 1));
  EXPECT_LT(pl::rel_error(pl::to_host(split_out(x, w)), ref), 1e-6);
  const std::string low2 = split_out.lower(x, w);
  EXPECT_TRUE(contains(low2, "reduce_scatter")) << low2;
  EXPECT_FALSE(contains(low2, "all_reduce")) << low2;
}

// 2-D meshes from partition counts: (2, 2) and (4, 2) specs mixed with (4, 1) / (8, 1).
TEST(Sharding, TwoDimensionalPartitionCounts) {
  for (auto [n, rows, cols] : {std::tuple{4, 2, 2}, std::tuple{8, 4, 2}}) {
    NEED_CPU_DEVICES(n);
    auto f = [](const Array& a, const Array& b) {
      Array t = pl::jnp::transpose(a) * 3.0;  // moves the split from rows to columns
      return std::make_pair(t + b, pl::jnp::sum(a, {1}));
    };
    Array a = randn({16, 8}, 9), b = randn({8, 16}, 10);
    auto g = pl::sharded_jit(f, {PartitionSpec(rows, cols), PartitionSpec(n, 1)}, {PartitionSpec(n, 1), pl::None});
    auto [t, s] = g(a, b);
    auto [t1, s1] = pl::jit(f)(a, b);
    EXPECT_TRUE(pl::array_equal(pl::to_host(t), t1)) << n;
    EXPECT_LT(pl::rel_error(pl::to_host(s), s1.astype(pl::f64)), 1e-6) << n;
  }
}

// A sharding moving from one dimension to another is one all_to_all.
TEST(Sharding, MovingASplitBetweenDimensionsIsAnAllToAll) {
  NEED_CPU_DEVICES(4);
  auto f = [](const Array& a) { return pl::with_sharding_constraint(a * 2.0, PartitionSpec(1, 4)); };
  Array a = randn({8, 8}, 11);
  auto g = pl::sharded_jit(f, PartitionSpec(4, 1), PartitionSpec(1, 4));
  EXPECT_TRUE(pl::array_equal(pl::to_host(g(a)), pl::to_host(a * 2.0)));
  const std::string low = g.lower(a);
  EXPECT_TRUE(contains(low, "all_to_all")) << low;
  EXPECT_FALSE(contains(low, "all_gather")) << low;
}

// grad inside sharded_jit: data parallel, the batch split; gradients match the unsharded ones.
TEST(Sharding, GradientsOfAPartitionedProgramMatchUnsharded) {
  NEED_CPU_DEVICES(4);
  auto loss = [](const Array& w, const Array& x, const Array& y) {
    Array pred = pl::jnp::tanh(pl::jnp::matmul(x, w));
    return pl::jnp::mean(pl::jnp::square(pred - y));
  };
  auto step = [loss](const Array& w, const Array& x, const Array& y) { return pl::value_and_grad(loss)(w, x, y); };
  Array w = randn({6, 3}, 12), x = randn({16, 6}, 13), y = randn({16, 3}, 14);
  auto g = pl::sharded_jit(step, {pl::None, PartitionSpec(4, 1), PartitionSpec(4, 1)}, pl::None);
  auto [value, grad] = g(w, x, y);
  auto [value1, grad1] = step(w, x, y);
  EXPECT_LT(pl::rel_error(pl::to_host(value), value1.astype(pl::f64)), 1e-6);
  EXPECT_LT(pl::rel_error(pl::to_host(grad), grad1.astype(pl::f64)), 1e-5);
  const std::string low = g.lower(w, x, y);
  EXPECT_TRUE(contains(low, "all_reduce")) << low;  // the gradient's partial sums over the batch
}

// custom_vjp functions (ops::mha's form) partition through their primal.
TEST(Sharding, CustomVjpPartitionsThroughItsPrimal) {
  NEED_CPU_DEVICES(2);
  auto square = pl::custom_vjp(
      "square", [](const Array& x) { return x * x; },
      [](const Array& x) { return std::make_pair(x * x, x); },
      [](const Array& r, const Array& ct) { return std::make_tuple(ct * 2.0 * r); });
  auto f = [square](const Array& x) { return pl::jnp::sum(square(x), {1}); };
  Array x = randn({4, 6}, 15);
  auto g = pl::sharded_jit(f, PartitionSpec(2, 1), PartitionSpec(2));
  EXPECT_LT(pl::rel_error(pl::to_host(g(x)), pl::jit(f)(x).astype(pl::f64)), 1e-6);
}

TEST(Sharding, StaticArgnumsArePassedThrough) {
  NEED_CPU_DEVICES(2);
  auto f = [](const Array& x, int power) {
    Array r = x;
    for (int i = 1; i < power; ++i) r = r * x;
    return r;
  };
  pl::ShardedJitOptions o;
  o.static_argnums = {1};
  auto g = pl::sharded_jit(f, PartitionSpec(2, 1), PartitionSpec(2, 1), o);
  Array x = randn({4, 4}, 16);
  EXPECT_TRUE(pl::array_equal(pl::to_host(g(x, 3)), x * x * x));
  EXPECT_TRUE(pl::array_equal(pl::to_host(g(x, 2)), x * x));
}

TEST(Sharding, ReplicatedOnlyCallsTakeNumPartitions) {
  NEED_CPU_DEVICES(2);
  auto f = [](const Array& x) { return x + 1.0; };
  Array x = randn({4}, 17);
  PL_EXPECT_ERROR(pl::sharded_jit(f, pl::None, pl::None)(x), "every PartitionSpec is replicated (None)");
  pl::ShardedJitOptions o;
  o.num_partitions = 2;
  Array out = pl::sharded_jit(f, pl::None, pl::None, o)(x);
  EXPECT_EQ(out.sharded()->pieces.size(), 2u);
  EXPECT_TRUE(pl::array_equal(pl::to_host(out), x + 1.0));
}

// The seed's errors.
TEST(Sharding, SeedErrorsHaveMessages) {
  NEED_CPU_DEVICES(2);
  auto f = [](const Array& x, const Array& y) { return x + y; };
  Array x = randn({8, 4}, 18), y = randn({8, 4}, 19);
  PL_EXPECT_ERROR(pl::sharded_jit(f, {PartitionSpec(4, 1), PartitionSpec(4, 1)}, pl::None)(x, y),
                    "sharded_jit computation requires 4 devices, but only 2 devices are available.");
  PL_EXPECT_ERROR(pl::sharded_jit(f, {PartitionSpec(2, 1), PartitionSpec(1, 1)}, PartitionSpec(1, 4))(x, y),
                    "the PartitionSpecs disagree on the number of partitions: PartitionSpec(2, 1) (argument 0), "
                    "PartitionSpec(1, 4) (output 0)");
  PL_EXPECT_ERROR(pl::sharded_jit(f, {PartitionSpec(2), pl::None}, pl::None)(x, y),
                    "PartitionSpec(2) of argument 0 has 1 dimensions but the array f32[8,4] has rank 2");
  pl::ShardedJitOptions o;
  o.static_argnums = {2};
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(2, 1), pl::None, o)(x, y),
                    "static_argnums entry 2 is out of range for a function of 2 arguments");
  PL_EXPECT_ERROR(pl::with_sharding_constraint(x, PartitionSpec(2, 1)),
                    "with_sharding_constraint: called outside sharded_jit");
  PL_EXPECT_ERROR(pl::jit([](const Array& a) { return pl::with_sharding_constraint(a, PartitionSpec(2, 1)); })(x),
                    "with_sharding_constraint: called outside sharded_jit");
  PL_EXPECT_ERROR(pl::sharded_jit(f, {PartitionSpec(2, 1), pl::None, pl::None}, pl::None)(x, y),
                    "in_parts (PartitionSpec(2, 1), None, None) has 3 entries for 2 elements");
  PL_EXPECT_ERROR(pl::sharded_jit(f, {PartitionSpec(2, 1), pl::None}, pl::None)(randn({7, 4}, 1), randn({7, 4}, 2)),
                    "splits dimension 0 of size 7 (f32[7,4]) into 2 pieces, which does not divide it");
  pl::ShardedJitOptions local;
  local.local_in_parts = pl::Parts(PartitionSpec(2, 1));
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(2, 1), pl::None, local),
                    "describe a cross-process call; pass local_num_partitions too");
}

// Weights that a batched matmul broadcasts over a split batch are broadcast to the local batch
// only, not to the whole batch and cut afterwards.
TEST(Sharding, BroadcastOverASplitBatchIsLocal) {
  NEED_CPU_DEVICES(2);
  // A batched matmul against weights broadcast over the batch (jnp::matmul folds a 2-D right
  // operand's batch into rows instead, so the broadcast is written out).
  auto f = [](const Array& w, const Array& x) {
    return pl::jnp::tanh(pl::jnp::matmul(x, pl::jnp::broadcast_to(w, {4, 6, 5})));
  };
  const Array w = randn({6, 5}, 13), x = randn({4, 3, 6}, 14);
  auto g = pl::sharded_jit(f, {pl::None, PartitionSpec(2, 1, 1)}, PartitionSpec(2, 1, 1));
  EXPECT_LT(pl::rel_error(pl::to_host(g(w, x)), f(w.astype(pl::f64), x.astype(pl::f64))), 1e-6);
  const std::string low = g.lower(w, x);
  const std::string local = low.substr(low.find("--- per-device program"));
  EXPECT_FALSE(contains(local, "shard_slice")) << local;
  EXPECT_TRUE(contains(local, "broadcast[shape=[2,6,5]]")) << local;
}

// local_in_parts / local_out_parts in one process: the process's chunk is the whole array, cut over
// its devices as the local specs say; a local spec that does not divide the global one is an error.
TEST(Sharding, LocalPartsInOneProcessAreTheWholeArrays) {
  NEED_CPU_DEVICES(4);
  auto f = [](const Array& a) { return pl::jnp::sin(a) * 2.0 - pl::jnp::mean(a); };
  const Array x = randn({8, 6}, 12);
  pl::ShardedJitOptions o;
  o.local_num_partitions = 4;
  o.local_in_parts = pl::Parts(PartitionSpec(4, 1));
  o.local_out_parts = pl::Parts(PartitionSpec(2, 2));
  const Array out = pl::sharded_jit(f, PartitionSpec(4, 1), PartitionSpec(2, 2), o)(x);
  EXPECT_EQ(out.shape(), x.shape());
  EXPECT_LT(pl::rel_error(pl::to_host(out), f(x.astype(pl::f64))), 1e-6);
  o.local_in_parts = pl::Parts(PartitionSpec(3, 1));
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(4, 1), PartitionSpec(2, 2), o)(x),
                  "sharded_jit: local_in_parts PartitionSpec(3, 1) of argument 0 cuts dimension 0 into 3 pieces, "
                  "which does not divide the 4 pieces of PartitionSpec(4, 1)");
  o.local_in_parts = pl::Parts(PartitionSpec(4, 1));
  o.local_num_partitions = 2;
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(4, 1), PartitionSpec(2, 2), o)(x),
                  "sharded_jit: local_num_partitions is 2 but this process holds 4 of the call's 4 devices");
}

// shard_map: per-device functions with explicit collectives, over a 2-D mesh.
TEST(Sharding, ShardMapCollectives) {
  NEED_CPU_DEVICES(8);
  pl::Mesh mesh = pl::make_mesh({4, 2}, {"x", "y"});
  Array a = randn({8, 6}, 20);
  // psum over x of row blocks: each device holds the sum of the 4 row blocks of its column block.
  auto summed = pl::shard_map([](const Array& b) { return pl::psum(b, "x"); }, mesh, {P("x", "y")}, {P(pl::None, "y")})(a);
  Array ref(Shape{2, 6}, pl::f64);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 6; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 4; ++k) s += a.get((k * 2 + i) * 6 + j);
      ref.set(i * 6 + j, s);
    }
  EXPECT_LT(pl::rel_error(pl::to_host(summed), ref), 1e-6);
  // all_gather restores the global array; psum_scatter of a replicated value is n times a piece.
  auto gathered = pl::shard_map([](const Array& b) { return pl::all_gather(pl::all_gather(b, "x", 0, true), "y", 1, true); },
                                mesh, {P("x", "y")}, {P()})(a);
  EXPECT_TRUE(pl::array_equal(pl::to_host(gathered), a));
  auto scattered = pl::shard_map([](const Array& b) { return pl::psum_scatter(b, "x", 0, true); }, mesh, {P()},
                                 {P("x")})(a);
  EXPECT_LT(pl::rel_error(pl::to_host(scattered), (a * 4.0).astype(pl::f64)), 1e-6);
  // axis_index and pmean.
  auto index = pl::shard_map([](const Array& b) { return pl::jnp::astype(pl::axis_index("x"), pl::f32) + b * 0.0; },
                             mesh, {P("x", "y")}, {P("x", "y")})(pl::ones({4, 2}));
  Array idx = pl::to_host(index);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(idx.get(i * 2 + 1), static_cast<double>(i));
  auto mean = pl::shard_map([](const Array& b) { return pl::pmean(b, pl::AxisNames{"x", "y"}); }, mesh, {P("x", "y")},
                            {P()})(a);
  Array m(Shape{2, 3}, pl::f64);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double s = 0;
      for (int64_t bi = 0; bi < 4; ++bi)
        for (int64_t bj = 0; bj < 2; ++bj) s += a.get((bi * 2 + i) * 6 + bj * 3 + j);
      m.set(i * 3 + j, s / 8);
    }
  EXPECT_LT(pl::rel_error(pl::to_host(mean), m), 1e-6);
}

TEST(Sharding, PpermuteShiftsAlongARing) {
  NEED_CPU_DEVICES(4);
  pl::Mesh mesh = pl::make_mesh({4}, {"i"});
  Array a = randn({8, 3}, 21);
  auto shifted = pl::shard_map([](const Array& b) { return pl::ppermute(b, "i", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); },
                               mesh, {P("i")}, {P("i")})(a);
  Array s = pl::to_host(shifted);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(s.get(r * 3 + c), a.get(((r + 6) % 8) * 3 + c));
  // Devices nobody sends to receive zeros.
  auto partial = pl::shard_map([](const Array& b) { return pl::ppermute(b, "i", {{0, 1}}); }, mesh, {P("i")},
                               {P("i")})(a);
  EXPECT_EQ(pl::to_host(partial).get(0), 0.0);
  PL_EXPECT_ERROR(pl::shard_map([](const Array& b) { return pl::ppermute(b, "i", {{0, 4}}); }, mesh, {P("i")},
                                  {P("i")})(a),
                    "ppermute: pair (0, 4) is out of range for axis 'i' of size 4");
}

// Gradients through shard_map's collectives: all_gather's transpose is a reduce-scatter.
TEST(Sharding, GradThroughShardMapCollectives) {
  NEED_CPU_DEVICES(2);
  pl::Mesh mesh = pl::make_mesh({2}, {"d"});
  auto f = [](const Array& w, const Array& x) {
    auto grads = pl::grad([](const Array& wl, const Array& xl) {
      Array full_w = pl::all_gather(wl, "d", 0, true);
      return pl::psum(pl::jnp::sum(pl::jnp::square(pl::jnp::matmul(xl, full_w))), "d");
    })(w, x);
    return grads;
  };
  Array w = randn({4, 3}, 22), x = randn({6, 4}, 23);
  Array g = pl::shard_map(f, mesh, {P("d"), P("d")}, {P("d")})(w, x);
  // Reference: d/dw sum((x w)^2) = 2 x^T x w, with the psum's transpose making it twice over (JAX's convention).
  Array x64 = x.astype(pl::f64), w64 = w.astype(pl::f64);
  Array ref = pl::matmul(pl::transpose(x64), pl::matmul(x64, w64));
  Array expected = pl::to_host(ref.astype(pl::f32) * 4.0);
  EXPECT_LT(pl::rel_error(pl::to_host(g), expected.astype(pl::f64)), 1e-5);
}

TEST(Sharding, CollectivesOutsideShardMapAreErrors) {
  Array a = randn({4}, 24);
  PL_EXPECT_ERROR(pl::psum(a, "x"), "psum: called outside shard_map (mesh axes 'x' are bound only inside");
  PL_EXPECT_ERROR(pl::axis_index("x"), "axis_index: called outside shard_map");
  NEED_CPU_DEVICES(2);
  pl::Mesh mesh = pl::make_mesh({2}, {"d"});
  PL_EXPECT_ERROR(pl::shard_map([](const Array& b) { return pl::psum(b, "e"); }, mesh, {P("d")}, {P("d")})(a),
                    "psum: no mesh axis named 'e'; the mesh has axes ('d')");
  PL_EXPECT_ERROR(pl::shard_map([](const Array& b) { return b; }, mesh, {P("d"), P("d")}, {P("d")})(a),
                    "shard_map: 2 in_specs for 1 arguments");
}

// A device that fails aborts the others' collectives instead of leaving them waiting.
TEST(Sharding, CommunicatorAbortReachesWaitingDevices) {
  pl::sharding::InProcessCommunicator comm(2);
  std::string seen;
  std::thread waiter([&] {
    seen = error_message([&] { comm.exchange(0, {0, 1}, randn({2}, 25), "all_gather"); });
  });
  comm.abort("device cpu:1 failed: out of memory");
  waiter.join();
  EXPECT_TRUE(contains(seen, "all_gather on device 0: device cpu:1 failed: out of memory")) << seen;
}

TEST(Sharding, CommunicatorTimesOutNamingMissingDevices) {
  ScopedEnv env("PALLADIUM_COLLECTIVE_TIMEOUT_S", "0.2");
  pl::sharding::InProcessCommunicator comm(3);
  PL_EXPECT_ERROR(comm.exchange(0, {0, 1, 2}, randn({2}, 26), "all_reduce"),
                    "all_reduce timed out: device 0 waited 0.2");
  PL_EXPECT_ERROR(comm.exchange(1, {0, 1, 2}, randn({2}, 27), "all_reduce"), "all_reduce timed out");
}

}  // namespace

namespace {

// pallas_call along its grid: a row-block kernel split with its rows runs on each device's rows
// with no communication; a kernel that reads program_id itself runs on gathered inputs.
TEST(ShardingKernels, PallasCallSplitsAlongItsGrid) {
  NEED_CPU_DEVICES(2);
  auto rows = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::jnp::exp(x[pl::all]) * 2.0f; },
                              pl::ShapeDtype({8, 8}, pl::f32),
                              {.grid = {4}, .in_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })},
                               .out_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })},
                               .name = "rows"});
  auto f = [rows](const Array& x) { return rows(x) + 1.0; };
  Array x = randn({8, 8}, 30);
  auto g = pl::sharded_jit(f, PartitionSpec(2, 1), PartitionSpec(2, 1));
  EXPECT_TRUE(pl::array_equal(pl::to_host(g(x)), pl::jit(f)(x)));
  const std::string low = g.lower(x);
  EXPECT_TRUE(contains(low, "pallas_call rows")) << low;
  EXPECT_FALSE(contains(low, "all_gather")) << low;
  EXPECT_TRUE(contains(low, "%1:f32[4,8] = pallas_call[name=rows](%0)")) << low;  // half the grid, on the pieces

  // The same blocks, but the kernel adds its program index: it cannot run on a slice of the grid.
  auto indexed = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + pl::jnp::astype(pl::program_id(0), pl::f32); },
      pl::ShapeDtype({8, 8}, pl::f32),
      {.grid = {4}, .in_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })},
       .out_specs = {pl::BlockSpec({2, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })}, .name = "indexed"});
  auto h = pl::sharded_jit([indexed](const Array& a) { return indexed(a); }, PartitionSpec(2, 1), PartitionSpec(2, 1));
  EXPECT_TRUE(pl::array_equal(pl::to_host(h(x)), indexed(x)));
  const std::string low2 = h.lower(x);
  EXPECT_TRUE(contains(low2, "all_gather")) << low2;
}

// An autotune split along its grid keeps every candidate whose grid splits the same way: each
// device times both tilings on its rows (PALLADIUM_AUTOTUNE_VERBOSE prints the times), with no
// communication, and a candidate that cannot take a slice of the grid (its program index in the
// result) is dropped for the split call.
TEST(ShardingKernels, AutotunedPallasCallSplitsWithItsCandidates) {
  NEED_CPU_DEVICES(2);
  const std::string dir = (std::filesystem::temp_directory_path() / ("pl-split-autotune-" + std::to_string(::getpid()))).string();
  ScopedEnv cache("PALLADIUM_CACHE_DIR", dir);
  ScopedEnv verbose("PALLADIUM_AUTOTUNE_VERBOSE", "1");
  auto rows_of = [](int64_t block) {
    pl::BlockSpec spec({block, 8}, [](pl::Value i) { return std::make_tuple(i, 0); });
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::jnp::exp(x[pl::all]) * 2.0f; },
                           pl::ShapeDtype({64, 8}, pl::f32),
                           {.grid = {64 / block}, .in_specs = {spec}, .out_specs = {spec}, .name = "rows"});
  };
  auto indexed = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::jnp::exp(xr[pl::all]) * 2.0f + pl::jnp::astype(pl::program_id(0), pl::f32) * 0.0f; },
      pl::ShapeDtype({64, 8}, pl::f32),
      {.grid = {8}, .in_specs = {pl::BlockSpec({8, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })},
       .out_specs = {pl::BlockSpec({8, 8}, [](pl::Value i) { return std::make_tuple(i, 0); })}, .name = "indexed"});
  auto tuned = pl::autotune<Array>("rows", {{"block 8", rows_of(8)}, {"block 16", rows_of(16)}, {"indexed", indexed}});
  auto f = [tuned](const Array& x) { return tuned(x) + 1.0; };
  const Array x = randn({64, 8}, 31);
  auto g = pl::sharded_jit(f, PartitionSpec(2, 1), PartitionSpec(2, 1));
  ::testing::internal::CaptureStderr();
  const Array got = pl::to_host(g(x));
  const std::string timed = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(pl::rel_error(got, pl::jnp::exp(x.astype(pl::f64)) * 2.0 + 1.0), 1e-6);
  EXPECT_TRUE(contains(timed, "autotune 'rows' on cpu: block 8 ")) << timed;
  EXPECT_TRUE(contains(timed, "; block 16 ")) << timed;
  EXPECT_FALSE(contains(timed, "indexed")) << timed;
  const std::string low = g.lower(x);
  EXPECT_FALSE(contains(low, "all_gather")) << low;
  EXPECT_TRUE(contains(low, "%1:f32[32,8] = pallas_call[name=rows](%0)")) << low;
  std::filesystem::remove_all(dir);
}

// The seed's attention sharded over heads and over batch: every kernel (forward and, under grad,
// backward) runs on its own heads; nothing moves between devices.
TEST(ShardingKernels, AttentionShardedOverHeadsAndBatch) {
  NEED_CPU_DEVICES(2);
  pl::ops::MhaOptions o;
  o.block_q = 16;
  o.block_k = 16;
  o.backward_block = 16;
  o.sm_scale = 0.25f;
  o.causal = true;
  auto attention = [o](const Array& q, const Array& k, const Array& v) { return pl::ops::mha(q, k, v, Array(), o); };
  Array q = randn({2, 32, 4, 16}, 31), k = randn({2, 32, 4, 16}, 32), v = randn({2, 32, 4, 16}, 33);
  Array ref = pl::jit(attention)(q, k, v);
  for (const PartitionSpec& spec : {PartitionSpec(1, 1, 2, 1), PartitionSpec(2, 1, 1, 1)}) {
    auto g = pl::sharded_jit(attention, {spec, spec, spec}, spec);
    EXPECT_TRUE(pl::array_equal(pl::to_host(g(q, k, v)), ref)) << spec.str();
    const std::string low = g.lower(q, k, v);
    for (const char* c : {"all_gather", "all_reduce", "all_to_all", "shard_slice"})
      EXPECT_FALSE(contains(low, std::string("= ") + c)) << spec.str() << "\n" << low;
  }
  auto loss = [attention](const Array& q_, const Array& k_, const Array& v_) {
    return pl::jnp::sum(pl::jnp::square(attention(q_, k_, v_)));
  };
  auto grads = [loss](const Array& q_, const Array& k_, const Array& v_) { return pl::grad<0, 1, 2>(loss)(q_, k_, v_); };
  const PartitionSpec heads(1, 1, 2, 1);
  auto g = pl::sharded_jit(grads, {heads, heads, heads}, heads);
  auto [dq, dk, dv] = g(q, k, v);
  auto [dq1, dk1, dv1] = pl::jit(grads)(q, k, v);
  EXPECT_TRUE(pl::array_equal(pl::to_host(dq), dq1));
  EXPECT_TRUE(pl::array_equal(pl::to_host(dk), dk1));
  EXPECT_TRUE(pl::array_equal(pl::to_host(dv), dv1));
  const std::string low = g.lower(q, k, v);
  EXPECT_FALSE(contains(low, "= all_gather")) << low;
}

}  // namespace

namespace {

// scan on pieces: the IndRNN recurrence split over features runs its loop on each device's
// features with no communication; a body that needs a sum over the split dimension all-reduces
// inside the loop.
TEST(ShardingScan, ScanBodiesArePartitioned) {
  NEED_CPU_DEVICES(4);
  auto indrnn = [](const Array& x, const Array& u, const Array& h0) {
    return pl::scan([&u](const Array& h, const Array& xt) {
      Array next = pl::nn::relu(u * h + xt);
      return std::make_pair(next, next);
    }, h0, x);
  };
  Array x = randn({6, 2, 8}, 40), u = randn({8}, 41), h0 = randn({2, 8}, 42);
  auto g = pl::sharded_jit(indrnn, {PartitionSpec(1, 1, 4), PartitionSpec(4), PartitionSpec(1, 4)},
                           {PartitionSpec(1, 4), PartitionSpec(1, 1, 4)});
  auto [h, hs] = g(x, u, h0);
  auto [h1, hs1] = pl::jit(indrnn)(x, u, h0);
  EXPECT_TRUE(pl::array_equal(pl::to_host(h), h1));
  EXPECT_TRUE(pl::array_equal(pl::to_host(hs), hs1));
  const std::string low = g.lower(x, u, h0);
  for (const char* c : {"all_gather", "all_reduce", "all_to_all", "shard_slice"})
    EXPECT_FALSE(contains(low, std::string("= ") + c)) << low;

  auto running = [](const Array& steps, const Array& start) {
    return pl::scan([](const Array& c, const Array& xt) {
      Array next = c + pl::jnp::sum(xt * xt);
      return std::make_pair(next, next);
    }, start, steps);
  };
  Array c0 = randn({}, 43);
  auto r = pl::sharded_jit(running, {PartitionSpec(1, 1, 4), pl::None}, {pl::None, pl::None});
  auto [c, cs] = r(x, c0);
  auto [cref, csref] = pl::jit(running)(x, c0);
  EXPECT_LT(pl::rel_error(pl::to_host(c), cref.astype(pl::f64)), 1e-6);
  EXPECT_LT(pl::rel_error(pl::to_host(cs), csref.astype(pl::f64)), 1e-6);
  const std::string low2 = r.lower(x, c0);
  EXPECT_TRUE(contains(low2, "all_reduce")) << low2;
}

}  // namespace

namespace {

// jit with in_shardings / out_shardings over a 2-D mesh: the Megatron-style layout computes a
// matmul with no communication.
TEST(ShardingJit, JitWithNamedShardings) {
  NEED_CPU_DEVICES(8);
  pl::Mesh mesh = pl::make_mesh({4, 2}, {"data", "model"});
  auto f = [](const Array& a, const Array& w) { return pl::nn::gelu(pl::jnp::matmul(a, w)); };
  Array x = randn({16, 12}, 50), w = randn({12, 6}, 51);
  const pl::NamedSharding rows(mesh, P("data", pl::None)), cols(mesh, P(pl::None, "model")),
      both(mesh, P("data", "model"));
  auto g = pl::jit(f, pl::JitShardings{{rows, cols}, both});
  Array out = g(x, w);
  EXPECT_EQ(pl::sharding_of(out).spec.str(), "P('data', 'model')");
  EXPECT_TRUE(pl::array_equal(pl::to_host(out), pl::jit(f)(x, w)));
  const std::string low = g.lower(x, w);
  for (const char* c : {"all_gather", "all_reduce", "all_to_all"}) EXPECT_FALSE(contains(low, std::string("= ") + c)) << low;
  // Inputs already laid out as wanted are used in place.
  Array xs = pl::device_put(x, rows);
  EXPECT_TRUE(pl::array_equal(pl::to_host(g(xs, w)), pl::to_host(out)));

  pl::Mesh other = pl::make_mesh({8}, {"all"});
  PL_EXPECT_ERROR(pl::jit(f, pl::JitShardings{{rows, pl::NamedSharding(other, P("all"))}, pl::None})(x, w),
                    "the NamedShardings are on different meshes");
  PL_EXPECT_ERROR(pl::sharded_jit(f, {rows, PartitionSpec(2, 1)}, pl::None)(x, w),
                    "partition counts (PartitionSpec(2, 1) (argument 1)) mixed with NamedShardings");
}

}  // namespace

namespace {

// Where there are GPUs: a data-parallel step over all of them (one compiled program per GPU; the
// gradient's all-reduce goes through NCCL, the default engine between GPUs).
TEST(ShardingGpu, DataParallelStepOnTheGpus) {
  const int n = pl::cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no GPU here";
  ScopedEnv platform("PALLADIUM_PLATFORM", "cuda");
  auto loss = palladium::test_support::tanh_regression_loss;
  auto step = [loss](const Array& w, const Array& x, const Array& y) { return pl::value_and_grad(loss)(w, x, y); };
  Array w = randn({16, 4}, 60), x = randn({8 * n, 16}, 61), y = randn({8 * n, 4}, 62);
  pl::ShardedJitOptions o;
  o.num_partitions = n;
  auto g = pl::sharded_jit(step, {pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o);
  auto [value, grad] = g(w, x, y);
  EXPECT_EQ(value.sharded()->pieces[0].device().kind, pl::Device::cuda);
  pl::BackendScope host("cpu");
  auto [value1, grad1] = step(w, x, y);
  EXPECT_LT(pl::rel_error(pl::to_host(value), value1.astype(pl::f64)), 1e-5);
  EXPECT_LT(pl::rel_error(pl::to_host(grad), grad1.astype(pl::f64)), 1e-4);
}

}  // namespace

namespace {

// while_loop and cond on pieces: the carries stay split; the loop condition and the branch
// predicate are computed identically on every device (an all_reduce inside the condition).
TEST(ShardingScan, WhileLoopAndCondArePartitioned) {
  NEED_CPU_DEVICES(4);
  auto f = [](const Array& x) {
    Array grown = pl::while_loop([](const Array& c) { return pl::jnp::sum(pl::jnp::abs(c)) < 1000.0; },
                                 [](const Array& c) { return c * 2.0 + 0.5; }, x);
    return pl::cond(pl::jnp::sum(grown) > 0.0, [](const Array& a) { return pl::jnp::sin(a); },
                    [](const Array& a) { return a * -1.0; }, grown);
  };
  Array x = randn({8, 6}, 70);
  auto g = pl::sharded_jit(f, PartitionSpec(4, 1), PartitionSpec(4, 1));
  EXPECT_LT(pl::rel_error(pl::to_host(g(x)), pl::jit(f)(x).astype(pl::f64)), 1e-6);
  const std::string low = g.lower(x);
  EXPECT_FALSE(contains(low, "= all_gather")) << low;  // the carries never leave their devices
  EXPECT_TRUE(contains(low, "all_reduce")) << low;     // the conditions' sums
}

// Processes sharing one host's GPUs each own an equal run of them; an uneven split is refused
// before any device is touched.
TEST(Sharding, GpusAcrossProcessesSplitEvenly) {
  EXPECT_EQ(pl::sharding::gpus_per_process(8, 4), 2);
  EXPECT_EQ(pl::sharding::gpus_per_process(2, 2), 1);
  const std::string message = error_message([] { (void)pl::sharding::gpus_per_process(3, 2); });
  EXPECT_NE(message.find("distributed::initialize: 2 processes cannot share this host's 3 GPUs equally"),
            std::string::npos)
      << message;
}

}  // namespace
