// Loads, stores and atomics indexed by integer tiles (Pallas's `x_ref[idx]` gathers, scatters and
// the histogram `atomic_add(h, [idx], ones)`): every backend against the interpreter and float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using GatherTest = KernelTest;

// A random permutation of [0, n) as int32 (Fisher-Yates on the test's numbers).
Array permutation(Rng& rng, int64_t n) {
  Array u = rng.values({n}, f64, 0.0, 1.0);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(static_cast<int64_t>(u.get(i) * static_cast<double>(i + 1)) % (i + 1))]);
  return ref_int({n}, i32, [&](int64_t i) { return p[static_cast<size_t>(i)]; });
}

// 1-D gather per program, a row gather through broadcast index tiles (an embedding lookup), and
// a scalar index beside a tile.
TEST_P(GatherTest, GathersFromTileIndices) {
  Rng rng;
  Array x = rng.normal({64}), idx = rng.values({4, 16}, i32, 0, 64), table = rng.normal({10, 16}),
        rows = rng.values({8}, i32, 0, 10);
  auto outs = run_kernel(
      [](Ref x_ref, Ref idx_ref, Ref table_ref, Ref rows_ref, Ref g, Ref emb, Ref col) {
        g[pl::all] = x_ref[Value(idx_ref[pl::all])];
        pl::when(pl::program_id(0) == 0, [&] {  // one program writes these (the others would race)
          Value r = Value(rows_ref[pl::all]).reshape({8, 1});
          Value c = jnp::iota(i32, {1, 16}, 1);
          emb[pl::all] = table_ref[pl::idx(r, c)];
          col[pl::all] = table_ref[pl::idx(3, Value(rows_ref[pl::all]))];  // row 3, columns rows[k]
        });
      },
      {ShapeDtype({4, 16}, f32), ShapeDtype({8, 16}, f32), ShapeDtype({8}, f32)},
      {.grid = {4},
       .in_specs = {BlockSpec(), BlockSpec({pl::None, 16}, [](Index i) { return pl::idx(i, 0); }), BlockSpec(), BlockSpec()},
       .out_specs = {BlockSpec({pl::None, 16}, [](Index i) { return pl::idx(i, 0); }),
                     BlockSpec({8, 16}, [](Index) { return pl::idx(0, 0); }), BlockSpec({8}, [](Index) { return 0; })},
       .name = "gathers"},
      {x, idx, table, rows});
  EXPECT_TRUE(matches(outs[0], ref_f64({4, 16}, [&](int64_t f) { return x.get(idx.get_int(f)); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({8, 16}, [&](int64_t f) { return table.get(rows.get_int(f / 16) * 16 + f % 16); }), f32));
  EXPECT_TRUE(matches(outs[2], ref_f64({8}, [&](int64_t k) { return table.get(3 * 16 + rows.get_int(k)); }), f32));
}

// A scatter through a permutation writes every element once; masked lanes of a gather may point
// anywhere (they are not read) and take `other`.
TEST_P(GatherTest, ScatterAndMaskedGather) {
  Rng rng;
  Array x = rng.normal({32}), perm = permutation(rng, 32), wild = rng.values({32}, i32, -1000, 1000);
  auto outs = run_kernel(
      [](Ref x_ref, Ref perm_ref, Ref wild_ref, Ref scattered, Ref masked) {
        Value p = perm_ref[pl::all];
        pl::store(scattered, pl::idx(p), x_ref[pl::all]);
        Value w = wild_ref[pl::all];
        Value ok = (w >= 0) & (w < 32);
        masked[pl::all] = pl::load(x_ref, pl::idx(jnp::where(ok, w, w)), ok, -7.0f);
      },
      {ShapeDtype({32}, f32), ShapeDtype({32}, f32)}, {.name = "scatter"}, {x, perm, wild});
  Array want(Shape{32}, f64);
  for (int64_t i = 0; i < 32; ++i) want.set(perm.get_int(i), x.get(i));
  EXPECT_TRUE(matches(outs[0], want, f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({32}, [&](int64_t i) {
    const int64_t w = wild.get_int(i);
    return w >= 0 && w < 32 ? x.get(w) : -7.0;
  }), f32));
}

// The histogram: every program adds ones at a tile of bins (repeats within a tile too).
TEST_P(GatherTest, HistogramWithTileAtomics) {
  Rng rng;
  Array data = rng.values({8, 64}, i32, 0, 10), zero = zeros({10}, i32);
  Array hist = run1(
      [](Ref data_ref, Ref, Ref h) { pl::atomic_add(h, pl::idx(Value(data_ref[pl::all])), jnp::ones({64}, i32)); },
      ShapeDtype({10}, i32),
      {.grid = {8}, .in_specs = {BlockSpec({pl::None, 64}, [](Index i) { return pl::idx(i, 0); }), BlockSpec()},
       .input_output_aliases = {{1, 0}}, .name = "histogram_tiles"},
      {data, zero});
  EXPECT_TRUE(matches(hist, ref_int({10}, i32, [&](int64_t b) {
    int64_t c = 0;
    for (int64_t i = 0; i < data.size(); ++i) c += data.get_int(i) == b;
    return c;
  }), i32));
}

TEST(GatherErrors, OutOfBoundsLaneSlicesBesideTilesAndFloatTiles) {
  Array x = Rng().normal({16}), y = Rng().normal({4, 16});
  auto run_interp = [](auto kernel, ShapeDtype out, const std::vector<Array>& in) {
    return test_support::error_message([&] { (void)pallas_call(kernel, out, {.name = "g", .backend = "interpret"}).call(in); });
  };
  EXPECT_THAT(run_interp([](Ref x_ref, Ref o) { o[pl::all] = x_ref[jnp::arange(8) * 3]; }, ShapeDtype({8}, f32), {x}),
              ::testing::HasSubstr("pallas_call 'g', program (), op 'load': index 18 is out of bounds for dimension 0 of ref x0 with shape (16,)"));
  EXPECT_THAT(run_interp([](Ref y_ref, Ref o) { o[pl::all] = y_ref[pl::idx(pl::slice(), jnp::arange(4))]; }, ShapeDtype({4, 4}, f32), {y}),
              ::testing::HasSubstr("dimension 0 of ref x0 is a slice beside integer-tile indices"));
  EXPECT_THAT(run_interp([](Ref x_ref, Ref o) { o[pl::all] = x_ref[jnp::zeros({8})]; }, ShapeDtype({8}, f32), {x}),
              ::testing::HasSubstr("index 0 of ref x0 must be an integer scalar or tile, got float32(8,)"));
}

PL_INSTANTIATE_BACKENDS(GatherTest);

}  // namespace
}  // namespace palladium::ktest
