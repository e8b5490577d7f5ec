// vmap of pallas_call callables (Pallas's batching rule: a new leading grid axis and a squeezed
// batch dimension) and the per-signature trace cache.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using VmapTest = KernelTest;

// Default in_axes: every input batched along axis 0; outputs batched along axis 0.
TEST_P(VmapTest, DefaultAxes) {
  Rng rng;
  Array x = rng.normal({4, 8}), y = rng.normal({4, 8});
  auto make = [](const std::string& be) {
    return pl::vmap(pl::pallas_call([](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] * y_ref[pl::all] + 1.0f; },
                                    ShapeDtype({8}, f32), {.name = "vmap_mul", .backend = be}));
  };
  Array o = run(make, {x, y}).at(0);
  EXPECT_TRUE(matches(o, ref_f64({4, 8}, [&](int64_t f) { return x.get(f) * y.get(f) + 1; }), f32));
}

// in_axes with an unbatched input (pl::None) and a batch axis that is not 0.
TEST_P(VmapTest, InAxesNoneAndNonZeroAxis) {
  Rng rng;
  Array x = rng.normal({8, 3, 16}), y = rng.normal({16});  // x batched along axis 1
  auto make = [](const std::string& be) {
    auto f = pl::pallas_call(
        [](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] + Value(y_ref[pl::all])(pl::None, pl::slice()) * 2.0f; },
        ShapeDtype({8, 16}, f32), {.name = "vmap_axes", .backend = be});
    return pl::vmap(f, {1, pl::None});
  };
  Array o = run(make, {x, y}).at(0);
  EXPECT_TRUE(matches(o, ref_f64({3, 8, 16}, [&](int64_t f) {
    auto k = unravel(f, {3, 8, 16});
    return x.get(ravel({k[1], k[0], k[2]}, {8, 3, 16})) + 2 * y.get(k[2]);
  }), f32));
}

// The inner kernel's own grid, program_id and num_programs are unchanged under vmap; its
// BlockSpecs gain the squeezed batch dimension.
TEST_P(VmapTest, GriddedKernelKeepsItsProgramIds) {
  Rng rng;
  Array x = rng.normal({2, 4, 8}), w = rng.normal({8, 6});
  auto make = [](const std::string& be) {
    auto f = pl::pallas_call(
        [](Ref x_ref, Ref w_ref, Ref o_ref) {
          Value row = x_ref[pl::all];  // (1, 8)
          o_ref[pl::all] = pl::dot(row, w_ref[pl::all]) + (pl::program_id(0) * 10 + pl::num_programs(0)).astype(f32);
        },
        ShapeDtype({4, 6}, f32),
        {.grid = {4},
         .in_specs = {BlockSpec({1, 8}, [](Index i) { return pl::idx(i, 0); }), BlockSpec()},
         .out_specs = {BlockSpec({1, 6}, [](Index i) { return pl::idx(i, 0); })},
         .name = "vmap_grid",
         .backend = be});
    return pl::vmap(f, {0, pl::None});
  };
  Array o = run(make, {x, w}).at(0);
  EXPECT_TRUE(matches(o, ref_f64({2, 4, 6}, [&](int64_t f) {
    auto k = unravel(f, {2, 4, 6});
    double acc = 0;
    for (int64_t p = 0; p < 8; ++p) acc += x.get(ravel({k[0], k[1], p}, {2, 4, 8})) * w.get(p * 6 + k[2]);
    return acc + static_cast<double>(k[1] * 10 + 4);
  }), f32));
}

// vmap of vmap: the outer batch is the first grid axis, the inner one the second; in_axes differ
// between levels.
TEST_P(VmapTest, NestedVmap) {
  Rng rng;
  Array x = rng.normal({3, 2, 8}), y = rng.normal({2, 8});
  auto make = [](const std::string& be) {
    auto f = pl::pallas_call(
        [](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] * y_ref[pl::all] - x_ref[pl::all].sum(); },
        ShapeDtype({8}, f32), {.name = "vmap_nested", .backend = be});
    auto g = pl::vmap(f, {0, pl::None});  // x (3, 8), y (8,) -> (3, 8)
    return pl::vmap(g, {1, 0});            // X (3, 2, 8), Y (2, 8) -> (2, 3, 8)
  };
  Array o = run(make, {x, y}).at(0);
  EXPECT_TRUE(matches(o, ref_f64({2, 3, 8}, [&](int64_t f) {
    auto k = unravel(f, {2, 3, 8});  // (b, a, c)
    double s = 0;
    for (int64_t c = 0; c < 8; ++c) s += x.get(ravel({k[1], k[0], c}, {3, 2, 8}));
    return x.get(ravel({k[1], k[0], k[2]}, {3, 2, 8})) * y.get(k[0] * 8 + k[2]) - s;
  }), f32));
}

