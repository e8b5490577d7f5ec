// The wgmma path (Hopper warpgroup MMA, the default for 16-bit dots on sm_90a; forced on here): the dot shapes and
// orientations it takes, in loops with prefetched operands, and the attention kernels (whose
// backward reads P^T and dS^T from shared tiles written each iteration). Without a GPU the
// kernels are compiled for sm_90a by NVRTC, so the wgmma code generation is checked there too.
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "backends/cuda/nvrtc_compiler.h"
#include "ops/attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/program_support.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

// wgmma is the default on sm_90a; forcing it keeps these tests meaningful if a user turned it off.
struct WgmmaOn {
  test_support::ScopedEnv env{"PALLADIUM_CUDA_WGMMA", "1"};
};

// The attention in bf16 on fresh inputs from `seed` (the forward, and with `backward` the custom
// VJP too) against float64, with `o` on cuda; the generated source of pallas_call `name`.
std::string checked_attention_source(const std::string& name, const Shape& shape, uint64_t seed,
                                     pl::ops::MhaOptions o, bool backward) {
  GeneratedSources sources("wgmma-" + name);
  o.backend = "cuda";
  o.debug = true;
  Array q = normal(seed, shape, bf16), k = normal(seed + 1, shape, bf16), v = normal(seed + 2, shape, bf16);
  expect_attention_matches_reference(q, k, v, Array(), backward ? normal(seed + 3, shape, bf16) : Array(), o);
  return sources.source(name);
}

// The text of the first loop over a kernel loop index in a generated source (empty when none).
std::string first_loop(const std::string& source) {
  const size_t loop = source.find("for (pl_i32 pl_i");
  if (loop == std::string::npos) return "";
  size_t end = source.find('{', loop);
  for (int depth = 0; end < source.size(); ++end) {  // the loop's closing brace
    depth += source[end] == '{' ? 1 : source[end] == '}' ? -1 : 0;
    if (depth == 0) break;
  }
  return source.substr(loop, end - loop);
}

// Compiles the forward's source (or `entry`'s) for sm_90a with ptxas's report: no wgmma serialised
// (C7520: a wgmma on a divergent path; C7508; C7515: registers of an accumulator defined by other
// instructions inside a wgmma's pipeline stage, which stop 48's persistent causal kernel with a
// program id of unknown sign had, 50% slower on an H200), no spills; with `no_injected_wait`, no wait that
// ptxas injected either (C7517: before a wgmma, to read registers an earlier one defines).
void expect_wgmma_unserialised(const std::string& source, const std::string& entry = "pl_mha_forward",
                               bool no_injected_wait = false) {
  cuda::GeneratedKernel g;
  g.entry = entry;
  g.source = source;
  test_support::ScopedEnv verbose{"PALLADIUM_CUDA_PTXAS_VERBOSE", "1"};
  testing::internal::CaptureStderr();
  const cuda::CompileResult c = cuda::compile_to_cubin(g, "mha_forward", cuda::target_for(9, 0), false, false);
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(c.cubin.empty());
  // ptxas's report comes back in NVRTC's log on the development machines (CUDA 13.0, compile
  // only, where CI checks it); the H100 machine's NVRTC returned an empty log (stop 32, jobs 2
  // and 3), and there only the source and the results are checked.
  if (report.find("ptxas") == std::string::npos && mode() == Mode::Gpu) {
    std::cout << "NVRTC " << cuda::nvrtc_version() << " returned no ptxas report: " << report << "\n";
    return;
  }
  EXPECT_NE(report.find("Used "), std::string::npos) << report;
  EXPECT_EQ(report.find("C7520"), std::string::npos) << report;
  EXPECT_EQ(report.find("C7508"), std::string::npos) << report;
  EXPECT_EQ(report.find("C7515"), std::string::npos) << report;
  if (no_injected_wait) {
    EXPECT_EQ(report.find("C7517"), std::string::npos) << report;
  }
  EXPECT_NE(report.find(" 0 bytes spill stores"), std::string::npos) << report;
}

TEST(CudaWgmma, DotOrientations) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "ta " : "") + (tb ? "tb" : ""));
      const Shape as = ta ? Shape{128, 128} : Shape{128, 128}, bs = tb ? Shape{64, 128} : Shape{128, 64};
      auto kernel = [ta, tb](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = pl::dot(a[pl::all], b[pl::all], ta, tb); };
      check_kernel(kernel, {ShapeDtype({128, 64}, f32)}, {.name = "wgmma_dot"}, {normal(1, as, bf16), normal(2, bs, bf16)}, 1e-5);
    }
}

// The K loop on wgmma, against the interpreter; its bf16 output leaves the accumulators as 4-byte
// words (each thread's two adjacent columns), not element by element. At 128 x 256 tiles the loop
// is software-pipelined and its TMA copies go out once the iteration's MMAs are committed.
TEST(CudaWgmma, MatmulKLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  GeneratedSources sources("matmul-k-loop-test");
  for (int64_t bn : {128, 256}) {
    sources.clear();
    int64_t m = 256, n = 512, k = 320, bm = 128, bk = 64;  // (not const: captured as values)
    auto make = [&](const std::string& be) {
      auto kernel = [k, bk, bm, bn](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
        pl::Value acc = jnp::zeros({bm, bn}, pl::f32);
        acc = pl::lax::fori_loop(0, k / bk, [&](pl::Value i, pl::Value a) {
          return a + pl::dot(x_ref(pl::slice(), pl::ds(i * bk, bk)), y_ref(pl::ds(i * bk, bk), pl::slice()));
        }, acc);
        o_ref[pl::all] = acc.astype(pl::bf16);
      };
      return pl::pallas_call(kernel, pl::ShapeDtype({m, n}, pl::bf16),
                             {.grid = {m / bm, n / bn},
                              .in_specs = {pl::BlockSpec({bm, k}, [](pl::Index i, pl::Index) { return pl::idx(i, 0); }),
                                           pl::BlockSpec({k, bn}, [](pl::Index, pl::Index j) { return pl::idx(0, j); })},
                              .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); })},
                              .name = "wgmma_matmul",
                              .debug = be == "cuda",
                              .backend = be,
                              .compiler_params = {.num_warps = 8}});
    };
    expect_cuda_matches(make, {normal(3, {m, k}, bf16), normal(4, {k, n}, bf16)}, 1e-2);
    const std::string source = sources.source("wgmma_matmul");
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    // 16 bytes a thread (a quad's words transposed by shuffles), each pair of the bf16 output
    // packed by one conversion straight from the float32 accumulator, not from a rounded copy
    // (whose second rounding was integer arithmetic).
    EXPECT_NE(source.find("*(uint4*)(pl_ref2 + "), std::string::npos) << "output not stored 16 bytes a thread";
    EXPECT_EQ(test_support::count_of(source, "__shfl_xor_sync(0xffffffffu, "), 4u);
    const std::string pack = "pl_w[i] = pl_pack_bf16(";
    const size_t at = source.find(pack);
    ASSERT_NE(at, std::string::npos) << "output pairs not packed by one conversion";
    const std::string packed = source.substr(at + pack.size(), source.find('[', at + pack.size()) - at - pack.size());
    EXPECT_EQ(source.find(packed + "[s] = pl_round_bf16("), std::string::npos) << "pairs packed from a rounded copy";
    EXPECT_NE(source.find("float " + packed + "["), std::string::npos) << packed << " is not the float32 accumulator";
    if (bn == 256) {  // one program per SM: the loop is pipelined, its TMA round issued after the dot
      const size_t loop = source.find("for (pl_i32 pl_i");
      ASSERT_NE(loop, std::string::npos);
      const size_t commit = source.find("pl_wgmma_commit();", loop);
      ASSERT_NE(commit, std::string::npos);
      EXPECT_GT(source.find("pl_tma_load_2d(", loop), commit);
      EXPECT_NE(source.find("pl_wgmma_wait<1>", commit), std::string::npos);
    }
  }
}

