// Each build of the library's GEMM (src/backends/cpu/gemm) that this CPU can run, chosen through
// PALLADIUM_CPU_GEMM: on an AVX-512 machine both AVX-512 geometries, the AVX2 micro-kernel (its k
// loop in assembly) and the baseline path are all tested. Shapes
// cross every cache block (KC up to 512, MC, NC) and micro-tile edge; results are compared with
// float64 products and with the interpreter.
#include "backends/cpu/gemm/gemm_dispatch.h"
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
using test_support::ScopedEnv;
namespace jnp = pl::jnp;

class CpuGemmBuilds : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuGemmBuilds, DotMatchesFloat64AndTheInterpreter) {
  const std::string build = GetParam();
  ScopedEnv choose("PALLADIUM_CPU_GEMM", build);
  try {
    EXPECT_EQ(pl::cpu::gemm_for_this_cpu().name, build);  // the run below uses this build
  } catch (const pl::Error& e) {
    GTEST_SKIP() << e.what();  // an instruction set this CPU lacks
  }
  Random rng;
  // 200 x 1100 x N: K crosses KC (256, 384 and 512) twice and M crosses MC; N = 140 is no multiple
  // of NR (B packed panel by panel, with edges), N = 192 is one of every NR (B packed by rows).
  for (const int64_t n : {140, 192}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    constexpr int64_t m = 200, k = 1100;
    pl::Array a = rng.normal({m, k}), b = rng.normal({k, n}), c = rng.normal({m, n});
    pl::Array a16 = a.astype(pl::bf16), b16 = b.astype(pl::f16);
    auto kernel = [](Ref a_ref, Ref b_ref, Ref c_ref, Ref a16_ref, Ref b16_ref, Ref o_plain, Ref o_acc, Ref o_t, Ref o_16) {
      o_plain[pl::all] = pl::dot(a_ref[pl::all], b_ref[pl::all]);
      o_acc[pl::all] = c_ref[pl::all] + pl::dot(a_ref[pl::all], b_ref[pl::all]);
      o_t[pl::all] = pl::dot(b_ref[pl::all], a_ref[pl::all], true, true) * 1.0f;  // (A B)^T, not stored directly
      o_16[pl::all] = pl::dot(a16_ref[pl::all], b16_ref[pl::all]);
    };
    const pl::ShapeDtype out({m, n}, pl::f32), out_t({n, m}, pl::f32);
    auto [cpu, interp] = run_both(kernel, {out, out, out_t, out}, {.name = "gemm_build_dot"}, {a, b, c, a16, b16});
    const pl::Array ref = pl::matmul(a.astype(pl::f64), b.astype(pl::f64));
    const pl::Array ref16 = pl::matmul(a16.astype(pl::f64), b16.astype(pl::f64));
    EXPECT_TRUE(close(cpu[0], ref, 1e-6));
    EXPECT_TRUE(close(cpu[1], pl::add(ref, c.astype(pl::f64)), 1e-6));
    EXPECT_TRUE(close(cpu[2], pl::transpose(ref), 1e-6));
    EXPECT_TRUE(close(cpu[3], ref16, 1e-6));
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(close(cpu[i], interp[i], 1e-6)) << "output " << i;
  }
}

