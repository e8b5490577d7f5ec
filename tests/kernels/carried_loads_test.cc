// The rewrite that loads a loop's next small vector in the iteration before and carries it
// (backends/common/carried_loads.h): an attention-like loop whose lse block is indexed by the loop
// counter, rewritten and run on the interpreter and the cpu backend against the loop as written in
// float64; and the loads it must leave where they are.
#include <gtest/gtest.h>

#include "backends/common/carried_loads.h"
#include "ir_run_util.h"
#include "kernel_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;

constexpr int64_t kRows = 16, kDim = 16, kSteps = 4, kMaxElements = 256;

// acc += exp(q_i k^T - lse_i)^T q_i over the row blocks i of q and lse, from block `first`.
void lse_loop(Ref q, Ref k, Ref lse, Ref first, Ref out) {
  Value kv = k[pl::all];
  auto body = [&](Value i, Value acc) {
    pl::DSlice rows = pl::dslice(i * kRows, kRows);
    Value qi = pl::load(q, pl::idx(rows, pl::slice()));
    Value l = pl::load(lse, pl::idx(rows));
    Value p = jnp::exp(pl::dot(qi, kv.T()) * 0.25f - l(pl::slice(), pl::None));
    return acc + pl::dot(p.T(), qi);
  };
  out[pl::all] = pl::lax::fori_loop(first[0], Value(kSteps), body, jnp::zeros({kRows, kDim}, q.dtype()));
}

std::vector<ShapeDtype> loop_inputs(DType t) {
  return {{{kSteps * kRows, kDim}, t}, {{kRows, kDim}, t}, {{kSteps * kRows}, t}, {{1}, i32}};
}

ir::Kernel traced_loop(DType t) {
  return traced(pallas_call(lse_loop, ShapeDtype({kRows, kDim}, t), CallOptions{.name = "lse_loop"}), loop_inputs(t));
}

const ir::Inst* first_loop(const ir::Kernel& k) {
  for (const ir::Inst& in : k.body.body)
    if (in.op == ir::Op::For) return &in;
  return nullptr;
}

int loads_in(const ir::Region& r) {
  int n = 0;
  for (const ir::Inst& in : r.body) n += in.op == ir::Op::Load;
  return n;
}

TEST(CarriedLoads, TheNextBlocksLseIsLoadedTheIterationBefore) {
  const ir::Kernel kernel = traced_loop(f32);
  const ir::Kernel rewritten = backend::carry_loop_loads(kernel, kMaxElements);
  ir::verify(rewritten);
  const ir::Inst* before = first_loop(kernel);
  const ir::Inst* after = first_loop(rewritten);
  ASSERT_TRUE(before && after) << ir::print(rewritten);
  // One more carry (the lse block), its first value loaded before the loop; the q tile, rank 2, stays.
  EXPECT_EQ(after->regions[0].args.size(), before->regions[0].args.size() + 1) << ir::print(rewritten);
  EXPECT_EQ(after->operands.size(), before->operands.size() + 1);
  EXPECT_EQ(loads_in(rewritten.body), loads_in(kernel.body) + 1) << ir::print(rewritten);
  EXPECT_EQ(loads_in(after->regions[0]), loads_in(before->regions[0]));  // the next block's, at the end
  const ir::Inst& yield = after->regions[0].body.back();
  ASSERT_EQ(yield.op, ir::Op::Yield);
  const ir::Inst* next = nullptr;  // the instruction defining the carried value the yield passes on
  for (const ir::Inst& in : after->regions[0].body)
    if (!in.results.empty() && in.results[0] == yield.operands.back()) next = &in;
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->op, ir::Op::Load);

  // From block 0 and from block 2 (the last iteration loads block hi - 1 again), against float64.
  Rng rng;
  std::vector<Array> in{rng.normal({kSteps * kRows, kDim}), rng.normal({kRows, kDim}), rng.uniform({kSteps * kRows}, f32, 0.5, 1.5)};
  const ir::Kernel written64 = traced_loop(f64);
  for (int32_t first : {0, 2}) {
    SCOPED_TRACE("first block " + std::to_string(first));
    std::vector<Array> args = in;
    args.push_back(from_vector(std::vector<int32_t>{first}, {1}));
    std::vector<Array> args64;
    for (size_t j = 0; j < 3; ++j) args64.push_back(in[j].astype(f64));
    args64.push_back(args.back());
    const std::vector<Array> want = run_ir(written64, "interp", args64);
    for (const std::string& be : test_support::host_backends()) {
      SCOPED_TRACE(be);
      EXPECT_TRUE(matches(run_ir(rewritten, be, args).at(0), want.at(0), f32));
    }
  }
}

