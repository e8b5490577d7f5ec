// Rerolling under jit: loops that C++ unrolled while tracing become scans again when their body is
// elementwise, and every other program keeps its meaning. Each case is checked against the same
// function run eagerly (op by op) and, for IndRNN, against the float64 loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "palladium/palladium.h"
#include "ops/indrnn.h"
#include "tests/support/indrnn_naive.h"
#include "tests/support/program_support.h"
#include "tests/support/test_support.h"

namespace pl = palladium;
using pl::Array;
using pl::Shape;

namespace {

using palladium::test_support::host_backends;
using palladium::test_support::optimized_part;
using palladium::test_support::count_of;

class Reroll : public palladium::test_support::OnBackend {};

using palladium::test_support::randn;


// The largest %id printed in a program's text.
long largest_var(const std::string& text) {
  long largest = -1;
  for (size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 1))
    largest = std::max(largest, std::strtol(text.c_str() + at + 1, nullptr, 10));
  return largest;
}

using palladium::test_support::indrnn_naive_loop;

TEST_P(Reroll, NaiveIndRnnLoopBecomesOneFusedScan) {
  const int64_t T = 40, F = 24;
  Array x = randn({T, F}, 1), u = pl::random::uniform(pl::random::key(2), {F}, pl::f32, 0.5, 1.0), h0 = randn({F}, 3);
  auto f = pl::jit(indrnn_naive_loop);
  const std::string lowered = f.lower(x, u, h0);
  const std::string opt = optimized_part(lowered);
  EXPECT_EQ(count_of(opt, "scan"), 1u) << opt;
  EXPECT_EQ(count_of(opt, " slice"), 0u) << opt;  // x[t] is the scan's xs
  EXPECT_NE(lowered.find("(1 kernels)"), std::string::npos) << lowered;  // scan_fused
  EXPECT_LT(pl::rel_error(f(x, u, h0), pl::ops::indrnn_reference(x, u, h0)), 1e-6);
  // The rerolled program has the same size at any trip count.
  Array longer = randn({10 * T, F}, 4);
  EXPECT_EQ(count_of(optimized_part(f.lower(longer, u, h0)), "\n"), count_of(opt, "\n"));
  // Its vars are numbered afresh (the executor's environment has one slot per var, and the
  // unrolled trace left thousands behind): no var id beyond the handful the program uses.
  EXPECT_LT(largest_var(opt), 10) << opt;
  EXPECT_LT(pl::rel_error(f(longer, u, h0), pl::ops::indrnn_reference(longer, u, h0)), 1e-6);
}

TEST_P(Reroll, TwoCarriesInvariantsAndAnOffsetWindow) {
  // Rows 3 .. T-2 only (the xs is a slice of x), two carries, two stacked outputs and the final
  // carries returned; the first iteration is peeled by the loop itself (a different op).
  auto f = [](const Array& x, const Array& w) {
    Array a = pl::jnp::tanh(pl::lax::index(x, 2)), b = w * 0.5;
    std::vector<Array> as, bs;
    for (int64_t t = 3; t < x.shape()[0] - 1; ++t) {
      Array xt = pl::lax::index(x, t);
      Array na = pl::jnp::tanh(a * w + xt) - 0.25 * b;
      b = pl::jnp::maximum(b, na) * 0.9;
      a = na;
      as.push_back(a);
      bs.push_back(b * 2.0);
    }
    return std::make_tuple(pl::jnp::stack(as), pl::jnp::stack(bs), a, b);
  };
  Array x = randn({20, 5, 3}, 5), w = randn({5, 3}, 6);
  auto jf = pl::jit(f);
  const std::string opt = optimized_part(jf.lower(x, w));
  EXPECT_EQ(count_of(opt, "scan"), 1u) << opt;
  auto [as, bs, a, b] = f(x, w);
  auto [jas, jbs, ja, jb] = jf(x, w);
  EXPECT_LT(pl::rel_error(jas, as), 1e-6);
  EXPECT_LT(pl::rel_error(jbs, bs), 1e-6);
  EXPECT_LT(pl::rel_error(ja, a), 1e-6);
  EXPECT_LT(pl::rel_error(jb, b), 1e-6);
}

TEST_P(Reroll, LoopsThatAreNotOneElementwiseScanStayUnrolled) {
  Array x = randn({8, 6}, 7), m = randn({6, 6}, 8), h0 = randn({6}, 9);
  // A matmul in the body: the scan would not be one kernel.
  auto with_matmul = [](const Array& xs, const Array& mm, const Array& h) {
    Array c = h;
    for (int64_t t = 0; t < xs.shape()[0]; ++t) c = pl::jnp::tanh(pl::jnp::matmul(mm, c) + pl::lax::index(xs, t));
    return c;
  };
  // An iteration's value read by itself afterwards (not stacked, not the last carry).
  auto middle_read = [](const Array& xs, const Array& mm, const Array& h) {
    std::vector<Array> hs;
    Array c = h;
    for (int64_t t = 0; t < xs.shape()[0]; ++t) {
      c = pl::jnp::sin(c) + pl::lax::index(xs, t);
      hs.push_back(c);
    }
    return hs[3] * pl::jnp::sum(mm) + c;
  };
  // Too few trips to be worth a scan.
  auto short_loop = [](const Array& xs, const Array& mm, const Array& h) {
    Array c = h;
    for (int64_t t = 0; t < 3; ++t) c = pl::jnp::cos(c) * pl::lax::index(xs, t) + pl::lax::index(mm, 0);
    return c;
  };
  for (const auto& f : {std::function<Array(const Array&, const Array&, const Array&)>(with_matmul),
                        std::function<Array(const Array&, const Array&, const Array&)>(middle_read),
                        std::function<Array(const Array&, const Array&, const Array&)>(short_loop)}) {
    auto jf = pl::jit(f);
    EXPECT_EQ(count_of(optimized_part(jf.lower(x, m, h0)), "scan"), 0u);
    EXPECT_LT(pl::rel_error(jf(x, m, h0), f(x, m, h0)), 1e-6);
  }
}

TEST_P(Reroll, GradOfTheJittedNaiveLoopKeepsItsValue) {
  // grad under jit: the backward reads every iteration's forward values one by one, so the forward
  // loop is left unrolled (values of a middle iteration read after the run); the result must not move.
  Array x = randn({12, 7}, 10), u = pl::random::uniform(pl::random::key(11), {7}, pl::f32, 0.5, 1.0), h0 = randn({7}, 12);
  auto loss = [](const Array& xx, const Array& uu, const Array& hh) { return pl::jnp::sum(indrnn_naive_loop(xx, uu, hh) * indrnn_naive_loop(xx, uu, hh)); };
  auto g = pl::grad<0, 1>(loss);
  auto jg = pl::jit(g);
  auto [gx, gu] = g(x, u, h0);
  auto [jgx, jgu] = jg(x, u, h0);
  EXPECT_LT(pl::rel_error(jgx, gx), 1e-5);
  EXPECT_LT(pl::rel_error(jgu, gu), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Backends, Reroll, ::testing::ValuesIn(host_backends()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