// JAX's Pallas matmul form, a 3-D grid whose last axis is `arbitrary` and accumulates the output
// block, becomes the K loop above (backends/common/chain_loops.h): its source has the wgmma loop
// with prefetches (through the TMA) and no loop over programs. So does the scratch-accumulator form; both
// match the interpreter.
TEST(CudaWgmma, GridKMatmulCompilesAsAPipelinedKLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  GeneratedSources sources("chain-loop-test");
  int64_t m = 256, n = 256, k = 320, bm = 128, bn = 128, bk = 64;  // (not const: captured as values)
  const Array x = normal(31, {m, k}, bf16), y = normal(32, {k, n}, bf16);
  for (bool scratch : {false, true}) {
    SCOPED_TRACE(scratch ? "scratch accumulator" : "output accumulator");
    sources.clear();
    auto make = [&](const std::string& be) {
      pl::CallOptions o{.grid = {m / bm, n / bn, k / bk},
                        .dimension_semantics = {pl::parallel, pl::parallel, pl::arbitrary},
                        .in_specs = {pl::BlockSpec({bm, bk}, [](pl::Index i, pl::Index, pl::Index kk) { return pl::idx(i, kk); }),
                                     pl::BlockSpec({bk, bn}, [](pl::Index, pl::Index j, pl::Index kk) { return pl::idx(kk, j); })},
                        .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Index i, pl::Index j, pl::Index) { return pl::idx(i, j); })},
                        .name = scratch ? "grid_k_scratch" : "grid_k",
                        .debug = be == "cuda",
                        .backend = be,
                        .compiler_params = {.num_warps = 8, .num_stages = 3}};
      if (!scratch) {
        return pl::pallas_call(
            [bm, bn](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
              pl::when(pl::program_id(2) == 0, [&] { o_ref[pl::all] = jnp::zeros({bm, bn}); });
              o_ref[pl::all] = o_ref[pl::all] + pl::dot(x_ref[pl::all], y_ref[pl::all]);
            },
            pl::ShapeDtype({m, n}, pl::f32), o);
      }
      o.scratch_shapes = {pl::ShapeDtype({bm, bn}, pl::f32)};
      return pl::pallas_call(
          [bm, bn](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref, pl::Ref acc) {
            pl::when(pl::program_id(2) == 0, [&] { acc[pl::all] = jnp::zeros({bm, bn}); });
            acc[pl::all] = acc[pl::all] + pl::dot(x_ref[pl::all], y_ref[pl::all]);
            pl::when(pl::program_id(2) == pl::num_programs(2) - 1,
                     [&] { o_ref[pl::all] = acc[pl::all].astype(pl::bf16); });
          },
          pl::ShapeDtype({m, n}, pl::bf16), o);
    };
    expect_cuda_matches(make, {x, y}, scratch ? 1e-2 : 1e-5);
    const std::string source = sources.source(scratch ? "grid_k_scratch" : "grid_k");
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_NE(source.find("pl_tma_load_2d("), std::string::npos);  // prefetched operand tiles (emit_tma.cc)
    EXPECT_NE(source.find("pl_wgmma_"), std::string::npos);
    EXPECT_EQ(source.find("pl_step"), std::string::npos);  // no loop over programs
  }
}

// The software-pipelined loop (dot_pipeline.cc) where it applies, the attention forward at
// head_dim 128 and block_k 64 (a program has its SM to itself): present in the generated source,
// absent with PALLADIUM_CUDA_PIPELINE=0, and both kernels match the float64 reference.
TEST(CudaWgmma, PipelinedAttentionLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  GeneratedSources sources("pipeline-test");
  const Shape shape{1, 512, 2, 128};
  Array q = normal(21, shape, bf16), k = normal(22, shape, bf16), v = normal(23, shape, bf16);
  for (bool pipelined : {true, false}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "not pipelined");
    test_support::ScopedEnv pipe{"PALLADIUM_CUDA_PIPELINE", pipelined ? "1" : "0"};
    sources.clear();
    // Distinct scales: ops keeps one pallas_call per configuration.
    pl::ops::MhaOptions o{.sm_scale = pipelined ? 0.0884f : 0.0885f, .causal = true, .block_q = 128, .block_k = 64,
                          .backend = "cuda", .debug = true};
    Array got = pl::ops::mha(q, k, v, Array(), o);
    const std::string source = sources.source("mha_forward");
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_EQ(source.find("pl_wgmma_wait<1>") != std::string::npos, pipelined);
    EXPECT_LT(rel_error(to_host(got), pl::ops::mha_reference(q, k, v, Array(), o.sm_scale, o.causal).out), 5e-3);
  }
}

// The softmax's scale folded into an FMA (emit_elementwise.cc, emit_scaled_exp): not causal, the
// forward's exp reads q k^T itself, exp2(fma(qk, scale log2e, -m log2e)) (or exp(fma(qk, scale,
// -m)) with PALLADIUM_CUDA_EXP2_FOLD=0), and the row max reads
// it too, scaled once per row after the reduction; so no multiply by the scale remains per score.
// Causal, the mask's select reads the scaled scores; they stay unscaled in blocks below the
// diagonal, and the max and the exp take the scale there (lazy_scale.cc): the exp2 form in every
// block, the factor and the row's max times log2(e) chosen once a row (pl_lazy_exp2_row), or
// exp(fma(s, flag ? scale : 1, -m)) with PALLADIUM_CUDA_LAZY_EXP2=0 or PALLADIUM_CUDA_EXP2_FOLD=0.
// With PALLADIUM_CUDA_FOLD_SCALE=0 none of this. Segment ids mask whole blocks of some rows
// (their max is then the mask value, -0.7 FLT_MAX): still exp(0) = 1 there, not the NaN of a max
// scaled by log2(e) past FLT_MAX. Each against float64.
TEST(CudaWgmma, SoftmaxScaleFoldsIntoAnFma) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  auto hex = [](float f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", std::bit_cast<uint32_t>(f));
    return std::string(buf);
  };
  int index = 0;
  enum class Fold { exp2, exp2_one_lazy_form, fma, off };
  for (Fold fold : {Fold::exp2, Fold::exp2_one_lazy_form, Fold::fma, Fold::off})
    for (bool causal : {false, true}) {
      if (fold == Fold::exp2_one_lazy_form && !causal) continue;  // the same kernel as Fold::exp2
      SCOPED_TRACE(std::string(fold == Fold::exp2                 ? "exp2 folded"
                               : fold == Fold::exp2_one_lazy_form ? "PALLADIUM_CUDA_LAZY_EXP2=0"
                               : fold == Fold::fma                ? "PALLADIUM_CUDA_EXP2_FOLD=0"
                                                                  : "PALLADIUM_CUDA_FOLD_SCALE=0") +
                   (causal ? ", causal" : ""));
      test_support::ScopedEnv env{"PALLADIUM_CUDA_FOLD_SCALE", fold == Fold::off ? "0" : "1"};
      test_support::ScopedEnv exp2{"PALLADIUM_CUDA_EXP2_FOLD", fold == Fold::fma ? "0" : "1"};
      test_support::ScopedEnv lazy_exp2_env{"PALLADIUM_CUDA_LAZY_EXP2", fold == Fold::exp2_one_lazy_form ? "0" : "1"};
      const float scale = 0.1201f + 0.0001f * static_cast<float>(index);  // one pallas_call per variant
      const std::string source = checked_attention_source(
          "mha_forward", {1, 512, 2, 64}, 91 + 4 * static_cast<uint64_t>(index++),
          {.sm_scale = scale, .causal = causal, .block_q = 128, .block_k = 128}, false);
      ASSERT_FALSE(source.empty()) << "no generated source";
      const std::string body = first_loop(source);
      ASSERT_FALSE(body.empty());
      const bool folded = fold != Fold::off && !causal;
      // Causal: the scores stay unscaled in the blocks below the diagonal (lazy_scale.cc).
      const bool lazy = causal && fold != Fold::off;
      const bool lazy_exp2 = lazy && fold == Fold::exp2;
      const std::string scale_log2e = hex(static_cast<float>(static_cast<double>(scale) * 1.4426950408889634));
      EXPECT_EQ(body.find("pl_fast_exp2(fmaf(") != std::string::npos, (folded && fold == Fold::exp2) || lazy_exp2);
      EXPECT_EQ(body.find(", " + scale_log2e + ", -pl_scaled_log2e(") != std::string::npos, folded && fold == Fold::exp2);
      EXPECT_EQ(body.find(", " + hex(scale) + ", -") != std::string::npos, folded && fold == Fold::fma);
      EXPECT_EQ(body.find("= acc * " + hex(scale) + ";") != std::string::npos, folded);
      EXPECT_EQ(body.find("pl_fast_exp(fmaf(") != std::string::npos, (folded && fold == Fold::fma) || (lazy && !lazy_exp2));
      EXPECT_EQ(body.find(" ? " + hex(scale) + " : 1.0f, -") != std::string::npos, lazy && !lazy_exp2);
      EXPECT_EQ(body.find("pl_lazy_exp2_row(") != std::string::npos, lazy_exp2);
      EXPECT_EQ(body.find(", pl_unscaled") != std::string::npos && body.find(", " + scale_log2e + ", pl_k") != std::string::npos,
                lazy_exp2);
      EXPECT_EQ(body.find(" ? acc * " + hex(scale) + " : acc;") != std::string::npos, lazy);
    }
  // Rows 80-127 of each sequence see keys 80-127 only: the first key block is wholly masked for them.
  const Shape shape{2, 128, 2, 64};
  std::vector<int32_t> ids(2 * 128);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i % 128) < 80 ? 0 : 1;
  pl::ops::MhaOptions o{.sm_scale = 0.125f, .block_q = 64, .block_k = 64, .backend = "cuda"};
  expect_attention_matches_reference(normal(95, shape, bf16), normal(96, shape, bf16), normal(97, shape, bf16),
                                     pl::from_vector(ids, {2, 128}), normal(98, shape, bf16), o);
}

