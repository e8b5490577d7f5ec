// Shared machinery of the kernel tests: a fixture parametrised over every backend that can run on
// this machine, random inputs keyed by the test's name, float64 references and the comparisons.
//
// Every kernel test runs on GetParam()'s backend. On a backend other than the interpreter it also
// runs the same call on the interpreter (the definition of the semantics) and checks that the two
// agree, as well as checking both against the plain C++ reference.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace palladium::ktest {

namespace pl = palladium;

// ---------------------------------------------------------------------------------------------
// Tolerances. The interpreter computes every elementwise op in float64 and rounds the result to
// the op's dtype, so one op is within half an ulp; compiled backends may keep intermediates in
// float32 (16-bit types) or use hardware transcendental approximations of a few ulps.
//  - float64: 1e-12 (a handful of roundings of 2^-53, with room for summation order in dots);
//  - float32: 1e-5 (eps 2^-24 ~ 6e-8: leaves room for reductions/dots over up to ~100 terms in
//    another order and for few-ulp transcendental functions);
//  - float16 / bfloat16: 1e-2 (bfloat16 keeps 8 significant bits: half an ulp is 2^-9 ~ 2e-3 per
//    element; float16 is 5x finer; a compiled backend may round an intermediate once more).
//  - integers and bools: compared exactly.
inline double tol_for(DType t) {
  switch (t) {
    case DType::float64: return 1e-12;
    case DType::float32: return 1e-5;
    case DType::float16:
    case DType::bfloat16: return 1e-2;
    default: return 0.0;
  }
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v{bool_, i8, i16, i32, i64, u8, u32, f16, bf16, f32, f64};
  return v;
}
inline const std::vector<DType>& int_dtypes() {
  static const std::vector<DType> v{i8, i16, i32, i64, u8, u32};
  return v;
}
inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v{f16, bf16, f32, f64};
  return v;
}

// ---------------------------------------------------------------------------------------------
// Random inputs keyed by the test's name (without the backend parameter, so that every backend
// sees the same numbers for the same test).
inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return "no-test";
  std::string suite = info->test_suite_name(), name = info->name();
  if (info->value_param() != nullptr) {
    // "Backends/Suite" + "Body/interpret": drop the instantiation prefix and the parameter.
    if (auto p = suite.find('/'); p != std::string::npos) suite = suite.substr(p + 1);
    if (auto p = name.rfind('/'); p != std::string::npos) name = name.substr(0, p);
  }
  return suite + "." + name;
}

class Rng {
 public:
  explicit Rng(std::string_view salt = "") : key_(random::key(fnv1a(current_test_name() + "#" + std::string(salt)))) {}

  random::Key next() { return random::fold_in(key_, counter_++); }

  Array normal(Shape shape, DType t = f32) { return random::normal(next(), std::move(shape), t); }
  Array uniform(Shape shape, DType t, double lo, double hi) { return random::uniform(next(), std::move(shape), t, lo, hi); }
  // Integers in [lo, hi) (clipped into t's range); bools as 0/1; floats uniform in [lo, hi).
  Array values(Shape shape, DType t, double lo, double hi) {
    if (is_bool(t)) return random::uniform(next(), std::move(shape), i8, 0, 2).astype(bool_);
    if (is_float(t)) return random::uniform(next(), std::move(shape), t, lo, hi);
    const auto [tlo, thi] = int_range(t);
    const double l = std::max(std::ceil(lo), tlo), h = std::min(std::ceil(hi), thi);
    return random::uniform(next(), std::move(shape), t, l, h);
  }
  // "Any" values of a dtype: normal floats, integers over (most of) the type's range, 0/1 bools.
  Array any(Shape shape, DType t) {
    if (is_float(t)) return normal(std::move(shape), t);
    const auto [tlo, thi] = int_range(t);
    return values(std::move(shape), t, tlo, thi);
  }
  // [lo, hi) of a type's values as doubles (int64: +-2^62, enough to overflow products).
  static std::pair<double, double> int_range(DType t) {
    switch (t) {
      case DType::bool_: return {0, 2};
      case DType::int8: return {-128, 128};
      case DType::int16: return {-32768, 32768};
      case DType::int32: return {-2147483648.0, 2147483648.0};
      case DType::int64: return {-4611686018427387904.0, 4611686018427387904.0};
      case DType::uint8: return {0, 256};
      case DType::uint32: return {0, 4294967296.0};
      default: return {-1e9, 1e9};
    }
  }

