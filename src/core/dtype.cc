// DType properties, exact rounding to every element type, and the 16-bit float encodings.
#include "palladium/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "palladium/error.h"

namespace palladium {

namespace {

struct DTypeInfo {
  int itemsize;
  const char* name;
  const char* short_name;
};

constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    {1, "bool", "i1"},     {1, "int8", "i8"},       {2, "int16", "i16"},   {4, "int32", "i32"},
    {8, "int64", "i64"},   {1, "uint8", "u8"},      {4, "uint32", "u32"},  {2, "float16", "f16"},
    {2, "bfloat16", "bf16"}, {4, "float32", "f32"}, {8, "float64", "f64"},
};

const DTypeInfo& info(DType t) {
  const auto i = static_cast<int>(t);
  PL_ASSERT(i >= 0 && i < kNumDTypes, "unknown DType ", i);
  return kDTypeInfo[i];
}

// Rounds sign * significand * 2^exp2 (significand < 2^62) to nearest-even in a binary format with
// `exp_bits` exponent bits and `mant_bits` stored mantissa bits, returning its bit pattern.
// Handles subnormal results and overflow to infinity; callers handle NaN and infinity inputs.
uint16_t encode_small_float(bool negative, uint64_t significand, int exp2, int exp_bits, int mant_bits) {
  const uint16_t sign = negative ? static_cast<uint16_t>(1u << (exp_bits + mant_bits)) : 0;
  const uint32_t inf_bits = ((1u << exp_bits) - 1) << mant_bits;
  if (significand == 0) return sign;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int top_bit = 63 - std::countl_zero(significand);
  const int exponent = top_bit + exp2;  // value lies in [2^exponent, 2^(exponent+1))
  if (exponent > bias) return static_cast<uint16_t>(sign | inf_bits);
  const int min_normal_exponent = 1 - bias;
  const int target_exponent = exponent < min_normal_exponent ? min_normal_exponent : exponent;
  // Number of low bits of `significand` below the target format's last mantissa bit.
  const int shift = (target_exponent - mant_bits) - exp2;
  uint64_t q;
  if (shift <= 0) {
    q = significand << -shift;
  } else if (shift >= 64) {
    q = 0;  // below half of the smallest subnormal (significand < 2^62)
  } else {
    q = significand >> shift;
    const uint64_t rest = significand & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) ++q;
  }
  // q counts units of 2^(target_exponent - mant_bits); adding the biased exponent field works for
  // subnormals (field 0) and lets a rounding carry move into the next binade.
  const uint64_t bits = (static_cast<uint64_t>(target_exponent + bias - 1) << mant_bits) + q;
  if (bits >= inf_bits) return static_cast<uint16_t>(sign | inf_bits);
  return static_cast<uint16_t>(sign | bits);
}

// Splits a finite double into sign, integer significand and power of two.
void decompose(double x, bool& negative, uint64_t& significand, int& exp2) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  negative = (bits >> 63) != 0;
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0) {
    significand = fraction;
    exp2 = -1074;
  } else {
    significand = fraction | (uint64_t{1} << 52);
    exp2 = biased - 1075;
  }
}

uint16_t double_to_small_float(double x, int exp_bits, int mant_bits, uint16_t quiet_nan) {
  const bool negative = std::signbit(x);
  const uint16_t sign = negative ? static_cast<uint16_t>(1u << (exp_bits + mant_bits)) : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | quiet_nan);
  if (std::isinf(x)) return static_cast<uint16_t>(sign | (((1u << exp_bits) - 1) << mant_bits));
  bool neg;
  uint64_t significand;
  int exp2;
  decompose(x, neg, significand, exp2);
  return encode_small_float(neg, significand, exp2, exp_bits, mant_bits);
}

uint16_t double_to_half_bits(double x) { return double_to_small_float(x, 5, 10, 0x7e00); }
uint16_t double_to_bfloat16_bits(double x) { return double_to_small_float(x, 8, 7, 0x7fc0); }

// Truncates toward zero and wraps modulo 2^64 (NaN and infinities become 0), so every double has a
// defined integer value, as the casts of the interpreter need.
int64_t double_to_wrapped_int64(double x) {
  if (!std::isfinite(x)) return 0;
  double t = std::trunc(x);
  constexpr double k2to63 = 9223372036854775808.0;
  constexpr double k2to64 = 18446744073709551616.0;
  if (t >= k2to63 || t < -k2to63) {
    t = std::fmod(t, k2to64);  // exact
    if (t >= k2to63) t -= k2to64;       // exact (Sterbenz)
    else if (t < -k2to63) t += k2to64;  // exact (Sterbenz)
  }
  return static_cast<int64_t>(t);
}

template <class T> T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T> void store(void* p, T v) { std::memcpy(p, &v, sizeof(T)); }

}  // namespace

int itemsize(DType t) { return info(t).itemsize; }
const char* dtype_name(DType t) { return info(t).name; }
const char* dtype_short_name(DType t) { return info(t).short_name; }

bool is_float(DType t) {
  return t == DType::float16 || t == DType::bfloat16 || t == DType::float32 || t == DType::float64;
}
bool is_integer(DType t) { return !is_float(t) && t != DType::bool_; }
bool is_unsigned(DType t) { return t == DType::uint8 || t == DType::uint32; }