// A causal-style index mask over q k^T * c, read only by the row max and exp(t - max): in blocks
// where the mask holds throughout, the scores stay unscaled in the dot's registers (lazy_scale.cc)
// and the max and the exp take c through a block-uniform flag; elsewhere they are scaled and
// masked in place. Program 0's rows are wholly masked (max = the mask value, exp(0) = 1 exactly),
// programs 1 and 2 mixed, program 3 unmasked. Against the interpreter; and the flag is gone with
// PALLADIUM_CUDA_FOLD_SCALE=0.
TEST(CudaWgmma, MaskedScoresStayUnscaledWhereTheMaskHolds) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (bool fold : {true, false}) {
    SCOPED_TRACE(fold ? "folded" : "PALLADIUM_CUDA_FOLD_SCALE=0");
    test_support::ScopedEnv env{"PALLADIUM_CUDA_FOLD_SCALE", fold ? "1" : "0"};
    GeneratedSources sources("lazy-scale-test");
    const float scale = fold ? 0.1251f : 0.1252f;
    auto kernel = [scale](pl::Ref q, pl::Ref kt, pl::Ref o) {
      pl::Value s = pl::dot(q[pl::all], kt[pl::all]) * scale;
      pl::Value rows = pl::program_id(0) * 64 + jnp::iota(pl::i32, {64, 128}, 0);
      pl::Value cols = jnp::iota(pl::i32, {64, 128}, 1);
      pl::Value t = jnp::where(rows >= cols + 96, s, jnp::full({64, 128}, -0.7 * std::numeric_limits<float>::max(), pl::f32));
      pl::Value m = jnp::broadcast_to(jnp::expand_dims(jnp::max(t, 1), 1), {64, 128});
      o[pl::all] = jnp::exp(t - m);
    };
    CallOptions options{.grid = {4},
                        .in_specs = {BlockSpec({64, 64}, [](Index i) { return idx(i, 0); }), BlockSpec()},
                        .out_specs = {BlockSpec({64, 128}, [](Index i) { return idx(i, 0); })},
                        .name = "lazy_scale",
                        .debug = true};
    options.compiler_params.fast_math = true;
    const std::vector<Array> got = check_kernel(kernel, {ShapeDtype({256, 128}, f32)}, options,
                                                {normal(71, {256, 64}, bf16), normal(72, {64, 128}, bf16)}, 2e-5);
    const std::string source = sources.source("lazy_scale");
    ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
    EXPECT_EQ(source.find("const bool pl_unscaled") != std::string::npos, fold);
    // The exp2 form, its factors chosen once a row (pl_lazy_exp2_row): exact for the wholly
    // masked rows below too.
    EXPECT_EQ(source.find("pl_lazy_exp2_row(") != std::string::npos, fold);
    char factor[64];
    std::snprintf(factor, sizeof factor, " ? acc * __int_as_float(0x%08x) : acc;", std::bit_cast<uint32_t>(scale));
    EXPECT_EQ(source.find(factor) != std::string::npos, fold);
    if (!results_are_real()) continue;
    const Array host = to_host(got[0]);
    for (int64_t i = 0; i < 64 * 128; i += 131) EXPECT_EQ(host.get(i), 1.0) << "wholly masked row, flat " << i;
  }
}

// Shared addresses as 32-bit offsets from the kernel's one shared area (pl_smem_addr), and the
// warpgroup index computed once at the top: PALLADIUM_CUDA_UNIFORM_ADDRESSES=0 keeps the generic
// pointers (the prelude's PL_GENERIC_SMEM_ADDRESSES) and a shuffle in every dot. The forward at
// head_dim 64, blocks 128 x 64 (two programs an SM) and its backward, both ways against float64.
TEST(CudaWgmma, SharedAddressesAreOffsetsFromTheSharedArea) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  int index = 0;
  for (bool uniform : {true, false}) {
    SCOPED_TRACE(uniform ? "offsets" : "PALLADIUM_CUDA_UNIFORM_ADDRESSES=0");
    test_support::ScopedEnv env{"PALLADIUM_CUDA_UNIFORM_ADDRESSES", uniform ? "1" : "0"};
    const float scale = 0.1251f + 0.0001f * static_cast<float>(index);  // one pallas_call per side
    const std::string source = checked_attention_source(
        "mha_forward", {1, 256, 2, 64}, 91 + 4 * static_cast<uint64_t>(index++),
        {.sm_scale = scale, .causal = true, .block_q = 128, .block_k = 64}, true);
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_EQ(source.find("#define PL_GENERIC_SMEM_ADDRESSES") != std::string::npos, !uniform);
    EXPECT_EQ(source.find("extern __shared__"), std::string::npos);  // the prelude declares pl_smem
    const std::string body = first_loop(source);
    ASSERT_FALSE(body.empty()) << "no loop in the generated source";
    EXPECT_EQ(body.find("pl_warpgroup()") != std::string::npos, !uniform);
    EXPECT_EQ(body.find("const int pl_wg = pl_wg_top;") != std::string::npos, uniform);
  }
}

