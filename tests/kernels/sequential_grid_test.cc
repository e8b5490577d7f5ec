// Sequential grid axes (CallOptions::dimension_semantics): programs that differ only along
// `arbitrary` axes run in grid order, so an output block may be accumulated along a reduction axis;
// the interpreter's race check allows exactly that, and every backend agrees with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using SequentialGridTest = KernelTest;
using ::testing::AllOf;
using ::testing::HasSubstr;

// JAX's Pallas matmul test pattern: a 3-D grid whose last axis walks the contraction, the output
// block initialised when program_id(2) == 0 and accumulated at every step.
auto accumulating_matmul(int64_t m, int64_t n, int64_t k, int64_t bm, int64_t bn, int64_t bk, std::vector<DimensionSemantics> sem) {
  CallOptions o;
  o.grid = {m / bm, n / bn, k / bk};
  o.in_specs = {BlockSpec({bm, bk}, [](Index i, Index, Index kk) { return pl::idx(i, kk); }),
                BlockSpec({bk, bn}, [](Index, Index j, Index kk) { return pl::idx(kk, j); })};
  o.out_specs = {BlockSpec({bm, bn}, [](Index i, Index j, Index) { return pl::idx(i, j); })};
  o.dimension_semantics = std::move(sem);
  o.name = "acc_matmul";
  auto kernel = [bm, bn](Ref x, Ref y, Ref out) {
    pl::when(pl::program_id(2) == 0, [&] { out[pl::all] = jnp::zeros({bm, bn}); });
    out[pl::all] = out[pl::all] + jnp::dot(x[pl::all], y[pl::all]);
  };
  return std::make_pair(kernel, o);
}

TEST_P(SequentialGridTest, MatmulAccumulatesAlongArbitraryReductionAxis) {
  Rng rng;
  const int64_t m = 64, n = 48, k = 80;
  Array x = rng.normal({m, k}), y = rng.normal({k, n});
  auto [kernel, options] = accumulating_matmul(m, n, k, 16, 16, 16, {pl::parallel, pl::parallel, pl::arbitrary});
  Array out = run1(kernel, ShapeDtype({m, n}, f32), options, {x, y});
  EXPECT_TRUE(matches(out, matmul(x.astype(f64), y.astype(f64)), f32));
}

// Several sequential axes, and a sequential axis that is not the last: programs (i, *, *) that
// share the parallel coordinate j run in row-major order over (i, kk).
TEST_P(SequentialGridTest, SeveralSequentialAxesInGridOrder) {
  Rng rng;
  const int64_t rows = 6, cols = 40, chunks = 5;
  Array x = rng.normal({rows, cols});
  CallOptions o;
  o.grid = {rows, cols / 8, chunks};  // (row, column block, sub-step): the order is checked below
  o.in_specs = {BlockSpec({pl::None, 8}, [](Index i, Index j, Index) { return pl::idx(i, j); })};
  o.out_specs = {BlockSpec({8}, [](Index, Index j, Index) { return j; }),
                 BlockSpec({8}, [](Index, Index j, Index) { return j; })};
  o.dimension_semantics = {pl::arbitrary, pl::parallel, pl::arbitrary};
  o.name = "order";
  // sum[j] = sum over rows of x[row, j] (each row added once, at sub-step 0); order[j] records
  // the visit order: it is multiplied by 7 and increased by the step at every program.
  auto outs = run_kernel(
      [](Ref x_ref, Ref sum, Ref order) {
        Value first = (pl::program_id(0) == 0) & (pl::program_id(2) == 0);
        pl::when(first, [&] {
          sum[pl::all] = jnp::zeros({8});
          order[pl::all] = jnp::zeros({8}, i32);
        });
        pl::when(pl::program_id(2) == 0, [&] { sum[pl::all] = sum[pl::all] + x_ref[pl::all]; });
        Value step = pl::program_id(0) * 5 + pl::program_id(2);
        order[pl::all] = (order[pl::all] * 7 + step) % 1000003;
      },
      {ShapeDtype({cols}, f32), ShapeDtype({cols}, i32)}, o, {x});
  Array want_sum = ref_f64({cols}, [&](int64_t c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += x.get(r * cols + c);
    return s;
  });
  int64_t h = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < chunks; ++s) h = (h * 7 + r * 5 + s) % 1000003;
  EXPECT_TRUE(matches(outs[0], want_sum, f32));
  EXPECT_TRUE(matches(outs[1], ref_int({cols}, i32, [&](int64_t) { return h; }), i32));
}

