// Loads, stores and atomics on the cpu backend: edge blocks, squeezed dimensions, strided and
// scalar indices, masks with and without `other`, outputs read back, aliasing, and atomics from
// many programs at once.
#include <numeric>

#include "backends/cpu/codegen.h"
#include "backends/cpu/cpu_backend.h"
#include "core/grid_mapping.h"
#include "tests/cpu/cpu_test_util.h"
#include "tests/support/program_support.h"

#define PL_CPU_STREAM_PREFETCH 1  // for StreamPrefetchNeedsOneThreadAndTheFlag
#include "device/cpu/tile_memory.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
namespace jnp = pl::jnp;

TEST(CpuMemory, EdgeBlocksPadAndDropWrites) {
  // 37 x 29 in blocks of 16 x 8: the last blocks overhang in both dimensions. Padding reads as 0
  // on the cpu backend (poison in the interpreter, which never lets it reach memory here), and
  // writes past the array are dropped, so every element is written by exactly one program.
  Random rng;
  pl::Array x = rng.normal({37, 29}), y = rng.uniform({37, 29}, -50, 50, pl::i16);
  auto kernel = [](Ref x_ref, Ref y_ref, Ref o_ref, Ref p_ref) {
    o_ref[pl::all] = jnp::tanh(x_ref[pl::all]) * 3.0f + pl::program_id(0).astype(pl::f32);
    p_ref[pl::all] = y_ref[pl::all] * y_ref[pl::all] - pl::program_id(1).astype(pl::i16);
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({37, 29}, pl::f32), pl::ShapeDtype({37, 29}, pl::i16)},
                                {.grid = {3, 4}, .in_specs = {block2(16, 8), block2(16, 8)},
                                 .out_specs = {block2(16, 8), block2(16, 8)}, .name = "edge_blocks"},
                                {x, y});
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-6));  // tanh within 2 ulps, then scaled and shifted
  EXPECT_TRUE(same(cpu[1], interp[1]));
}

TEST(CpuMemory, PaddingReadsZeroOnTheCpuBackend) {
  // The sum over an overhanging block counts only the array's elements (padding is 0 here; the
  // interpreter would raise an Error when such a sum reaches memory).
  pl::Array x = pl::ones({10, 6});
  auto f = pl::pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = jnp::broadcast_to(x_ref[pl::all].sum(), {1}); },
                           pl::ShapeDtype({3}, pl::f32),
                           {.grid = {3},
                            .in_specs = {pl::BlockSpec({4, 6}, [](pl::Index i) { return pl::idx(i, 0); })},
                            .out_specs = {pl::BlockSpec({1}, [](pl::Index i) { return pl::idx(i); })},
                            .name = "padding_zero", .backend = "cpu"});
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{24, 24, 12}));
}

TEST(CpuMemory, SqueezedStridedAndScalarIndices) {
  Random rng;
  pl::Array x = rng.normal({5, 12, 9}), n = rng.uniform({7}, -9, 9, pl::i32);
  auto kernel = [](Ref x_ref, Ref n_ref, Ref even_ref, Ref scal_ref, Ref row_ref) {
    // x_ref: (12, 9) (batch squeezed); even columns, every second row from row 1.
    Value sub = pl::load(x_ref, pl::idx(pl::ds(1, 5, 2), pl::ds(0, 5, 2)));
    even_ref[pl::all] = sub * 2.0f;
    // A scalar read and a scalar write.
    Value s = x_ref(3, 4) + n_ref[2].astype(pl::f32);
    scal_ref[pl::program_id(0)] = s;
    // One row of the block, written into row program_id of the output.
    row_ref(pl::program_id(0), pl::slice()) = x_ref(pl::program_id(0) + 2, pl::slice());
  };
  auto [cpu, interp] = run_both(
      kernel, {pl::ShapeDtype({5, 5, 5}, pl::f32), pl::ShapeDtype({5}, pl::f32), pl::ShapeDtype({5, 9}, pl::f32)},
      {.grid = {5},
       .in_specs = {pl::BlockSpec({pl::None, 12, 9}, [](pl::Index b) { return pl::idx(b, 0, 0); }), pl::BlockSpec()},
       .out_specs = {pl::BlockSpec({pl::None, 5, 5}, [](pl::Index b) { return pl::idx(b, 0, 0); }), pl::BlockSpec(),
                     pl::BlockSpec()},
       .name = "squeezed_strided"},
      {x, n});
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
}

