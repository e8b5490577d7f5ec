// The rewrite that issues a dot needing no other dot beside the first dot of its region
// (backends/common/early_dots.h): the attention backward's step written in the seed's order,
// its dout v^T moved up past the softmax and a store, run on the interpreter and the cpu backend
// against float64; and the dots it must leave where they are.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/common/early_dots.h"
#include "ir_run_util.h"
#include "kernel_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;

constexpr int64_t kRows = 32, kDim = 16;

// One dK/dV step in the seed's order: q k^T, the softmax, dv = p^T dout stored, then dout v^T.
void seed_order_step(Ref q, Ref k, Ref v, Ref dout, Ref lse, Ref di, Ref dk_out, Ref dv_out) {
  const float scale = 0.25f;
  Value qv = q[pl::all], dov = dout[pl::all];
  Value p = jnp::exp(pl::dot(qv, k[pl::all].T()) * scale - lse[pl::all](pl::slice(), pl::None));
  dv_out[pl::all] = pl::dot(p.T(), dov);
  Value dp = pl::dot(dov, v[pl::all].T()) - di[pl::all](pl::slice(), pl::None);
  dk_out[pl::all] = pl::dot((p * dp * scale).T(), qv);
}

Callable<std::vector<Array>> step_call(DType t) {
  return pallas_call(seed_order_step, std::vector<ShapeDtype>{{{kRows, kDim}, t}, {{kRows, kDim}, t}},
                     CallOptions{.name = "seed_order_step"});
}

std::vector<ShapeDtype> step_inputs(DType t) {
  return {{{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows, kDim}, t}, {{kRows}, t}, {{kRows}, t}};
}

// The ops of the kernel body, in order.
std::vector<ir::Op> ops_of(const ir::Kernel& k) {
  std::vector<ir::Op> ops;
  for (const ir::Inst& in : k.body.body) ops.push_back(in.op);
  return ops;
}

// The ops strictly between the first two dots.
std::vector<ir::Op> between_first_dots(const ir::Kernel& k) {
  const std::vector<ir::Op> ops = ops_of(k);
  const auto first = std::find(ops.begin(), ops.end(), ir::Op::Dot);
  const auto second = std::find(first + 1, ops.end(), ir::Op::Dot);
  return {first + 1, second};
}

bool holds(const std::vector<ir::Op>& ops, ir::Op op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); }

TEST(EarlyDots, DoutVTransposedIsIssuedBesideQKTransposed) {
  const ir::Kernel kernel = traced(step_call(f32), step_inputs(f32));
  const ir::Kernel rewritten = backend::issue_independent_dots_early(kernel);
  ir::verify(rewritten);
  // As written, the softmax lies between q k^T and the next dot (p^T dout, then stored).
  EXPECT_TRUE(holds(between_first_dots(kernel), ir::Op::Exp)) << ir::print(kernel);
  // Rewritten, only what dout v^T reads does (its loads and transpose), and every op is kept.
  const std::vector<ir::Op> between = between_first_dots(rewritten);
  EXPECT_FALSE(holds(between, ir::Op::Exp)) << ir::print(rewritten);
  EXPECT_FALSE(holds(between, ir::Op::Store)) << ir::print(rewritten);
  EXPECT_TRUE(holds(between, ir::Op::Transpose)) << ir::print(rewritten);
  std::vector<ir::Op> a = ops_of(kernel), b = ops_of(rewritten);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_NE(ir::print(rewritten), ir::print(kernel));

  expect_step_matches_float64(rewritten, traced(step_call(f64), step_inputs(f64)), kRows, kDim);
}

// A dot reading another dot's result stays after it: nothing moves.
TEST(EarlyDots, DependentDotsStayInOrder) {
  auto call = pallas_call(
      [](Ref a, Ref b, Ref out) {
        Value s = jnp::exp(pl::dot(a[pl::all], b[pl::all].T()));
        out[pl::all] = pl::dot(s, b[pl::all]);
      },
      ShapeDtype({kRows, kDim}, f32), CallOptions{.name = "chained_dots"});
  const ir::Kernel k = traced(call, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}});
  EXPECT_EQ(ir::print(backend::issue_independent_dots_early(k)), ir::print(k));
}

// A dot whose operand is loaded from a ref the kernel writes stays after the store before it: the
// load must see that store.
TEST(EarlyDots, LoadsOfWrittenRefsStayAfterTheirStores) {
  auto call = pallas_call(
      [](Ref a, Ref b, Ref scratch, Ref out) {
        Value s = pl::dot(a[pl::all], b[pl::all].T());
        scratch[pl::all] = jnp::exp(s);
        out[pl::all] = pl::dot(scratch[pl::all], b[pl::all]) + jnp::sum(s);
      },
      std::vector<ShapeDtype>{{{kRows, kRows}, f32}, {{kRows, kDim}, f32}}, CallOptions{.name = "written_then_read"});
  const ir::Kernel k = traced(call, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}});
  EXPECT_EQ(ir::print(backend::issue_independent_dots_early(k)), ir::print(k));
  // The same through an input aliased to the written output: its load stays after the store too.
  auto aliased = pallas_call(
      [](Ref a, Ref b, Ref state_in, Ref state, Ref out) {
        Value s = pl::dot(a[pl::all], b[pl::all].T());
        state[pl::all] = jnp::exp(s);
        out[pl::all] = pl::dot(state_in[pl::all], b[pl::all]) + jnp::sum(s);
      },
      std::vector<ShapeDtype>{{{kRows, kRows}, f32}, {{kRows, kDim}, f32}},
      CallOptions{.input_output_aliases = {{2, 0}}, .name = "aliased_then_read"});
  const ir::Kernel ka = traced(aliased, {{{kRows, kDim}, f32}, {{kRows, kDim}, f32}, {{kRows, kRows}, f32}});
  ASSERT_EQ(ka.aliases.size(), 1u);
  EXPECT_EQ(ir::print(backend::issue_independent_dots_early(ka)), ir::print(ka));
}

}  // namespace
}  // namespace palladium::ktest
