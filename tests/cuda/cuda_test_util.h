// Shared machinery of the CUDA backend tests. With a GPU, each test runs its kernels on "cuda" and
// on the interpreter and compares; without one but with NVRTC, the backend runs in compile-only
// mode (every kernel is generated and compiled by NVRTC for sm_90a, then executed by the
// interpreter), so broken code generation fails the test; without NVRTC the tests skip.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_runtime.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "palladium/device.h"
#include "palladium/palladium.h"

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

#define PL_REQUIRE_NVRTC()                                                                            \
  do {                                                                                                \
    if (::palladium::cudatest::mode() == ::palladium::cudatest::Mode::Skip)                           \
      GTEST_SKIP() << "NVRTC is not available: " << ::palladium::cuda::nvrtc_unavailable_reason();    \
  } while (0)
#define PL_REQUIRE_GPU()                                                                              \
  do {                                                                                                \
    if (::palladium::cudatest::mode() != ::palladium::cudatest::Mode::Gpu)                            \
      GTEST_SKIP() << "no CUDA GPU: " << ::palladium::cuda::unavailable_reason();                     \
  } while (0)

inline double tolerance(DType t) {
  switch (t) {
    case DType::float64: return 1e-12;
    case DType::float32: return 2e-5;
    case DType::float16: case DType::bfloat16: return 1e-2;
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

// Runs make("cuda") and make("interpret") on the inputs and expects every output to agree.
template <class Make>
std::vector<Array> expect_cuda_matches(Make&& make, const std::vector<Array>& inputs, double tol = -1) {
  std::vector<Array> got = as_vector(make(std::string("cuda")).call(inputs));
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

}  // namespace palladium::cudatest