// At head_dim 128 both loops of the attention backward issue dout v^T beside q k^T
// (early_dots.h) and wait for q k^T alone (wgmma.wait_group 1): the softmax runs while dout v^T
// is on the tensor cores. ptxas keeps the two apart (no C7517, which it reported when dout v^T
// accumulated onto the -delta computed in the loop). With PALLADIUM_CUDA_EARLY_DOTS=0, and at
// head_dim 64 (dots of 64 products stay), the dots stay where the kernel wrote them and every
// wait is wait_group 0. All against float64.
TEST(CudaWgmma, BackwardIssuesDoutVBesideQK) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  struct Variant {
    bool early;
    int64_t head_dim;
    bool causal;
  };
  int index = 0;
  for (const Variant& t : {Variant{true, 128, false}, Variant{true, 128, true}, Variant{false, 128, false},
                           Variant{true, 64, false}}) {
    const bool early = t.early && t.head_dim >= 128, causal = t.causal;
    SCOPED_TRACE(std::string(t.early ? "default" : "PALLADIUM_CUDA_EARLY_DOTS=0") + ", head_dim " +
                 std::to_string(t.head_dim) + (causal ? ", causal" : ""));
    test_support::ScopedEnv env{"PALLADIUM_CUDA_EARLY_DOTS", t.early ? "1" : "0"};
    const float scale = 0.1171f + 0.0001f * static_cast<float>(index);  // one pallas_call per side
    const std::string source = checked_attention_source("mha_backward", {1, 256, 2, t.head_dim},
                                                        131 + 4 * static_cast<uint64_t>(index++),
                                                        {.sm_scale = scale, .causal = causal}, true);
    ASSERT_FALSE(source.empty()) << "no generated source";
    const std::string dkdv = first_loop(source);
    ASSERT_FALSE(dkdv.empty()) << "no loop in the generated source";
    const std::string dq = first_loop(source.substr(source.find(dkdv) + dkdv.size()));
    ASSERT_FALSE(dq.empty()) << "no second loop in the generated source";
    for (const std::string& body : {dkdv, dq}) {
      // q k^T retired alone (in the dK/dV loop p's store to shared memory then retires dout v^T)
      EXPECT_EQ(test_support::count_of(body, "pl_wgmma_wait<1>();"), early ? 1u : 0u) << body;
      // q k^T and dout v^T committed before the first wait
      const size_t first_wait = body.find("pl_wgmma_wait<");
      EXPECT_EQ(test_support::count_of(body.substr(0, first_wait), "pl_wgmma_commit();"), early ? 2u : 1u) << body;
    }
    if (early) expect_wgmma_unserialised(source, "pl_mha_backward", true);
  }
}

// The pipelined attention forward (head_dim 128, one program per SM) is served by a producer
// warpgroup that hands its registers to the two consumer warpgroups (setmaxnreg: 168 a thread at
// launch, 24 and 240 after), and ptxas keeps its wgmma asynchronous: compiled again with
// PALLADIUM_CUDA_PTXAS_VERBOSE=1, ptxas's report has no C7520 (wgmma serialised: what a single producer
// warp caused), no C7508 (setmaxnreg ignored) and no spills. K's and V's tiles complete and go back
// on barriers of their own (K's of the next iteration at the end of an iteration, V's of the
// previous one), which lets block_k 128 run pipelined on the two stages that fit, where every
// program runs the loop alike (not causal); the causal loop there is pipelined and served like
// the others, or with PALLADIUM_CUDA_PIPELINE_VARYING=0 served unpipelined, its two warpgroups
// taking turns at the dots. The producer
// loads the q block too (its home, given back after the loop) and the kernel is persistent:
// capped at 3 blocks, each runs two or three of the 8 programs, the home's barriers and the
// rings' slots carried from one to the next (and once with PALLADIUM_CUDA_PERSISTENT=0, a block
// per program). With PALLADIUM_CUDA_REG_SHARE=0 the loop has no producer. All against float64.
TEST(CudaWgmma, PipelinedAttentionLoopGetsAProducerWarpgroup) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "3"};
  struct Variant {
    int64_t block_k;
    bool causal, rebalance, pipelined, persistent, pipeline_varying = true;
  };
  int index = 0;
  for (const Variant v : {Variant{64, true, true, true, true}, Variant{128, false, true, true, true},
                          Variant{128, false, true, true, false}, Variant{128, true, true, false, true, false},
                          Variant{64, true, false, true, true}, Variant{128, true, true, true, true}}) {
    SCOPED_TRACE("block_k " + std::to_string(v.block_k) + (v.causal ? ", causal" : "") +
                 (v.rebalance ? ", producer warpgroup" : ", PALLADIUM_CUDA_REG_SHARE=0") +
                 (v.persistent ? "" : ", PALLADIUM_CUDA_PERSISTENT=0") +
                 (v.pipeline_varying ? "" : ", PALLADIUM_CUDA_PIPELINE_VARYING=0"));
    test_support::ScopedEnv share{"PALLADIUM_CUDA_REG_SHARE", v.rebalance ? "1" : "0"};
    test_support::ScopedEnv persist{"PALLADIUM_CUDA_PERSISTENT", v.persistent ? "1" : "0"};
    test_support::ScopedEnv varying{"PALLADIUM_CUDA_PIPELINE_VARYING", v.pipeline_varying ? "" : "0"};
    // Distinct scales: ops keeps one pallas_call per configuration.
    const float scale = 0.0886f + 0.0001f * static_cast<float>(index);
    const uint64_t seed = 61 + 4 * static_cast<uint64_t>(index++);
    const std::string source = checked_attention_source(
        "mha_forward", {1, 512, 2, 128}, seed,
        {.sm_scale = scale, .causal = v.causal, .block_q = 128, .block_k = v.block_k}, false);
    ASSERT_FALSE(source.empty()) << "no generated source";
    const bool served = v.rebalance && v.pipelined;
    EXPECT_EQ(source.find("pl_wgmma_wait<1>") != std::string::npos, v.pipelined) << "software-pipelined";
    const bool turns_unpipelined = v.rebalance && v.causal && v.block_k == 128 && !v.pipeline_varying;
    if (turns_unpipelined) {  // served, unpipelined: each warpgroup waits for its turn at q k^T
      const std::string body = first_loop(source);
      EXPECT_NE(body.find("pl_turn_wait(pl_wg);"), std::string::npos) << "no turns in the loop";
      EXPECT_EQ(source.find("for (long long pl_block = pl_first_block;") != std::string::npos, v.persistent);
      EXPECT_NE(source.find("pl_regs_increase<240>();"), std::string::npos);
      expect_wgmma_unserialised(source);
      continue;
    }
    EXPECT_EQ(source.find("__launch_bounds__(384, 1)") != std::string::npos, served);
    EXPECT_EQ(source.find("pl_regs_decrease<24>();") != std::string::npos, served);
    EXPECT_EQ(source.find("pl_regs_increase<240>();") != std::string::npos, served);
    EXPECT_EQ(source.find("if (pl_warp() >= 8) {") != std::string::npos, served);
    EXPECT_EQ(source.find("pl_mbar_init(pl_home_empty0, 8);") != std::string::npos, served) << "q not loaded by the producer";
    EXPECT_EQ(source.find("for (long long pl_block = pl_first_block;") != std::string::npos, served && v.persistent);
    if (!served) continue;
    // The q block goes back once per program, once its last q k^T is retired (in the prologue, the
    // loop or after it, by the loop's length: ForwardGivesItsQBlockBackAfterTheLastQkT), and comes
    // on the program's parity.
    EXPECT_EQ(test_support::count_of(source, "pl_mbar_arrive(pl_home_empty0);"), 3u);
    EXPECT_EQ(test_support::count_of(source, "pl_mbar_wait(pl_home_bar0, pl_home_phase);"), 1u);
    EXPECT_EQ(test_support::count_of(first_loop(source), "pl_home_empty0"), 1u);
    const std::string stages = v.block_k == 128 ? "2" : "4";
    EXPECT_NE(source.find("for (int s = 0; s < " + stages + "; ++s) pl_mbar_init(&pl_empty1[s], 8);"), std::string::npos)
        << "no separate barriers for V's tiles at " << stages << " stages";
    const std::string body = first_loop(source);
    ASSERT_FALSE(body.empty()) << "no loop in the generated source";
    EXPECT_EQ(test_support::count_of(body, "pl_mbar_wait(&pl_full0["), 1u);  // K of the next iteration
    EXPECT_EQ(test_support::count_of(body, "pl_mbar_wait(&pl_full1["), 1u);  // V of this one
    EXPECT_EQ(test_support::count_of(body, "pl_mbar_arrive(&pl_empty0["), 1u);
    EXPECT_EQ(test_support::count_of(body, "pl_mbar_arrive(&pl_empty1["), 1u);
    EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 0u);
    // Two consumer warpgroups: the index is broadcast from lane 0 (uniform registers for the
    // descriptors), never the per-lane pl_warp() >> 2. With a producer, in each dot (computed once
    // at the top, the ping-pong loops ran slower: emitter.h, uniform_addresses), and shared
    // addresses stay generic pointers.
    EXPECT_EQ(source.find("const int pl_wg = pl_warp() >> 2"), std::string::npos);
    EXPECT_NE(source.find("const int pl_wg = pl_warpgroup();"), std::string::npos);
    EXPECT_EQ(source.find("pl_wg_top"), std::string::npos);
    EXPECT_NE(source.find("#define PL_GENERIC_SMEM_ADDRESSES"), std::string::npos);
    expect_wgmma_unserialised(source);
  }
}

