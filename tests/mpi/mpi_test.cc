// Several processes under mpiexec (tests/CMakeLists.txt runs this binary as 2 processes of 2
// devices and as 4 processes of 1): devices across processes, sharded_jit and shard_map whose
// collectives cross processes, to_host gathering pieces from their owners, the seed's
// cross-process errors, and a mismatched program failing on every rank instead of hanging.
// Every rank draws the same inputs (same keys) and checks against its own unsharded run.
#include <gtest/gtest.h>

#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::P;
using pl::PartitionSpec;
using pl::Shape;

namespace {

using palladium::test_support::error_message;

using palladium::test_support::randn;

TEST(Mpi, DevicesSpanProcesses) {
  ASSERT_GT(pl::distributed::process_count(), 1) << "run this binary under mpiexec";
  EXPECT_EQ(pl::device_count(), 4);
  EXPECT_EQ(pl::local_device_count() * pl::distributed::process_count(), 4);
  const std::vector<pl::Device> local = pl::local_devices();
  EXPECT_EQ(local.front().index, pl::distributed::process_index() * pl::local_device_count());
}

TEST(Mpi, ShardedJitDataParallelMatchesUnsharded) {
  auto loss = palladium::test_support::tanh_regression_loss;
  auto step = [loss](const Array& w, const Array& x, const Array& y) { return pl::value_and_grad(loss)(w, x, y); };
  Array w = randn({8, 3}, 1), x = randn({16, 8}, 2), y = randn({16, 3}, 3);
  pl::ShardedJitOptions o;
  o.local_num_partitions = pl::local_device_count();
  auto g = pl::sharded_jit(step, {pl::None, PartitionSpec(4, 1), PartitionSpec(4, 1)}, pl::None, o);
  auto [value, grad] = g(w, x, y);
  auto [value1, grad1] = step(w, x, y);
  EXPECT_LT(pl::rel_error(pl::to_host(value), value1.astype(pl::f64)), 1e-6);
  EXPECT_LT(pl::rel_error(pl::to_host(grad), grad1.astype(pl::f64)), 1e-5);
  // A split output: each process holds its devices' rows; to_host gathers them from their owners.
  auto h = pl::sharded_jit([](const Array& a) { return pl::jnp::sin(a) * 2.0; }, PartitionSpec(4, 1),
                           PartitionSpec(4, 1), o);
  Array out = h(x);
  EXPECT_TRUE(pl::array_equal(pl::to_host(out), pl::jnp::sin(x) * 2.0));
}

TEST(Mpi, ShardMapCollectivesCrossProcesses) {
  pl::Mesh mesh = pl::make_mesh({2, 2}, {"x", "y"});
  Array a = randn({8, 6}, 4);
  auto gathered = pl::shard_map([](const Array& b) { return pl::all_gather(pl::all_gather(b, "x", 0, true), "y", 1, true); },
                                mesh, {P("x", "y")}, {P()})(a);
  EXPECT_TRUE(pl::array_equal(pl::to_host(gathered), a));
  auto total = pl::shard_map([](const Array& b) { return pl::psum(pl::jnp::sum(b), pl::AxisNames{"x", "y"}); }, mesh,
                             {P("x", "y")}, {P()})(a);
  EXPECT_LT(pl::rel_error(pl::to_host(total), pl::jnp::sum(a).astype(pl::f64)), 1e-6);
  pl::Mesh ring = pl::make_mesh({4}, {"i"});
  auto shifted = pl::shard_map([](const Array& b) { return pl::ppermute(b, "i", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); },
                               ring, {P("i")}, {P("i")})(a);
  Array s = pl::to_host(shifted);
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(s.get(r * 6), a.get(((r + 6) % 8) * 6));
}

TEST(Mpi, SeedCrossProcessErrors) {
  auto f = [](const Array& a) { return a + 1.0; };
  Array x = randn({8, 4}, 5);
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(4, 1), pl::None)(x),
                    "Specify 'local_nparts' when using cross-process sharded_jit and all inputs and outputs are replicated.");
  pl::ShardedJitOptions o;
  o.local_num_partitions = 8;
  PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(4, 1), pl::None, o)(x),
                    "sharded_jit computation requires 8 local devices, but only");
  if (pl::local_device_count() == 2) {
    o.local_num_partitions = 2;
    PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(3, 1), pl::None, o)(randn({12, 4}, 7)),
                      "sharded_jit across multiple hosts must use all available devices. Got 3 out of 4 requested "
                      "devices (local device count: 2)");
  }
}

