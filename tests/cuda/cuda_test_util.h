// Shared machinery of the CUDA backend tests. With a GPU, each test runs its kernels on "cuda" and
// on the interpreter and compares; without one but with NVRTC, the backend runs in compile-only
// mode (every kernel is generated and compiled by NVRTC for sm_90a, then executed by the
// interpreter), so broken code generation fails the test; without NVRTC the tests skip.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "palladium/device.h"
#include "ops/attention.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace palladium::cudatest {

namespace pl = palladium;

enum class Mode { Gpu, CompileOnly, Skip };

inline Mode mode() {
  static const Mode m = [] {
    if (!cuda::nvrtc_unavailable_reason().empty()) return Mode::Skip;
    if (cuda::unavailable_reason().empty()) return Mode::Gpu;
    cuda::set_compile_only(true, 90);
    return Mode::CompileOnly;
  }();
  return m;
}

// Without a GPU, a "cuda" result is the interpreter's (compile-only mode), so comparing it with
// the interpreter proves nothing; what such a run checks is that the test's kernels were generated
// and compiled by NVRTC for sm_90a. This guard, declared by PL_REQUIRE_NVRTC, asserts that.
class CompiledKernelsCheck {
 public:
  CompiledKernelsCheck() : before_(cuda::kernels_compiled()) {}
  ~CompiledKernelsCheck() {
    if (mode() == Mode::CompileOnly) {
      EXPECT_GT(cuda::kernels_compiled(), before_) << "no kernel was generated and compiled for sm_90a";
    }
  }
  CompiledKernelsCheck(const CompiledKernelsCheck&) = delete;
  CompiledKernelsCheck& operator=(const CompiledKernelsCheck&) = delete;

 private:
  int before_;
};

// Whether "cuda" results come from the GPU (else comparisons of them with the interpreter are skipped).
inline bool results_are_real() { return mode() == Mode::Gpu; }

// For tests of the NVRTC compiler itself (no kernels through the backend, so no guard).
// PALLADIUM_REQUIRE_GPU=1 (tools/gpu_run.sh) turns every would-be skip into a failure, so a GPU
// run whose driver or NVRTC failed to load cannot pass by skipping.
inline bool gpu_required() {
  const char* env = std::getenv("PALLADIUM_REQUIRE_GPU");
  return env && std::string(env) == "1";
}
#define PL_REQUIRE_NVRTC_COMPILER()                                                                   \
  do {                                                                                                \
    if (::palladium::cudatest::mode() == ::palladium::cudatest::Mode::Skip) {                         \
      if (::palladium::cudatest::gpu_required())                                                      \
        FAIL() << "PALLADIUM_REQUIRE_GPU=1 but NVRTC is not available: "                              \
               << ::palladium::cuda::nvrtc_unavailable_reason();                                      \
      GTEST_SKIP() << "NVRTC is not available: " << ::palladium::cuda::nvrtc_unavailable_reason();    \
    }                                                                                                 \
  } while (0)
#define PL_REQUIRE_NVRTC()          \
  PL_REQUIRE_NVRTC_COMPILER();      \
  const ::palladium::cudatest::CompiledKernelsCheck pl_compiled_kernels_check
#define PL_REQUIRE_GPU()                                                                              \
  do {                                                                                                \
    if (::palladium::cudatest::mode() != ::palladium::cudatest::Mode::Gpu) {                          \
      if (::palladium::cudatest::gpu_required())                                                      \
        FAIL() << "PALLADIUM_REQUIRE_GPU=1 but no CUDA GPU: " << ::palladium::cuda::unavailable_reason(); \
      GTEST_SKIP() << "no CUDA GPU: " << ::palladium::cuda::unavailable_reason();                     \
    }                                                                                                 \
  } while (0)

inline double tolerance(DType t) {
  switch (t) {
    case DType::float64: return 1e-12;
    // float32: reductions and dots in another order than the interpreter's, few-ulp libdevice
    // functions; 16-bit results: the float32 value rounded once more, about half an ulp where
    // the two round differently (bfloat16 2^-9, float16 2^-12), norm-relative far less.
    case DType::float32: return 1e-5;
    case DType::float16: return 1e-3;
    case DType::bfloat16: return 5e-3;
    default: return 0.0;
  }
}

