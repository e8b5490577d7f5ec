// Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) with 20
// rounds, laid out as JAX's "partitionable" threefry: element i of any draw uses the 64-bit counter
// i, so a draw never depends on its total size. Floats are built from raw bits with exact
// arithmetic only (plus sqrt, which IEEE rounds exactly), so results are the same on every machine.
#include "palladium/random.h"

#include "core/host_threads.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

// Fused multiply-add would change the last bits of results on machines that have it.
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace palladium::random {

namespace {

struct Block {
  uint32_t x0, x1;
};

Block threefry_block(Key key, Block counter) {
  constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key.k0, key.k1, key.k0 ^ key.k1 ^ 0x1BD11BDAu};
  uint32_t x0 = counter.x0 + ks[0];
  uint32_t x1 = counter.x1 + ks[1];
  // Five groups of four rounds, each followed by a key injection.
  for (uint32_t group = 0; group < 5; ++group) {
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = std::rotl(x1, kRotations[(group % 2) * 4 + static_cast<uint32_t>(r)]);
      x1 ^= x0;
    }
    x0 += ks[(group + 1) % 3];
    x1 += ks[(group + 2) % 3] + group + 1;
  }
  return {x0, x1};
}

Block block_at(Key key, int64_t i) {
  const auto counter = static_cast<uint64_t>(i);
  return threefry_block(key, {static_cast<uint32_t>(counter >> 32), static_cast<uint32_t>(counter)});
}

uint32_t bits32_at(Key key, int64_t i) {
  const Block b = block_at(key, i);
  return b.x0 ^ b.x1;
}

uint64_t bits64_at(Key key, int64_t i) {
  const Block b = block_at(key, i);
  return (static_cast<uint64_t>(b.x0) << 32) | b.x1;
}

// A float in [0, 1) from the top mantissa bits of a word: set the exponent of 1.0 and subtract 1.
double unit_interval(DType t, uint64_t word64, uint32_t word32) {
  switch (t) {
    case DType::float64:
      return std::bit_cast<double>((word64 >> 12) | 0x3FF0000000000000ull) - 1.0;
    case DType::float32:
      return static_cast<double>(std::bit_cast<float>((word32 >> 9) | 0x3F800000u)) - 1.0;
    case DType::float16:
      return static_cast<double>(half_bits_to_float(static_cast<uint16_t>(((word32 & 0xffff) >> 6) | 0x3C00))) - 1.0;
    case DType::bfloat16:
      return static_cast<double>(bfloat16_bits_to_float(static_cast<uint16_t>(((word32 & 0xffff) >> 9) | 0x3F80))) - 1.0;
    default:
      PL_ASSERT(false, "unit_interval: not a float dtype");
  }
  return 0.0;
}

// The largest value of float type t below x (x finite).
double next_below(DType t, double x) {
  // Every float type's values are exact doubles; step down by the type's own spacing.
  if (t == DType::float64) return std::nextafter(x, -INFINITY);
  if (t == DType::float32) return static_cast<double>(std::nextafter(static_cast<float>(x), -INFINITY));
  const bool half = t == DType::float16;
  uint16_t bits = half ? float_to_half_bits(static_cast<float>(x)) : float_to_bfloat16_bits(static_cast<float>(x));
  if ((bits & 0x7fff) == 0) bits = 0x8001;            // below +-0: the smallest negative subnormal
  else if (bits & 0x8000) ++bits;                     // negative: larger magnitude
  else --bits;                                        // positive: smaller magnitude
  return static_cast<double>(half ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits));
}

// log(x) for finite x > 0 from basic arithmetic only (libm's log may differ in the last bit between
// machines): x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh((m-1)/(m+1)) by its series.
double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 0.0;
  for (int k = 27; k >= 3; k -= 2) series = (series + 1.0 / k) * s2;  // s2/3 + s2^2/5 + ...
  const double log_m = 2.0 * s + 2.0 * s * series;
  constexpr double kLn2High = 0x1.62e42fee00000p-1;  // ln 2 split so that e * kLn2High is exact
  constexpr double kLn2Low = 0x1.a39ef35793c76p-33;
  return e * kLn2High + (e * kLn2Low + log_m);
}

// cos(2 pi u) for u in [0, 1), by quadrant and a Taylor series on at most an eighth of a turn.
double portable_cos_two_pi(double u) {
  constexpr double kHalfPi = 1.57079632679489661923;
  const double q = u * 4.0;  // exact
  const int quadrant = static_cast<int>(q);
  double f = q - quadrant;   // exact, in [0, 1)
  // cos(quadrant * pi/2 + f * pi/2) in terms of cos or sin of a small angle.
  const bool use_sin_first = f > 0.5;
  if (use_sin_first) f = 1.0 - f;  // exact
  const double a = f * kHalfPi, a2 = a * a;
  double cos_a = 1.0, sin_a = 1.0;
  double cos_term = 1.0, sin_term = 1.0;
  for (int k = 1; k <= 12; ++k) {
    cos_term *= -a2 / ((2 * k - 1) * (2 * k));
    sin_term *= -a2 / ((2 * k) * (2 * k + 1));
    cos_a += cos_term;
    sin_a += sin_term;
  }
  sin_a *= a;
  // With f' = 1 - f: cos(f pi/2) = sin(f' pi/2), sin(f pi/2) = cos(f' pi/2).
  const double c = use_sin_first ? sin_a : cos_a;  // cos of the angle within the quadrant
  const double s = use_sin_first ? cos_a : sin_a;  // sin of the angle within the quadrant
  switch (quadrant) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}

