// Loads and stores (edge blocks, masks with `other`, strided and dynamic slices, squeezed block
// dimensions), atomics across programs, control flow, grids of any rank, debug_print.
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

TEST(CudaMemory, EdgeBlocksPadAndDropWrites) {
  PL_REQUIRE_NVRTC();
  // 100 x 70 in 32 x 32 blocks: the last row and column of blocks overhang the array.
  auto kernel = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f + 1.0f; };
  auto spec = pl::BlockSpec({32, 32}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); });
  for (DType t : {f32, bf16, i16}) {
    SCOPED_TRACE(dtype_name(t));
    Array x = is_float(t) ? normal(1, {100, 70}, t) : uniform(1, {100, 70}, i32, -9, 9).astype(t);
    if (is_float(t))
      check_kernel(kernel, {ShapeDtype({100, 70}, t)}, {.grid = {4, 3}, .in_specs = {spec}, .out_specs = {spec}}, {x});
    else
      check_kernel([](pl::Ref a, pl::Ref o) { o[pl::all] = a[pl::all] * 2 + 1; }, {ShapeDtype({100, 70}, t)},
                   {.grid = {4, 3}, .in_specs = {spec}, .out_specs = {spec}}, {x});
  }
}

TEST(CudaMemory, MasksOtherStridesAndDynamicSlices) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref o_masked, pl::Ref o_strided, pl::Ref o_dyn) {
    pl::Value idx = jnp::arange(64);
    pl::Value mask = idx % 3 != 0;
    pl::Value v = pl::load(x, pl::idx(pl::ds(0, 64)), mask, jnp::full({64}, -5.0));
    pl::store(o_masked, pl::idx(pl::ds(0, 64)), v);
    pl::store(o_masked, pl::idx(pl::ds(64, 64)), v * 3.0f, idx < 20);
    o_strided[pl::all] = pl::load(x, pl::idx(pl::ds(1, 32, 4)));  // every 4th element from 1
    pl::Value start = pl::program_id(0) * 16 + 5;
    o_dyn[pl::all] = x(pl::ds(start, 16)) + 1.0f;
  };
  Array x = normal(2, {128});
  std::vector<Array> outs;
  auto make = [&](const std::string& be) {
    return pl::pallas_call(kernel, {ShapeDtype({128}, f32), ShapeDtype({32}, f32), ShapeDtype({16}, f32)},
                           {.grid = {1}, .backend = be});
  };
  // o_masked's second half is only partly written: compare the written elements.
  std::vector<Array> got = make("cuda").call({x});
  if (!results_are_real()) return;  // compile-only: the "cuda" result is the interpreter's
  std::vector<Array> ref = make("interpret").call({x});
  Array g0 = to_host(got[0]);
  for (int64_t i = 0; i < 84; ++i) EXPECT_EQ(g0.get(i), ref[0].get(i)) << i;
  EXPECT_TRUE(agree(to_host(got[1]), ref[1]));
  EXPECT_TRUE(agree(to_host(got[2]), ref[2]));
}

TEST(CudaMemory, SqueezedBlockDimsAndScalarIndices) {
  PL_REQUIRE_NVRTC();
  // x: (3, 40, 5); each program (b, j) sees x[b, :, j] as a (40,) ref.
  auto kernel = [](pl::Ref x, pl::Ref o_row, pl::Ref o_scalar) {
    pl::Value v = x[pl::all];
    o_row[pl::all] = jnp::cumsum(v, 0);
    o_scalar[pl::idx(0)] = x[pl::idx(7)] + x[pl::idx(39)];
  };
  check_kernel(kernel, {ShapeDtype({3, 5, 40}, f32), ShapeDtype({3, 5}, f32)},
               {.grid = {3, 5},
                .in_specs = {pl::BlockSpec({pl::None, 40, pl::None}, [](pl::Index b, pl::Index j) { return pl::idx(b, 0, j); })},
                .out_specs = {pl::BlockSpec({pl::None, pl::None, 40}, [](pl::Index b, pl::Index j) { return pl::idx(b, j, 0); }),
                              pl::BlockSpec({pl::None, 1}, [](pl::Index b, pl::Index j) { return pl::idx(b, j); })}},
               {normal(3, {3, 40, 5})});
}

