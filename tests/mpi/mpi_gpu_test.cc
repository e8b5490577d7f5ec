// GPUs across processes (one host): under `mpiexec -np P` each process owns an equal share of the
// host's GPUs and the collectives between them run through NCCL, its id shared over MPI. Skipped
// where devices() lists no GPU (CI runs this binary with PALLADIUM_PLATFORM=cpu); on the GPU
// machine: `mpiexec -np 2 test_mpi --gtest_filter='MpiGpu*'`. Every rank draws the same inputs and
// checks against a float64 reference computed on its host.
#include <gtest/gtest.h>

#include "palladium/palladium.h"
#include "sharding/communicator.h"
#include "sharding/distributed.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::P;
using pl::PartitionSpec;

namespace {

using palladium::test_support::randn;

#define NEED_GPUS()                                                                     \
  const int n = pl::device_count();                                                      \
  if (pl::devices().front().kind != pl::Device::cuda) GTEST_SKIP() << "no GPU listed"; \
  ASSERT_GT(pl::distributed::process_count(), 1) << "run this binary under mpiexec"

TEST(MpiGpu, EachProcessOwnsItsShareOfTheGpus) {
  NEED_GPUS();
  const int per = n / pl::distributed::process_count();
  ASSERT_EQ(pl::local_device_count(), per);
  for (int i = 0; i < per; ++i) {
    const pl::Device d = pl::local_devices()[static_cast<size_t>(i)];
    EXPECT_EQ(d.kind, pl::Device::cuda);
    EXPECT_EQ(d.index, pl::distributed::process_index() * per + i);
  }
  const std::string engine = pl::sharding::make_communicator(pl::make_mesh({n}, {"d"}))->name();
  EXPECT_EQ(engine, "nccl (over mpi)");
}

// shard_map's collectives between GPUs of different processes, against float64 on the host.
TEST(MpiGpu, ShardMapCollectivesMatchFloat64) {
  NEED_GPUS();
  const pl::Mesh mesh = pl::make_mesh({n}, {"d"});
  const Array rows = randn({4 * n, 6}, 201);
  const Array r64 = rows.astype(pl::f64);
  // psum of each device's rows: the sum of the n blocks, on every device.
  Array block_sum = pl::lax::slice(r64, {0, 0}, {4, 6});
  for (int i = 1; i < n; ++i) block_sum = block_sum + pl::lax::slice(r64, {4 * i, 0}, {4 * i + 4, 6});
  const Array summed =
      pl::to_host(pl::shard_map([](const Array& b) { return pl::psum(b, "d"); }, mesh, {P("d")}, {P()})(rows));
  EXPECT_LT(pl::rel_error(summed, block_sum), 1e-6);
  const Array gathered = pl::to_host(
      pl::shard_map([](const Array& b) { return pl::all_gather(b, "d", 0, true); }, mesh, {P("d")}, {P()})(rows));
  EXPECT_TRUE(pl::array_equal(gathered, rows));
  std::vector<std::pair<int64_t, int64_t>> ring;
  for (int64_t i = 0; i < n; ++i) ring.push_back({i, (i + 1) % n});
  const Array shifted = pl::to_host(
      pl::shard_map([ring](const Array& b) { return pl::ppermute(b, "d", ring); }, mesh, {P("d")}, {P("d")})(rows));
  const Array expect = pl::jnp::concatenate({pl::lax::slice(rows, {4 * (n - 1), 0}, {4 * n, 6}),
                                             pl::lax::slice(rows, {0, 0}, {4 * (n - 1), 6})},
                                            0);
  EXPECT_TRUE(pl::array_equal(shifted, expect));
  // psum_scatter: device i keeps block i of the sum of every device's whole array (all equal here).
  const Array scattered = pl::to_host(
      pl::shard_map([](const Array& b) { return pl::psum_scatter(b, "d", 0, true); }, mesh, {P()}, {P("d")})(rows));
  EXPECT_LT(pl::rel_error(scattered, r64 * static_cast<double>(n)), 1e-6);
}

// A data-parallel step across processes: the batch split over the GPUs, the gradient all-reduced
// through NCCL, against the float64 gradient of the whole batch.
TEST(MpiGpu, DataParallelGradientMatchesFloat64) {
  NEED_GPUS();
  auto loss = palladium::test_support::tanh_regression_loss;
  const Array w = randn({32, 8}, 211), x = randn({64 * n, 32}, 212), y = randn({64 * n, 8}, 213);
  pl::ShardedJitOptions o;
  o.num_partitions = n;
  o.local_num_partitions = pl::local_device_count();
  auto step = [loss](const Array& w_, const Array& x_, const Array& y_) { return pl::grad(loss)(w_, x_, y_); };
  const Array grad = pl::sharded_jit(step, {pl::None, PartitionSpec(n, 1), PartitionSpec(n, 1)}, pl::None, o)(w, x, y);
  pl::BackendScope host("cpu");
  const Array ref = pl::grad(loss)(w.astype(pl::f64), x.astype(pl::f64), y.astype(pl::f64));
  EXPECT_LT(pl::rel_error(pl::to_host(grad), ref), 1e-5);
}

}  // namespace
