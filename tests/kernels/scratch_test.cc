// scratch_shapes: per-program buffers after the outputs, kept through the programs of a chain
// along sequential axes (an accumulator through a reduction axis), dropped after the call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using ScratchTest = KernelTest;

// JAX's TPU matmul pattern: a float32 accumulator in scratch, the bfloat16 output written once at
// the last step of the reduction axis.
TEST_P(ScratchTest, AccumulatorThroughAnArbitraryAxis) {
  Rng rng;
  const int64_t m = 64, n = 32, k = 96, b = 16, nk = k / b;
  Array x = rng.normal({m, k}).astype(bf16), y = rng.normal({k, n}).astype(bf16);
  CallOptions o;
  o.grid = {m / b, n / b, nk};
  o.dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary};
  o.in_specs = {BlockSpec({b, b}, [](Index i, Index, Index kk) { return pl::idx(i, kk); }),
                BlockSpec({b, b}, [](Index, Index j, Index kk) { return pl::idx(kk, j); })};
  o.out_specs = {BlockSpec({b, b}, [](Index i, Index j, Index) { return pl::idx(i, j); })};
  o.scratch_shapes = {ShapeDtype({b, b}, f32)};
  o.name = "scratch_matmul";
  Array out = run1(
      [last = nk - 1](Ref xr, Ref yr, Ref out_ref, Ref acc) {
        pl::when(pl::program_id(2) == 0, [&] { acc[pl::all] = jnp::zeros({16, 16}); });
        acc[pl::all] = acc[pl::all] + jnp::dot(xr[pl::all], yr[pl::all]);
        pl::when(pl::program_id(2) == last, [&] { out_ref[pl::all] = Value(acc[pl::all]).astype(bf16); });
      },
      ShapeDtype({m, n}, bf16), o, {x, y});
  EXPECT_TRUE(matches(out, matmul(x.astype(f64), y.astype(f64)), bf16));
}

// A scratch buffer as a per-program temporary (every axis parallel), and two of them of other
// dtypes and ranks; under vmap each batch element gets its own.
TEST_P(ScratchTest, TemporariesAndVmap) {
  Rng rng;
  Array x = rng.normal({3, 40});
  CallOptions o;
  o.grid = {5};
  o.in_specs = {BlockSpec({8}, [](Index i) { return i; })};
  o.out_specs = {BlockSpec({8}, [](Index i) { return i; })};
  o.scratch_shapes = {ShapeDtype({8}, f32), ShapeDtype({}, i32)};
  o.name = "temps";
  auto kernel = [](Ref xr, Ref out_ref, Ref tmp, Ref count) {
    tmp[pl::all] = Value(xr[pl::all]) * 2.0f;
    count[pl::all] = pl::program_id(0) + 1;
    out_ref[pl::all] = Value(tmp[pl::all]) + Value(count[pl::all]).astype(f32);
  };
  Array out = run(
      [&](const std::string& be) {
        CallOptions c = o;
        c.backend = be;
        return pl::vmap(pallas_call(kernel, ShapeDtype({40}, f32), c));
      },
      {x}).at(0);
  EXPECT_TRUE(matches(out, ref_f64({3, 40}, [&](int64_t f) { return x.get(f) * 2.0 + static_cast<double>(f % 40 / 8 + 1); }), f32));
}

// run_scoped: a float32 accumulator for a K loop inside the kernel, and a second buffer beside a
// scratch_shapes one; run_scoped returns what its function returns.
TEST_P(ScratchTest, RunScopedAccumulatorAndReturnedValue) {
  Rng rng;
  const int64_t m = 48, n = 32, k = 64, b = 16;
  Array x = rng.normal({m, k}).astype(bf16), y = rng.normal({k, n}).astype(bf16);
  CallOptions o;
  o.grid = {m / b, n / b};
  o.in_specs = {BlockSpec({b, k}, [](Index i, Index) { return pl::idx(i, 0); }),
                BlockSpec({k, b}, [](Index, Index j) { return pl::idx(0, j); })};
  o.out_specs = {BlockSpec({b, b}, [](Index i, Index j) { return pl::idx(i, j); })};
  o.scratch_shapes = {ShapeDtype({}, f32)};
  o.name = "scoped_matmul";
  Array out = run1(
      [](Ref xr, Ref yr, Ref out_ref, Ref bias) {
        bias[pl::all] = jnp::full({}, 0.25, f32);
        Value sum = pl::run_scoped(
            [&](Ref acc) {
              acc[pl::all] = jnp::zeros({16, 16});
              pl::fori_loop(0, 4, [&](Value kk) {
                acc[pl::all] = acc[pl::all] + jnp::dot(xr(pl::slice(), pl::ds(kk * 16, 16)), yr(pl::ds(kk * 16, 16), pl::slice()));
              });
              return Value(acc[pl::all]);
            },
            ShapeDtype({16, 16}, f32));
        pl::run_scoped([&](pl::Refs r) {
          r[0][pl::all] = sum + Value(bias[pl::all]);
          r[1][pl::all] = pl::program_id(0);  // each program's own row block, read back below
          out_ref[pl::all] = (Value(r[0][pl::all]) + Value(r[1][pl::all]).astype(f32)).astype(bf16);
        }, {ShapeDtype({16, 16}, f32), ShapeDtype({}, i32)});
      },
      ShapeDtype({m, n}, bf16), o, {x, y});
  Array ref = matmul(x.astype(f64), y.astype(f64));
  for (int64_t i = 0; i < ref.size(); ++i) ref.set(i, ref.get(i) + 0.25 + static_cast<double>(i / n / b));
  EXPECT_TRUE(matches(out, ref, bf16));
}