TEST(CudaMemory, AtomicsAcrossPrograms) {
  PL_REQUIRE_NVRTC();
  for (DType t : {i32, u32, i64, f32, f64}) {
    SCOPED_TRACE(dtype_name(t));
    // 16 programs each add, max and min their row into one shared accumulator row (aliased so
    // the output starts from the input's values), and record the old values they saw for max.
    auto kernel = [](pl::Ref x, pl::Ref acc_in, pl::Ref mx_in, pl::Ref mn_in, pl::Ref acc, pl::Ref mx, pl::Ref mn) {
      (void)acc_in; (void)mx_in; (void)mn_in;
      pl::Value v = x[pl::all];
      pl::atomic_add(acc, pl::idx(pl::slice()), v);
      pl::atomic_max(mx, pl::idx(pl::slice()), v);
      pl::atomic_min(mn, pl::idx(pl::slice()), v, jnp::arange(24) < 20);
      pl::atomic_add(acc, pl::idx(0), jnp::sum(v, 0));  // a scalar atomic: one thread updates
    };
    Array x = is_float(t) ? uniform(4, {16, 24}, t, -8, 8) : uniform(4, {16, 24}, i32, 0, 100).astype(t);
    // Random starting values, so that the aliasing (and max/min against what is there) matters.
    auto start = [&](uint64_t seed) {
      return is_float(t) ? uniform(seed, {24}, t, -8, 8) : uniform(seed, {24}, i32, 0, 100).astype(t);
    };
    auto spec = pl::BlockSpec({pl::None, 24}, [](pl::Index i) { return pl::idx(i, 0); });
    auto whole = pl::BlockSpec({24}, [](pl::Index) { return pl::idx(0); });
    check_kernel(kernel, {ShapeDtype({24}, t), ShapeDtype({24}, t), ShapeDtype({24}, t)},
                 {.grid = {16}, .in_specs = {spec, whole, whole, whole}, .out_specs = {whole, whole, whole},
                  .input_output_aliases = {{1, 0}, {2, 1}, {3, 2}}},
                 {x, start(5), start(6), start(7)}, t == f32 ? 1e-5 : -1);
  }
}

TEST(CudaControl, LoopsCondsAndCarries) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref o_fori, pl::Ref o_while, pl::Ref o_cond, pl::Ref o_swap) {
    pl::Value v = x[pl::all];  // [64]
    // fori_loop with a tile carry and a dynamic bound.
    pl::Value hi = pl::program_id(0) + 3;
    pl::Value acc = pl::lax::fori_loop(0, hi, [&](pl::Value i, pl::Value a) { return a * 0.5f + v * i.astype(pl::f32); },
                                       jnp::zeros({64}));
    o_fori[pl::all] = acc;
    // while_loop on a scalar and a tile.
    auto [n, t] = pl::lax::while_loop([](std::tuple<pl::Value, pl::Value> c) { return std::get<0>(c) < 10; },
                                      [](std::tuple<pl::Value, pl::Value> c) {
                                        auto [k, tile] = c;
                                        return std::tuple{k + 3, tile + jnp::sum(tile, 0)};
                                      },
                                      std::tuple{pl::Value(0), v});
    o_while[pl::all] = t + n.astype(pl::f32);
    // cond with results, and when for a side effect.
    pl::Value r = pl::lax::cond(pl::program_id(0) % 2 == 0, [&] { return jnp::exp(v); }, [&] { return -v; });
    o_cond[pl::all] = r;
    pl::when(pl::program_id(0) == 1, [&] { o_cond[pl::idx(0)] = pl::Value(42.0f); });
    // Carries swapped every iteration.
    auto [p, q] = pl::lax::fori_loop(0, 5, [](pl::Value, std::tuple<pl::Value, pl::Value> c) {
      auto [a, b] = c;
      return std::tuple{b, a + 1.0f};
    }, std::tuple{v, v * 2.0f});
    o_swap[pl::all] = p - q;
  };
  auto spec = pl::BlockSpec({pl::None, 64}, [](pl::Index i) { return pl::idx(i, 0); });
  check_kernel(kernel, std::vector<ShapeDtype>(4, ShapeDtype({3, 64}, f32)),
               {.grid = {3}, .in_specs = {spec}, .out_specs = {spec, spec, spec, spec}}, {normal(5, {3, 64})}, 1e-5);
}

