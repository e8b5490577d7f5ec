// The rewrite that compiled backends apply to sequential grid chains (backends/common/chain_loops.h):
// the kernels it takes and the loop it makes of them, each rewritten kernel run on the interpreter
// and the cpu backend against float64, and the kernels it must leave alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/common/chain_loops.h"
#include "ir_run_util.h"
#include "kernel_test_util.h"
#include "tests/support/program_support.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ::testing::HasSubstr;
using ::testing::Not;

// The rewritten kernel on the interpreter and the cpu backend against a float64 reference.
void expect_runs_match(const ir::Kernel& k, const std::vector<Array>& inputs, const Array& want, DType t) {
  for (const std::string& be : test_support::host_backends()) {
    SCOPED_TRACE(be);
    EXPECT_TRUE(matches(run_ir(k, be, inputs).at(0), want, t));
  }
}

CallOptions matmul_options(int64_t m, int64_t n, int64_t k, int64_t b) {
  return {.grid = {m / b, n / b, k / b},
          .dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary},
          .in_specs = {BlockSpec({b, b}, [](Index i, Index, Index kk) { return pl::idx(i, kk); }),
                       BlockSpec({b, b}, [](Index, Index j, Index kk) { return pl::idx(kk, j); })},
          .out_specs = {BlockSpec({b, b}, [](Index i, Index j, Index) { return pl::idx(i, j); })},
          .name = "chain_matmul"};
}

// JAX's Pallas matmul test: the output block initialised at step 0 and accumulated at every step.
TEST(ChainLoops, AccumulatingMatmulBecomesAKLoopWithTheBlockAsItsCarry) {
  Rng rng;
  const int64_t m = 64, n = 48, k = 80, b = 16;
  auto call = pallas_call(
      [](Ref x, Ref y, Ref out) {
        pl::when(pl::program_id(2) == 0, [&] { out[pl::all] = jnp::zeros({16, 16}); });
        out[pl::all] = out[pl::all] + jnp::dot(x[pl::all], y[pl::all]);
      },
      ShapeDtype({m, n}, f32), matmul_options(m, n, k, b));
  const ir::Kernel kernel = traced(call, {ShapeDtype({m, k}, f32), ShapeDtype({k, n}, f32)});
  std::optional<ir::Kernel> looped = backend::chains_as_loops(kernel);
  ASSERT_TRUE(looped.has_value());
  const std::string text = ir::print(*looped);
  EXPECT_THAT(text, HasSubstr("grid=(4, 3, 1)\n"));
  EXPECT_THAT(text, HasSubstr("block (16, 80) of f32[64,80]"));  // the whole walk along k
  EXPECT_THAT(text, HasSubstr("block (80, 16) of f32[80,48]"));
  EXPECT_THAT(text, HasSubstr("= for "));
  EXPECT_THAT(text, Not(HasSubstr("load o0")));  // the block is a carry, started at zeros
  EXPECT_THAT(text, Not(HasSubstr("program_id axis=2")));
  EXPECT_EQ(test_support::count_of(text, "store o0"), 1u) << text;
  Array x = rng.normal({m, k}), y = rng.normal({k, n});
  const Array want = jnp::matmul(x.astype(f64), y.astype(f64));
  expect_runs_match(*looped, {x, y}, want, f32);
}