TEST(CpuMemory, MasksWithAndWithoutOther) {
  Random rng;
  pl::Array x = rng.normal({50}), m = rng.uniform({50}, 0, 2, pl::i32).astype(pl::bool_);
  auto kernel = [](Ref x_ref, Ref m_ref, Ref a_ref, Ref b_ref, Ref c_ref) {
    Value mask = m_ref[pl::all];
    // Masked-off lanes take `other`; a masked store leaves them as they were.
    a_ref[pl::all] = pl::load(x_ref, {pl::all}, mask, -7.0f);
    b_ref[pl::all] = jnp::zeros({50});
    pl::store(b_ref, {pl::all}, x_ref[pl::all] * 2.0f, mask);
    // Without `other`, masked-off lanes are undefined: select them away before storing.
    Value loaded = pl::load(x_ref, {pl::ds(0, 50)}, mask);
    c_ref[pl::all] = jnp::where(mask, loaded, 1.0f);
  };
  auto [cpu, interp] = run_both(kernel, std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({50}, pl::f32)), {.name = "masks"}, {x, m});
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
}

TEST(CpuMemory, MaskedLoadsOverhangingTheArray) {
  // The seed idiom for ragged sizes: blocks over cdiv(n, block) programs, masked by the index.
  Random rng;
  const int64_t n = 1000, block = 128;
  pl::Array x = rng.normal({n});
  auto kernel = [](Ref x_ref, Ref o_ref) {
    Value offsets = pl::program_id(0) * block + jnp::arange(block);
    Value mask = offsets < n;
    Value v = pl::load(x_ref, {pl::ds(pl::program_id(0) * block, block)}, mask, 0.0f);
    pl::store(o_ref, {pl::ds(pl::program_id(0) * block, block)}, jnp::exp(v), mask);
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({n}, pl::f32)}, {.grid = {pl::cdiv(n, block)}, .name = "ragged"}, {x});
  EXPECT_TRUE(within_ulps(cpu[0], interp[0], 1));
}

TEST(CpuMemory, OutputsReadBackAndAliases) {
  Random rng;
  pl::Array x = rng.normal({8, 16}), acc = rng.normal({8, 16});
  auto kernel = [](Ref x_ref, Ref acc_in, Ref acc_out, Ref o_ref) {
    (void)acc_in;
    o_ref[pl::all] = x_ref[pl::all] * 2.0f;
    o_ref[pl::all] += 1.0f;             // reads back what this program wrote
    acc_out[pl::all] += o_ref[pl::all];  // acc_out starts as a copy of acc_in
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({8, 16}, pl::f32), pl::ShapeDtype({8, 16}, pl::f32)},
                                {.grid = {2}, .in_specs = {pl::BlockSpec({4, 16}, [](pl::Index i) { return pl::idx(i, 0); }),
                                                           pl::BlockSpec({4, 16}, [](pl::Index i) { return pl::idx(i, 0); })},
                                 .out_specs = {pl::BlockSpec({4, 16}, [](pl::Index i) { return pl::idx(i, 0); }),
                                               pl::BlockSpec({4, 16}, [](pl::Index i) { return pl::idx(i, 0); })},
                                 .input_output_aliases = {{1, 0}}, .name = "aliases"},
                                {x, acc});
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(same(cpu[k], interp[k])) << "output " << k;
}

TEST(CpuMemory, LargeOutputsAreStreamedCorrectly) {
  // 2^24 + 5 float32 outputs (64 MB) take the non-temporal store path; blocks of 1000 leave rows
  // that start unaligned and an overhanging last block.
  const int64_t n = (int64_t{1} << 24) + 5, block = 1000;
  pl::Array x = pl::arange(n).astype(pl::f32);
  auto f = pl::pallas_call([](Ref x_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] * 2.0f + 1.0f; },
                           pl::ShapeDtype({n}, pl::f32),
                           {.grid = {pl::cdiv(n, block)},
                            .in_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                            .out_specs = {pl::BlockSpec({block}, [](pl::Index i) { return pl::idx(i); })},
                            .name = "streamed", .backend = "cpu"});
  pl::Array out = f(x);
  const float* o = out.data_as<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += o[i] != static_cast<float>(i) * 2.0f + 1.0f;
  EXPECT_EQ(bad, 0);
}