TEST_P(CpuGemmBuilds, SmallProductsComputedDirectly) {
  // Products of a few thousand multiply-adds skip packing (gemm_small): blocks that overhang the
  // array (rows 8..15 of 10), a transposed operand (B given as rows of N x K, the paged decode's
  // q k^T: copied into rows first where it has at most 4096 elements, in float32 and in float16,
  // and summed element by element where larger, 60 x 80), contiguous B rows, accumulation and
  // 16-bit operands, against float64 and the interpreter.
  const std::string build = GetParam();
  ScopedEnv choose("PALLADIUM_CPU_GEMM", build);
  try {
    EXPECT_EQ(pl::cpu::gemm_for_this_cpu().name, build);
  } catch (const pl::Error& e) {
    GTEST_SKIP() << e.what();
  }
  Random rng;
  constexpr int64_t m = 10, k = 24, n = 13, bm = 8, k2 = 80, n2 = 60;
  pl::Array a = rng.normal({m, k}), bt = rng.normal({n, k}), b = rng.normal({k, n}), c = rng.normal({m, n});
  pl::Array a16 = a.astype(pl::bf16), b16 = b.astype(pl::f16), bt16 = bt.astype(pl::f16);
  pl::Array a2 = rng.normal({m, k2}), bt2 = rng.normal({n2, k2});
  auto kernel = [](Ref a_ref, Ref bt_ref, Ref b_ref, Ref c_ref, Ref a16_ref, Ref b16_ref, Ref bt16_ref, Ref a2_ref,
                   Ref bt2_ref, Ref o_t, Ref o_acc, Ref o_16, Ref o_t16, Ref o_t2) {
    o_t[pl::all] = pl::dot(a_ref[pl::all], bt_ref[pl::all], false, true);
    o_acc[pl::all] = c_ref[pl::all] + pl::dot(a_ref[pl::all], b_ref[pl::all]);
    o_16[pl::all] = pl::dot(a16_ref[pl::all], b16_ref[pl::all]);
    o_t16[pl::all] = pl::dot(a16_ref[pl::all], bt16_ref[pl::all], false, true);
    o_t2[pl::all] = pl::dot(a2_ref[pl::all], bt2_ref[pl::all], false, true);
  };
  auto rows = [](int64_t width) { return pl::BlockSpec({bm, width}, [](pl::Index i) { return pl::idx(i, 0); }); };
  auto whole = [](int64_t r, int64_t w) { return pl::BlockSpec({r, w}, [](pl::Index) { return pl::idx(0, 0); }); };
  const pl::ShapeDtype out({m, n}, pl::f32), out2({m, n2}, pl::f32);
  pl::CallOptions o{.grid = {2},
                    .in_specs = {rows(k), whole(n, k), whole(k, n), rows(n), rows(k), whole(k, n), whole(n, k), rows(k2),
                                 whole(n2, k2)},
                    .out_specs = {rows(n), rows(n), rows(n), rows(n), rows(n2)},
                    .name = "gemm_small"};
  auto [cpu, interp] = run_both(kernel, {out, out, out, out, out2}, o, {a, bt, b, c, a16, b16, bt16, a2, bt2});
  const pl::Array ref_t = pl::matmul(a.astype(pl::f64), pl::transpose(bt.astype(pl::f64)));
  const pl::Array ref = pl::matmul(a.astype(pl::f64), b.astype(pl::f64));
  EXPECT_TRUE(close(cpu[0], ref_t, 1e-6));
  EXPECT_TRUE(close(cpu[1], pl::add(ref, c.astype(pl::f64)), 1e-6));
  EXPECT_TRUE(close(cpu[2], pl::matmul(a16.astype(pl::f64), b16.astype(pl::f64)), 1e-6));
  EXPECT_TRUE(close(cpu[3], pl::matmul(a16.astype(pl::f64), pl::transpose(bt16.astype(pl::f64))), 1e-6));
  EXPECT_TRUE(close(cpu[4], pl::matmul(a2.astype(pl::f64), pl::transpose(bt2.astype(pl::f64))), 1e-6));
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(close(cpu[i], interp[i], 1e-6)) << "output " << i;
}

TEST(CpuGemmBuilds, EveryInstructionSetIsBuiltOnX86) {
#if defined(__x86_64__)
  EXPECT_EQ(pl::cpu::gemm_builds(), (std::vector<std::string>{"avx512-8x32", "avx512-6x64", "avx2", "baseline"}));
#else
  EXPECT_EQ(pl::cpu::gemm_builds(), (std::vector<std::string>{"baseline"}));
#endif
}

TEST(CpuGemmBuilds, UnknownBuildNameIsAnError) {
  ScopedEnv choose("PALLADIUM_CPU_GEMM", "avx1024");
  Random rng;
  pl::Array a = rng.normal({8, 8});
  auto f = pl::pallas_call([](Ref x, Ref y, Ref o) { o[pl::all] = pl::dot(x[pl::all], y[pl::all]); },
                           pl::ShapeDtype({8, 8}, pl::f32), {.name = "gemm_env", .backend = "cpu"});
  PL_EXPECT_ERROR(f(a, a), "PALLADIUM_CPU_GEMM='avx1024' names no GEMM build of this library; builds: ");
}

INSTANTIATE_TEST_SUITE_P(Builds, CpuGemmBuilds, ::testing::ValuesIn(pl::cpu::gemm_builds()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace palladium::cpu_test