// Element i of a draw depends on i alone, so large draws are spread over the CPU thread pool (a
// normal's Box-Muller with portable log and cos costs tens of nanoseconds an element).
constexpr int64_t kElementsPerThread = int64_t{1} << 15;

void check_shape(const char* fn, const Shape& shape) {
  for (int64_t d : shape) PL_CHECK(d >= 0, "random.", fn, ": negative dimension in shape ", shape_str(shape));
}

}  // namespace

std::array<uint32_t, 2> threefry2x32(Key key, uint32_t counter0, uint32_t counter1) {
  const Block b = threefry_block(key, {counter0, counter1});
  return {b.x0, b.x1};
}

Key key(uint64_t seed) { return {static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed)}; }

std::vector<Key> split(Key key, int n) {
  PL_CHECK(n >= 0, "random.split: number of keys must be non-negative, got ", n);
  std::vector<Key> keys;
  keys.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Block b = block_at(key, i);
    keys.push_back({b.x0, b.x1});
  }
  return keys;
}

Key fold_in(Key key, uint32_t data) {
  const Block b = threefry_block(key, {0, data});
  return {b.x0, b.x1};
}

std::vector<uint32_t> bits(Key key, int64_t n) {
  PL_CHECK(n >= 0, "random.bits: count must be non-negative, got ", n);
  std::vector<uint32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = bits32_at(key, i);
  return out;
}

Array uniform(Key key, Shape shape, DType dtype, double lo, double hi) {
  check_shape("uniform", shape);
  PL_CHECK(dtype != DType::bool_, "random.uniform: dtype bool is not supported; draw integers in [0, 2)");
  PL_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "random.uniform: need finite lo < hi, got [",
           lo, ", ", hi, ")");
  Array out(std::move(shape), dtype);
  const int64_t n = out.size();
  char* dst = static_cast<char*>(out.data());
  const int size = itemsize(dtype);
  if (is_integer(dtype)) {
    PL_CHECK(lo == std::floor(lo) && hi == std::floor(hi), "random.uniform: integer dtype ",
             dtype_name(dtype), " needs integral bounds, got [", lo, ", ", hi, ")");
    const auto low = static_cast<int64_t>(lo), high = static_cast<int64_t>(hi);
    PL_CHECK(wrap_int(dtype, low) == low && wrap_int(dtype, high - 1) == high - 1, "random.uniform: [",
             low, ", ", high, ") does not fit in ", dtype_name(dtype));
    const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
    parallel_chunks(n, kElementsPerThread, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const uint64_t offset = bits64_at(key, i) % span;  // bias below 2^-32 for spans up to 2^32
        store_from_int64(dtype, dst + i * size, static_cast<int64_t>(static_cast<uint64_t>(low) + offset));
      }
    });
    return out;
  }
  // As JAX: u * (hi - lo) + lo in the target type (every step rounded to it), kept within [lo, hi).
  const double low = round_to(dtype, lo), high = round_to(dtype, hi);
  const double width = round_to(dtype, high - low);
  const double top = next_below(dtype, high);
  parallel_chunks(n, kElementsPerThread, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double u = dtype == DType::float64 ? unit_interval(dtype, bits64_at(key, i), 0)
                                               : unit_interval(dtype, 0, bits32_at(key, i));
      double v = round_to(dtype, round_to(dtype, u * width) + low);
      v = std::min(std::max(v, low), top);
      store_from_double(dtype, dst + i * size, v);
    }
  });
  return out;
}

Array normal(Key key, Shape shape, DType dtype) {
  check_shape("normal", shape);
  PL_CHECK(is_float(dtype), "random.normal: needs a float dtype, got ", dtype_name(dtype));
  Array out(std::move(shape), dtype);
  const int64_t n = out.size();
  char* dst = static_cast<char*>(out.data());
  const int size = itemsize(dtype);
  // Box-Muller with 53-bit uniforms from two independent streams.
  const std::vector<Key> streams = split(key, 2);
  parallel_chunks(n, kElementsPerThread, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double u1 = 1.0 - unit_interval(DType::float64, bits64_at(streams[0], i), 0);  // (0, 1]
      const double u2 = unit_interval(DType::float64, bits64_at(streams[1], i), 0);        // [0, 1)
      const double radius = std::sqrt(-2.0 * portable_log(u1));
      store_from_double(dtype, dst + i * size, radius * portable_cos_two_pi(u2));
    }
  });
  return out;
}

}  // namespace palladium::random