// vmap of a call with several outputs: each output gains the batch dimension in front.
TEST_P(VmapTest, SeveralOutputs) {
  Rng rng;
  Array x = rng.normal({5, 6});
  auto make = [](const std::string& be) {
    auto f = pl::pallas_call(
        [](Ref x_ref, Ref s_ref, Ref d_ref) {
          s_ref[pl::all] = x_ref[pl::all].sum();
          d_ref[pl::all] = x_ref[pl::all] * 2.0f;
        },
        {ShapeDtype({}, f32), ShapeDtype({6}, f32)}, {.name = "vmap_outs", .backend = be});
    return pl::vmap(f);
  };
  auto outs = run(make, {x});
  EXPECT_TRUE(matches(outs[0], ref_f64({5}, [&](int64_t b) {
    double s = 0;
    for (int64_t c = 0; c < 6; ++c) s += x.get(b * 6 + c);
    return s;
  }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({5, 6}, [&](int64_t f) { return 2 * x.get(f); }), f32));
}

// vmap of a call whose output aliases an input batched along axis 0: each batch element updates
// its own slice in place.
TEST_P(VmapTest, AliasedInputBatchedAlongAxis0) {
  Rng rng;
  Array x = rng.normal({3, 8}), acc = rng.normal({3, 8});
  auto make = [](const std::string& be) {
    auto f = pl::pallas_call(
        [](Ref x_ref, Ref acc_ref, Ref o_ref) {
          (void)acc_ref;
          o_ref[pl::all] = o_ref[pl::all] * 2.0f + x_ref[pl::all];
        },
        ShapeDtype({8}, f32), {.input_output_aliases = {{1, 0}}, .name = "vmap_alias", .backend = be});
    return pl::vmap(f);
  };
  Array o = run(make, {x, acc}).at(0);
  EXPECT_TRUE(matches(o, ref_f64({3, 8}, [&](int64_t f) { return 2 * acc.get(f) + x.get(f); }), f32));
}

// A callable traces once per input signature (shapes and dtypes) and reuses the trace; lower()
// does not touch the cache.
TEST_P(VmapTest, TraceCaching) {
  Rng rng;
  auto f = pl::pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] + 1.0f; }, ShapeDtype({8}, f32),
                           {.name = "cached", .backend = backend_name()});
  EXPECT_EQ(f.trace_count(), 0);
  Array a = rng.normal({8}), b = rng.normal({8});
  EXPECT_TRUE(matches(f(a), ref_f64({8}, [&](int64_t i) { return a.get(i) + 1; }), f32));
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_TRUE(matches(f(b), ref_f64({8}, [&](int64_t i) { return b.get(i) + 1; }), f32));
  EXPECT_EQ(f.trace_count(), 1);
  (void)f.lower({ShapeDtype({8}, f32)});
  EXPECT_EQ(f.trace_count(), 1);
  // A new input shape (the output shape is fixed: the input is read whole and its first 8 used).
  auto g = pl::pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref(pl::ds(0, 8)).astype(f32) * 2.0f; },
                           ShapeDtype({8}, f32), {.name = "cached2", .backend = backend_name()});
  Array c16 = rng.normal({16}), c8 = rng.normal({8}), i8v = rng.values({8}, i32, -9, 9);
  g(c8);
  g(c8);
  EXPECT_EQ(g.trace_count(), 1);
  EXPECT_TRUE(matches(g(c16), ref_f64({8}, [&](int64_t i) { return 2 * c16.get(i); }), f32));
  EXPECT_EQ(g.trace_count(), 2);
  EXPECT_TRUE(matches(g(i8v), ref_f64({8}, [&](int64_t i) { return 2 * i8v.get(i); }), f32));  // new dtype
  EXPECT_EQ(g.trace_count(), 3);
  g(c16);
  g(c8);
  EXPECT_EQ(g.trace_count(), 3);
  // A vmapped callable caches per signature too.
  auto vg = pl::vmap(g);
  vg(rng.normal({3, 8}));
  vg(rng.normal({3, 8}));
  EXPECT_EQ(vg.trace_count(), 1);
  vg(rng.normal({5, 8}));
  EXPECT_EQ(vg.trace_count(), 2);
}

PL_INSTANTIATE_BACKENDS(VmapTest);

}  // namespace
}  // namespace palladium::ktest