int64_t wrap_int(DType t, int64_t x) {
  switch (t) {
    case DType::bool_: return x != 0;
    case DType::int8: return static_cast<int8_t>(x);  // modular since C++20
    case DType::int16: return static_cast<int16_t>(x);
    case DType::int32: return static_cast<int32_t>(x);
    case DType::uint8: return static_cast<uint8_t>(x);
    case DType::uint32: return static_cast<uint32_t>(x);
    default: return x;  // int64 and the float types are not wrapped
  }
}

double round_to(DType t, double x) {
  switch (t) {
    case DType::bool_: return x != 0 ? 1.0 : 0.0;
    case DType::float16: return half_bits_to_float(double_to_half_bits(x));
    case DType::bfloat16: return bfloat16_bits_to_float(double_to_bfloat16_bits(x));
    case DType::float32: return static_cast<double>(static_cast<float>(x));
    case DType::float64: return x;
    default: return static_cast<double>(wrap_int(t, double_to_wrapped_int64(x)));
  }
}

double load_as_double(DType t, const void* p) {
  switch (t) {
    case DType::bool_: return load<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case DType::int8: return load<int8_t>(p);
    case DType::int16: return load<int16_t>(p);
    case DType::int32: return load<int32_t>(p);
    case DType::int64: return static_cast<double>(load<int64_t>(p));
    case DType::uint8: return load<uint8_t>(p);
    case DType::uint32: return load<uint32_t>(p);
    case DType::float16: return half_bits_to_float(load<uint16_t>(p));
    case DType::bfloat16: return bfloat16_bits_to_float(load<uint16_t>(p));
    case DType::float32: return load<float>(p);
    case DType::float64: return load<double>(p);
  }
  throw InternalError("load_as_double: unknown DType");
}

int64_t load_as_int64(DType t, const void* p) {
  switch (t) {
    case DType::bool_: return load<uint8_t>(p) != 0;
    case DType::int8: return load<int8_t>(p);
    case DType::int16: return load<int16_t>(p);
    case DType::int32: return load<int32_t>(p);
    case DType::int64: return load<int64_t>(p);
    case DType::uint8: return load<uint8_t>(p);
    case DType::uint32: return load<uint32_t>(p);
    default: return double_to_wrapped_int64(load_as_double(t, p));
  }
}

void store_from_double(DType t, void* p, double v) {
  switch (t) {
    case DType::float16: store<uint16_t>(p, double_to_half_bits(v)); return;
    case DType::bfloat16: store<uint16_t>(p, double_to_bfloat16_bits(v)); return;
    case DType::float32: store<float>(p, static_cast<float>(v)); return;
    case DType::float64: store<double>(p, v); return;
    case DType::bool_: store<uint8_t>(p, v != 0 ? 1 : 0); return;  // NaN is true, as in NumPy
    default: store_from_int64(t, p, double_to_wrapped_int64(v)); return;
  }
}

void store_from_int64(DType t, void* p, int64_t v) {
  switch (t) {
    case DType::bool_: store<uint8_t>(p, v != 0 ? 1 : 0); return;
    case DType::int8: store<int8_t>(p, static_cast<int8_t>(v)); return;
    case DType::int16: store<int16_t>(p, static_cast<int16_t>(v)); return;
    case DType::int32: store<int32_t>(p, static_cast<int32_t>(v)); return;
    case DType::int64: store<int64_t>(p, v); return;
    case DType::uint8: store<uint8_t>(p, static_cast<uint8_t>(v)); return;
    case DType::uint32: store<uint32_t>(p, static_cast<uint32_t>(v)); return;
    case DType::float32: store<float>(p, static_cast<float>(v)); return;  // one rounding
    default: store_from_double(t, p, static_cast<double>(v)); return;
  }
}

// ---- 16-bit floats ----

uint16_t float_to_half_bits(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    // NaN: keep the top of the payload (as NumPy does) and make sure it stays a NaN.
    uint16_t payload = static_cast<uint16_t>((bits & 0x007fffff) >> 13);
    if (payload == 0) payload = 0x200;
    return static_cast<uint16_t>(sign | 0x7c00 | payload);
  }
  return double_to_half_bits(static_cast<double>(f));  // float -> double is exact
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t fraction = h & 0x3ff;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (fraction << 13));
  if (exponent == 0) {
    // Zero or subnormal: fraction * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(fraction) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (fraction << 13));
}

uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    // NaN: keep the top of the payload; if that is empty, set the quiet bit so it stays a NaN.
    const auto truncated = static_cast<uint16_t>(bits >> 16);
    return (truncated & 0x7f) != 0 ? truncated : static_cast<uint16_t>(truncated | 0x0040);
  }
  // Round to nearest even on the dropped 16 bits; a carry rolls into the exponent (up to inf).
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bfloat16_bits_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

float16::float16(float f) : bits(float_to_half_bits(f)) {}
float16::operator float() const { return half_bits_to_float(bits); }
bfloat16::bfloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
bfloat16::operator float() const { return bfloat16_bits_to_float(bits); }

// ---- shapes ----

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) PL_CHECK(d >= 0, "numel: negative dimension in shape ", shape_str(s));
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw Error("shape " + shape_str(s) + " has more elements than a 64-bit count holds");
  return n;
}

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> strides(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) strides[d - 1] = strides[d] * s[d];
  return strides;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

}  // namespace palladium

namespace palladium {
const char* version() { return PALLADIUM_VERSION; }
}  // namespace palladium