TEST(CudaGrid, RankFourGridAndManyPrograms) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref o) {
    o[pl::all] = jnp::full({1, 1, 1, 1}, 0, pl::i32) + pl::program_id(0) * 1000 + pl::program_id(1) * 100 +
                 pl::program_id(2) * 10 + pl::program_id(3);
  };
  check_kernel(kernel, {ShapeDtype({2, 3, 5, 7}, i32)},
               {.grid = {2, 3, 5, 7},
                .out_specs = {pl::BlockSpec({1, 1, 1, 1}, [](pl::Index a, pl::Index b, pl::Index c, pl::Index d) {
                  return pl::idx(a, b, c, d);
                })}},
               {});
  // 70000 programs: more than a 16-bit launch dimension holds.
  auto many = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + pl::program_id(0); };
  auto spec = pl::BlockSpec({4}, [](pl::Index i) { return pl::idx(i); });
  check_kernel(many, {ShapeDtype({280000}, i32)}, {.grid = {70000}, .in_specs = {spec}, .out_specs = {spec}},
               {pl::arange(280000)});
}

TEST(CudaControl, DebugPrintCompilesAndRuns) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    pl::debug_print("pid {} row {} sum {}", pl::program_id(0), v, jnp::sum(v, 0));
    o[pl::all] = v;
  };
  auto spec = pl::BlockSpec({pl::None, 4}, [](pl::Index i) { return pl::idx(i, 0); });
  check_kernel(kernel, {ShapeDtype({2, 4}, i32)}, {.grid = {2}, .in_specs = {spec}, .out_specs = {spec}},
               {pl::arange(8).reshape({2, 4})});
}

// A recurrence through the output, o[i] = dot(o[i - 1], w) in a fori_loop: the dot operand read
// from o must be loaded where it stands, after the previous iteration's store, not prefetched
// with cp.async iterations ahead as loads from read-only refs are (w, here). The generated
// source shows it: the loop's prologue issues w's copies and none of o's.
TEST(CudaMemory, RecurrenceThroughTheOutputIsNotPrefetched) {
  PL_REQUIRE_NVRTC();
  GeneratedSources sources("recurrence-test");
  constexpr int64_t kRows = 64, kSteps = 8;
  auto kernel = [](pl::Ref x, pl::Ref w, pl::Ref o) {  // refs 0, 1, 2 (pl_ref0 .. pl_ref2)
    o(pl::ds(0, kRows), pl::slice()) = x[pl::all];
    pl::lax::fori_loop(1, kSteps, [&](pl::Value i) {
      pl::Value prev = o(pl::ds((i - 1) * kRows, kRows), pl::slice());
      pl::Value wi = w(pl::ds(i * kRows, kRows), pl::slice());
      o(pl::ds(i * kRows, kRows), pl::slice()) = pl::dot(prev, wi).astype(pl::bf16);
    });
  };
  // w's entries (variance 1/75) keep the rows of o near unit size over the steps.
  Array x = normal(31, {kRows, 64}, bf16), w = uniform(32, {kSteps * kRows, 64}, bf16, -0.2, 0.2);
  check_kernel(kernel, {ShapeDtype({kSteps * kRows, 64}, bf16)}, {.name = "recurrence", .debug = true}, {x, w}, 2e-2);
  const std::string s = sources.source("recurrence");
  ASSERT_FALSE(s.empty()) << "no generated source in " << sources.dir();
  // The prologue: from the first prefetch round to the loop itself.
  const size_t begin = s.find("pl_pre = "), end = s.find("for (pl_i32 pl_i", begin);
  ASSERT_NE(begin, std::string::npos) << "w's load is no longer prefetched; the test needs another read-only operand";
  ASSERT_NE(end, std::string::npos);
  const std::string prologue = s.substr(begin, end - begin);
  EXPECT_NE(prologue.find("pl_ref1"), std::string::npos) << prologue;
  EXPECT_EQ(prologue.find("pl_ref2"), std::string::npos) << "the load from the output is prefetched:\n" << prologue;
}