// The seed's attention backward at head_dim 128: its P^T and dS^T operands are written to
// shared tiles each iteration (a dot reads a transposed A only from shared memory), so that all
// seven dots run on wgmma; and the dK/dV loop's tiles and the dQ loop's share memory (112 KiB
// instead of 208, two programs to an SM). Checked in the generated source, then against float64.
TEST(CudaWgmma, AttentionBackwardRunsEveryDotOnWgmmaInSharedTilesOfOneLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  const std::string source =
      checked_attention_source("mha_backward", {1, 256, 2, 128}, 31, {.sm_scale = 0.0883f, .causal = false}, true);
  ASSERT_FALSE(source.empty()) << "no generated source";
  const size_t calls = test_support::count_of(source, "pl_wgmma_n") - test_support::count_of(source, "void pl_wgmma_n");
  EXPECT_EQ(calls, 7u);
  EXPECT_EQ(test_support::count_of(source, "pl_mma_bf16_16816(&"), 0u);
  // One warpgroup: dq, dk and dv go out as packed pairs, not transposed in quads (whose registers
  // made ptxas recompute the first loop's swizzled addresses each iteration).
  EXPECT_EQ(test_support::count_of(source, "pl_p[j] = pl_pack_bf16("), 3u);
  EXPECT_EQ(source.find("*(uint4*)(pl_ref"), std::string::npos);
  // The homes end where the exchange area begins.
  const size_t at = source.find("pl_stage_s = pl_smem + ");
  ASSERT_NE(at, std::string::npos);
  const long homes = std::atol(source.c_str() + at + std::string("pl_stage_s = pl_smem + ").size());
  EXPECT_LE(homes, 112 * 1024) << "the two loops' tiles do not share memory";
  // The dK/dV loop: lse and delta of the next query block are loaded after the iteration's last
  // dot, carried to the next (carried_loads.h), and its body has three barriers (the tiles'
  // arrival, then one after each of the P and dS stores).
  const std::string body = first_loop(source);
  ASSERT_FALSE(body.empty()) << "no loop in the generated source";
  const size_t last_commit = body.rfind("pl_wgmma_commit();");
  ASSERT_NE(last_commit, std::string::npos);
  ASSERT_NE(body.find("pl_ref5["), std::string::npos);
  EXPECT_GT(body.find("pl_ref5["), last_commit);
  EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 3u);
  // P and dS (bfloat16 casts) are packed into their tiles straight from the float32 values: no
  // rounded copy is read by the stores (pack_source).
  size_t stores = 0;
  for (size_t at_store = body.find("*(unsigned*)&"); at_store != std::string::npos;
       at_store = body.find("*(unsigned*)&", at_store + 1), ++stores) {
    const size_t pack = body.find("pl_pack_bf16(", at_store);
    ASSERT_NE(pack, std::string::npos);
    const size_t open = pack + std::string("pl_pack_bf16(").size();
    const std::string packed = body.substr(open, body.find('[', open) - open);
    EXPECT_EQ(body.find(packed + "[s] = pl_round_bf16("), std::string::npos) << packed << " is a rounded copy";
  }
  EXPECT_EQ(stores, 2u);
  // One warpgroup: its index is a constant (descriptors stay uniform).
  EXPECT_EQ(source.find("pl_warpgroup()"), std::string::npos);
  EXPECT_NE(source.find("const int pl_wg = 0;"), std::string::npos);
}

// With PALLADIUM_CUDA_TRANSPOSED_PRODUCTS=1 the same backward computes p and ds transposed (k q^T,
// v dout^T; backends/common/transposed_products.h): dv and dk take them from registers, so the
// dK/dV loop stores no tile and keeps only the barrier of its tiles' arrival; lse and delta are
// loaded by column. Then against float64.
TEST(CudaWgmma, TransposedProductsGiveTheBackwardsDotsTheirAOperandFromRegisters) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv transposed{"PALLADIUM_CUDA_TRANSPOSED_PRODUCTS", "1"};
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const std::string source =
        checked_attention_source("mha_backward", {1, 256, 2, 64}, 37, {.sm_scale = 0.125f, .causal = causal}, true);
    ASSERT_FALSE(source.empty()) << "no generated source";
    const std::string body = first_loop(source);
    ASSERT_FALSE(body.empty()) << "no loop in the generated source";
    EXPECT_EQ(test_support::count_of(body, "_rs_km_bf16(v"), 2u) << body;  // dv and dk
    EXPECT_EQ(test_support::count_of(body, "*(unsigned*)&"), 0u);           // no P or dS tile
    EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 1u);
    EXPECT_NE(body.find("pl_L0_col(s)"), std::string::npos);  // lse by column
  }
}

// With the same switch, a vector both broadcast by column into an mma tile and stored as it is:
// the broadcast loads it by column and the store keeps the reshape it reads (the first form of the
// reload asked every reader of the reshape, read a store's missing result and crashed the
// generator: stop 42 job 3). Against the interpreter.
TEST(CudaWgmma, ColumnReloadKeepsTheReshapeItsOtherReadersNeed) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv transposed{"PALLADIUM_CUDA_TRANSPOSED_PRODUCTS", "1"};
  GeneratedSources sources("column-reload-test");
  auto kernel = [](pl::Ref a, pl::Ref b, pl::Ref bias, pl::Ref o, pl::Ref row) {
    const pl::Value r = bias[pl::all].reshape({1, 64});
    o[pl::all] = pl::dot(a[pl::all], b[pl::all]) + r;
    row[pl::all] = r;
  };
  check_kernel(kernel, {ShapeDtype({64, 64}, f32), ShapeDtype({1, 64}, f32)}, {.name = "column_reload", .debug = true},
               {normal(5, {64, 64}, bf16), normal(6, {64, 64}, bf16), normal(7, {64}, f32)}, 1e-5);
  const std::string source = sources.source("column_reload");
  ASSERT_FALSE(source.empty()) << "no generated source in " << sources.dir();
  // The bias loaded by column: once per column, slots s and s ^ 2 sharing it (emit_reloaded_broadcast).
  EXPECT_NE(source.find("[s ^ 2]; continue; }"), std::string::npos) << source;
}

// MhaBackwardDq::Atomic: five dots per block pair, all on wgmma. Independent dots are issued
// together: dp beside q k^T (early_dots.h; q k^T retired alone, dp where P^T is stored), dv
// running while ds is computed, then dk and dq, which read one dS tile, retired by one wait; the
// dq adds need no barrier and go out as pairs. Then against float64.
TEST(CudaWgmma, AtomicDqBackwardJoinsIndependentDotsAndPairsItsAdds) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  pl::ops::MhaOptions o{.sm_scale = 0.0883f, .causal = true};
  o.backward_dq = pl::ops::MhaBackwardDq::Atomic;
  const std::string source = checked_attention_source("mha_backward_atomic_dq", {1, 256, 2, 128}, 41, o, true);
  ASSERT_FALSE(source.empty()) << "no generated source";
  EXPECT_EQ(test_support::count_of(source, "pl_wgmma_n") - test_support::count_of(source, "void pl_wgmma_n"), 5u);
  const std::string body = first_loop(source);
  ASSERT_FALSE(body.empty()) << "no loop in the generated source";
  EXPECT_EQ(test_support::count_of(body, "pl_wgmma_wait<1>();"), 1u);  // q k^T
  EXPECT_EQ(test_support::count_of(body, "pl_wgmma_wait<0>();"), 3u);  // dp; dv; dk with dq
  EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 3u);     // the tiles' arrival, P^T, dS stored
  EXPECT_NE(body.find("pl_red_add_pair("), std::string::npos);
}

