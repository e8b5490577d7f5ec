// Grids and memory: program_id / num_programs, BlockSpecs (index maps, squeezed dimensions, edge
// blocks), masked loads and stores, pl::ds, Ref views, atomics, aliases and several outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"

namespace palladium::ktest {
namespace {

namespace jnp = palladium::jnp;
using GridTest = KernelTest;

// program_id and num_programs on grids of rank 1, 2 and 3 (row-major, last axis fastest).
TEST_P(GridTest, ProgramIdAndNumProgramsRank1To3) {
  Rng rng;
  {  // rank 1: one squeezed element per program
    Array x = rng.any({5}, i16).astype(i32);
    BlockSpec spec({pl::None}, [](Index i) { return i; });
    auto outs = run_kernel(
        [](Ref x_ref, Ref o, Ref n) {
          o[pl::all] = pl::program_id(0) * 1000 + x_ref[pl::all];
          n[pl::all] = pl::num_programs(0);
        },
        {ShapeDtype({5}, i32), ShapeDtype({5}, i32)}, {.grid = {5}, .in_specs = {spec}, .out_specs = {spec, spec}, .name = "pid1"},
        {x});
    EXPECT_TRUE(matches(outs[0], ref_int({5}, i32, [&](int64_t i) { return i * 1000 + x.get_int(i); }), i32));
    EXPECT_TRUE(matches(outs[1], ref_int({5}, i32, [](int64_t) { return 5; }), i32));
  }
  {  // rank 2: (2, 2) blocks of a (6, 8) array on a (3, 4) grid
    Array x = rng.any({6, 8}, i16).astype(i32);
    BlockSpec blocks({2, 2}, [](Index i, Index j) { return pl::idx(i, j); });
    BlockSpec one({pl::None, pl::None}, [](Index i, Index j) { return pl::idx(i, j); });
    auto outs = run_kernel(
        [](Ref x_ref, Ref o, Ref n) {
          o[pl::all] = x_ref[pl::all] + pl::program_id(0) * 100000 + pl::program_id(1) * 1000;
          n[pl::all] = pl::num_programs(0) * 10 + pl::num_programs(1);
        },
        {ShapeDtype({6, 8}, i32), ShapeDtype({3, 4}, i32)},
        {.grid = {3, 4}, .in_specs = {blocks}, .out_specs = {blocks, one}, .name = "pid2"}, {x});
    EXPECT_TRUE(matches(outs[0], ref_int({6, 8}, i32, [&](int64_t f) {
      return x.get_int(f) + (f / 8 / 2) * 100000 + (f % 8 / 2) * 1000;
    }), i32));
    EXPECT_TRUE(matches(outs[1], ref_int({3, 4}, i32, [](int64_t) { return 34; }), i32));
  }
  {  // rank 3: one squeezed element per program of a (2, 3, 4) grid
    Array x = rng.any({2, 3, 4}, i16).astype(i32);
    BlockSpec one({pl::None, pl::None, pl::None}, [](Index i, Index j, Index k) { return pl::idx(i, j, k); });
    auto outs = run_kernel(
        [](Ref x_ref, Ref o, Ref n) {
          o[pl::all] = x_ref[pl::all] + pl::program_id(0) * 1000000 + pl::program_id(1) * 10000 + pl::program_id(2) * 100;
          n[pl::all] = pl::num_programs(0) * 100 + pl::num_programs(1) * 10 + pl::num_programs(2);
        },
        {ShapeDtype({2, 3, 4}, i32), ShapeDtype({2, 3, 4}, i32)},
        {.grid = {2, 3, 4}, .in_specs = {one}, .out_specs = {one, one}, .name = "pid3"}, {x});
    EXPECT_TRUE(matches(outs[0], ref_int({2, 3, 4}, i32, [&](int64_t f) {
      auto k = unravel(f, {2, 3, 4});
      return x.get_int(f) + k[0] * 1000000 + k[1] * 10000 + k[2] * 100;
    }), i32));
    EXPECT_TRUE(matches(outs[1], ref_int({2, 3, 4}, i32, [](int64_t) { return 234; }), i32));
  }
}

// Index maps: swapped grid axes (a blockwise transpose), arithmetic on the indices (blocks in
// reverse order), and the other spellings of a map's result (a bare Value, a std::tuple, a
// std::vector of Values).
TEST_P(GridTest, IndexMaps) {
  Rng rng;
  Array x = rng.normal({24, 16}), y = rng.any({96}, i32), z = rng.normal({4, 6});
  auto outs = run_kernel(
      [](Ref x_ref, Ref y_ref, Ref z_ref, Ref t, Ref rev, Ref zz) {
        t[pl::all] = x_ref[pl::all].T();
        rev[pl::all] = y_ref[pl::all] * 2;
        zz[pl::all] = z_ref(0, pl::slice()) + pl::program_id(1).astype(f32);
      },
      {ShapeDtype({16, 24}, f32), ShapeDtype({96}, i32), ShapeDtype({6, 6}, f32)},
      {.grid = {2, 3},
       .in_specs = {BlockSpec({8, 8}, [](Index i, Index j) { return pl::idx(j, i); }),
                    BlockSpec({16}, [](Index i, Index j) { return 5 - (i * 3 + j); }),  // a bare Value
                    BlockSpec({2, 6}, [](Index i, Index j) { return std::tuple{(j + i) % 2, 0}; })},
       .out_specs = {BlockSpec({8, 8}, [](Index i, Index j) { return pl::idx(i, j); }),
                     BlockSpec({16}, [](Index i, Index j) { return i * 3 + j; }),
                     BlockSpec({pl::None, 6}, [](Index i, Index j) { return std::vector<Value>{i * 3 + j, Value(0)}; })},
       .name = "index_maps"},
      {x, y, z});
  EXPECT_TRUE(matches(outs[0], ref_f64({16, 24}, [&](int64_t f) { return x.get((f % 24) * 16 + f / 24); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_int({96}, i32, [&](int64_t f) { return 2 * y.get_int((5 - f / 16) * 16 + f % 16); }), i32));
  EXPECT_TRUE(matches(outs[2], ref_f64({6, 6}, [&](int64_t f) {
    const int64_t r = f / 6, c = f % 6, i = r / 3, j = r % 3;
    return z.get(((j + i) % 2) * 2 * 6 + c) + static_cast<double>(j);
  }), f32));
}

// Squeezed dimensions (pl::None) in front and in the middle are dropped from the kernel's Ref;
// their index_map entry is an element index.
TEST_P(GridTest, SqueezedDimensions) {
  Rng rng;
  Array x = rng.normal({4, 16, 8}), y = rng.normal({16, 4, 8});
  auto shapes = std::make_shared<std::vector<Shape>>();
  auto outs = run_kernel(
      [shapes](Ref x_ref, Ref y_ref, Ref o1, Ref o2) {
        *shapes = {x_ref.shape(), y_ref.shape(), o1.shape(), o2.shape()};
        o1[pl::all] = x_ref[pl::all].sum(0);
        o2[pl::all] = y_ref[pl::all] * 2.0f;
      },
      {ShapeDtype({4, 8}, f32), ShapeDtype({4, 16, 8}, f32)},
      {.grid = {4},
       .in_specs = {BlockSpec({pl::None, 16, 8}, [](Index i) { return pl::idx(i, 0, 0); }),
                    BlockSpec({16, pl::None, 8}, [](Index i) { return pl::idx(0, i, 0); })},
       .out_specs = {BlockSpec({pl::None, 8}, [](Index i) { return pl::idx(i, 0); }),
                     BlockSpec({pl::None, 16, 8}, [](Index i) { return pl::idx(i, 0, 0); })},
       .name = "squeezed"},
      {x, y});
  EXPECT_EQ(*shapes, (std::vector<Shape>{{16, 8}, {16, 8}, {8}, {16, 8}}));
  EXPECT_TRUE(matches(outs[0], ref_f64({4, 8}, [&](int64_t f) {
    double acc = 0;
    for (int64_t r = 0; r < 16; ++r) acc += x.get(((f / 8) * 16 + r) * 8 + f % 8);
    return acc;
  }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({4, 16, 8}, [&](int64_t f) {
    auto k = unravel(f, {4, 16, 8});
    return 2 * y.get(ravel({k[1], k[0], k[2]}, {16, 4, 8}));
  }), f32));
}

// A block shape without an index map, and whole-array specs (omitted) beside blocked ones.
TEST_P(GridTest, SpecsWithoutIndexMap) {
  Rng rng;
  Array x = rng.normal({8, 8}), b = rng.normal({8});
  Array o = run1(
      [](Ref x_ref, Ref b_ref, Ref o_ref) {
        o_ref[pl::all] = x_ref[pl::all] + Value(b_ref[pl::all])(pl::None, pl::slice()) + pl::program_id(0).astype(f32);
      },
      ShapeDtype({12, 8}, f32),
      {.grid = {3},
       .in_specs = {BlockSpec(std::vector<BlockDim>{4, 8}), BlockSpec()},
       .out_specs = {BlockSpec({4, 8}, [](Index i) { return pl::idx(i, 0); })},
       .name = "no_index_map"},
      {x, b});
  EXPECT_TRUE(matches(o, ref_f64({12, 8}, [&](int64_t f) {
    const int64_t r = f / 8, c = f % 8;
    return x.get((r % 4) * 8 + c) + b.get(c) + static_cast<double>(r / 4);
  }), f32));
}

// Edge blocks overhang the array: loads there read padding, stores there are dropped, and the
// part inside is correct.
TEST_P(GridTest, EdgeBlocksOverhang) {
  Rng rng;
  Array x = rng.normal({10, 13});
  BlockSpec spec({4, 8}, [](Index i, Index j) { return pl::idx(i, j); });
  Array o = run1([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] * 2.0f + 1.0f; }, ShapeDtype({10, 13}, f32),
                 {.grid = {cdiv(10, 4), cdiv(13, 8)}, .in_specs = {spec}, .out_specs = {spec}, .name = "edge"}, {x});
  EXPECT_TRUE(matches(o, ref_f64({10, 13}, [&](int64_t f) { return 2 * x.get(f) + 1; }), f32));
}

// Edge blocks through a dot: padding rows of x poison only the padding rows of the product, which
// the store drops.
TEST_P(GridTest, EdgeBlocksThroughADot) {
  Rng rng;
  Array x = rng.normal({10, 8}), w = rng.normal({8, 6});
  BlockSpec rows({4, 8}, [](Index i) { return pl::idx(i, 0); });
  Array o = run1([](Ref x_ref, Ref w_ref, Ref o_ref) { o_ref[pl::all] = pl::dot(x_ref[pl::all], w_ref[pl::all]) + 1.0f; },
                 ShapeDtype({10, 6}, f32),
                 {.grid = {3}, .in_specs = {rows, BlockSpec()}, .out_specs = {BlockSpec({4, 6}, [](Index i) { return pl::idx(i, 0); })},
                  .name = "edge_dot"},
                 {x, w});
  EXPECT_TRUE(matches(o, ref_f64({10, 6}, [&](int64_t f) {
    double acc = 1;
    for (int64_t p = 0; p < 8; ++p) acc += x.get((f / 6) * 8 + p) * w.get(p * 6 + f % 6);
    return acc;
  }), f32));
}

// The Pallas/Triton idiom for ragged sizes: a masked load with `other` over a whole-array ref, and
// a 2-D mask broadcast from a column of booleans.
TEST_P(GridTest, MaskedLoadWithOther) {
  Rng rng;
  constexpr int64_t n = 37, block = 16;
  Array x = rng.normal({n});
  Array m = rng.normal({6, 5}), keep = rng.values({6, 1}, bool_, 0, 2);
  auto outs = run_kernel(
      [](Ref x_ref, Ref m_ref, Ref keep_ref, Ref sums, Ref masked) {
        Value pid = pl::program_id(0);
        Value offs = pid * block + jnp::arange(block);
        Value v = pl::load(x_ref, pl::idx(pl::ds(pid * block, block)), offs < n, Value(0.0f));
        sums[pl::all] = v.sum();
        pl::when(pid == 0, [&] { masked[pl::all] = pl::load(m_ref, pl::idx(pl::all), keep_ref[pl::all], Value(-1.0f)); });
      },
      {ShapeDtype({cdiv(n, block)}, f32), ShapeDtype({6, 5}, f32)},
      {.grid = {cdiv(n, block)},
       .out_specs = {BlockSpec({pl::None}, [](Index i) { return i; }), BlockSpec()},
       .name = "masked_load"},
      {x, m, keep});
  EXPECT_TRUE(matches(outs[0], ref_f64({3}, [&](int64_t p) {
    double acc = 0;
    for (int64_t i = p * block; i < std::min(n, (p + 1) * block); ++i) acc += x.get(i);
    return acc;
  }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({6, 5}, [&](int64_t f) { return keep.get_int(f / 5) ? m.get(f) : -1.0; }), f32));
}

// Masked stores write only where the mask holds; the output aliases an input so that the rest of
// it keeps the input's values.
TEST_P(GridTest, MaskedStore) {
  Rng rng;
  Array x = rng.normal({4, 16}), init = rng.normal({4, 16});
  BlockSpec row({pl::None, 16}, [](Index i) { return pl::idx(i, 0); });
  Array o = run1(
      [](Ref x_ref, Ref init_ref, Ref o_ref) {
        (void)init_ref;
        Value v = x_ref[pl::all];
        pl::store(o_ref, pl::idx(pl::all), v * 10.0f, v > 0);
      },
      ShapeDtype({4, 16}, f32),
      {.grid = {4}, .in_specs = {row, row}, .out_specs = {row}, .input_output_aliases = {{1, 0}}, .name = "masked_store"},
      {x, init});
  EXPECT_TRUE(matches(o, ref_f64({4, 16}, [&](int64_t f) { return x.get(f) > 0 ? 10 * x.get(f) : init.get(f); }), f32));
}

// pl::ds with traced starts and static strides, static strided slices and negative indices.
TEST_P(GridTest, DynamicSlices) {
  Rng rng;
  Array x = rng.normal({64}), y = rng.any({8, 32}, i32), z = rng.normal({9, 10});
  auto outs = run_kernel(
      [](Ref x_ref, Ref y_ref, Ref z_ref, Ref odd, Ref rows, Ref strided, Ref last) {
        Value pid = pl::program_id(0);
        odd[pl::all] = x_ref(pl::ds(pid * 16 + 1, 8, 2));                    // x[16p+1 : 16p+17 : 2]
        rows[pl::all] = y_ref(pl::ds(pid, 4, 2), pl::ds(pid * 16, 16));      // rows p, p+2, p+4, p+6
        strided[pl::all] = z_ref(pl::slice(1, 9, 3), pl::slice(0, 10, 4));   // rows 1,4,7; cols 0,4,8
        last[pl::all] = z_ref(-1, pl::slice(2, -1));                         // z[-1, 2:-1]
      },
      {ShapeDtype({16}, f32), ShapeDtype({2, 4, 16}, i32), ShapeDtype({2, 3, 3}, f32), ShapeDtype({2, 7}, f32)},
      {.grid = {2},
       .out_specs = {BlockSpec({8}, [](Index i) { return i; }),
                     BlockSpec({pl::None, 4, 16}, [](Index i) { return pl::idx(i, 0, 0); }),
                     BlockSpec({pl::None, 3, 3}, [](Index i) { return pl::idx(i, 0, 0); }),
                     BlockSpec({pl::None, 7}, [](Index i) { return pl::idx(i, 0); })},
       .name = "ds"},
      {x, y, z});
  EXPECT_TRUE(matches(outs[0], ref_f64({16}, [&](int64_t f) { return x.get((f / 8) * 16 + 1 + 2 * (f % 8)); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_int({2, 4, 16}, i32, [&](int64_t f) {
    auto k = unravel(f, {2, 4, 16});
    return y.get_int((k[0] + 2 * k[1]) * 32 + k[0] * 16 + k[2]);
  }), i32));
  EXPECT_TRUE(matches(outs[2], ref_f64({2, 3, 3}, [&](int64_t f) {
    auto k = unravel(f, {2, 3, 3});
    return z.get((1 + 3 * k[1]) * 10 + 4 * k[2]);
  }), f32));
  EXPECT_TRUE(matches(outs[3], ref_f64({2, 7}, [&](int64_t f) { return z.get(8 * 10 + 2 + f % 7); }), f32));
}

// Ref views (ref.at[...]): a traced window with a strided column view, a view of a view, a scalar
// index that drops a dimension, and stores through views.
TEST_P(GridTest, RefViews) {
  Rng rng;
  Array x = rng.normal({16, 12}), w = rng.normal({5, 4, 3});
  auto outs = run_kernel(
      [](Ref x_ref, Ref w_ref, Ref o_ref, Ref p_ref) {
        Value pid = pl::program_id(0);
        Ref v = x_ref.at(pl::ds(pid * 8, 8), pl::slice(0, 12, 2));  // (8, 6): x[8p + r, 2c]
        Ref inner = v.at(pl::slice(2, 6));                           // (4, 6): x[8p + 2 + r, 2c]
        Value row0 = v(0, pl::slice());                              // (6,)
        Ref top = o_ref.at(pl::slice(0, 2)), bottom = o_ref.at(pl::slice(2, 4));
        top[pl::all] = inner.at(pl::slice(0, 2))[pl::all] + row0(pl::None, pl::slice());
        bottom[pl::all] = inner.at(pl::slice(2, 4))[pl::all] * 2.0f + Value(v(pl::slice(0, 8, 4), 1))(pl::slice(), pl::None);
        Ref plane = w_ref.at(pid + 1);                               // (4, 3): w[p + 1]
        Ref col = plane.at(pl::slice(), 2);                          // (4,):   w[p + 1, :, 2]
        p_ref[pl::all] = col[pl::all] + Value(plane(pl::ds(pid, 1), 0)).broadcast_to({4});
      },
      {ShapeDtype({2, 4, 6}, f32), ShapeDtype({2, 4}, f32)},
      {.grid = {2},
       .out_specs = {BlockSpec({pl::None, 4, 6}, [](Index i) { return pl::idx(i, 0, 0); }),
                     BlockSpec({pl::None, 4}, [](Index i) { return pl::idx(i, 0); })},
       .name = "views"},
      {x, w});
  EXPECT_TRUE(matches(outs[0], ref_f64({2, 4, 6}, [&](int64_t f) {
    auto k = unravel(f, {2, 4, 6});
    const int64_t p = k[0], r = k[1], c = k[2];
    auto X = [&](int64_t row, int64_t col) { return x.get(row * 12 + col); };
    if (r < 2) return X(8 * p + 2 + r, 2 * c) + X(8 * p, 2 * c);
    return 2 * X(8 * p + 2 + r, 2 * c) + X(8 * p + 4 * (r - 2), 2);
  }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({2, 4}, [&](int64_t f) {
    const int64_t p = f / 4, r = f % 4;
    return w.get(((p + 1) * 4 + r) * 3 + 2) + w.get(((p + 1) * 4 + p) * 3 + 0);
  }), f32));
}

// Atomics from every program into one output, which aliases an initialised input; int32 results
// are exact, float32 sums may come in any order.
TEST_P(GridTest, AtomicsFromManyPrograms) {
  Rng rng;
  Array x = rng.values({16, 8}, i32, -1000, 1000), f = rng.normal({16, 8});
  Array init_add = rng.values({8}, i32, -1000, 1000), init_max = rng.values({8}, i32, -1000, 1000),
        init_min = rng.values({8}, i32, -1000, 1000), init_f = rng.normal({8});
  BlockSpec row({pl::None, 8}, [](Index i) { return pl::idx(i, 0); });
  auto outs = run_kernel(
      [](Ref x_ref, Ref f_ref, Ref, Ref, Ref, Ref, Ref add, Ref mx, Ref mn, Ref fadd) {
        Value v = x_ref[pl::all];
        pl::atomic_add(add, pl::idx(pl::all), v);
        pl::atomic_max(mx, pl::idx(pl::all), v);
        pl::atomic_min(mn, pl::idx(pl::all), v);
        pl::atomic_add(fadd, pl::idx(pl::all), f_ref[pl::all]);
      },
      {ShapeDtype({8}, i32), ShapeDtype({8}, i32), ShapeDtype({8}, i32), ShapeDtype({8}, f32)},
      {.grid = {16},
       .in_specs = {row, row, BlockSpec(), BlockSpec(), BlockSpec(), BlockSpec()},
       .input_output_aliases = {{2, 0}, {3, 1}, {4, 2}, {5, 3}},
       .name = "atomics"},
      {x, f, init_add, init_max, init_min, init_f});
  auto col = [&](const Array& a, int64_t c, auto op, double start) {
    double acc = start;
    for (int64_t r = 0; r < 16; ++r) acc = op(acc, a.get(r * 8 + c));
    return acc;
  };
  auto plus = [](double a, double b) { return a + b; };
  auto mx = [](double a, double b) { return std::max(a, b); };
  auto mn = [](double a, double b) { return std::min(a, b); };
  EXPECT_TRUE(matches(outs[0], ref_f64({8}, [&](int64_t c) { return col(x, c, plus, init_add.get(c)); }), i32));
  EXPECT_TRUE(matches(outs[1], ref_f64({8}, [&](int64_t c) { return col(x, c, mx, init_max.get(c)); }), i32));
  EXPECT_TRUE(matches(outs[2], ref_f64({8}, [&](int64_t c) { return col(x, c, mn, init_min.get(c)); }), i32));
  EXPECT_TRUE(matches(outs[3], ref_f64({8}, [&](int64_t c) { return col(f, c, plus, init_f.get(c)); }), f32));
}

// A histogram: each program adds 1 at an index loaded from the data; and atomics return the old
// values (one program, so the order is fixed), honouring a mask.
TEST_P(GridTest, AtomicHistogramAndOldValues) {
  Rng rng;
  Array bins = rng.values({64}, i32, 0, 8), zero = zeros({8}, i32);
  Array hist = run1(
      [](Ref bins_ref, Ref, Ref o) { pl::atomic_add(o, pl::idx(Value(bins_ref[pl::all])), 1); }, ShapeDtype({8}, i32),
      {.grid = {64},
       .in_specs = {BlockSpec({pl::None}, [](Index i) { return i; }), BlockSpec()},
       .input_output_aliases = {{1, 0}},
       .name = "histogram"},
      {bins, zero});
  EXPECT_TRUE(matches(hist, ref_int({8}, i32, [&](int64_t b) {
    int64_t c = 0;
    for (int64_t i = 0; i < 64; ++i) c += bins.get_int(i) == b;
    return c;
  }), i32));

  Array init = rng.normal({16}), v = rng.normal({16});
  auto outs = run_kernel(
      [](Ref init_ref, Ref v_ref, Ref o, Ref old) {
        (void)init_ref;
        Value val = v_ref[pl::all];
        old[pl::all] = pl::atomic_max(o, pl::idx(pl::all), val, val > 0);
      },
      {ShapeDtype({16}, f32), ShapeDtype({16}, f32)}, {.input_output_aliases = {{0, 0}}, .name = "atomic_old"}, {init, v});
  EXPECT_TRUE(matches(outs[0], ref_f64({16}, [&](int64_t i) {
    return v.get(i) > 0 ? std::max(init.get(i), v.get(i)) : init.get(i);
  }), f32));
  for (int64_t i = 0; i < 16; ++i) {  // masked-off lanes of the result are unspecified
    if (v.get(i) > 0) { EXPECT_EQ(outs[1].get(i), init.get(i)) << i; }
  }
}

// atomic_and / or / xor from every program (order-free results) on int32, uint32 and int64; and
// atomic_xchg / atomic_cas along a sequential axis, where the order is the grid's: each program
// exchanges in its id and sees the previous one's; the first compare-and-swap from -1 wins.
TEST_P(GridTest, BitwiseExchangeAndCompareAndSwap) {
  Rng rng;
  for (DType t : {i32, u32, i64}) {
    SCOPED_TRACE(dtype_name(t));
    Array x = rng.values({16, 8}, t, 0, 1 << 20), init = rng.values({3, 8}, t, 0, 1 << 20);
    BlockSpec row({pl::None, 8}, [](Index i) { return pl::idx(i, 0); });
    BlockSpec line({pl::None, 8}, [](Index) { return pl::idx(0, 0); });
    auto outs = run_kernel(
        [](Ref x_ref, Ref, Ref, Ref, Ref a, Ref o, Ref e) {
          Value v = x_ref[pl::all];
          pl::atomic_and(a, pl::idx(pl::all), v);
          pl::atomic_or(o, pl::idx(pl::all), v);
          pl::atomic_xor(e, pl::idx(pl::all), v);
        },
        {ShapeDtype({1, 8}, t), ShapeDtype({1, 8}, t), ShapeDtype({1, 8}, t)},
        {.grid = {16}, .in_specs = {row, line, line, line}, .out_specs = {line, line, line},
         .input_output_aliases = {{1, 0}, {2, 1}, {3, 2}}, .name = "bitwise_atomics"},
        {x, take(init, 0).reshape({1, 8}), take(init, 1).reshape({1, 8}), take(init, 2).reshape({1, 8})});
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(matches(outs[static_cast<size_t>(k)], ref_int({1, 8}, t, [&](int64_t c) {
        int64_t acc = init.get_int(k * 8 + c);
        for (int64_t r = 0; r < 16; ++r) {
          const int64_t v = x.get_int(r * 8 + c);
          acc = k == 0 ? (acc & v) : k == 1 ? (acc | v) : (acc ^ v);
        }
        return acc;
      }), t)) << "op " << k;
    }
  }
  Array minus_one = full({8}, -1.0, i32);
  auto outs = run_kernel(
      [](Ref, Ref slots, Ref last, Ref seen, Ref won) {
        Value pid = pl::program_id(0);
        pl::when(pid == 0, [&] { last[pl::all] = jnp::zeros({8}, i32) - 5; });
        seen[pl::all] = pl::atomic_xchg(last, pl::idx(pl::all), jnp::zeros({8}, i32) + pid);
        won[pl::all] = pl::atomic_cas(slots, pl::idx(pl::all), jnp::zeros({8}, i32) - 1, jnp::zeros({8}, i32) + pid * 10);
      },
      {ShapeDtype({8}, i32), ShapeDtype({8}, i32), ShapeDtype({6, 8}, i32), ShapeDtype({6, 8}, i32)},
      {.grid = {6}, .dimension_semantics = {pl::arbitrary},
       .out_specs = {BlockSpec(), BlockSpec(), BlockSpec({pl::None, 8}, [](Index i) { return pl::idx(i, 0); }),
                     BlockSpec({pl::None, 8}, [](Index i) { return pl::idx(i, 0); })},
       .input_output_aliases = {{0, 0}}, .name = "xchg_cas"},
      {minus_one});
  EXPECT_TRUE(matches(outs[0], ref_int({8}, i32, [](int64_t) { return 0; }), i32));   // program 0 claimed every slot
  EXPECT_TRUE(matches(outs[1], ref_int({8}, i32, [](int64_t) { return 5; }), i32));   // the last exchange
  EXPECT_TRUE(matches(outs[2], ref_int({6, 8}, i32, [](int64_t f) { return f / 8 == 0 ? -5 : f / 8 - 1; }), i32));
  EXPECT_TRUE(matches(outs[3], ref_int({6, 8}, i32, [](int64_t f) { return f / 8 == 0 ? -1 : 0; }), i32));
}

TEST(GridErrors, AtomicDtypeRules) {
  Array f = Rng().normal({8}), i = zeros({8}, i32);
  auto message = [](auto kernel, const Array& x) {
    return test_support::error_message([&] {
      pallas_call(kernel, ShapeDtype({8}, x.dtype()), {.input_output_aliases = {{0, 0}}, .name = "atom", .backend = "interpret"})(x);
    });
  };
  EXPECT_NE(message([](Ref, Ref o) { pl::atomic_or(o, pl::idx(pl::all), jnp::zeros({8})); }, f)
                .find("op 'atomic_or': takes integer refs, not float32"),
            std::string::npos);
  EXPECT_NE(message([](Ref, Ref o) { pl::atomic_cas(o, pl::idx(pl::all), jnp::zeros({8}), jnp::zeros({8})); }, f)
                .find("op 'atomic_cas': takes 32- and 64-bit integer refs, not float32"),
            std::string::npos);
  EXPECT_NE(message([](Ref, Ref o) { pl::atomic_cas(o, pl::idx(pl::all), jnp::zeros({8}), jnp::zeros({8}, i32)); }, i)
                .find("value of dtype float32 does not match ref o0 of dtype int32"),
            std::string::npos);
}

// input_output_aliases: the output starts as the aliased input and is updated in place; the
// caller's input Array is not modified.
TEST_P(GridTest, InputOutputAliases) {
  Rng rng;
  Array acc = rng.normal({4, 8}), x = rng.normal({4, 8});
  Array acc_before = acc.copy();
  BlockSpec row({pl::None, 8}, [](Index i) { return pl::idx(i, 0); });
  Array o = run1([](Ref x_ref, Ref acc_ref, Ref o_ref) {
        (void)acc_ref;
        o_ref[pl::all] = o_ref[pl::all] * 0.5f + x_ref[pl::all];
      },
                 ShapeDtype({4, 8}, f32),
                 {.grid = {4}, .in_specs = {row, row}, .out_specs = {row}, .input_output_aliases = {{1, 0}}, .name = "inplace"},
                 {x, acc});
  EXPECT_TRUE(matches(o, ref_f64({4, 8}, [&](int64_t f) { return 0.5 * acc.get(f) + x.get(f); }), f32));
  EXPECT_TRUE(exactly_equal(acc, acc_before));
}

// Several outputs of different shapes, dtypes and block specs.
TEST_P(GridTest, SeveralOutputs) {
  Rng rng;
  Array x = rng.normal({8, 16}), y = rng.normal({8, 16});
  BlockSpec rows({4, 16}, [](Index i) { return pl::idx(i, 0); });
  auto outs = run_kernel(
      [](Ref x_ref, Ref y_ref, Ref sum, Ref rounded, Ref rowmax) {
        Value a = x_ref[pl::all], b = y_ref[pl::all];
        sum[pl::all] = a + b;
        rounded[pl::all] = jnp::floor(a * 10.0f).astype(i32);
        rowmax[pl::all] = jnp::maximum(a, b).max(1);
      },
      {ShapeDtype({8, 16}, f32), ShapeDtype({8, 16}, i32), ShapeDtype({8}, f32)},
      {.grid = {2},
       .in_specs = {rows, rows},
       .out_specs = {rows, rows, BlockSpec({4}, [](Index i) { return i; })},
       .name = "several_outputs"},
      {x, y});
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_TRUE(matches(outs[0], ref_f64({8, 16}, [&](int64_t f) { return x.get(f) + y.get(f); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_int({8, 16}, i32, [&](int64_t f) {
    return static_cast<int64_t>(std::floor(static_cast<double>(static_cast<float>(x.get(f) * 10.0))));
  }), i32));
  EXPECT_TRUE(matches(outs[2], ref_f64({8}, [&](int64_t r) {
    double m = -INFINITY;
    for (int64_t c = 0; c < 16; ++c) m = std::max({m, x.get(r * 16 + c), y.get(r * 16 + c)});
    return m;
  }), f32));
}

// Pallas's None input: an undefined Array gives the kernel a Ref that tests false.
TEST_P(GridTest, NoneInput) {
  Rng rng;
  Array x = rng.normal({8}), bias = rng.normal({8});
  auto make = [](const std::string& be) {
    return pl::pallas_call(
        [](Ref x_ref, Ref bias_ref, Ref o_ref) {
          Value v = x_ref[pl::all];
          if (bias_ref) v = v + bias_ref[pl::all];
          o_ref[pl::all] = v * 3.0f;
        },
        ShapeDtype({8}, f32), {.name = "none_input", .backend = be});
  };
  Array with = run(make, {x, bias}).at(0), without = run(make, {x, Array()}).at(0);
  EXPECT_TRUE(matches(with, ref_f64({8}, [&](int64_t i) { return 3 * (x.get(i) + bias.get(i)); }), f32));
  EXPECT_TRUE(matches(without, ref_f64({8}, [&](int64_t i) { return 3 * x.get(i); }), f32));
}

// pl::swap returns the old values and stores the new (masked: only where the mask holds); the
// hints multiple_of / max_contiguous return their operand.
TEST_P(GridTest, SwapAndHints) {
  Rng rng;
  Array x = rng.normal({16}), y = rng.normal({16});
  auto outs = run_kernel(
      [](Ref x_ref, Ref y_ref, Ref o, Ref old) {
        o[pl::all] = x_ref[pl::all];
        Value start = pl::multiple_of(pl::program_id(0) * 8, 8);
        Value k = pl::max_contiguous(jnp::arange(8), 8);
        Value was = pl::swap(o, pl::idx(pl::ds(0, 8)), Value(y_ref(pl::ds(0, 8))), k < 6);
        old[pl::all] = jnp::where(k < 6, was, -1.0f);  // masked-off lanes of `was` are poison
        (void)start;
      },
      {ShapeDtype({16}, f32), ShapeDtype({16}, f32)},
      {.grid = {2}, .in_specs = {BlockSpec({8}, [](Index i) { return i; }), BlockSpec({8}, [](Index i) { return i; })},
       .out_specs = {BlockSpec({8}, [](Index i) { return i; }), BlockSpec({8}, [](Index i) { return i; })}, .name = "swap"},
      {x, y});
  EXPECT_TRUE(matches(outs[0], ref_f64({16}, [&](int64_t f) { return f % 8 < 6 ? y.get(f) : x.get(f); }), f32));
  EXPECT_TRUE(matches(outs[1], ref_f64({16}, [&](int64_t f) { return f % 8 < 6 ? x.get(f) : -1.0; }), f32));
}

TEST(GridErrors, HintsNeedAPositiveCountAndIntegers) {
  auto call = [](auto body) {
    return test_support::error_message([&] {
      pallas_call([&](Ref o) { o[pl::all] = body(); }, ShapeDtype({}, i32), {.name = "hint", .backend = "interpret"})();
    });
  };
  EXPECT_NE(call([] { return pl::multiple_of(jnp::zeros({}, i32), 0); }).find("op 'multiple_of': n must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(call([] { return pl::max_contiguous(jnp::zeros({}), 4).astype(i32); })
                .find("op 'max_contiguous': takes an integer Value, got float32"),
            std::string::npos);
}

PL_INSTANTIATE_BACKENDS(GridTest);

}  // namespace
}  // namespace palladium::ktest