// atomic_xchg, atomic_and / or / xor and atomic_cas on int32, uint32 and int64 (and xchg on
// float32): one program, so the old values are fixed.
TEST(CudaMemory, ExchangeBitwiseAndCompareAndSwapAtomics) {
  PL_REQUIRE_NVRTC();
  for (DType t : {i32, u32, i64}) {
    SCOPED_TRACE(dtype_name(t));
    Array init = uniform(21, {64}, t, 0, 1000), v = uniform(22, {64}, t, 0, 1000);
    check_kernel(
        [](pl::Ref, pl::Ref v_ref, pl::Ref o, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
          pl::Value val = v_ref[pl::all];
          o1[pl::all] = pl::atomic_xchg(o, pl::idx(pl::ds(0, 16)), pl::load(v_ref, pl::idx(pl::ds(0, 16))));
          o2[pl::all] = pl::atomic_and(o, pl::idx(pl::ds(16, 16)), pl::load(v_ref, pl::idx(pl::ds(16, 16))));
          pl::atomic_or(o, pl::idx(pl::ds(32, 16)), pl::load(v_ref, pl::idx(pl::ds(32, 16))));
          o3[pl::all] = pl::atomic_xor(o, pl::idx(pl::ds(48, 8)), pl::load(v_ref, pl::idx(pl::ds(48, 8))));
          pl::Value cur = pl::load(o, pl::idx(pl::ds(56, 8)));
          pl::Value k = jnp::arange(8);
          o4[pl::all] = pl::atomic_cas(o, pl::idx(pl::ds(56, 8)), jnp::where(k % 2 == 0, cur, cur + 1),
                                       pl::load(v_ref, pl::idx(pl::ds(56, 8))));
          (void)val;
        },
        {ShapeDtype({64}, t), ShapeDtype({16}, t), ShapeDtype({16}, t), ShapeDtype({8}, t), ShapeDtype({8}, t)},
        {.input_output_aliases = {{0, 0}}, .name = "atomics2"}, {init, v});
  }
}

// Gathers, a scatter and tile-indexed atomics (each lane its own address).
TEST(CudaMemory, GatherScatterAndTileAtomics) {
  PL_REQUIRE_NVRTC();
  Array x = normal(31, {256}), idx = uniform(32, {128}, i32, 0, 256), bins = uniform(33, {128}, i32, 0, 16);
  Array counts = uniform(34, {16}, i32, 0, 100);  // the histogram starts from these
  check_kernel(
      [](pl::Ref x_ref, pl::Ref idx_ref, pl::Ref bins_ref, pl::Ref, pl::Ref g, pl::Ref s, pl::Ref h) {
        pl::Value i = idx_ref[pl::all];
        g[pl::all] = x_ref[i];
        pl::Value k = jnp::arange(128);
        pl::store(s, pl::idx(127 - k), pl::load(x_ref, pl::idx(k * 2)));
        pl::atomic_add(h, pl::idx(pl::Value(bins_ref[pl::all])), jnp::ones({128}, i32));
      },
      {ShapeDtype({128}, f32), ShapeDtype({128}, f32), ShapeDtype({16}, i32)},
      {.input_output_aliases = {{3, 2}}, .name = "gathers"}, {x, idx, bins, counts});
}