// run_scoped inside a loop and inside a conditional: a per-iteration temporary (each iteration
// writes it before reading it) and a scope in one branch, per program.
TEST_P(ScratchTest, RunScopedInsideLoopsAndConditionals) {
  Rng rng;
  const int64_t rows = 4, n = 32;
  Array x = rng.normal({rows * 3, n});
  CallOptions o;
  o.grid = {3};
  o.in_specs = {BlockSpec({rows, n}, [](Index i) { return pl::idx(i, 0); })};
  o.out_specs = {BlockSpec({rows, n}, [](Index i) { return pl::idx(i, 0); })};
  o.name = "scoped_in_loops";
  Array out = run1(
      [](Ref xr, Ref out_ref) {
        pl::fori_loop(0, 4, [&](Value r) {
          pl::run_scoped(
              [&](Ref t) {
                t[pl::all] = Value(xr(pl::ds(r, 1), pl::slice())) * 3.0f;
                out_ref(pl::ds(r, 1), pl::slice()) = Value(t[pl::all]) + 1.0f;
              },
              ShapeDtype({1, 32}, f32));
        });
        pl::when(pl::program_id(0) == 1, [&] {
          pl::run_scoped(
              [&](Ref t) {
                t[pl::all] = Value(out_ref[pl::all]) * 2.0f;
                out_ref[pl::all] = t[pl::all];
              },
              ShapeDtype({4, 32}, f32));
        });
      },
      ShapeDtype({rows * 3, n}, f32), o, {x});
  EXPECT_TRUE(matches(out, ref_f64({rows * 3, n}, [&](int64_t f) {
                        const double v = x.get(f) * 3.0 + 1.0;
                        return f / n / rows == 1 ? v * 2.0 : v;
                      }), f32));
}

TEST(ScratchErrors, RunScopedOutsideAKernel) {
  PL_EXPECT_ERROR(pl::run_scoped([](Ref) {}, ShapeDtype({4}, f32)), "run_scoped: called outside a pallas_call kernel body");
}


TEST(ScratchErrors, RunScopedBuffersAreUninitialised) {
  // Named after the scratch_shapes buffers: s1 here.
  Array x = Rng().normal({8});
  CallOptions o{.scratch_shapes = {ShapeDtype({8}, f32)}, .name = "scoped_uninit", .backend = "interpret"};
  auto call = pallas_call([](Ref xr, Ref out_ref, Ref tmp) {
    tmp[pl::all] = xr[pl::all];
    pl::run_scoped([&](Ref t) { out_ref[pl::all] = Value(tmp[pl::all]) + Value(t[pl::all]); }, ShapeDtype({8}, f32));
  }, ShapeDtype({8}, f32), o);
  PL_EXPECT_ERROR(call(x), "reads element (0) of the selection in ref s1, output memory that nothing has written");
}

TEST(ScratchErrors, ScratchIsUninitialised) {
  Array x = Rng().normal({8});
  CallOptions o{.scratch_shapes = {ShapeDtype({8}, f32)}, .name = "uninit", .backend = "interpret"};
  auto call = pallas_call([](Ref xr, Ref out_ref, Ref tmp) { out_ref[pl::all] = Value(xr[pl::all]) + Value(tmp[pl::all]); },
                          ShapeDtype({8}, f32), o);
  PL_EXPECT_ERROR(call(x), "pallas_call 'uninit', program (), op 'load': reads element (0) of the selection in ref s0, "
                           "output memory that nothing has written");
}

TEST(ScratchErrors, KernelArityCountsScratch) {
  Array x = Rng().normal({8});
  CallOptions o{.scratch_shapes = {ShapeDtype({8}, f32)}, .name = "arity", .backend = "interpret"};
  auto call = pallas_call([](Ref xr, Ref out_ref) { out_ref[pl::all] = xr[pl::all]; }, ShapeDtype({8}, f32), o);
  PL_EXPECT_ERROR(call(x), "the kernel takes 2 Refs but the call passes 3 (1 inputs + 1 outputs + 1 scratch)");
}

PL_INSTANTIATE_BACKENDS(ScratchTest);

}  // namespace
}  // namespace palladium::ktest