// The causal mask's key span, start_k * block_k + arange(block_k) made a row, is computed in the
// mask's layout from its scalars instead of going through shared memory: the forward's loop keeps
// its one barrier (the tiles' arrival). Then against float64.
TEST(CudaWgmma, CausalSpansAreRecomputedNotExchanged) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv single_role{"PALLADIUM_CUDA_PINGPONG", "0"};
  test_support::ScopedEnv unserved{"PALLADIUM_CUDA_PIPELINE_VARYING", "0"};  // which would serve it anyway
  const std::string source = checked_attention_source(
      "mha_forward", {1, 512, 2, 128}, 45, {.sm_scale = 0.0883f, .causal = true, .block_q = 128, .block_k = 128}, false);
  ASSERT_FALSE(source.empty()) << "no generated source";
  const std::string body = first_loop(source);
  ASSERT_FALSE(body.empty()) << "no loop in the generated source";
  EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 1u);
  EXPECT_EQ(body.find("pl_stage_s"), std::string::npos);
  EXPECT_EQ(source.find("pl_turn_wait"), std::string::npos);
  // Blocks below the diagonal skip the mask (uniform_select.cc): its tiles exist only in the
  // select's mixed branch.
  EXPECT_EQ(test_support::count_of(body, "all true or mixed over the block"), 1u);
  EXPECT_EQ(body.find("bool v"), std::string::npos);
}

// PALLADIUM_CUDA_PINGPONG=1: the forward's two consumer warpgroups take turns at the tensor cores.
// A producer warp fills the ring; a turn begins at p v (a wait) and ends after the next
// iteration's q k^T (a pass), the first q k^T being a turn of its own; the slot goes back on its
// empty barrier at the iteration's end, and no block-wide barrier is left in the loop. Causal and
// not, head_dim 64 (block_k 64) and 128 (block_k 128, whose loop is not software-pipelined),
// against float64.
TEST(CudaWgmma, AttentionForwardWarpgroupsTakeTurns) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv pingpong{"PALLADIUM_CUDA_PINGPONG", "1"};
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      SCOPED_TRACE("head_dim " + std::to_string(d) + (causal ? ", causal" : ""));
      const std::string source = checked_attention_source(
          "mha_forward", {2, 384, 2, d}, 47 + d, {.sm_scale = 0.1f, .causal = causal, .block_q = 128, .block_k = d},
          false);
      ASSERT_FALSE(source.empty()) << "no generated source";
      EXPECT_NE(source.find("if (pl_warp() >= 8)"), std::string::npos) << "no producer warp";
      const std::string body = first_loop(source);
      ASSERT_FALSE(body.empty()) << "no loop in the generated source";
      EXPECT_EQ(test_support::count_of(body, "pl_turn_wait(pl_wg);"), 2u);
      EXPECT_EQ(test_support::count_of(body, "pl_turn_pass(pl_wg);"), 1u);
      const size_t first_wait = body.find("pl_turn_wait(pl_wg);");  // q k^T's: on the first iteration only
      const std::string wait_line = body.substr(body.rfind('\n', first_wait) + 1, first_wait - body.rfind('\n', first_wait));
      EXPECT_NE(wait_line.find("if ("), std::string::npos) << wait_line;
      EXPECT_EQ(test_support::count_of(body, "pl_mbar_arrive(&pl_empty0["), 1u);
      EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 0u);
      EXPECT_EQ(test_support::count_of(body, "pl_consumer_barrier"), 0u);
      // The first turn handed over before the loop; after it, the last turns ended and taken back.
      const size_t loop = source.find(body);
      EXPECT_LT(source.find("pl_turn_pass(1);"), loop);
      EXPECT_GT(source.find("pl_turn_pass(pl_warp() >> 2);"), loop);
      EXPECT_GT(source.find("pl_turn_wait(0);"), loop);
    }
}

// Where the programs' loops run longer along the axis walked fastest (the causal forward: its loop
// runs to its q block), the forward is persistent by default where its programs number at least
// 128 (length - 1), and its launch takes a block count coprime to that axis's length, provided the
// programs give every block at least length - 1 of them (balanced_blocks);
// PALLADIUM_CUDA_PERSISTENT=alike keeps it a block per program (stop 39's choice), as do fewer
// programs. The resident count capped at 8: 128 programs of 2 q blocks run on 7 blocks, each
// walking both q blocks in turn; 64 programs of 4 q blocks are not persistent. Against float64
// (on a GPU).
TEST(CudaWgmma, CausalForwardRunsPersistentAtABalancedBlockCount) {
  EXPECT_EQ(cuda::balanced_blocks(4096, 132, 16), 131);
  EXPECT_EQ(cuda::balanced_blocks(2048, 132, 16), 131);   // 131 * 15 = 1965 programs walk every q block
  EXPECT_EQ(cuda::balanced_blocks(2048, 264, 16), 2048);  // 263 blocks would get under 15 programs each
  EXPECT_EQ(cuda::balanced_blocks(4096, 132, 64), 4096);
  EXPECT_EQ(cuda::balanced_blocks(2000, 130, 15), 128);   // 130 and 129 share a factor with 15
  EXPECT_EQ(cuda::balanced_blocks(48, 8, 4), 7);
  EXPECT_EQ(cuda::balanced_blocks(20, 1, 16), 1);
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "8"};
  int index = 0;
  struct Variant {
    std::string mode;
    Shape shape;
    bool persistent;
  };
  for (const Variant& v : {Variant{"", {4, 256, 16, 128}, true}, Variant{"alike", {4, 256, 16, 128}, false},
                           Variant{"", {1, 512, 16, 128}, false}}) {
    SCOPED_TRACE("PALLADIUM_CUDA_PERSISTENT='" + v.mode + "', " + shape_str(v.shape));
    test_support::ScopedEnv persist{"PALLADIUM_CUDA_PERSISTENT", v.mode};
    const std::string source = checked_attention_source(
        "mha_forward", v.shape, 97 + static_cast<uint64_t>(index),
        {.sm_scale = 0.121f + 0.001f * static_cast<float>(index), .causal = true, .block_q = 128, .block_k = 64}, false);
    ++index;
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_NE(source.find("pl_regs_increase<240>();"), std::string::npos) << "no producer warpgroup";
    EXPECT_EQ(source.find("for (long long pl_block = pl_first_block;") != std::string::npos, v.persistent);
  }
}

// A block per program walks the causal forward's q blocks backwards, longest first (the loop of
// q block i runs to key block i); PALLADIUM_CUDA_LONGEST_FIRST=0 keeps the forward order, as do
// the non-causal forward (its programs alike) and the persistent kernel (its balanced stride).
// The head_dim 64 forward at blocks 128 x 64 has no producer (two programs per SM): its ring loop
// decides alike. Each variant against float64, compiled without serialised wgmma.
TEST(CudaWgmma, CausalForwardBlocksStartWithTheLongestPrograms) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "8"};
  struct Variant {
    std::string longest_first;
    bool causal;
    Shape shape;
    bool persistent, reversed;
  };
  const std::string reversed_decode = "const int pl_pid0 = 3 - (int)(pl_rest % 4ll);";  // 512 / 128 q blocks
  int index = 0;
  for (const Variant& v : {Variant{"", true, {1, 512, 16, 128}, false, true},
                           Variant{"0", true, {1, 512, 16, 128}, false, false},
                           Variant{"", false, {1, 512, 16, 128}, true, false},
                           Variant{"", true, {4, 256, 16, 128}, true, false},
                           Variant{"", true, {1, 512, 16, 64}, false, true},
                           Variant{"0", true, {1, 512, 16, 64}, false, false},
                           Variant{"", false, {1, 512, 16, 64}, false, false}}) {
    SCOPED_TRACE("PALLADIUM_CUDA_LONGEST_FIRST='" + v.longest_first + "', causal " + std::to_string(v.causal) + ", " +
                 shape_str(v.shape));
    test_support::ScopedEnv order{"PALLADIUM_CUDA_LONGEST_FIRST", v.longest_first};
    const std::string source = checked_attention_source(
        "mha_forward", v.shape, 131 + static_cast<uint64_t>(index),
        {.sm_scale = 0.117f + 0.002f * static_cast<float>(index), .causal = v.causal, .block_q = 128, .block_k = 64}, false);
    ++index;
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_EQ(source.find("for (long long pl_block = pl_first_block;") != std::string::npos, v.persistent);
    EXPECT_EQ(source.find(reversed_decode) != std::string::npos, v.reversed);
    EXPECT_EQ(source.find(" - (int)(pl_rest %") != std::string::npos, v.reversed);
    expect_wgmma_unserialised(source);
  }
}