// Left where they are: a load of a ref the kernel writes, a load not indexed by the counter (the
// same every iteration), a vector longer than the limit, and every load of a loop without a dot.
TEST(CarriedLoads, OnlyReadOnlySmallCounterIndexedLoadsAroundDotsMove) {
  auto written = pallas_call(
      [](Ref q, Ref k, Ref state, Ref out) {
        Value kv = k[pl::all];
        auto body = [&](Value i, Value acc) {
          pl::DSlice rows = pl::dslice(i * kRows, kRows);
          Value s = pl::load(state, pl::idx(rows));
          pl::store(state, pl::idx(rows), s + 1.0f);
          return acc + pl::dot(pl::load(q, pl::idx(rows, pl::slice())) * s(pl::slice(), pl::None), kv);
        };
        out[pl::all] = pl::lax::fori_loop(Value(0), Value(kSteps), body, jnp::zeros({kRows, kDim}, pl::f32));
      },
      std::vector<ShapeDtype>{{{kSteps * kRows}, f32}, {{kRows, kDim}, f32}}, CallOptions{.name = "written_vector"});
  const ir::Kernel kw = traced(written, {{{kSteps * kRows, kDim}, f32}, {{kDim, kDim}, f32}});
  EXPECT_EQ(ir::print(backend::carry_loop_loads(kw, kMaxElements)), ir::print(kw));

  const ir::Kernel kernel = traced_loop(f32);
  EXPECT_EQ(ir::print(backend::carry_loop_loads(kernel, kRows - 1)), ir::print(kernel));  // over the limit

  auto invariant = pallas_call(
      [](Ref q, Ref k, Ref lse, Ref out) {
        Value kv = k[pl::all];
        auto body = [&](Value i, Value acc) {
          Value l = pl::load(lse, pl::idx(pl::dslice(0, kRows)));  // the same block every iteration
          Value qi = pl::load(q, pl::idx(pl::dslice(i * kRows, kRows), pl::slice()));
          return acc + pl::dot(qi * l(pl::slice(), pl::None), kv);
        };
        out[pl::all] = pl::lax::fori_loop(Value(0), Value(kSteps), body, jnp::zeros({kRows, kDim}, pl::f32));
      },
      ShapeDtype({kRows, kDim}, f32), CallOptions{.name = "invariant_vector"});
  const ir::Kernel ki = traced(invariant, {{{kSteps * kRows, kDim}, f32}, {{kDim, kDim}, f32}, {{kRows}, f32}});
  EXPECT_EQ(ir::print(backend::carry_loop_loads(ki, kMaxElements)), ir::print(ki));

  auto no_dot = pallas_call(
      [](Ref x, Ref out) {
        auto body = [&](Value i, Value acc) { return acc + pl::load(x, pl::idx(pl::dslice(i * kRows, kRows))); };
        out[pl::all] = pl::lax::fori_loop(Value(0), Value(kSteps), body, jnp::zeros({kRows}, pl::f32));
      },
      ShapeDtype({kRows}, f32), CallOptions{.name = "no_dot"});
  const ir::Kernel kn = traced(no_dot, {{{kSteps * kRows}, f32}});
  EXPECT_EQ(ir::print(backend::carry_loop_loads(kn, kMaxElements)), ir::print(kn));
}

}  // namespace
}  // namespace palladium::ktest