// out vs the interpreter's result: relative error within the dtype's tolerance (exact for
// integers and bools). `tol` < 0 picks the dtype's default.
inline ::testing::AssertionResult agree(const Array& out, const Array& ref, double tol = -1) {
  if (out.dtype() != ref.dtype() || out.shape() != ref.shape())
    return ::testing::AssertionFailure() << "got " << dtype_name(out.dtype()) << shape_str(out.shape()) << ", expected "
                                         << dtype_name(ref.dtype()) << shape_str(ref.shape());
  if (is_float(ref.dtype())) {
    if (tol < 0) tol = tolerance(ref.dtype());
    // Relative error over the finite elements; NaN and infinities must match exactly.
    double num = 0, den = 0;
    for (int64_t i = 0; i < out.size(); ++i) {
      const double g = out.get(i), r = ref.get(i);
      if (std::isnan(g) || std::isnan(r) || std::isinf(g) || std::isinf(r)) {
        if (!(std::isnan(g) && std::isnan(r)) && g != r)
          return ::testing::AssertionFailure() << "at flat " << i << ": got " << g << ", expected " << r;
        continue;
      }
      num += (g - r) * (g - r);
      den += r * r;
    }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (err <= tol) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "relative error " << err << " > " << tol << "\n got " << out.str()
                                         << "\n expected " << ref.str();
  }
  int bad = 0;
  std::string msg;
  for (int64_t i = 0; i < out.size(); ++i)
    if (out.get_int(i) != ref.get_int(i) && bad++ < 5)
      msg += " [flat " + std::to_string(i) + ": " + std::to_string(out.get_int(i)) + " vs " +
             std::to_string(ref.get_int(i)) + "]";
  if (bad) return ::testing::AssertionFailure() << bad << " of " << out.size() << " elements differ:" << msg;
  return ::testing::AssertionSuccess();
}

inline std::vector<Array> as_vector(Array a) { return {std::move(a)}; }
inline std::vector<Array> as_vector(std::vector<Array> v) { return v; }

// Runs make("cuda") and make("interpret") on the inputs and expects every output to agree (on a
// GPU; without one only the compilation is checked, by PL_REQUIRE_NVRTC's guard).
template <class Make>
std::vector<Array> expect_cuda_matches(Make&& make, const std::vector<Array>& inputs, double tol = -1) {
  std::vector<Array> got = as_vector(make(std::string("cuda")).call(inputs));
  if (!results_are_real()) return got;
  std::vector<Array> ref = as_vector(make(std::string("interpret")).call(inputs));
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i)
    EXPECT_TRUE(agree(to_host(got[i]), ref[i], tol)) << "output " << i;
  return got;
}

// pallas_call(kernel, outs, options) on cuda vs the interpreter.
template <class K>
std::vector<Array> check_kernel(K kernel, std::vector<ShapeDtype> outs, CallOptions options,
                                const std::vector<Array>& inputs, double tol = -1) {
  return expect_cuda_matches(
      [&](const std::string& be) {
        CallOptions o = options;
        o.backend = be;
        return pallas_call(kernel, outs, o);
      },
      inputs, tol);
}

inline Array normal(uint64_t seed, Shape shape, DType t = f32) { return random::normal(random::key(seed), std::move(shape), t); }
inline Array uniform(uint64_t seed, Shape shape, DType t, double lo, double hi) {
  return random::uniform(random::key(seed), std::move(shape), t, lo, hi);
}

// The seed attention through ops (on o.backend) against the float64 reference: the output, and
// the three gradients when `dout` is given. Tolerances are about twice the interpreter's errors at
// these sizes (bfloat16 2.6e-3, float16 3.4e-4, float32 7e-7: the 16-bit inputs and probabilities
// fed to the dots), which fast_math's few-ulp exp does not move.
inline void expect_attention_matches_reference(const Array& q, const Array& k, const Array& v, const Array& seg,
                                               const Array& dout, const pl::ops::MhaOptions& o) {
  const double tol = q.dtype() == DType::bfloat16 ? 5e-3 : q.dtype() == DType::float16 ? 1e-3 : 2e-6;
  auto ref = pl::ops::mha_reference(q, k, v, seg, o.sm_scale, o.causal);
  if (!dout.defined()) {
    EXPECT_LT(rel_error(to_host(pl::ops::mha(q, k, v, seg, o)), ref.out), tol) << "out";
    return;
  }
  auto vjp = pl::ops::mha_vjp(q, k, v, seg, o);
  auto [dq, dk, dv] = vjp.backward(dout);
  auto [rq, rk, rv] = pl::ops::mha_reference_backward(q, k, v, seg, dout, o.sm_scale, o.causal);
  EXPECT_LT(rel_error(to_host(vjp.out), ref.out), tol) << "out";
  EXPECT_LT(rel_error(to_host(dq), rq), tol) << "dq";
  EXPECT_LT(rel_error(to_host(dk), rk), tol) << "dk";
  EXPECT_LT(rel_error(to_host(dv), rv), tol) << "dv";
}

// The generated CUDA sources of the kernels compiled with `debug` while it lives: PALLADIUM_DEBUG_DIR
// names a folder of this process under the temporary directory, emptied now and removed at the end.
class GeneratedSources {
 public:
  explicit GeneratedSources(const std::string& tag)
      : dir_((std::filesystem::temp_directory_path() / ("pl-" + tag + "-" + std::to_string(::getpid()))).string()),
        env_("PALLADIUM_DEBUG_DIR", dir_) {
    clear();
  }
  ~GeneratedSources() { clear(); }
  GeneratedSources(const GeneratedSources&) = delete;
  GeneratedSources& operator=(const GeneratedSources&) = delete;
  void clear() const {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }
  // The source of pallas_call `name` (empty when none was written).
  std::string source(const std::string& name) const {
    std::ifstream file(dir_ + "/pl_" + name + ".cu");
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

 private:
  std::string dir_;
  test_support::ScopedEnv env_;
};

}  // namespace palladium::cudatest