// A three-slot ring that the consumers fill (the head_dim 64 forward at blocks 128 x 64) carries
// its slot through the loop: no remainder by 3 in the loop (the wait's slot, the next round's
// i + 2 and the tiles' homes read the carried one), one wrap-around update at its end;
// PALLADIUM_CUDA_CARRIED_SLOTS=0 computes each slot as (i - lo) % 3 again. Both causal (the loop
// runs a different length in each program; a scale of its own each, so that neither reuses the
// other's compiled kernel), against float64, compiled without serialised wgmma or spills.
TEST(CudaWgmma, ThreeSlotRingsCarryTheirSlot) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (const std::string carried : {"", "0"}) {
    SCOPED_TRACE("PALLADIUM_CUDA_CARRIED_SLOTS='" + carried + "'");
    test_support::ScopedEnv slots{"PALLADIUM_CUDA_CARRIED_SLOTS", carried};
    const std::string source = checked_attention_source(
        "mha_forward", {1, 512, 4, 64}, carried.empty() ? 151 : 157,
        {.sm_scale = carried.empty() ? 0.131f : 0.137f, .causal = true, .block_q = 128, .block_k = 64}, false);
    ASSERT_FALSE(source.empty()) << "no generated source";
    const std::string loop = first_loop(source);
    ASSERT_FALSE(loop.empty()) << "no loop";
    EXPECT_EQ(loop.find("% 3)") == std::string::npos, carried.empty()) << loop.substr(0, 2000);
    EXPECT_EQ(loop.find(" == 2u ? 0u : pl_slot") != std::string::npos, carried.empty());
    EXPECT_EQ(loop.find("(pl_slot") != std::string::npos && loop.find(" + 2u) >= 3u ? ") != std::string::npos,
              carried.empty());
    expect_wgmma_unserialised(source);
  }
}

// The default ping-pong: in the software-pipelined forward loop the two consumer
// warpgroups take turns at issuing the next q k^T and this p v (one wait before the pair, one pass
// after it); the prologue's first q k^T is a turn of its own. Warpgroup 1 hands over the first
// turn before the prologue, and warpgroup 0 takes back its last pass after the loop. Head_dim 128,
// blocks 128 x 128 (persistent) causal and not, and 128 x 64 causal, against float64.
TEST(CudaWgmma, PipelinedAttentionWarpgroupsTakeTurns) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "3"};
  for (const auto& [block_k, causal] : {std::pair<int64_t, bool>{128, false}, std::pair<int64_t, bool>{128, true},
                                        std::pair<int64_t, bool>{64, true}}) {
    SCOPED_TRACE("block_k " + std::to_string(block_k) + (causal ? ", causal" : ""));
    const std::string source = checked_attention_source(
        "mha_forward", {2, 512, 2, 128}, 83 + block_k + (causal ? 1 : 0),
        {.sm_scale = 0.097f, .causal = causal, .block_q = 128, .block_k = block_k}, false);
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_NE(source.find("pl_wgmma_wait<1>"), std::string::npos) << "not software-pipelined";
    EXPECT_NE(source.find("pl_regs_increase<240>();"), std::string::npos) << "no producer warpgroup";
    const std::string body = first_loop(source);
    ASSERT_FALSE(body.empty()) << "no loop in the generated source";
    EXPECT_EQ(test_support::count_of(body, "pl_turn_wait(pl_warp() >> 2);"), 1u);
    EXPECT_EQ(test_support::count_of(body, "pl_turn_pass(pl_wg);"), 1u);
    EXPECT_EQ(test_support::count_of(body, "pl_turn_wait(pl_wg);"), 0u);
    // In the body the first wgmma issued is the next q k^T, the last this p v (pl_wgmma_n<N>_...).
    const size_t wait = body.find("pl_turn_wait(pl_warp() >> 2);"), pass = body.find("pl_turn_pass(pl_wg);");
    EXPECT_LT(wait, body.find("pl_wgmma_n")) << "the turn begins after the next q k^T's issue";
    EXPECT_GT(pass, body.rfind("pl_wgmma_n")) << "the turn ends before p v's issue";
    EXPECT_LT(pass, body.rfind("pl_wgmma_commit();")) << "p v's commit group closes after the turn";
    const size_t loop = source.find(body);
    const size_t handover = source.find("if ((pl_warp() >> 2) == 1) pl_turn_pass(1);");
    const size_t prologue_wait = source.find("pl_turn_wait(pl_warp() >> 2);");
    EXPECT_LT(handover, prologue_wait);
    EXPECT_LT(prologue_wait, loop);
    EXPECT_EQ(test_support::count_of(source, "pl_turn_pass(pl_warp() >> 2);"), 1u) << "the prologue's pass";
    EXPECT_GT(source.find("if ((pl_warp() >> 2) == 0) pl_turn_wait(0);"), loop);
    expect_wgmma_unserialised(source);
  }
}

// The forward's q block, a home the producer loads, goes back once the last q k^T is retired: at
// the end of iteration hi - 2 (a loop of one iteration: in the prologue; of none: after it), so
// that the producer brings in the next program's q while this program's last iteration runs;
// PALLADIUM_CUDA_EARLY_HOME_RELEASE=0 gives it back after the loop. 16 programs on 3 blocks, causal
// (loops of one to four iterations) and not, each form against float64 (on a GPU).
TEST(CudaWgmma, ForwardGivesItsQBlockBackAfterTheLastQkT) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv blocks{"PALLADIUM_CUDA_PERSISTENT_BLOCKS", "3"};
  int index = 0;
  for (const std::string early : {"", "0"})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "not causal") + ", PALLADIUM_CUDA_EARLY_HOME_RELEASE='" + early + "'");
      test_support::ScopedEnv early_env{"PALLADIUM_CUDA_EARLY_HOME_RELEASE", early};
      // A scale of its own per variant: the ops library caches its calls by their options.
      const std::string source = checked_attention_source(
          "mha_forward", {2, 512, 2, 128}, 131 + 5 * static_cast<uint64_t>(index),
          {.sm_scale = 0.089f + 0.001f * static_cast<float>(index), .causal = causal, .block_q = 128, .block_k = 128},
          false);
      ++index;
      ASSERT_FALSE(source.empty()) << "no generated source";
      ASSERT_NE(source.find("pl_mbar_wait(pl_home_bar0, pl_home_phase);"), std::string::npos) << "no home from the producer";
      const std::string body = first_loop(source);
      ASSERT_FALSE(body.empty()) << "no loop in the generated source";
      const size_t loop = source.find(body);
      const bool early_on = early.empty();
      const std::string give_back = "pl_mbar_arrive(pl_home_empty0);";
      EXPECT_EQ(body.find(" + 2 == ") != std::string::npos && body.find(give_back) != std::string::npos, early_on);
      EXPECT_EQ(source.substr(0, loop).find(give_back) != std::string::npos, early_on) << "the prologue's release";
      const size_t after = source.find(give_back, loop + body.size());
      ASSERT_NE(after, std::string::npos) << "no release after the loop";
      const size_t line_start = source.rfind('\n', after) + 1;
      const std::string after_line = source.substr(line_start, after - line_start);
      EXPECT_EQ(after_line.find(" <= ") != std::string::npos, early_on) << after_line;  // only where the loop ran none
      expect_wgmma_unserialised(source);
    }
}