TEST(CpuMemory, ElementwiseResultsAreComputedIntoTheirStore) {
  // A fused elementwise result whose only use is its store is computed where it is stored, straight
  // into the output (no block-sized stack array), on the last block's part inside the array only.
  // 2-D blocks of 8 x 96 over 21 x 250 (both dimensions overhang), a bfloat16 output.
  Random rng;
  pl::Array x = rng.normal({21, 250}), y = rng.normal({21, 250});
  auto kernel = [](Ref x_ref, Ref y_ref, Ref o_ref) {
    o_ref[pl::all] = (jnp::exp(x_ref[pl::all]) * 0.5f + y_ref[pl::all]).astype(pl::bf16);
  };
  const pl::CallOptions o{.grid = {3, 3}, .in_specs = {block2(8, 96), block2(8, 96)}, .out_specs = {block2(8, 96)},
                          .name = "fused_store"};
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({21, 250}, pl::bf16)}, o, {x, y});
  EXPECT_TRUE(close(cpu[0], interp[0], 1e-2));  // bf16 rounding of values within 2 ulps in float32
  auto call = pl::pallas_call(kernel, pl::ShapeDtype({21, 250}, pl::bf16), o);
  const detail::InputTypes in{pl::ShapeDtype({21, 250}, pl::f32), pl::ShapeDtype({21, 250}, pl::f32)};
  const ir::Kernel traced = detail::trace_kernel(*call.impl(), detail::describe(*call.impl(), in));
  const palladium::cpu::GeneratedKernel generated = palladium::cpu::generate(traced);
  EXPECT_EQ(generated.source.find("pl_cpu::store_row("), std::string::npos) << generated.source;
  EXPECT_NE(generated.source.find("] = pl_cpu::to_storage<pl_cpu::BFloat16>(t"), std::string::npos) << generated.source;
  EXPECT_LT(generated.frame_bytes, 3 * 8 * 96 * 4) << "a stack array for the stored value";
  // Stores with a column stride of 2 keep the group's own loop and the plain store.
  auto strided = [](Ref x_ref, Ref o_ref) {
    o_ref[pl::idx(pl::slice(), pl::ds(0, 48, 2))] = pl::load(x_ref, pl::idx(pl::slice(), pl::ds(1, 48, 2))) + 1.0f;
    o_ref[pl::idx(pl::slice(), pl::ds(1, 48, 2))] = pl::load(x_ref, pl::idx(pl::slice(), pl::ds(0, 48, 2))) * 2.0f;
  };
  auto [cpu_s, interp_s] = run_both(strided, {pl::ShapeDtype({21, 250}, pl::f32)},
                                    {.grid = {3, 3}, .in_specs = {block2(8, 96)}, .out_specs = {block2(8, 96)},
                                     .name = "fused_store_strided"},
                                    {x});
  EXPECT_TRUE(same(cpu_s[0], interp_s[0]));
}