 private:
  random::Key key_;
  uint32_t counter_ = 0;
};

// ---------------------------------------------------------------------------------------------
// References: float64 arrays (for float results) and exact arrays of the result dtype (for
// integer and bool results), built element by element from the flat row-major index.
inline Array ref_f64(const Shape& shape, const std::function<double(int64_t)>& fn) {
  Array r(shape, f64);
  double* p = r.data_as<double>();
  for (int64_t i = 0; i < r.size(); ++i) p[i] = fn(i);
  return r;
}
inline Array ref_int(const Shape& shape, DType t, const std::function<int64_t(int64_t)>& fn) {
  Array r(shape, t);
  char* p = static_cast<char*>(r.data());
  for (int64_t i = 0; i < r.size(); ++i) store_from_int64(t, p + i * itemsize(t), wrap_int(t, fn(i)));
  return r;
}
// Row-major multi-index of a flat index.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// ---------------------------------------------------------------------------------------------
// Comparisons.
inline ::testing::AssertionResult exactly_equal(const Array& out, const Array& ref) {
  if (out.dtype() != ref.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(out.dtype()) << ", expected " << dtype_name(ref.dtype());
  if (out.shape() != ref.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(out.shape()) << ", expected " << shape_str(ref.shape());
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionSuccess();
  std::string msg;
  for (int64_t i = 0; i < out.size(); ++i) {
    const bool same = is_float(out.dtype()) ? (out.get(i) == ref.get(i) || (std::isnan(out.get(i)) && std::isnan(ref.get(i))))
                                            : out.get_int(i) == ref.get_int(i);
    if (!same && bad++ < 5) {
      msg += " [flat " + std::to_string(i) + ": got " +
             (is_float(out.dtype()) ? std::to_string(out.get(i)) : std::to_string(out.get_int(i))) + ", expected " +
             (is_float(out.dtype()) ? std::to_string(ref.get(i)) : std::to_string(ref.get_int(i))) + "]";
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << out.size() << " elements differ:" << msg;
  return r;
}

// out (of dtype `expect_dtype`) against a float64 reference: relative error (||out - ref|| /
// ||ref||, as pl::rel_error, with NaN required exactly where the reference has NaN) within the
// dtype's tolerance, or exactly for integer and bool dtypes (then `ref` is converted to the dtype).
inline ::testing::AssertionResult matches(const Array& out, const Array& ref, DType expect_dtype, double tol = -1) {
  if (out.dtype() != expect_dtype)
    return ::testing::AssertionFailure() << "dtype " << dtype_name(out.dtype()) << ", expected " << dtype_name(expect_dtype);
  if (out.shape() != ref.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(out.shape()) << ", expected " << shape_str(ref.shape());
  if (!is_float(expect_dtype)) return exactly_equal(out, ref.dtype() == expect_dtype ? ref : ref.astype(expect_dtype));
  if (tol < 0) tol = tol_for(expect_dtype);
  // NaN where the reference has NaN (and nowhere else); the relative error over the other elements.
  double diff2 = 0, ref2 = 0;
  bool any_nan = false;
  for (int64_t i = 0; i < out.size(); ++i) {
    const double o = out.get(i), r = ref.get(i);
    if (std::isnan(r) || std::isnan(o)) {
      any_nan = true;
      if (std::isnan(r) != std::isnan(o))
        return ::testing::AssertionFailure() << "flat " << i << ": got " << o << ", expected " << r << "\n got "
                                             << out.str() << "\n expected " << ref.str();
      continue;
    }
    const double d = o == r ? 0.0 : o - r;  // equal infinities count as equal
    diff2 += d * d;
    ref2 += r * r;
  }
  const double err = !any_nan ? rel_error(out, ref)
                               : ref2 == 0 ? (diff2 == 0 ? 0.0 : INFINITY) : std::sqrt(diff2) / std::sqrt(ref2);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err << " > " << tol << " (" << dtype_name(expect_dtype)
                                       << ")\n got " << out.str() << "\n expected " << ref.str();
}

// Two runs of the same call (a backend against the interpreter).
inline ::testing::AssertionResult agree(const Array& out, const Array& interp) {
  if (!is_float(out.dtype())) return exactly_equal(out, interp);
  return matches(out, interp.astype(f64), interp.dtype());
}

inline std::vector<Array> as_vector(Array a) { return {std::move(a)}; }
inline std::vector<Array> as_vector(std::vector<Array> v) { return v; }

// ---------------------------------------------------------------------------------------------
// The fixtures: the backend's name is GetParam() (KernelTest) or its first element (KernelOpTest,
// parametrised over backends and op names).
inline const std::string& backend_of(const std::string& p) { return p; }
inline const std::string& backend_of(const std::tuple<std::string, std::string>& p) { return std::get<0>(p); }

template <class P> class BackendTest : public ::testing::TestWithParam<P> {
 protected:
  const std::string& backend_name() const { return backend_of(this->GetParam()); }
  bool is_interpreter() const { return backend_name() == "interpret"; }

  // Runs make(backend) on the inputs; on a compiled backend also on the interpreter, and checks
  // that the outputs agree. make: std::string -> pl::Callable<...>.
  template <class Make> std::vector<Array> run(Make&& make, const std::vector<Array>& inputs) {
    std::vector<Array> outs = as_vector(make(backend_name()).call(inputs));
    if (!is_interpreter()) {
      std::vector<Array> ref = as_vector(make(std::string("interpret")).call(inputs));
      EXPECT_EQ(outs.size(), ref.size());
      for (size_t i = 0; i < outs.size() && i < ref.size(); ++i)
        EXPECT_TRUE(agree(outs[i], ref[i])) << "output " << i << " of " << backend_name() << " vs the interpreter";
    }
    return outs;
  }

  // pallas_call(kernel, outs, options) on this backend (and the interpreter).
  template <class K>
  std::vector<Array> run_kernel(K kernel, std::vector<ShapeDtype> outs, CallOptions options,
                                const std::vector<Array>& inputs) {
    return run(
        [&](const std::string& be) {
          CallOptions o = options;
          o.backend = be;
          return pallas_call(kernel, outs, o);
        },
        inputs);
  }
  template <class K> Array run1(K kernel, ShapeDtype out, CallOptions options, const std::vector<Array>& inputs) {
    return run_kernel(std::move(kernel), {std::move(out)}, std::move(options), inputs).at(0);
  }

  // Many small cases, each with `per_case` inputs and one output, packed into few kernels (one
  // compilation each on compiled backends) of at most `max_cases` cases (0: as many as keep a
  // kernel within 30 Refs): in a kernel of n cases,
  // case k reads Refs [k * per_case, (k + 1) * per_case) and writes Ref n * per_case + k.
  // body(case index, its input Refs, its output Ref). Returns the outputs in case order.
  template <class Body>
  std::vector<Array> run_cases(const std::string& name, size_t per_case, const std::vector<Array>& inputs,
                               const std::vector<ShapeDtype>& outs, Body body, size_t max_cases = 0) {
    if (max_cases == 0) max_cases = std::max<size_t>(1, 30 / (per_case + 1));
    std::vector<Array> result;
    for (size_t first = 0; first < outs.size(); first += max_cases) {
      const size_t n = std::min(max_cases, outs.size() - first);
      std::vector<Array> in(inputs.begin() + static_cast<std::ptrdiff_t>(first * per_case),
                            inputs.begin() + static_cast<std::ptrdiff_t>((first + n) * per_case));
      std::vector<ShapeDtype> o(outs.begin() + static_cast<std::ptrdiff_t>(first),
                                outs.begin() + static_cast<std::ptrdiff_t>(first + n));
      std::vector<Array> got = run_kernel(
          [body, n, per_case, first](Refs r) {
            for (size_t k = 0; k < n; ++k) body(first + k, r.subspan(k * per_case, per_case), r[n * per_case + k]);
          },
          o, {.name = name + "_" + std::to_string(first / max_cases)}, in);
      result.insert(result.end(), got.begin(), got.end());
    }
    return result;
  }
};

using KernelTest = BackendTest<std::string>;
using KernelOpTest = BackendTest<std::tuple<std::string, std::string>>;

inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }
inline std::string backend_op_param_name(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param);
}

#define PL_INSTANTIATE_BACKENDS(Suite)                                                                         \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(::palladium::backend::available_names()), \
                           ::palladium::ktest::backend_param_name)
// Over backends x op names (one ctest entry per backend and op).
#define PL_INSTANTIATE_BACKENDS_X_OPS(Suite, op_names)                                                    \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite,                                                               \
                           ::testing::Combine(::testing::ValuesIn(::palladium::backend::available_names()), \
                                              ::testing::ValuesIn(op_names)),                             \
                           ::palladium::ktest::backend_op_param_name)

using test_support::error_message;

}  // namespace palladium::ktest
