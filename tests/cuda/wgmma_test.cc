// The wgmma path (Hopper warpgroup MMA, the default for 16-bit dots on sm_90a; forced on here): the dot shapes and
// orientations it takes, in loops with prefetched operands, and the attention kernels (whose
// backward mixes wgmma dots with mma.sync ones over shared operand tiles). Without a GPU the
// kernels are compiled for sm_90a by NVRTC, so the wgmma code generation is checked there too.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ops/attention.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {
namespace {

// wgmma is the default on sm_90a; forcing it keeps these tests meaningful if a user turned it off.
struct WgmmaOn {
  test_support::ScopedEnv env{"PALLADIUM_CUDA_WGMMA", "1"};
};

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

TEST(CudaWgmma, MatmulKLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  for (int64_t bn : {128, 256}) {
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
                              .backend = be,
                              .compiler_params = {.num_warps = 8}});
    };
    expect_cuda_matches(make, {normal(3, {m, k}, bf16), normal(4, {k, n}, bf16)}, 1e-2);
  }
}

// The software-pipelined loop (dot_pipeline.cc) where it applies, the attention forward at
// head_dim 128 and block_k 64 (a program has its SM to itself): present in the generated source,
// absent with PALLADIUM_CUDA_PIPELINE=0, and both kernels match the float64 reference.
TEST(CudaWgmma, PipelinedAttentionLoop) {
  PL_REQUIRE_NVRTC();
  WgmmaOn on;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("pl-pipeline-test-" + std::to_string(::getpid()))).string();
  test_support::ScopedEnv debug_dir{"PALLADIUM_DEBUG_DIR", dir};
  const Shape shape{1, 512, 2, 128};
  Array q = normal(21, shape, bf16), k = normal(22, shape, bf16), v = normal(23, shape, bf16);
  for (bool pipelined : {true, false}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "not pipelined");
    test_support::ScopedEnv pipe{"PALLADIUM_CUDA_PIPELINE", pipelined ? "1" : "0"};
    std::filesystem::remove_all(dir);
    // Distinct scales: ops keeps one pallas_call per configuration.
    pl::ops::MhaOptions o{.sm_scale = pipelined ? 0.0884f : 0.0885f, .causal = true, .block_q = 128, .block_k = 64,
                          .backend = "cuda", .debug = true};
    Array got = pl::ops::mha(q, k, v, Array(), o);
    std::ifstream file(dir + "/pl_mha_forward.cu");
    std::stringstream source;
    source << file.rdbuf();
    ASSERT_FALSE(source.str().empty()) << "no generated source in " << dir;
    EXPECT_EQ(source.str().find("pl_wgmma_wait<1>") != std::string::npos, pipelined);
    EXPECT_LT(rel_error(to_host(got), pl::ops::mha_reference(q, k, v, Array(), o.sm_scale, o.causal).out), 5e-3);
  }
  std::filesystem::remove_all(dir);
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