TEST(CpuMemory, LargeTwoDimensionalOutputsAreStreamedInChunks) {
  // An output of 64 MiB or more is streamed past the caches: each row of a fused elementwise result
  // in chunks of 64 elements computed into a small local array, the first one up to the output's
  // next 64-byte boundary, the whole ones after it in a loop of constant trip count. Rows of 4099
  // float32 start at every alignment; blocks of 64 x 1000 overhang both dimensions. Against the
  // interpreter, bit for bit (one rounding per element).
  const int64_t rows = 4100, cols = 4099;
  ASSERT_GE(rows * cols * 4, int64_t{64} << 20);
  Random rng;
  pl::Array x = rng.normal({rows, cols}), y = rng.normal({rows, cols});
  auto kernel = [](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] * 2.0f + y_ref[pl::all]; };
  const pl::CallOptions o{.grid = {pl::cdiv(rows, 64), pl::cdiv(cols, 1000)}, .in_specs = {block2(64, 1000), block2(64, 1000)},
                          .out_specs = {block2(64, 1000)}, .name = "streamed_store"};
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({rows, cols}, pl::f32)}, o, {x, y});
  EXPECT_TRUE(same(cpu[0], interp[0]));
  auto call = pl::pallas_call(kernel, pl::ShapeDtype({rows, cols}, pl::f32), o);
  const detail::InputTypes in{pl::ShapeDtype({rows, cols}, pl::f32), pl::ShapeDtype({rows, cols}, pl::f32)};
  const palladium::cpu::GeneratedKernel generated =
      palladium::cpu::generate(detail::trace_kernel(*call.impl(), detail::describe(*call.impl(), in)));
  EXPECT_NE(generated.source.find("pl_chunk[pl_k - pl_c] = "), std::string::npos) << generated.source;
  EXPECT_NE(generated.source.find("pl_cpu::store_row_streaming("), std::string::npos) << generated.source;
  EXPECT_NE(generated.source.find("for (int64_t pl_j = 0; pl_j < 64; ++pl_j)"), std::string::npos) << generated.source;
  EXPECT_NE(generated.source.find("pl_cpu::store_chunk_streaming("), std::string::npos) << generated.source;
  // Both inputs prefetched ahead in the whole chunks' loop where the launch asks for it (one
  // thread, a CPU built with PL_CPU_STREAM_PREFETCH); compiled in by the flag, alike.
  const size_t chunks = generated.source.find("for (; pl_c + 64 <= pl_hi; pl_c += 64)");
  ASSERT_NE(chunks, std::string::npos) << generated.source;
  const std::string head = generated.source.substr(chunks, generated.source.find("pl_j", chunks) - chunks);
  EXPECT_EQ(test_support::count_of(head, "if (pl_prefetch) pl_cpu::prefetch_chunk_inputs("), 2u) << generated.source;
  EXPECT_NE(generated.source.find("const bool pl_prefetch = pl_cpu::stream_prefetch(launch);"), std::string::npos);
  {
    test_support::ScopedEnv prefetch{"PALLADIUM_CPU_CXXFLAGS", "-DPL_CPU_STREAM_PREFETCH=1"};
    auto [cpu_p, interp_p] = run_both(kernel, {pl::ShapeDtype({rows, cols}, pl::f32)}, o, {x, y});
    EXPECT_TRUE(same(cpu_p[0], interp_p[0]));
  }
  // The inputs' edge-block copies only: no block-sized array for the stored value.
  EXPECT_LT(generated.frame_bytes, 3 * 64 * 1000 * 4) << "a block-sized stack array for the stored value";
}

// The input prefetch of streamed rows runs where one thread runs the launch and the kernel was
// built with PL_CPU_STREAM_PREFETCH=1 (opt-in): a float32 add of 2^24 elements
// with the flag forced, at one thread (this test sets PALLADIUM_NUM_THREADS before the pool
// starts; run alone, as ctest runs it), against the interpreter bit for bit.
TEST(CpuMemory, StreamedInputsPrefetchAtOneThread) {
  test_support::ScopedEnv one{"PALLADIUM_NUM_THREADS", "1"};
  test_support::ScopedEnv prefetch{"PALLADIUM_CPU_CXXFLAGS", "-DPL_CPU_STREAM_PREFETCH=1"};
  if (pl::cpu::num_threads() != 1) GTEST_SKIP() << "the thread pool started before this test (run it alone)";
  const int64_t n = int64_t{1} << 24;
  Random rng;
  pl::Array x = rng.normal({n}), y = rng.normal({n});
  auto kernel = [](Ref x_ref, Ref y_ref, Ref o_ref) { o_ref[pl::all] = x_ref[pl::all] + y_ref[pl::all]; };
  auto block = [] { return pl::BlockSpec({65536}, [](pl::Index i) { return pl::idx(i); }); };
  const pl::CallOptions o{.grid = {n / 65536}, .in_specs = {block(), block()}, .out_specs = {block()},
                          .name = "prefetched_add"};
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({n}, pl::f32)}, o, {x, y});
  EXPECT_TRUE(same(cpu[0], interp[0]));
}

// stream_prefetch (device/cpu/tile_memory.h, included here with the flag on): one thread and the
// flag, not the flag alone.
TEST(CpuMemory, StreamPrefetchNeedsOneThreadAndTheFlag) {
  pl_cpu::Launch launch{};
  launch.threads = 1;
  EXPECT_TRUE(pl_cpu::stream_prefetch(launch));
  launch.threads = 2;
  EXPECT_FALSE(pl_cpu::stream_prefetch(launch));
}