// The TPU-style form: a float32 scratch accumulator, the output written from it at the last step.
// The scratch becomes the carry; the last step's store moves after the loop.
TEST(ChainLoops, ScratchAccumulatorAndALastStepOutput) {
  Rng rng;
  const int64_t m = 32, n = 32, k = 64, b = 16;
  CallOptions o = matmul_options(m, n, k, b);
  o.scratch_shapes = {ShapeDtype({b, b}, f32)};
  auto call = pallas_call(
      [](Ref x, Ref y, Ref out, Ref acc) {
        pl::when(pl::program_id(2) == 0, [&] { acc[pl::all] = jnp::zeros({16, 16}); });
        acc[pl::all] = acc[pl::all] + jnp::dot(x[pl::all], y[pl::all]);
        pl::when(pl::program_id(2) == pl::num_programs(2) - 1, [&] { out[pl::all] = acc[pl::all].astype(bf16); });
      },
      ShapeDtype({m, n}, bf16), o);
  const ir::Kernel kernel = traced(call, {ShapeDtype({m, k}, bf16), ShapeDtype({k, n}, bf16)});
  std::optional<ir::Kernel> looped = backend::chains_as_loops(kernel);
  ASSERT_TRUE(looped.has_value());
  const std::string text = ir::print(*looped);
  EXPECT_THAT(text, Not(HasSubstr("load s0")));
  EXPECT_THAT(text, Not(HasSubstr("store s0")));  // scratch is dropped after the call
  EXPECT_THAT(text, Not(HasSubstr("load o0")));   // not carried: written at the last step only,
  EXPECT_THAT(text, Not(HasSubstr("if ")));       // which now follows the loop
  EXPECT_EQ(test_support::count_of(text, "store o0"), 1u) << text;
  Array x = rng.normal({m, k}, bf16), y = rng.normal({k, n}, bf16);
  const Array want = jnp::matmul(x.astype(f64), y.astype(f64));
  expect_runs_match(*looped, {x, y}, want, bf16);
}

// Last-step work that reads a value the step computed outside the `if` (not a carry) cannot follow
// the loop: it stays inside, under its `if`, and the results still match.
TEST(ChainLoops, LastStepWorkOnAValueOfTheStepStaysInTheLoop) {
  Rng rng;
  const int64_t steps = 5, width = 24;
  auto call = pallas_call(
      [](Ref x, Ref out, Ref acc) {
        pl::when(pl::program_id(0) == 0, [&] { acc[pl::all] = jnp::zeros({24}); });
        Value xv = x[pl::all];  // read outside the `if`: a value of the step, not a carry
        acc[pl::all] = acc[pl::all] + xv;
        pl::when(pl::program_id(0) == pl::num_programs(0) - 1, [&] { out[pl::all] = acc[pl::all] * 2.0f + xv; });
      },
      ShapeDtype({width}, f32),
      {.grid = {steps},
       .dimension_semantics = {pl::arbitrary},
       .in_specs = {BlockSpec({pl::None, width}, [](Index t) { return pl::idx(t, 0); })},
       .out_specs = {BlockSpec({width}, [](Index) { return 0; })},
       .scratch_shapes = {ShapeDtype({width}, f32)},
       .name = "chain_last_step"});
  const ir::Kernel kernel = traced(call, {ShapeDtype({steps, width}, f32)});
  std::optional<ir::Kernel> looped = backend::chains_as_loops(kernel);
  ASSERT_TRUE(looped.has_value());
  EXPECT_THAT(ir::print(*looped), HasSubstr("if "));
  Array x = rng.normal({steps, width});
  const Array want = ref_f64({width}, [&](int64_t c) {
    double s = 0;
    for (int64_t t = 0; t < steps; ++t) s += x.get(t * width + c);
    return 2 * s + x.get((steps - 1) * width + c);
  });
  expect_runs_match(*looped, {x}, want, f32);
}

// A squeezed dimension that walks the axis (a recurrence over time steps, one row per program)
// becomes a dimension of the block, indexed by the loop.
TEST(ChainLoops, SqueezedStepDimensionBecomesABlockDimension) {
  Rng rng;
  const int64_t steps = 12, width = 32;
  auto call = pallas_call(
      [](Ref x, Ref h) {
        pl::when(pl::program_id(0) == 0, [&] { h[pl::all] = jnp::zeros({32}); });
        h[pl::all] = h[pl::all] * 0.75f + jnp::tanh(x[pl::all]);
      },
      ShapeDtype({width}, f32),
      {.grid = {steps},
       .dimension_semantics = {pl::arbitrary},
       .in_specs = {BlockSpec({pl::None, width}, [](Index t) { return pl::idx(t, 0); })},
       .out_specs = {BlockSpec({width}, [](Index) { return 0; })},
       .name = "chain_recurrence"});
  const ir::Kernel kernel = traced(call, {ShapeDtype({steps, width}, f32)});
  std::optional<ir::Kernel> looped = backend::chains_as_loops(kernel);
  ASSERT_TRUE(looped.has_value());
  EXPECT_THAT(ir::print(*looped), HasSubstr("ref x0: f32[12,32] in <- block (12, 32)"));
  Array x = rng.normal({steps, width});
  const Array want = ref_f64({width}, [&](int64_t c) {
    double h = 0;
    for (int64_t t = 0; t < steps; ++t) h = h * 0.75 + std::tanh(x.get(t * width + c));
    return h;
  });
  expect_runs_match(*looped, {x}, want, f32);
}

