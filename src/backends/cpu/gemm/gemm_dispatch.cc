// Choosing the GEMM build for the CPU (gemm_dispatch.h).
#include "backends/cpu/gemm/gemm_dispatch.h"

#include <cstdlib>

#include "palladium/error.h"

namespace palladium::cpu {

namespace {

struct GemmBuild {
  const char* name;
  GemmFunction run;
  bool (*runs_here)();
};

bool always() { return true; }
#if defined(__x86_64__)
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
#endif

// Best first: the first build that runs here is the default, except that AMD's AVX-512 prefers
// the 6 x 64 tile (see blocked_gemm.h).
const GemmBuild kBuilds[] = {
#if defined(__x86_64__)
    {"avx512-8x32", &gemm_avx512_8x32, &has_avx512},
    {"avx512-6x64", &gemm_avx512_6x64, &has_avx512},
    {"avx2", &gemm_avx2, &has_avx2},
#endif
    {"baseline", &gemm_baseline, &always},
};

const GemmBuild& default_build() {
  static const GemmBuild& chosen = []() -> const GemmBuild& {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (has_avx512() && __builtin_cpu_is("amd")) return kBuilds[1];
#endif
    for (const GemmBuild& b : kBuilds)
      if (b.runs_here()) return b;
    return kBuilds[sizeof(kBuilds) / sizeof(kBuilds[0]) - 1];
  }();
  return chosen;
}

}  // namespace

GemmChoice gemm_for_this_cpu() {
  const char* wanted = std::getenv("PALLADIUM_CPU_GEMM");
  if (!wanted || !*wanted) return {default_build().run, default_build().name};
  std::string names;
  for (const GemmBuild& b : kBuilds) {
    if (std::string(b.name) == wanted) {
      if (!b.runs_here())
        throw Error(std::string("PALLADIUM_CPU_GEMM=") + wanted + ": this CPU cannot run that build (its instruction set is missing)");
      return {b.run, b.name};
    }
    names += std::string(names.empty() ? "" : ", ") + b.name;
  }
  throw Error(std::string("PALLADIUM_CPU_GEMM='") + wanted + "' names no GEMM build of this library; builds: " + names);
}

std::vector<std::string> gemm_builds() {
  std::vector<std::string> out;
  for (const GemmBuild& b : kBuilds) out.push_back(b.name);
  return out;
}

}  // namespace palladium::cpu