TEST(CpuMemory, AtomicsFromManyPrograms) {
  // 256 programs each add their id into 4 counters, keep a running max/min, and count hits;
  // the old values returned by the counting add are a permutation of 0..255.
  const int64_t programs = 256;
  auto kernel = [](Ref init_i, Ref init_f, Ref init_l, Ref ints, Ref floats, Ref i64s, Ref olds) {
    (void)init_i;
    (void)init_f;
    (void)init_l;
    Value p = pl::program_id(0);
    pl::atomic_add(ints, {pl::ds(0, 4)}, jnp::broadcast_to(p, {4}));
    pl::atomic_max(ints, {4}, p * 7 % 101);
    pl::atomic_min(ints, {5}, 1000 - p);
    pl::atomic_add(floats, {pl::ds(0, 2)}, jnp::full({2}, 0.5f) * p.astype(pl::f32));
    pl::atomic_max(floats, {2}, jnp::sin(p.astype(pl::f32)));
    Value masked = jnp::iota(pl::i32, {3}, 0) != 1;
    pl::atomic_add(i64s, {pl::ds(0, 3)}, jnp::broadcast_to(p.astype(pl::i64), {3}), masked);
    olds[p] = pl::atomic_add(ints, {6}, 1);
  };
  pl::Array init_i = pl::zeros({7}, pl::i32), init_f = pl::zeros({3}, pl::f32), init_l = pl::full({3}, 5, pl::i64);
  init_f.set(2, -10);
  init_i.set(5, 10000);
  auto f = pl::pallas_call(
      kernel,
      {pl::ShapeDtype({7}, pl::i32), pl::ShapeDtype({3}, pl::f32), pl::ShapeDtype({3}, pl::i64),
       pl::ShapeDtype({programs}, pl::i32)},
      {.grid = {programs}, .input_output_aliases = {{0, 0}, {1, 1}, {2, 2}}, .name = "atomics", .backend = "cpu"});
  std::vector<pl::Array> out = f(init_i, init_f, init_l);
  const int32_t sum = static_cast<int32_t>(programs * (programs - 1) / 2);
  std::vector<int32_t> ints = out[0].to_vector<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(ints.begin(), ints.begin() + 4), std::vector<int32_t>(4, sum));
  EXPECT_EQ(ints[4], 100);
  EXPECT_EQ(ints[5], 1000 - 255);
  EXPECT_EQ(ints[6], programs);
  EXPECT_FLOAT_EQ(out[1].get(0), 0.5f * static_cast<float>(sum));
  EXPECT_FLOAT_EQ(out[1].get(1), 0.5f * static_cast<float>(sum));
  float max_sin = -10;
  for (int p = 0; p < programs; ++p) max_sin = std::max(max_sin, static_cast<float>(std::sin(static_cast<double>(p))));
  EXPECT_NEAR(out[1].get(2), max_sin, 1e-6);
  EXPECT_EQ(out[2].to_vector<int64_t>(), (std::vector<int64_t>{5 + sum, 5, 5 + sum}));
  std::vector<int32_t> olds = out[3].to_vector<int32_t>();
  std::sort(olds.begin(), olds.end());
  std::vector<int32_t> expect(programs);
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(olds, expect);
}

TEST(CpuMemory, AtomicsMatchTheInterpreterOnInitialisedOutputs) {
  Random rng;
  pl::Array base = rng.uniform({16}, 0, 5, pl::u32), fbase = rng.normal({16}, pl::f64);
  pl::Array vals = rng.uniform({4, 16}, 0, 9, pl::u32);
  auto kernel = [](Ref base_ref, Ref fbase_ref, Ref vals_ref, Ref out_u, Ref out_f) {
    (void)base_ref;
    (void)fbase_ref;
    Value v = vals_ref(pl::program_id(0), pl::slice());
    pl::atomic_add(out_u, {pl::all}, v);
    pl::atomic_max(out_f, {pl::all}, v.astype(pl::f64) - 4.0);
  };
  auto [cpu, interp] = run_both(kernel, {pl::ShapeDtype({16}, pl::u32), pl::ShapeDtype({16}, pl::f64)},
                                {.grid = {4}, .input_output_aliases = {{0, 0}, {1, 1}}, .name = "atomics_u32_f64"},
                                {base, fbase, vals});
  EXPECT_TRUE(same(cpu[0], interp[0]));
  EXPECT_TRUE(same(cpu[1], interp[1]));
}

}  // namespace
}  // namespace palladium::cpu_test