// Two programs add their halves of K, a wgmma accumulator whose old values nobody reads, into the
// same 40 columns of rows of 41 floats from column `col`; against the interpreter. The source.
std::string checked_accumulator_adds(int64_t col, const std::string& name) {
  GeneratedSources sources("atomic-" + name);
  auto kernel = [col](pl::Ref x, pl::Ref y, pl::Ref, pl::Ref o) {
    pl::atomic_add(o, pl::idx(pl::slice(), pl::ds(col, 40)), pl::dot(x[pl::all], y[pl::all]));
  };
  check_kernel(kernel, {ShapeDtype({64, 41}, f32)},
               {.grid = {2},
                .in_specs = {BlockSpec({64, 32}, [](Index i) { return idx(0, i); }),
                             BlockSpec({32, 40}, [](Index i) { return idx(i, 0); }), BlockSpec()},
                .out_specs = {BlockSpec()},
                .input_output_aliases = {{2, 0}},
                .name = name,
                .debug = true},
               {normal(51, {64, 64}, bf16), normal(52, {64, 40}, bf16), normal(53, {64, 41})});
  return sources.source(name);
}

// Adjacent columns go out as one red.global.add.v2.f32 where the pair is aligned (from column 0)
// and element by element where not (from column 1).
TEST(CudaWgmma, AtomicAddsOfAnAccumulatorPairUp) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (int64_t col : {0, 1}) {
    SCOPED_TRACE("first column " + std::to_string(col));
    const std::string source = checked_accumulator_adds(col, "atomic_pairs");
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_NE(source.find("pl_red_add_pair("), std::string::npos);
    EXPECT_NE(source.find("(void)pl_atomic_add(&"), std::string::npos);  // edges and misaligned pairs
  }
}

// Rows of an even length: each program decides once whether its whole 64 x 40 tile lies inside
// the array and starts 8-byte aligned, then adds its pairs with no test per pair (twice, two
// reductions in one block); the second program's block runs past the array's 100 rows and takes
// the per-pair path. Against the
// interpreter, whose edge rule drops the rows past the end; rows of 41 floats (odd: pairs in odd
// rows are misaligned) keep the per-pair tests only, and PALLADIUM_CUDA_WHOLE_TILE_REDUCTIONS=0
// turns the whole-tile test off.
TEST(CudaWgmma, AtomicAddsOfAWholeAccumulatorTileAreTestedOnce) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (const char* whole : {"1", "0"}) {
    for (int64_t cols : {40, 41}) {
      SCOPED_TRACE(std::string("whole-tile switch ") + whole + ", rows of " + std::to_string(cols));
      test_support::ScopedEnv env("PALLADIUM_CUDA_WHOLE_TILE_REDUCTIONS", whole);
      const std::string name = "tile_adds_" + std::string(whole) + "_" + std::to_string(cols);
      GeneratedSources sources("atomic-" + name);
      auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref, pl::Ref o) {
        const pl::Value d = pl::dot(x[pl::all], y[pl::all]);
        pl::atomic_add(o, pl::idx(pl::slice(), pl::ds(0, 40)), d);
        pl::atomic_add(o, pl::idx(pl::slice(), pl::ds(0, 40)), d * 0.5f);
      };
      check_kernel(kernel, {ShapeDtype({100, cols}, f32)},
                   {.grid = {2},
                    .in_specs = {BlockSpec({64, 32}, [](Index i) { return idx(i, 0); }), BlockSpec(),
                                 BlockSpec({64, cols}, [](Index i) { return idx(i, 0); })},
                    .out_specs = {BlockSpec({64, cols}, [](Index i) { return idx(i, 0); })},
                    .input_output_aliases = {{2, 0}},
                    .name = name,
                    .debug = true},
                   {normal(54, {100, 32}, bf16), normal(55, {32, 40}, bf16), normal(56, {100, cols})});
      const std::string source = sources.source(name);
      ASSERT_FALSE(source.empty()) << "no generated source";
      const bool once = std::string(whole) == "1" && cols % 2 == 0;
      EXPECT_EQ(test_support::count_of(source, "if (pl_whole)"), once ? 2u : 0u) << source;
      EXPECT_NE(source.find("pl_red_add_pair("), std::string::npos);
      EXPECT_NE(source.find("(void)pl_atomic_add(&"), std::string::npos);  // the edge block's path
    }
  }
}

// PALLADIUM_CUDA_BULK_REDUCE=1: the same atomic adds through shared memory, one TMA bulk reduction
// per row where the row is inside the array and 16-byte aligned (rows of 41 floats from column 0:
// one in four), element by element from shared memory elsewhere (from column 1: every row); each
// warp holds whole rows of the tile and stages and reduces its own. In the atomic-dq backward the
// reduction waits for its staging rows to be read before rewriting them, adds no block-wide
// barrier to the loop's three, and every thread waits for its reductions before the block ends.
TEST(CudaWgmma, BulkReductionsAddAccumulatorRowsThroughSharedMemory) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  test_support::ScopedEnv bulk("PALLADIUM_CUDA_BULK_REDUCE", "1");
  for (int64_t col : {0, 1}) {
    SCOPED_TRACE("first column " + std::to_string(col));
    const std::string source = checked_accumulator_adds(col, "bulk_rows");
    ASSERT_FALSE(source.empty()) << "no generated source";
    EXPECT_NE(source.find("pl_bulk_reduce_add((float*)"), std::string::npos);
    EXPECT_NE(source.find("pl_atomic_add(&pl_ref3[pl_g0 * 41 + pl_g1], pl_row[pl_c])"), std::string::npos);
    EXPECT_EQ(source.find("pl_red_add_pair("), std::string::npos);
    EXPECT_NE(source.find("(each warp its own rows)"), std::string::npos);
  }
  pl::ops::MhaOptions o{.sm_scale = 0.0883f, .causal = true};
  o.backward_dq = pl::ops::MhaBackwardDq::Atomic;
  const std::string source = checked_attention_source("mha_backward_atomic_dq", {1, 256, 2, 64}, 43, o, true);
  ASSERT_FALSE(source.empty()) << "no generated source";
  const std::string body = first_loop(source);
  ASSERT_FALSE(body.empty()) << "no loop in the generated source";
  const size_t read = body.find("pl_bulk_wait_read();"), reduce = body.find("pl_bulk_reduce_add(");
  ASSERT_NE(read, std::string::npos) << body;
  ASSERT_NE(reduce, std::string::npos) << body;
  EXPECT_LT(read, reduce);
  EXPECT_NE(body.find("pl_bulk_commit();"), std::string::npos);
  EXPECT_EQ(test_support::count_of(body, "__syncthreads();"), 3u);  // the tiles' arrival, P^T, dS stored
  const size_t wait_all = source.rfind("pl_bulk_wait_all();");
  ASSERT_NE(wait_all, std::string::npos);
  EXPECT_GT(wait_all, source.rfind("pl_bulk_commit();"));
}

TEST(CudaWgmma, AttentionForwardAndBackward) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (bool causal : {false, true}) for (int warps : {0, 8}) {
    SCOPED_TRACE(std::string(causal ? "causal " : "") + "num_warps " + std::to_string(warps));
    const Shape shape{2, 256, 2, 64};
    Array q = normal(5, shape, bf16), k = normal(6, shape, bf16), v = normal(7, shape, bf16), dout = normal(8, shape, bf16);
    pl::ops::MhaOptions o{.sm_scale = 0.125f, .causal = causal, .block_q = 64, .block_k = 64, .backend = "cuda"};
    o.num_warps = warps;  // 0: the backend's choice; 8: the benchmark's backward variant
    expect_attention_matches_reference(q, k, v, Array(), dout, o);
    // The benchmark's forward blocks: 128 query rows, two warpgroups.
    pl::ops::MhaOptions f{.sm_scale = 0.125f, .causal = causal, .block_q = 128, .block_k = 64, .backend = "cuda"};
    expect_attention_matches_reference(q, k, v, Array(), Array(), f);
  }
}

}  // namespace
}  // namespace palladium::cudatest