// A sequential (arbitrary) reduction axis: a loop inside each thread block, the output block read
// back and accumulated at every step; tensor-core dots at 64 x 64 blocks.
TEST(CudaMemory, SequentialAxisAccumulatesTheOutputBlock) {
  PL_REQUIRE_NVRTC();
  for (DType t : {f32, bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t m = 128, n = 192, k = 256, b = 64;
    Array x = normal(11, {m, k}, t), y = normal(12, {k, n}, t);
    check_kernel(
        [](pl::Ref xr, pl::Ref yr, pl::Ref o) {
          pl::when(pl::program_id(2) == 0, [&] { o[pl::all] = jnp::zeros({64, 64}); });
          o[pl::all] = o[pl::all] + jnp::dot(xr[pl::all], yr[pl::all]);
        },
        {ShapeDtype({m, n}, f32)},
        {.grid = {m / b, n / b, k / b},
         .dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary},
         .in_specs = {pl::BlockSpec({b, b}, [](pl::Index i, pl::Index, pl::Index kk) { return pl::idx(i, kk); }),
                      pl::BlockSpec({b, b}, [](pl::Index, pl::Index j, pl::Index kk) { return pl::idx(kk, j); })},
         .out_specs = {pl::BlockSpec({b, b}, [](pl::Index i, pl::Index j, pl::Index) { return pl::idx(i, j); })}},
        {x, y}, t == f32 ? 1e-4 : 2e-2);
  }
}

// A checked run of a correct kernel (masked tail, strided and dynamic slices) gives the unchecked
// results; a faulty one is tested in tests/kernels/checked_run_test.cc on every compiled backend.
TEST(CudaMemory, CheckedRunOfACorrectKernel) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref o) {
    pl::Value idx = jnp::arange(64);
    pl::Value start = pl::program_id(0) * 100;  // program 1 reads past the end, masked off
    pl::Value v = pl::load(x, pl::idx(pl::ds(start, 64)), idx + start < 128, jnp::full({64}, -5.0));
    o[pl::all] = v + pl::load(x, pl::idx(pl::ds(1, 64, 2)));
  };
  Array x = normal(13, {128});
  CallOptions o{.grid = {2}, .out_specs = {pl::BlockSpec({64}, [](pl::Index i) { return i; })}};
  o.compiler_params.checks = true;
  check_kernel(kernel, {ShapeDtype({128}, f32)}, o, {x});
}

// run_scoped's buffers on the GPU: an accumulator through a K loop in the kernel, per program.
TEST(CudaMemory, RunScopedAccumulator) {
  PL_REQUIRE_NVRTC();
  auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) {
    o[pl::all] = pl::run_scoped([&](pl::Ref acc) {
      acc[pl::all] = jnp::zeros({16, 32});
      pl::fori_loop(0, 4, [&](Value k) {
        acc[pl::all] = acc[pl::all] + jnp::dot(x(pl::slice(), pl::ds(k * 16, 16)), y(pl::ds(k * 16, 16), pl::slice()));
      });
      return Value(acc[pl::all]);
    }, ShapeDtype({16, 32}, f32));
  };
  CallOptions opts{.grid = {3},
                   .in_specs = {BlockSpec({16, 64}, [](Index i) { return idx(i, 0); }), BlockSpec({64, 32}, [](Index) { return idx(0, 0); })},
                   .out_specs = {BlockSpec({16, 32}, [](Index i) { return idx(i, 0); })},
                   .name = "scoped"};
  check_kernel(kernel, {ShapeDtype({48, 32}, f32)}, opts, {normal(40, {48, 64}), normal(41, {64, 32})}, 1e-5);
}

}  // namespace
}  // namespace palladium::cudatest