// vmap adds a parallel batch axis in front of the sequential one.
TEST_P(SequentialGridTest, VmapOfSequentialCall) {
  Rng rng;
  const int64_t b = 3, m = 32, n = 16, k = 48;
  Array x = rng.normal({b, m, k}), y = rng.normal({b, k, n});
  auto [kernel, options] = accumulating_matmul(m, n, k, 16, 16, 16, {pl::parallel, pl::parallel, pl::arbitrary});
  auto run_on = [&, kernel = kernel, options = options](const std::string& be) {
    CallOptions o = options;
    o.backend = be;
    return pl::vmap(pallas_call(kernel, ShapeDtype({m, n}, f32), o));
  };
  Array out = run(run_on, {x, y}).at(0);
  EXPECT_TRUE(matches(out, matmul(x.astype(f64), y.astype(f64)), f32));
}

// Without the arbitrary axis, the same kernel is a race between the programs of a reduction; the
// interpreter says so and names the option.
TEST(SequentialGridErrors, ReductionOverParallelAxisIsARace) {
  Rng rng;
  Array x = rng.normal({32, 32}), y = rng.normal({32, 32});
  auto [kernel, options] = accumulating_matmul(32, 32, 32, 16, 16, 16, {});
  options.backend = "interpret";
  auto call = pallas_call(kernel, ShapeDtype({32, 32}, f32), options);
  EXPECT_THAT(test_support::error_message([&] { call(x, y); }),
              AllOf(HasSubstr("pallas_call 'acc_matmul', program (0, 0, 1), op 'load': reads element (0, 0) of the "
                              "selection in ref o0, which program 0 (row-major linear id) wrote"),
                    HasSubstr("marked arbitrary in CallOptions::dimension_semantics")));
}

// Programs that differ along a parallel axis still may not share an element, even when another
// axis is sequential.
TEST(SequentialGridErrors, ParallelProgramsStillMayNotShareAnElement) {
  Rng rng;
  Array x = rng.normal({4, 8});
  CallOptions o;
  o.grid = {4, 2};
  o.in_specs = {BlockSpec({pl::None, 8}, [](Index i, Index) { return pl::idx(i, 0); })};
  o.out_specs = {BlockSpec({8}, [](Index, Index) { return 0; })};
  o.dimension_semantics = {pl::parallel, pl::arbitrary};
  o.name = "shared_out";
  o.backend = "interpret";
  auto call = pallas_call([](Ref x_ref, Ref out) { out[pl::all] = x_ref[pl::all]; }, ShapeDtype({8}, f32), o);
  EXPECT_THAT(test_support::error_message([&] { call(x); }),
              AllOf(HasSubstr("pallas_call 'shared_out', program (1, 0), op 'store': writes element (0) of the selection "
                              "in ref o0, which program 1 (row-major linear id) also wrote"),
                    HasSubstr("only programs that differ along sequential axes alone run in order")));
}

TEST(SequentialGridErrors, SemanticsMustMatchTheGridRank) {
  Array x = Rng().normal({32, 32});
  auto [kernel, options] = accumulating_matmul(32, 32, 32, 16, 16, 16, {pl::parallel, pl::arbitrary});
  options.backend = "interpret";
  auto call = pallas_call(kernel, ShapeDtype({32, 32}, f32), options);
  PL_EXPECT_ERROR(call(x, x), "pallas_call 'acc_matmul': dimension_semantics has 2 entries but the grid (2, 2, 2) has rank 3");
}

PL_INSTANTIATE_BACKENDS(SequentialGridTest);

}  // namespace
}  // namespace palladium::ktest