// Where a step reads what another step wrote through memory in a way a carry cannot hold, or the
// kernel reports program ids, the chain stays a chain.
TEST(ChainLoops, LeavesOtherChainsAsTheyAre) {
  const int64_t steps = 6, width = 16;
  const std::vector<ShapeDtype> in{ShapeDtype({steps, width}, f32)};
  // One row of x per step, one output block for the chain.
  const CallOptions row_chain{.grid = {steps},
                              .dimension_semantics = {pl::arbitrary},
                              .in_specs = {BlockSpec({pl::None, width}, [](Index t) { return pl::idx(t, 0); })},
                              .out_specs = {BlockSpec({width}, [](Index) { return 0; })}};
  // The output block moves with the step (a running sum written per step).
  auto moving = pallas_call([](Ref x, Ref out) { out[pl::all] = x[pl::all] * 2.0f; }, ShapeDtype({steps, width}, f32),
                            {.grid = {steps},
                             .dimension_semantics = {pl::arbitrary},
                             .in_specs = {BlockSpec({pl::None, width}, [](Index t) { return pl::idx(t, 0); })},
                             .out_specs = {BlockSpec({pl::None, width}, [](Index t) { return pl::idx(t, 0); })}});
  EXPECT_FALSE(backend::chains_as_loops(traced(moving, in)).has_value());
  // Part of the block written at each step.
  auto partial = pallas_call(
      [](Ref x, Ref out) {
        pl::when(pl::program_id(0) == 0, [&] { out[pl::all] = jnp::zeros({16}); });
        out(pl::ds(0, 8)) = out(pl::ds(0, 8)) + x(pl::ds(0, 8));
      },
      ShapeDtype({width}, f32), row_chain);
  EXPECT_FALSE(backend::chains_as_loops(traced(partial, in)).has_value());
  // Two sequential axes.
  auto two = pallas_call(
      [](Ref x, Ref out) {
        pl::when((pl::program_id(0) == 0) & (pl::program_id(1) == 0), [&] { out[pl::all] = jnp::zeros({16}); });
        out[pl::all] = out[pl::all] + x[pl::all];
      },
      ShapeDtype({width}, f32),
      {.grid = {steps, 2},
       .dimension_semantics = {pl::arbitrary, pl::arbitrary},
       .in_specs = {BlockSpec({pl::None, width}, [](Index t, Index) { return pl::idx(t, 0); })},
       .out_specs = {BlockSpec({width}, [](Index, Index) { return 0; })}});
  EXPECT_FALSE(backend::chains_as_loops(traced(two, in)).has_value());
  // debug_print reports program ids.
  auto printing = pallas_call(
      [](Ref x, Ref out) {
        pl::when(pl::program_id(0) == 0, [&] { out[pl::all] = jnp::zeros({16}); });
        pl::debug_print("step {}", pl::program_id(0));
        out[pl::all] = out[pl::all] + x[pl::all];
      },
      ShapeDtype({width}, f32), row_chain);
  const ir::Kernel printed = traced(printing, in);
  EXPECT_FALSE(backend::chains_as_loops(printed).has_value());
  // A checked run keeps the chain (its messages name the interpreter's programs and blocks).
  auto plain = pallas_call(
      [](Ref x, Ref out) {
        pl::when(pl::program_id(0) == 0, [&] { out[pl::all] = jnp::zeros({16}); });
        out[pl::all] = out[pl::all] + x[pl::all];
      },
      ShapeDtype({width}, f32), row_chain);
  const ir::Kernel summing = traced(plain, in);
  EXPECT_TRUE(backend::chains_as_loops(summing).has_value());
  EXPECT_EQ(ir::print(backend::kernel_for_codegen(summing, true)), ir::print(summing));
  EXPECT_NE(ir::print(backend::kernel_for_codegen(summing, false)), ir::print(summing));
}

}  // namespace
}  // namespace palladium::ktest