// The block of x at (r0, c0) of shape (rows, cols).
Array block(const Array& x, int64_t r0, int64_t c0, int64_t rows, int64_t cols) {
  Array out(Shape{rows, cols}, x.dtype());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out.set(r * cols + c, x.get((r0 + r) * x.shape()[1] + c0 + c));
  return out;
}

// The seed's local_in_parts / local_out_parts: each process passes its own chunk of the global
// arguments and gets its chunk of the results; the program still computes on the global arrays
// (the mean below is over all of x, so it crosses processes).
TEST(Mpi, LocalPartsAreEachProcessesChunk) {
  const int me = pl::distributed::process_index();
  const int here = pl::local_device_count();
  auto f = [](const Array& a) { return pl::jnp::sin(a) * 2.0 - pl::jnp::mean(a); };
  const Array x = randn({16, 8}, 9);
  // PartitionSpec(2, 2): device k holds row block k / 2 and column block k % 2. With two devices a
  // process, process p holds row block p whole; with one, the single block (p / 2, p % 2).
  const PartitionSpec local = here == 2 ? PartitionSpec(1, 2) : PartitionSpec(1, 1);
  const int64_t r0 = here == 2 ? me * 8 : (me / 2) * 8, c0 = here == 2 ? 0 : (me % 2) * 4;
  const int64_t cols = here == 2 ? 8 : 4;
  pl::ShardedJitOptions o;
  o.local_num_partitions = here;
  o.local_in_parts = pl::Parts(local);
  o.local_out_parts = pl::Parts(local);
  auto g = pl::sharded_jit(f, PartitionSpec(2, 2), PartitionSpec(2, 2), o);
  const Array mine = pl::to_host(g(block(x, r0, c0, 8, cols)));
  ASSERT_EQ(mine.shape(), (Shape{8, cols}));
  EXPECT_LT(pl::rel_error(mine, block(f(x).astype(pl::f64), r0, c0, 8, cols)), 1e-6);
  if (here == 2) {  // a cut that is not what this process's devices hold
    pl::ShardedJitOptions bad;
    bad.local_num_partitions = here;
    bad.local_in_parts = pl::Parts(PartitionSpec(2, 1));
    PL_EXPECT_ERROR(pl::sharded_jit(f, PartitionSpec(2, 2), pl::None, bad)(randn({16, 4}, 10)),
                    "local_in_parts of argument 0 PartitionSpec(2, 1) does not describe this process's share of "
                    "PartitionSpec(2, 2)");
  }
}

// The last test: every rank runs a program whose pieces differ in size from the other ranks'. Each
// rank gets an error from the collective rather than waiting forever.
TEST(Mpi, MismatchedProgramsFailOnEveryRank) {
  pl::Mesh ring = pl::make_mesh({4}, {"i"});
  const int64_t rows = 4 * (1 + pl::distributed::process_index());
  Array a = randn({rows, 2}, 6);
  const std::string message = error_message([&] {
    (void)pl::shard_map([](const Array& b) { return pl::all_gather(b, "i", 0, true); }, ring, {P("i")}, {P()})(a);
  });
  EXPECT_NE(message.find("all_gather"), std::string::npos) << message;
  EXPECT_TRUE(message.find("different programs") != std::string::npos || message.find("timed out") != std::string::npos)
      << message;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pl::distributed::initialize();
  // Only rank 0 prints the progress; every rank's failures still fail the run.
  if (pl::distributed::process_index() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
