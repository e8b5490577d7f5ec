// Each instruction set's GEMM path on this machine: kernels are compiled for the CPU they run on
// (-march=native), and PALLADIUM_CPU_CXXFLAGS narrows that, so both AVX-512 geometries, the AVX2
// micro-kernel (its k loop in assembly) and the baseline x86-64 path are tested on an AVX-512 machine. Shapes
// cross every cache block (KC up to 512, MC, NC) and micro-tile edge; results are compared with
// float64 products and with the interpreter.
#include "tests/cpu/cpu_test_util.h"

namespace palladium::cpu_test {
namespace {

using pl::Ref;
using pl::Value;
using test_support::ScopedEnv;
namespace jnp = pl::jnp;

struct Isa {
  const char* name;
  const char* flags;  // appended after -march=native
  bool (*runs_here)();
};

bool always() { return true; }
bool has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
bool has_avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
bool is_x86() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

const Isa kIsas[] = {{"native", "", &always},
                     {"avx512 6x64", "-DPL_GEMM_AVX512_TILE=1", &has_avx512},
                     {"avx512 8x32", "-DPL_GEMM_AVX512_TILE=2", &has_avx512},
                     {"avx2", "-mno-avx512f", &has_avx2},
                     {"x86-64 baseline", "-march=x86-64 -mtune=generic", &is_x86}};

class CpuInstructionSets : public ::testing::TestWithParam<Isa> {};

TEST_P(CpuInstructionSets, DotMatchesFloat64AndTheInterpreter) {
  const Isa& isa = GetParam();
  if (!isa.runs_here()) GTEST_SKIP() << isa.name << " does not run on this machine";
  ScopedEnv flags("PALLADIUM_CPU_CXXFLAGS", isa.flags);
  pl::cpu::clear_memory_cache();  // compile again under these flags (the disk key holds them)
  Random rng;
  // 200 x 1100 x 140: K crosses KC (384 and 512) twice, M crosses MC, N is no multiple of NR.
  constexpr int64_t m = 200, k = 1100, n = 140;
  pl::Array a = rng.normal({m, k}), b = rng.normal({k, n}), c = rng.normal({m, n});
  pl::Array a16 = a.astype(pl::bf16), b16 = b.astype(pl::bf16);
  auto kernel = [](Ref a_ref, Ref b_ref, Ref c_ref, Ref a16_ref, Ref b16_ref, Ref o_plain, Ref o_acc, Ref o_t, Ref o_16) {
    o_plain[pl::all] = pl::dot(a_ref[pl::all], b_ref[pl::all]);
    o_acc[pl::all] = c_ref[pl::all] + pl::dot(a_ref[pl::all], b_ref[pl::all]);
    o_t[pl::all] = pl::dot(b_ref[pl::all], a_ref[pl::all], true, true) * 1.0f;  // (A B)^T, not stored directly
    o_16[pl::all] = pl::dot(a16_ref[pl::all], b16_ref[pl::all]);
  };
  const pl::ShapeDtype out({m, n}, pl::f32), out_t({n, m}, pl::f32);
  auto [cpu, interp] = run_both(kernel, {out, out, out_t, out}, {.name = std::string("isa_dot_") + isa.name},
                                {a, b, c, a16, b16});
  const pl::Array ref = pl::matmul(a.astype(pl::f64), b.astype(pl::f64));
  const pl::Array ref16 = pl::matmul(a16.astype(pl::f64), b16.astype(pl::f64));
  EXPECT_TRUE(close(cpu[0], ref, 1e-6));
  EXPECT_TRUE(close(cpu[1], pl::add(ref, c.astype(pl::f64)), 1e-6));
  EXPECT_TRUE(close(cpu[2], pl::transpose(ref), 1e-6));
  EXPECT_TRUE(close(cpu[3], ref16, 1e-6));
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(close(cpu[i], interp[i], 1e-6)) << "output " << i;
  pl::cpu::clear_memory_cache();  // later tests compile for the native instruction set again
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuInstructionSets, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           std::string name = param_info.param.name;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace palladium::cpu_test
