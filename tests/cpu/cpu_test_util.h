// Shared helpers of the cpu backend tests: fresh random inputs (the seed is printed, and
// PALLADIUM_TEST_SEED replays it), running one call on "cpu" and on the interpreter, and the
// comparisons (exact, relative error against a float64 reference, ulps).
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "palladium/palladium.h"
#include "tests/support/test_support.h"

namespace palladium::cpu_test {

namespace pl = palladium;

inline uint64_t seed() {
  static const uint64_t s = [] {
    if (const char* v = std::getenv("PALLADIUM_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(v, nullptr, 10));
    return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return s;
}

// Random arrays from a per-test key derived from the run's seed; every call gives new numbers.
class Random {
 public:
  Random() : key_(pl::random::key(seed())) {
    std::cout << "[ seed     ] PALLADIUM_TEST_SEED=" << seed() << "\n";
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    for (char c : std::string(t ? t->name() : "")) key_ = pl::random::fold_in(key_, static_cast<uint32_t>(c));
  }
  pl::Array normal(pl::Shape shape, pl::DType t = pl::f32) {
    pl::Array a = pl::random::normal(next(), std::move(shape), pl::f32);
    return t == pl::f32 ? a : a.astype(t);
  }
  pl::Array uniform(pl::Shape shape, double lo, double hi, pl::DType t = pl::f32) {
    if (!is_float(t)) return pl::random::uniform(next(), std::move(shape), t, lo, hi);
    pl::Array a = pl::random::uniform(next(), std::move(shape), pl::f64, lo, hi);
    return a.astype(t);
  }

 private:
  pl::random::Key next() { return pl::random::fold_in(key_, counter_++); }
  pl::random::Key key_;
  uint32_t counter_ = 0;
};

// Runs the same call on the cpu backend and on the interpreter: make(backend) -> Callable.
template <class Make> std::pair<std::vector<pl::Array>, std::vector<pl::Array>> run_both(Make make, const std::vector<pl::Array>& inputs) {
  auto as_vector = [](auto r) {
    if constexpr (std::is_same_v<decltype(r), pl::Array>) return std::vector<pl::Array>{r};
    else return r;
  };
  std::vector<pl::Array> cpu = as_vector(make(std::string("cpu")).call(inputs));
  std::vector<pl::Array> interp = as_vector(make(std::string("interpret")).call(inputs));
  return {cpu, interp};
}

template <class K>
std::pair<std::vector<pl::Array>, std::vector<pl::Array>> run_both(K kernel, std::vector<pl::ShapeDtype> outs,
                                                                  pl::CallOptions options,
                                                                  const std::vector<pl::Array>& inputs) {
  return run_both(
      [&](const std::string& backend) {
        pl::CallOptions o = options;
        o.backend = backend;
        return pl::pallas_call(kernel, outs, o);
      },
      inputs);
}

inline bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Same dtype, shape and values (NaN equals NaN; -0 equals 0).
inline ::testing::AssertionResult same(const pl::Array& got, const pl::Array& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << "got " << dtype_name(got.dtype()) << shape_str(got.shape()) << ", want "
                                         << dtype_name(want.dtype()) << shape_str(want.shape());
  int bad = 0;
  std::string first;
  for (int64_t i = 0; i < got.size(); ++i) {
    const bool ok = is_float(got.dtype()) ? same_value(got.get(i), want.get(i)) : got.get_int(i) == want.get_int(i);
    if (!ok && bad++ == 0)
      first = "flat " + std::to_string(i) + ": got " +
              (is_float(got.dtype()) ? std::to_string(got.get(i)) : std::to_string(got.get_int(i))) + ", want " +
              (is_float(got.dtype()) ? std::to_string(want.get(i)) : std::to_string(want.get_int(i)));
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ, first " << first;
  return ::testing::AssertionSuccess();
}

// ||got - want|| / ||want|| over the elements where want is finite; NaN and infinities must match.
inline ::testing::AssertionResult close(const pl::Array& got, const pl::Array& want, double tol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << ", want " << shape_str(want.shape());
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (!std::isfinite(w) || !std::isfinite(g)) {
      if (!same_value(g, w))
        return ::testing::AssertionFailure() << "flat " << i << ": got " << g << ", want " << w;
      continue;
    }
    diff2 += (g - w) * (g - w);
    ref2 += w * w;
  }
  const double err = ref2 == 0 ? std::sqrt(diff2) : std::sqrt(diff2 / ref2);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << err << " > " << tol;
}

// float32 values within `ulps` units in the last place of the reference (NaN matches NaN).
inline ::testing::AssertionResult within_ulps(const pl::Array& got, const pl::Array& want, int64_t ulps) {
  auto ordered = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  const pl::Array g = got.astype(pl::f32), w = want.astype(pl::f32);
  int64_t worst = 0, at = 0;
  for (int64_t i = 0; i < g.size(); ++i) {
    const float a = g.data_as<float>()[i], b = w.data_as<float>()[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) return ::testing::AssertionFailure() << "flat " << i << ": got " << a << ", want " << b;
      continue;
    }
    const int64_t d = std::llabs(ordered(a) - ordered(b));
    if (d > worst) worst = d, at = i;
  }
  if (worst <= ulps) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << worst << " ulps at flat " << at << ": got " << g.data_as<float>()[at] << ", want "
                                       << w.data_as<float>()[at];
}

// A 2-D BlockSpec mapping grid (i, j) to block (i, j).
inline pl::BlockSpec block2(int64_t rows, int64_t cols) {
  return pl::BlockSpec({rows, cols}, [](pl::Index i, pl::Index j) { return pl::idx(i, j); });
}

}  // namespace palladium::cpu_test
