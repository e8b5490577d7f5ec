// The order of a partitioned program's equations (program/schedule.cc): each collective right after
// the equation that makes its operand, the work that does not need it after it, and the smallest
// collective last, where it is the one left exposed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "palladium/palladium.h"
#include "program/schedule.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
namespace prog = palladium::program;
using pl::Array;
using pl::PartitionSpec;

namespace {

// A program built equation by equation (the scheduler reads only primitives, variables and types).
struct Builder {
  prog::Program p;
  int input(pl::Shape s) {
    const int v = p.new_var({std::move(s), pl::DType::float32});
    p.inputs.push_back(v);
    return v;
  }
  int eqn(prog::Prim prim, std::vector<int> ins, pl::Shape out) {
    const int v = p.new_var({std::move(out), pl::DType::float32});
    p.eqns.push_back(prog::Eqn{prim, {}, std::move(ins), {v}});
    return v;
  }
};

// The defining equation's position of each of `vars` in `p`.
std::vector<size_t> positions(const prog::Program& p, const std::vector<int>& vars) {
  std::vector<size_t> at;
  for (int v : vars)
    for (size_t i = 0; i < p.eqns.size(); ++i)
      if (p.eqns[i].outs[0] == v) at.push_back(i);
  return at;
}

// The backward pass of a two-layer data-parallel model, in the order its transposition writes it:
// the small second-layer gradient's chain (dot, all-reduce) first, then the long chain to the
// large first-layer gradient, whose all-reduce would end the program with nothing to overlap.
TEST(Schedule, TheLargestAllReduceIsFollowedByIndependentWork) {
  using prog::Prim;
  Builder b;
  const int ht = b.input({128, 8}), dout = b.input({8, 4}), w2t = b.input({4, 128}), xt = b.input({64, 8}),
            mask = b.input({8, 128});
  const int dw2 = b.eqn(Prim::matmul, {ht, dout}, {128, 4});
  const int dw2_sum = b.eqn(Prim::all_reduce, {dw2}, {128, 4});
  const int dh = b.eqn(Prim::matmul, {dout, w2t}, {8, 128});
  const int dpre = b.eqn(Prim::mul, {dh, mask}, {8, 128});
  const int dw1 = b.eqn(Prim::matmul, {xt, dpre}, {64, 128});
  const int dw1_sum = b.eqn(Prim::all_reduce, {dw1}, {64, 128});
  b.p.outputs = {dw1_sum, dw2_sum};
  const prog::Program s = prog::schedule_collectives_early(b.p);
  ASSERT_EQ(s.eqns.size(), b.p.eqns.size());
  EXPECT_EQ(positions(s, {dh, dpre, dw1, dw1_sum, dw2, dw2_sum}), (std::vector<size_t>{0, 1, 2, 3, 4, 5}))
      << prog::print(s);
  // The same program scheduled again, and its schedule scheduled: one order (every device of a run
  // must issue its collectives in the same order).
  EXPECT_EQ(prog::print(prog::schedule_collectives_early(b.p)), prog::print(s));
  EXPECT_EQ(prog::print(prog::schedule_collectives_early(s)), prog::print(s));
}

// Work that reads a collective's result goes after the work that does not: the collective has that
// long to finish.
TEST(Schedule, ReadersOfACollectiveWaitBehindIndependentWork) {
  using prog::Prim;
  Builder b;
  const int x = b.input({32, 32}), y = b.input({32, 32});
  const int a = b.eqn(Prim::exp, {x}, {32, 32});
  const int c = b.eqn(Prim::all_reduce, {a}, {32, 32});
  const int r = b.eqn(Prim::reshape, {c}, {1024});
  const int reader = b.eqn(Prim::sin, {r}, {1024});
  const int independent = b.eqn(Prim::tanh, {y}, {32, 32});
  b.p.outputs = {reader, independent};
  const prog::Program s = prog::schedule_collectives_early(b.p);
  EXPECT_EQ(positions(s, {a, c, independent, r, reader}), (std::vector<size_t>{0, 1, 2, 3, 4})) << prog::print(s);
}

// Without collectives the program is left as it is.
TEST(Schedule, ProgramsWithoutCollectivesKeepTheirOrder) {
  using prog::Prim;
  Builder b;
  const int x = b.input({16}), y = b.input({16});
  const int t = b.eqn(Prim::tanh, {y}, {16});
  const int e = b.eqn(Prim::exp, {x}, {16});
  b.p.outputs = {e, t};
  EXPECT_EQ(prog::print(prog::schedule_collectives_early(b.p)), prog::print(b.p));
}

// End to end: the data-parallel gradient of a two-layer model on two virtual CPU devices runs the
// first layer's (larger) all-reduce before the second layer's weight-gradient dot, and equals the
// unsharded gradient.
TEST(Schedule, DataParallelGradientOverlapsItsLargestAllReduce) {
  pl::test_support::ScopedEnv devices("PALLADIUM_CPU_DEVICES", "2");
  pl::test_support::ScopedEnv platform("PALLADIUM_PLATFORM", "cpu");
  auto loss = [](const Array& w1, const Array& w2, const Array& x, const Array& y) {
    return pl::jnp::mean(pl::jnp::square(pl::jnp::matmul(pl::jnp::tanh(pl::jnp::matmul(x, w1)), w2) - y));
  };
  auto step = [loss](const Array& w1, const Array& w2, const Array& x, const Array& y) {
    return pl::grad<0, 1>(loss)(w1, w2, x, y);
  };
  const Array w1 = pl::test_support::randn({64, 128}, 71), w2 = pl::test_support::randn({128, 4}, 72),
              x = pl::test_support::randn({16, 64}, 73), y = pl::test_support::randn({16, 4}, 74);
  pl::ShardedJitOptions o;
  o.num_partitions = 2;
  auto split = pl::sharded_jit(step, {pl::None, pl::None, PartitionSpec(2, 1), PartitionSpec(2, 1)}, pl::None, o);
  const std::string low = split.lower(w1, w2, x, y);
  const std::string steps = low.substr(low.find("--- steps ---"));
  std::vector<std::string> lines;
  for (size_t at = 0, end; (end = steps.find('\n', at)) != std::string::npos; at = end + 1)
    lines.push_back(steps.substr(at, end - at));
  // The last two steps: a matmul (the second layer's weight gradient), then its all-reduce; an
  // all-reduce (the first layer's) comes before them.
  ASSERT_GE(lines.size(), 4u) << steps;
  EXPECT_TRUE(pl::test_support::contains(lines[lines.size() - 1], "collective all_reduce")) << steps;
  EXPECT_TRUE(pl::test_support::contains(lines[lines.size() - 2], "matmul")) << steps;
  EXPECT_TRUE(pl::test_support::contains(lines[lines.size() - 3], "collective all_reduce")) << steps;
  auto [g1, g2] = split(w1, w2, x, y);
  pl::BackendScope host("cpu");
  auto [r1, r2] = pl::grad<0, 1>(loss)(w1.astype(pl::f64), w2.astype(pl::f64), x.astype(pl::f64), y.astype(pl::f64));
  EXPECT_LT(pl::rel_error(pl::to_host(g1), r1), 1e-5);
  EXPECT_LT(pl::rel_error(pl::to_host(g2), r2), 1e-5);
}

}  // namespace
